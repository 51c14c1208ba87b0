/* chat_render.h — what the chat template renderers share (internal to
 * src/text): the prompt being built, markup vs content, and the string
 * helpers the Qwen templates use, with Python's semantics.
 */
#ifndef QWISP_TEXT_CHAT_RENDER_H
#define QWISP_TEXT_CHAT_RENDER_H

#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <string.h>

typedef struct qw_chat_buf {
    qw_chat_prompt p;
    size_t cap, seg_cap;
    bool oom;
} qw_chat_buf;

/* Appends s[n]: markup (the template's own text: special tokens parsed) or
 * content (anything a caller supplied: plain text). */
void qw_cb_put(qw_chat_buf *b, const char *s, size_t n, bool markup);
#define QW_CB_MARK(b, lit) qw_cb_put((b), (lit), sizeof(lit) - 1, true)
static inline void qw_cb_text(qw_chat_buf *b, const char *s) { qw_cb_put(b, s, strlen(s), false); }

/* A view of a string: the templates slice and strip without copying. */
typedef struct qw_sv {
    const char *p;
    size_t n;
} qw_sv;
static inline qw_sv qw_sv_of(const char *s) { return (qw_sv){s ? s : "", s ? strlen(s) : 0}; }
static inline void qw_cb_sv(qw_chat_buf *b, qw_sv s) { qw_cb_put(b, s.p, s.n, false); }

/* Python str.strip(chars) / lstrip / rstrip. */
qw_sv qw_sv_strip(qw_sv s, const char *chars, bool left, bool right);
/* Jinja's |trim (str.strip(): Unicode whitespace). */
qw_sv qw_sv_trim(qw_sv s);
bool qw_sv_has(qw_sv s, const char *needle);
bool qw_sv_starts(qw_sv s, const char *pre);
bool qw_sv_ends(qw_sv s, const char *suf);
/* s.split(sep)[0] and s.split(sep)[-1]. */
qw_sv qw_sv_split_first(qw_sv s, const char *sep);
qw_sv qw_sv_split_last(qw_sv s, const char *sep);

/* The renderers; tools is the parsed "tools" array or NULL. */
int qw_chat_render_qwen3(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                         const cJSON *tools, qw_error *err);
int qw_chat_render_qwen35(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                          const cJSON *tools, qw_error *err);
int qw_chat_render_qwen3_coder(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                               const cJSON *tools, qw_error *err);
/* One call's "<parameter=k>\nv\n</parameter>\n" lines + "</function>\n</tool_call>"
 * after "<function=NAME>\n" (Qwen3.5 and Qwen3-Coder print calls alike). */
int qw_chat_put_xml_call(qw_chat_buf *b, size_t i, const qw_chat_tool_call *tc, qw_error *err);

#endif
