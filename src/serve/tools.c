/* tools.c — tool calls between textout and the response (see tools.h).
 *
 * Streaming holds the content back from the first "<tool_call>" (or a tail
 * that may become one) to the end of the reply, then parses: valid calls go
 * out as delta.tool_calls chunks with finish_reason "tool_calls"; anything
 * else goes out as the content it is (malformed output is never an error).
 * Text before the calls streams as it comes.
 */
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *qw_tool_stream_take(const char *prefill, const qw_strbuf *content, size_t *sent, size_t *n) {
    *n = 0;
    if (prefill || !content->p) return NULL;
    size_t safe = qw_tool_calls_safe_prefix(content->p, content->n);
    if (safe <= *sent) return NULL;
    const char *p = content->p + *sent;
    *n = safe - *sent;
    *sent = safe;
    return p;
}

char *qw_tool_finish(const qw_oai_request *r, const qw_strbuf *content, size_t sent, qw_tool_calls *calls,
                     size_t *n, unsigned long long num) {
    qw_strbuf t = {0};
    size_t pre = r->prefill ? strlen(r->prefill) : 0;
    qw_strbuf_add(&t, r->prefill ? r->prefill : "", pre);
    qw_strbuf_add(&t, content->p ? content->p : "", content->n);
    qw_strbuf_add(&t, "", 1); /* NUL */
    char why[200];
    int rc = qw_tool_calls_parse(r->family, t.p, r->tools_json, calls, why, sizeof why);
    char *out;
    if (rc == 1) {
        if (!r->parallel_tool_calls)
            while (calls->n > 1) {
                calls->n--;
                free(calls->calls[calls->n].name);
                free(calls->calls[calls->n].arguments);
            }
        out = qw_xstrdup(sent ? "" : calls->content);
    } else {
        if (rc < 0) fprintf(stderr, "qwisp serve: #%llu reply is not a valid tool call (%s): returned as content\n", num, why);
        size_t from = r->prefill ? 0 : sent;
        out = qw_xstrdup(t.p + (from < t.n ? from : t.n - 1));
    }
    qw_strbuf_free(&t);
    *n = strlen(out);
    return out;
}
