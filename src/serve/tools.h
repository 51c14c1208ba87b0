/* tools.h — tool calls in a chat reply, between the text assembler and the
 * wire: what of the content may be streamed before a possible call, and the
 * call(s) parsed at the end (the parser is src/text/tool_calls.c).
 */
#ifndef QWISP_SERVE_TOOLS_H
#define QWISP_SERVE_TOOLS_H

#include "openai.h"
#include "qwisp/tool_calls.h"

/* Streaming: the content not yet sent that cannot be part of a tool call
 * (everything before "<tool_call>"); nothing when prefill (a forced call) is
 * set.  Advances *sent; *n = 0 when nothing new.  The text is p[0..*n), NOT
 * NUL-terminated there: the held-back rest follows it. */
const char *qw_tool_stream_take(const char *prefill, const qw_strbuf *content, size_t *sent, size_t *n);
/* At the end: parses prefill + content into *calls (n = 0: none, or not a
 * valid call, which is logged with request number num).  Returns the content
 * still to be given (malloc'd, *n bytes): the text before the calls when
 * sent == 0, or what was held back from bytes [sent, …) when no call parsed;
 * "" otherwise.  parallel_tool_calls false keeps the first call. */
char *qw_tool_finish(const qw_oai_request *r, const qw_strbuf *content, size_t sent, qw_tool_calls *calls,
                     size_t *n, unsigned long long num);

#endif
