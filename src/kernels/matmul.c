/* matmul.c — y = x W^T for quantized/float weight rows, threaded over rows.
 *
 * Activations are converted once per matmul to the weight type's dot partner
 * (Q8_0 for Q8_0/Q4_0, F16 for F16, BF16 for BF16, F32 for F32), then each
 * weight row is dotted with every token's converted row.  Work is split by
 * blocks of ROW_BLOCK rows so a block of weights is read from memory once and
 * reused from L1/L2 across all tokens of a prefill chunk.
 */
#include "qwisp/ops.h"

#include <string.h>

enum { ROW_BLOCK = 16 };

size_t qw_act_bytes(qw_type wtype, int64_t k, int64_t n_tok) {
    return qw_row_bytes(qw_vec_dot_type(wtype), k) * (size_t)n_tok;
}

typedef struct {
    qw_type vt;
    const float *x;
    int64_t ldx, k;
    char *xq;
    size_t row_bytes;
} convert_job;

static void convert_rows(void *p, int64_t i0, int64_t i1, int ith) {
    convert_job *j = p;
    for (int64_t t = i0; t < i1; t++)
        qw_quantize_row(j->vt, j->x + t * j->ldx, j->xq + (size_t)t * j->row_bytes, j->k);
}

void qw_act_convert(qw_threadpool *tp, qw_type wtype, const float *x, int64_t ldx, int64_t k,
                    int64_t n_tok, void *xq) {
    convert_job j = {qw_vec_dot_type(wtype), x, ldx, k, xq, qw_row_bytes(qw_vec_dot_type(wtype), k)};
    qw_parallel_for(n_tok > 8 ? tp : NULL, n_tok, 4, convert_rows, &j);
}

typedef struct {
    qw_type wtype;
    const char *w[2];
    float *y[2];
    int n_mats;
    size_t w_row_bytes, xq_row_bytes;
    int64_t n_rows, k, n_tok, ldy;
    const char *xq;
    const int32_t *idx;
} matmul_job;

static void matmul_blocks(void *p, int64_t b0, int64_t b1, int ith) {
    matmul_job *j = p;
    const int64_t blocks_per_mat = (j->n_rows + ROW_BLOCK - 1) / ROW_BLOCK;
    for (int64_t b = b0; b < b1; b++) {
        int m = (int)(b / blocks_per_mat);
        int64_t r0 = (b % blocks_per_mat) * ROW_BLOCK;
        int64_t r1 = r0 + ROW_BLOCK < j->n_rows ? r0 + ROW_BLOCK : j->n_rows;
        const char *w = j->w[m];
        float *y = j->y[m];
        const qw_vec_dot_fn dot = qw_vec_dot_get(j->wtype);
        for (int64_t t = 0; t < j->n_tok; t++) {
            const char *xr = j->xq + (size_t)(j->idx ? j->idx[t] : t) * j->xq_row_bytes;
            float *yr = y + t * j->ldy;
            for (int64_t r = r0; r < r1; r++)
                dot(j->k, &yr[r], w + (size_t)r * j->w_row_bytes, xr);
        }
    }
}

static void run_matmul(qw_threadpool *tp, matmul_job *j) {
    const int64_t blocks = ((j->n_rows + ROW_BLOCK - 1) / ROW_BLOCK) * j->n_mats;
    /* Tiny jobs are not worth waking a worker for. */
    int64_t work = j->n_rows * j->k * j->n_tok * j->n_mats;
    qw_parallel_for(work < 16384 ? NULL : tp, blocks, 1, matmul_blocks, j);
}

void qw_matmul_q(qw_threadpool *tp, qw_type wtype, const void *w, size_t w_row_bytes, int64_t n_rows,
                 int64_t k, const void *xq, const int32_t *idx, int64_t n_tok, float *y, int64_t ldy) {
    matmul_job j = {.wtype = wtype,
                    .w = {w, NULL},
                    .y = {y, NULL},
                    .n_mats = 1,
                    .w_row_bytes = w_row_bytes,
                    .xq_row_bytes = qw_row_bytes(qw_vec_dot_type(wtype), k),
                    .n_rows = n_rows,
                    .k = k,
                    .n_tok = n_tok,
                    .ldy = ldy,
                    .xq = xq,
                    .idx = idx};
    run_matmul(tp, &j);
}

void qw_matmul_q2(qw_threadpool *tp, qw_type wtype, const void *w0, const void *w1,
                  size_t w_row_bytes, int64_t n_rows, int64_t k, const void *xq, const int32_t *idx,
                  int64_t n_tok, float *y0, float *y1, int64_t ldy) {
    matmul_job j = {.wtype = wtype,
                    .w = {w0, w1},
                    .y = {y0, y1},
                    .n_mats = 2,
                    .w_row_bytes = w_row_bytes,
                    .xq_row_bytes = qw_row_bytes(qw_vec_dot_type(wtype), k),
                    .n_rows = n_rows,
                    .k = k,
                    .n_tok = n_tok,
                    .ldy = ldy,
                    .xq = xq,
                    .idx = idx};
    run_matmul(tp, &j);
}
