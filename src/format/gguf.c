/* gguf.c — GGUF (v2/v3) reader: mmap, parse, validate, accessors.
 *
 * Layout of a GGUF file (all little-endian):
 *     header       u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 *     n_kv kvs     string key, u32 value type, value
 *     n_tensors    string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
 *     tensor infos u64 offset (relative to the data section)
 *     padding      to general.alignment (default 32)
 *     data         tensor bytes at their offsets
 * A string is u64 length + bytes (no NUL).  An array value is u32 element type
 * + u64 count + elements; elements may be strings or (rarely) arrays again.
 *
 * Design.  The whole image is parsed once by a bounds-checked cursor (rd_*):
 * every read first proves that the bytes exist, so nothing past the end is
 * ever touched, and every failure produces one message
 *     "<file>: at offset <N>: <subject>: <what went wrong>"
 * where N is where the offending field starts.  Nothing is allocated from a
 * count before the bytes that count describes have been seen: the kv and
 * tensor tables grow as entries are actually parsed, and string arrays are
 * walked once to validate and measure before their storage is allocated, so a
 * lying count cannot cause a large allocation.
 *
 * Storage.  Keys, tensor names and string values are copied NUL-terminated
 * into a chunked arena (pointers stay valid until close).  A string array gets
 * one contiguous character block plus a {ptr,len} table, so element j is O(1).
 * Numeric scalars and arrays are not copied: the kv remembers where its bytes
 * lie in the image (read with memcpy: they may be unaligned).  Keys and tensor
 * names are indexed by small open-addressing hash tables (uniqueness is
 * checked with them during the parse, lookups use them afterwards).
 *
 * Invariants after a successful open: every tensor has a known type, 1..4
 * non-zero dims, ne[0] a multiple of its block size, an offset aligned to the
 * file's alignment, data inside the file, and no two tensors' bytes overlap.
 */
#include "qwisp/gguf.h"

#include "format/ggml_types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Nested arrays are legal GGUF but nobody writes them; a depth limit keeps a
 * hostile file from recursing the parser off the stack. */
#define GG_MAX_ARRAY_DEPTH 8
/* Smallest possible encodings, used to bound counts against remaining bytes. */
#define GG_MIN_KV_BYTES 13     /* u64 key len + u32 type + 1-byte value */
#define GG_MIN_TENSOR_BYTES 32 /* u64 name len + u32 n_dims + u64 ne + u32 type + u64 offset */

/* ------------------------------------------------------------------ arena */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used;
    max_align_t data[];
} arena_chunk;

typedef struct arena {
    arena_chunk *head;
} arena;

#define ARENA_CHUNK 65536

/* Returns n bytes (8-aligned) that live until arena_free, or NULL on OOM. */
static void *arena_alloc(arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        if (cap > SIZE_MAX - sizeof(arena_chunk)) return NULL;
        arena_chunk *nc = malloc(sizeof(arena_chunk) + cap);
        if (!nc) return NULL;
        nc->cap = cap;
        nc->used = 0;
        /* A big dedicated chunk goes behind the current one so the current
         * chunk's free space keeps being used for small strings. */
        if (c && n > ARENA_CHUNK) {
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (arena_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ------------------------------------------------------------- name index */

/* Open addressing, linear probing, load <= 1/2.  Stores (name, index). */
typedef struct nidx_slot {
    const char *name;
    size_t idx;
} nidx_slot;

typedef struct nidx {
    nidx_slot *slots;
    size_t cap, count;
} nidx;

static uint64_t str_hash(const char *s) { return qw_hash64(s, strlen(s), 0x9e3779b97f4a7c15ull); }

static const nidx_slot *nidx_find(const nidx *x, const char *name) {
    if (!x->cap) return NULL;
    size_t mask = x->cap - 1;
    for (size_t i = str_hash(name) & mask;; i = (i + 1) & mask) {
        if (!x->slots[i].name) return NULL;
        if (strcmp(x->slots[i].name, name) == 0) return &x->slots[i];
    }
}

/* Inserts (name must not be present); -1 on OOM. */
static int nidx_insert(nidx *x, const char *name, size_t idx) {
    if ((x->count + 1) * 2 > x->cap) {
        size_t ncap = x->cap ? x->cap * 2 : 64;
        nidx_slot *ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < x->cap; i++) {
            if (!x->slots[i].name) continue;
            size_t j = str_hash(x->slots[i].name) & (ncap - 1);
            while (ns[j].name) j = (j + 1) & (ncap - 1);
            ns[j] = x->slots[i];
        }
        free(x->slots);
        x->slots = ns;
        x->cap = ncap;
    }
    size_t mask = x->cap - 1, i = str_hash(name) & mask;
    while (x->slots[i].name) i = (i + 1) & mask;
    x->slots[i].name = name;
    x->slots[i].idx = idx;
    x->count++;
    return 0;
}

/* ----------------------------------------------------------------- handle */

typedef struct gg_str {
    const char *s;
    size_t len;
} gg_str;

typedef struct gg_kv {
    const char *key;
    qw_gguf_vtype type;
    qw_gguf_vtype elem_type; /* arrays only */
    uint64_t n;              /* arrays: element count */
    const uint8_t *val;      /* scalars and numeric arrays: bytes in the image */
    gg_str str;              /* STRING */
    gg_str *strs;            /* string arrays: n entries (arena) */
} gg_kv;

typedef struct gg_tensor {
    qw_gguf_tensor t;
    uint64_t off_field; /* file offset of the tensor's offset field (messages) */
} gg_tensor;

struct qw_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    gg_kv *kv;
    size_t n_kv, cap_kv;
    gg_tensor *tensors;
    size_t n_tensors, cap_tensors;
    nidx key_idx, tensor_idx;
    arena ar;
};

/* ----------------------------------------------------------------- cursor */

typedef struct rd {
    const uint8_t *p;
    size_t size, pos;
    const char *name; /* file name for messages */
    qw_error *err;
    char subject[160]; /* "kv #5 'tokenizer.ggml.tokens'" — prefixed to messages */
} rd;

static int fail_at(rd *r, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(rd *r, size_t off, const char *fmt, ...) {
    char msg[QW_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->subject[0])
        return qw_fail(r->err, "%s: at offset %zu: %s: %s", r->name, off, r->subject, msg);
    return qw_fail(r->err, "%s: at offset %zu: %s", r->name, off, msg);
}

static void set_subject(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_subject(rd *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->subject, sizeof r->subject, fmt, ap);
    va_end(ap);
}

static size_t rd_left(const rd *r) { return r->size - r->pos; }

static int rd_need(rd *r, uint64_t n, const char *field) {
    if (n > rd_left(r))
        return fail_at(r, r->pos, "%s: needs %llu bytes, runs past end of file (size %zu)", field,
                       (unsigned long long)n, r->size);
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *field) {
    if (rd_need(r, 4, field)) return -1;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *field) {
    if (rd_need(r, 8, field)) return -1;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* Reads a string (u64 len + bytes) and copies it NUL-terminated into the arena. */
static int rd_str(rd *r, arena *ar, gg_str *out, const char *field) {
    size_t at = r->pos;
    uint64_t len;
    if (rd_u64(r, &len, field)) return -1;
    if (len > rd_left(r))
        return fail_at(r, at, "%s length %llu runs past end of file (%zu bytes left)", field,
                       (unsigned long long)len, rd_left(r));
    char *s = arena_alloc(ar, (size_t)len + 1);
    if (!s) return fail_at(r, at, "%s: out of memory copying %llu bytes", field, (unsigned long long)len);
    memcpy(s, r->p + r->pos, (size_t)len);
    s[len] = '\0';
    r->pos += (size_t)len;
    out->s = s;
    out->len = (size_t)len;
    return 0;
}

/* --------------------------------------------------------------- values */

static const char *const g_vtype_names[QW_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

const char *qw_gguf_vtype_name(qw_gguf_vtype t) {
    return (unsigned)t < QW_GGUF_VTYPE_COUNT ? g_vtype_names[t] : "invalid";
}

size_t qw_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case QW_GGUF_UINT8: case QW_GGUF_INT8: case QW_GGUF_BOOL: return 1;
    case QW_GGUF_UINT16: case QW_GGUF_INT16: return 2;
    case QW_GGUF_UINT32: case QW_GGUF_INT32: case QW_GGUF_FLOAT32: return 4;
    case QW_GGUF_UINT64: case QW_GGUF_INT64: case QW_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Validates and skips n packed scalars of type t starting at r->pos. */
static int skip_scalars(rd *r, uint32_t t, uint64_t n, const char *field) {
    size_t esz = qw_gguf_vtype_size(t);
    if (n > rd_left(r) / esz)
        return fail_at(r, r->pos, "%s: %llu elements of %zu bytes run past end of file (%zu bytes left)",
                       field, (unsigned long long)n, esz, rd_left(r));
    if (t == QW_GGUF_BOOL) {
        for (uint64_t j = 0; j < n; j++) {
            uint8_t b = r->p[r->pos + j];
            if (b > 1) return fail_at(r, r->pos + j, "%s: bool element %llu has value %u, not 0 or 1",
                                      field, (unsigned long long)j, b);
        }
    }
    r->pos += (size_t)(n * esz);
    return 0;
}

/* Walks n strings without copying: validates lengths and sums them.  Used
 * before allocating a string array's storage. */
static int walk_strings(rd *r, uint64_t n, uint64_t *total, const char *field) {
    if (n > rd_left(r) / 8)
        return fail_at(r, r->pos, "%s: %llu strings cannot fit in the %zu bytes left", field,
                       (unsigned long long)n, rd_left(r));
    uint64_t sum = 0;
    for (uint64_t j = 0; j < n; j++) {
        size_t at = r->pos;
        uint64_t len;
        if (rd_left(r) < 8)
            return fail_at(r, at, "%s: string element %llu: length field runs past end of file",
                           field, (unsigned long long)j);
        memcpy(&len, r->p + r->pos, 8);
        r->pos += 8;
        if (len > rd_left(r))
            return fail_at(r, at, "%s: string element %llu length %llu runs past end of file (%zu bytes left)",
                           field, (unsigned long long)j, (unsigned long long)len, rd_left(r));
        r->pos += (size_t)len;
        sum += len + 1; /* cannot overflow: bounded by the image size */
    }
    *total = sum;
    return 0;
}

/* Validates and skips an array body (elem type + count already read). */
static int skip_array(rd *r, uint32_t et, uint64_t n, int depth, const char *field) {
    if (et == QW_GGUF_STRING) {
        uint64_t total;
        return walk_strings(r, n, &total, field);
    }
    if (et == QW_GGUF_ARRAY) {
        if (depth >= GG_MAX_ARRAY_DEPTH)
            return fail_at(r, r->pos, "%s: arrays nested deeper than %d", field, GG_MAX_ARRAY_DEPTH);
        if (n > rd_left(r) / 12)
            return fail_at(r, r->pos, "%s: %llu nested arrays cannot fit in the %zu bytes left", field,
                           (unsigned long long)n, rd_left(r));
        for (uint64_t j = 0; j < n; j++) {
            size_t at = r->pos;
            uint32_t et2;
            uint64_t n2;
            if (rd_u32(r, &et2, field) || rd_u64(r, &n2, field)) return -1;
            if (et2 >= QW_GGUF_VTYPE_COUNT)
                return fail_at(r, at, "%s: nested array %llu has invalid element type %u", field,
                               (unsigned long long)j, et2);
            if (skip_array(r, et2, n2, depth + 1, field)) return -1;
        }
        return 0;
    }
    if (et >= QW_GGUF_VTYPE_COUNT)
        return fail_at(r, r->pos, "%s: invalid element type %u", field, et);
    return skip_scalars(r, et, n, field);
}

/* Copies a (pre-validated by walk_strings) string array into the arena. */
static int copy_strings(rd *r, arena *ar, gg_kv *kv, size_t start, uint64_t total) {
    kv->strs = arena_alloc(ar, (size_t)kv->n * sizeof(gg_str));
    char *chars = arena_alloc(ar, total ? (size_t)total : 1);
    if ((!kv->strs && kv->n) || !chars)
        return fail_at(r, start, "string array of %llu elements: out of memory", (unsigned long long)kv->n);
    size_t pos = start;
    for (uint64_t j = 0; j < kv->n; j++) {
        uint64_t len;
        memcpy(&len, r->p + pos, 8);
        pos += 8;
        memcpy(chars, r->p + pos, (size_t)len);
        chars[len] = '\0';
        kv->strs[j].s = chars;
        kv->strs[j].len = (size_t)len;
        chars += len + 1;
        pos += (size_t)len;
    }
    return 0;
}

/* Parses the value of kv (type already read into kv->type). */
static int parse_value(rd *r, arena *ar, gg_kv *kv) {
    size_t at = r->pos;
    if (kv->type == QW_GGUF_STRING) return rd_str(r, ar, &kv->str, "string value");
    if (kv->type != QW_GGUF_ARRAY) {
        kv->val = r->p + r->pos;
        if (rd_need(r, qw_gguf_vtype_size(kv->type), "value")) return -1;
        if (kv->type == QW_GGUF_BOOL && *kv->val > 1)
            return fail_at(r, at, "bool value %u is not 0 or 1", *kv->val);
        r->pos += qw_gguf_vtype_size(kv->type);
        return 0;
    }
    uint32_t et;
    if (rd_u32(r, &et, "array element type")) return -1;
    if (et >= QW_GGUF_VTYPE_COUNT) return fail_at(r, at, "invalid array element type %u", et);
    kv->elem_type = (qw_gguf_vtype)et;
    if (rd_u64(r, &kv->n, "array length")) return -1;
    size_t body = r->pos;
    kv->val = r->p + body;
    if (et == QW_GGUF_STRING) {
        uint64_t total;
        if (walk_strings(r, kv->n, &total, "string array")) return -1;
        return copy_strings(r, ar, kv, body, total);
    }
    return skip_array(r, et, kv->n, 1, "array");
}

static int parse_kvs(rd *r, qw_gguf *g, uint64_t n_kv) {
    for (uint64_t i = 0; i < n_kv; i++) {
        size_t at = r->pos;
        set_subject(r, "kv #%llu", (unsigned long long)i);
        if (g->n_kv == g->cap_kv) {
            size_t nc = g->cap_kv ? g->cap_kv * 2 : 32;
            gg_kv *nk = realloc(g->kv, nc * sizeof *nk);
            if (!nk) return fail_at(r, at, "out of memory");
            g->kv = nk;
            g->cap_kv = nc;
        }
        gg_kv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof *kv);
        gg_str key;
        if (rd_str(r, &g->ar, &key, "key")) return -1;
        if (key.len == 0) return fail_at(r, at, "empty key");
        if (strlen(key.s) != key.len) return fail_at(r, at, "key contains a NUL byte");
        kv->key = key.s;
        set_subject(r, "kv #%llu '%.80s'", (unsigned long long)i, key.s);
        const nidx_slot *dup = nidx_find(&g->key_idx, key.s);
        if (dup) return fail_at(r, at, "duplicate key (first at kv #%zu)", dup->idx);
        size_t type_at = r->pos;
        uint32_t t;
        if (rd_u32(r, &t, "value type")) return -1;
        if (t >= QW_GGUF_VTYPE_COUNT) return fail_at(r, type_at, "invalid value type %u", t);
        kv->type = (qw_gguf_vtype)t;
        if (parse_value(r, &g->ar, kv)) return -1;
        if (nidx_insert(&g->key_idx, kv->key, g->n_kv)) return fail_at(r, at, "out of memory");
        g->n_kv++;
    }
    r->subject[0] = '\0';
    return 0;
}

/* general.alignment: u32, non-zero power of two; default 32. */
static int read_alignment(rd *r, qw_gguf *g, size_t kv_end) {
    g->alignment = QW_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = qw_gguf_find_key(g, "general.alignment");
    if (i < 0) return 0;
    const gg_kv *kv = &g->kv[i];
    /* kv->val points at the value; report its offset. */
    size_t at = kv->val ? (size_t)(kv->val - r->p) : kv_end;
    if (kv->type != QW_GGUF_UINT32)
        return fail_at(r, at, "general.alignment must be of type u32, found %s",
                       qw_gguf_vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->val, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return fail_at(r, at, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return 0;
}

static int parse_tensor_infos(rd *r, qw_gguf *g, uint64_t n_tensors) {
    for (uint64_t i = 0; i < n_tensors; i++) {
        size_t at = r->pos;
        set_subject(r, "tensor #%llu", (unsigned long long)i);
        if (g->n_tensors == g->cap_tensors) {
            size_t nc = g->cap_tensors ? g->cap_tensors * 2 : 64;
            gg_tensor *nt = realloc(g->tensors, nc * sizeof *nt);
            if (!nt) return fail_at(r, at, "out of memory");
            g->tensors = nt;
            g->cap_tensors = nc;
        }
        gg_tensor *gt = &g->tensors[g->n_tensors];
        qw_gguf_tensor *t = &gt->t;
        memset(gt, 0, sizeof *gt);
        gg_str name;
        if (rd_str(r, &g->ar, &name, "name")) return -1;
        if (strlen(name.s) != name.len) return fail_at(r, at, "name contains a NUL byte");
        t->name = name.s;
        set_subject(r, "tensor '%.80s' (#%llu)", name.s, (unsigned long long)i);
        const nidx_slot *dup = nidx_find(&g->tensor_idx, name.s);
        if (dup) return fail_at(r, at, "duplicate tensor name (first at tensor #%zu)", dup->idx);

        size_t dims_at = r->pos;
        if (rd_u32(r, &t->n_dims, "n_dims")) return -1;
        if (t->n_dims < 1 || t->n_dims > QW_GGUF_MAX_DIMS)
            return fail_at(r, dims_at, "n_dims %u out of range 1..%d", t->n_dims, QW_GGUF_MAX_DIMS);
        for (int d = 0; d < QW_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        uint64_t nel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            size_t ne_at = r->pos;
            if (rd_u64(r, &t->ne[d], "dimension")) return -1;
            if (t->ne[d] == 0) return fail_at(r, ne_at, "dimension %u is 0", d);
            if (t->ne[d] > (uint64_t)INT64_MAX / nel)
                return fail_at(r, ne_at, "element count overflows at dimension %u (ne=%llu)", d,
                               (unsigned long long)t->ne[d]);
            nel *= t->ne[d];
        }
        size_t type_at = r->pos;
        if (rd_u32(r, &t->type, "type")) return -1;
        const qw_ggml_type_info *ti = qw_ggml_type_info_of(t->type);
        if (!ti) return fail_at(r, type_at, "unknown tensor type %u", t->type);
        if (t->ne[0] % ti->blck_elems != 0)
            return fail_at(r, dims_at + 4, "ne[0]=%llu is not a multiple of the %s block size %u",
                           (unsigned long long)t->ne[0], ti->name, ti->blck_elems);
        const char *why = NULL;
        if (qw_ggml_tensor_nbytes(t->type, t->n_dims, t->ne, &t->nbytes, &why))
            return fail_at(r, dims_at, "bad shape: %s", why);
        gt->off_field = r->pos;
        if (rd_u64(r, &t->offset, "offset")) return -1;
        if (nidx_insert(&g->tensor_idx, t->name, g->n_tensors)) return fail_at(r, at, "out of memory");
        g->n_tensors++;
    }
    r->subject[0] = '\0';
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gg_tensor *x = *(const gg_tensor *const *)a, *y = *(const gg_tensor *const *)b;
    return x->t.offset < y->t.offset ? -1 : x->t.offset > y->t.offset;
}

/* Second pass over tensors once the data section is known: alignment, bounds,
 * data pointers, overlap. */
static int place_tensors(rd *r, qw_gguf *g) {
    uint64_t data_size = g->size - g->data_offset;
    for (size_t i = 0; i < g->n_tensors; i++) {
        gg_tensor *gt = &g->tensors[i];
        qw_gguf_tensor *t = &gt->t;
        set_subject(r, "tensor '%.80s' (#%zu)", t->name, i);
        if (t->offset % g->alignment != 0)
            return fail_at(r, gt->off_field, "offset %llu not aligned to %zu", (unsigned long long)t->offset,
                           g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail_at(r, gt->off_field,
                           "data [%llu, +%llu) at file offset %llu runs past end of file (size %zu)",
                           (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                           (unsigned long long)(g->data_offset + t->offset), g->size);
        t->data = g->base + g->data_offset + t->offset;
    }
    r->subject[0] = '\0';
    if (g->n_tensors < 2) return 0;
    gg_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order) return fail_at(r, g->data_offset, "out of memory");
    for (size_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (size_t i = 1; i < g->n_tensors; i++) {
        const gg_tensor *a = order[i - 1], *b = order[i];
        if (a->t.offset + a->t.nbytes > b->t.offset) {
            set_subject(r, "tensor '%.80s' (#%zu)", b->t.name, (size_t)(b - g->tensors));
            rc = fail_at(r, b->off_field, "data at offset %llu overlaps tensor '%.80s' (#%zu) [%llu, +%llu)",
                         (unsigned long long)b->t.offset, a->t.name, (size_t)(a - g->tensors),
                         (unsigned long long)a->t.offset, (unsigned long long)a->t.nbytes);
            break;
        }
    }
    free(order);
    return rc;
}

static int parse(qw_gguf *g, qw_error *err) {
    rd r = {.p = g->base, .size = g->size, .name = g->path, .err = err};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    if (rd_u32(&r, &magic, "magic")) return -1;
    if (magic != QW_GGUF_MAGIC) {
        char shown[5];
        for (int i = 0; i < 4; i++) {
            char c = (char)(magic >> (8 * i));
            shown[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
        }
        shown[4] = '\0';
        return fail_at(&r, 0, "bad magic 0x%08x (\"%s\"), expected \"GGUF\": not a GGUF file", magic, shown);
    }
    if (rd_u32(&r, &g->version, "version")) return -1;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0)
            return fail_at(&r, 4, "unsupported GGUF version %u (0x%08x: a big-endian file?)", g->version,
                           g->version);
        return fail_at(&r, 4, "unsupported GGUF version %u (qwisp reads versions 2 and 3)", g->version);
    }
    if (rd_u64(&r, &n_tensors, "n_tensors") || rd_u64(&r, &n_kv, "n_kv")) return -1;
    /* Bound the counts by the bytes that could hold them; the tables still grow
     * only as entries are parsed, this just gives the clear message early. */
    uint64_t left = rd_left(&r);
    if (n_kv > left / GG_MIN_KV_BYTES)
        return fail_at(&r, 16, "n_kv %llu is too large for the file: needs at least %d bytes each, %llu left",
                       (unsigned long long)n_kv, GG_MIN_KV_BYTES, (unsigned long long)left);
    if (n_tensors > (left - n_kv * GG_MIN_KV_BYTES) / GG_MIN_TENSOR_BYTES)
        return fail_at(&r, 8,
                       "n_tensors %llu is too large for the file: needs at least %d bytes each, %llu left",
                       (unsigned long long)n_tensors, GG_MIN_TENSOR_BYTES, (unsigned long long)left);
    if (parse_kvs(&r, g, n_kv)) return -1;
    size_t kv_end = r.pos;
    if (read_alignment(&r, g, kv_end)) return -1;
    if (parse_tensor_infos(&r, g, n_tensors)) return -1;
    size_t end = r.pos;
    size_t pad = (g->alignment - end % g->alignment) % g->alignment;
    if (pad > rd_left(&r)) {
        /* With no tensors there is no data section to find; ggml's own reader
         * does not require the padding then either. */
        if (n_tensors > 0)
            return fail_at(&r, end, "data section (aligned to %zu) starts at %zu, past end of file (size %zu)",
                           g->alignment, end + pad, g->size);
        pad = rd_left(&r);
    }
    g->data_offset = end + pad;
    return place_tensors(&r, g);
}

/* --------------------------------------------------------------- open/close */

static qw_gguf *gguf_new(const char *name) {
    qw_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->path = strdup(name ? name : "(memory)");
    if (!g->path) {
        free(g);
        return NULL;
    }
    return g;
}

qw_gguf *qw_gguf_open_memory(const void *data, size_t size, const char *name, qw_error *err) {
    qw_gguf *g = gguf_new(name);
    if (!g) {
        qw_fail(err, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    /* An empty image gets a valid non-NULL base so cursor arithmetic stays defined. */
    static const uint8_t empty[1];
    g->base = data && size ? data : empty;
    g->size = data ? size : 0;
    if (parse(g, err)) {
        qw_gguf_close(g);
        return NULL;
    }
    return g;
}

qw_gguf *qw_gguf_open(const char *path, qw_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        qw_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        qw_fail(err, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        qw_fail(err, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        close(fd);
        qw_fail(err, "%s: at offset 0: file is empty, not a GGUF file", path);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (base == MAP_FAILED) {
        qw_fail(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(map_errno));
        return NULL;
    }
    qw_gguf *g = gguf_new(path);
    if (!g) {
        munmap(base, size);
        qw_fail(err, "%s: out of memory", path);
        return NULL;
    }
    g->base = base;
    g->size = size;
    g->mapped = true;
    if (parse(g, err)) {
        qw_gguf_close(g);
        return NULL;
    }
    return g;
}

void qw_gguf_close(qw_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->base, g->size);
    arena_free(&g->ar);
    free(g->key_idx.slots);
    free(g->tensor_idx.slots);
    free(g->kv);
    free(g->tensors);
    free(g->path);
    free(g);
}

const char *qw_gguf_path(const qw_gguf *g) { return g->path; }
uint32_t qw_gguf_version(const qw_gguf *g) { return g->version; }
size_t qw_gguf_alignment(const qw_gguf *g) { return g->alignment; }
const void *qw_gguf_map_base(const qw_gguf *g) { return g->base; }
size_t qw_gguf_map_size(const qw_gguf *g) { return g->size; }
size_t qw_gguf_data_offset(const qw_gguf *g) { return g->data_offset; }

/* ------------------------------------------------------------- metadata */

size_t qw_gguf_n_kv(const qw_gguf *g) { return g->n_kv; }

const char *qw_gguf_kv_key(const qw_gguf *g, size_t i) { return i < g->n_kv ? g->kv[i].key : NULL; }

qw_gguf_vtype qw_gguf_kv_type(const qw_gguf *g, size_t i) {
    return i < g->n_kv ? g->kv[i].type : QW_GGUF_VTYPE_COUNT;
}

int64_t qw_gguf_find_key(const qw_gguf *g, const char *key) {
    if (!key) return -1;
    const nidx_slot *s = nidx_find(&g->key_idx, key);
    return s ? (int64_t)s->idx : -1;
}

static const gg_kv *kv_of(const qw_gguf *g, const char *key) {
    int64_t i = qw_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

/* Integer value of a scalar kv of any integer type (bool excluded).  *neg is
 * set for negative values, *mag holds the magnitude. */
static int kv_int(const gg_kv *kv, bool *neg, uint64_t *mag) {
    const uint8_t *p = kv->val;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case QW_GGUF_UINT8: *mag = p[0]; return 0;
    case QW_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *mag = v; return 0; }
    case QW_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *mag = v; return 0; }
    case QW_GGUF_UINT64: memcpy(mag, p, 8); return 0;
    case QW_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case QW_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case QW_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case QW_GGUF_INT64: memcpy(&s, p, 8); break;
    default: return -1;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return 0;
}

int qw_gguf_get_u32(const qw_gguf *g, const char *key, uint32_t *out) {
    const gg_kv *kv = kv_of(g, key);
    bool neg;
    uint64_t m;
    if (!kv || kv_int(kv, &neg, &m) || neg || m > UINT32_MAX) return -1;
    *out = (uint32_t)m;
    return 0;
}

int qw_gguf_get_i32(const qw_gguf *g, const char *key, int32_t *out) {
    const gg_kv *kv = kv_of(g, key);
    bool neg;
    uint64_t m;
    if (!kv || kv_int(kv, &neg, &m)) return -1;
    if (neg ? m > (uint64_t)INT32_MAX + 1 : m > INT32_MAX) return -1;
    *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return 0;
}

int qw_gguf_get_u64(const qw_gguf *g, const char *key, uint64_t *out) {
    const gg_kv *kv = kv_of(g, key);
    bool neg;
    uint64_t m;
    if (!kv || kv_int(kv, &neg, &m) || neg) return -1;
    *out = m;
    return 0;
}

int qw_gguf_get_f32(const qw_gguf *g, const char *key, float *out) {
    const gg_kv *kv = kv_of(g, key);
    if (!kv) return -1;
    if (kv->type == QW_GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
        return 0;
    }
    if (kv->type == QW_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
        return 0;
    }
    return -1;
}

int qw_gguf_get_bool(const qw_gguf *g, const char *key, bool *out) {
    const gg_kv *kv = kv_of(g, key);
    if (!kv || kv->type != QW_GGUF_BOOL) return -1;
    *out = kv->val[0] != 0;
    return 0;
}

int qw_gguf_get_str(const qw_gguf *g, const char *key, const char **out, size_t *len) {
    const gg_kv *kv = kv_of(g, key);
    if (!kv || kv->type != QW_GGUF_STRING) return -1;
    *out = kv->str.s;
    if (len) *len = kv->str.len;
    return 0;
}

int qw_gguf_kv_as_i64(const qw_gguf *g, size_t i, int64_t *out) {
    if (i >= g->n_kv) return -1;
    const gg_kv *kv = &g->kv[i];
    if (kv->type == QW_GGUF_BOOL) {
        *out = kv->val[0];
        return 0;
    }
    bool neg;
    uint64_t m;
    if (kv_int(kv, &neg, &m)) return -1;
    if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return 0;
}

int qw_gguf_kv_as_f64(const qw_gguf *g, size_t i, double *out) {
    if (i >= g->n_kv) return -1;
    const gg_kv *kv = &g->kv[i];
    if (kv->type == QW_GGUF_FLOAT32) {
        float f;
        memcpy(&f, kv->val, 4);
        *out = f;
        return 0;
    }
    if (kv->type == QW_GGUF_FLOAT64) {
        memcpy(out, kv->val, 8);
        return 0;
    }
    if (kv->type == QW_GGUF_BOOL) {
        *out = kv->val[0];
        return 0;
    }
    bool neg;
    uint64_t m;
    if (kv_int(kv, &neg, &m)) return -1;
    *out = neg ? -(double)m : (double)m;
    return 0;
}

const char *qw_gguf_kv_str(const qw_gguf *g, size_t i, size_t *len) {
    if (i >= g->n_kv || g->kv[i].type != QW_GGUF_STRING) return NULL;
    if (len) *len = g->kv[i].str.len;
    return g->kv[i].str.s;
}

int qw_gguf_kv_arr(const qw_gguf *g, size_t i, qw_gguf_vtype *elem_type, uint64_t *n, const void **data) {
    if (i >= g->n_kv || g->kv[i].type != QW_GGUF_ARRAY) return -1;
    const gg_kv *kv = &g->kv[i];
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = qw_gguf_vtype_size(kv->elem_type) ? (const void *)kv->val : NULL;
    return 0;
}

int qw_gguf_get_arr(const qw_gguf *g, const char *key, qw_gguf_vtype *elem_type, uint64_t *n,
                    const void **data) {
    int64_t i = qw_gguf_find_key(g, key);
    return i < 0 ? -1 : qw_gguf_kv_arr(g, (size_t)i, elem_type, n, data);
}

const char *qw_gguf_arr_str(const qw_gguf *g, size_t i, uint64_t j, size_t *len) {
    if (i >= g->n_kv) return NULL;
    const gg_kv *kv = &g->kv[i];
    if (kv->type != QW_GGUF_ARRAY || kv->elem_type != QW_GGUF_STRING || j >= kv->n) return NULL;
    if (len) *len = kv->strs[j].len;
    return kv->strs[j].s;
}

/* ---------------------------------------------------------------- tensors */

size_t qw_gguf_n_tensors(const qw_gguf *g) { return g->n_tensors; }

const qw_gguf_tensor *qw_gguf_tensor_at(const qw_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i].t : NULL;
}

const qw_gguf_tensor *qw_gguf_find_tensor(const qw_gguf *g, const char *name) {
    if (!name) return NULL;
    const nidx_slot *s = nidx_find(&g->tensor_idx, name);
    return s ? &g->tensors[s->idx].t : NULL;
}
