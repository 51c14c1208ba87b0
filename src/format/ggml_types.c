/* ggml_types.c — the ggml type table (names and block layouts) and the tensor
 * byte-size rule shared by the GGUF reader, the writer and `qwisp info`.
 *
 * The numbers are ggml's: a tensor of type T stores its rows as blocks of
 * blck_elems elements, each blck_bytes bytes, so a row of ne[0] elements takes
 * ne[0] / blck_elems * blck_bytes bytes and rows are packed with no padding.
 * ne[0] must therefore be a multiple of the block size.  The table is indexed
 * by the type id; a zero entry means the id is not (or no longer) a type.
 */
#include "format/ggml_types.h"

#include <stdint.h>
#include <strings.h>

static const qw_ggml_type_info g_types[QW_GGML_TYPE_ID_LIMIT] = {
    [0] = {"f32", 1, 4},
    [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},
    /* 4, 5: q4_2 / q4_3, removed from ggml long ago */
    [6] = {"q5_0", 32, 22},
    [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},
    [9] = {"q8_1", 32, 36},
    [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},
    [12] = {"q4_K", 256, 144},
    [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},
    [15] = {"q8_K", 256, 292},
    [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98},
    [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},
    [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},
    [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},
    [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},
    /* 31..33: q4_0_4_4 / q4_0_4_8 / q4_0_8_8, runtime repacks, never in files */
    [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},
    /* 36..38: iq4_nl_4_4 / _4_8 / _8_8, likewise */
    [39] = {"mxfp4", 32, 17},
    [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},
    [42] = {"q2_0", 64, 18},
};

const qw_ggml_type_info *qw_ggml_type_info_of(uint32_t type) {
    if (type >= QW_GGML_TYPE_ID_LIMIT || g_types[type].name == NULL) return NULL;
    return &g_types[type];
}

const char *qw_ggml_type_name(uint32_t type) {
    const qw_ggml_type_info *ti = qw_ggml_type_info_of(type);
    return ti ? ti->name : "unknown";
}

int qw_ggml_type_from_name(const char *name) {
    if (!name) return -1;
    for (uint32_t t = 0; t < QW_GGML_TYPE_ID_LIMIT; t++)
        if (g_types[t].name && strcasecmp(g_types[t].name, name) == 0) return (int)t;
    return -1;
}

static int why_fail(const char **why, const char *reason) {
    if (why) *why = reason;
    return -1;
}

int qw_ggml_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t *nbytes,
                          const char **why) {
    const qw_ggml_type_info *ti = qw_ggml_type_info_of(type);
    if (!ti) return why_fail(why, "unknown type");
    if (n_dims < 1 || n_dims > 4) return why_fail(why, "n_dims out of range 1..4");
    /* The element count must fit int64 (ggml stores ne as int64_t); checking
     * each partial product against INT64_MAX keeps every multiply exact. */
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) return why_fail(why, "a dimension is 0");
        if (ne[d] > (uint64_t)INT64_MAX / nel) return why_fail(why, "element count exceeds INT64_MAX");
        nel *= ne[d];
    }
    if (ne[0] % ti->blck_elems != 0) return why_fail(why, "ne[0] is not a multiple of the block size");
    uint64_t blocks = nel / ti->blck_elems;
    if (blocks > (uint64_t)SIZE_MAX / ti->blck_bytes) return why_fail(why, "byte size overflows");
    *nbytes = blocks * ti->blck_bytes;
    return 0;
}
