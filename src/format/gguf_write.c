/* gguf_write.c — GGUF v3 writer.
 *
 * The writer collects metadata and tensor declarations in memory, then streams
 * the file in ggml's layout so llama.cpp loads it:
 *     header | kvs | tensor infos | pad to alignment | tensor 0 | pad | tensor 1 | pad ...
 * Every tensor's data starts at a multiple of the alignment (relative to the
 * data section, which itself starts at an aligned file offset), and like ggml
 * the last tensor is padded too.
 *
 * Each kv's value is serialised once, when it is set, into a byte blob in its
 * on-disk encoding (type-specific; arrays carry their element type and count),
 * so writing is a plain copy and replacing a key swaps the blob in place (the
 * key keeps its original position).  Tensor bytes come from the caller's fill
 * callback one tensor at a time into a single reused buffer sized for the
 * largest tensor, so peak memory is that one tensor, not the model.
 *
 * Crash safety: output goes to "<path>.tmp.<pid>" and is renamed over `path`
 * only after every byte was written and the stream closed cleanly; any
 * failure unlinks the temporary.  (No fsync: the goal is "never a half-written
 * file at path after an error", not durability across power loss.)
 *
 * Misuse that is a programming error (NULL key, a non-numeric element type to
 * qw_gguf_set_arr) trips QW_ASSERT; bad tensor declarations and I/O failures
 * are reported through qw_error.
 */
#include "qwisp/gguf.h"

#include "format/ggml_types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ggml keeps tensor names in a fixed 64-byte field (with the NUL). */
#define GG_MAX_TENSOR_NAME 63

typedef struct wkv {
    char *key;
    qw_gguf_vtype type;
    uint8_t *blob; /* value in file encoding (without the u32 type) */
    size_t blob_len;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[QW_GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset; /* assigned at write time */
} wtensor;

struct qw_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

/* ---------------------------------------------------------------- blobs */

typedef struct blob {
    uint8_t *p;
    size_t len, cap;
} blob;

static void blob_put(blob *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->len + n) nc *= 2;
        b->p = qw_xrealloc(b->p, nc);
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void blob_u32(blob *b, uint32_t v) { blob_put(b, &v, 4); }
static void blob_u64(blob *b, uint64_t v) { blob_put(b, &v, 8); }
static void blob_str(blob *b, const char *s, size_t n) {
    blob_u64(b, n);
    blob_put(b, s, n);
}

/* ------------------------------------------------------------ writer new */

qw_gguf_writer *qw_gguf_writer_new(void) { return qw_xcalloc(1, sizeof(qw_gguf_writer)); }

void qw_gguf_writer_free(qw_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Stores (key, type, blob), replacing an existing key's value in place.
 * Takes ownership of b->p. */
static void put_kv(qw_gguf_writer *w, const char *key, qw_gguf_vtype type, blob *b) {
    QW_ASSERT(key != NULL && key[0] != '\0');
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].blob);
            w->kv[i].type = type;
            w->kv[i].blob = b->p;
            w->kv[i].blob_len = b->len;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? w->cap_kv * 2 : 32;
        w->kv = qw_xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    w->kv[w->n_kv++] = (wkv){.key = qw_xstrdup(key), .type = type, .blob = b->p, .blob_len = b->len};
}

static void set_scalar(qw_gguf_writer *w, const char *key, qw_gguf_vtype t, const void *v) {
    blob b = {0};
    blob_put(&b, v, qw_gguf_vtype_size(t));
    put_kv(w, key, t, &b);
}

void qw_gguf_set_u32(qw_gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, QW_GGUF_UINT32, &v); }
void qw_gguf_set_i32(qw_gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, QW_GGUF_INT32, &v); }
void qw_gguf_set_u64(qw_gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, QW_GGUF_UINT64, &v); }
void qw_gguf_set_f32(qw_gguf_writer *w, const char *key, float v) { set_scalar(w, key, QW_GGUF_FLOAT32, &v); }

void qw_gguf_set_bool(qw_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    set_scalar(w, key, QW_GGUF_BOOL, &b);
}

void qw_gguf_set_str(qw_gguf_writer *w, const char *key, const char *v) {
    QW_ASSERT(v != NULL);
    blob b = {0};
    blob_str(&b, v, strlen(v));
    put_kv(w, key, QW_GGUF_STRING, &b);
}

void qw_gguf_set_arr(qw_gguf_writer *w, const char *key, qw_gguf_vtype elem_type, const void *data,
                     uint64_t n) {
    size_t esz = qw_gguf_vtype_size(elem_type);
    QW_ASSERT(esz != 0);                      /* strings: qw_gguf_set_arr_str; no nested arrays */
    QW_ASSERT(n == 0 || data != NULL);
    QW_ASSERT(n <= SIZE_MAX / esz);
    if (elem_type == QW_GGUF_BOOL)            /* the reader (and ggml) reject anything but 0/1 */
        for (uint64_t i = 0; i < n; i++) QW_ASSERT(((const uint8_t *)data)[i] <= 1);
    blob b = {0};
    blob_u32(&b, (uint32_t)elem_type);
    blob_u64(&b, n);
    blob_put(&b, data, (size_t)n * esz);
    put_kv(w, key, QW_GGUF_ARRAY, &b);
}

void qw_gguf_set_arr_str(qw_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    QW_ASSERT(n == 0 || strs != NULL);
    blob b = {0};
    blob_u32(&b, QW_GGUF_STRING);
    blob_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) {
        QW_ASSERT(strs[i] != NULL);
        blob_str(&b, strs[i], strlen(strs[i]));
    }
    put_kv(w, key, QW_GGUF_ARRAY, &b);
}

/* ---------------------------------------------------------------- tensors */

int qw_gguf_add_tensor(qw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const uint64_t *ne, qw_error *err) {
    if (!name || !name[0]) return qw_fail(err, "gguf writer: tensor name is empty");
    if (strlen(name) > GG_MAX_TENSOR_NAME)
        return qw_fail(err, "gguf writer: tensor '%s': name longer than %d bytes", name, GG_MAX_TENSOR_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return qw_fail(err, "gguf writer: duplicate tensor name '%s' (first is #%zu)", name, i);
    if (n_dims < 1 || n_dims > QW_GGUF_MAX_DIMS)
        return qw_fail(err, "gguf writer: tensor '%s': n_dims %u out of range 1..%d", name, n_dims,
                       QW_GGUF_MAX_DIMS);
    if (!qw_ggml_type_info_of(type))
        return qw_fail(err, "gguf writer: tensor '%s': unknown type %u", name, type);
    uint64_t nbytes;
    const char *why = NULL;
    if (qw_ggml_tensor_nbytes(type, n_dims, ne, &nbytes, &why))
        return qw_fail(err, "gguf writer: tensor '%s' (%s): bad shape: %s", name, qw_ggml_type_name(type), why);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? w->cap_t * 2 : 64;
        w->t = qw_xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = qw_xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < QW_GGUF_MAX_DIMS; d++) t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    return (int)w->n_t++;
}

/* ------------------------------------------------------------------ write */

typedef struct wout {
    FILE *f;
    uint64_t written;
    int failed_errno; /* first write error, 0 if none */
} wout;

static void out_put(wout *o, const void *p, size_t n) {
    if (o->failed_errno || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed_errno = errno ? errno : EIO;
    o->written += n;
}

static void out_u32(wout *o, uint32_t v) { out_put(o, &v, 4); }
static void out_u64(wout *o, uint64_t v) { out_put(o, &v, 8); }

static void out_pad(wout *o, size_t align) {
    static const uint8_t zeros[256];
    size_t pad = (align - o->written % align) % align;
    while (pad) {
        size_t n = pad < sizeof zeros ? pad : sizeof zeros;
        out_put(o, zeros, n);
        pad -= n;
    }
}

/* The alignment the file will use: general.alignment (must be a u32 power of
 * two, as ggml requires) or the default. */
static int writer_alignment(const qw_gguf_writer *w, const char *path, size_t *align, qw_error *err) {
    *align = QW_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        if (w->kv[i].type != QW_GGUF_UINT32)
            return qw_fail(err, "%s: general.alignment must be set with qw_gguf_set_u32, found %s", path,
                           qw_gguf_vtype_name(w->kv[i].type));
        uint32_t a;
        memcpy(&a, w->kv[i].blob, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return qw_fail(err, "%s: general.alignment %u is not a power of two", path, a);
        *align = a;
    }
    return 0;
}

/* Writes header, kvs, tensor infos and the padding before the data section. */
static void write_meta(wout *o, const qw_gguf_writer *w) {
    out_u32(o, QW_GGUF_MAGIC);
    out_u32(o, 3);
    out_u64(o, w->n_t);
    out_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        out_u64(o, strlen(kv->key));
        out_put(o, kv->key, strlen(kv->key));
        out_u32(o, (uint32_t)kv->type);
        out_put(o, kv->blob, kv->blob_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        out_u64(o, strlen(t->name));
        out_put(o, t->name, strlen(t->name));
        out_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) out_u64(o, t->ne[d]);
        out_u32(o, t->type);
        out_u64(o, t->offset);
    }
}

int qw_gguf_writer_write(qw_gguf_writer *w, const char *path, qw_gguf_fill_fn fill, void *ctx,
                         qw_error *err) {
    size_t align;
    if (writer_alignment(w, path, &align, err)) return -1;

    /* Lay tensors out in declaration order, each padded to the alignment. */
    uint64_t off = 0, max_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = w->t[i].nbytes + (align - w->t[i].nbytes % align) % align;
        if (padded < w->t[i].nbytes || off > UINT64_MAX - padded)
            return qw_fail(err, "%s: total tensor data size overflows", path);
        off += padded;
        if (w->t[i].nbytes > max_bytes) max_bytes = w->t[i].nbytes;
    }

    qw_atomic_file af;
    FILE *f = qw_atomic_open(&af, path, err);
    if (!f) return -1;
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    wout o = {.f = f};
    uint8_t *buf = NULL;
    int rc = -1;

    write_meta(&o, w);
    out_pad(&o, align);
    if (max_bytes) {
        buf = malloc((size_t)max_bytes);
        if (!buf) {
            qw_fail(err, "%s: out of memory for a %llu-byte tensor buffer", path, (unsigned long long)max_bytes);
            goto done;
        }
    }
    uint64_t data_start = o.written;
    for (size_t i = 0; i < w->n_t && !o.failed_errno; i++) {
        const wtensor *t = &w->t[i];
        QW_ASSERT(o.written - data_start == t->offset);
        if (fill) {
            qw_error ferr = {{0}};
            if (fill(ctx, (int)i, buf, (size_t)t->nbytes, &ferr) != 0) {
                qw_fail(err, "%s: tensor '%s' (#%zu): %s", path, t->name, i,
                        ferr.msg[0] ? ferr.msg : "fill callback failed");
                goto done;
            }
        } else {
            memset(buf, 0, (size_t)t->nbytes);
        }
        out_put(&o, buf, (size_t)t->nbytes);
        out_pad(&o, align);
    }
    if (o.failed_errno) {
        qw_fail(err, "%s: write failed: %s", path, strerror(o.failed_errno));
        goto done;
    }
    rc = qw_atomic_commit(&af, err); /* flush, close, rename; removes the temporary on failure */
done:
    free(buf);
    if (af.f) qw_atomic_abort(&af);
    return rc;
}
