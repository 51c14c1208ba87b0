/* tool_calls.c — parses the tool calls a Qwen model writes at the end of its
 * reply into OpenAI's form (see include/qwisp/tool_calls.h).
 *
 * Strict on purpose: the OpenAI API promises a client that tool_calls hold a
 * known function and JSON arguments, so a reply that is almost a call is
 * given back as the text it is rather than guessed at.
 */
#include "qwisp/tool_calls.h"

#include "chat_render.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

static int bad(char *why, size_t n, const char *fmt, ...) {
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
    return s;
}

static bool starts(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* The tool named name in tools (its "function" object), or NULL. */
static const cJSON *find_tool(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!f) f = t;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return f;
    }
    return NULL;
}

static bool add_call(qw_tool_calls *out, char *name, char *args) {
    qw_tool_call_out *c = realloc(out->calls, (out->n + 1) * sizeof *c);
    if (!c || !name || !args) {
        if (c) out->calls = c;
        free(name);
        free(args);
        return false;
    }
    out->calls = c;
    out->calls[out->n++] = (qw_tool_call_out){name, args};
    return true;
}

/* Qwen3: {"name": …, "arguments": {…}} up to </tool_call>.  *end: past it. */
static int parse_json_call(const char *s, const cJSON *tools, qw_tool_calls *out, const char **end, char *why,
                           size_t wn) {
    const char *close = strstr(s, CLOSE);
    if (!close) return bad(why, wn, "a <tool_call> is not closed");
    cJSON *o = cJSON_ParseWithLength(s, (size_t)(close - s));
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return bad(why, wn, "a <tool_call> does not hold a JSON object");
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    int rc = 0;
    if (!cJSON_IsString(nm)) rc = bad(why, wn, "a tool call has no \"name\" string");
    else if (!find_tool(tools, nm->valuestring)) rc = bad(why, wn, "the tool call names an unknown function '%.60s'", nm->valuestring);
    else if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
        /* a string holding a JSON object is accepted as that object */
        cJSON *inner = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        if (!cJSON_IsObject(inner)) rc = bad(why, wn, "tool call '%.60s': \"arguments\" is not an object", nm->valuestring);
        else if (!add_call(out, strdup(nm->valuestring), cJSON_PrintUnformatted(inner))) rc = bad(why, wn, "out of memory");
        cJSON_Delete(inner);
    } else {
        char *a = args && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : strdup("{}");
        if (!add_call(out, strdup(nm->valuestring), a)) rc = bad(why, wn, "out of memory");
    }
    cJSON_Delete(o);
    *end = close + strlen(CLOSE);
    return rc;
}

/* A <parameter> value as JSON: see the header. */
static cJSON *param_value(const cJSON *fn, const char *pname, const char *v) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fn, "parameters"),
                                                          "properties");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(props, pname), "type");
    if (!(cJSON_IsString(type) && !strcmp(type->valuestring, "string"))) {
        cJSON *j = cJSON_Parse(v);
        if (j) return j;
    }
    return cJSON_CreateString(v);
}

/* Qwen3.5: <function=NAME>\n<parameter=P>\nV\n</parameter>\n…</function> then
 * </tool_call>. */
static int parse_xml_call(const char *s, const cJSON *tools, qw_tool_calls *out, const char **end, char *why,
                          size_t wn) {
    s = skip_ws(s);
    if (!starts(s, "<function=")) return bad(why, wn, "a <tool_call> does not open with <function=…>");
    s += strlen("<function=");
    const char *gt = strchr(s, '>');
    if (!gt || memchr(s, '\n', (size_t)(gt - s))) return bad(why, wn, "a <function= tag is not closed");
    char *name = dup_n(s, (size_t)(gt - s));
    if (!name) return bad(why, wn, "out of memory");
    const cJSON *fn = find_tool(tools, name);
    if (!fn) {
        bad(why, wn, "the tool call names an unknown function '%.60s'", name);
        free(name);
        return -1;
    }
    cJSON *args = cJSON_CreateObject();
    s = gt + 1;
    int rc = 0;
    for (;;) {
        s = skip_ws(s);
        if (starts(s, "</function>")) {
            s += strlen("</function>");
            break;
        }
        if (!starts(s, "<parameter=")) {
            rc = bad(why, wn, "tool call '%.60s': expected <parameter=…> or </function>", name);
            break;
        }
        s += strlen("<parameter=");
        const char *pg = strchr(s, '>');
        const char *pe = pg ? strstr(pg, "</parameter>") : NULL;
        if (!pg || !pe || memchr(s, '\n', (size_t)(pg - s))) {
            rc = bad(why, wn, "tool call '%.60s': a <parameter> is not closed", name);
            break;
        }
        char *pname = dup_n(s, (size_t)(pg - s));
        /* the template writes "<parameter=p>\n" value "\n</parameter>" */
        const char *v = pg + 1, *ve = pe;
        if (*v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        char *val = dup_n(v, (size_t)(ve - v));
        if (!pname || !val) {
            free(pname);
            free(val);
            rc = bad(why, wn, "out of memory");
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(args, pname)) {
            rc = bad(why, wn, "tool call '%.60s': parameter '%.60s' given twice", name, pname);
            free(pname);
            free(val);
            break;
        }
        cJSON_AddItemToObject(args, pname, param_value(fn, pname, val));
        free(pname);
        free(val);
        s = pe + strlen("</parameter>");
    }
    if (rc == 0) {
        s = skip_ws(s);
        if (!starts(s, CLOSE)) rc = bad(why, wn, "tool call '%.60s': </function> is not followed by </tool_call>", name);
        else *end = s + strlen(CLOSE);
    }
    if (rc == 0 && !add_call(out, name, cJSON_PrintUnformatted(args))) rc = bad(why, wn, "out of memory");
    else if (rc != 0) free(name);
    cJSON_Delete(args);
    return rc;
}

int qw_tool_calls_parse(qw_chat_family family, const char *text, const char *tools_json, qw_tool_calls *out,
                        char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    if (why && why_len) why[0] = 0;
    const char *first = strstr(text, OPEN);
    if (!first) return 0;
    if (family == QW_CHAT_CHATML) return bad(why, why_len, "this chat template has no tool-call syntax");
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    if (!cJSON_IsArray(tools)) {
        cJSON_Delete(tools);
        return bad(why, why_len, "the request has no tools");
    }
    int rc = 0;
    const char *s = first;
    while (rc == 0 && *(s = skip_ws(s))) {
        if (!starts(s, OPEN)) {
            rc = bad(why, why_len, "text after a tool call ('%.30s')", s);
            break;
        }
        s += strlen(OPEN);
        const char *end = s;
        rc = family == QW_CHAT_QWEN3 ? parse_json_call(s, tools, out, &end, why, why_len)
                                     : parse_xml_call(s, tools, out, &end, why, why_len);
        s = end;
    }
    cJSON_Delete(tools);
    if (rc == 0) {
        qw_sv c = qw_sv_trim((qw_sv){text, (size_t)(first - text)});
        out->content = dup_n(c.p, c.n);
        if (!out->content) rc = bad(why, why_len, "out of memory");
    }
    if (rc != 0) {
        qw_tool_calls_free(out);
        return -1;
    }
    return 1;
}

void qw_tool_calls_free(qw_tool_calls *tc) {
    for (size_t i = 0; i < tc->n; i++) {
        free(tc->calls[i].name);
        free(tc->calls[i].arguments);
    }
    free(tc->calls);
    free(tc->content);
    memset(tc, 0, sizeof *tc);
}

size_t qw_tool_calls_safe_prefix(const char *text, size_t n) {
    const size_t L = sizeof OPEN - 1;
    for (size_t i = 0; i < n; i++) {
        if (text[i] != '<') continue;
        size_t k = n - i < L ? n - i : L;
        if (!memcmp(text + i, OPEN, k)) return i; /* the tag, or a tail that may become it */
    }
    return n;
}
