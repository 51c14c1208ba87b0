/* sampler.c — next-token selection from a logits row.  See
 * include/qwisp/sampler.h.
 *
 * Chain (llama.cpp's semantics for each stage):
 *   logit bias  each listed token's bias is added to its logit (OpenAI's
 *               logit_bias; llama.cpp applies it first too).
 *   penalties   for each token seen in the last penalty_last_n accepted tokens
 *               (count c > 0): logit /= repeat if logit > 0 else *= repeat,
 *               then logit -= c * frequency + presence.
 *   top-k       keep the k highest logits.
 *   top-p       softmax (at temperature 1) over the survivors, keep the
 *               shortest highest-first prefix whose mass reaches p (>= 1 token).
 *   min-p       keep logits >= max + log(min_p), i.e. p_i >= min_p * p_max.
 *   temperature logits /= temp, softmax, draw one.
 * temp <= 0 is greedy: argmax after bias and penalties (lowest id on ties).
 * A constraint (sampler.h; e.g. the JSON grammar of response_format) masks
 * tokens: after bias and penalties the candidates shrink to the tokens it
 * allows, so every later stage, greedy included, sees only those; the drawn
 * token is passed to its accept.  Masking, not resampling: the draw is from
 * the model's distribution renormalised over the allowed tokens.
 *
 * qw_logprobs_of reports the model's own log-softmax (temperature 1, before
 * every stage above), as OpenAI's logprobs do: a stable quantity a client
 * can compare across requests whatever their sampling settings.
 *
 * Cost: the vocabulary is ~150k, so nothing sorts it whole unless it must.
 * top-k selects with a size-k heap; top-p first sorts only the best 256 and
 * widens to a full sort only when those do not reach p.  Candidates live in
 * a buffer sized once at qw_sampler_new.
 *
 * Ordering is total — logit descending, then id ascending — so results do not
 * depend on sort stability, and with the private xoshiro256** generator
 * (seeded by splitmix64) a run is reproducible on any machine.
 */
#include "qwisp/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

struct qw_sampler {
    qw_sampler_params p;
    int32_t n_vocab;
    cand *c;          /* [n_vocab] candidates */
    cand *tmp;        /* [n_vocab] scratch for selection */
    cand *save;       /* [n_vocab] top_p's copy (allocated once: no malloc per sample) */
    int32_t *count;   /* [n_vocab] occurrences in the penalty window */
    int32_t *ring;    /* [penalty_last_n] last accepted tokens */
    uint8_t *allowed; /* [n_vocab] the constraint's mask (only with a constraint) */
    int32_t ring_n, ring_head;
    uint64_t s[4];    /* xoshiro256** state */
};

/* ---- RNG ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1). */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

/* ---- lifecycle ---- */

qw_sampler_params qw_sampler_default_params(void) {
    return (qw_sampler_params){
        .temp = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f,
        .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .penalty_last_n = 0, .seed = 0,
    };
}

qw_sampler *qw_sampler_new(const qw_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) return NULL;
    qw_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    if (s->p.n_logit_bias < 0 || s->p.n_logit_bias > QW_SAMPLER_MAX_BIAS) s->p.n_logit_bias = 0;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->save = malloc((size_t)n_vocab * sizeof *s->save);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->ring = malloc(((size_t)s->p.penalty_last_n + 1) * sizeof *s->ring);
    s->allowed = p->constraint ? malloc((size_t)n_vocab) : NULL;
    if (!s->c || !s->tmp || !s->save || !s->count || !s->ring || (p->constraint && !s->allowed)) {
        qw_sampler_free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    return s;
}

void qw_sampler_free(qw_sampler *s) {
    if (!s) return;
    free(s->c); free(s->tmp); free(s->save); free(s->count); free(s->ring); free(s->allowed);
    free(s);
}

void qw_sampler_accept(qw_sampler *s, int32_t id) {
    int32_t w = s->p.penalty_last_n;
    if (w <= 0 || id < 0 || id >= s->n_vocab) return;
    if (s->ring_n == w) { /* evict the oldest */
        s->count[s->ring[s->ring_head]]--;
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % w;
    } else {
        s->ring[(s->ring_head + s->ring_n) % w] = id;
        s->ring_n++;
    }
    s->count[id]++;
}

/* ---- stages ---- */

int32_t qw_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static inline bool better(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Heap whose root is the WORST candidate: sift h[j] down within h[0..n). */
static void sift_down_worst(cand *h, size_t j, size_t n) {
    cand x = h[j];
    for (;;) {
        size_t l = 2 * j + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && better(&h[l], &h[l + 1])) ? l + 1 : l; /* the worse child */
        if (!better(&x, &h[m])) break;
        h[j] = h[m];
        j = m;
    }
    h[j] = x;
}

/* Sorts c[0..n) best first, in place (heapsort).  Not the libc sort: glibc's
 * mallocs a temporary for arrays over 1 KiB, and this runs per sampled token. */
static void sort_desc(cand *c, int32_t n) {
    for (size_t i = (size_t)n / 2; i-- > 0;) sift_down_worst(c, i, (size_t)n);
    for (size_t end = (size_t)n; end > 1; end--) {
        cand t = c[0];
        c[0] = c[end - 1];
        c[end - 1] = t;
        sift_down_worst(c, 0, end - 1);
    }
}

static bool penalties_on(const qw_sampler *s) {
    return s->p.penalty_last_n > 0 && s->ring_n > 0 &&
           (s->p.repeat_penalty != 1.0f || s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f);
}

static void apply_penalties(qw_sampler *s, cand *c) {
    for (int32_t i = 0; i < s->ring_n; i++) {
        int32_t id = s->ring[i];
        int32_t cnt = s->count[id];
        if (cnt <= 0) continue;
        cand *x = &c[id]; /* candidates are still indexed by id here */
        if (x->logit <= 0) x->logit *= s->p.repeat_penalty;
        else x->logit /= s->p.repeat_penalty;
        x->logit -= (float)cnt * s->p.frequency_penalty + s->p.presence_penalty;
        s->count[id] = -cnt; /* mark done: a token may sit in the ring several times */
    }
    for (int32_t i = 0; i < s->ring_n; i++) {
        int32_t id = s->ring[i];
        if (s->count[id] < 0) s->count[id] = -s->count[id];
    }
}

/* Adds each logit_bias entry to its token's logit; ids outside the
 * vocabulary are skipped (the server rejects them before they get here). */
static void apply_logit_bias(const qw_sampler *s, cand *c) {
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) {
        int32_t id = s->p.logit_bias[i].id;
        if (id >= 0 && id < s->n_vocab) c[id].logit += s->p.logit_bias[i].bias;
    }
}

/* Moves the best k of c[0..n) to c[0..k), sorted best first: a size-k heap
 * whose root is the worst kept (over tmp), then one sort of the k. */
static int32_t select_top(qw_sampler *s, cand *c, int32_t n, int32_t k) {
    if (k >= n) {
        sort_desc(c, n);
        return n;
    }
    if (k <= 0) return 0;
    cand *h = s->tmp;
    memcpy(h, c, (size_t)k * sizeof *h);
    for (size_t i = (size_t)k / 2; i-- > 0;) sift_down_worst(h, i, (size_t)k);
    for (int32_t i = k; i < n; i++) {
        if (!better(&c[i], &h[0])) continue;
        h[0] = c[i];
        sift_down_worst(h, 0, (size_t)k);
    }
    sort_desc(h, k);
    memcpy(c, h, (size_t)k * sizeof *c);
    return k;
}

/* Softmax of c[0..n) at temperature 1 into .p; returns nothing. */
static void softmax(cand *c, int32_t n) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) if (c[i].logit > mx) mx = c[i].logit;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) { c[i].p = expf(c[i].logit - mx); sum += c[i].p; }
    for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* Keeps the top-p prefix; c becomes sorted.  *sorted tells whether it was. */
static int32_t top_p(qw_sampler *s, cand *c, int32_t n, bool *sorted) {
    softmax(c, n);
    int32_t k = n;
    if (!*sorted) {
        /* sort only the head first; probabilities are already normalised over all n */
        int32_t head = n > 1024 ? 256 : n;
        if (head < n) {
            cand *save = s->save;
            {
                memcpy(save, c, (size_t)n * sizeof *c);
                select_top(s, c, n, head);
                double cum = 0;
                for (int32_t i = 0; i < head; i++) {
                    cum += c[i].p;
                    if (cum >= s->p.top_p) { *sorted = true; return i + 1; }
                }
                memcpy(c, save, (size_t)n * sizeof *c);
            }
        }
        sort_desc(c, n);
        *sorted = true;
    }
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum >= s->p.top_p) { k = i + 1; break; }
    }
    return k;
}

static int32_t min_p(qw_sampler *s, cand *c, int32_t n) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) if (c[i].logit > mx) mx = c[i].logit;
    float thr = mx + logf(s->p.min_p);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].logit >= thr) c[m++] = c[i];
    return m > 0 ? m : n;
}

/* Keeps only the candidates the constraint allows (c is still indexed by
 * id); returns their number, or n_vocab when it allows none (ignored). */
static int32_t apply_constraint(qw_sampler *s, cand *c) {
    qw_sampler_constraint *k = s->p.constraint;
    if (k->mask(k, s->allowed) <= 0) return s->n_vocab;
    int32_t m = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->allowed[i]) c[m++] = c[i];
    return m;
}

static int32_t sample_unconstrained(qw_sampler *s, const float *logits);

int32_t qw_sampler_sample(qw_sampler *s, const float *logits) {
    int32_t id = sample_unconstrained(s, logits);
    if (s->p.constraint) s->p.constraint->accept(s->p.constraint, id);
    return id;
}

static int32_t sample_unconstrained(qw_sampler *s, const float *logits) {
    const int32_t nv = s->n_vocab;
    bool pen = penalties_on(s), bias = s->p.n_logit_bias > 0, con = s->p.constraint != NULL;
    if (s->p.temp <= 0 && !pen && !bias && !con) return qw_argmax(logits, nv);

    cand *c = s->c;
    for (int32_t i = 0; i < nv; i++) c[i] = (cand){i, logits[i], 0};
    if (bias) apply_logit_bias(s, c);
    if (pen) apply_penalties(s, c);
    int32_t n = con ? apply_constraint(s, c) : nv;
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++) if (better(&c[i], &c[best])) best = i;
        return c[best].id;
    }

    bool sorted = false;
    if (s->p.top_k > 0) {
        n = select_top(s, c, n, s->p.top_k);
        sorted = true;
    }
    if (s->p.top_p < 1.0f && n > 1) n = top_p(s, c, n, &sorted);
    if (s->p.min_p > 0.0f && n > 1) n = min_p(s, c, n);

    /* temperature + draw */
    for (int32_t i = 0; i < n; i++) c[i].logit /= s->p.temp;
    softmax(c, n);
    double u = uniform01(s->s), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    /* rounding left u above the total: the last token with mass */
    for (int32_t i = n - 1; i > 0; i--) if (c[i].p > 0) return c[i].id;
    return c[0].id;
}

/* ---- logprobs ---- */

void qw_logprobs_of(const float *logits, int32_t n_vocab, int32_t id, int32_t top_n, qw_token_logprobs *out) {
    if (top_n < 0) top_n = 0;
    if (top_n > QW_SAMPLER_MAX_TOP_LOGPROBS) top_n = QW_SAMPLER_MAX_TOP_LOGPROBS;
    if (top_n > n_vocab) top_n = n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    /* top_n by insertion into a short sorted list (n <= 20): one pass */
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab && top_n > 0; i++) {
        float v = logits[i];
        if (k == top_n && !(v > logits[out->top_id[k - 1]])) continue;
        int32_t j = k < top_n ? k++ : k - 1;
        while (j > 0 && v > logits[out->top_id[j - 1]]) {
            out->top_id[j] = out->top_id[j - 1];
            j--;
        }
        out->top_id[j] = i;
    }
    out->n_top = k;
    for (int32_t j = 0; j < k; j++) out->top_logprob[j] = (float)(logits[out->top_id[j]] - lse);
    out->id = id;
    out->logprob = id >= 0 && id < n_vocab ? (float)(logits[id] - lse) : -INFINITY;
}
