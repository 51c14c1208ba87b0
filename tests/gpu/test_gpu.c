/* test_gpu.c — the CUDA backend against the CPU path, and the backend
 * selection that needs no GPU.
 *
 * Without a GPU (CI): the selection tests run (QWISP_BACKEND words; `cuda`
 * fails with one line naming why; `auto` stays on the CPU), so do the tier
 * decision and the Q8_0/Q4_0 GEMVs' block picking (cu_pick.h, host-compiled),
 * and every GPU test prints one "SKIP: <reason>" line and passes.
 *
 * With a GPU, for each model of QWISP_GPU_MODELS (':'-separated; default the
 * two shipped models; tests/gpu/run.sh adds generated models of every type
 * and both architectures):
 *   - teacher-forced logits of a CPU greedy stream, GPU vs CPU: max |delta|
 *     relative to the largest |logit|, and top-1 agreement;
 *   - greedy decode on the GPU, token by token, equals the CPU's stream
 *     (required on the trained models, reported on random-weight ones);
 *   - on the GPU, a chunk's logits (prefill) equal the same tokens decoded
 *     one at a time, bit for bit;
 *   - the streaming tier (QWISP_DEVICE_SLOTS = n_expert_used: most evictions)
 *     gives the resident tier's logits bit for bit;
 *   - the device pool's cache stays within its limit;
 *   - a device context's KV and state copied out and back in (prefix cache,
 *     marks, KV files) continue with the same logits, bit for bit;
 *   - the lanes path's batched step (QWISP_DEVICE_BATCH=1) gives every
 *     sequence the logits of its tokens run alone, bit for bit;
 *   - kernels launched early (QWISP_DEVICE_PDL=1) give the logits of plain
 *     launches, bit for bit;
 *   - host experts (QWISP_DEVICE_HOST_EXPERTS, streaming tier): the host
 *     computes some of each decode token's experts; the greedy stream is the
 *     CPU's on the shipped models, each step's logits near the GPU-only
 *     ones', and a second run (another cache history) gives the same bits;
 *   - the host computing the misses (QWISP_DEVICE_MISSES=host): decode copies
 *     nothing, the greedy stream is the CPU's, a long prefill between two
 *     runs changes no bit, and the prefill's logits are the copies-only tier's;
 *     with QWISP_DEVICE_FIXED (a CPU run's routing trace) fewer picks go to
 *     the host and the stream is the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/backend.h"
#include "qwisp/options.h"
#include "qwisp/place.h"
#include "qwisp/pool.h"
#include "qwisp/quant.h"
#include "cuda/cu_pick.h"
#include "model/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_PROMPT = 8, N_GEN = 120, N_CTX = 256 }; /* 128 teacher-forced rows: 99 % = at most 1 miss */

static const qw_backend_ops *g_ops;
static char g_why[QW_ERROR_MAX + 16];

static void set_opt(qw_opt id, const char *v) {
    qw_error err = {{0}};
    assert_int_equal(qw_opt_set(id, v, "test", &err), 0);
}

/* A model placed on the backend named by `backend` (slots: QWISP_DEVICE_SLOTS or NULL). */
static qw_model *load_on(const char *path, const char *backend, const char *slots) {
    qw_error err = {{0}};
    set_opt(QW_OPT_BACKEND, backend);
    if (slots) set_opt(QW_OPT_DEVICE_SLOTS, slots);
    qw_model *m = qw_model_load(path, &err);
    if (!m) fail_msg("%s: %s", path, err.msg);
    if (qw_place_experts(m, N_CTX, &err)) fail_msg("%s: %s", path, err.msg);
    set_opt(QW_OPT_BACKEND, "auto");
    if (slots) set_opt(QW_OPT_DEVICE_SLOTS, "-1");
    return m;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The tests' token i: spread over the first 300 ids (or the vocabulary). */
static int32_t test_token(int i, int V) { return (int32_t)((1000 + 7919 * i) % (V > 300 ? 300 : V)); }

/* Greedy: N_PROMPT prompt ids then N_GEN decoded one at a time.  ids[] gets
 * the whole stream; last_logits (optional) the logits of every decode step. */
static void greedy(qw_model *m, int32_t *ids, float *step_logits) {
    qw_error err = {{0}};
    qw_ctx *c = qw_ctx_new(m, N_CTX, 2, &err);
    if (!c) fail_msg("ctx: %s", err.msg);
    const int V = m->hp.n_vocab;
    if (qw_ctx_eval(c, ids, N_PROMPT, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
    for (int i = 0; i < N_GEN; i++) {
        const float *l = qw_ctx_logits(c);
        if (step_logits) memcpy(step_logits + (size_t)i * V, l, (size_t)V * sizeof(float));
        ids[N_PROMPT + i] = argmax(l, V);
        if (i + 1 < N_GEN && qw_ctx_eval(c, &ids[N_PROMPT + i], 1, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
    }
    qw_ctx_free(c);
}

/* Teacher-forced logits of ids[0..n) as one chunk (all rows). */
static float *forced(qw_model *m, const int32_t *ids, int n) {
    qw_error err = {{0}};
    qw_ctx *c = qw_ctx_new(m, N_CTX, 2, &err);
    if (!c) fail_msg("ctx: %s", err.msg);
    if (qw_ctx_eval(c, ids, n, QW_LOGITS_ALL, &err)) fail_msg("eval: %s", err.msg);
    const size_t bytes = (size_t)n * m->hp.n_vocab * sizeof(float);
    float *out = malloc(bytes);
    memcpy(out, qw_ctx_logits(c), bytes);
    qw_ctx_free(c);
    return out;
}

static bool gpu_or_skip(const char *what) {
    if (g_ops) return true;
    printf("SKIP: %s: %s\n", what, g_why);
    return false;
}

/* ---- no GPU needed ------------------------------------------------------- */

static void test_backend_words(void **state) {
    (void)state;
    assert_int_equal(qw_backend_parse("cpu"), QW_BACKEND_CPU);
    assert_int_equal(qw_backend_parse("cuda"), QW_BACKEND_CUDA);
    assert_int_equal(qw_backend_parse("auto"), QW_BACKEND_AUTO);
    assert_int_equal(qw_backend_parse(NULL), QW_BACKEND_AUTO);
    assert_int_equal(qw_backend_parse("metal"), -1);
    qw_error err = {{0}};
    assert_int_not_equal(qw_opt_set(QW_OPT_BACKEND, "gpu", "test", &err), 0);
    assert_non_null(strstr(err.msg, "QWISP_BACKEND"));
}

/* cpu never touches the device; cuda without one fails naming why; auto falls back. */
static void test_selection(void **state) {
    (void)state;
    qw_error err = {{0}};
    qw_model *m = load_on("models/default.gguf", "cpu", NULL);
    assert_null(m->dev);
    qw_model_free(m);
    m = qw_model_load("models/default.gguf", &err);
    assert_non_null(m);
    set_opt(QW_OPT_BACKEND, "cuda");
    const int rc = qw_place_experts(m, N_CTX, &err);
    set_opt(QW_OPT_BACKEND, "auto");
    if (g_ops) {
        assert_int_equal(rc, 0);
        assert_non_null(m->dev);
        printf("INFO: %s\n", g_ops->model_describe(m->dev));
    } else {
        assert_int_equal(rc, -1);
        assert_non_null(strstr(err.msg, "QWISP_BACKEND=cuda: "));
        assert_null(strchr(err.msg, '\n'));
        printf("INFO: QWISP_BACKEND=cuda without a GPU says: %s\n", err.msg);
    }
    qw_model_free(m);
    m = load_on("models/default.gguf", "auto", NULL);
    assert_true(g_ops ? m->dev != NULL : m->dev == NULL);
    qw_model_free(m);
}

/* The VRAM tier from sizes alone (no GPU): resident when everything fits,
 * else C slots from what is left beside the non-expert weights, refused
 * below n_expert_used; QWISP_DEVICE_SLOTS forces it.  Sizes of the full
 * Qwen3.6-35B-A3B Q4_K file (40 layers, 256 experts top-8): ~1.3 GB dense,
 * ~19.4 GB of experts, one expert over all layers ~75.8 MB. */
static void test_tier_decision(void **state) {
    (void)state;
    const uint64_t GB = 1000000000ull, dense = 1300000000ull, experts = 19400000000ull, one = 75800000ull;
    qw_device_tier t = qw_device_tier_decide(141 * GB, 2 * GB, dense, experts, one, 256, 8, -1);
    assert_true(t.fits);
    assert_int_equal(t.slots, 0); /* an H200: resident */
    t = qw_device_tier_decide(8 * GB, 1 * GB, dense, experts, one, 256, 8, -1);
    assert_true(t.fits);
    assert_int_equal(t.slots, (int64_t)((7 * GB - dense) / one)); /* 8 GB: 75 slots a layer */
    assert_true(t.slots >= 8 && t.slots < 256);
    t = qw_device_tier_decide(2 * GB, 1 * GB, dense, experts, one, 256, 8, -1);
    assert_false(t.fits); /* 8 slots do not fit beside 1.3 GB in 1 GB */
    t = qw_device_tier_decide(8 * GB, 1 * GB, dense, experts, one, 256, 8, 16);
    assert_true(t.fits);
    assert_int_equal(t.slots, 16);
    t = qw_device_tier_decide(8 * GB, 1 * GB, dense, experts, one, 256, 8, 4);
    assert_false(t.fits); /* fewer slots than experts a token uses */
    t = qw_device_tier_decide(8 * GB, 1 * GB, dense, experts, one, 256, 8, 0);
    assert_true(t.fits);
    assert_int_equal(t.slots, 0); /* forced resident */
    t = qw_device_tier_decide(8 * GB, 1 * GB, dense, experts, one, 256, 8, 300);
    assert_int_equal(t.slots, 0); /* as many slots as experts = resident */
}

/* ---- the GEMVs' direct block loads (cu_pick.h; no GPU needed) ------------- */

/* Every block of Q8_0 and Q4_0 rows of 8..80 blocks, as the direct loads
 * reach it: the 16-byte words from cu_pick_base lie inside the row, and the
 * scale and quant words picked out of them (cu_pick_words, cu_pick_block)
 * are the block's own bytes. */
static void test_block_pick(void **state) {
    static const int bs_of[2] = {34, 18}, nq_of[2] = {3, 2}, nw_of[2] = {9, 5};
    uint8_t *row = malloc(80 * 34 + 16);
    assert_non_null(row);
    unsigned seed = 7;
    for (int t = 0; t < 2; t++) {
        const int bs = bs_of[t], nq = nq_of[t], nw = nw_of[t];
        for (int nsb = 8; nsb <= 80; nsb += 8) {
            const size_t rb = (size_t)nsb * bs;
            assert_int_equal(rb % 16, 0);
            for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
            for (int j = 0; j < nsb; j++) {
                const size_t base = cu_pick_base(j, bs);
                const int o = cu_pick_off(j, bs);
                assert_int_equal(base % 16, 0);
                assert_true(base + (size_t)o == (size_t)j * bs && o % 2 == 0);
                assert_true(base + 16 * (size_t)nq <= rb); /* no word past the row */
                uint32_t x[12], y[9], q[8];
                memcpy(x, row + base, 16 * (size_t)nq);
                cu_pick_words(x, o, nw, y);
                const uint16_t d = cu_pick_block(y, 8 * (o & 3), nw, q);
                const uint8_t *b = row + (size_t)j * bs;
                if (d != (uint16_t)(b[0] | b[1] << 8) || memcmp(q, b + 2, (size_t)bs - 2))
                    fail_msg("block %d of a %d-block row (%d bytes a block): wrong bytes picked", j, nsb, bs);
            }
        }
    }
    free(row);
}

/* ---- GPU vs CPU ---------------------------------------------------------- */

static bool is_trained(const char *path) { return strstr(path, "models/") == path; }

static void compare_one(const char *path) {
    qw_model *mc = load_on(path, "cpu", NULL);
    qw_model *mg = load_on(path, "cuda", NULL);
    assert_non_null(mg->dev);
    const int V = mc->hp.n_vocab, N = N_PROMPT + N_GEN;
    int32_t ids_c[N_PROMPT + N_GEN], ids_g[N_PROMPT + N_GEN];
    for (int i = 0; i < N_PROMPT; i++) ids_c[i] = ids_g[i] = test_token(i, V);
    float *steps = malloc((size_t)N_GEN * V * sizeof(float));
    greedy(mc, ids_c, NULL);
    greedy(mg, ids_g, steps);
    float *lc = forced(mc, ids_c, N), *lg = forced(mg, ids_c, N);
    double maxd = 0, maxl = 0;
    int agree = 0;
    for (int r = 0; r < N; r++) {
        const float *a = lc + (size_t)r * V, *b = lg + (size_t)r * V;
        for (int i = 0; i < V; i++) {
            const double d = fabs((double)a[i] - b[i]);
            maxd = d > maxd || isnan(d) ? d : maxd;
            maxl = fabs(a[i]) > maxl ? fabs(a[i]) : maxl;
        }
        agree += argmax(a, V) == argmax(b, V);
    }
    int same = 0;
    while (same < N_GEN && ids_c[N_PROMPT + same] == ids_g[N_PROMPT + same]) same++;
    const double rel = maxd / (maxl > 0 ? maxl : 1);
    printf("INFO: %s%s: max|d| %.3g (rel %.2e of max|logit| %.3g), top-1 %d/%d, greedy %d/%d equal\n", path,
           is_trained(path) ? " (trained)" : "", maxd, rel, maxl, agree, N, same, N_GEN);
    /* The CPU quantizes activations to Q8_K before its K-quant dots; the
     * GPU dots those with f32 activations (docs/cuda.md), and sums in another
     * order: the tolerance is that difference.  Q8_0/Q4_0 take the CPU's
     * Q8_0 activations on both sides. */
    assert_true(rel < 1e-1);
    assert_true(agree * 100 >= 90 * N);
    if (is_trained(path)) { /* the shipped models: top-1 >= 99 % and identical greedy */
        assert_true(agree * 100 >= 99 * N);
        assert_int_equal(same, N_GEN);
    }
    /* prefill == decode on the GPU, bit for bit, on the GPU's own stream */
    float *pg = forced(mg, ids_g, N);
    for (int i = 0; i < N_GEN; i++)
        if (memcmp(pg + (size_t)(N_PROMPT - 1 + i) * V, steps + (size_t)i * V, (size_t)V * sizeof(float)))
            fail_msg("%s: GPU prefill row %d differs from the decode step's logits", path, N_PROMPT - 1 + i);
    /* streaming tier == resident tier, bit for bit */
    char slots[16];
    snprintf(slots, sizeof slots, "%d", mc->hp.n_expert_used);
    qw_model *ms = load_on(path, "cuda", slots);
    assert_non_null(ms->dev);
    float *ls = forced(ms, ids_c, N);
    int32_t ids_s[N_PROMPT + N_GEN];
    memcpy(ids_s, ids_g, sizeof ids_s);
    float *steps_s = malloc((size_t)N_GEN * V * sizeof(float));
    greedy(ms, ids_s, steps_s);
    const qw_device_stats st = qw_backend_stats(ms);
    printf("INFO: %s: streaming tier (%s slots/layer): %llu expert copies, %.1f MB\n", path, slots,
           (unsigned long long)st.expert_copies, st.expert_copy_bytes / 1e6);
    assert_true(st.expert_copies > 0);
    assert_memory_equal(ls, lg, (size_t)N * V * sizeof(float));
    assert_memory_equal(steps_s, steps, (size_t)N_GEN * V * sizeof(float));
    free(steps_s), free(ls), free(pg), free(lc), free(lg), free(steps);
    qw_model_free(ms);
    qw_model_free(mg);
    qw_model_free(mc);
}

/* One cmocka test per model (state = its path), so a failing model does not
 * hide the others' results. */
static void test_gpu_vs_cpu(void **state) {
    if (!gpu_or_skip("GPU vs CPU logits")) return;
    compare_one((const char *)*state);
}

/* Decode far past one block and one V tile of the one-token attention
 * (cu_attn.cu splits a step's positions into blocks of 128) and past the KV's
 * first 256 rows: each decode step's logits equal the same position's row of
 * one prefill chunk, bit for bit (the split kernels and the one-block-per-head
 * kernel compute the same numbers), and the CPU's top-1 at every row. */
static void test_long_decode(void **state) {
    if (!gpu_or_skip("long-context decode")) return;
    const char *path = (const char *)*state;
    enum { L = 700, T = 5, CTX = 1024 };
    qw_model *mg = load_on(path, "cuda", NULL), *mc = load_on(path, "cpu", NULL);
    assert_non_null(mg->dev);
    qw_error err = {{0}};
    const int V = mg->hp.n_vocab;
    int32_t ids[L + T];
    for (int i = 0; i < L + T; i++) ids[i] = test_token(i, V);
    qw_ctx *chunk = qw_ctx_new(mg, CTX, 2, &err), *dec = qw_ctx_new(mg, CTX, 2, &err), *cpu = qw_ctx_new(mc, CTX, 2, &err);
    assert_non_null(chunk), assert_non_null(dec), assert_non_null(cpu);
    assert_int_equal(qw_ctx_eval(chunk, ids, L + T, QW_LOGITS_ALL, &err), 0);
    assert_int_equal(qw_ctx_eval(cpu, ids, L + T, QW_LOGITS_ALL, &err), 0);
    const float *rows = qw_ctx_logits(chunk), *crows = qw_ctx_logits(cpu);
    assert_int_equal(qw_ctx_eval(dec, ids, L, QW_LOGITS_LAST, &err), 0);
    double maxd = 0;
    for (int i = 0;; i++) {
        const float *want = rows + (size_t)(L - 1 + i) * V, *c = crows + (size_t)(L - 1 + i) * V;
        if (memcmp(qw_ctx_logits(dec), want, (size_t)V * sizeof(float)))
            fail_msg("%s: decode at position %d differs from the prefill chunk's row", path, L - 1 + i);
        assert_int_equal(argmax(want, V), argmax(c, V));
        for (int j = 0; j < V; j++) maxd = fmax(maxd, fabs((double)want[j] - c[j]));
        if (i == T) break;
        assert_int_equal(qw_ctx_eval(dec, ids + L + i, 1, QW_LOGITS_LAST, &err), 0);
    }
    printf("INFO: %s: decode at positions %d..%d equals the prefill chunk bit for bit; vs CPU max|d| %.3g, same top-1\n",
           path, L - 1, L - 1 + T, maxd);
    qw_ctx_free(chunk), qw_ctx_free(dec), qw_ctx_free(cpu);
    qw_model_free(mg), qw_model_free(mc);
}

/* The device pool keeps its cache within the limit throughout a long
 * prefill: the pool's cache high-water mark (sampled after every free,
 * restarted when the limit changes) must stay <= the limit, and the cache
 * must have been used at all (else the check says nothing). */
static void test_pool_limit(void **state) {
    (void)state;
    if (!gpu_or_skip("device pool limit")) return;
    const uint64_t old = qw_pool_get_cache_limit(), lim = 1u << 20;
    qw_pool_set_cache_limit(lim);
    qw_model *m = load_on("models/qwen35moe.gguf", "cuda", NULL);
    qw_error err = {{0}};
    qw_ctx *c = qw_ctx_new(m, 2048, 2, &err);
    assert_non_null(c);
    qw_ctx_set_chunk_size(c, 64);
    enum { N = 2000, STEP = 250 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 31) % 500;
    const qw_device_stats s0 = qw_backend_stats(m);
    for (int i0 = 0; i0 < N; i0 += STEP) {
        /* growing chunks: the activation buffers move up a class now and then */
        qw_ctx_set_chunk_size(c, 16 << (i0 / STEP % 4));
        assert_int_equal(qw_ctx_eval(c, ids + i0, STEP, QW_LOGITS_LAST, &err), 0);
        const qw_device_stats s = qw_backend_stats(m);
        if (s.cache_peak_bytes > lim || s.cache_bytes > lim)
            fail_msg("device cache peak %llu (now %llu) > limit %llu", (unsigned long long)s.cache_peak_bytes,
                     (unsigned long long)s.cache_bytes, (unsigned long long)s.cache_limit);
    }
    const qw_device_stats s = qw_backend_stats(m);
    printf("INFO: device pool over a %d-token prefill (chunks 16..128): active %.1f MB, peak %.1f MB, cache peak "
           "%.3f MB (limit %.0f MB), %llu hits, %llu misses\n", N, s.active_bytes / 1e6, s.peak_bytes / 1e6,
           s.cache_peak_bytes / 1e6, lim / 1e6, (unsigned long long)(s.hits - s0.hits),
           (unsigned long long)(s.misses - s0.misses));
    assert_int_equal(s.cache_limit, lim);
    assert_true(s.cache_peak_bytes > 0); /* buffers were freed into the cache: the limit was exercised */
    assert_true(s.cache_peak_bytes <= lim);
    qw_ctx_free(c);
    qw_model_free(m);
    qw_pool_set_cache_limit(old);
}

/* kv_export / kv_import through a host byte buffer */
typedef struct {
    char *p;
    size_t n, at;
} kv_buf;
static int kv_put(void *user, void *rows, size_t bytes) {
    kv_buf *b = user;
    b->p = realloc(b->p, b->n + bytes);
    memcpy(b->p + b->n, rows, bytes);
    b->n += bytes;
    return 0;
}
static int kv_get(void *user, void *rows, size_t bytes) {
    kv_buf *b = user;
    if (b->at + bytes > b->n) return -1;
    memcpy(rows, b->p + b->at, bytes);
    b->at += bytes;
    return 0;
}

static void eval_or_fail(qw_ctx *c, const int32_t *ids, int n) {
    qw_error err = {{0}};
    if (qw_ctx_eval(c, ids, n, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
}

/* A device context's KV and recurrent state leave and re-enter the device
 * exactly (the prefix cache, `qwisp ab` and the KV files depend on it): a
 * context rebuilt from another one's KV prefix + saved state, one rebuilt
 * from exported KV bytes, and one rewound to a mark all continue with the
 * original's logits, bit for bit — on qwen35moe (attention + recurrent). */
static void test_state_io(void **state) {
    (void)state;
    if (!gpu_or_skip("device state and KV copies")) return;
    qw_model *m = load_on("models/qwen35moe.gguf", "cuda", NULL);
    qw_error err = {{0}};
    const int V = m->hp.n_vocab;
    enum { A = 40, B = 48, N = 56 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % 400;
    qw_ctx *a = qw_ctx_new(m, N_CTX, 2, &err), *b = qw_ctx_new(m, N_CTX, 2, &err), *c = qw_ctx_new(m, N_CTX, 2, &err);
    assert_non_null(a), assert_non_null(b), assert_non_null(c);
    const uint64_t bytes = qw_ctx_state_bytes(a);
    assert_true(bytes > 0);
    char *s_a = malloc(bytes), *s_b = malloc(bytes);
    float *want = malloc((size_t)V * sizeof(float));
    eval_or_fail(a, ids, A);
    assert_int_equal(qw_ctx_state_save(a, s_a), 0);
    eval_or_fail(a, ids + A, B - A);
    memcpy(want, qw_ctx_logits(a), (size_t)V * sizeof(float));
    /* b: a's first A positions copied on the device, the state loaded */
    assert_int_equal(qw_ctx_copy_prefix(b, a, A, &err), 0);
    assert_int_equal(qw_ctx_state_load(b, s_a, A), A);
    eval_or_fail(b, ids + A, B - A);
    assert_memory_equal(qw_ctx_logits(b), want, (size_t)V * sizeof(float));
    /* c: b's KV exported to host bytes and imported, b's state loaded */
    kv_buf kb = {0};
    assert_int_equal(qw_ctx_kv_export(b, B, kv_put, &kb), 0);
    assert_true(kb.n > 0);
    assert_int_equal(qw_ctx_kv_import(c, B, kv_get, &kb, &err), 0);
    assert_int_equal(qw_ctx_state_save(b, s_b), 0);
    assert_int_equal(qw_ctx_state_load(c, s_b, B), B);
    eval_or_fail(b, ids + B, N - B);
    memcpy(want, qw_ctx_logits(b), (size_t)V * sizeof(float));
    eval_or_fail(c, ids + B, N - B);
    assert_memory_equal(qw_ctx_logits(c), want, (size_t)V * sizeof(float));
    /* a mark: c rewound to B and run again */
    assert_int_equal(qw_ctx_state_load(c, s_b, B), B);
    qw_ctx_mark *mk = qw_ctx_mark_save(c);
    assert_non_null(mk);
    eval_or_fail(c, ids, 3); /* somewhere else first */
    assert_int_equal(qw_ctx_mark_restore(c, mk), 0);
    assert_int_equal(qw_ctx_n_past(c), B);
    eval_or_fail(c, ids + B, N - B);
    assert_memory_equal(qw_ctx_logits(c), want, (size_t)V * sizeof(float));
    /* the mark re-saved in place at B + 1 (token-paired decode does this at
     * every position) and restored twice: same logits each time */
    assert_int_equal(qw_ctx_state_load(c, s_b, B), B);
    eval_or_fail(c, ids + B, 1);
    assert_int_equal(qw_ctx_mark_update(c, mk), 0);
    eval_or_fail(c, ids + B + 1, N - B - 1);
    memcpy(want, qw_ctx_logits(c), (size_t)V * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        eval_or_fail(c, ids, 2);
        assert_int_equal(qw_ctx_mark_restore(c, mk), 0);
        assert_int_equal(qw_ctx_n_past(c), B + 1);
        eval_or_fail(c, ids + B + 1, N - B - 1);
        assert_memory_equal(qw_ctx_logits(c), want, (size_t)V * sizeof(float));
    }
    /* a mark belongs to its context */
    assert_int_equal(qw_ctx_mark_update(b, mk), -1);
    printf("INFO: device state %llu bytes and %zu KV bytes out and back in: same logits\n",
           (unsigned long long)bytes, kb.n);
    qw_ctx_mark_free(mk);
    free(kb.p), free(s_a), free(s_b), free(want);
    qw_ctx_free(a), qw_ctx_free(b), qw_ctx_free(c);
    qw_model_free(m);
}

/* The models of QWISP_GPU_MODELS (':'-separated; default the two shipped
 * models), split once into a static list that lives for the program. */
enum { MAX_MODELS = 64 };
static int gpu_models(const char *const **out) {
    static char buf[8192];
    static const char *models[MAX_MODELS];
    static int n = -1;
    if (n < 0) {
        const char *list = getenv("QWISP_GPU_MODELS");
        snprintf(buf, sizeof buf, "%s", list && *list ? list : "models/default.gguf:models/qwen35moe.gguf");
        n = 0;
        for (char *save = NULL, *p = strtok_r(buf, ":", &save); p && n < MAX_MODELS; p = strtok_r(NULL, ":", &save))
            models[n++] = p;
    }
    *out = models;
    return n;
}

/* The lanes path's batched step (cu_eval_batch) on one model and tier: eight
 * sequences' prompts of different lengths in one step (host-grouped
 * routing), then steps of one token each (routing on the device: a tile per
 * pick, or grouped by expert under QWISP_DEVICE_LANES_GROUP), one of them
 * giving a sequence three tokens: each sequence's logits after every step
 * equal those of the same tokens run through its own context alone. */
static void batch_one(const char *path, const char *slots) {
    /* eight sequences: a step of one token each is the batched graph's and the
     * all-sequence kernels' largest case (CU_SEQS_MAX); step 3 mixes in three tokens */
    enum { B = 8, STEPS = 6, MAXT = 32 };
    static const int plen[B] = {5, 9, 3, 12, 1, 7, 2, 4};
    qw_model *m = load_on(path, "cuda", slots);
    qw_error err = {{0}};
    const int V = m->hp.n_vocab, vmax = V < 400 ? V : 400;
    int32_t ids[B][MAXT];
    int take[STEPS][B];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < MAXT; t++) ids[b][t] = (b * 97 + t * 31 + 7) % vmax;
        for (int st = 0; st < STEPS; st++) take[st][b] = st == 0 ? plen[b] : (st == 3 && b == 1 ? 3 : 1);
    }
    float *want = malloc((size_t)B * STEPS * V * sizeof(float));
    for (int b = 0; b < B; b++) {
        qw_ctx *c = qw_ctx_new(m, N_CTX, 2, &err);
        assert_non_null(c);
        for (int st = 0, pos = 0; st < STEPS; pos += take[st][b], st++) {
            eval_or_fail(c, ids[b] + pos, take[st][b]);
            memcpy(want + ((size_t)b * STEPS + st) * V, qw_ctx_logits(c), (size_t)V * sizeof(float));
        }
        qw_ctx_free(c);
    }
    set_opt(QW_OPT_DEVICE_BATCH, "1");
    qw_ctx *ws = qw_ctx_new(m, 16, 2, &err), *lane[B];
    assert_non_null(ws);
    for (int b = 0; b < B; b++) assert_non_null(lane[b] = qw_ctx_new(m, N_CTX, 1, &err));
    int pos[B] = {0};
    for (int st = 0; st < STEPS; st++) {
        qw_batch_seq seqs[B];
        for (int b = 0; b < B; b++) seqs[b] = (qw_batch_seq){lane[b], ids[b] + pos[b], take[st][b], true};
        if (qw_batch_eval(ws, seqs, B, &err)) fail_msg("%s: batched step %d: %s", path, st, err.msg);
        for (int b = 0; b < B; b++) {
            pos[b] += take[st][b];
            assert_int_equal(qw_ctx_n_past(lane[b]), pos[b]);
            if (memcmp(qw_ctx_logits(lane[b]), want + ((size_t)b * STEPS + st) * V, (size_t)V * sizeof(float)))
                fail_msg("%s%s%s: step %d, sequence %d: batched logits differ from the sequence run alone", path,
                         slots ? ", slots " : "", slots ? slots : "", st, b);
        }
    }
    set_opt(QW_OPT_DEVICE_BATCH, "0");
    printf("INFO: %s%s%s: %d sequences batched over %d steps: each one's logits its own run's, bit for bit\n", path,
           slots ? ", slots " : "", slots ? slots : "", B, STEPS);
    for (int b = 0; b < B; b++) qw_ctx_free(lane[b]);
    qw_ctx_free(ws);
    free(want);
    qw_model_free(m);
}

static void test_batch(void **state) {
    (void)state;
    if (!gpu_or_skip("batched lanes step")) return;
    const char *models[] = {"models/default.gguf", "models/qwen35moe.gguf"};
    for (int i = 0; i < 2; i++) {
        /* QWISP_DEVICE_LANES_GROUP: the one-token steps' experts a tile per
         * pick (0), grouped by expert on the tensor cores (1) or on dp4a (2),
         * and unset (-1 here: grouped from 8 tokens) */
        for (int g = 2; g >= -1; g--) {
            char v[2] = {(char)('0' + g), 0};
            if (g >= 0) set_opt(QW_OPT_DEVICE_LANES_GROUP, v);
            else qw_opt_reset(QW_OPT_DEVICE_LANES_GROUP);
            batch_one(models[i], NULL);
            if (g >= 0) printf("INFO: (that with QWISP_DEVICE_LANES_GROUP=%d)\n", g);
            else printf("INFO: (that with QWISP_DEVICE_LANES_GROUP unset)\n");
        }
        qw_error err = {{0}};
        qw_model *probe_m = qw_model_load(models[i], &err);
        assert_non_null(probe_m);
        char slots[16];
        snprintf(slots, sizeof slots, "%d", probe_m->hp.n_expert_used);
        qw_model_free(probe_m);
        batch_one(models[i], slots);
    }
    /* the generated files of tests/gpu/run.sh whose weights take the K-quant
     * and Q4_0 few-token kernels in a lanes step (the shipped models are Q8_0) */
    const char *const *list;
    for (int i = 0, n = gpu_models(&list); i < n; i++)
        if (strstr(list[i], "-q4_K.gguf") || strstr(list[i], "-q6_K.gguf") || strstr(list[i], "-q4_0.gguf"))
            batch_one(list[i], NULL);
}

/* A model on the GPU under the settings in force: its greedy stream (ids,
 * prompt made here) with every decode step's logits (*steps), and the
 * teacher-forced logits of force[0..N_PROMPT + N_GEN) as one chunk (*rows;
 * force may be ids itself).  The caller frees the model. */
static qw_model *gpu_greedy_forced(const char *path, int32_t *ids, const int32_t *force, float **steps, float **rows) {
    qw_model *m = load_on(path, "cuda", NULL);
    assert_non_null(m->dev);
    const int V = m->hp.n_vocab;
    for (int j = 0; j < N_PROMPT; j++) ids[j] = test_token(j, V);
    *steps = malloc((size_t)N_GEN * V * sizeof(float));
    greedy(m, ids, *steps);
    *rows = forced(m, force, N_PROMPT + N_GEN);
    return m;
}

/* A device context's logits buffer is page-locked (backend.h host_pin), and
 * stays right as it is replaced: one LAST row into the pinned buffer, then
 * ALL rows over several chunks (the gather buffer takes its place, the pinned
 * one unpinned and freed), then LAST again; every row equals the same
 * position's row of one ALL eval on another context, bit for bit. */
static void test_logits_pinned(void **state) {
    if (!gpu_or_skip("page-locked logits")) return;
    enum { A = 8, B = 40, N = A + B + 1 };
    qw_model *m = load_on("models/default.gguf", "cuda", NULL);
    assert_non_null(m->dev);
    qw_error err = {{0}};
    const int V = m->hp.n_vocab;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = test_token(i, V);
    qw_ctx *ref = qw_ctx_new(m, N_CTX, 2, &err);
    assert_non_null(ref);
    assert_int_equal(qw_ctx_eval(ref, ids, N, QW_LOGITS_ALL, &err), 0);
    const float *want = qw_ctx_logits(ref);
    set_opt(QW_OPT_CHUNK, "16"); /* B rows in three chunks: qw_ctx_eval gathers them */
    qw_ctx *c = qw_ctx_new(m, N_CTX, 2, &err);
    set_opt(QW_OPT_CHUNK, "512");
    assert_non_null(c);
    assert_int_equal(qw_ctx_eval(c, ids, A, QW_LOGITS_LAST, &err), 0);
    assert_true(c->logits_pinned);
    assert_memory_equal(qw_ctx_logits(c), want + (size_t)(A - 1) * V, (size_t)V * sizeof(float));
    assert_int_equal(qw_ctx_eval(c, ids + A, B, QW_LOGITS_ALL, &err), 0);
    assert_false(c->logits_pinned); /* the gather buffer */
    assert_memory_equal(qw_ctx_logits(c), want + (size_t)A * V, (size_t)B * V * sizeof(float));
    assert_int_equal(qw_ctx_eval(c, ids + A + B, 1, QW_LOGITS_LAST, &err), 0);
    assert_memory_equal(qw_ctx_logits(c), want + (size_t)(N - 1) * V, (size_t)V * sizeof(float));
    printf("INFO: logits page-locked for LAST rows; LAST, ALL over 3 chunks, LAST on one context equal one ALL eval\n");
    qw_ctx_free(c), qw_ctx_free(ref);
    qw_model_free(m);
}

/* Programmatic dependent launch (QWISP_DEVICE_PDL) changes when kernels
 * start, never what they read: a greedy decode (the decode graph) and a
 * prefill chunk give the same logits bit for bit with it on and off. */
static void test_pdl(void **state) {
    (void)state;
    if (!gpu_or_skip("programmatic dependent launch")) return;
    const char *models[] = {"models/default.gguf", "models/qwen35moe.gguf"};
    for (int i = 0; i < 2; i++) {
        float *steps[2], *rows[2];
        int32_t ids[2][N_PROMPT + N_GEN];
        for (int on = 0; on < 2; on++) {
            set_opt(QW_OPT_DEVICE_PDL, on ? "1" : "0");
            qw_model *m = gpu_greedy_forced(models[i], ids[on], ids[0], &steps[on], &rows[on]);
            const int V = m->hp.n_vocab;
            if (on) {
                assert_memory_equal(ids[0], ids[1], sizeof ids[0]);
                assert_memory_equal(steps[0], steps[1], (size_t)N_GEN * V * sizeof(float));
                assert_memory_equal(rows[0], rows[1], (size_t)(N_PROMPT + N_GEN) * V * sizeof(float));
                printf("INFO: %s: decode and prefill logits equal with QWISP_DEVICE_PDL 0 and 1\n", models[i]);
            }
            qw_model_free(m);
        }
        free(steps[0]), free(steps[1]), free(rows[0]), free(rows[1]);
    }
    set_opt(QW_OPT_DEVICE_PDL, "1");
}

/* QWISP_DEVICE_MMA auto / off / always gives the same bits (docs/knobs.md):
 * teacher-forced rows of a chunk of 128 tokens (grouped expert tiles: the
 * generated models' 8 experts top-2 get 32 assignments each, so the MMA
 * kernels take 4 tiles a warp) and of 5 tokens (a dense few-token matmul:
 * MMA under always), and the decode steps (MMA a token under always). */
static void test_mma_modes(void **state) {
    (void)state;
    if (!gpu_or_skip("tensor-core and dp4a matmuls give the same bits")) return;
    static const char *modes[] = {"auto", "off", "always"};
    enum { NF = 5 };
    const char *const *list;
    for (int i = 0, nm = gpu_models(&list); i < nm; i++) {
        float *rows[3], *few[3], *steps[3];
        int32_t ids[3][N_PROMPT + N_GEN];
        for (int md = 0; md < 3; md++) {
            set_opt(QW_OPT_DEVICE_MMA, modes[md]);
            qw_model *m = gpu_greedy_forced(list[i], ids[md], ids[0], &steps[md], &rows[md]);
            const int V = m->hp.n_vocab;
            few[md] = forced(m, ids[0], NF);
            if (md) {
                if (memcmp(ids[0], ids[md], sizeof ids[0]) ||
                    memcmp(steps[0], steps[md], (size_t)N_GEN * V * sizeof(float)))
                    fail_msg("%s: decode logits differ between QWISP_DEVICE_MMA auto and %s", list[i], modes[md]);
                if (memcmp(rows[0], rows[md], (size_t)(N_PROMPT + N_GEN) * V * sizeof(float)))
                    fail_msg("%s: logits of a %d-token chunk differ between QWISP_DEVICE_MMA auto and %s", list[i],
                             N_PROMPT + N_GEN, modes[md]);
                if (memcmp(few[0], few[md], (size_t)NF * V * sizeof(float)))
                    fail_msg("%s: logits of a %d-token chunk differ between QWISP_DEVICE_MMA auto and %s", list[i], NF,
                             modes[md]);
            }
            qw_model_free(m);
        }
        printf("INFO: %s: logits equal with QWISP_DEVICE_MMA auto, off and always\n", list[i]);
        for (int md = 0; md < 3; md++) free(rows[md]), free(few[md]), free(steps[md]);
    }
    set_opt(QW_OPT_DEVICE_MMA, "auto");
}

/* QWISP_DEVICE_HOST_EXPERTS = K/2 on the streaming tier (n_expert_used
 * slots): decode steps hand the last half of each token's picks to the host.
 * Those rows carry the CPU kernels' bits, so the check is the GPU-vs-CPU one
 * (the CPU's greedy stream on the trained models, top-1 of every step); which
 * picks go to the host depends on the routing alone, so running the same
 * stream again after the cache has moved gives the same bits. */
static void test_host_experts(void **state) {
    (void)state;
    if (!gpu_or_skip("host experts")) return;
    const char *models[] = {"models/default.gguf", "models/qwen35moe.gguf"};
    for (int i = 0; i < 2; i++) {
        qw_model *mc = load_on(models[i], "cpu", NULL);
        const int V = mc->hp.n_vocab, K = mc->hp.n_expert_used;
        char slots[16], host[16];
        snprintf(slots, sizeof slots, "%d", K);
        snprintf(host, sizeof host, "%d", K / 2 > 0 ? K / 2 : 1);
        qw_model *mg = load_on(models[i], "cuda", slots);
        set_opt(QW_OPT_DEVICE_HOST_EXPERTS, host);
        qw_model *mh = load_on(models[i], "cuda", slots);
        set_opt(QW_OPT_DEVICE_HOST_EXPERTS, "0");
        assert_non_null(mg->dev), assert_non_null(mh->dev);
        int32_t ids_c[N_PROMPT + N_GEN], ids_g[N_PROMPT + N_GEN], ids_h[2][N_PROMPT + N_GEN];
        for (int j = 0; j < N_PROMPT; j++)
            ids_c[j] = ids_g[j] = ids_h[0][j] = ids_h[1][j] = test_token(j, V);
        float *sg = malloc((size_t)N_GEN * V * sizeof(float)), *sh[2];
        greedy(mc, ids_c, NULL);
        greedy(mg, ids_g, sg);
        for (int r = 0; r < 2; r++) {
            sh[r] = malloc((size_t)N_GEN * V * sizeof(float));
            greedy(mh, ids_h[r], sh[r]);
        }
        const qw_device_stats st = qw_backend_stats(mh);
        double maxd = 0, maxl = 0;
        int agree = 0;
        for (int r = 0; r < N_GEN; r++) {
            const float *a = sg + (size_t)r * V, *b = sh[0] + (size_t)r * V;
            for (int j = 0; j < V; j++) {
                maxd = fmax(maxd, fabs((double)a[j] - b[j]));
                maxl = fmax(maxl, fabs((double)a[j]));
            }
            agree += argmax(a, V) == argmax(b, V);
        }
        int same = 0;
        while (same < N_GEN && ids_c[N_PROMPT + same] == ids_h[0][N_PROMPT + same]) same++;
        printf("INFO: %s: host experts %s of %d: %llu host rows; vs GPU-only steps max|d| %.3g (max|logit| %.3g), "
               "top-1 %d/%d; greedy %d/%d equal to the CPU's\n",
               models[i], host, K, (unsigned long long)st.host_expert_rows, maxd, maxl, agree, N_GEN, same, N_GEN);
        assert_true(st.host_expert_rows >= (uint64_t)(2 * (N_GEN - 1) * mh->hp.n_layer * atoi(host)));
        assert_true(maxd / (maxl > 0 ? maxl : 1) < 1e-1);
        assert_true(agree * 100 >= 99 * N_GEN);
        assert_int_equal(same, N_GEN);
        assert_memory_equal(ids_h[0], ids_h[1], sizeof ids_h[0]);
        assert_memory_equal(sh[0], sh[1], (size_t)N_GEN * V * sizeof(float));
        free(sg), free(sh[0]), free(sh[1]);
        qw_model_free(mh), qw_model_free(mg), qw_model_free(mc);
    }
}

/* QWISP_DEVICE_MISSES=host on the streaming tier (3/4 of the experts in
 * slots: two top-k's of scratch, the rest fixed): decode steps run the fixed
 * experts' picks on the GPU and the others on the host, copying nothing; the
 * greedy stream is the CPU's, and a run after a long prefill (which copies
 * through the scratch slots) gives the same bits, since which picks are the
 * host's depends on the routing alone.  A prefill chunk stays on the GPU: its
 * logits are those of the copies-only tier, bit for bit. */
static void test_host_misses(void **state) {
    (void)state;
    if (!gpu_or_skip("host misses")) return;
    const char *models[] = {"models/default.gguf", "models/qwen35moe.gguf"};
    for (int i = 0; i < 2; i++) {
        qw_model *mc = load_on(models[i], "cpu", NULL);
        const int V = mc->hp.n_vocab, X = mc->hp.n_expert;
        char slots[16];
        snprintf(slots, sizeof slots, "%d", X * 3 / 4);
        qw_model *mg = load_on(models[i], "cuda", slots);
        set_opt(QW_OPT_DEVICE_MISSES, "host");
        qw_model *mh = load_on(models[i], "cuda", slots);
        set_opt(QW_OPT_DEVICE_MISSES, "copy");
        assert_non_null(mg->dev), assert_non_null(mh->dev);
        const uint64_t copies_at_load = qw_backend_stats(mh).expert_copies;
        int32_t ids_c[N_PROMPT + N_GEN], ids_h[2][N_PROMPT + N_GEN];
        for (int j = 0; j < N_PROMPT; j++)
            ids_c[j] = ids_h[0][j] = ids_h[1][j] = test_token(j, V);
        float *sh[2] = {malloc((size_t)N_GEN * V * sizeof(float)), malloc((size_t)N_GEN * V * sizeof(float))};
        greedy(mc, ids_c, NULL);
        greedy(mh, ids_h[0], sh[0]);
        const qw_device_stats st = qw_backend_stats(mh);
        /* a prefill chunk of the whole stream: GPU only, through the scratch slots */
        float *fg = forced(mg, ids_c, N_PROMPT + N_GEN), *fh = forced(mh, ids_c, N_PROMPT + N_GEN);
        const uint64_t copies_after_prefill = qw_backend_stats(mh).expert_copies;
        greedy(mh, ids_h[1], sh[1]);
        int same = 0;
        while (same < N_GEN && ids_c[N_PROMPT + same] == ids_h[0][N_PROMPT + same]) same++;
        printf("INFO: %s: QWISP_DEVICE_MISSES=host, %s slots: %llu host rows, %llu copies at load, %llu in decode, "
               "%llu in a prefill; greedy %d/%d equal to the CPU's\n",
               models[i], slots, (unsigned long long)st.host_expert_rows, (unsigned long long)copies_at_load,
               (unsigned long long)(st.expert_copies - copies_at_load),
               (unsigned long long)(copies_after_prefill - st.expert_copies), same, N_GEN);
        const uint64_t picks = (uint64_t)(N_PROMPT + N_GEN - 1) * mh->hp.n_layer * mh->hp.n_expert_used;
        assert_true(st.host_expert_rows > 0 && st.host_expert_rows < picks); /* some picks ran on the GPU */
        assert_true(st.expert_copies == copies_at_load);                     /* decode copied nothing */
        assert_true(copies_after_prefill > st.expert_copies);                /* the prefill did, into scratch */
        assert_memory_equal(fg, fh, (size_t)(N_PROMPT + N_GEN) * V * sizeof(float));
        assert_int_equal(same, N_GEN);
        assert_memory_equal(ids_h[0], ids_h[1], sizeof ids_h[0]);
        assert_memory_equal(sh[0], sh[1], (size_t)N_GEN * V * sizeof(float));
        /* QWISP_DEVICE_FIXED: the CPU's run of the same stream traced, its most used
         * experts fixed: fewer picks left to the host, the same greedy stream */
        char trace[96];
        snprintf(trace, sizeof trace, "/tmp/qwisp-gpu-trace-%d.txt", (int)getpid());
        unlink(trace);
        set_opt(QW_OPT_ROUTE_TRACE, trace);
        qw_model *mt = load_on(models[i], "cpu", NULL);
        int32_t ids_t[N_PROMPT + N_GEN], ids_p[N_PROMPT + N_GEN];
        memcpy(ids_t, ids_c, sizeof ids_t), memcpy(ids_p, ids_c, sizeof ids_p);
        greedy(mt, ids_t, NULL);
        qw_model_free(mt); /* closes the trace */
        set_opt(QW_OPT_ROUTE_TRACE, "");
        set_opt(QW_OPT_DEVICE_MISSES, "host");
        set_opt(QW_OPT_DEVICE_FIXED, trace);
        qw_model *mp = load_on(models[i], "cuda", slots);
        set_opt(QW_OPT_DEVICE_FIXED, "");
        set_opt(QW_OPT_DEVICE_MISSES, "copy");
        greedy(mp, ids_p, NULL);
        const uint64_t rows_p = qw_backend_stats(mp).host_expert_rows;
        printf("INFO: %s: QWISP_DEVICE_FIXED (the CPU run's trace): %llu host rows against %llu with the first "
               "experts fixed\n",
               models[i], (unsigned long long)rows_p, (unsigned long long)st.host_expert_rows);
        assert_true(rows_p < st.host_expert_rows);
        assert_memory_equal(ids_p, ids_c, sizeof ids_p);
        unlink(trace);
        qw_model_free(mp);
        free(sh[0]), free(sh[1]), free(fg), free(fh);
        qw_model_free(mh), qw_model_free(mg), qw_model_free(mc);
    }
}

int main(void) {
    qw_error err = {{0}};
    if (qw_options_init(&err)) {
        fprintf(stderr, "test_gpu: %s\n", err.msg);
        return 2;
    }
    /* QWISP_SIMD picks the CPU side's kernel level, as the CLI does (the
     * device's bits are one level's: the scalar reference's and avx512-amx's
     * for Q8_0, and for Q4_0 unless QWISP_AMX_Q4_0=0) */
    const char *simd = qw_opt_str(QW_OPT_SIMD);
    if (simd && strcmp(simd, "auto") != 0 && qw_simd_force(simd)) {
        fprintf(stderr, "test_gpu: QWISP_SIMD=%s: not a level\n", simd);
        return 2;
    }
    printf("INFO: CPU side at kernel level %s\n", qw_simd_level());
    if (!qw_opt_is_set(QW_OPT_CUDA_LIB)) {
        /* the object sits in the build directory, not next to this program */
        char lib[512];
        const char *b = getenv("QWISP_BUILD");
        snprintf(lib, sizeof lib, "%s/libqwisp_cuda.so", b && *b ? b : "build");
        qw_opt_set(QW_OPT_CUDA_LIB, lib, "test", &err);
    }
    qw_error why = {{0}};
    g_ops = qw_backend_cuda(&why);
    snprintf(g_why, sizeof g_why, "no GPU: %s", why.msg);
    struct CMUnitTest tests[13 + MAX_MODELS] = {
        cmocka_unit_test(test_backend_words),
        cmocka_unit_test(test_selection),
        cmocka_unit_test(test_tier_decision),
        cmocka_unit_test(test_block_pick),
        cmocka_unit_test(test_pool_limit),
        cmocka_unit_test(test_state_io),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_pdl),
        cmocka_unit_test(test_logits_pinned),
        cmocka_unit_test(test_mma_modes),
        cmocka_unit_test(test_host_experts),
        cmocka_unit_test(test_host_misses),
        {"test_long_decode(default)", test_long_decode, NULL, NULL, (void *)"models/default.gguf"},
        {"test_long_decode(qwen35moe)", test_long_decode, NULL, NULL, (void *)"models/qwen35moe.gguf"},
    };
    size_t n = 13;
    const char *const *list;
    for (int i = 0, nm = gpu_models(&list); i < nm; i++) {
        tests[n++] = (struct CMUnitTest){list[i], test_gpu_vs_cpu, NULL, NULL, (void *)list[i]};
        if (!g_ops) break; /* no GPU: one SKIP line, not one a model */
    }
    return _cmocka_run_group_tests("test_gpu", tests, n, NULL, NULL);
}
