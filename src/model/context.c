/* context.c — the inference context (qw_ctx; layout in context.h): what one
 * sequence keeps between evals and the workspace a forward pass computes in.
 *
 *   KV cache        per attention layer, f16 (or f32 with QWISP_KV_TYPE=f32),
 *                   starting at KV_INITIAL positions and doubling on demand up
 *                   to n_ctx instead of reserving the worst case;
 *   recurrent state per Gated DeltaNet layer (conv tail + delta matrix), fixed
 *                   size, zeroed when the context is truncated (it cannot rewind
 *                   by itself: the prefix cache saves and loads it at block
 *                   boundaries, qw_ctx_state_save / _load);
 *   chunk buffers   activations sized by the chunk, allocated on first use (a
 *                   lane's context run only through a workspace never needs them);
 *   logits          of the last eval.
 *
 * Every one of these buffers comes from the pool.  Also here: the two helpers
 * every block of the forward pass shares (a growable pool buffer, and a 2-D
 * matmul through the context's converted-activation buffer), so that the
 * blocks (attention.c, moe.c, deltanet.c) depend on this file only and the
 * layer loop (forward.c) on them: no file calls back up.
 */
#include "context.h"
#include "qwisp/backend.h"
#include "qwisp/ops.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"

#include <stdlib.h>
#include <string.h>

int qw_fwd_grow(void **p, size_t *cap, size_t need, qw_error *err) {
    if (need <= *cap) return 0;
    void *q = qw_pool_realloc(*p, need);
    if (!q) return qw_fail(err, "out of memory growing a buffer to %zu bytes", need);
    *p = q;
    *cap = need;
    return 0;
}

static void *chunk_buf(int32_t chunk, size_t row_bytes) { return qw_pool_alloc((size_t)chunk * row_bytes); }

int qw_ctx_kv_reserve(qw_ctx *c, int32_t need, qw_error *err) {
    if (c->dev || need <= c->kv_cap) return 0; /* a device context's KV grows on the device */
    int32_t cap = c->kv_cap ? c->kv_cap : KV_INITIAL;
    while (cap < need) cap = cap > c->n_ctx / 2 ? c->n_ctx : cap * 2;
    if (cap > c->n_ctx) cap = c->n_ctx;
    const qw_hparams *hp = &c->m->hp;
    const size_t row = (size_t)hp->n_head_kv * hp->head_dim * c->kv_elt;
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->m->layers[il].recurrent) continue;
        void *nk = qw_pool_realloc(c->k[il], (size_t)cap * row);
        if (!nk) return qw_fail(err, "out of memory growing the KV cache to %d positions", cap);
        c->k[il] = nk;
        void *nv = qw_pool_realloc(c->v[il], (size_t)cap * row);
        if (!nv) return qw_fail(err, "out of memory growing the KV cache to %d positions", cap);
        c->v[il] = nv;
    }
    c->kv_cap = cap;
    return 0;
}

/* (Re)allocates every buffer whose size is proportional to the chunk. */
int qw_ctx_alloc_chunk_bufs(qw_ctx *c, int32_t C) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, QD = hp->n_head * hp->head_dim;
    const int32_t KD = hp->n_head_kv * hp->head_dim, K = hp->n_expert_used;
    const bool q35 = hp->arch_id == QW_ARCH_QWEN35MOE;
    /* qwen35moe only: gated q, DeltaNet and shared-expert rows (0 = none) */
    const size_t S = (size_t)hp->ssm_state, CH = 2 * S * hp->ssm_groups + S * hp->ssm_vheads;
    const size_t VD = S * hp->ssm_vheads, HV = (size_t)hp->ssm_vheads, FS = (size_t)hp->n_ff_shexp;
    void **bufs[] = {(void **)&c->x,      (void **)&c->xn,     (void **)&c->q,    (void **)&c->kc,
                     (void **)&c->vc,     (void **)&c->attn,   (void **)&c->proj, (void **)&c->router,
                     (void **)&c->sel,    (void **)&c->selw,   (void **)&c->gate,
                     (void **)&c->up,     (void **)&c->down,   (void **)&c->tok_of,
                     (void **)&c->pos_of,
                     (void **)&c->qg,     (void **)&c->mix,    (void **)&c->cv,   (void **)&c->z,
                     (void **)&c->beta,   (void **)&c->alpha,  (void **)&c->o,    (void **)&c->sg,
                     (void **)&c->su,     (void **)&c->sd,     (void **)&c->sgate};
    const size_t row_bytes[] = {E * 4,  E * 4, QD * 4, KD * 4, KD * 4, QD * 4, E * 4,
                                hp->n_expert * 4, K * 4, K * 4,
                                hp->n_ff_exp * 4, hp->n_ff_exp * 4, (size_t)K * E * 4, K * 4, K * 4,
                                q35 ? 2 * (size_t)QD * 4 : 0, CH * 4, CH * 4, VD * 4,
                                HV * 4, HV * 4, VD * 4, FS * 4,
                                FS * 4, q35 ? (size_t)E * 4 : 0, q35 ? 4 : 0};
    int bad = 0;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        qw_pool_free(*bufs[i]);
        *bufs[i] = row_bytes[i] ? chunk_buf(C, row_bytes[i]) : NULL;
        bad |= row_bytes[i] && *bufs[i] == NULL;
    }
    if (!c->count) c->count = qw_pool_alloc((size_t)hp->n_expert * 4);
    c->chunk_cap = C;
    return bad || !c->count ? -1 : 0;
}

void qw_ctx_set_chunk_size(qw_ctx *c, int32_t chunk) {
    /* Buffers follow on the next eval (forward.c's eval_spans grows them when needed). */
    c->chunk = chunk < 1 ? 1 : chunk;
}

void qw_ctx_set_threads(qw_ctx *c, int n_threads) {
    qw_threadpool_free(c->tp);
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->tp = qw_threadpool_new(c->n_threads);
}

qw_ctx *qw_ctx_new(const qw_model *m, int32_t n_ctx, int n_threads, qw_error *err) {
    const qw_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    if (hp->head_dim > 1024) {
        qw_fail(err, "head_dim %d exceeds the supported 1024", hp->head_dim);
        return NULL;
    }
    if (!m->experts) {
        qw_fail(err, "%s: the experts are not placed (the loader leaves the tier to its caller: qw_place_experts)",
                qw_gguf_path(m->gguf));
        return NULL;
    }
    qw_ctx *c = qw_xcalloc(1, sizeof *c);
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->tp = qw_threadpool_new(c->n_threads);
    const int32_t chunk = (int32_t)qw_opt_int(QW_OPT_CHUNK); /* the table's default when never loaded */
    c->chunk = chunk < n_ctx ? chunk : n_ctx;
    const char *kvt = qw_opt_str(QW_OPT_KV_TYPE);
    c->kv_type = kvt && !strcmp(kvt, "f32") ? QW_TYPE_F32 : QW_TYPE_F16;
    c->kv_elt = c->kv_type == QW_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    c->k = qw_xcalloc((size_t)hp->n_layer, sizeof(void *));
    if (m->dev) {
        /* the device holds the KV cache, the state and the activations */
        c->v = qw_xcalloc((size_t)hp->n_layer, sizeof(void *));
        c->dev = m->backend->ctx_new(m->dev, n_ctx, err);
        if (!c->dev) {
            qw_ctx_free(c);
            return NULL;
        }
        return c;
    }
    if (qw_opt_int(QW_OPT_PROFILE)) c->phase = qw_xcalloc(1, sizeof *c->phase);
    c->v = qw_xcalloc((size_t)hp->n_layer, sizeof(void *));
    c->conv = qw_xcalloc((size_t)hp->n_layer, sizeof(float *));
    c->delta = qw_xcalloc((size_t)hp->n_layer, sizeof(float *));
    for (int il = 0; il < hp->n_layer; il++) {
        if (!m->layers[il].recurrent) continue;
        c->conv[il] = qw_pool_calloc(qw_model_conv_state_bytes(hp));
        c->delta[il] = qw_pool_calloc(qw_model_delta_state_bytes(hp));
        if (!c->conv[il] || !c->delta[il]) {
            qw_fail(err, "out of memory for the recurrent state of layer %d", il);
            qw_ctx_free(c);
            return NULL;
        }
    }

    /* Chunk buffers are allocated on first use: a lane's context that only
     * ever runs through a workspace (qw_batch_eval) never needs them. */
    if (qw_ctx_kv_reserve(c, 1, err)) {
        if (!err || !err->msg[0]) qw_fail(err, "out of memory creating the context");
        qw_ctx_free(c);
        return NULL;
    }
    return c;
}

void qw_ctx_logits_drop(qw_ctx *c) {
    if (c->logits_pinned && c->m->backend->host_unpin) c->m->backend->host_unpin(c->logits);
    c->logits_pinned = false;
    qw_pool_free(c->logits);
    c->logits = NULL;
    c->logits_rows = c->logits_cap = 0;
}

void qw_ctx_free(qw_ctx *c) {
    if (!c) return;
    qw_ctx_logits_drop(c); /* while the backend that pinned it is still there */
    if (c->dev) c->m->backend->ctx_free(c->dev);
    if (c->k)
        for (int il = 0; il < c->m->hp.n_layer; il++) {
            qw_pool_free(c->k[il]);
            qw_pool_free(c->v[il]);
        }
    if (c->conv)
        for (int il = 0; il < c->m->hp.n_layer; il++) {
            qw_pool_free(c->conv[il]);
            qw_pool_free(c->delta[il]);
        }
    free(c->phase);
    free(c->k);
    free(c->v);
    free(c->conv);
    free(c->delta);
    void *bufs[] = {c->x,    c->xn,   c->q,    c->kc,     c->vc,      c->attn,  c->proj,
                    c->router, c->sel, c->selw, c->gate,    c->up,    c->down,
                    c->tok_of, c->pos_of, c->count, c->xq, c->attn_scratch,
                    c->qg,   c->mix,  c->cv,   c->z,      c->beta,    c->alpha, c->o,
                    c->sg,   c->su,   c->sd,   c->sgate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qw_pool_free(bufs[i]);
    qw_threadpool_free(c->tp);
    free(c);
}

int32_t qw_ctx_n_ctx(const qw_ctx *c) { return c->n_ctx; }

void qw_ctx_set_chunk_cb(qw_ctx *c, qw_chunk_cb fn, void *user) {
    c->chunk_cb = fn;
    c->chunk_user = user;
}

void qw_ctx_set_abort(qw_ctx *c, qw_abort_cb fn, void *user) {
    c->abort_cb = fn;
    c->abort_user = user;
}

uint64_t qw_ctx_kv_bytes(const qw_ctx *c) {
    /* on the GPU: the device bytes this context holds (KV, state and its
     * activations), so budgets that count KV (the prefix cache) see them */
    if (c->dev) return c->m->backend->ctx_bytes(c->dev);
    const qw_hparams *hp = &c->m->hp;
    int n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) n_attn += !c->m->layers[il].recurrent;
    return 2ull * n_attn * (uint64_t)c->kv_cap * hp->n_head_kv * hp->head_dim * c->kv_elt;
}

uint64_t qw_ctx_state_bytes(const qw_ctx *c) { return qw_model_state_bytes(c->m); }
int32_t qw_ctx_n_past(const qw_ctx *c) { return c->n_past; }
const float *qw_ctx_logits(const qw_ctx *c) { return c->logits; }

void qw_ctx_restart(qw_ctx *c) {
    const qw_hparams *hp = &c->m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!c->m->layers[il].recurrent || c->dev) continue;
        memset(c->conv[il], 0, qw_model_conv_state_bytes(hp));
        memset(c->delta[il], 0, qw_model_delta_state_bytes(hp));
    }
    if (c->dev && qw_ctx_state_bytes(c)) c->m->backend->ctx_reset(c->dev);
    c->n_past = 0;
}

int32_t qw_ctx_truncate(qw_ctx *c, int32_t n_past) {
    if (n_past < 0 || n_past >= c->n_past) return c->n_past;
    /* a recurrent state holds every token seen: it can only start over */
    if (qw_ctx_state_bytes(c)) qw_ctx_restart(c);
    else c->n_past = n_past;
    return c->n_past;
}

/* Copies the recurrent state (conv + delta of every recurrent layer, in layer
 * order) between c and one flat buffer: the layout qw_ctx_state_save writes,
 * qw_ctx_state_load and the marks read.  A device context copies over the bus
 * (same layout); only that can fail: 0 / -1. */
static int state_copy(const qw_ctx *c, char *buf, bool into_ctx) {
    if (c->dev) {
        qw_error err = {0};
        if (!qw_ctx_state_bytes(c)) return 0;
        if (!c->m->backend->ctx_state_io(c->dev, buf, into_ctx, &err)) return 0;
        qw_log(QW_LOG_ERROR, "device state %s failed: %s", into_ctx ? "load" : "save", err.msg);
        return -1;
    }
    const qw_hparams *hp = &c->m->hp;
    const size_t cb = qw_model_conv_state_bytes(hp), db = qw_model_delta_state_bytes(hp);
    for (int il = 0; il < hp->n_layer; il++) {
        if (!c->m->layers[il].recurrent) continue;
        if (into_ctx) {
            memcpy(c->conv[il], buf, cb);
            memcpy(c->delta[il], buf + cb, db);
        } else {
            memcpy(buf, c->conv[il], cb);
            memcpy(buf + cb, c->delta[il], db);
        }
        buf += cb + db;
    }
    return 0;
}

struct qw_ctx_mark {
    int32_t n_past;
    const qw_ctx *owner; /* a device snapshot belongs to its context's device */
    void *dev_state;     /* the state in device memory (backend snap_*), or NULL: */
    char *state;         /* ... a host copy: qw_ctx_state_bytes bytes (one byte when there is none) */
};

qw_ctx_mark *qw_ctx_mark_save(const qw_ctx *c) {
    qw_ctx_mark *mk = calloc(1, sizeof *mk);
    if (!mk) return NULL;
    mk->owner = c;
    if (c->dev && qw_ctx_state_bytes(c)) { /* on the device, else the host copy below */
        qw_error err = {0};
        mk->dev_state = c->m->backend->snap_new(c->dev, &err);
        if (!mk->dev_state) qw_log(QW_LOG_INFO, "mark: %s; keeping it in host memory", err.msg);
    }
    if (!mk->dev_state && !(mk->state = malloc((size_t)qw_ctx_state_bytes(c) + 1))) {
        free(mk);
        return NULL;
    }
    if (qw_ctx_mark_update(c, mk)) {
        qw_ctx_mark_free(mk);
        return NULL;
    }
    return mk;
}

/* c's state into mk (into_ctx false) or back: mk's host copy or its device
 * snapshot.  0, or -1 (another context's mark, or a device copy failed). */
static int mark_copy(const qw_ctx *c, const qw_ctx_mark *mk, bool into_ctx) {
    if (mk->owner != c) return -1;
    if (!mk->dev_state) return state_copy(c, mk->state, into_ctx);
    qw_error err = {0};
    if (!c->m->backend->snap_copy(c->dev, mk->dev_state, !into_ctx, &err)) return 0;
    qw_log(QW_LOG_ERROR, "device state %s failed: %s", into_ctx ? "restore" : "snapshot", err.msg);
    return -1;
}

int qw_ctx_mark_update(const qw_ctx *c, qw_ctx_mark *mk) {
    if (mark_copy(c, mk, false)) return -1;
    mk->n_past = c->n_past;
    return 0;
}

int qw_ctx_mark_restore(qw_ctx *c, const qw_ctx_mark *mk) {
    if (mark_copy(c, mk, true)) {
        qw_ctx_truncate(c, 0); /* refused: start over rather than run on a half-loaded state */
        return -1;
    }
    c->n_past = mk->n_past;
    return 0;
}

void qw_ctx_mark_free(qw_ctx_mark *mk) {
    if (!mk) return;
    if (mk->dev_state) mk->owner->m->backend->snap_free(mk->dev_state);
    free(mk->state);
    free(mk);
}

void qw_ctx_release_growth(qw_ctx *c) {
    qw_pool_free(c->xq);
    qw_pool_free(c->attn_scratch);
    c->xq = c->attn_scratch = NULL;
    c->xq_cap = c->attn_scratch_cap = 0;
    if (c->n_past != 0 || !c->k) return;
    for (int il = 0; il < c->m->hp.n_layer; il++) {
        qw_pool_free(c->k[il]);
        qw_pool_free(c->v[il]);
        c->k[il] = c->v[il] = NULL;
    }
    c->kv_cap = 0;
}

int qw_ctx_state_save(const qw_ctx *c, void *dst) { return state_copy(c, dst, false); }

int32_t qw_ctx_state_load(qw_ctx *c, const void *src, int32_t n_past) {
    if (n_past < 0 || n_past > c->n_past) return c->n_past;
    if (state_copy(c, (char *)src, true)) return qw_ctx_truncate(c, 0);
    c->n_past = n_past;
    return n_past;
}

int qw_ctx_copy_prefix(qw_ctx *dst, const qw_ctx *src, int32_t n, qw_error *err) {
    if (dst->m != src->m || dst->kv_type != src->kv_type || n < 0 || n > src->n_past || n > dst->n_ctx)
        return qw_fail(err, "copy_prefix: %d tokens of a context holding %d (other model or KV type?)", n, src->n_past);
    qw_ctx_truncate(dst, 0); /* also zeroes a recurrent state */
    if (dst->dev) {
        if (dst->m->backend->ctx_kv_copy(dst->dev, src->dev, n, err)) return -1;
        dst->n_past = n;
        return 0;
    }
    if (qw_ctx_kv_reserve(dst, n, err)) return -1;
    const qw_hparams *hp = &dst->m->hp;
    const size_t bytes = (size_t)n * hp->n_head_kv * hp->head_dim * dst->kv_elt;
    for (int il = 0; il < hp->n_layer; il++) {
        if (dst->m->layers[il].recurrent) continue;
        memcpy(dst->k[il], src->k[il], bytes);
        memcpy(dst->v[il], src->v[il], bytes);
    }
    dst->n_past = n;
    return 0;
}

/* Hands fn each attention layer's first n K rows, then V rows, in layer order:
 * the byte stream qw_ctx_kv_export writes and qw_ctx_kv_import reads back
 * (import: fn fills the rows).  A device context's rows pass through one host
 * buffer, copied from the device before fn (export) or to it after (import). */
static int kv_walk(const qw_ctx *c, int32_t n, qw_kv_fn fn, void *user, bool import, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const size_t bytes = (size_t)n * hp->n_head_kv * hp->head_dim * c->kv_elt;
    void *stage = NULL;
    if (c->dev && !(stage = qw_pool_alloc(bytes ? bytes : 1)))
        return qw_fail(err, "out of memory staging %zu bytes of KV", bytes);
    int rc = 0;
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        if (c->m->layers[il].recurrent) continue;
        for (int kv = 0; kv < 2 && !rc; kv++) {
            void *rows = stage ? stage : kv ? c->v[il] : c->k[il];
            if (stage && !import) rc = c->m->backend->ctx_kv_io(c->dev, il, kv, n, stage, 0, err);
            if (!rc) rc = fn(user, rows, bytes);
            if (!rc && stage && import) rc = c->m->backend->ctx_kv_io(c->dev, il, kv, n, stage, 1, err);
        }
    }
    qw_pool_free(stage);
    return rc;
}

int qw_ctx_kv_export(const qw_ctx *c, int32_t n, qw_kv_fn fn, void *user) {
    if (n < 0 || n > c->n_past) return -1;
    qw_error err = {0};
    int rc = kv_walk(c, n, fn, user, false, &err);
    if (rc && err.msg[0]) qw_log(QW_LOG_ERROR, "KV export: %s", err.msg);
    return rc;
}

int qw_ctx_kv_import(qw_ctx *c, int32_t n, qw_kv_fn fn, void *user, qw_error *err) {
    qw_ctx_truncate(c, 0);
    if (n < 0 || n > c->n_ctx) return qw_fail(err, "kv_import: %d tokens in a context of %d", n, c->n_ctx);
    if (qw_ctx_kv_reserve(c, n, err)) return -1;
    int rc = kv_walk(c, n, fn, user, true, err);
    if (!rc) c->n_past = n;
    return rc;
}

void qw_ctx_kv_fit(qw_ctx *c) {
    int32_t cap = c->n_past > KV_INITIAL ? c->n_past : KV_INITIAL;
    if (cap >= c->kv_cap) return;
    const qw_hparams *hp = &c->m->hp;
    const size_t row = (size_t)hp->n_head_kv * hp->head_dim * c->kv_elt;
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->m->layers[il].recurrent) continue;
        /* a shrink that fails keeps the larger buffer: it still holds cap rows */
        void *nk = qw_pool_realloc(c->k[il], (size_t)cap * row), *nv = qw_pool_realloc(c->v[il], (size_t)cap * row);
        if (nk) c->k[il] = nk;
        if (nv) c->v[il] = nv;
    }
    c->kv_cap = cap;
}

int qw_fwd_linear(qw_ctx *c, const qw_tensor *w, const float *x, int32_t n, float *y, qw_error *err) {
    const int64_t k = w->ne[0], rows = w->ne[1];
    if (qw_fwd_grow(&c->xq, &c->xq_cap, qw_act_bytes(w->type, k, n), err)) return -1;
    qw_act_convert(c->tp, w->type, x, k, k, n, c->xq);
    qw_matmul_q(c->tp, w->type, w->data, w->row_bytes, rows, k, c->xq, NULL, n, y, rows);
    return 0;
}
