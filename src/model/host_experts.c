/* host_experts.c — routed experts run on the host for a device backend
 * (qwisp/host_experts.h): a layer's chosen (token, expert) assignments,
 * grouped by expert so each expert's weights are read once, through the same
 * kernels and steps as moe.c's expert groups: gate and up of every group in
 * one parallel pass, SwiGLU, the rows converted for down, down in a second
 * pass.  The weights are read in place from the model's mapping.
 */
#include "qwisp/host_experts.h"

#include "qwisp/ops.h"

#include <stdlib.h>
#include <string.h>

struct qw_host_experts {
    const qw_model *m;
    qw_threadpool *tp;
    /* scratch, grown on demand (qw_xrealloc) */
    int32_t *order, *tok_sorted; /* [n] assignments by expert; their tokens */
    float *g, *u, *down;         /* [n][n_ff_exp] x 2, [n][n_embd] */
    char *xq;                    /* gate's, up's (when its type differs) and down's activations */
    size_t n_cap, xq_cap;
};

qw_host_experts *qw_host_experts_new(const qw_model *m, int n_threads) {
    qw_host_experts *hx = qw_xcalloc(1, sizeof *hx);
    hx->m = m;
    hx->tp = qw_threadpool_new(n_threads < 1 ? 1 : n_threads);
    return hx;
}

void qw_host_experts_free(qw_host_experts *hx) {
    if (!hx) return;
    qw_threadpool_free(hx->tp);
    free(hx->order);
    free(hx->tok_sorted);
    free(hx->g);
    free(hx->u);
    free(hx->down);
    free(hx->xq);
    free(hx);
}

static void reserve(qw_host_experts *hx, int n, size_t xq_bytes) {
    const qw_hparams *hp = &hx->m->hp;
    if ((size_t)n > hx->n_cap) {
        hx->n_cap = (size_t)n;
        hx->order = qw_xrealloc(hx->order, hx->n_cap * sizeof(int32_t));
        hx->tok_sorted = qw_xrealloc(hx->tok_sorted, hx->n_cap * sizeof(int32_t));
        hx->g = qw_xrealloc(hx->g, hx->n_cap * (size_t)hp->n_ff_exp * sizeof(float));
        hx->u = qw_xrealloc(hx->u, hx->n_cap * (size_t)hp->n_ff_exp * sizeof(float));
        hx->down = qw_xrealloc(hx->down, hx->n_cap * (size_t)hp->n_embd * sizeof(float));
    }
    if (xq_bytes > hx->xq_cap) {
        hx->xq_cap = xq_bytes;
        hx->xq = qw_xrealloc(hx->xq, xq_bytes);
    }
}

/* The gate (or up) tasks of every expert group: group j = assignments
 * [start[j], start[j+1]) of one expert, its tokens' rows of xq. */
static int group_tasks(const qw_tensor *w, int64_t n_rows, const void *xq, const int32_t *tok_sorted,
                       const int32_t *expert_of_group, const int *start, int n_groups, float *y, qw_mm_task *tasks) {
    for (int j = 0; j < n_groups; j++)
        tasks[j] = (qw_mm_task){(const char *)w->data + (size_t)expert_of_group[j] * w->matrix_bytes,
                                w->row_bytes,
                                n_rows,
                                xq,
                                tok_sorted + start[j],
                                start[j + 1] - start[j],
                                y + (size_t)start[j] * n_rows,
                                n_rows};
    return n_groups;
}

int qw_host_experts_run(void *p, int il, const float *xn, int n_tok, const int32_t *tok, const int32_t *expert,
                        int n, float *out, qw_error *err) {
    qw_host_experts *hx = p;
    const qw_model *m = hx->m;
    const qw_hparams *hp = &m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff_exp;
    if (il < 0 || il >= hp->n_layer) return qw_fail(err, "host experts: layer %d of %d", il, hp->n_layer);
    const qw_layer *L = &m->layers[il];
    if (!L->gate_exps.data || !L->up_exps.data || !L->down_exps.data)
        return qw_fail(err, "host experts: layer %d has no routed experts in host memory", il);
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= n_tok)
            return qw_fail(err, "host experts: layer %d, assignment %d: token %d of %d", il, i, tok[i], n_tok);
        if (expert[i] < 0 || expert[i] >= hp->n_expert)
            return qw_fail(err, "host experts: layer %d, assignment %d: expert %d of %d", il, i, expert[i],
                           hp->n_expert);
    }
    const qw_type gt = L->gate_exps.type, ut = L->up_exps.type, dt = L->down_exps.type;
    const size_t gb = qw_act_bytes(gt, E, n_tok), ub = ut == gt ? 0 : qw_act_bytes(ut, E, n_tok);
    reserve(hx, n, gb + ub + qw_act_bytes(dt, F, n));
    char *gq = hx->xq, *uq = ut == gt ? gq : gq + gb, *hq = gq + gb + ub;

    /* assignments by expert (stable: tokens in their given order within an expert) */
    for (int i = 0; i < n; i++) {
        int at = i;
        while (at > 0 && expert[hx->order[at - 1]] > expert[i]) {
            hx->order[at] = hx->order[at - 1];
            at--;
        }
        hx->order[at] = i;
    }
    int start[QW_MM_MAX_TASKS + 1], n_groups = 0;
    int32_t group_expert[QW_MM_MAX_TASKS];
    qw_mm_task tasks[2 * QW_MM_MAX_TASKS];
    for (int a = 0; a < n; a++) hx->tok_sorted[a] = tok[hx->order[a]];

    qw_act_convert(hx->tp, gt, xn, E, E, n_tok, gq);
    if (ut != gt) qw_act_convert(hx->tp, ut, xn, E, E, n_tok, uq);
    /* experts QW_MM_MAX_TASKS groups at a time: gate + up, SwiGLU, down */
    for (int a0 = 0; a0 < n;) {
        n_groups = 0;
        int a = a0;
        while (a < n && n_groups < QW_MM_MAX_TASKS) {
            const int32_t e = expert[hx->order[a]];
            start[n_groups] = a - a0;
            group_expert[n_groups++] = e;
            while (a < n && expert[hx->order[a]] == e) a++;
        }
        start[n_groups] = a - a0;
        const int rows = a - a0;
        const int32_t *ts = hx->tok_sorted + a0;
        float *g = hx->g + (size_t)a0 * F, *u = hx->u + (size_t)a0 * F, *dn = hx->down + (size_t)a0 * E;
        int nt = group_tasks(&L->gate_exps, F, gq, ts, group_expert, start, n_groups, g, tasks);
        if (ut == gt) {
            nt += group_tasks(&L->up_exps, F, uq, ts, group_expert, start, n_groups, u, tasks + nt);
            qw_matmul_batch(hx->tp, gt, E, tasks, nt);
        } else {
            qw_matmul_batch(hx->tp, gt, E, tasks, nt);
            nt = group_tasks(&L->up_exps, F, uq, ts, group_expert, start, n_groups, u, tasks);
            qw_matmul_batch(hx->tp, ut, E, tasks, nt);
        }
        for (int r = 0; r < rows; r++) qw_swiglu(g + (size_t)r * F, g + (size_t)r * F, u + (size_t)r * F, F);
        qw_act_convert(hx->tp, dt, g, F, F, rows, hq);
        const size_t hq_row = qw_row_bytes(qw_vec_dot_type(dt), F);
        for (int j = 0; j < n_groups; j++)
            tasks[j] = (qw_mm_task){(const char *)L->down_exps.data + (size_t)group_expert[j] * L->down_exps.matrix_bytes,
                                    L->down_exps.row_bytes,
                                    E,
                                    hq + (size_t)start[j] * hq_row,
                                    NULL,
                                    start[j + 1] - start[j],
                                    dn + (size_t)start[j] * E,
                                    E};
        qw_matmul_batch(hx->tp, dt, F, tasks, n_groups);
        a0 = a;
    }
    for (int a = 0; a < n; a++)
        memcpy(out + (size_t)hx->order[a] * E, hx->down + (size_t)a * E, (size_t)E * sizeof(float));
    return 0;
}
