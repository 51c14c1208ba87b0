/* fuzz_gguf.c — libFuzzer target for the GGUF reader (src/format/gguf.c).
 *
 * Parses the input with qw_gguf_open_memory; when it is accepted, walks every
 * accessor (keys, typed getters, scalar views, numeric array bytes, every
 * string-array element, every tensor's data range) and traps if an invariant
 * the reader promises is broken: lookups find what iteration found, tensor
 * data lies inside the image, string lengths match their NUL terminators.
 * Out-of-bounds reads are ASan's to catch; the checks here catch logic bugs.
 *
 *     make fuzz && build-fuzz/bin/fuzz_gguf fuzz/seeds/gguf
 */
#include "qwisp/gguf.h"

#include <stdint.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

static volatile uint64_t g_sink;

static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += b[i];
    g_sink += s;
}

static void walk_kv(const qw_gguf *g, size_t i) {
    const char *key = qw_gguf_kv_key(g, i);
    CHECK(key && key[0]);
    CHECK(qw_gguf_find_key(g, key) == (int64_t)i);
    qw_gguf_vtype t = qw_gguf_kv_type(g, i);
    CHECK((unsigned)t < QW_GGUF_VTYPE_COUNT);
    (void)qw_gguf_vtype_name(t);

    int64_t iv;
    double dv;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    const char *s;
    size_t len;
    if (qw_gguf_kv_as_i64(g, i, &iv) == 0) g_sink += (uint64_t)iv;
    if (qw_gguf_kv_as_f64(g, i, &dv) == 0) g_sink += (uint64_t)(dv == dv);
    if (qw_gguf_get_u32(g, key, &u32) == 0) g_sink += u32;
    if (qw_gguf_get_i32(g, key, &i32) == 0) g_sink += (uint64_t)i32;
    if (qw_gguf_get_u64(g, key, &u64) == 0) g_sink += u64;
    if (qw_gguf_get_f32(g, key, &f) == 0) g_sink += (uint64_t)(f == f);
    if (qw_gguf_get_bool(g, key, &b) == 0) g_sink += b;
    if (qw_gguf_get_str(g, key, &s, &len) == 0) {
        CHECK(t == QW_GGUF_STRING && s[len] == '\0');
        touch(s, len);
        CHECK(qw_gguf_kv_str(g, i, NULL) == s);
    }

    qw_gguf_vtype et;
    uint64_t n;
    const void *data;
    if (qw_gguf_kv_arr(g, i, &et, &n, &data) != 0) {
        CHECK(t != QW_GGUF_ARRAY);
        return;
    }
    CHECK(t == QW_GGUF_ARRAY);
    CHECK(qw_gguf_get_arr(g, key, NULL, NULL, NULL) == 0);
    size_t esz = qw_gguf_vtype_size(et);
    if (esz) {
        CHECK(data != NULL);
        const uint8_t *base = qw_gguf_map_base(g);
        CHECK((const uint8_t *)data >= base && n * esz <= qw_gguf_map_size(g) - (size_t)((const uint8_t *)data - base));
        touch(data, (size_t)(n * esz));
    } else {
        CHECK(data == NULL);
    }
    if (et == QW_GGUF_STRING) {
        for (uint64_t j = 0; j < n; j++) {
            s = qw_gguf_arr_str(g, i, j, &len);
            CHECK(s != NULL && s[len] == '\0');
            touch(s, len);
        }
    }
    CHECK(qw_gguf_arr_str(g, i, n, &len) == NULL);
}

static void walk_tensor(const qw_gguf *g, size_t i) {
    const qw_gguf_tensor *t = qw_gguf_tensor_at(g, i);
    CHECK(t && t->name);
    CHECK(qw_gguf_find_tensor(g, t->name) == t);
    CHECK(t->n_dims >= 1 && t->n_dims <= QW_GGUF_MAX_DIMS);
    for (int d = 0; d < QW_GGUF_MAX_DIMS; d++) CHECK(t->ne[d] >= 1);
    CHECK(t->offset % qw_gguf_alignment(g) == 0);
    const uint8_t *base = qw_gguf_map_base(g), *p = t->data;
    size_t size = qw_gguf_map_size(g);
    CHECK(p == base + qw_gguf_data_offset(g) + t->offset);
    CHECK(t->nbytes > 0 && (size_t)(p - base) <= size && t->nbytes <= size - (size_t)(p - base));
    g_sink += p[0] + p[t->nbytes - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_error err = {{0}};
    qw_gguf *g = qw_gguf_open_memory(data, size, "fuzz.gguf", &err);
    if (!g) {
        CHECK(strncmp(err.msg, "fuzz.gguf: at offset ", 21) == 0);
        return 0;
    }
    CHECK(err.msg[0] == '\0');
    uint32_t v = qw_gguf_version(g);
    CHECK(v == 2 || v == 3);
    size_t a = qw_gguf_alignment(g);
    CHECK(a && (a & (a - 1)) == 0);
    CHECK(qw_gguf_data_offset(g) <= qw_gguf_map_size(g));
    for (size_t i = 0; i < qw_gguf_n_kv(g); i++) walk_kv(g, i);
    CHECK(qw_gguf_kv_key(g, qw_gguf_n_kv(g)) == NULL);
    for (size_t i = 0; i < qw_gguf_n_tensors(g); i++) walk_tensor(g, i);
    CHECK(qw_gguf_tensor_at(g, qw_gguf_n_tensors(g)) == NULL);
    qw_gguf_close(g);
    return 0;
}
