#!/bin/bash
# t_footprint_cli.sh — `qwisp footprint PID [--watch MS]`: one report line
# for a live process, peaks after it exits under --watch, clear errors.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
sleep 5 & P=$!
out=$("$Q" footprint $P 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -qE "^pid=$P footprint=[0-9.]+ rss=[0-9.]+ anon=[0-9.]+ file=[0-9.]+ shmem=[0-9.]+ swap=" \
    && echo "PASS: footprint PID prints footprint beside rss and its parts" || echo "FAIL: footprint PID: rc=$rc $out"
kill $P 2>/dev/null; wait $P 2>/dev/null
# a process that allocates 64 MiB of anonymous memory, then exits
python3 -c 'import time; b=bytearray(64<<20); time.sleep(1.0)' & P=$!
out=$("$Q" footprint $P --watch 50 2>&1); rc=$?
wait $P 2>/dev/null
peak=$(echo "$out" | sed -n 's/.*exited: footprint_peak=\([0-9.]*\) .*/\1/p')
[ $rc -eq 0 ] && [ -n "$peak" ] && awk -v p="$peak" 'BEGIN{exit !(p >= 60)}' \
    && echo "PASS: --watch follows the process to its exit and reports the peak ($peak MiB >= 64 MiB allocated)" \
    || echo "FAIL: --watch: rc=$rc $out"
out=$("$Q" footprint 999999999 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "/proc/999999999/" && echo "PASS: missing process is one clear error" \
    || echo "FAIL: missing process: rc=$rc $out"
out=$("$Q" footprint 2>&1); rc=$?
[ $rc -eq 2 ] && echo "PASS: no PID is a usage error" || echo "FAIL: no PID: rc=$rc"
out=$("$Q" footprint 1 --watch abc 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "watch" && echo "PASS: bad --watch value rejected" || echo "FAIL: --watch abc: rc=$rc $out"
