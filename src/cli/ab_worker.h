/* ab_worker.h — what the two halves of `qwisp ab-worker` share:
 * cmd_ab_worker.c (options, model, the bracketed replay trials) and
 * ab_worker_tokens.c (the token-paired decode, `--pair-tokens`).  Internal to
 * the CLI; the statistics live in src/ab/ (qwisp/ab.h). */
#ifndef QWISP_CLI_AB_WORKER_H
#define QWISP_CLI_AB_WORKER_H

#include "qwisp/ab.h"
#include "qwisp/model.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char name[QW_AB_WORD];
    char *kv[8]; /* "K=V" or "K=" */
    int n;
} inproc_arm;

double qw_abw_mono_s(void);
double qw_abw_cpu_s(void);
int32_t qw_abw_argmax(const float *x, int32_t n);
/* Sets the arm's pool knobs and applies the serialize path's policy (a bound
 * trims the cache to it at once); clear = empty the cache first, as a new
 * process starts. */
int qw_abw_apply_arm(const inproc_arm *a, bool clear, qw_error *err);

/* The token-paired decode: from c's current position (the prompt prefilled,
 * its logits ready), `decode` tokens, each decoded once per arm from the same
 * saved state in qw_ab_token_order; one trial object per arm per block of
 * `block` positions appended to arr (round -1 for the first block: a
 * warm-up).  -1 + err when the model fails or the arms disagree on a token
 * (a pool policy must not change the output; the rewind must be exact). */
int qw_abw_tokens(qw_ctx *c, int32_t decode, int32_t block, bool prime, int32_t n_vocab, const inproc_arm *arms, int n_arms,
                  const qw_ab_perf *perf, cJSON *arr, qw_error *err);

#endif
