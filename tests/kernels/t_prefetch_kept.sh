#!/bin/bash
# t_prefetch_kept.sh — every kernel source that prefetches (qw_prefetch_*,
# src/kernels/quant_impl.h, called in the source or in a kernel header it
# includes) still has prefetch instructions in its object code.  GCC 12 at -O2 once deleted loops of __builtin_prefetch as dead code,
# which silently removed every decode prefetch (and made their calibration a
# no-op); the helpers are volatile asm since.  This checks the build, not the
# source: a compiler or flag change that drops them again fails here.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=$(dirname "${QWISP_BIN:-build/qwisp}")
if ! command -v objdump >/dev/null; then echo "SKIP: prefetches in the object code: no objdump"; exit 0; fi
# the sources that call them, and those that include a kernel header whose
# row loops call them (refrows_avx512.h, kquant_blocks_x86.h; quant_impl.h
# only defines them)
srcs=$(grep -l "qw_prefetch_" src/kernels/*.c)
for h in $(grep -l "qw_prefetch_" src/kernels/*.h | grep -v quant_impl.h); do
    srcs="$srcs $(grep -l "#include \"kernels/$(basename "$h")\"" src/kernels/*.c)"
done
for src in $(printf '%s\n' $srcs | sort -u); do
    obj=$BUILD/obj/${src%.c}.o
    if [ ! -f "$obj" ]; then echo "FAIL: $src: no object $obj"; continue; fi
    n=$(objdump -d --no-show-raw-insn "$obj" | grep -c "prefetch")
    if [ "$n" -gt 0 ]; then echo "PASS: $src keeps its prefetches ($n instructions)"
    else echo "FAIL: $src calls qw_prefetch_* but its object has no prefetch instruction"; fi
done
# a decode row loop itself: the AVX-512 level's Q4_K one (the Q8_0 and Q4_0 loops read
# far-apart streams with no software prefetch, docs/kernels.md)
obj=$BUILD/obj/src/kernels/kquant_avx512.o
n=$(objdump -d --no-show-raw-insn "$obj" 2>/dev/null | awk '/<gemv_q4_K_zmm>:/,/^$/' | grep -c "prefetch")
if [ "$n" -gt 0 ]; then echo "PASS: the AVX-512 Q4_K decode loop prefetches ($n instructions)"
else echo "FAIL: gemv_q4_K_zmm has no prefetch instruction"; fi
