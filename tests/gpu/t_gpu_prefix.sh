#!/bin/bash
# t_gpu_prefix.sh — the prefix cache on the CUDA backend: the serve tests of
# prefix reuse (whole prompts; blocks with recurrent-state snapshots and the
# lanes path; files across restarts) run again with QWISP_BACKEND=cuda, where
# the KV and the recurrent state live on the device and every reuse moves
# them through the backend's state and KV copies (backend.h).  Each answer is
# compared with a GPU server without reuse.  Without a GPU: one SKIP line.
set -u
cd "$(dirname "$0")/../.." || exit 1
export QWISP_BIN=${QWISP_BIN:-$PWD/build/qwisp}
. tests/gpu/gpu_usable.sh
if why=$(gpu_unusable "$QWISP_BIN"); then echo "SKIP: prefix cache on the GPU: $why"; exit 0; fi
export QWISP_BACKEND=cuda
for t in t_prefix t_prefix_blocks t_prefix_disk; do
    bash "tests/serve/$t.sh" | sed -E "s/^(PASS|FAIL|SKIP): /\1: gpu $t: /"
done
