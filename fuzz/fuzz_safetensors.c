/* fuzz_safetensors.c — libFuzzer target for the safetensors header reader
 * (src/format/safetensors.c).
 *
 * Parses the input with qw_safetensors_open_memory (the in-memory entry point:
 * no file, no mmap, so libFuzzer's exactly-sized buffer lets ASan see any read
 * past the image).  On failure the message must be non-empty and name the
 * image.  On success it walks the tensor table and traps if a promise of
 * safetensors.h is broken:
 *   - the table is sorted by name, strictly (no duplicates), and
 *     qw_safetensors_find(name) returns the same entry; tensor_at(n) is NULL;
 *   - dtype is known, 0 <= n_dims <= QW_ST_MAX_DIMS, every dim >= 0,
 *     n_elems == prod(shape), nbytes == n_elems * dtype size;
 *   - every tensor's bytes lie inside the data buffer (after the 8-byte length
 *     and the JSON header), so touching all of them is in bounds;
 *   - qw_st_read_f32 converts F32/F16/BF16 (a bounded prefix, and the last
 *     element), refuses other dtypes and out-of-range element ranges with a
 *     message.
 *
 *     make fuzz && build-fuzz/bin/fuzz_safetensors fuzz/seeds/safetensors
 */
#include "qwisp/safetensors.h"

#include <stdint.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

#define NAME "fuzz.safetensors"

static volatile uint64_t g_sink;

static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += b[i];
    g_sink += s;
}

static void walk_tensor(const qw_safetensors *st, size_t i, const uint8_t *buf_lo, const uint8_t *buf_hi) {
    const qw_st_tensor *t = qw_safetensors_tensor_at(st, i);
    CHECK(t && t->name && t->file && !strcmp(t->file, NAME));
    CHECK(qw_safetensors_find(st, t->name) == t);
    if (i > 0) CHECK(strcmp(qw_safetensors_tensor_at(st, i - 1)->name, t->name) < 0);
    size_t esz = qw_st_dtype_size(t->dtype);
    CHECK(esz > 0 && strcmp(qw_st_dtype_name(t->dtype), "?") != 0);
    CHECK(t->n_dims >= 0 && t->n_dims <= QW_ST_MAX_DIMS);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        CHECK(t->shape[d] >= 0);
        n *= (uint64_t)t->shape[d]; /* cannot wrap: the reader checked it */
    }
    CHECK(t->n_elems >= 0 && (uint64_t)t->n_elems == n);
    CHECK((uint64_t)t->nbytes == n * esz);
    const uint8_t *p = t->data;
    CHECK(p >= buf_lo && p <= buf_hi && t->nbytes <= (size_t)(buf_hi - p));
    touch(p, t->nbytes);

    qw_error err = {{0}};
    float out[64];
    int64_t k = t->n_elems < 64 ? t->n_elems : 64;
    bool conv = t->dtype == QW_ST_F32 || t->dtype == QW_ST_F16 || t->dtype == QW_ST_BF16;
    int rc = qw_st_read_f32(t, 0, k, out, &err);
    CHECK(conv ? rc == 0 : (rc != 0 && err.msg[0]));
    if (conv && t->n_elems > 0) CHECK(qw_st_read_f32(t, t->n_elems - 1, 1, out, &err) == 0);
    err.msg[0] = '\0';
    CHECK(qw_st_read_f32(t, t->n_elems, 1, out, &err) != 0 && err.msg[0]);
    err.msg[0] = '\0';
    CHECK(qw_st_read_f32(t, -1, 1, out, &err) != 0 && err.msg[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_error err = {{0}};
    qw_safetensors *st = qw_safetensors_open_memory(data, size, NAME, &err);
    if (!st) {
        CHECK(err.msg[0] && strstr(err.msg, NAME));
        return 0;
    }
    CHECK(size >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | data[i];
    CHECK(hl <= size - 8);
    const uint8_t *lo = data + 8 + hl, *hi = data + size;
    size_t n = qw_safetensors_n_tensors(st);
    for (size_t i = 0; i < n; i++) walk_tensor(st, i, lo, hi);
    CHECK(qw_safetensors_tensor_at(st, n) == NULL);
    qw_safetensors_close(st);
    return 0;
}
