/* test_gguf.c — GGUF reader and writer.
 *
 * Round trips through the writer and the mmap reader (every value type,
 * arrays, string arrays, several tensor types and shapes, data bytes,
 * alignment), the writer's own error paths, and hand-built malformed images
 * that must each fail with their specific message ("<name>: at offset N: …").
 * The truncation test cuts a valid file at every length and gives each cut
 * its own exact-size heap copy, so an over-read shows up under ASan.
 */
#include "qwisp/gguf.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* ------------------------------------------------------------ scratch dir */

static char g_dir[512];

static const char *tmp_path(const char *name) {
    static char buf[4][700];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 700, "%s/%s", g_dir, name);
    return p;
}

static int setup_dir(void **state) {
    (void)state;
    const char *base = getenv("QWISP_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/gguf.XXXXXX", base && *base ? base : "/tmp");
    if (base && *base) mkdir(base, 0700);
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 1);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* ----------------------------------------------------- hand-built images */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_pad(buf *b, size_t a) {
    while (b->n % a) b_u8(b, 0);
}
static buf b_header(uint64_t n_tensors, uint64_t n_kv) {
    buf b = {0};
    b_u32(&b, QW_GGUF_MAGIC);
    b_u32(&b, 3);
    b_u64(&b, n_tensors);
    b_u64(&b, n_kv);
    return b;
}
/* A key with a u32 value. */
static void b_kv_u32(buf *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, QW_GGUF_UINT32);
    b_u32(b, v);
}
/* A tensor info. */
static void b_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}

/* Parses b (from an exact-size heap copy) and expects failure whose message
 * names the image, carries "at offset <off>" (off < 0: any) and contains want. */
static void expect_fail_at(buf *b, long off, const char *want) {
    uint8_t *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(copy, b->p, b->n);
    qw_error err = {{0}};
    qw_gguf *g = qw_gguf_open_memory(copy, b->n, "bad.gguf", &err);
    if (g) qw_gguf_close(g);
    assert_null(g);
    if (!strstr(err.msg, want) || strncmp(err.msg, "bad.gguf: at offset ", 20) != 0)
        fail_msg("wanted '%s' in: %s", want, err.msg);
    if (off >= 0) {
        char at[64];
        snprintf(at, sizeof at, "bad.gguf: at offset %ld: ", off);
        if (strncmp(err.msg, at, strlen(at)) != 0) fail_msg("wanted '%s' in: %s", at, err.msg);
    }
    free(copy);
    free(b->p);
    b->p = NULL;
}

static qw_gguf *open_buf(buf *b, qw_error *err) { return qw_gguf_open_memory(b->p, b->n, "ok.gguf", err); }

/* ------------------------------------------------------------ writer fill */

/* Tensor index i, byte k -> a pattern that differs per tensor and position. */
static uint8_t pattern(int i, size_t k) { return (uint8_t)(k * 31u + (unsigned)i * 7u + (k >> 8)); }

static int fill_pattern(void *ctx, int index, void *dst, size_t nbytes, qw_error *err) {
    (void)err;
    int *calls = ctx;
    if (calls) (*calls)++;
    for (size_t k = 0; k < nbytes; k++) ((uint8_t *)dst)[k] = pattern(index, k);
    return 0;
}

static int fill_fail(void *ctx, int index, void *dst, size_t nbytes, qw_error *err) {
    (void)ctx;
    (void)dst;
    (void)nbytes;
    if (index == 1) return qw_fail(err, "synthetic failure");
    return 0;
}

enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_BF16 = 30 };

/* --------------------------------------------------------------- round trip */

static void test_roundtrip(void **state) {
    (void)state;
    qw_gguf_writer *w = qw_gguf_writer_new();
    qw_gguf_set_str(w, "general.architecture", "qwen3moe");
    qw_gguf_set_u32(w, "a.u32", 4000000000u);
    qw_gguf_set_i32(w, "a.i32", -123456);
    qw_gguf_set_u64(w, "a.u64", 0x123456789abcdefull);
    qw_gguf_set_f32(w, "a.f32", 1.5e-6f);
    qw_gguf_set_bool(w, "a.bool", true);
    qw_gguf_set_str(w, "a.empty", "");
    qw_gguf_set_u32(w, "a.replaced", 1);
    const uint8_t au8[] = {0, 1, 255};
    const int8_t ai8[] = {-128, 0, 127};
    const uint16_t au16[] = {1, 65535};
    const int16_t ai16[] = {-32768, 7};
    const uint32_t au32[] = {1, 2, 3, 4000000000u};
    const int32_t ai32[] = {-1, 2};
    const float af32[] = {0.5f, -2.25f, 3e38f};
    const uint8_t abool[] = {1, 0, 1, 1};
    const uint64_t au64[] = {UINT64_MAX, 0};
    const int64_t ai64[] = {INT64_MIN, 5};
    const double af64[] = {3.141592653589793, -1e300};
    qw_gguf_set_arr(w, "arr.u8", QW_GGUF_UINT8, au8, 3);
    qw_gguf_set_arr(w, "arr.i8", QW_GGUF_INT8, ai8, 3);
    qw_gguf_set_arr(w, "arr.u16", QW_GGUF_UINT16, au16, 2);
    qw_gguf_set_arr(w, "arr.i16", QW_GGUF_INT16, ai16, 2);
    qw_gguf_set_arr(w, "arr.u32", QW_GGUF_UINT32, au32, 4);
    qw_gguf_set_arr(w, "arr.i32", QW_GGUF_INT32, ai32, 2);
    qw_gguf_set_arr(w, "arr.f32", QW_GGUF_FLOAT32, af32, 3);
    qw_gguf_set_arr(w, "arr.bool", QW_GGUF_BOOL, abool, 4);
    qw_gguf_set_arr(w, "arr.u64", QW_GGUF_UINT64, au64, 2);
    qw_gguf_set_arr(w, "arr.i64", QW_GGUF_INT64, ai64, 2);
    qw_gguf_set_arr(w, "arr.f64", QW_GGUF_FLOAT64, af64, 2);
    qw_gguf_set_arr(w, "arr.empty", QW_GGUF_INT32, NULL, 0);
    const char *strs[] = {"hello", "", "\xc4\xa0world", "a longer token with spaces"};
    qw_gguf_set_arr_str(w, "arr.str", strs, 4);
    qw_gguf_set_u32(w, "a.replaced", 2); /* replaces in place, keeps position 7 */

    qw_error err = {{0}};
    const uint64_t ne_a[] = {7, 3}, ne_b[] = {5}, ne_c[] = {64, 2}, ne_d[] = {32, 1, 2}, ne_e[] = {3, 2, 2, 2},
                   ne_f[] = {256, 2};
    assert_int_equal(qw_gguf_add_tensor(w, "t.f32", T_F32, 2, ne_a, &err), 0);
    assert_int_equal(qw_gguf_add_tensor(w, "t.f16", T_F16, 1, ne_b, &err), 1);
    assert_int_equal(qw_gguf_add_tensor(w, "t.q8_0", T_Q8_0, 2, ne_c, &err), 2);
    assert_int_equal(qw_gguf_add_tensor(w, "t.q4_0", T_Q4_0, 3, ne_d, &err), 3);
    assert_int_equal(qw_gguf_add_tensor(w, "t.bf16", T_BF16, 4, ne_e, &err), 4);
    assert_int_equal(qw_gguf_add_tensor(w, "t.q4_K", T_Q4_K, 2, ne_f, &err), 5);
    const uint64_t want_bytes[] = {7 * 3 * 4, 5 * 2, 2 * 2 * 34, 2 * 18, 24 * 2, 2 * 144};

    const char *path = tmp_path("rt.gguf");
    int calls = 0;
    assert_int_equal(qw_gguf_writer_write(w, path, fill_pattern, &calls, &err), 0);
    assert_int_equal(calls, 6);
    qw_gguf_writer_free(w);
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(access(tmp, F_OK), -1); /* temp renamed away */

    qw_gguf *g = qw_gguf_open(path, &err);
    if (!g) fail_msg("%s", err.msg);
    assert_string_equal(qw_gguf_path(g), path);
    assert_int_equal(qw_gguf_version(g), 3);
    assert_int_equal(qw_gguf_alignment(g), 32);
    assert_int_equal(qw_gguf_data_offset(g) % 32, 0);
    assert_int_equal(qw_gguf_n_kv(g), 21);
    assert_string_equal(qw_gguf_kv_key(g, 0), "general.architecture");
    assert_string_equal(qw_gguf_kv_key(g, 7), "a.replaced");
    assert_null(qw_gguf_kv_key(g, 21));

    const char *s;
    size_t len;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool bl;
    assert_int_equal(qw_gguf_get_str(g, "general.architecture", &s, &len), 0);
    assert_string_equal(s, "qwen3moe");
    assert_int_equal(len, 8);
    assert_int_equal(qw_gguf_get_str(g, "a.empty", &s, &len), 0);
    assert_int_equal(len, 0);
    assert_string_equal(s, "");
    assert_int_equal(qw_gguf_get_u32(g, "a.u32", &u32), 0);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(qw_gguf_get_i32(g, "a.u32", &i32), -1); /* does not fit */
    assert_int_equal(qw_gguf_get_u64(g, "a.u32", &u64), 0);
    assert_int_equal(u64, 4000000000u);
    assert_int_equal(qw_gguf_get_i32(g, "a.i32", &i32), 0);
    assert_int_equal(i32, -123456);
    assert_int_equal(qw_gguf_get_u32(g, "a.i32", &u32), -1); /* negative */
    assert_int_equal(qw_gguf_get_u64(g, "a.u64", &u64), 0);
    assert_true(u64 == 0x123456789abcdefull);
    assert_int_equal(qw_gguf_get_u32(g, "a.u64", &u32), -1);
    assert_int_equal(qw_gguf_get_f32(g, "a.f32", &f), 0);
    assert_true(f == 1.5e-6f);
    assert_int_equal(qw_gguf_get_f32(g, "a.u32", &f), -1);
    assert_int_equal(qw_gguf_get_bool(g, "a.bool", &bl), 0);
    assert_true(bl);
    assert_int_equal(qw_gguf_get_bool(g, "a.u32", &bl), -1);
    assert_int_equal(qw_gguf_get_u32(g, "a.replaced", &u32), 0);
    assert_int_equal(u32, 2);
    assert_int_equal(qw_gguf_get_u32(g, "missing", &u32), -1);
    assert_int_equal(qw_gguf_get_str(g, "a.u32", &s, &len), -1);
    assert_int_equal(qw_gguf_find_key(g, "missing"), -1);

    int64_t i = qw_gguf_find_key(g, "a.i32");
    assert_true(i >= 0);
    int64_t iv;
    double dv;
    assert_int_equal(qw_gguf_kv_type(g, (size_t)i), QW_GGUF_INT32);
    assert_int_equal(qw_gguf_kv_as_i64(g, (size_t)i, &iv), 0);
    assert_int_equal(iv, -123456);
    assert_int_equal(qw_gguf_kv_as_f64(g, (size_t)i, &dv), 0);
    assert_true(dv == -123456.0);
    i = qw_gguf_find_key(g, "general.architecture");
    assert_int_equal(qw_gguf_kv_as_i64(g, (size_t)i, &iv), -1);
    assert_string_equal(qw_gguf_kv_str(g, (size_t)i, &len), "qwen3moe");

    /* Numeric arrays: bytes exactly as written. */
    struct {
        const char *key;
        qw_gguf_vtype t;
        const void *data;
        uint64_t n;
        size_t esz;
    } arrs[] = {
        {"arr.u8", QW_GGUF_UINT8, au8, 3, 1},       {"arr.i8", QW_GGUF_INT8, ai8, 3, 1},
        {"arr.u16", QW_GGUF_UINT16, au16, 2, 2},    {"arr.i16", QW_GGUF_INT16, ai16, 2, 2},
        {"arr.u32", QW_GGUF_UINT32, au32, 4, 4},    {"arr.i32", QW_GGUF_INT32, ai32, 2, 4},
        {"arr.f32", QW_GGUF_FLOAT32, af32, 3, 4},   {"arr.bool", QW_GGUF_BOOL, abool, 4, 1},
        {"arr.u64", QW_GGUF_UINT64, au64, 2, 8},    {"arr.i64", QW_GGUF_INT64, ai64, 2, 8},
        {"arr.f64", QW_GGUF_FLOAT64, af64, 2, 8},   {"arr.empty", QW_GGUF_INT32, NULL, 0, 4},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        qw_gguf_vtype et;
        uint64_t n;
        const void *d;
        assert_int_equal(qw_gguf_get_arr(g, arrs[k].key, &et, &n, &d), 0);
        assert_int_equal(et, arrs[k].t);
        assert_int_equal(n, arrs[k].n);
        assert_non_null(d);
        if (n) assert_memory_equal(d, arrs[k].data, n * arrs[k].esz);
        assert_int_equal(qw_gguf_kv_type(g, (size_t)qw_gguf_find_key(g, arrs[k].key)), QW_GGUF_ARRAY);
    }
    assert_int_equal(qw_gguf_get_arr(g, "a.u32", NULL, NULL, NULL), -1);

    i = qw_gguf_find_key(g, "arr.str");
    qw_gguf_vtype et;
    uint64_t n;
    const void *d = (void *)1;
    assert_int_equal(qw_gguf_kv_arr(g, (size_t)i, &et, &n, &d), 0);
    assert_int_equal(et, QW_GGUF_STRING);
    assert_int_equal(n, 4);
    assert_null(d);
    for (uint64_t j = 0; j < 4; j++) {
        s = qw_gguf_arr_str(g, (size_t)i, j, &len);
        assert_non_null(s);
        assert_string_equal(s, strs[j]);
        assert_int_equal(len, strlen(strs[j]));
    }
    assert_null(qw_gguf_arr_str(g, (size_t)i, 4, &len));
    assert_null(qw_gguf_arr_str(g, (size_t)qw_gguf_find_key(g, "arr.u8"), 0, &len));

    /* Tensors: shapes, types, sizes, alignment and the exact bytes. */
    const char *names[] = {"t.f32", "t.f16", "t.q8_0", "t.q4_0", "t.bf16", "t.q4_K"};
    const uint32_t types[] = {T_F32, T_F16, T_Q8_0, T_Q4_0, T_BF16, T_Q4_K};
    const uint64_t *shapes[] = {ne_a, ne_b, ne_c, ne_d, ne_e, ne_f};
    const uint32_t ndims[] = {2, 1, 2, 3, 4, 2};
    assert_int_equal(qw_gguf_n_tensors(g), 6);
    const uint8_t *base = qw_gguf_map_base(g);
    uint64_t end = 0;
    for (int k = 0; k < 6; k++) {
        const qw_gguf_tensor *t = qw_gguf_tensor_at(g, (size_t)k);
        assert_ptr_equal(t, qw_gguf_find_tensor(g, names[k]));
        assert_string_equal(t->name, names[k]);
        assert_int_equal(t->type, types[k]);
        assert_int_equal(t->n_dims, ndims[k]);
        for (uint32_t dd = 0; dd < 4; dd++) assert_int_equal(t->ne[dd], dd < ndims[k] ? shapes[k][dd] : 1);
        assert_int_equal(t->nbytes, want_bytes[k]);
        assert_int_equal(t->offset % 32, 0);
        assert_ptr_equal(t->data, base + qw_gguf_data_offset(g) + t->offset);
        assert_int_equal((uintptr_t)t->data % 32, 0);
        for (size_t b = 0; b < t->nbytes; b++)
            if (((const uint8_t *)t->data)[b] != pattern(k, b)) fail_msg("tensor %d byte %zu differs", k, b);
        assert_true(t->offset >= end); /* declaration order, no overlap */
        end = t->offset + t->nbytes;
    }
    /* ggml pads after the last tensor too. */
    assert_int_equal(qw_gguf_map_size(g), qw_gguf_data_offset(g) + ((end + 31) / 32) * 32);
    assert_null(qw_gguf_find_tensor(g, "nope"));
    assert_null(qw_gguf_tensor_at(g, 6));
    qw_gguf_close(g);
}

static void test_custom_alignment(void **state) {
    (void)state;
    qw_error err = {{0}};
    const size_t aligns[] = {1, 64, 4096};
    for (size_t a = 0; a < 3; a++) {
        qw_gguf_writer *w = qw_gguf_writer_new();
        qw_gguf_set_str(w, "general.name", "x");
        qw_gguf_set_u32(w, "general.alignment", (uint32_t)aligns[a]);
        const uint64_t ne1[] = {3}, ne2[] = {32, 3};
        assert_int_equal(qw_gguf_add_tensor(w, "a", T_F32, 1, ne1, &err), 0);
        assert_int_equal(qw_gguf_add_tensor(w, "b", T_Q8_0, 2, ne2, &err), 1);
        assert_int_equal(qw_gguf_add_tensor(w, "c", T_F16, 1, ne1, &err), 2);
        const char *path = tmp_path("align.gguf");
        assert_int_equal(qw_gguf_writer_write(w, path, fill_pattern, NULL, &err), 0);
        qw_gguf_writer_free(w);
        qw_gguf *g = qw_gguf_open(path, &err);
        if (!g) fail_msg("%s", err.msg);
        assert_int_equal(qw_gguf_alignment(g), aligns[a]);
        assert_int_equal(qw_gguf_data_offset(g) % aligns[a], 0);
        uint64_t expect_off = 0;
        for (size_t k = 0; k < 3; k++) {
            const qw_gguf_tensor *t = qw_gguf_tensor_at(g, k);
            assert_int_equal(t->offset, expect_off); /* ggml's sequential layout */
            expect_off += (t->nbytes + aligns[a] - 1) / aligns[a] * aligns[a];
            for (size_t b = 0; b < t->nbytes; b++) assert_int_equal(((const uint8_t *)t->data)[b], pattern((int)k, b));
        }
        assert_int_equal(qw_gguf_map_size(g), qw_gguf_data_offset(g) + expect_off);
        qw_gguf_close(g);
    }
}

/* ------------------------------------------------------------ writer errors */

static void test_writer_errors(void **state) {
    (void)state;
    qw_error err = {{0}};
    qw_gguf_writer *w = qw_gguf_writer_new();
    const uint64_t ok[] = {32, 2}, zero[] = {32, 0}, odd[] = {33, 2};
    assert_int_equal(qw_gguf_add_tensor(w, "a", T_Q8_0, 2, ok, &err), 0);
    assert_int_equal(qw_gguf_add_tensor(w, "a", T_Q8_0, 2, ok, &err), -1);
    assert_non_null(strstr(err.msg, "duplicate tensor name 'a'"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", T_Q8_0, 5, ok, &err), -1);
    assert_non_null(strstr(err.msg, "n_dims 5"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", T_Q8_0, 0, ok, &err), -1);
    assert_non_null(strstr(err.msg, "n_dims 0"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", 4, 2, ok, &err), -1); /* retired q4_2 */
    assert_non_null(strstr(err.msg, "unknown type 4"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", T_Q8_0, 2, zero, &err), -1);
    assert_non_null(strstr(err.msg, "dimension is 0"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", T_Q8_0, 2, odd, &err), -1);
    assert_non_null(strstr(err.msg, "not a multiple of the block size"));
    assert_int_equal(qw_gguf_add_tensor(w, "", T_F32, 2, ok, &err), -1);
    assert_int_equal(qw_gguf_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123", T_F32,
                                        2, ok, &err),
                     -1);
    assert_non_null(strstr(err.msg, "name longer than 63"));
    assert_int_equal(qw_gguf_add_tensor(w, "b", T_F32, 2, ok, &err), 1);

    /* A failing fill callback: error names the tensor, nothing left behind. */
    const char *path = tmp_path("fail.gguf");
    unlink(path);
    assert_int_equal(qw_gguf_writer_write(w, path, fill_fail, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "tensor 'b' (#1): synthetic failure"));
    assert_int_equal(access(path, F_OK), -1);
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(access(tmp, F_OK), -1);

    /* Bad alignment values are refused at write time. */
    qw_gguf_set_u32(w, "general.alignment", 3);
    assert_int_equal(qw_gguf_writer_write(w, path, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "general.alignment 3 is not a power of two"));
    qw_gguf_set_str(w, "general.alignment", "32");
    assert_int_equal(qw_gguf_writer_write(w, path, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "general.alignment must be set with qw_gguf_set_u32"));
    assert_int_equal(access(path, F_OK), -1);

    /* Unwritable destination. */
    qw_gguf_set_u32(w, "general.alignment", 32);
    assert_int_equal(qw_gguf_writer_write(w, "/nonexistent-dir/x.gguf", NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf.tmp."));
    assert_non_null(strstr(err.msg, strerror(ENOENT)));

    /* NULL fill writes zeros. */
    assert_int_equal(qw_gguf_writer_write(w, path, NULL, NULL, &err), 0);
    qw_gguf *g = qw_gguf_open(path, &err);
    assert_non_null(g);
    const qw_gguf_tensor *t = qw_gguf_find_tensor(g, "b");
    for (size_t b = 0; b < t->nbytes; b++) assert_int_equal(((const uint8_t *)t->data)[b], 0);
    qw_gguf_close(g);
    qw_gguf_writer_free(w);
}

/* ------------------------------------------------------------ reader edges */

/* Scalars the writer has no setter for, integer getter conversions, a nested
 * array, version 2, and a file with no tensors and no padding. */
static void test_handmade_values(void **state) {
    (void)state;
    buf b = b_header(0, 8);
    b_str(&b, "u8"), b_u32(&b, QW_GGUF_UINT8), b_u8(&b, 200);
    b_str(&b, "i8"), b_u32(&b, QW_GGUF_INT8), b_u8(&b, 0x80);
    b_str(&b, "u16"), b_u32(&b, QW_GGUF_UINT16), b_put(&b, "\x34\x12", 2);
    b_str(&b, "i16"), b_u32(&b, QW_GGUF_INT16), b_put(&b, "\xfe\xff", 2);
    b_str(&b, "i64"), b_u32(&b, QW_GGUF_INT64), b_u64(&b, (uint64_t)-5);
    b_str(&b, "big"), b_u32(&b, QW_GGUF_UINT64), b_u64(&b, UINT64_MAX);
    double dv = 0.25;
    b_str(&b, "f64"), b_u32(&b, QW_GGUF_FLOAT64), b_put(&b, &dv, 8);
    /* [[1,2],[]] as nested u16 arrays */
    b_str(&b, "nested"), b_u32(&b, QW_GGUF_ARRAY), b_u32(&b, QW_GGUF_ARRAY), b_u64(&b, 2);
    b_u32(&b, QW_GGUF_UINT16), b_u64(&b, 2), b_put(&b, "\x01\x00\x02\x00", 4);
    b_u32(&b, QW_GGUF_STRING), b_u64(&b, 0);
    for (uint32_t version = 2; version <= 3; version++) {
        memcpy(b.p + 4, &version, 4);
        qw_error err = {{0}};
        qw_gguf *g = open_buf(&b, &err);
        if (!g) fail_msg("%s", err.msg);
        assert_int_equal(qw_gguf_version(g), version);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        double d;
        float f;
        assert_int_equal(qw_gguf_get_u32(g, "u8", &u32), 0), assert_int_equal(u32, 200);
        assert_int_equal(qw_gguf_get_i32(g, "i8", &i32), 0), assert_int_equal(i32, -128);
        assert_int_equal(qw_gguf_get_u32(g, "i8", &u32), -1);
        assert_int_equal(qw_gguf_get_u32(g, "u16", &u32), 0), assert_int_equal(u32, 0x1234);
        assert_int_equal(qw_gguf_get_i32(g, "i16", &i32), 0), assert_int_equal(i32, -2);
        assert_int_equal(qw_gguf_get_i32(g, "i64", &i32), 0), assert_int_equal(i32, -5);
        assert_int_equal(qw_gguf_get_u64(g, "i64", &u64), -1);
        assert_int_equal(qw_gguf_get_u64(g, "big", &u64), 0), assert_true(u64 == UINT64_MAX);
        assert_int_equal(qw_gguf_kv_as_i64(g, (size_t)qw_gguf_find_key(g, "big"), &i64), -1);
        assert_int_equal(qw_gguf_kv_as_f64(g, (size_t)qw_gguf_find_key(g, "big"), &d), 0);
        assert_true(d == 18446744073709551615.0);
        assert_int_equal(qw_gguf_get_f32(g, "f64", &f), 0), assert_true(f == 0.25f);
        qw_gguf_vtype et;
        uint64_t n;
        const void *data = (void *)1;
        assert_int_equal(qw_gguf_get_arr(g, "nested", &et, &n, &data), 0);
        assert_int_equal(et, QW_GGUF_ARRAY);
        assert_int_equal(n, 2);
        assert_null(data);
        assert_int_equal(qw_gguf_n_tensors(g), 0);
        assert_int_equal(qw_gguf_data_offset(g), b.n); /* no tensors: padding not required */
        qw_gguf_close(g);
    }
    free(b.p);
}

/* -------------------------------------------------------- malformed images */

static void test_bad_magic_version(void **state) {
    (void)state;
    buf b = b_header(0, 0);
    memcpy(b.p, "GGML", 4);
    expect_fail_at(&b, 0, "bad magic");
    b = b_header(0, 0);
    b.p[4] = 1;
    expect_fail_at(&b, 4, "unsupported GGUF version 1");
    b = b_header(0, 0);
    b.p[4] = 4;
    expect_fail_at(&b, 4, "unsupported GGUF version 4");
    b = b_header(0, 0);
    uint32_t be3 = 0x03000000u;
    memcpy(b.p + 4, &be3, 4);
    expect_fail_at(&b, 4, "big-endian");
    b = (buf){0};
    expect_fail_at(&b, 0, "magic: needs 4 bytes");
}

static void test_huge_counts(void **state) {
    (void)state;
    buf b = b_header(0, 1ull << 60);
    expect_fail_at(&b, 16, "n_kv 1152921504606846976 is too large");
    b = b_header(UINT64_MAX, 0);
    expect_fail_at(&b, 8, "n_tensors 18446744073709551615 is too large");
    /* one kv fits by the count bound but the key length lies */
    b = b_header(0, 1);
    b_u64(&b, 9999999);
    b_put(&b, "abcdefgh", 8);
    expect_fail_at(&b, 24, "kv #0: key length 9999999 runs past end of file");
    /* a string value that lies */
    b = b_header(0, 1);
    b_str(&b, "s");
    b_u32(&b, QW_GGUF_STRING);
    b_u64(&b, 1ull << 62);
    expect_fail_at(&b, 37, "kv #0 's': string value length 4611686018427387904 runs past end of file");
    /* a numeric array whose count * element size overflows */
    b = b_header(0, 1);
    b_str(&b, "arr");
    b_u32(&b, QW_GGUF_ARRAY);
    b_u32(&b, QW_GGUF_UINT64);
    b_u64(&b, (1ull << 61) + 1);
    expect_fail_at(&b, 51, "kv #0 'arr': array: 2305843009213693953 elements of 8 bytes run past end of file");
    /* a string array with one element lying */
    b = b_header(0, 1);
    b_str(&b, "tokenizer.ggml.tokens");
    b_u32(&b, QW_GGUF_ARRAY);
    b_u32(&b, QW_GGUF_STRING);
    b_u64(&b, 3);
    b_str(&b, "a");
    size_t el = b.n;
    b_u64(&b, 9999999);
    b_str(&b, "c");
    expect_fail_at(&b, (long)el,
                   "kv #0 'tokenizer.ggml.tokens': string array: string element 1 length 9999999 runs past end of file");
    /* a string array count larger than the bytes could hold */
    b = b_header(0, 1);
    b_str(&b, "t");
    b_u32(&b, QW_GGUF_ARRAY);
    b_u32(&b, QW_GGUF_STRING);
    b_u64(&b, 1000000);
    b_str(&b, "a");
    expect_fail_at(&b, -1, "1000000 strings cannot fit");
}

static void test_bad_values(void **state) {
    (void)state;
    buf b = b_header(0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_u32(&b, 0);
    expect_fail_at(&b, 33, "kv #0 'k': invalid value type 13");
    b = b_header(0, 1);
    b_str(&b, "k");
    b_u32(&b, QW_GGUF_ARRAY);
    b_u32(&b, 77);
    b_u64(&b, 0);
    expect_fail_at(&b, 37, "invalid array element type 77");
    b = b_header(0, 1);
    b_str(&b, "flag");
    b_u32(&b, QW_GGUF_BOOL);
    b_u8(&b, 2);
    expect_fail_at(&b, 40, "kv #0 'flag': bool value 2 is not 0 or 1");
    b = b_header(0, 1);
    b_str(&b, "flags");
    b_u32(&b, QW_GGUF_ARRAY);
    b_u32(&b, QW_GGUF_BOOL);
    b_u64(&b, 3);
    b_put(&b, "\x01\x00\x07", 3);
    expect_fail_at(&b, 55, "bool element 2 has value 7");
    b = b_header(0, 2);
    b_kv_u32(&b, "dup.key", 1);
    b_kv_u32(&b, "dup.key", 2);
    expect_fail_at(&b, 47, "kv #1 'dup.key': duplicate key (first at kv #0)");
    b = b_header(0, 1);
    b_str(&b, "");
    b_u32(&b, QW_GGUF_UINT32);
    b_u32(&b, 0);
    expect_fail_at(&b, 24, "empty key");
    b = b_header(0, 1);
    b_u64(&b, 3);
    b_put(&b, "a\0b", 3);
    b_u32(&b, QW_GGUF_UINT32);
    b_u32(&b, 0);
    expect_fail_at(&b, 24, "key contains a NUL byte");
    /* nested arrays deeper than the limit */
    b = b_header(0, 1);
    b_str(&b, "deep");
    b_u32(&b, QW_GGUF_ARRAY);
    for (int k = 0; k < 12; k++) b_u32(&b, QW_GGUF_ARRAY), b_u64(&b, 1);
    b_u32(&b, QW_GGUF_UINT8), b_u64(&b, 0);
    expect_fail_at(&b, -1, "arrays nested deeper than");
}

static void test_bad_alignment(void **state) {
    (void)state;
    const uint32_t bad[] = {0, 3, 48};
    for (int k = 0; k < 3; k++) {
        buf b = b_header(0, 1);
        b_kv_u32(&b, "general.alignment", bad[k]);
        char want[80];
        snprintf(want, sizeof want, "general.alignment %u is not a power of two", bad[k]);
        expect_fail_at(&b, 53, want);
    }
    buf b = b_header(0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, QW_GGUF_UINT64);
    b_u64(&b, 32);
    expect_fail_at(&b, 53, "general.alignment must be of type u32, found u64");
}

/* One tensor info + padding + data, with knobs to break each field. */
static buf tensor_file(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data_bytes) {
    buf b = b_header(1, 0);
    b_tensor(&b, name, n_dims, ne, type, off);
    b_pad(&b, 32);
    for (size_t k = 0; k < data_bytes; k++) b_u8(&b, 0);
    return b;
}

static void test_bad_tensors(void **state) {
    (void)state;
    const uint64_t ne[] = {32, 2, 1, 1, 1};
    qw_error err = {{0}};
    buf b = tensor_file("w", 2, ne, T_F32, 0, 256);
    qw_gguf *g = open_buf(&b, &err); /* the control: valid */
    if (!g) fail_msg("%s", err.msg);
    qw_gguf_close(g);
    free(b.p);

    b = tensor_file("w", 0, ne, T_F32, 0, 256);
    expect_fail_at(&b, 33, "tensor 'w' (#0): n_dims 0 out of range 1..4");
    b = tensor_file("w", 5, ne, T_F32, 0, 256);
    expect_fail_at(&b, 33, "n_dims 5 out of range");
    const uint64_t ne0[] = {32, 0};
    b = tensor_file("w", 2, ne0, T_F32, 0, 256);
    expect_fail_at(&b, 45, "dimension 1 is 0");
    const uint64_t huge[] = {1ull << 40, 1ull << 40};
    b = tensor_file("w", 2, huge, T_F32, 0, 256);
    expect_fail_at(&b, 45, "element count overflows at dimension 1");
    b = tensor_file("w", 2, ne, 99, 0, 256);
    expect_fail_at(&b, 53, "unknown tensor type 99");
    b = tensor_file("w", 2, ne, 5, 0, 256); /* a retired ggml id */
    expect_fail_at(&b, 53, "unknown tensor type 5");
    const uint64_t ne33[] = {33, 2};
    b = tensor_file("w", 2, ne33, T_Q8_0, 0, 256);
    expect_fail_at(&b, 37, "ne[0]=33 is not a multiple of the q8_0 block size 32");
    b = tensor_file("blk.0.attn_q.weight", 2, ne, T_F32, 16, 512);
    expect_fail_at(&b, 75, "tensor 'blk.0.attn_q.weight' (#0): offset 16 not aligned to 32");
    b = tensor_file("w", 2, ne, T_F32, 0, 255);
    expect_fail_at(&b, 57, "runs past end of file");
    b = tensor_file("w", 2, ne, T_F32, UINT64_MAX - 31, 256);
    expect_fail_at(&b, 57, "runs past end of file");
    /* tensor infos end, data section padding missing */
    b = b_header(1, 0);
    b_tensor(&b, "w", 1, ne, T_F32, 0);
    expect_fail_at(&b, 57, "data section (aligned to 32) starts at 64, past end of file");

    /* duplicate name, overlapping data */
    b = b_header(2, 0);
    b_tensor(&b, "same", 1, ne, T_F32, 0);
    size_t second = b.n;
    b_tensor(&b, "same", 1, ne, T_F32, 128);
    b_pad(&b, 32);
    for (int k = 0; k < 256; k++) b_u8(&b, 0);
    expect_fail_at(&b, (long)second, "tensor 'same' (#1): duplicate tensor name (first at tensor #0)");
    b = b_header(2, 0);
    b_tensor(&b, "a", 2, ne, T_F32, 0); /* 256 bytes */
    b_tensor(&b, "b", 1, ne, T_F32, 224);
    b_pad(&b, 32);
    for (int k = 0; k < 512; k++) b_u8(&b, 0);
    expect_fail_at(&b, -1, "tensor 'b' (#1): data at offset 224 overlaps tensor 'a' (#0)");
}

/* Cut a real file at every length before the end of the last tensor's data:
 * every cut must fail cleanly, naming the file. */
static void test_truncation(void **state) {
    (void)state;
    qw_error err = {{0}};
    qw_gguf_writer *w = qw_gguf_writer_new();
    qw_gguf_set_str(w, "general.architecture", "qwen3moe");
    qw_gguf_set_u32(w, "qwen3moe.block_count", 2);
    qw_gguf_set_f32(w, "qwen3moe.rope.freq_base", 1e6f);
    qw_gguf_set_bool(w, "b", false);
    const char *toks[] = {"a", "bc", "", "def"};
    qw_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    const int32_t tt[] = {1, 2, 3, 4};
    qw_gguf_set_arr(w, "tokenizer.ggml.token_type", QW_GGUF_INT32, tt, 4);
    const uint64_t ne1[] = {8}, ne2[] = {32, 2};
    qw_gguf_add_tensor(w, "x", T_F32, 1, ne1, &err);
    qw_gguf_add_tensor(w, "y", T_Q8_0, 2, ne2, &err);
    const char *path = tmp_path("trunc.gguf");
    assert_int_equal(qw_gguf_writer_write(w, path, fill_pattern, NULL, &err), 0);
    qw_gguf_writer_free(w);
    size_t size;
    uint8_t *full = read_all(path, &size);
    qw_gguf *g = qw_gguf_open_memory(full, size, "trunc.gguf", &err);
    assert_non_null(g);
    const qw_gguf_tensor *last = qw_gguf_tensor_at(g, 1);
    size_t data_end = qw_gguf_data_offset(g) + last->offset + last->nbytes;
    qw_gguf_close(g);
    for (size_t len = 0; len < data_end; len++) {
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, full, len);
        memset(&err, 0, sizeof err);
        g = qw_gguf_open_memory(cut, len, "trunc.gguf", &err);
        if (g) fail_msg("truncated at %zu of %zu parsed", len, size);
        if (strncmp(err.msg, "trunc.gguf: at offset ", 22) != 0) fail_msg("cut %zu: %s", len, err.msg);
        if (!strstr(err.msg, "past end of file") && !strstr(err.msg, "cannot fit") &&
            !strstr(err.msg, "too large for the file"))
            fail_msg("cut %zu: %s", len, err.msg);
        free(cut);
    }
    /* The file itself, cut on disk. */
    assert_int_equal(truncate(path, (off_t)(data_end - 1)), 0);
    g = qw_gguf_open(path, &err);
    assert_null(g);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "tensor 'y' (#1)"));
    free(full);
}

static void test_open_errors(void **state) {
    (void)state;
    qw_error err = {{0}};
    const char *path = tmp_path("does-not-exist.gguf");
    assert_null(qw_gguf_open(path, &err));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, strerror(ENOENT)));
    assert_null(qw_gguf_open(g_dir, &err));
    assert_non_null(strstr(err.msg, "not a regular file"));
    const char *empty = tmp_path("empty.gguf");
    FILE *f = fopen(empty, "wb");
    fclose(f);
    assert_null(qw_gguf_open(empty, &err));
    assert_non_null(strstr(err.msg, "file is empty"));
    assert_non_null(strstr(err.msg, empty));
}

/* A Qwen3-sized vocabulary (151,936 strings) must parse quickly: the string
 * array is walked once and copied into one block. */
static void test_big_vocab_speed(void **state) {
    (void)state;
    enum { N = 151936 };
    char **strs = malloc(N * sizeof *strs);
    char *store = malloc((size_t)N * 16);
    for (int k = 0; k < N; k++) {
        strs[k] = store + (size_t)k * 16;
        snprintf(strs[k], 16, "tok%d", k);
    }
    qw_gguf_writer *w = qw_gguf_writer_new();
    qw_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, N);
    qw_error err = {{0}};
    const char *path = tmp_path("vocab.gguf");
    assert_int_equal(qw_gguf_writer_write(w, path, NULL, NULL, &err), 0);
    qw_gguf_writer_free(w);
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = qw_time_s();
        qw_gguf *g = qw_gguf_open(path, &err);
        double dt = qw_time_s() - t0;
        assert_non_null(g);
        if (dt < best) best = dt;
        size_t len;
        int64_t i = qw_gguf_find_key(g, "tokenizer.ggml.tokens");
        assert_string_equal(qw_gguf_arr_str(g, (size_t)i, 151935, &len), "tok151935");
        assert_string_equal(qw_gguf_arr_str(g, (size_t)i, 77, &len), "tok77");
        qw_gguf_close(g);
    }
    /* Speed is reported, never asserted: tests check behaviour only. */
    print_message("vocab of %d strings parsed in %.1f ms\n", N, best * 1e3);
    free(store);
    free(strs);
}

/* The fuzz seeds are meant to be valid files (the fuzzer mutates from them):
 * they must parse.  Paths are relative to the repo root (tests/run.sh's cwd). */
static void test_fuzz_seeds_parse(void **state) {
    (void)state;
    const char *seeds[] = {"fuzz/seeds/gguf/full.gguf", "fuzz/seeds/gguf/align1.gguf",
                           "fuzz/seeds/gguf/v2_nested.gguf"};
    for (int k = 0; k < 3; k++) {
        qw_error err = {{0}};
        qw_gguf *g = qw_gguf_open(seeds[k], &err);
        if (!g) fail_msg("%s (run from the repo root)", err.msg);
        assert_true(qw_gguf_n_kv(g) > 0);
        qw_gguf_close(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),        cmocka_unit_test(test_custom_alignment),
        cmocka_unit_test(test_writer_errors),    cmocka_unit_test(test_handmade_values),
        cmocka_unit_test(test_bad_magic_version), cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_values),       cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensors),      cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_open_errors),      cmocka_unit_test(test_big_vocab_speed),
        cmocka_unit_test(test_fuzz_seeds_parse),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
