/* place.h — where a loaded model's experts live: the tier decision, made by
 * the caller that knows the real context (runtime/place.c).
 *
 *     qw_model *m = qw_model_load(path, &err);          // mechanism only
 *     if (qw_place_experts(m, n_ctx * n_seqs, &err)) ... // tier + expert source
 *     qw_ctx *c = qw_ctx_new(m, n_ctx, threads, &err);
 */
#ifndef QWISP_PLACE_H
#define QWISP_PLACE_H

#include "qwisp/model.h"

/* Decides the expert tier for m with KV for kv_positions positions over all
 * the contexts the caller will create (<= 0 = the trained context), from the
 * model's sizes, the RAM probes (physical, cgroup) and the knobs QWISP_RAW_C
 * and QWISP_DEVICE_RAM; opens the expert source on the model's layout and
 * hands it to m; logs the decision line (a warning when streaming).  A model
 * whose experts are already placed keeps them (the first caller decides).
 * 0, or -1 + err (a malformed knob, a source that cannot open). */
int qw_place_experts(qw_model *m, int64_t kv_positions, qw_error *err);
/* The one-context case (qwisp run, chat, logits, bench): places m's experts
 * for a context of n_ctx positions, then qw_ctx_new.  NULL + err. */
qw_ctx *qw_ctx_new_placed(qw_model *m, int32_t n_ctx, int n_threads, qw_error *err);

#endif
