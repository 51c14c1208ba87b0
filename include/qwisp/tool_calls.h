/* tool_calls.h — a model's tool-call syntax parsed out of its reply text.
 *
 *   Qwen3:   <tool_call>\n{"name": "f", "arguments": {…}}\n</tool_call>
 *   Qwen3.5, Qwen3-Coder: <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
 *            </function>\n</tool_call>
 *
 * One or more calls may follow the answer text; whitespace may separate them
 * and end the reply, nothing else.  Anything else (broken JSON, an unknown
 * function, text after a call, an unclosed tag) is not a tool call: the caller
 * returns the whole reply as plain content, and `why` says what was wrong.
 */
#ifndef QWISP_TOOL_CALLS_H
#define QWISP_TOOL_CALLS_H

#include "qwisp/tokenizer.h"

typedef struct qw_tool_call_out {
    char *name;
    char *arguments; /* JSON text of an object (OpenAI's function.arguments) */
} qw_tool_call_out;

typedef struct qw_tool_calls {
    char *content;          /* the text before the first call, whitespace-trimmed */
    qw_tool_call_out *calls;
    size_t n;
} qw_tool_calls;

/* Parses text (NUL-terminated) in family's syntax.  tools_json: the request's
 * tool definitions (OpenAI form, a JSON array): a call must name one of them,
 * and a Qwen3.5 <parameter> value becomes a string when its schema type is
 * "string", else the JSON it reads as (a number, true, an object…), else a
 * string.  Returns 1 with *out filled (n >= 1); 0 when the text holds no
 * "<tool_call>" (out zeroed); -1 when it holds one that does not parse (out
 * zeroed, why says what; the reply is then plain content). */
int qw_tool_calls_parse(qw_chat_family family, const char *text, const char *tools_json, qw_tool_calls *out,
                        char *why, size_t why_len);
void qw_tool_calls_free(qw_tool_calls *tc);

/* How many leading bytes of a reply being streamed may be sent as content:
 * everything before "<tool_call>", or before a tail that could still grow
 * into it. */
size_t qw_tool_calls_safe_prefix(const char *text, size_t n);

#endif
