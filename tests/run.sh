#!/bin/bash
# run.sh BUILD_DIR — runs every test qwisp has and ends with one line CI reads:
#   "N passed, N failed"
# Pieces:
#   1. C unit tests: each $BUILD/tests/**/test_* is a cmocka program; its
#      "[  PASSED  ] n test(s)." / "[  FAILED  ] n test(s)" lines are counted
#      (tests/model/ ones once per SIMD level); their SKIP:/INFO: lines shown.
#   2. Script tests: tests/**/t_*.sh (peers, CLI, fuzz) print "PASS: name" or
#      "FAIL: name" per check; a script that exits non-zero without printing a
#      FAIL line counts as one failure.
# QWISP_TEST_FILTER=regex runs only the programs/scripts whose path matches.
set -u
BUILD=${1:-build}
export QWISP_BUILD="$BUILD"
export QWISP_BIN="$PWD/$BUILD/qwisp"
# tests run with the built-in kernel parameters: they neither calibrate at
# first use nor read (or complain about) the user's calibration cache —
# t_tune.sh checks those paths with its own file; bits never depend on it
export QWISP_TUNE=${QWISP_TUNE:-off}
export QWISP_TEST_TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-test.XXXXXX)}
FILTER=${QWISP_TEST_FILTER:-.}
passed=0; failed=0; failed_names=()

run_cmocka() {
    local bin=$1 out rc p f
    out=$("$bin" 2>&1); rc=$?
    echo "$out" | grep -E '^\[ *(RUN|OK|FAILED|PASSED|ERROR|SKIPPED) *\]|^\[==========\]|^(SKIP|INFO):' | grep -vE '^\[ *(RUN|OK) *\]' || true
    p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    p=${p:-0}; f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$out" | tail -20
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -gt 0 ] && failed_names+=("$bin")
}

run_script() {
    local s=$1 out rc p f
    out=$(bash "$s" 2>&1); rc=$?
    echo "$out" | grep -E '^(PASS|FAIL|SKIP|INFO):' || true
    p=$(echo "$out" | grep -c '^PASS:')
    f=$(echo "$out" | grep -c '^FAIL:')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$out" | tail -20
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -gt 0 ] && failed_names+=("$s")
}

# The forward-pass tests run once per SIMD level (QWISP_SIMD; a level this
# CPU lacks prints a SKIP line naming it); kernel tests walk the levels inside.
SIMD_LEVELS="avx512-amx avx512 avx512-nobf16 avx512-novbmi avx512-novbmi-nobf16 avx2 scalar"
echo "== C unit tests ($BUILD)"
for t in $(find "$BUILD/tests" -type f -name 'test_*' -perm -u+x 2>/dev/null | sort); do
    [[ $t =~ $FILTER ]] || continue
    if [[ $t == */tests/model/* ]]; then
        for lv in $SIMD_LEVELS; do
            echo "-- $t (QWISP_SIMD=$lv)"
            QWISP_SIMD=$lv run_cmocka "$t"
        done
        continue
    fi
    echo "-- $t"
    run_cmocka "$t"
done
echo "== script tests"
for s in $(find tests -name node_modules -prune -o -name 't_*.sh' -print | sort); do
    [[ $s =~ $FILTER ]] || continue
    echo "-- $s"
    run_script "$s"
done
rm -rf "$QWISP_TEST_TMP"
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failing: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
