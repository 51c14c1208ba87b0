#!/bin/bash
# t_fuzz_parsers.sh — short libFuzzer runs of every parser:
#   fuzz_gguf             the GGUF reader (src/format/gguf.c), 3 x the budget
#   fuzz_safetensors      safetensors header (src/format/safetensors.c)
#   fuzz_openai_request   `qwisp serve` request bodies (src/serve/openai.c)
#   fuzz_tokenizer        BPE encode/decode round trip (src/text/tokenizer.c)
#   fuzz_ab_criteria      `qwisp ab` criteria files (src/ab/ab_criteria.c)
#   fuzz_chat_tools       tool-call replies + chat requests with tools (src/text/tool_calls.c,
#                         src/serve/chat_req.c, src/text/chat_qwen.c)
#   fuzz_route_profile    routing traces for QWISP_DEVICE_FIXED (src/model/route_profile.c)
# Each needs build-fuzz/bin/<name> (built by `make fuzz`, which `make test`
# runs first); a missing binary is a FAIL, not a SKIP, so a broken fuzz build
# shows.  Per target: the seeds alone (fuzz/seeds/<seeds>, no mutation), then
# a FUZZ_PARSERS_SECONDS (default 10) run from a scratch copy of the seeds, so
# the repo's seeds are never modified.  UBSan findings stop the run and fail
# it (UBSAN_OPTIONS halt_on_error=1: by default UBSan only prints and libFuzzer
# carries on).  Crash/leak/timeout/oom artifacts are copied to
# FUZZ_ARTIFACT_DIR (default /tmp, which outlives run.sh's scratch dir) and
# named in an INFO line.  Total about 9 x 10 s.
set -u
cd "$(dirname "$0")/../.." || exit 1
SECS=${FUZZ_PARSERS_SECONDS:-10}
TMP=${QWISP_TEST_TMP:-/tmp}
KEEP=${FUZZ_ARTIFACT_DIR:-/tmp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_target() { # NAME SEEDS_DIR [SECONDS]
    local name=$1 seeds=$2 secs=${3:-$SECS} bin=build-fuzz/bin/$1 work runs
    if [ ! -x "$bin" ]; then
        echo "FAIL: $name ($bin missing: run make fuzz)"
        return
    fi
    work=$(mktemp -d "$TMP/$name.XXXXXX") || { echo "FAIL: $name (no scratch dir)"; return; }
    mkdir -p "$work/corpus"
    cp "fuzz/seeds/$seeds"/* "$work/corpus/" 2>/dev/null
    if "$bin" -runs=0 "$work/corpus" >"$work/seeds.log" 2>&1; then
        echo "PASS: $name seeds run"
    else
        echo "FAIL: $name seeds run"
        tail -20 "$work/seeds.log"
    fi
    if "$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$work/" "$work/corpus" >"$work/fuzz.log" 2>&1; then
        runs=$(grep -o 'Done [0-9]* runs' "$work/fuzz.log" | tail -1)
        echo "PASS: $name ${secs}s (${runs:-done})"
    else
        echo "FAIL: $name ${secs}s"
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$work/fuzz.log" | head -10
        tail -30 "$work/fuzz.log"
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -e "$a" ] && cp "$a" "$KEEP/$name-$(basename "$a")" 2>/dev/null &&
                echo "INFO: artifact $KEEP/$name-$(basename "$a") (replay: $bin FILE)"
        done
    fi
    rm -rf "$work"
}

run_target fuzz_gguf gguf $((3 * SECS))
run_target fuzz_safetensors safetensors
run_target fuzz_openai_request openai_request
run_target fuzz_tokenizer tokenizer
run_target fuzz_ab_criteria ab_criteria
run_target fuzz_chat_tools chat_tools
run_target fuzz_route_profile route_profile
