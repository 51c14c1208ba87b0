#!/bin/bash
# t_cli_errors.sh — bad input to the CLI gets one clear line and a non-zero
# exit, never a crash: missing file, wrong architecture, bad flags, bad knobs.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/cli_errors
mkdir -p "$T"

# expect NAME WANT_RC PATTERN -- command...
expect() {
    local name=$1 want_rc=$2 pat=$3; shift 4
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" -eq "$want_rc" ] && echo "$out" | grep -qE -- "$pat"; then
        echo "PASS: $name"
    else
        echo "FAIL: $name (rc=$rc, want $want_rc; output: $(echo "$out" | head -3))"
    fi
}

"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1 || echo "FAIL: gen-model tiny"
printf 'GGUF\003\000\000\000' > "$T/trunc.gguf"
head -c 100 /dev/urandom > "$T/noise.gguf"

expect "run: missing model file names the path" 1 "$T/nope.gguf" -- "$Q" run -m "$T/nope.gguf" -p hi
expect "run: truncated gguf is one clear error" 1 "trunc.gguf.*offset" -- "$Q" run -m "$T/trunc.gguf" -p hi
expect "run: random bytes rejected (magic)" 1 "noise.gguf.*magic" -- "$Q" run -m "$T/noise.gguf" -p hi
expect "run: unknown flag" 2 "unknown option '--bogus'" -- "$Q" run -m "$T/tiny.gguf" --bogus
expect "run: bad -n value" 2 "-n 'abc': not an integer" -- "$Q" run -m "$T/tiny.gguf" -p hi -n abc
expect "run: temperature out of range" 2 "--temp '-1': out of range" -- "$Q" run -m "$T/tiny.gguf" -p hi --temp -1
expect "run: no prompt" 2 "exactly one of -p" -- "$Q" run -m "$T/tiny.gguf"
expect "run: flag without value" 2 "-p needs a value" -- "$Q" run -m "$T/tiny.gguf" -p
expect "bad knob value" 2 "QWISP_THREADS='many': not a number" -- env QWISP_THREADS=many "$Q" run -m "$T/tiny.gguf" -p hi
expect "bad knob range" 2 "QWISP_CTX='1': out of range" -- env QWISP_CTX=1 "$Q" config
expect "bad enum knob" 2 "QWISP_SIMD='sse9': expected one of" -- env QWISP_SIMD=sse9 "$Q" config
expect "unknown command" 2 "unknown command 'frobnicate'" -- "$Q" frobnicate
expect "config shows env source" 0 "QWISP_THREADS +3 +env" -- env QWISP_THREADS=3 "$Q" config
expect "logits: bad token list" 2 "bad token id list" -- "$Q" logits -m "$T/tiny.gguf" --tokens 1,x,3
expect "logits: token outside vocab" 1 "outside the vocabulary" -- "$Q" logits -m "$T/tiny.gguf" --tokens 1,99999999
expect "gen-model: unknown --arch" 2 "--arch foo: not one of qwen3moe, qwen35moe" -- "$Q" gen-model --arch foo -o "$T/x.gguf"
expect "gen-model: value heads not a multiple of key heads" 2 "--ssm-vheads 3: must be a multiple of --ssm-groups 2" -- \
    "$Q" gen-model --arch qwen35moe --ssm-groups 2 --ssm-vheads 3 -o "$T/x.gguf"
expect "gen-model: odd --n-rot" 2 "--n-rot 7: must be even" -- "$Q" gen-model --arch qwen35moe --n-rot 7 -o "$T/x.gguf"
expect "gen-model: DeltaNet rows not whole q8_0 blocks" 2 "state x vheads \(16\) must be a multiple of 32" -- \
    "$Q" gen-model --arch qwen35moe --type q8_0 --ssm-state 8 --ssm-vheads 2 --ssm-groups 1 -o "$T/x.gguf"
expect "gen-model: explicit zero interval" 2 "--attn-interval 0: must be at least 1" -- \
    "$Q" gen-model --arch qwen35moe --attn-interval 0 -o "$T/x.gguf"
if [ -e "$T/x.gguf" ]; then echo "FAIL: gen-model: a refused file was written"; else echo "PASS: gen-model: refused shapes write nothing"; fi
expect "run: generates and reports json" 0 '"gen_tokens":8' -- "$Q" run -m "$T/tiny.gguf" -p "Hello" -n 8 --ignore-eos --json
expect "run: prompt-tokens gives exactly N" 0 '"prompt_tokens":100' -- "$Q" run -m "$T/tiny.gguf" --prompt-tokens 100 -n 2 --json
expect "run: chat template applied" 0 '"prompt_ids":\[' -- "$Q" run -m "$T/tiny.gguf" -p "Hi" --chat -n 2 --json
expect "config hides the API key" 0 "QWISP_API_KEY +\(hidden\)" -- env QWISP_API_KEY=s3cret-value "$Q" config
out=$(env QWISP_API_KEY=s3cret-value "$Q" config 2>&1)
if echo "$out" | grep -q s3cret-value; then echo "FAIL: config leaks the API key"; else echo "PASS: config never prints the API key"; fi
expect "bad KV type knob" 2 "QWISP_KV_TYPE='f8': expected one of f16\|f32" -- env QWISP_KV_TYPE=f8 "$Q" config
expect "negative pool decay" 2 "QWISP_POOL_DECAY_MS='-5': out of range" -- env QWISP_POOL_DECAY_MS=-5 "$Q" config
expect "run: sampling flag error names the flag" 2 "--top-p '1.5': out of range" -- "$Q" run -m "$T/tiny.gguf" -p hi --top-p 1.5
expect "chat: sampling flag needs a value" 2 "--seed needs a value" -- "$Q" chat -m "$T/tiny.gguf" --seed
