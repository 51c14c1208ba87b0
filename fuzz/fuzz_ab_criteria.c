/* fuzz_ab_criteria.c — libFuzzer target for the kill-criteria parser of
 * `qwisp ab` (qw_ab_criteria_parse and qw_ab_criteria_eval, src/ab/ab_criteria.c).
 *
 * The input is the criteria file's text (cut at its first NUL, as the file
 * loader refuses NUL bytes anyway).  Invariants checked:
 *   - failure: a non-empty message;
 *   - success: 1..QW_AB_MAX_RULES rules of 1..QW_AB_MAX_CONDS conditions, each
 *     with a known metric, kind and operator, a finite threshold and the
 *     rule's own line number (a condition never continues on the next line);
 *     rules in increasing line order; verdict words (and the else word) match
 *     [a-z][a-z0-9_-]* and are not the harness's own "inconclusive"/"failed";
 *   - canonical round trip: the parsed rules printed back in canonical form
 *     ("abs(m.kind) op %.17g and … => word", "else => word") parse again to
 *     the same rules;
 *   - evaluation on intervals derived from the input (valid or not, bounded or
 *     ±inf): every condition's three-valued result agrees with the endpoints
 *     of its interval, the verdict is the first rule not false — its word
 *     when true, "inconclusive" when it straddles — or the else word.
 *
 *     make fuzz && build-fuzz/bin/fuzz_ab_criteria fuzz/seeds/ab_criteria
 */
#include "qwisp/ab.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

static bool good_word(const char *w) {
    if (!(w[0] >= 'a' && w[0] <= 'z')) return false;
    size_t n = 0;
    for (; w[n]; n++)
        if (!((w[n] >= 'a' && w[n] <= 'z') || (w[n] >= '0' && w[n] <= '9') || w[n] == '_' || w[n] == '-'))
            return false;
    return n < QW_AB_WORD && strcmp(w, "inconclusive") != 0 && strcmp(w, "failed") != 0;
}

static void check_parsed(const qw_ab_criteria *c) {
    CHECK(c->n_rules >= 1 && c->n_rules <= QW_AB_MAX_RULES);
    CHECK(!strcmp(c->otherwise, "none") || good_word(c->otherwise));
    int prev_line = 0;
    for (int r = 0; r < c->n_rules; r++) {
        const qw_ab_rule *ru = &c->rules[r];
        CHECK(ru->line > prev_line);
        prev_line = ru->line;
        CHECK(good_word(ru->verdict));
        CHECK(memchr(ru->text, 0, sizeof ru->text) && ru->text[0]);
        CHECK(ru->n_conds >= 1 && ru->n_conds <= QW_AB_MAX_CONDS);
        for (int i = 0; i < ru->n_conds; i++) {
            const qw_ab_cond *cd = &ru->conds[i];
            CHECK(cd->metric >= 0 && cd->metric < QW_AB_N_METRICS);
            CHECK(cd->kind == QW_AB_DELTA || cd->kind == QW_AB_DELTA_PCT);
            CHECK(cd->op >= QW_AB_LT && cd->op <= QW_AB_GE);
            CHECK(isfinite(cd->threshold));
            CHECK(cd->line == ru->line && cd->col >= 1);
        }
    }
}

/* Canonical text of c. */
static char *print_canonical(const qw_ab_criteria *c) {
    static const char *const ops[] = {"<", "<=", ">", ">="};
    size_t cap = 128 + (size_t)c->n_rules * (QW_AB_MAX_CONDS * 96 + 64);
    char *s = malloc(cap);
    CHECK(s);
    size_t o = 0;
    for (int r = 0; r < c->n_rules; r++) {
        const qw_ab_rule *ru = &c->rules[r];
        for (int i = 0; i < ru->n_conds; i++) {
            const qw_ab_cond *cd = &ru->conds[i];
            const char *k = cd->kind == QW_AB_DELTA_PCT ? "delta_pct" : "delta";
            o += (size_t)snprintf(s + o, cap - o, "%s%s%s.%s%s %s %.17g", i ? " and " : "",
                                  cd->absval ? "abs(" : "", qw_ab_metric_name(cd->metric), k,
                                  cd->absval ? ")" : "", ops[cd->op], cd->threshold);
            CHECK(o < cap);
        }
        o += (size_t)snprintf(s + o, cap - o, " => %s\n", ru->verdict);
        CHECK(o < cap);
    }
    o += (size_t)snprintf(s + o, cap - o, "else => %s\n", c->otherwise);
    CHECK(o < cap);
    return s;
}

static void check_same(const qw_ab_criteria *a, const qw_ab_criteria *b) {
    CHECK(a->n_rules == b->n_rules && !strcmp(a->otherwise, b->otherwise));
    for (int r = 0; r < a->n_rules; r++) {
        const qw_ab_rule *x = &a->rules[r], *y = &b->rules[r];
        CHECK(x->n_conds == y->n_conds && !strcmp(x->verdict, y->verdict));
        for (int i = 0; i < x->n_conds; i++) {
            const qw_ab_cond *p = &x->conds[i], *q = &y->conds[i];
            CHECK(p->metric == q->metric && p->kind == q->kind && p->absval == q->absval && p->op == q->op &&
                  p->threshold == q->threshold);
        }
    }
}

/* ---- evaluation against intervals drawn from the input ---- */

typedef struct {
    qw_ab_interval iv[QW_AB_N_METRICS][2];
} table;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double draw(uint64_t *s) {
    static const double pts[] = {-100, -10, -4096, -2, -1, -0.5, 0, 0.5, 1, 2, 4, 10, 100, 4096};
    uint64_t r = splitmix(s);
    if (r % 4 == 0) return pts[(r >> 8) % (sizeof pts / sizeof pts[0])];
    return ((double)(int64_t)(r >> 11) / (double)(1ull << 52) - 1.0) * 100.0;
}

static void fill(table *t, uint64_t seed) {
    for (int m = 0; m < QW_AB_N_METRICS; m++)
        for (int k = 0; k < 2; k++) {
            qw_ab_interval *iv = &t->iv[m][k];
            uint64_t r = splitmix(&seed);
            double a = draw(&seed), b = draw(&seed);
            if (a > b) { double x = a; a = b; b = x; }
            iv->valid = r % 7 != 0;
            iv->lo = (r >> 3) % 9 == 0 ? -INFINITY : a;
            iv->hi = (r >> 7) % 9 == 0 ? INFINITY : b;
            iv->est = isfinite(iv->lo) ? (isfinite(iv->hi) ? (a + b) / 2 : a) : (isfinite(iv->hi) ? b : 0);
            iv->n = (int)((r >> 12) % 40);
        }
}

static qw_ab_interval look(void *user, int metric, qw_ab_kind kind) {
    CHECK(metric >= 0 && metric < QW_AB_N_METRICS && (kind == QW_AB_DELTA || kind == QW_AB_DELTA_PCT));
    return ((table *)user)->iv[metric][kind];
}

static bool holds(qw_ab_op op, double x, double t) {
    switch (op) {
    case QW_AB_LT: return x < t;
    case QW_AB_LE: return x <= t;
    case QW_AB_GT: return x > t;
    case QW_AB_GE: return x >= t;
    }
    return false;
}

/* The reference: a monotone comparison holds on the whole interval iff it
 * holds at both ends, and nowhere iff at neither (abs() maps the interval
 * first: [|lo|,|hi|] sorted, or [0, max] when it straddles 0). */
static qw_ab_tri reference(const qw_ab_cond *c, qw_ab_interval iv) {
    if (!iv.valid) return QW_AB_UNKNOWN;
    double lo = iv.lo, hi = iv.hi;
    if (c->absval) {
        if (lo >= 0) {
        } else if (hi <= 0) {
            double x = -hi;
            hi = -lo;
            lo = x;
        } else {
            hi = fmax(-lo, hi);
            lo = 0;
        }
    }
    bool a = holds(c->op, lo, c->threshold), b = holds(c->op, hi, c->threshold);
    return a && b ? QW_AB_TRUE : !a && !b ? QW_AB_FALSE : QW_AB_UNKNOWN;
}

static void check_eval(const qw_ab_criteria *c, uint64_t seed) {
    table t;
    fill(&t, seed);
    qw_ab_verdict v;
    qw_ab_criteria_eval(c, look, &t, &v);
    CHECK(memchr(v.verdict, 0, sizeof v.verdict) && memchr(v.why, 0, sizeof v.why));
    for (int r = 0; r < c->n_rules; r++) {
        const qw_ab_rule *ru = &c->rules[r];
        qw_ab_tri all = QW_AB_TRUE;
        for (int i = 0; i < ru->n_conds; i++) {
            const qw_ab_cond *cd = &ru->conds[i];
            qw_ab_tri got = qw_ab_cond_eval(cd, t.iv[cd->metric][cd->kind]);
            CHECK(got == reference(cd, t.iv[cd->metric][cd->kind]));
            if (got == QW_AB_FALSE) all = QW_AB_FALSE;
            else if (got == QW_AB_UNKNOWN && all == QW_AB_TRUE) all = QW_AB_UNKNOWN;
        }
        if (all == QW_AB_FALSE) continue;
        if (all == QW_AB_TRUE) {
            CHECK(v.rule == r && v.unknown_rule == -1 && !strcmp(v.verdict, ru->verdict));
        } else {
            CHECK(v.rule == -1 && v.unknown_rule == r && !strcmp(v.verdict, "inconclusive"));
            CHECK(v.suggest_reps >= 0);
        }
        return;
    }
    CHECK(v.rule == -1 && v.unknown_rule == -1 && !strcmp(v.verdict, c->otherwise));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    qw_ab_criteria *c = calloc(1, sizeof *c);
    CHECK(c);
    qw_error err = {{0}};
    if (qw_ab_criteria_parse(c, text, &err) != 0) {
        CHECK(err.msg[0]);
    } else {
        CHECK(!err.msg[0]);
        check_parsed(c);
        char *canon = print_canonical(c);
        qw_ab_criteria *c2 = calloc(1, sizeof *c2);
        CHECK(c2);
        qw_error err2 = {{0}};
        if (qw_ab_criteria_parse(c2, canon, &err2) != 0) {
            fprintf(stderr, "canonical form does not parse: %s\n%s", err2.msg, canon);
            __builtin_trap();
        }
        check_same(c, c2);
        free(c2);
        free(canon);
        uint64_t seed = 0x12345;
        for (size_t i = 0; i < size; i++) seed = (seed ^ data[i]) * 0x100000001B3ull;
        check_eval(c, seed);
        check_eval(c, seed ^ 0xDEADBEEF);
    }
    qw_ab_criteria_free(c); /* text is NULL: parse never sets it */
    free(c);
    free(text);
    return 0;
}
