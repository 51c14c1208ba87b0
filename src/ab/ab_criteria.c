/* ab_criteria.c — kill criteria for `qwisp ab` (ab.h, docs/ab.md): a small
 * line-based language, parsed before any trial runs, and its three-valued
 * evaluation on intervals.
 *
 *     line  := rule | "else" "=>" WORD | empty        ('#' starts a comment)
 *     rule  := cond { "and" cond } "=>" WORD
 *     cond  := qty OP NUMBER
 *     qty   := METRIC "." KIND | "abs(" METRIC "." KIND ")"
 *     KIND  := delta | delta_pct | delta_mb (= delta, MiB metrics only)
 *     OP    := < | <= | > | >=
 *     WORD  := [a-z][a-z0-9_-]*, not "inconclusive" or "failed" (the harness's own)
 *
 * There is no "or": write two rules with the same verdict.  Every error names
 * line and column, what was expected and what was seen; metric names are
 * checked against QW_AB_METRICS so a typo cannot silently never fire.
 *
 * Evaluation: a comparison is true when the whole interval satisfies it,
 * false when no point does, unknown otherwise (and unknown when the metric is
 * missing); "and" is Kleene's.  Rules in file order: the first true rule
 * decides unless an unknown rule came before it (then "inconclusive").
 */
#include "qwisp/ab.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_mname[] = {
#define QW_AB_M_NAME(id, name, unit, help) name,
    QW_AB_METRICS(QW_AB_M_NAME)
#undef QW_AB_M_NAME
};
static const char *const g_munit[] = {
#define QW_AB_M_UNIT(id, name, unit, help) unit,
    QW_AB_METRICS(QW_AB_M_UNIT)
#undef QW_AB_M_UNIT
};

const char *qw_ab_metric_name(int m) { return m >= 0 && m < QW_AB_N_METRICS ? g_mname[m] : "?"; }
const char *qw_ab_metric_unit(int m) { return m >= 0 && m < QW_AB_N_METRICS ? g_munit[m] : "?"; }

int qw_ab_metric_find(const char *name, size_t len) {
    for (int i = 0; i < QW_AB_N_METRICS; i++)
        if (strlen(g_mname[i]) == len && !strncmp(g_mname[i], name, len)) return i;
    return -1;
}

/* ---- parser --------------------------------------------------------------- */

typedef struct {
    const char *line; /* start of the current line */
    const char *p;
    int lineno;
    qw_error *err;
} lexer;

static void skip_ws(lexer *lx) {
    while (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r') lx->p++;
}

static bool at_end(lexer *lx) {
    skip_ws(lx);
    return *lx->p == '\0' || *lx->p == '\n' || *lx->p == '#';
}

/* "saw 'xyz'" text: the next token-ish run of the line. */
static int expected(lexer *lx, const char *what) {
    skip_ws(lx);
    int col = (int)(lx->p - lx->line) + 1;
    if (at_end(lx)) return qw_fail(lx->err, "line %d, column %d: expected %s, saw end of line", lx->lineno, col, what);
    int n = 0;
    while (lx->p[n] && lx->p[n] != '\n' && lx->p[n] != ' ' && lx->p[n] != '\t' && n < 24) n++;
    return qw_fail(lx->err, "line %d, column %d: expected %s, saw '%.*s'", lx->lineno, col, what, n, lx->p);
}

static bool is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

static size_t ident_len(const char *p) {
    size_t n = 0;
    while (is_ident(p[n])) n++;
    return n;
}

static bool take_word(lexer *lx, const char *w) {
    skip_ws(lx);
    size_t n = strlen(w);
    if (!strncmp(lx->p, w, n) && !is_ident(lx->p[n])) {
        lx->p += n;
        return true;
    }
    return false;
}

static bool take(lexer *lx, const char *s) {
    skip_ws(lx);
    size_t n = strlen(s);
    if (!strncmp(lx->p, s, n)) {
        lx->p += n;
        return true;
    }
    return false;
}

static int metric_list(char *buf, size_t cap) {
    size_t o = 0;
    for (int i = 0; i < QW_AB_N_METRICS && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", g_mname[i]);
    return 0;
}

static int parse_cond(lexer *lx, qw_ab_cond *c) {
    skip_ws(lx);
    c->line = lx->lineno;
    c->col = (int)(lx->p - lx->line) + 1;
    c->absval = take(lx, "abs(");
    skip_ws(lx);
    const char *m = lx->p;
    size_t n = ident_len(m);
    if (n == 0) return expected(lx, "a metric (e.g. decode_tok_s.delta_pct)");
    c->metric = qw_ab_metric_find(m, n);
    if (c->metric < 0) {
        char list[700];
        metric_list(list, sizeof list);
        return qw_fail(lx->err, "line %d, column %d: unknown metric '%.*s' (known: %s)", lx->lineno,
                       (int)(m - lx->line) + 1, (int)n, m, list);
    }
    lx->p += n;
    if (*lx->p != '.') return expected(lx, "'.delta', '.delta_pct' or '.delta_mb' after the metric");
    lx->p++;
    const char *k = lx->p;
    size_t kn = ident_len(k);
    if (kn == 5 && !strncmp(k, "delta", 5)) c->kind = QW_AB_DELTA;
    else if (kn == 9 && !strncmp(k, "delta_pct", 9)) c->kind = QW_AB_DELTA_PCT;
    else if (kn == 8 && !strncmp(k, "delta_mb", 8)) {
        if (strcmp(g_munit[c->metric], "MiB") != 0)
            return qw_fail(lx->err, "line %d, column %d: '%s' is in %s, not MiB: use .delta or .delta_pct", lx->lineno,
                           (int)(k - lx->line) + 1, g_mname[c->metric], g_munit[c->metric]);
        c->kind = QW_AB_DELTA;
    } else {
        return expected(lx, "delta, delta_pct or delta_mb");
    }
    lx->p += kn;
    if (c->absval && !take(lx, ")")) return expected(lx, "')' closing abs(");
    if (take(lx, "<=")) c->op = QW_AB_LE;
    else if (take(lx, ">=")) c->op = QW_AB_GE;
    else if (take(lx, "<")) c->op = QW_AB_LT;
    else if (take(lx, ">")) c->op = QW_AB_GT;
    else return expected(lx, "a comparison (<, <=, >, >=)");
    skip_ws(lx);
    /* strtod would skip '\n' (and \v, \f) and take a number from the next line */
    if (isspace((unsigned char)*lx->p)) return expected(lx, "a number");
    char *end;
    errno = 0;
    c->threshold = strtod(lx->p, &end);
    if (end == lx->p || errno || !isfinite(c->threshold)) return expected(lx, "a number");
    lx->p = end;
    return 0;
}

static int parse_verdict(lexer *lx, char *out) {
    if (!take(lx, "=>")) return expected(lx, "'and' or '=>'");
    skip_ws(lx);
    const char *w = lx->p;
    size_t n = 0;
    if (islower((unsigned char)w[0]))
        while (islower((unsigned char)w[n]) || isdigit((unsigned char)w[n]) || w[n] == '_' || w[n] == '-') n++;
    if (n == 0) return expected(lx, "a verdict word ([a-z][a-z0-9_-]*)");
    if (n >= QW_AB_WORD) return qw_fail(lx->err, "line %d: verdict word longer than %d", lx->lineno, QW_AB_WORD - 1);
    if ((n == 12 && !strncmp(w, "inconclusive", 12)) || (n == 6 && !strncmp(w, "failed", 6)))
        return qw_fail(lx->err, "line %d, column %d: '%.*s' is the harness's own verdict, choose another word",
                       lx->lineno, (int)(w - lx->line) + 1, (int)n, w);
    memcpy(out, w, n);
    out[n] = 0;
    lx->p += n;
    if (!at_end(lx)) return expected(lx, "end of line after the verdict");
    return 0;
}

int qw_ab_criteria_parse(qw_ab_criteria *c, const char *text, qw_error *err) {
    memset(c->rules, 0, sizeof c->rules);
    c->n_rules = 0;
    snprintf(c->otherwise, sizeof c->otherwise, "none");
    bool have_else = false;
    lexer lx = {.line = text, .p = text, .lineno = 1, .err = err};
    while (*lx.line) {
        lx.p = lx.line;
        if (!at_end(&lx)) {
            if (take_word(&lx, "else")) {
                if (have_else) return qw_fail(err, "line %d: a second 'else' rule", lx.lineno);
                if (parse_verdict(&lx, c->otherwise)) return -1;
                have_else = true;
            } else {
                if (have_else) return qw_fail(err, "line %d: a rule after 'else' could never fire", lx.lineno);
                if (c->n_rules == QW_AB_MAX_RULES) return qw_fail(err, "line %d: more than %d rules", lx.lineno, QW_AB_MAX_RULES);
                qw_ab_rule *r = &c->rules[c->n_rules];
                r->line = lx.lineno;
                do {
                    if (r->n_conds == QW_AB_MAX_CONDS)
                        return qw_fail(err, "line %d: more than %d conditions", lx.lineno, QW_AB_MAX_CONDS);
                    if (parse_cond(&lx, &r->conds[r->n_conds++])) return -1;
                } while (take_word(&lx, "and"));
                if (parse_verdict(&lx, r->verdict)) return -1;
                const char *s = lx.line, *e = strchr(s, '\n');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                const char *hash = memchr(s, '#', n);
                if (hash) n = (size_t)(hash - s);
                while (n && isspace((unsigned char)s[n - 1])) n--;
                while (n && isspace((unsigned char)*s)) s++, n--;
                snprintf(r->text, sizeof r->text, "%.*s", (int)n, s);
                c->n_rules++;
            }
        }
        const char *nl = strchr(lx.line, '\n');
        if (!nl) break;
        lx.line = nl + 1;
        lx.lineno++;
    }
    if (c->n_rules == 0) return qw_fail(err, "no rules (expected lines like 'decode_tok_s.delta_pct < -2 => close')");
    return 0;
}

int qw_ab_criteria_load(qw_ab_criteria *c, const char *path, qw_error *err) {
    memset(c, 0, sizeof *c);
    size_t n = 0;
    qw_error e1 = {0};
    char *buf = qw_read_file(path, 1u << 20, &n, &e1); /* a criteria file is a few lines */
    if (!buf) return qw_fail(err, "criteria %s", e1.msg);
    if (memchr(buf, 0, n)) {
        free(buf);
        return qw_fail(err, "criteria %s: binary file (NUL byte)", path);
    }
    c->text = buf;
    qw_ab_sha256(buf, n, c->sha256);
    qw_error e2 = {0};
    if (qw_ab_criteria_parse(c, buf, &e2)) return qw_fail(err, "criteria %s: %s", path, e2.msg);
    return 0;
}

void qw_ab_criteria_free(qw_ab_criteria *c) {
    free(c->text);
    c->text = NULL;
}

/* ---- evaluation --------------------------------------------------------------- */

static qw_ab_interval absolute(qw_ab_interval iv) {
    if (iv.lo >= 0) return iv;
    qw_ab_interval a = iv;
    a.est = fabs(iv.est);
    if (iv.hi <= 0) {
        a.lo = -iv.hi;
        a.hi = -iv.lo;
    } else {
        a.lo = 0;
        a.hi = fmax(-iv.lo, iv.hi);
    }
    return a;
}

static qw_ab_tri cmp_interval(qw_ab_op op, double lo, double hi, double t) {
    switch (op) {
    case QW_AB_LT: return hi < t ? QW_AB_TRUE : lo >= t ? QW_AB_FALSE : QW_AB_UNKNOWN;
    case QW_AB_LE: return hi <= t ? QW_AB_TRUE : lo > t ? QW_AB_FALSE : QW_AB_UNKNOWN;
    case QW_AB_GT: return lo > t ? QW_AB_TRUE : hi <= t ? QW_AB_FALSE : QW_AB_UNKNOWN;
    case QW_AB_GE: return lo >= t ? QW_AB_TRUE : hi < t ? QW_AB_FALSE : QW_AB_UNKNOWN;
    }
    return QW_AB_UNKNOWN;
}

qw_ab_tri qw_ab_cond_eval(const qw_ab_cond *c, qw_ab_interval iv) {
    if (!iv.valid) return QW_AB_UNKNOWN;
    if (c->absval) iv = absolute(iv);
    return cmp_interval(c->op, iv.lo, iv.hi, c->threshold);
}

static const char *op_text(qw_ab_op op) {
    static const char *const t[] = {"<", "<=", ">", ">="};
    return t[op];
}

static const char *tri_text(qw_ab_tri t) { return t == QW_AB_TRUE ? "true" : t == QW_AB_FALSE ? "false" : "straddles"; }

/* "abs(decode_tok_s.delta_pct) = 0.4 [0.0, 1.2] <= 2: true" */
static size_t describe(char *buf, size_t cap, const qw_ab_cond *c, qw_ab_interval iv, qw_ab_tri t) {
    const char *k = c->kind == QW_AB_DELTA_PCT ? "delta_pct" : "delta";
    if (!iv.valid)
        return (size_t)snprintf(buf, cap, "%s%s.%s%s: fewer than 2 pairs", c->absval ? "abs(" : "",
                                qw_ab_metric_name(c->metric), k, c->absval ? ")" : "");
    if (c->absval) iv = absolute(iv);
    return (size_t)snprintf(buf, cap, "%s%s.%s%s = %.3g [%.3g, %.3g] %s %g: %s", c->absval ? "abs(" : "",
                            qw_ab_metric_name(c->metric), k, c->absval ? ")" : "", iv.est, iv.lo, iv.hi,
                            op_text(c->op), c->threshold, tri_text(t));
}

void qw_ab_criteria_eval(const qw_ab_criteria *c, qw_ab_lookup look, void *user, qw_ab_verdict *out) {
    *out = (qw_ab_verdict){.rule = -1, .unknown_rule = -1};
    for (int r = 0; r < c->n_rules; r++) {
        const qw_ab_rule *rule = &c->rules[r];
        qw_ab_tri all = QW_AB_TRUE;
        qw_ab_interval ivs[QW_AB_MAX_CONDS];
        qw_ab_tri ts[QW_AB_MAX_CONDS];
        for (int i = 0; i < rule->n_conds; i++) {
            ivs[i] = look(user, rule->conds[i].metric, rule->conds[i].kind);
            ts[i] = qw_ab_cond_eval(&rule->conds[i], ivs[i]);
            if (ts[i] == QW_AB_FALSE) all = QW_AB_FALSE;
            else if (ts[i] == QW_AB_UNKNOWN && all == QW_AB_TRUE) all = QW_AB_UNKNOWN;
        }
        if (all == QW_AB_FALSE) continue;
        size_t o = (size_t)snprintf(out->why, sizeof out->why, "rule at line %d (%s): ", rule->line,
                                    all == QW_AB_TRUE ? "met" : "straddles");
        for (int i = 0; i < rule->n_conds && o < sizeof out->why; i++) {
            if (all == QW_AB_UNKNOWN && ts[i] != QW_AB_UNKNOWN) continue;
            o += describe(out->why + o, sizeof out->why - o, &rule->conds[i], ivs[i], ts[i]);
            if (o < sizeof out->why) o += (size_t)snprintf(out->why + o, sizeof out->why - o, "; ");
        }
        size_t w = strlen(out->why);
        if (w >= 2 && !strcmp(out->why + w - 2, "; ")) out->why[w - 2] = 0;
        if (all == QW_AB_TRUE) {
            out->rule = r;
            snprintf(out->verdict, sizeof out->verdict, "%s", rule->verdict);
            return;
        }
        /* unknown: inconclusive, and how many reps would settle the widest straddle */
        out->unknown_rule = r;
        snprintf(out->verdict, sizeof out->verdict, "inconclusive");
        int reps = 0;
        for (int i = 0; i < rule->n_conds; i++) {
            if (ts[i] != QW_AB_UNKNOWN || !ivs[i].valid) continue;
            qw_ab_interval iv = rule->conds[i].absval ? absolute(ivs[i]) : ivs[i];
            double half = (iv.hi - iv.lo) / 2.0;
            int s = qw_ab_suggest_reps(iv.n, iv.est, half, rule->conds[i].threshold);
            if (s == 0) {
                reps = 0;
                break;
            }
            if (s > reps) reps = s;
        }
        out->suggest_reps = reps;
        return;
    }
    snprintf(out->verdict, sizeof out->verdict, "%s", c->otherwise);
    snprintf(out->why, sizeof out->why, "no rule met (every rule false over its whole interval): else");
}
