/* jsonstr.c — decodes one top-level JSON string member to its exact bytes
 * (see jsonstr.h for why cJSON alone cannot).
 *
 * The text has already been accepted by cJSON, so this is a walker, not a
 * validator: it steps over the top-level members (strings decoded, nested
 * objects and arrays skipped by depth, scalars up to the next delimiter) and
 * still refuses, rather than trusts, anything malformed it meets — a bad
 * escape or an unterminated string gives NULL.
 */
#include "jsonstr.h"

#include "text/textout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hex4(const char *p, const char *e, unsigned *v) {
    if (e - p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

static void put_utf8(qw_strbuf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F)), u[2] = (char)(0x80 | (cp >> 6 & 0x3F)),
        u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    if (b) qw_strbuf_add(b, u, n);
}

/* p just past an opening quote: decodes into b (NULL: only skips) and
 * returns the position past the closing quote, or NULL if malformed. */
static const char *string_at(const char *p, const char *e, qw_strbuf *b) {
    while (p < e) {
        const char *q = p;
        while (q < e && *q != '"' && *q != '\\') q++;
        if (b && q > p) qw_strbuf_add(b, p, (size_t)(q - p));
        if (q >= e) return NULL;
        if (*q == '"') return q + 1;
        if (e - q < 2) return NULL;
        char c = q[1];
        p = q + 2;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            if (b) qw_strbuf_add(b, &out[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (c != 'u') return NULL;
        unsigned cp, lo;
        if (hex4(p, e, &cp)) return NULL;
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, e, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return NULL;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return NULL;
        }
        put_utf8(b, cp);
    }
    return NULL;
}

/* Skips one value; NULL if malformed. */
static const char *skip_value(const char *p, const char *e) {
    p = ws(p, e);
    if (p >= e) return NULL;
    if (*p == '"') return string_at(p + 1, e, NULL);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            if (*p == '"') {
                if (!(p = string_at(p + 1, e, NULL))) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
            p++;
        }
        return NULL;
    }
    while (p < e && !strchr(",}] \t\r\n", *p)) p++;
    return p;
}

bool qw_json_has_nul(const char *p, size_t len) {
    const char *e = p + len;
    for (; p < e; p++) { /* a backslash can only stand inside a string in JSON */
        if (*p != '\\') continue;
        unsigned v;
        if (e - p >= 6 && p[1] == 'u' && !hex4(p + 2, e, &v) && v == 0) return true;
        p++; /* the escaped character: "\\\\" must not start another escape */
    }
    return false;
}

char *qw_json_member_string(const char *body, size_t len, const char *key, size_t *n) {
    const char *p = ws(body, body + len), *e = body + len;
    size_t klen = strlen(key);
    if (p >= e || *p != '{') return NULL;
    p = ws(p + 1, e);
    while (p < e && *p == '"') {
        qw_strbuf name = {0};
        p = string_at(p + 1, e, &name);
        bool match = p && name.n == klen && (klen == 0 || !memcmp(name.p, key, klen));
        qw_strbuf_free(&name);
        if (!p || (p = ws(p, e)) >= e || *p != ':') return NULL;
        p = ws(p + 1, e);
        if (match) {
            if (p < e && *p == '[') p = ws(p + 1, e); /* ["text"]: its first element */
            if (p >= e || *p != '"') return NULL;
            qw_strbuf s = {0};
            qw_strbuf_add(&s, "", 0);
            if (!string_at(p + 1, e, &s)) {
                qw_strbuf_free(&s);
                return NULL;
            }
            *n = s.n;
            return s.p;
        }
        if (!(p = skip_value(p, e))) return NULL;
        p = ws(p, e);
        if (p < e && *p == ',') p = ws(p + 1, e);
    }
    return NULL;
}
