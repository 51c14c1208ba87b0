# shellcheck shell=bash
# gpu_usable.sh — sourced by the GPU suite's scripts (run from the repository root).
# gpu_unusable BIN: when the CUDA backend cannot run here, prints why (qwisp's own
# one-line reason) and returns 0; returns 1, printing nothing, when it can.
gpu_unusable() {
    local why
    why=$(QWISP_BACKEND=cuda "$1" run -m models/default.gguf -p x -n 1 2>&1 >/dev/null) && return 1
    printf '%s\n' "${why#*QWISP_BACKEND=cuda: }"
}
