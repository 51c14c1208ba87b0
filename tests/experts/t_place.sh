#!/usr/bin/env bash
# t_place.sh — the expert tier is decided with the context the command really uses
# (runtime/place.c), not at model load from QWISP_CTX: on models/default.gguf (6 layers,
# 2 KV heads of 64, 0.01 GB of experts) with QWISP_DEVICE_RAM=0.1, a 32768-position KV cache
# leaves no room for the experts and a 64-position one does.  QWISP_CTX says the opposite
# of --ctx each time, so a decision taken from QWISP_CTX fails both checks.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
decision() {   # QWISP_CTX --ctx -> the decision line of `run --json`
    QWISP_CTX=$1 QWISP_DEVICE_RAM=0.1 "$BIN" run -p hi -n 1 --ctx "$2" --json 2>/dev/null |
        sed -n 's/.*"decision":"\([^"]*\)".*/\1/p'
}
d=$(decision 64 32768)
case $d in tier=streaming*) echo "PASS: place: --ctx 32768 (QWISP_CTX=64) streams: $d" ;;
    *) echo "FAIL: place: --ctx 32768 (QWISP_CTX=64) should stream, got '$d'" ;; esac
d=$(decision 32768 64)
case $d in tier=resident*) echo "PASS: place: --ctx 64 (QWISP_CTX=32768) stays resident: $d" ;;
    *) echo "FAIL: place: --ctx 64 (QWISP_CTX=32768) should be resident, got '$d'" ;; esac
