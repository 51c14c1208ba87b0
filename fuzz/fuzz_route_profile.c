/* fuzz_route_profile.c — libFuzzer target for the routing-trace reader
 * (qw_route_profile_read, src/model/route_profile.c; QWISP_DEVICE_FIXED).
 *
 * The input is the trace's text, read through fmemopen for a model of 4
 * layers of 16 experts.  Invariants: failure leaves a non-empty message;
 * success gives each layer a permutation of 0..15.
 *
 *     make fuzz && build-fuzz/bin/fuzz_route_profile fuzz/seeds/route_profile
 */
#include "qwisp/route_profile.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

enum { N_LAYER = 4, N_EXPERT = 16 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0; /* fmemopen refuses a zero-length buffer */
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    int32_t order[N_LAYER * N_EXPERT];
    qw_error err = {{0}};
    const int rc = qw_route_profile_read(f, "fuzz", N_LAYER, N_EXPERT, order, &err);
    fclose(f);
    if (rc) {
        CHECK(rc == -1 && err.msg[0]);
        return 0;
    }
    for (int il = 0; il < N_LAYER; il++) {
        int seen[N_EXPERT] = {0};
        for (int r = 0; r < N_EXPERT; r++) {
            const int32_t e = order[il * N_EXPERT + r];
            CHECK(e >= 0 && e < N_EXPERT && !seen[e]);
            seen[e] = 1;
        }
    }
    return 0;
}
