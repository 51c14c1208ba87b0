/* textout.c — generated tokens to client text (see textout.h for the
 * pipeline).  Holdback bounds: the stop matcher holds at most max_stop - 1
 * bytes, the think splitter at most strlen("</think>") - 1, so text reaches
 * the client at most a few bytes late.  A stop string is searched in the
 * held text plus the new text, so one that spans tokens is found; the
 * earliest match wins and everything from it on is dropped.
 */
#include "textout.h"

#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<think>", k_close[] = "</think>";

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void qw_strbuf_add(qw_strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = qw_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void qw_strbuf_free(qw_strbuf *b) {
    free(b->p);
    *b = (qw_strbuf){0};
}

static void strbuf_consume(qw_strbuf *b, size_t k) {
    if (!k) return;
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    if (b->p) b->p[b->n] = 0;
}

void qw_utf8_sanitize(qw_strbuf *b, const char *s, size_t n) {
    static const char fffd[] = "\xEF\xBF\xBD";
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        unsigned c = u[i];
        int need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else need = 0;
        size_t k = 1; /* bytes of this sequence that are valid so far */
        bool ok = need > 0;
        for (int t = 0; ok && t < need; t++) {
            if (i + k >= n) { ok = false; break; }
            unsigned x = u[i + k];
            unsigned l = t == 0 ? lo : 0x80, h = t == 0 ? hi : 0xBF;
            if (x < l || x > h) { ok = false; break; }
            k++;
        }
        if (ok) { i += k; continue; }
        qw_strbuf_add(b, s + run, i - run);
        qw_strbuf_add(b, fffd, 3);
        i += k; /* the maximal subpart: lead + the continuation bytes that fit */
        run = i;
    }
    qw_strbuf_add(b, s + run, n - run);
}

void qw_textout_init(qw_textout *o, const qw_tokenizer *tok, const char *const *stops, int n_stops,
                     qw_think_mode think) {
    *o = (qw_textout){.tok = tok};
    o->think = think == QW_THINK_OPEN ? 1 : think == QW_THINK_NONE ? 2 : 0;
    o->skip_ws = think == QW_THINK_OPEN;
    if (n_stops > 0) o->stops = qw_xcalloc((size_t)n_stops, sizeof(char *));
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        o->stops[o->n_stops++] = qw_xstrdup(stops[i]);
        size_t l = strlen(stops[i]);
        if (l > o->max_stop) o->max_stop = l;
    }
}

void qw_textout_free(qw_textout *o) {
    for (int i = 0; i < o->n_stops; i++) free(o->stops[i]);
    free(o->stops);
    qw_strbuf_free(&o->hold);
    qw_strbuf_free(&o->taghold);
    qw_strbuf_free(&o->content);
    qw_strbuf_free(&o->reasoning);
}

/* Appends to the current part, dropping its leading whitespace. */
static void part_add(qw_textout *o, const char *s, size_t n) {
    if (o->skip_ws) {
        while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++, n--;
        if (!n) return;
        o->skip_ws = false;
    }
    qw_strbuf_add(o->think == 1 ? &o->reasoning : &o->content, s, n);
}

/* Length of the longest suffix of s[n] that is a proper prefix of tag. */
static size_t partial_suffix(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

/* The think splitter: routes text to reasoning or content.  final = flush. */
static void think_feed(qw_textout *o, const char *s, size_t n, bool final) {
    qw_strbuf_add(&o->taghold, s, n);
    for (;;) {
        qw_strbuf *h = &o->taghold;
        if (!h->n) return;
        if (o->think == 0) {
            /* Before any content: skip whitespace, then either <think> opens or content starts. */
            size_t ws = 0;
            while (ws < h->n && is_ws(h->p[ws])) ws++;
            size_t rest = h->n - ws;
            if (rest == 0 && !final) return; /* whitespace only so far: hold it */
            size_t cmp = rest < sizeof k_open - 1 ? rest : sizeof k_open - 1;
            if (!memcmp(h->p + ws, k_open, cmp)) {
                if (cmp < sizeof k_open - 1) {
                    if (!final) return; /* maybe <think>, wait */
                } else {
                    strbuf_consume(h, ws + sizeof k_open - 1);
                    o->think = 1;
                    o->skip_ws = true;
                    continue;
                }
            }
            o->think = 2; /* no think block: the held whitespace is content */
            o->skip_ws = false;
            continue;
        }
        if (o->think == 1) {
            char *end = memmem(h->p, h->n, k_close, sizeof k_close - 1);
            if (end) {
                size_t k = (size_t)(end - h->p);
                /* reasoning drops its trailing whitespace before </think> */
                size_t t = k;
                while (t && is_ws(h->p[t - 1])) t--;
                part_add(o, h->p, t);
                strbuf_consume(h, k + sizeof k_close - 1);
                o->think = 2;
                o->skip_ws = true;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(h->p, h->n, k_close);
            /* trailing whitespace waits too: it is dropped if </think> follows */
            while (!final && keep < h->n && is_ws(h->p[h->n - keep - 1])) keep++;
            part_add(o, h->p, h->n - keep);
            strbuf_consume(h, h->n - keep);
            return;
        }
        part_add(o, h->p, h->n);
        strbuf_consume(h, h->n);
        return;
    }
}

/* The stop matcher, in front of the think splitter. */
static void stop_feed(qw_textout *o, const char *s, size_t n) {
    if (o->n_stops == 0) {
        think_feed(o, s, n, false);
        return;
    }
    qw_strbuf *h = &o->hold;
    qw_strbuf_add(h, s, n);
    size_t best = (size_t)-1;
    for (int i = 0; i < o->n_stops; i++) {
        char *m = memmem(h->p, h->n, o->stops[i], strlen(o->stops[i]));
        if (m && (size_t)(m - h->p) < best) best = (size_t)(m - h->p);
    }
    if (best != (size_t)-1) {
        think_feed(o, h->p, best, true);
        strbuf_consume(h, h->n);
        o->ended = o->stop_hit = true;
        return;
    }
    size_t keep = 0;
    for (int i = 0; i < o->n_stops; i++) {
        size_t k = partial_suffix(h->p, h->n, o->stops[i]);
        if (k > keep) keep = k;
    }
    think_feed(o, h->p, h->n - keep, false);
    strbuf_consume(h, h->n - keep);
}

bool qw_textout_push(qw_textout *o, int32_t id) {
    if (o->ended) return true;
    o->n_tokens++;
    if (qw_tokenizer_is_eog(o->tok, id)) {
        if (o->ignore_eos) return false;
        qw_textout_flush(o);
        o->ended = o->eos_hit = true;
        return true;
    }
    char buf[1024];
    int n = qw_detok_stream_push(&o->ds, o->tok, id, buf, sizeof buf);
    if (n <= 0) return false;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1; /* a token longer than 1 KB: truncated */
    qw_strbuf clean = {0};
    qw_utf8_sanitize(&clean, buf, (size_t)n);
    stop_feed(o, clean.p, clean.n);
    qw_strbuf_free(&clean);
    return o->ended;
}

void qw_textout_flush(qw_textout *o) {
    if (o->ended) return;
    char buf[16];
    int n = qw_detok_stream_flush(&o->ds, buf, sizeof buf);
    if (n > 0) {
        qw_strbuf clean = {0};
        qw_utf8_sanitize(&clean, buf, (size_t)n);
        stop_feed(o, clean.p, clean.n);
        qw_strbuf_free(&clean);
    }
    if (o->ended) return;
    think_feed(o, o->hold.p ? o->hold.p : "", o->hold.n, true);
    strbuf_consume(&o->hold, o->hold.n);
    think_feed(o, "", 0, true);
}

static const char *take(qw_strbuf *b, size_t *taken, size_t *n) {
    *n = b->n - *taken;
    const char *p = b->p ? b->p + *taken : "";
    *taken = b->n;
    return p;
}

const char *qw_textout_take_content(qw_textout *o, size_t *n) { return take(&o->content, &o->content_taken, n); }
const char *qw_textout_take_reasoning(qw_textout *o, size_t *n) {
    return take(&o->reasoning, &o->reasoning_taken, n);
}
