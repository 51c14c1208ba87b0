/* gguf.h — GGUF v3 reader (mmap) and writer.
 *
 * Reader: the file is mmaped read-only; header, metadata and tensor infos are
 * parsed and validated against the file size before anything is used (counts,
 * string lengths, offsets, alignment, type sizes, dims).  A malformed file gets
 * one error naming the file, the field and the byte offset.  Tensor data is
 * never copied: qw_gguf_tensor.data points into the mapping.
 *
 *     qw_error err = {0};
 *     qw_gguf *g = qw_gguf_open("m.gguf", &err);
 *     uint32_t n_layer;
 *     if (qw_gguf_get_u32(g, "qwen3moe.block_count", &n_layer) != 0) ...
 *     const qw_gguf_tensor *t = qw_gguf_find_tensor(g, "token_embd.weight");
 *     qw_gguf_close(g);
 *
 * Writer: collect metadata and tensor infos, then stream the file; tensor bytes
 * are produced by a callback one tensor at a time so memory stays bounded.
 */
#ifndef QWISP_GGUF_H
#define QWISP_GGUF_H

#include "qwisp/base.h"

#define QW_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define QW_GGUF_DEFAULT_ALIGNMENT 32
#define QW_GGUF_MAX_DIMS 4

typedef enum qw_gguf_vtype {
    QW_GGUF_UINT8 = 0,
    QW_GGUF_INT8 = 1,
    QW_GGUF_UINT16 = 2,
    QW_GGUF_INT16 = 3,
    QW_GGUF_UINT32 = 4,
    QW_GGUF_INT32 = 5,
    QW_GGUF_FLOAT32 = 6,
    QW_GGUF_BOOL = 7,
    QW_GGUF_STRING = 8,
    QW_GGUF_ARRAY = 9,
    QW_GGUF_UINT64 = 10,
    QW_GGUF_INT64 = 11,
    QW_GGUF_FLOAT64 = 12,
    QW_GGUF_VTYPE_COUNT
} qw_gguf_vtype;

const char *qw_gguf_vtype_name(qw_gguf_vtype t);
/* Bytes of one scalar of value type t; 0 for STRING, ARRAY and invalid types. */
size_t qw_gguf_vtype_size(uint32_t t);

typedef struct qw_gguf_tensor {
    const char *name;              /* NUL-terminated copy */
    uint32_t n_dims;               /* 1..4 */
    uint64_t ne[QW_GGUF_MAX_DIMS]; /* ne[0] = innermost (row length); unused dims = 1 */
    uint32_t type;                 /* ggml type id (see kernels/quant.h qw_type) */
    uint64_t offset;               /* from the start of the data section */
    uint64_t nbytes;               /* validated: offset + nbytes <= data section size */
    const void *data;              /* into the mapping */
} qw_gguf_tensor;

typedef struct qw_gguf qw_gguf;

/* Opens and validates `path` (GGUF version 3, or 2 which has the same layout).
 * NULL + err on any problem; the message reads "<path>: at offset N: …". */
qw_gguf *qw_gguf_open(const char *path, qw_error *err);
/* Parses an in-memory image (not copied; must outlive the handle).  `name` is
 * used in error messages.  Used by the fuzzer and tests. */
qw_gguf *qw_gguf_open_memory(const void *data, size_t size, const char *name, qw_error *err);
void qw_gguf_close(qw_gguf *g);

const char *qw_gguf_path(const qw_gguf *g);
uint32_t qw_gguf_version(const qw_gguf *g);
size_t qw_gguf_alignment(const qw_gguf *g);
const void *qw_gguf_map_base(const qw_gguf *g); /* whole file image */
size_t qw_gguf_map_size(const qw_gguf *g);
size_t qw_gguf_data_offset(const qw_gguf *g); /* file offset of the data section */

/* ---- metadata ---- */
size_t qw_gguf_n_kv(const qw_gguf *g);
const char *qw_gguf_kv_key(const qw_gguf *g, size_t i);
qw_gguf_vtype qw_gguf_kv_type(const qw_gguf *g, size_t i);
/* Index of key, or -1. */
int64_t qw_gguf_find_key(const qw_gguf *g, const char *key);

/* Typed getters: 0 on success; -1 if missing or of an incompatible type.
 * Integer getters accept any integer type whose value fits the target. */
int qw_gguf_get_u32(const qw_gguf *g, const char *key, uint32_t *out);
int qw_gguf_get_i32(const qw_gguf *g, const char *key, int32_t *out);
int qw_gguf_get_u64(const qw_gguf *g, const char *key, uint64_t *out);
int qw_gguf_get_f32(const qw_gguf *g, const char *key, float *out); /* accepts f32/f64 */
int qw_gguf_get_bool(const qw_gguf *g, const char *key, bool *out);
/* String value (NUL-terminated; may contain NULs, so len is also given). */
int qw_gguf_get_str(const qw_gguf *g, const char *key, const char **out, size_t *len);

/* Scalar value of kv i as double / int64 (for printing); 0 on success. */
int qw_gguf_kv_as_f64(const qw_gguf *g, size_t i, double *out);
int qw_gguf_kv_as_i64(const qw_gguf *g, size_t i, int64_t *out);
/* String value of kv i (type STRING). */
const char *qw_gguf_kv_str(const qw_gguf *g, size_t i, size_t *len);

/* Arrays.  For numeric arrays *data points at n packed little-endian elements
 * (in the mapping; may be unaligned, read with memcpy).  Strings: use
 * qw_gguf_arr_str.  Nested arrays are parsed and validated but exposed only
 * as type + count. */
int qw_gguf_get_arr(const qw_gguf *g, const char *key, qw_gguf_vtype *elem_type, uint64_t *n,
                    const void **data);
int qw_gguf_kv_arr(const qw_gguf *g, size_t i, qw_gguf_vtype *elem_type, uint64_t *n,
                   const void **data);
/* Element j of string array kv i: NUL-terminated copy, length in *len. NULL if out of range. */
const char *qw_gguf_arr_str(const qw_gguf *g, size_t i, uint64_t j, size_t *len);

/* ---- tensors ---- */
size_t qw_gguf_n_tensors(const qw_gguf *g);
const qw_gguf_tensor *qw_gguf_tensor_at(const qw_gguf *g, size_t i);
const qw_gguf_tensor *qw_gguf_find_tensor(const qw_gguf *g, const char *name);

/* ---- writer ---- */
typedef struct qw_gguf_writer qw_gguf_writer;

qw_gguf_writer *qw_gguf_writer_new(void);
void qw_gguf_writer_free(qw_gguf_writer *w);

/* Setting a key twice replaces the value.  Keys and values are copied. */
void qw_gguf_set_u32(qw_gguf_writer *w, const char *key, uint32_t v);
void qw_gguf_set_i32(qw_gguf_writer *w, const char *key, int32_t v);
void qw_gguf_set_u64(qw_gguf_writer *w, const char *key, uint64_t v);
void qw_gguf_set_f32(qw_gguf_writer *w, const char *key, float v);
void qw_gguf_set_bool(qw_gguf_writer *w, const char *key, bool v);
void qw_gguf_set_str(qw_gguf_writer *w, const char *key, const char *v);
/* Numeric array of n elements of elem_type (packed, host = little endian). */
void qw_gguf_set_arr(qw_gguf_writer *w, const char *key, qw_gguf_vtype elem_type, const void *data,
                     uint64_t n);
void qw_gguf_set_arr_str(qw_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Declares a tensor; data is produced at write time by the fill callback.
 * Returns the tensor's index, or -1 (err) on a bad type/shape/duplicate name. */
int qw_gguf_add_tensor(qw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const uint64_t *ne, qw_error *err);

/* Fills dst (nbytes = the tensor's byte size) for tensor `index`; 0 on success. */
typedef int (*qw_gguf_fill_fn)(void *ctx, int index, void *dst, size_t nbytes, qw_error *err);

/* Writes the file (version 3, alignment from "general.alignment" if set, else 32;
 * general.alignment must be a u32 power of two).  fill may be NULL: tensors are
 * then written as zeros.  Tensor names longer than 63 bytes are refused by
 * qw_gguf_add_tensor (ggml's limit), and any ggml type with a known block
 * layout is accepted, not only the ones qwisp computes with.
 * Tensors are laid out in declaration order.  The file is written to a temporary
 * name and renamed, so a failure never leaves a half-written file at `path`. */
int qw_gguf_writer_write(qw_gguf_writer *w, const char *path, qw_gguf_fill_fn fill, void *ctx,
                         qw_error *err);

#endif
