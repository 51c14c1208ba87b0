/* matmul.c — y = x W^T for quantized/float weight rows, threaded over rows.
 *
 * Activations are converted once per matmul to the weight type's dot partner
 * (Q8_0 for Q8_0/Q4_0, F16 for F16, BF16 for BF16, F32 for F32), then each
 * weight row is dotted with every token's converted row.  Work is split by
 * blocks of rows (tune.h) so a block of weights is read from memory once and
 * reused from L1/L2 across all tokens of a prefill chunk.
 */
#include "qwisp/ops.h"

#include "kernels/quant_impl.h"

#include <string.h>

/* Rows per work item (tune.h: default, calibrated by `qwisp tune`, or a
 * knob; no choice changes a result bit): prefill re-reads a block once per 4
 * tokens, so it must stay in L1/L2 (QW_TUNE_PREFILL_ROWS, 32 by default: on
 * a Zen 5, 16 gave 4-5 % less prefill, the tiles prepare the 4 tokens once
 * per call).  Decode reads each row once; every work item starts a new
 * stream from DRAM, so items are sized in bytes (QW_TUNE_DECODE_ITEM, 256 KiB
 * by default, at least 64 rows): on a Zen 5 MoE decode matmuls ran 10-20 %
 * faster than with 64-row items (36 KiB for a small model's experts). */
enum { ROW_BLOCK_DECODE_MIN = 64 };

/* Rows per decode work item for rows of `row_bytes`: a multiple of 4. */
static int64_t decode_row_block(size_t row_bytes) {
    int64_t rows = qw_tune_get(QW_TUNE_DECODE_ITEM) / (int64_t)(row_bytes ? row_bytes : 1);
    if (rows < ROW_BLOCK_DECODE_MIN) rows = ROW_BLOCK_DECODE_MIN;
    return (rows + 3) & ~(int64_t)3;
}

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

/* A job is a list of matmuls sharing (wtype, k); work items are blocks of
 * row_block rows numbered across all of them, so one parallel pass (one
 * barrier) covers e.g. gate+up of every chosen expert of a decode token.
 * When a job has fewer blocks than the threads can share (a prefill's
 * router: 128 rows, one block), each block is cut into tok_split slices of
 * tok_slice tokens too (a multiple of QW_GEMM_N_TOKS, so every tile call
 * sees the token groups it would see in one piece; each output is one dot,
 * so no split changes a bit). */
typedef struct {
    qw_type wtype;
    int64_t k;
    size_t xq_row_bytes;
    const qw_mm_task *tasks;
    int n_tasks;
    int64_t row_block;
    int64_t tok_split, tok_slice;
    int64_t block0[QW_MM_MAX_TASKS + 1]; /* first block of each task (prefix sums) */
} matmul_job;

/* Dots of rows [r0, r1) with tokens [t0, t1) of one task. */
static void dot_range(const matmul_job *j, const qw_mm_task *t, qw_vec_dot_fn dot, int64_t r0, int64_t r1,
                      int64_t t0, int64_t t1) {
    const char *w = t->w, *xq = t->xq;
    const size_t rb = t->w_row_bytes;
    if (t1 - t0 == 1 && t->n_tok < QW_GEMM_TOKS) { /* decode: stream the rows, prefetched (quant_impl.h) */
        const int64_t ahead = qw_decode_ahead_rows(rb);
        const char *xr = xq + (size_t)(t->idx ? t->idx[t0] : t0) * j->xq_row_bytes;
        float *yr = t->y + t0 * t->ldy;
        qw_prefetch_decode(w + (size_t)r0 * rb, (size_t)(r1 - r0 < ahead ? r1 - r0 : ahead) * rb);
        for (int64_t r = r0; r < r1; r++) {
            if (r + ahead < r1) qw_prefetch_decode(w + (size_t)(r + ahead) * rb, rb);
            dot(j->k, &yr[r], w + (size_t)r * rb, xr);
        }
        return;
    }
    for (int64_t tok = t0; tok < t1; tok++) {
        const char *xr = xq + (size_t)(t->idx ? t->idx[tok] : tok) * j->xq_row_bytes;
        float *yr = t->y + tok * t->ldy;
        for (int64_t r = r0; r < r1; r++) dot(j->k, &yr[r], w + (size_t)r * rb, xr);
    }
}

/* Rows [r0, r1) × tokens [t0, t1) one at a time with the one-token row loop. */
static void gemv_range(const matmul_job *j, const qw_mm_task *t, qw_gemm_fn gemv, qw_vec_dot_fn dot,
                       int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    const int64_t r_end = r0 + (r1 - r0) / QW_GEMV_ROWS * QW_GEMV_ROWS;
    for (int64_t tok = t0; tok < t1; tok++) {
        const void *x[1] = {(const char *)t->xq + (size_t)(t->idx ? t->idx[tok] : tok) * j->xq_row_bytes};
        float *y[1] = {t->y + tok * t->ldy + r0};
        if (r_end > r0) gemv(j->k, (const char *)t->w + (size_t)r0 * t->w_row_bytes, t->w_row_bytes, r_end - r0, x, y);
    }
    if (r_end < r1) dot_range(j, t, dot, r_end, r1, t0, t1);
}

/* Tokens [t0, t0 + n) of a task as a tile call takes them: x[i] the
 * token's activations, yr[i] its outputs from row r0. */
static void token_ptrs(const matmul_job *j, const qw_mm_task *t, int64_t t0, int64_t n, int64_t r0, const void **x,
                       float **yr) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t tok = t0 + i;
        x[i] = (const char *)t->xq + (size_t)(t->idx ? t->idx[tok] : tok) * j->xq_row_bytes;
        yr[i] = t->y + tok * t->ldy + r0;
    }
}

/* Tokens [t0, t1) of rows [r0, r1) with a tile of `per` tokens a call
 * (t1 - t0 a multiple of `per`). */
static void tile_tokens(const matmul_job *j, const qw_mm_task *t, qw_gemm_fn fn, int per, int64_t t0, int64_t t1,
                        int64_t r0, int64_t r1) {
    for (int64_t g = t0; g < t1; g += per) {
        const void *x[QW_GEMM_WIDE_TOKS];
        float *yr[QW_GEMM_WIDE_TOKS];
        token_ptrs(j, t, g, per, r0, x, yr);
        fn(j->k, (const char *)t->w + (size_t)r0 * t->w_row_bytes, t->w_row_bytes, r1 - r0, x, yr);
    }
}

/* The last two or three tokens [t0, n_tok) of rows [r0, r1) (a multiple of
 * QW_GEMM_ROWS) with the 4-token tile, the missing tokens padded with the
 * last real one and their outputs thrown away: faster than the dot or the
 * row loop a token (from cache the tile runs ~3x their MACs a second), and
 * the dot's bits (quant.h's contract).  Rows go in slices so the thrown-away
 * outputs fit on the stack. */
static void tile_tokens_padded(const matmul_job *j, const qw_mm_task *t, qw_gemm_fn fn, int64_t t0, int64_t r0,
                               int64_t r1) {
    enum { SLICE = 256 }; /* rows a call: even, as the tile's rows must be */
    float junk[QW_GEMM_TOKS][SLICE];
    const char *w = t->w, *xq = t->xq;
    const int64_t n_real = t->n_tok - t0;
    for (int64_t s0 = r0; s0 < r1; s0 += SLICE) {
        const int64_t s1 = s0 + SLICE < r1 ? s0 + SLICE : r1;
        const void *x[QW_GEMM_TOKS];
        float *yr[QW_GEMM_TOKS];
        for (int i = 0; i < QW_GEMM_TOKS; i++) {
            const int64_t tok = t0 + (i < n_real ? i : n_real - 1);
            x[i] = xq + (size_t)(t->idx ? t->idx[tok] : tok) * j->xq_row_bytes;
            yr[i] = i < n_real ? t->y + tok * t->ldy + s0 : junk[i];
        }
        fn(j->k, w + (size_t)s0 * t->w_row_bytes, t->w_row_bytes, s1 - s0, x, yr);
    }
}

/* Rows [r0, r1) × all tokens with the tiles (token groups outer: the
 * tokens' prepared activations stay in L1 while the block's rows stream
 * from L2): 16- or 8-token groups where the level has a wide tile (AMX
 * for Q8_0/Q4_0, 512-bit Q4_K), then 4-token groups; leftover rows use the dot, leftover tokens the one-token
 * row loop where the type has one — all give the dot's bits. */
static void gemm_range(const matmul_job *j, const qw_mm_task *t, qw_gemm_fn gemm, qw_gemm_fn wide, qw_gemm_fn gemv,
                       qw_vec_dot_fn dot, int64_t r0, int64_t r1) {
    const int64_t r_end = r0 + (r1 - r0) / QW_GEMM_ROWS * QW_GEMM_ROWS;
    const int per_wide = qw_gemm_wide_toks(j->wtype);
    const int64_t t_wide = wide ? t->n_tok / per_wide * per_wide : 0;
    const int64_t t_end = t_wide + (t->n_tok - t_wide) / QW_GEMM_TOKS * QW_GEMM_TOKS;
    if (r_end > r0) {
        if (t_wide) tile_tokens(j, t, wide, per_wide, 0, t_wide, r0, r_end);
        tile_tokens(j, t, gemm, QW_GEMM_TOKS, t_wide, t_end, r0, r_end);
    }
    if (r_end < r1) dot_range(j, t, dot, r_end, r1, 0, t_end);
    /* the last 1-3 tokens (MoE experts rarely get a multiple of 4, and many
     * get fewer than 4): two or three go through the tile padded to four; one
     * through the row loop (it prepares the token once per call) or the dot */
    if (t->n_tok - t_end >= 2) {
        if (r_end > r0) tile_tokens_padded(j, t, gemm, t_end, r0, r_end);
        if (r_end < r1) dot_range(j, t, dot, r_end, r1, t_end, t->n_tok);
    } else if (gemv) {
        gemv_range(j, t, gemv, dot, r0, r1, t_end, t->n_tok);
    } else {
        dot_range(j, t, dot, r0, r1, t_end, t->n_tok);
    }
}

/* Rows [r0, r1) × every token through a kernel that takes any number of
 * them (qw_gemm_n_get: it lays the weights out once per call, so a call
 * carries as many tokens as it can), QW_GEMM_N_TOKS a call. */
static void tile_all_tokens(const matmul_job *j, const qw_mm_task *t, qw_gemm_n_fn fn, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < t->n_tok; t0 += QW_GEMM_N_TOKS) {
        const int64_t nt = t->n_tok - t0 < QW_GEMM_N_TOKS ? t->n_tok - t0 : QW_GEMM_N_TOKS;
        const void *x[QW_GEMM_N_TOKS];
        float *yr[QW_GEMM_N_TOKS];
        token_ptrs(j, t, t0, nt, r0, x, yr);
        fn(j->k, (const char *)t->w + (size_t)r0 * t->w_row_bytes, t->w_row_bytes, r1 - r0, x, yr, nt);
    }
}

/* Tokens [t0, t1) of task t as a task of their own. */
static qw_mm_task token_slice(const matmul_job *j, const qw_mm_task *t, int64_t t0, int64_t t1) {
    qw_mm_task s = *t;
    s.n_tok = t1 - t0;
    if (t->idx) s.idx = t->idx + t0;
    else s.xq = (const char *)t->xq + (size_t)t0 * j->xq_row_bytes;
    s.y = t->y + t0 * t->ldy;
    return s;
}

static void matmul_blocks(void *p, int64_t i0, int64_t i1, int ith) {
    matmul_job *j = p;
    const qw_vec_dot_fn dot = qw_vec_dot_get(j->wtype);
    const bool tiled = j->k % QW_GEMM_K == 0 && j->k <= QW_GEMM_K_MAX;
    const qw_gemm_fn gemm = tiled ? qw_gemm_get(j->wtype) : NULL;
    const qw_gemm_fn gemv = tiled ? qw_gemv_get(j->wtype) : NULL;
    const qw_gemm_fn wide = tiled ? qw_gemm_wide_get(j->wtype) : NULL;
    const qw_gemm_n_fn many = tiled ? qw_gemm_n_get(j->wtype) : NULL;
    int ti = 0;
    for (int64_t item = i0; item < i1; item++) {
        const int64_t b = item / j->tok_split, t0 = item % j->tok_split * j->tok_slice;
        while (b >= j->block0[ti + 1]) ti++;
        const qw_mm_task *t = &j->tasks[ti], *whole = t;
        qw_mm_task slice;
        if (j->tok_split > 1) {
            if (t0 >= whole->n_tok) continue;
            slice = token_slice(j, whole, t0, t0 + j->tok_slice < whole->n_tok ? t0 + j->tok_slice : whole->n_tok);
            t = &slice;
        }
        const int64_t r0 = (b - j->block0[ti]) * j->row_block;
        const int64_t r1 = r0 + j->row_block < t->n_rows ? r0 + j->row_block : t->n_rows;
        if (many && t->n_tok >= 2) tile_all_tokens(j, t, many, r0, r1);
        else if (gemm && t->n_tok >= 2) gemm_range(j, t, gemm, wide, gemv, dot, r0, r1);
        else if (gemv) gemv_range(j, t, gemv, dot, r0, r1, 0, t->n_tok);
        else dot_range(j, t, dot, r0, r1, 0, t->n_tok);
    }
}

void qw_matmul_batch(qw_threadpool *tp, qw_type wtype, int64_t k, const qw_mm_task *tasks, int n_tasks) {
    for (int i0 = 0; i0 < n_tasks; i0 += QW_MM_MAX_TASKS) {
        const int nt = n_tasks - i0 < QW_MM_MAX_TASKS ? n_tasks - i0 : QW_MM_MAX_TASKS;
        matmul_job j = {.wtype = wtype,
                        .k = k,
                        .xq_row_bytes = qw_row_bytes(qw_vec_dot_type(wtype), k),
                        .tasks = tasks + i0,
                        .n_tasks = nt};
        int64_t work = 0, max_tok = 0;
        for (int i = 0; i < nt; i++) max_tok = j.tasks[i].n_tok > max_tok ? j.tasks[i].n_tok : max_tok;
        j.row_block = max_tok >= QW_GEMM_TOKS ? qw_tune_effective(QW_TUNE_PREFILL_ROWS) : decode_row_block(qw_row_bytes(wtype, k));
        j.block0[0] = 0;
        for (int i = 0; i < nt; i++) {
            j.block0[i + 1] = j.block0[i] + (j.tasks[i].n_rows + j.row_block - 1) / j.row_block;
            work += j.tasks[i].n_rows * k * j.tasks[i].n_tok;
        }
        /* Fewer blocks than two a thread: slices of tokens too (matmul_job). */
        const int64_t blocks = j.block0[nt], want = 2 * (int64_t)(tp ? qw_threadpool_size(tp) : 1);
        j.tok_split = 1;
        j.tok_slice = max_tok;
        if (blocks < want && max_tok >= 2 * QW_GEMM_N_TOKS) {
            const int64_t groups = (max_tok + QW_GEMM_N_TOKS - 1) / QW_GEMM_N_TOKS;
            const int64_t split = (want + blocks - 1) / blocks < groups ? (want + blocks - 1) / blocks : groups;
            j.tok_slice = (groups + split - 1) / split * QW_GEMM_N_TOKS;
            j.tok_split = (max_tok + j.tok_slice - 1) / j.tok_slice;
        }
        /* Tiny jobs are not worth waking a worker for. */
        qw_parallel_for(work < 16384 ? NULL : tp, blocks * j.tok_split, 1, matmul_blocks, &j);
    }
}

void qw_matmul_q(qw_threadpool *tp, qw_type wtype, const void *w, size_t w_row_bytes, int64_t n_rows,
                 int64_t k, const void *xq, const int32_t *idx, int64_t n_tok, float *y, int64_t ldy) {
    qw_mm_task t = {w, w_row_bytes, n_rows, xq, idx, n_tok, y, ldy};
    qw_matmul_batch(tp, wtype, k, &t, 1);
}
