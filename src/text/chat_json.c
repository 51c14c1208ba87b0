/* chat_json.c — tojson and str() of parsed JSON, as Python's Jinja renders
 * them inside a chat template (see chat_json.h).
 *
 * The exact bytes matter: a tool definition is printed into the prompt with
 * `tool | tojson`, and the model was trained on what transformers' Jinja
 * (json.dumps, ensure_ascii=False) prints.  cJSON's own printer uses other
 * separators and escapes, so this is a printer of its own.  Numbers: cJSON
 * keeps a double, so 5 and 5.0 are one value; an integer-valued number is
 * printed as an integer (what a JSON integer gives in Python and JS), other
 * numbers with the fewest digits that read back the same (Python's repr).
 */
#include "chat_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jbuf {
    char *p;
    size_t n, cap;
    bool oom;
} jbuf;

static void jput(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void jputs(jbuf *b, const char *s) { jput(b, s, strlen(s)); }

static void put_number(jbuf *b, double v) {
    char s[40];
    if (!isfinite(v)) snprintf(s, sizeof s, "%s", isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    else if (v == floor(v) && fabs(v) < 1e16) snprintf(s, sizeof s, "%.0f", v);
    else {
        for (int p = 1; p <= 17; p++) {
            snprintf(s, sizeof s, "%.*g", p, v);
            if (strtod(s, NULL) == v) break;
        }
        /* Python's repr writes 1e+16 and 1.5e-05 as C does; a mantissa
         * without a dot stays without one */
    }
    jputs(b, s);
}

static void put_string(jbuf *b, const char *s) {
    jput(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            jput(b, run, (size_t)(s - run));
            jputs(b, esc);
            run = s + 1;
        }
    }
    jput(b, run, (size_t)(s - run));
    jput(b, "\"", 1);
}

static void dumps(jbuf *b, const cJSON *v);

/* A list or dict as both writers print it — "[a, b]" / "{k: v}", ", " and
 * ": " as Python does — with the writers' own key and element forms. */
static void put_container(jbuf *b, const cJSON *v, void (*put_key)(jbuf *, const char *),
                          void (*put_elem)(jbuf *, const cJSON *)) {
    const bool obj = cJSON_IsObject(v);
    jputs(b, obj ? "{" : "[");
    const cJSON *x;
    bool first = true;
    cJSON_ArrayForEach(x, v) {
        if (!first) jputs(b, ", ");
        first = false;
        if (obj) {
            put_key(b, x->string ? x->string : "");
            jputs(b, ": ");
        }
        put_elem(b, x);
    }
    jputs(b, obj ? "}" : "]");
}

static void dumps(jbuf *b, const cJSON *v) {
    if (cJSON_IsNull(v) || !v) jputs(b, "null");
    else if (cJSON_IsTrue(v)) jputs(b, "true");
    else if (cJSON_IsFalse(v)) jputs(b, "false");
    else if (cJSON_IsNumber(v)) put_number(b, v->valuedouble);
    else if (cJSON_IsString(v)) put_string(b, v->valuestring);
    else if (cJSON_IsArray(v) || cJSON_IsObject(v)) put_container(b, v, put_string, dumps);
    else jputs(b, "null"); /* cJSON_Raw / invalid: not produced by the parser */
}

char *qw_json_dumps(const cJSON *v) {
    jbuf b = {0};
    jput(&b, "", 0);
    dumps(&b, v);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Python's repr() of a str: single quotes unless the text holds ' and no ". */
static void put_pyrepr_str(jbuf *b, const char *s) {
    char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
    jput(b, &q, 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8] = {0};
        if (c == '\\') strcpy(esc, "\\\\");
        else if (c == (unsigned char)q) snprintf(esc, sizeof esc, "\\%c", q);
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        if (esc[0]) {
            jput(b, run, (size_t)(s - run));
            jputs(b, esc);
            run = s + 1;
        }
    }
    jput(b, run, (size_t)(s - run));
    jput(b, &q, 1);
}

/* Python's str() of a JSON value: repr() inside lists and dicts. */
static void pystr(jbuf *b, const cJSON *v, bool top);
static void pystr_elem(jbuf *b, const cJSON *v) { pystr(b, v, false); }

static void pystr(jbuf *b, const cJSON *v, bool top) {
    if (cJSON_IsString(v)) {
        if (top) jputs(b, v->valuestring);
        else put_pyrepr_str(b, v->valuestring);
    } else if (cJSON_IsTrue(v)) jputs(b, "True");
    else if (cJSON_IsFalse(v)) jputs(b, "False");
    else if (cJSON_IsNull(v)) jputs(b, "None");
    else if (cJSON_IsArray(v) || cJSON_IsObject(v)) put_container(b, v, put_pyrepr_str, pystr_elem);
    else dumps(b, v);
}

char *qw_json_pystr(const cJSON *v) {
    jbuf b = {0};
    jput(&b, "", 0);
    pystr(&b, v, true);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
