# lib.sh — what the serve script tests share (sourced, not run): PASS/FAIL
# lines, and starting `qwisp serve` on a free loopback port with every server
# started killed when the script exits.
# Callers set Q (the qwisp binary), SERVE_MODEL and optionally SERVE_THREADS.
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1${2:+ — $2}"; }

# start_server LOG [ENV=V ...] -- [serve flags...]: sets PORT and SPID; returns
# 1 if the server exited or never said it was listening (10 s).
start_server() {
    local log=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" "$Q" serve -m "$SERVE_MODEL" --port 0 --threads "${SERVE_THREADS:-1}" "$@" 2>"$log" &
    SPID=$!
    PIDS+=("$SPID")
    PORT=""
    for _ in $(seq 1 100); do
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$PORT" ] && return 0
        kill -0 "$SPID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
