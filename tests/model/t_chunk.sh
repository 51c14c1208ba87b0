#!/bin/bash
# t_chunk.sh — QWISP_CHUNK (tokens per prefill chunk): the logits of every
# position are the same bits whatever the chunk (shorter than the prompt,
# longer than it, odd), on both architectures; a value out of range is
# refused with the knob's name.  Env: QWISP_BIN, QWISP_TEST_TMP.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-chunk.XXXXXX)}/chunk
mkdir -p "$TMP"
QKQ="--arch qwen35moe --n-embd 256 --n-head 4 --n-head-kv 2 --head-dim 64 --n-rot 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 256 --ssm-state 64 --ssm-groups 2 --ssm-vheads 4 --n-layer 2 --attn-interval 2"
for arch in qwen3moe qwen35moe; do
    m=$TMP/$arch.gguf flags=""
    [ $arch = qwen35moe ] && flags=$QKQ
    # shellcheck disable=SC2086
    "$BIN" gen-model --preset tiny --tokenizer bytes --type q8_0 $flags --seed 3 -o "$m" >/dev/null || { echo "FAIL: chunk: gen-model $arch"; continue; }
    ok=1
    QWISP_BACKEND=cpu "$BIN" logits -m "$m" --prompt-tokens 700 --dump "$TMP/ref.bin" >/dev/null 2>&1 || ok=0
    for c in 1024 333 97; do
        QWISP_BACKEND=cpu QWISP_CHUNK=$c "$BIN" logits -m "$m" --prompt-tokens 700 --dump "$TMP/c$c.bin" >/dev/null 2>&1 &&
            cmp -s "$TMP/ref.bin" "$TMP/c$c.bin" || { ok=0; echo "INFO: chunk $c differs from 512 on $arch"; }
    done
    if [ $ok = 1 ] && [ -s "$TMP/ref.bin" ]; then echo "PASS: chunk: $arch, 700 positions' logits equal for QWISP_CHUNK=512/1024/333/97"
    else echo "FAIL: chunk: $arch logits depend on QWISP_CHUNK"; fi
done
# the knob takes effect: the breakdown line comes after every chunk (positions 97, 194, …)
pos=$(QWISP_PREFILL_MEMDBG=1 QWISP_PREFILL_MEMDBG_EVERY=1 QWISP_CHUNK=97 "$BIN" run -m "$TMP/qwen3moe.gguf" --prompt-tokens 300 -n 1 2>&1 |
    grep -o "pos=[0-9]*/300" | tr '\n' ' ')
if [ "$pos" = "pos=97/300 pos=194/300 pos=291/300 pos=300/300 " ]; then echo "PASS: chunk: QWISP_CHUNK=97 prefills 300 tokens in chunks of 97"
else echo "FAIL: chunk: QWISP_CHUNK=97 chunk ends: '$pos'"; fi
e=$(QWISP_CHUNK=0 "$BIN" run -m "$TMP/qwen3moe.gguf" -p hi -n 1 2>&1 >/dev/null)
if [ -n "${e##*QWISP_CHUNK*}" ] || [ -z "$e" ]; then echo "FAIL: chunk: QWISP_CHUNK=0 not refused by name: $e"
else echo "PASS: chunk: QWISP_CHUNK=0 refused: $(echo "$e" | head -1)"; fi
