/* tune_measure.c — `qwisp tune`'s measurement: the best value of each tune.h
 * parameter on this machine, found by timing the real matmul path.
 *
 * Probes (synthetic weights, the layout decode and prefill read):
 *   decode   one token through batches of 16 matrices of 1024 rows × 1024
 *            (Q8_0: 1.1 MB each, an expert's size), cycling through opts->mb
 *            MiB of weights so every pass streams from DRAM, as decode does;
 *            Q8_0 for the work items, the rows read at once and the loop, Q4_K
 *            for the software prefetch's distance and level: the Q8_0 row
 *            loops read far-apart streams without software prefetches
 *            (quant_impl.h), the K-quant row loops prefetch;
 *   prefill  64 tokens through 8 Q8_0 matrices (a prefill chunk's experts).
 * One parameter at a time (prefetch distance, the prefetch's cache level,
 * item size, the rows read at once, the decode loop, then prefill rows),
 * each candidate timed opts->passes times in
 * turn (candidates interleaved, so a noisy neighbour slows all of them alike).
 * A candidate must beat the default by 2 % in EVERY pass to be chosen (its
 * worst per-pass ratio): on a noisy machine a tie or a lucky pass keeps the
 * default.  The decode loop (decode_gemv: the level's GEMV loop or row dots)
 * must win by 10 %: the probe is a weak proxy for that switch.  On a Zen 5
 * the probe's best rates of the two were 3-7 % apart, either way from one
 * calibration to the next, while a model's decode ran 13-35 % faster with
 * the GEMV loop, and three lucky 2 % passes sent the row dots into the
 * cache; where the row dots do win (a Zen 4: 2.7x), they win by far
 * more than 10 %.  Speed is all that can change — every candidate gives the
 * same result bits (tune.h).
 */
#include "qwisp/tune.h"
#include "qwisp/ops.h"
#include "qwisp/quant.h"

#include <stdlib.h>
#include <string.h>

enum { K = 1024, ROWS = 1024, BATCH = 16, PREFILL_MATS = 8, PREFILL_TOK = 64, MAX_CAND = 8 };

typedef struct {
    qw_threadpool *tp;
    char *w;          /* n_mat matrices of ROWS rows */
    size_t row_bytes, mat_bytes;
    int64_t n_mat;    /* Q8_0 matrices (the buffer's size) */
    void *xq;         /* PREFILL_TOK converted tokens */
    qw_type dtype;    /* the decode passes' weight type: Q8_0, or Q4_K (the same bytes as its matrices) */
    void *xq_kq;      /* one token converted for Q4_K (Q8_K) */
    float *y;         /* [PREFILL_TOK][BATCH * ROWS] */
} probe;

/* GB/s of one decode pass over every matrix of p->dtype the buffer holds. */
static double decode_pass(probe *p) {
    qw_mm_task t[BATCH];
    const size_t rb = qw_row_bytes(p->dtype, K), mat = rb * ROWS;
    const int64_t n_mat = (int64_t)((size_t)p->n_mat * p->mat_bytes / mat);
    void *xq = p->dtype == QW_TYPE_Q8_0 ? p->xq : p->xq_kq;
    const double t0 = qw_time_s();
    for (int64_t m0 = 0; m0 < n_mat; m0 += BATCH) {
        const int n = n_mat - m0 < BATCH ? (int)(n_mat - m0) : BATCH;
        for (int i = 0; i < n; i++)
            t[i] = (qw_mm_task){p->w + (size_t)(m0 + i) * mat, rb, ROWS, xq, NULL, 1, p->y + (size_t)i * ROWS, ROWS};
        qw_matmul_batch(p->tp, p->dtype, K, t, n);
    }
    const double s = qw_time_s() - t0;
    return (double)n_mat * (double)mat / (s > 0 ? s : 1e-9) / 1e9;
}

/* GMAC/s of one prefill pass: PREFILL_TOK tokens through PREFILL_MATS matrices. */
static double prefill_pass(probe *p) {
    qw_mm_task t[PREFILL_MATS];
    for (int i = 0; i < PREFILL_MATS; i++)
        t[i] = (qw_mm_task){p->w + (size_t)i * p->mat_bytes, p->row_bytes, ROWS, p->xq, NULL, PREFILL_TOK,
                            p->y + (size_t)i * ROWS, BATCH * ROWS};
    const double t0 = qw_time_s();
    qw_matmul_batch(p->tp, QW_TYPE_Q8_0, K, t, PREFILL_MATS);
    const double s = qw_time_s() - t0;
    return (double)PREFILL_MATS * ROWS * K * PREFILL_TOK / (s > 0 ? s : 1e-9) / 1e9;
}

/* Times each candidate value of `id` `passes` times, interleaved, and
 * returns the index of the one to keep: a candidate's score is its WORST
 * ratio to the default over the passes (each ratio within one pass, so a
 * neighbour's load in that pass slows both alike); the best score wins if it
 * is above `margin` (1.02: a candidate must beat the default in every pass),
 * else the default stays. */
enum { MAX_PASSES = 16 };
#define MARGIN 1.02      /* a parameter's candidate over the default, every pass */
#define MARGIN_LOOP 1.10 /* decode_gemv's row dots over the GEMV loop (above) */
static int pick(probe *p, qw_tune_id id, const int64_t *cand, int n, int def_idx, bool decode, int passes,
                double margin, FILE *log) {
    double rate[MAX_CAND][MAX_PASSES] = {{0}};
    if (passes > MAX_PASSES) passes = MAX_PASSES;
    for (int pass = 0; pass < passes; pass++)
        for (int c = 0; c < n; c++) {
            qw_tune_set(id, cand[c], QW_TUNE_SRC_CALIBRATED);
            rate[c][pass] = decode ? decode_pass(p) : prefill_pass(p);
        }
    double score[MAX_CAND], best[MAX_CAND];
    int b = def_idx;
    for (int c = 0; c < n; c++) {
        score[c] = 1e30, best[c] = 0;
        for (int pass = 0; pass < passes; pass++) {
            const double r = rate[c][pass] / (rate[def_idx][pass] > 0 ? rate[def_idx][pass] : 1e-9);
            if (r < score[c]) score[c] = r;
            if (rate[c][pass] > best[c]) best[c] = rate[c][pass];
        }
        if (c != def_idx && score[c] > margin && (b == def_idx || score[c] > score[b])) b = c;
    }
    if (log)
        for (int c = 0; c < n; c++)
            fprintf(log, "  %-20s %8lld  best %8.2f %-6s  worst ratio to default %.3f%s\n", qw_tune_key_name(id),
                    (long long)cand[c], best[c], decode ? "GB/s" : "GMAC/s", score[c], c == b ? "  <- chosen" : "");
    qw_tune_set(id, cand[b], QW_TUNE_SRC_CALIBRATED);
    return b;
}

static double best_of(probe *p, bool decode, int passes) {
    double b = 0;
    for (int i = 0; i < passes; i++) {
        const double r = decode ? decode_pass(p) : prefill_pass(p);
        if (r > b) b = r;
    }
    return b;
}

int qw_tune_measure(qw_threadpool *tp, const qw_tune_opts *opts, qw_tune_result *out, qw_error *err) {
    probe p = {.tp = tp, .row_bytes = qw_row_bytes(QW_TYPE_Q8_0, K), .dtype = QW_TYPE_Q8_0};
    p.mat_bytes = p.row_bytes * ROWS;
    p.n_mat = (opts->mb << 20) / (int64_t)p.mat_bytes;
    if (p.n_mat < PREFILL_MATS) p.n_mat = PREFILL_MATS;
    const int passes = opts->passes > 0 ? opts->passes : 3;
    p.w = malloc((size_t)p.n_mat * p.mat_bytes);
    p.xq = malloc(qw_act_bytes(QW_TYPE_Q8_0, K, PREFILL_TOK));
    p.xq_kq = malloc(qw_act_bytes(QW_TYPE_Q4_K, K, 1));
    p.y = malloc(sizeof(float) * PREFILL_TOK * BATCH * ROWS);
    float *x = malloc(sizeof(float) * K * PREFILL_TOK);
    if (!p.w || !p.xq || !p.xq_kq || !p.y || !x) {
        free(p.w), free(p.xq), free(p.xq_kq), free(p.y), free(x);
        return qw_fail(err, "tune: cannot allocate %lld MiB of probe weights", (long long)opts->mb);
    }
    /* weights: pseudo-random int8 with a small fp16 scale per block (the values do not matter, only the bytes read) */
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)p.n_mat * p.mat_bytes; i += 4) {
        s = s * 1664525u + 1013904223u;
        memcpy(p.w + i, &s, 4);
    }
    const uint16_t d = 0x2000; /* fp16 ~0.0078: no NaN, infinity or subnormal in either type's scales */
    for (size_t off = 0; off < (size_t)p.n_mat * p.mat_bytes; off += sizeof(qw_block_q8_0)) memcpy(p.w + off, &d, 2);
    for (size_t off = 0; off + sizeof(qw_block_q4_K) <= (size_t)p.n_mat * p.mat_bytes; off += sizeof(qw_block_q4_K))
        memcpy(p.w + off, &d, 2), memcpy(p.w + off + 2, &d, 2); /* Q4_K's d and dmin */
    for (int i = 0; i < K * PREFILL_TOK; i++) x[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    qw_act_convert(NULL, QW_TYPE_Q8_0, x, K, K, PREFILL_TOK, p.xq);
    qw_act_convert(NULL, QW_TYPE_Q4_K, x, K, K, 1, p.xq_kq);
    free(x);

    int64_t saved[QW_TUNE_COUNT];
    qw_tune_src saved_src[QW_TUNE_COUNT];
    for (int i = 0; i < QW_TUNE_COUNT; i++) {
        saved[i] = qw_tune_get((qw_tune_id)i);
        saved_src[i] = qw_tune_source((qw_tune_id)i);
    }
    qw_tune_reset();
    (void)decode_pass(&p); /* warm-up: page faults, thread wake-up */
    out->decode_gbs[0] = best_of(&p, true, passes);
    out->prefill_gops[0] = best_of(&p, false, passes);

    static const int64_t aheads[] = {2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10};
    static const int64_t items[] = {64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20};
    static const int64_t rows[] = {16, 32, 64, 128, 256, 512};
    if (opts->log)
        fprintf(opts->log, "decode, %lld MiB of Q4_K weights per pass (the prefetch), then of Q8_0, best of %d:\n",
                (long long)opts->mb, passes);
    p.dtype = QW_TYPE_Q4_K;
    out->vals[QW_TUNE_DECODE_AHEAD] = aheads[pick(&p, QW_TUNE_DECODE_AHEAD, aheads, 6, 2, true, passes, MARGIN, opts->log)];
    static const int64_t levels[] = {0, 1};
    out->vals[QW_TUNE_DECODE_PREFETCH_L2] =
        levels[pick(&p, QW_TUNE_DECODE_PREFETCH_L2, levels, 2, 0, true, passes, MARGIN, opts->log)];
    p.dtype = QW_TYPE_Q8_0;
    out->vals[QW_TUNE_DECODE_ITEM] = items[pick(&p, QW_TUNE_DECODE_ITEM, items, 5, 2, true, passes, MARGIN, opts->log)];
    static const int64_t drows[] = {2, 4, 8};
    out->vals[QW_TUNE_DECODE_ROWS] = drows[pick(&p, QW_TUNE_DECODE_ROWS, drows, 3, 0, true, passes, MARGIN, opts->log)];
    static const int64_t gemv[] = {1, 0}; /* the level's GEMV loop (default), row dots */
    out->vals[QW_TUNE_DECODE_GEMV] = gemv[pick(&p, QW_TUNE_DECODE_GEMV, gemv, 2, 0, true, passes, MARGIN_LOOP, opts->log)];
    if (opts->log) fprintf(opts->log, "prefill, %d tokens × %d matrices, best of %d:\n", PREFILL_TOK, PREFILL_MATS, passes);
    int rows_def = 1; /* the default in force at this level (tune.h: larger at the AMX level) */
    enum { N_ROWS = sizeof rows / sizeof rows[0] };
    for (int i = 0; i < N_ROWS; i++)
        if (rows[i] == qw_tune_effective(QW_TUNE_PREFILL_ROWS)) rows_def = i;
    out->vals[QW_TUNE_PREFILL_ROWS] = rows[pick(&p, QW_TUNE_PREFILL_ROWS, rows, N_ROWS, rows_def, false, passes, MARGIN, opts->log)];
    out->decode_gbs[1] = best_of(&p, true, passes);
    out->prefill_gops[1] = best_of(&p, false, passes);

    for (int i = 0; i < QW_TUNE_COUNT; i++) qw_tune_set((qw_tune_id)i, saved[i], saved_src[i]);
    free(p.w), free(p.xq), free(p.xq_kq), free(p.y);
    return 0;
}
