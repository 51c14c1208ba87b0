/* openai.h — the OpenAI API's wire format: request bodies parsed and checked
 * into qw_oai_request, responses, stream chunks and error objects built as
 * JSON (cJSON).  Pure functions of their inputs: no sockets, no model
 * forward, so they are unit-testable and fuzzable on their own.
 */
#ifndef QWISP_SERVE_OPENAI_H
#define QWISP_SERVE_OPENAI_H

#include "qwisp/gguf.h"
#include "qwisp/json_constraint.h"
#include "qwisp/sampler.h"
#include "qwisp/tokenizer.h"
#include "text/textout.h"

#include <cjson/cJSON.h>

/* An OpenAI-style error: {"error":{"message","type","param","code"}}. */
typedef struct qw_oai_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", "authentication_error", "server_error", … */
    const char *code; /* machine-readable, or NULL */
    char param[64];   /* the offending field, or "" */
    char message[400];
} qw_oai_error;

/* Fills e and returns -1. */
int qw_oai_fail(qw_oai_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* malloc'd JSON text of the error object. */
char *qw_oai_error_json(const qw_oai_error *e);

typedef enum qw_oai_kind { QW_OAI_CHAT = 0, QW_OAI_COMPLETION = 1 } qw_oai_kind;

#define QW_OAI_MAX_STOPS 16

typedef enum qw_tool_choice { QW_TOOL_AUTO = 0, QW_TOOL_NONE, QW_TOOL_REQUIRED, QW_TOOL_NAMED } qw_tool_choice;

typedef struct qw_oai_request {
    qw_oai_kind kind;
    bool stream, include_usage, return_tokens, ignore_eos;
    char *prompt_text;     /* chat: the rendered template; completion: the prompt (NULL with ids) */
    size_t prompt_len;     /* bytes of prompt_text (a completion prompt may hold NULs) */
    qw_text_seg *prompt_segs; /* chat: template markup vs message content (specials only in markup) */
    size_t n_prompt_segs;
    int32_t *prompt_ids;   /* completion given as token ids */
    size_t n_prompt_ids;
    int32_t max_tokens;    /* -1: until the context is full */
    qw_sampler_params sp;
    char *stops[QW_OAI_MAX_STOPS];
    int n_stops;
    qw_think_mode think;
    bool logprobs;           /* chat: logprobs true; completions: logprobs given (>= 0) */
    int32_t top_logprobs;    /* chat: top_logprobs; completions: the logprobs number */
    int response_format;     /* QW_OAI_RF_* */
    qw_json_schema *schema;  /* json_object / json_schema: the compiled constraint (owned; gen.c takes it) */
    /* chat: tools (chat_req.c) */
    char *tools_json;         /* the request's tools, JSON text; NULL: none, or tool_choice "none" */
    qw_tool_choice tool_choice;
    char *tool_name;          /* QW_TOOL_NAMED: the function */
    bool parallel_tool_calls; /* false: only the first call is returned */
    qw_chat_family family;    /* the template's family: the tool-call syntax to parse */
    char *prefill;            /* forced tool call: what the prompt made the reply start with */
} qw_oai_request;

enum { QW_OAI_RF_TEXT = 0, QW_OAI_RF_JSON_OBJECT, QW_OAI_RF_JSON_SCHEMA };

/* Parses a request body.  model_id: the one model served (a request naming
 * another gets 404 model_not_found; no "model" is accepted).  tmpl: the chat
 * template text (NULL: ChatML).  n_vocab bounds token-id prompts.
 * 0, or -1 + e (status 400/404). */
int qw_oai_parse(qw_oai_kind kind, const char *body, size_t len, const char *tmpl, const char *model_id,
                 int32_t n_vocab, qw_oai_request *r, qw_oai_error *e);
/* chat_req.c: a chat request's messages, tools, tool_choice,
 * parallel_tool_calls and chat_template_kwargs.enable_thinking, rendered
 * into r->prompt_text / prompt_segs / think.  0, or -1 + e (400). */
int qw_oai_parse_chat(const cJSON *root, const char *tmpl, qw_oai_request *r, qw_oai_error *e);
/* The request and message fields qw_oai_parse_chat reads (NULL-terminated). */
extern const char *const qw_oai_chat_fields[];
extern const char *const qw_oai_message_fields[];
void qw_oai_request_free(qw_oai_request *r);

/* What a finished (or streaming) response reports. */
typedef struct qw_oai_reply {
    const char *id;    /* "chatcmpl-…" / "cmpl-…" */
    long created;
    const char *model;
    const char *finish; /* "stop" | "length" | NULL (not finished) */
    int32_t n_prompt, n_gen;
    const int32_t *tokens; /* [n_gen] when return_tokens */
    const struct qw_tool_calls *tool_calls; /* chat: calls parsed from the reply, or NULL */
    double prefill_s, decode_s, ttft_s;
    /* logprobs (when the request asked): the records of the tokens this
     * response (or chunk) covers, tok to name them, and (completions) the
     * byte offset of the first one in the completion text */
    const qw_token_logprobs *lps;
    int32_t n_lps;
    const qw_tokenizer *tok;
    size_t text_offset;
} qw_oai_reply;

/* The whole non-streaming response (chat.completion / text_completion). */
char *qw_oai_response_json(const qw_oai_request *r, const qw_oai_reply *rep, const char *content,
                           const char *reasoning);
/* One stream event, "data: {…}\n\n", appended to out.  role: include
 * delta.role (first chat chunk).  content/reasoning may be NULL. */
void qw_oai_chunk_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep, bool role,
                      const char *content, const char *reasoning);
/* The tool calls as delta.tool_calls chunks (per call: id, type and name
 * with empty arguments, then the arguments), as OpenAI streams them. */
void qw_oai_tool_calls_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep,
                           const struct qw_tool_calls *tc);
/* The usage-only chunk (stream_options.include_usage) and "data: [DONE]". */
void qw_oai_usage_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep);
void qw_oai_done_sse(qw_strbuf *out);
/* GET /v1/models. */
char *qw_oai_models_json(const char *model_id, long created);

#endif
