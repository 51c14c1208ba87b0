/* layers.h — private to src/model: the blocks one layer of the forward pass
 * is made of, called by the layer loop (forward.c).  Each works on the rows of
 * a workspace chunk (c's buffers) split into spans, one per sequence, and adds
 * its result to the residual stream c->x.
 */
#ifndef QWISP_MODEL_LAYERS_H
#define QWISP_MODEL_LAYERS_H

#include "context.h"

/* Attention (attention.c; gated when L->gated_attn): x += layer(x), k and v
 * appended to each span's KV cache at its positions. */
int qw_attention_block(qw_ctx *c, const qw_layer *L, int il, const seq_span *spans, int n_spans, int32_t n,
                       qw_error *err);
/* One Gated DeltaNet layer (deltanet.c): x += layer(x), each span's recurrent
 * state advanced over its rows. */
int qw_deltanet_block(qw_ctx *c, const qw_layer *L, int il, const seq_span *spans, int n_spans, int32_t n,
                      qw_error *err);
/* The MoE step (moe.c): routing, expert groups, shared expert; x += moe(x). */
int qw_moe_block(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err);

#endif
