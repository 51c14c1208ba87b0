#!/bin/bash
# t_fuzz_gguf.sh — a short libFuzzer run of the GGUF reader (fuzz/fuzz_gguf.c).
# Needs build-fuzz/bin/fuzz_gguf (built by `make fuzz`, which `make test` runs
# first); a missing binary is a FAIL, not a SKIP, so a broken fuzz build shows.
# The corpus starts from fuzz/seeds/gguf in a scratch copy so the seeds in the
# repo are never modified.  FUZZ_GGUF_SECONDS overrides the 30 s budget.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=build-fuzz/bin/fuzz_gguf
SECS=${FUZZ_GGUF_SECONDS:-30}
TMP=${QWISP_TEST_TMP:-/tmp}
if [ ! -x "$BIN" ]; then
    echo "FAIL: fuzz_gguf ($BIN missing: run make fuzz)"
    exit 0
fi
# UBSan only prints by default and libFuzzer would carry on: make it a crash.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
work=$(mktemp -d "$TMP/fuzz_gguf.XXXXXX") || { echo "FAIL: fuzz_gguf (no scratch dir)"; exit 0; }
mkdir -p "$work/corpus"
cp fuzz/seeds/gguf/* "$work/corpus/" 2>/dev/null
# The seeds alone first (no mutation), so a crash on them is reported apart.
if "$BIN" -runs=0 "$work/corpus" >"$work/seeds.log" 2>&1; then
    echo "PASS: fuzz_gguf seeds run"
else
    echo "FAIL: fuzz_gguf seeds run"; tail -20 "$work/seeds.log"
fi
if "$BIN" -max_total_time="$SECS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/" "$work/corpus" >"$work/fuzz.log" 2>&1; then
    runs=$(grep -o 'Done [0-9]* runs' "$work/fuzz.log" | tail -1)
    echo "PASS: fuzz_gguf ${SECS}s (${runs:-done})"
else
    echo "FAIL: fuzz_gguf ${SECS}s"
    grep -E 'ERROR|SUMMARY|Test unit written' "$work/fuzz.log" | head -10
    tail -30 "$work/fuzz.log"
    for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -e "$a" ] && echo "INFO: artifact $a" && cp "$a" "$TMP/" 2>/dev/null
    done
fi
rm -rf "$work"
