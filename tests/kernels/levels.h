/* levels.h — the SIMD levels the kernel tests walk, and the one way to enter
 * one (static; include after cmocka.h).
 *
 * Every table qw_simd_force can select is listed, the patched AVX-512 tables
 * of CPUs without VBMI and/or BF16 (Cascade Lake, Cooper Lake, Ice Lake)
 * included: an AVX-512 machine runs them all, so a patch that breaks a
 * smaller CPU fails here ("avx512-amx" needs AMX: Sapphire Rapids or
 * later).  A level this CPU cannot run is skipped with one
 * "SKIP:" line naming it (tests/run.sh shows those lines), never silently. */
#ifndef QWISP_TEST_KERNEL_LEVELS_H
#define QWISP_TEST_KERNEL_LEVELS_H

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "qwisp/quant.h"

static const char *const k_levels[] = {"scalar",        "avx2",          "avx512-novbmi-nobf16",
                                       "avx512-novbmi", "avx512-nobf16", "avx512", "avx512-amx"};
enum { N_LEVELS = sizeof k_levels / sizeof k_levels[0] };

/* Forces a level; false when the CPU cannot run it (the caller skips it). */
static bool use_level(const char *name) {
    static unsigned reported; /* one SKIP line per level and program */
    assert_int_equal(qw_simd_force(name), 0);
    if (strcasecmp(qw_simd_level(), name) == 0) return true;
    for (int i = 0; i < N_LEVELS; i++)
        if (!strcmp(k_levels[i], name) && !(reported & (1u << i))) {
            reported |= 1u << i;
            printf("SKIP: SIMD level %s: this CPU runs %s at most\n", name, qw_simd_level());
        }
    return false;
}

static void restore_best(void) { assert_int_equal(qw_simd_force("avx512-amx"), 0); }

#endif
