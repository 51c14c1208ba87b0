/* ab_worker_tokens.c — `qwisp ab-worker --pair-tokens K`: the token-paired
 * decode, the A/B speed instrument that resolves a few per cent on a shared
 * machine (docs/ab.md, "Speed: token-paired").
 *
 * Why: with whole trials per arm (cmd_ab_worker.c), the two members of a pair
 * run tens of seconds apart, and on a machine shared with other work the
 * speed drifts by more than the 2 % asked about in that time (A/A floors of
 * ±8 % on an idle 16-core host, ±25 % here).  Here the pairs are
 * milliseconds apart and do the same work: at each decode position the
 * recurrent state is saved, and the same token is decoded once per arm from
 * it (state restored and the arm's pool policy applied before each, so every
 * arm runs from identical state), in an order that rotates and reverses
 * (qw_ab_token_order) so no arm always goes first.  A slow-down of the
 * machine that lasts longer than a few tokens then falls on both members of a
 * pair.  Positions are grouped in blocks of K (2 x the arms by default: then
 * every arm holds every slot of the order exactly twice per block, and a
 * slot's own cost — the first after the next position's save is ~3 % slower
 * — cancels inside the block); a block's time per arm is the untrimmed sum
 * over its tokens (a cost the arm causes on one token counts), and the
 * statistics (ab_stats.c) pair each arm's block with the baseline's same
 * block.
 *
 * Time another process held the step's thread is not the arm's: each
 * token's run-queue delay (ab_sched.c) is measured, and decode_tok_s is
 * tokens / (wall − that delay); decode_tok_s_wall keeps the raw wall view.
 * On the shared 2-core box this halved the per-token spread.
 *
 * Every arm must choose the same next token at every position: a pool policy
 * must not change the output, and a different token would mean the restore
 * was not exact.  The run stops with an error if they do not.
 *
 * On a streaming tier (experts copied into a bounded cache: the CPU's, or the
 * GPU's VRAM slots) the arm that decodes a position first pays the copies of
 * that position's experts and the others find them cached, so the order, not
 * the arm, decided much of a block's time (an A/A floor of ±6.4 % on the
 * GPU's 8 GB tier).  --prime runs one untimed pass first at every position.
 */
#include "ab_worker.h"
#include "qwisp/backend.h"
#include "qwisp/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double *ms, *cpu_ms, *mcyc, *wait, *wait_any; /* [block] this block's per-token samples */
    double evicted, os_calls;   /* pool counters' growth during this arm's tokens */
} arm_block;

/* Bytes the device pool's bound has given back so far (0 on the CPU backend):
 * on the GPU the path's cache limit acts on the device pool too. */
static double device_evicted(void) {
    qw_device_stats d;
    return qw_backend_active_stats(&d) ? (double)d.evicted_bytes : 0;
}

static void emit(cJSON *arr, const inproc_arm *a, int arm, int round, const arm_block *b, int32_t n, uint64_t hash,
                 const qw_ab_perf *perf) {
    /* a step cannot have waited longer than it lasted: schedstat charges a
     * delay at the next switch, so a wait that began before the step can be
     * counted in it; clamped, and a block left with no time at all reports
     * no rate (null) rather than 0 tok/s */
    double total = 0, wall = 0;
    for (int i = 0; i < n; i++) total += b->ms[i] - fmin(b->wait[i], b->ms[i]), wall += b->ms[i];
    if (!(total > 0)) total = NAN;
    qw_ab_tokstats w = qw_ab_token_stats(b->ms, n), cp = qw_ab_token_stats(b->cpu_ms, n), cy = qw_ab_token_stats(b->mcyc, n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arm_name", a->name);
    cJSON_AddNumberToObject(o, "arm", arm);
    cJSON_AddNumberToObject(o, "round", round);
    cJSON_AddNumberToObject(o, "decode_tokens", n);
    /* the verdict's metric: tokens / (wall − the time other processes held the step's thread) */
    cJSON_AddNumberToObject(o, "decode_tok_s", n * 1e3 / total);
    cJSON_AddNumberToObject(o, "decode_tok_s_wall", wall > 0 ? n * 1e3 / wall : 0);
    cJSON_AddNumberToObject(o, "decode_tok_s_trim", w.trimmed_mean > 0 ? 1e3 / w.trimmed_mean : 0);
    cJSON_AddNumberToObject(o, "decode_ms_median", w.median);
    cJSON_AddNumberToObject(o, "decode_cpu_ms", cp.trimmed_mean);
    if (perf->available && !isnan(cy.trimmed_mean)) cJSON_AddNumberToObject(o, "decode_mcycles", cy.trimmed_mean);
    cJSON_AddNumberToObject(o, "pool_evicted_mb", b->evicted / 1048576.0);
    cJSON_AddNumberToObject(o, "pool_os_calls", b->os_calls);
    double wait = 0;
    for (int i = 0; i < n; i++) wait += b->wait[i];
    cJSON_AddNumberToObject(o, "decode_wait_ms", wait / n); /* other processes' share, per token */
    cJSON_AddItemToObject(o, "ms", cJSON_CreateDoubleArray(b->ms, n));
    cJSON_AddItemToObject(o, "wait_ms", cJSON_CreateDoubleArray(b->wait, n));
    cJSON_AddItemToObject(o, "cpu_ms", cJSON_CreateDoubleArray(b->cpu_ms, n));
    cJSON_AddItemToObject(o, "wait_any_ms", cJSON_CreateDoubleArray(b->wait_any, n));
    char hx[24];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)hash);
    cJSON_AddStringToObject(o, "tokens_hash", hx);
    cJSON_AddItemToArray(arr, o);
}

int qw_abw_tokens(qw_ctx *c, int32_t decode, int32_t block, bool prime, int32_t n_vocab, const inproc_arm *arms, int n_arms,
                  const qw_ab_perf *perf, cJSON *arr, qw_error *err) {
    int32_t n_blocks = (decode - 1) / block;
    if (n_blocks < 2) return qw_fail(err, "--pair-tokens %d: %d decode tokens give fewer than 2 blocks (a warm-up + one)",
                                     (int)block, (int)decode);
    qw_ctx_mark *saved = qw_ctx_mark_save(c); /* re-saved at every position; on a GPU it stays in VRAM */
    arm_block *ab = calloc((size_t)n_arms, sizeof *ab);
    int *order = calloc((size_t)n_arms, sizeof *order);
    int rc = -1;
    qw_ab_sched sch = {0};
    double *d0 = calloc(QW_AB_MAX_THREADS * 2, sizeof(double)), *d1 = d0 ? d0 + QW_AB_MAX_THREADS : NULL;
    if (!d0 || !saved || !ab || !order) {
        qw_fail(err, "out of memory for the token-paired decode");
        goto done;
    }
    for (int a = 0; a < n_arms; a++) {
        ab[a].ms = calloc((size_t)block * 5, sizeof(double));
        if (!ab[a].ms) {
            qw_fail(err, "out of memory for the token-paired decode");
            goto done;
        }
        ab[a].cpu_ms = ab[a].ms + block, ab[a].mcyc = ab[a].ms + 2 * block, ab[a].wait = ab[a].ms + 3 * block;
        ab[a].wait_any = ab[a].ms + 4 * block;
    }
    qw_ab_sched_open(&sch);
    int32_t id = qw_abw_argmax(qw_ctx_logits(c), n_vocab);
    for (int32_t b = 0; b < n_blocks; b++) {
        uint64_t h = 1469598103934665603ull;
        for (int a = 0; a < n_arms; a++) ab[a].evicted = ab[a].os_calls = 0;
        for (int32_t k = 0; k < block; k++) {
            int32_t t = b * block + k, n0 = qw_ctx_n_past(c), next = -1;
            h = (h ^ (uint64_t)(uint32_t)id) * 1099511628211ull;
            if (qw_ctx_mark_update(c, saved)) {
                qw_fail(err, "position %d: saving the recurrent state failed", t);
                goto done;
            }
            qw_ab_token_order(n_arms, t, order);
            /* --prime: an untimed pass under the baseline's policy first, so
             * the position's experts are in the expert cache for every timed
             * pass (which arm came first no longer decides who pays the
             * copies); its token is the one the arms must agree on */
            if (prime && (qw_ctx_mark_restore(c, saved) || qw_abw_apply_arm(&arms[0], false, err) ||
                          qw_ctx_eval(c, &id, 1, QW_LOGITS_LAST, err))) {
                if (!err->msg[0]) qw_fail(err, "position %d: the priming pass failed", t);
                goto done;
            }
            if (prime) next = qw_abw_argmax(qw_ctx_logits(c), n_vocab);
            for (int s = 0; s < n_arms; s++) {
                int a = order[s];
                if (qw_ctx_mark_restore(c, saved) || qw_ctx_n_past(c) != n0) { /* every slot alike, the first too */
                    qw_fail(err, "position %d: loading the recurrent state failed", t);
                    goto done;
                }
                if (qw_abw_apply_arm(&arms[a], false, err)) goto done;
                qw_pool_stats p0 = qw_pool_get_stats();
                const double e0 = device_evicted();
                double cyc0, tk0, cyc1, tk1;
                qw_ab_perf_read(perf, &cyc0, &tk0);
                qw_ab_sched_read(&sch, d0);
                double c0 = qw_abw_cpu_s(), w0 = qw_abw_mono_s();
                if (qw_ctx_eval(c, &id, 1, QW_LOGITS_LAST, err)) goto done;
                double w1 = qw_abw_mono_s(), c1 = qw_abw_cpu_s();
                qw_ab_sched_read(&sch, d1);
                ab[a].wait[k] = qw_ab_sched_self_ms(&sch, d0, d1);
                ab[a].wait_any[k] = qw_ab_sched_max_ms(d0, d1, sch.n);
                qw_ab_perf_read(perf, &cyc1, &tk1);
                qw_pool_stats p1 = qw_pool_get_stats();
                const double e1 = device_evicted();
                ab[a].ms[k] = (w1 - w0) * 1e3;
                ab[a].cpu_ms[k] = (c1 - c0) * 1e3;
                ab[a].mcyc[k] = (cyc1 - cyc0) / 1e6;
                ab[a].evicted += (double)(p1.evicted_bytes - p0.evicted_bytes) + (e1 - e0);
                ab[a].os_calls += (double)(p1.os_alloc_calls - p0.os_alloc_calls);
                int32_t got = qw_abw_argmax(qw_ctx_logits(c), n_vocab);
                if (s == 0 && !prime) next = got;
                else if (got != next) {
                    qw_fail(err, "decode position %d: arm '%s' chose token %d, arm '%s' %d (the arms must agree)",
                            (int)t, arms[a].name, (int)got, prime ? arms[0].name : arms[order[0]].name, (int)next);
                    goto done;
                }
            }
            id = next;
        }
        for (int a = 0; a < n_arms; a++) emit(arr, &arms[a], a, b - 1, &ab[a], block, h, perf);
        if (b % 8 == 0 || b == n_blocks - 1) {
            const cJSON *last = cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - n_arms);
            fprintf(stderr, "[ab-worker] block %d/%d (pos %d): %s %.3f tok/s\n", (int)b + 1, (int)n_blocks,
                    (int)qw_ctx_n_past(c), arms[0].name, cJSON_GetObjectItem(last, "decode_tok_s")->valuedouble);
        }
    }
    rc = 0;
done:
    for (int a = 0; ab && a < n_arms; a++) free(ab[a].ms);
    free(ab);
    free(order);
    qw_ctx_mark_free(saved);
    free(d0);
    qw_ab_sched_close(&sch);
    return rc;
}
