/* safetensors.h — read-only access to Hugging Face safetensors checkpoints.
 *
 * A safetensors file is: u64 little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
 * …, "__metadata__": {…}}), then the data buffer; offsets are relative to the
 * buffer.  A checkpoint is one file (model.safetensors) or several shards
 * named by model.safetensors.index.json's "weight_map".
 *
 * The files are mmapped, never copied.  Opening validates everything a reader
 * could trip on before any tensor is touched: the header length against the
 * file size, the JSON, each entry's dtype, shape and offsets (the byte range
 * must lie inside the buffer and hold exactly prod(shape) * dtype size
 * bytes, without overflow), duplicate names across shards, and the index's
 * claims against the shards' headers.  Errors name the file and the tensor:
 *     "m.safetensors: header length 4096 exceeds the file size 200"
 *     "m.safetensors: tensor 'w': data_offsets [0, 96] hold 96 bytes, shape
 *      [4, 8] of F32 needs 128"
 *
 *     qw_error err = {0};
 *     qw_safetensors *st = qw_safetensors_open_dir("ckpt/", &err);
 *     const qw_st_tensor *t = qw_safetensors_find(st, "model.norm.weight");
 *     qw_st_read_f32(t, 0, t->n_elems, buf);
 *     qw_safetensors_close(st);
 */
#ifndef QWISP_SAFETENSORS_H
#define QWISP_SAFETENSORS_H

#include "qwisp/base.h"

#define QW_ST_MAX_DIMS 8

typedef enum qw_st_dtype {
    QW_ST_F32, QW_ST_F16, QW_ST_BF16, /* the ones qw_st_read_f32 converts */
    QW_ST_F64, QW_ST_I64, QW_ST_I32, QW_ST_I16, QW_ST_I8, QW_ST_U64, QW_ST_U32, QW_ST_U16,
    QW_ST_U8, QW_ST_BOOL, QW_ST_F8_E4M3, QW_ST_F8_E5M2,
} qw_st_dtype;

typedef struct qw_st_tensor {
    const char *name;
    const char *file;           /* the file it lives in (for messages) */
    qw_st_dtype dtype;
    int n_dims;
    int64_t shape[QW_ST_MAX_DIMS]; /* row-major, shape[0] outermost (PyTorch order) */
    int64_t n_elems;
    const void *data;           /* in the mapping; may be unaligned */
    size_t nbytes;
} qw_st_tensor;

typedef struct qw_safetensors qw_safetensors;

/* One .safetensors file.  NULL + err on any problem. */
qw_safetensors *qw_safetensors_open(const char *path, qw_error *err);
/* A checkpoint directory: model.safetensors.index.json (shards) if present,
 * else model.safetensors, else every *.safetensors in the directory. */
qw_safetensors *qw_safetensors_open_dir(const char *dir, qw_error *err);
/* Parses an in-memory image (not copied; must outlive the handle); `name`
 * appears in messages.  For tests and the fuzzer. */
qw_safetensors *qw_safetensors_open_memory(const void *data, size_t size, const char *name,
                                           qw_error *err);
void qw_safetensors_close(qw_safetensors *st);

size_t qw_safetensors_n_tensors(const qw_safetensors *st);
const qw_st_tensor *qw_safetensors_tensor_at(const qw_safetensors *st, size_t i); /* sorted by name */
const qw_st_tensor *qw_safetensors_find(const qw_safetensors *st, const char *name);

const char *qw_st_dtype_name(qw_st_dtype d);
size_t qw_st_dtype_size(qw_st_dtype d);

/* Converts elements [first, first + n) of t (row-major) to f32.  -1 + err if
 * t's dtype is not F32/F16/BF16 (the message names the tensor and dtype) or
 * the range is out of bounds. */
int qw_st_read_f32(const qw_st_tensor *t, int64_t first, int64_t n, float *out, qw_error *err);

#endif
