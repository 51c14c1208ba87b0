/* host_experts.h — routed experts computed on the host for a device backend.
 *
 * Under a VRAM budget the CUDA streaming tier copies each missed expert over
 * the bus before the GPU runs it; the bus, not the GPU, then bounds decode
 * (docs/cuda.md).  With QWISP_DEVICE_HOST_EXPERTS = H > 0 the backend hands
 * each token's last H picks to the host, and with QWISP_DEVICE_MISSES=host
 * every pick outside a fixed VRAM set; the host computes them from the
 * mapped file with the CPU kernels while the GPU runs the others: the host's
 * memory bandwidth beside the bus's.  The backend calls
 * qw_host_experts_run through qw_backend_cfg (it links nothing of libqwisp).
 *
 *     qw_host_experts *hx = qw_host_experts_new(m, n_threads);
 *     qw_host_experts_run(hx, il, xn, n_tok, tok, expert, n, out, &err);
 *     qw_host_experts_free(hx);
 *
 * Each output row is the CPU path's arithmetic for that expert and token
 * (moe.c's: the activations converted to the weights' dot type, gate and up
 * rows dotted, SwiGLU, converted again, down), so its bits are the CPU's, not
 * the GPU kernels'.
 */
#ifndef QWISP_HOST_EXPERTS_H
#define QWISP_HOST_EXPERTS_H

#include "qwisp/model.h"

typedef struct qw_host_experts qw_host_experts;

/* A host expert runner for m's layers (their expert tensors read in place:
 * m must outlive it), with n_threads compute threads of its own. */
qw_host_experts *qw_host_experts_new(const qw_model *m, int n_threads);
void qw_host_experts_free(qw_host_experts *hx);

/* out[i][:] = Down_e(silu(Gate_e x) * Up_e x) for assignment i < n, where
 * e = expert[i] of layer il and x = xn[tok[i]] (xn: n_tok rows of n_embd
 * floats); out: n rows of n_embd floats (the expert's output before its
 * routing weight).  0, or -1 + err naming the bad layer, expert or token.
 * hx is a qw_host_experts (void * so it fits qw_backend_cfg's callback). */
int qw_host_experts_run(void *hx, int il, const float *xn, int n_tok, const int32_t *tok, const int32_t *expert,
                        int n, float *out, qw_error *err);

#endif
