/* sampler.h — turns a logits row into the next token id.
 *
 * Order (as llama.cpp's default chain): logit bias -> penalties (repetition, presence,
 * frequency over the last penalty_last_n tokens) -> top-k -> top-p -> min-p ->
 * temperature -> draw.  temp <= 0 means greedy (argmax, lowest id on ties).
 * The draw uses a private xoshiro/splitmix generator seeded from `seed`, so a
 * run is reproducible across machines.  An optional constraint (below) masks
 * the tokens that may come next, before every other stage.
 */
#ifndef QWISP_SAMPLER_H
#define QWISP_SAMPLER_H

#include "qwisp/base.h"

/* Most logit_bias entries one request may give (OpenAI's field). */
/* Most alternatives per token a logprobs record holds (OpenAI's top_logprobs limit). */
#define QW_SAMPLER_MAX_TOP_LOGPROBS 20

/* A constraint on which tokens may come next (e.g. a JSON grammar,
 * src/text/json_constraint.c).  The sampler calls mask before every draw
 * and accept with the token it drew; whoever creates the sampler params owns
 * the constraint and frees it (free) once no sampler uses it. */
typedef struct qw_sampler_constraint qw_sampler_constraint;
struct qw_sampler_constraint {
    /* allowed[n_vocab]: set to 1 for each token that may come next, 0 else;
     * returns how many are allowed. */
    int32_t (*mask)(qw_sampler_constraint *c, uint8_t *allowed);
    void (*accept)(qw_sampler_constraint *c, int32_t id);
    void (*free)(qw_sampler_constraint *c);
};
#define QW_SAMPLER_MAX_BIAS 128

typedef struct qw_logit_bias {
    int32_t id;
    float bias; /* added to the token's logit; -100 all but bans it, +100 all but forces it */
} qw_logit_bias;

typedef struct qw_sampler_params {
    float temp;              /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off (divides positive logits, multiplies negative) */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t penalty_last_n;  /* window for penalties; 0 = off */
    uint64_t seed;
    int32_t n_logit_bias;    /* 0: off; held inline so params stay a plain copyable value */
    qw_logit_bias logit_bias[QW_SAMPLER_MAX_BIAS];
    qw_sampler_constraint *constraint; /* NULL: off; not owned (see above) */
} qw_sampler_params;

/* One sampled token's log-probabilities: the model's log-softmax over the
 * whole vocabulary at temperature 1, before logit bias, penalties, a
 * constraint, top-k/p, min-p and temperature (as OpenAI's API reports them). */
typedef struct qw_token_logprobs {
    int32_t id;
    float logprob;
    int32_t n_top; /* alternatives below, most likely first */
    int32_t top_id[QW_SAMPLER_MAX_TOP_LOGPROBS];
    float top_logprob[QW_SAMPLER_MAX_TOP_LOGPROBS];
} qw_token_logprobs;

/* Fills out for token id from logits[n_vocab] with the top_n (<= 20) most
 * likely alternatives (ties: lowest id first). */
void qw_logprobs_of(const float *logits, int32_t n_vocab, int32_t id, int32_t top_n, qw_token_logprobs *out);

/* Greedy, no penalties, seed 0. */
qw_sampler_params qw_sampler_default_params(void);

typedef struct qw_sampler qw_sampler;

qw_sampler *qw_sampler_new(const qw_sampler_params *p, int32_t n_vocab);
void qw_sampler_free(qw_sampler *s);
/* Samples from logits[n_vocab] (not modified).  With a constraint, only the
 * tokens it allows are candidates (greedy included), and the token drawn is
 * passed to its accept.  A constraint that allows nothing is ignored for
 * that draw. */
int32_t qw_sampler_sample(qw_sampler *s, const float *logits);
/* Records a token (prompt or generated) for the penalties window. */
void qw_sampler_accept(qw_sampler *s, int32_t id);
/* Index of the max logit (lowest id on ties). */
int32_t qw_argmax(const float *logits, int32_t n);

#endif
