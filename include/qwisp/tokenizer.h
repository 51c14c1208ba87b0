/* tokenizer.h — byte-level BPE (GPT-2 / Qwen2 family) built from a GGUF's
 * tokenizer.ggml.* metadata, plus the chat template renderer.
 *
 * Encoding: special tokens are matched first, longest first: CONTROL tokens
 * only when parse_special is true, USER_DEFINED tokens (e.g. Qwen3's <think>)
 * always, as llama.cpp does; the remaining text is
 * split by the model's pre-tokenizer regex (PCRE2 with Unicode properties), each
 * piece mapped to byte-level unicode and merged by BPE ranks.
 * Decoding: token -> raw bytes; the stream decoder holds incomplete UTF-8 at a
 * boundary until it completes.
 *
 *     qw_tokenizer *tok = qw_tokenizer_from_gguf(g, &err);
 *     size_t n; int32_t *ids = qw_tokenize(tok, "Hello", 5, true, &n);
 *     ...free(ids); qw_tokenizer_free(tok);
 *
 * A chat prompt is tokenized with special tokens parsed only in the template's
 * markup, never in message content (qw_chat_render_prompt +
 * qw_tokenize_segments).
 */
#ifndef QWISP_TOKENIZER_H
#define QWISP_TOKENIZER_H

#include "qwisp/base.h"
#include "qwisp/gguf.h"

typedef struct qw_tokenizer qw_tokenizer;

/* ggml token types (tokenizer.ggml.token_type). */
enum {
    QW_TOKEN_UNDEFINED = 0,
    QW_TOKEN_NORMAL = 1,
    QW_TOKEN_UNKNOWN = 2,
    QW_TOKEN_CONTROL = 3,
    QW_TOKEN_USER_DEFINED = 4,
    QW_TOKEN_UNUSED = 5,
    QW_TOKEN_BYTE = 6,
};

/* Everything the tokenizer is built from, independent of where it came from
 * (a GGUF's tokenizer.ggml.* keys, or Hugging Face tokenizer.json).  The
 * constructor copies what it keeps; the spec may be freed afterwards.
 *   tokens[i]   vocab text of id i: the byte-level (GPT-2 bytes_to_unicode) form
 *               for NORMAL/BYTE tokens, the raw text for CONTROL/USER_DEFINED.
 *   merges[r]   "left right" (byte-level forms, one space), rank = r.
 *   pre         pre-tokenizer: "qwen2" (also "deepseek-r1-qwen", "megrez"),
 *               "qwen35" (Qwen3.5/3.6: Qwen2's regex with combining marks
 *               \p{M} kept in letter runs), "gpt2" or "default" (both the
 *               GPT-2 regex).  NULL = "default". */
typedef struct qw_tokenizer_spec {
    const char *model;              /* must be "gpt2" (byte-level BPE); NULL = "gpt2" */
    const char *pre;
    int32_t n_tokens;
    const char *const *tokens;      /* [n_tokens] */
    const int32_t *token_types;     /* [n_tokens] QW_TOKEN_*; NULL = all NORMAL */
    int32_t n_merges;
    const char *const *merges;      /* [n_merges] */
    int32_t bos_id, eos_id, eot_id, pad_id; /* -1 = none */
    bool add_bos;
    const char *chat_template;      /* informational (HF loader fills it); may be NULL */
} qw_tokenizer_spec;

/* Builds a tokenizer from a spec: hash maps token text -> id and merge pair ->
 * rank, the special-token list (CONTROL/USER_DEFINED, longest first) and the
 * pre-tokenizer regex (PCRE2, JIT).  NULL + err on an unknown model/pre, an
 * empty vocab or an out-of-range special id. */
qw_tokenizer *qw_tokenizer_new(const qw_tokenizer_spec *spec, qw_error *err);

/* Builds a spec from Hugging Face files.  tokenizer_json_path is tokenizer.json
 * or the directory holding it; tokenizer_config_path may be NULL (then the
 * sibling tokenizer_config.json is used if present).  The vocab is ordered by
 * id, holes (and ids up to n_vocab_pad-1 when n_vocab_pad > the HF size) are
 * filled with "[PAD<id>]" UNUSED, as llama.cpp's converter does.  Token types
 * follow the converter: added tokens that are special or look special
 * ("<|...|>") -> CONTROL, other added tokens -> USER_DEFINED, the rest NORMAL.
 * bos/eos/pad ids come from tokenizer_config.json's bos_token/eos_token/
 * pad_token strings, add_bos from add_bos_token, chat_template is copied.
 * pre is detected from the pre_tokenizer ("qwen2" / "qwen35" for the Qwen2 /
 * Qwen3.5 Split regex, "gpt2" for a plain ByteLevel with use_regex).  Free with
 * qw_tokenizer_spec_free.  NULL + err on unreadable/unsupported input. */
qw_tokenizer_spec *qw_tokenizer_spec_from_hf_json(const char *tokenizer_json_path,
                                                  const char *tokenizer_config_path,
                                                  int32_t n_vocab_pad, qw_error *err);
/* Frees a spec returned by qw_tokenizer_spec_from_hf_json (and nothing else). */
void qw_tokenizer_spec_free(qw_tokenizer_spec *spec);

/* Builds the tokenizer from tokenizer.ggml.{model,pre,tokens,token_type,merges,
 * bos/eos/padding ids, add_bos_token}.  Supports model "gpt2" with pre
 * "qwen2", "qwen35" (and "default"/gpt2 regex as fallback).  NULL + err
 * otherwise. */
qw_tokenizer *qw_tokenizer_from_gguf(const qw_gguf *g, qw_error *err);
void qw_tokenizer_free(qw_tokenizer *t);

int32_t qw_tokenizer_n_vocab(const qw_tokenizer *t);
int32_t qw_tokenizer_bos(const qw_tokenizer *t); /* -1 if none */
int32_t qw_tokenizer_eos(const qw_tokenizer *t); /* -1 if none */
bool qw_tokenizer_add_bos(const qw_tokenizer *t);
int32_t qw_tokenizer_eot(const qw_tokenizer *t); /* -1 if none */
int32_t qw_tokenizer_pad(const qw_tokenizer *t); /* -1 if none */
/* Longest byte length any single token decodes to (sizes stream buffers). */
int qw_tokenizer_max_piece_len(const qw_tokenizer *t);
/* Id of a token whose vocab text is exactly s, or -1. */
int32_t qw_tokenizer_find(const qw_tokenizer *t, const char *s);
/* True for tokens that end generation: EOS, EOT, <|im_end|>, <|endoftext|>. */
bool qw_tokenizer_is_eog(const qw_tokenizer *t, int32_t id);
int qw_tokenizer_token_type(const qw_tokenizer *t, int32_t id);
/* Vocab text of a token (byte-level encoded form), NULL if out of range. */
const char *qw_tokenizer_piece(const qw_tokenizer *t, int32_t id);

/* Encodes text[len].  Adds BOS only if the model says so.  Returns a malloc'd
 * array (caller frees) and its length in *n_out; NULL only on OOM.  Invalid
 * UTF-8 is encoded byte-wise, never rejected. */
int32_t *qw_tokenize(const qw_tokenizer *t, const char *text, size_t len, bool parse_special,
                     size_t *n_out);

/* A byte range text[off, off + len) and who wrote it. */
typedef struct qw_text_seg {
    size_t off, len;
    bool markup; /* true: a template's own markup (special tokens are parsed);
                    false: content a user supplied (plain text) */
} qw_text_seg;

/* Encodes text[len] where special tokens count only in markup: a CONTROL (or
 * UNKNOWN) token's text becomes that token only where it lies wholly inside
 * one markup segment; anywhere else it is encoded as the plain text it is, so
 * a message saying "<|im_start|>system" cannot forge a turn.  USER_DEFINED
 * tokens (<think>, <tool_call>, …) are matched everywhere, as qw_tokenize
 * does with parse_special false (llama.cpp's treatment of user text).  segs
 * are in order and do not overlap; bytes outside every segment are plain;
 * n_segs 0 = all plain.  Pre-tokenization and BPE run over the whole text, so
 * when no content holds control-token text the ids equal
 * qw_tokenize(text, len, true, …).  Returns like qw_tokenize. */
int32_t *qw_tokenize_segments(const qw_tokenizer *t, const char *text, size_t len, const qw_text_seg *segs,
                              size_t n_segs, size_t *n_out);

/* Raw bytes of token id into buf (up to cap); returns the full byte length
 * (may exceed cap), or -1 for an invalid id.  Control tokens decode to their
 * text (e.g. "<|im_end|>"). */
int qw_token_to_bytes(const qw_tokenizer *t, int32_t id, char *buf, size_t cap);

/* Decodes ids into a malloc'd NUL-terminated string (invalid ids skipped). */
char *qw_detokenize(const qw_tokenizer *t, const int32_t *ids, size_t n);

/* Streaming decoder: feed tokens, get only complete UTF-8 out. */
typedef struct qw_detok_stream {
    char pending[8];
    int n_pending;
} qw_detok_stream;
/* Appends the token's bytes; writes the complete UTF-8 prefix to out (up to
 * cap, NUL-terminated) and returns its length; bytes of an incomplete sequence
 * are held for the next call.  Returns -1 for an invalid id.  Like snprintf,
 * a return value >= cap means out was truncated: a cap of
 * qw_tokenizer_max_piece_len(t) + 8 always suffices.  Bytes that can never
 * complete (stray continuation bytes, bad lead bytes) are passed through. */
int qw_detok_stream_push(qw_detok_stream *s, const qw_tokenizer *t, int32_t id, char *out,
                         size_t cap);
/* Flushes held bytes (invalid/incomplete at end of stream) as-is. */
int qw_detok_stream_flush(qw_detok_stream *s, char *out, size_t cap);

/* ---- chat template ---- */
/* An assistant message's tool call, as the OpenAI API carries it. */
typedef struct qw_chat_tool_call {
    const char *name;
    const char *arguments; /* JSON text of an object; NULL = none */
} qw_chat_tool_call;

typedef struct qw_chat_msg {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content;
    /* assistant only, both optional: */
    const char *reasoning_content;         /* NULL: the template takes a <think> block out of content */
    const qw_chat_tool_call *tool_calls;   /* [n_tool_calls] */
    size_t n_tool_calls;
} qw_chat_msg;

/* The template families qwisp renders (see chat_template.c). */
typedef enum qw_chat_family {
    QW_CHAT_CHATML = 0, /* plain <|im_start|>role\n…<|im_end|>\n */
    QW_CHAT_QWEN3 = 1,  /* Qwen3 (hybrid thinking, <tool_call>{json}</tool_call>) */
    QW_CHAT_QWEN35 = 2, /* Qwen3.5/3.6 (<think> opened, <function=…><parameter=…> calls) */
    QW_CHAT_QWEN3_CODER = 3, /* Qwen3-Coder (no thinking, XML tool list, <function=…> calls) */
} qw_chat_family;

typedef struct qw_chat_template_info {
    qw_chat_family family;
    const char *name;  /* "chatml", "qwen3", "qwen3.5", "qwen3-coder" */
    bool exact;        /* a template qwisp renders byte for byte (known fingerprint), or none at all */
    bool tools;        /* the renderer prints tool definitions and calls */
    char note[320];    /* when !exact: what qwisp does instead (a caller prints it once) */
} qw_chat_template_info;

/* Which renderer a template text gets.  Known texts (the Qwen3 and Qwen3.5
 * templates, by a hash of their bytes) are exact; a text with a known
 * family's markers renders as that family, with a note; any other ChatML
 * template renders as plain ChatML, with a note; anything else is an error
 * naming its family.  NULL / "" / "chatml": ChatML, exact. */
int qw_chat_template_identify(const char *tmpl, qw_chat_template_info *info, qw_error *err);
/* The fingerprint identify compares: qw_hash64 of the text without trailing
 * whitespace (printed by `qwisp template --info`). */
uint64_t qw_chat_template_hash(const char *tmpl);
/* The GGUF's tokenizer.chat_template, or NULL when it has none (or g is NULL). */
int qw_chat_template_text(const qw_gguf *g, const char **tmpl, qw_error *err);

typedef struct qw_chat_opts {
    bool add_generation_prompt;
    int enable_thinking;    /* -1: not given (the template's default), 0: false, 1: true */
    const char *tools_json; /* JSON array of tool definitions (OpenAI "tools"), or NULL */
    const char *prefill;    /* template-like text appended after the generation prompt (a
                               forced tool call's opening), parsed as markup; or NULL */
} qw_chat_opts;

/* Renders messages with the model's chat template (tokenizer.chat_template)
 * and, when add_generation_prompt, opens the assistant turn, with the
 * template's defaults (no tools, enable_thinking not given).  To tokenize
 * the result use qw_chat_render_prompt + qw_tokenize_segments, never
 * qw_tokenize(…, parse_special = true): that would turn control-token text
 * inside a message into real control tokens.  Which renderer a template gets
 * is qw_chat_template_identify's; a model without a template gets ChatML.
 * Returns malloc'd text, NULL + err if the template is of a family qwisp
 * does not render (or refuses the conversation, as Qwen3.5's does). */
char *qw_chat_render(const qw_gguf *g, const qw_chat_msg *msgs, size_t n, bool add_generation_prompt,
                     qw_error *err);
/* Same, from the template text itself (NULL or "" = ChatML; "chatml" names
 * it). */
char *qw_chat_render_template(const char *tmpl, const qw_chat_msg *msgs, size_t n,
                              bool add_generation_prompt, qw_error *err);

/* A rendered conversation: the prompt text and which bytes of it are the
 * template's markup and which the messages' roles and contents, for
 * qw_tokenize_segments(t, p.text, p.len, p.segs, p.n_segs, &n). */
typedef struct qw_chat_prompt {
    char *text;        /* NUL-terminated; the same bytes qw_chat_render returns */
    size_t len;
    qw_text_seg *segs; /* cover text in order, adjacent ones of the same kind merged */
    size_t n_segs;
} qw_chat_prompt;

/* Renders like qw_chat_render into *out (zeroed on error).  0, or -1 + err. */
int qw_chat_render_prompt(const qw_gguf *g, const qw_chat_msg *msgs, size_t n, bool add_generation_prompt,
                          qw_chat_prompt *out, qw_error *err);
/* Same from the template text (see qw_chat_render_template). */
int qw_chat_render_template_prompt(const char *tmpl, const qw_chat_msg *msgs, size_t n,
                                   bool add_generation_prompt, qw_chat_prompt *out, qw_error *err);
/* Renders with every option (thinking, tools).  Errors name what the
 * template refuses (e.g. "No user query found in messages.", from the
 * Qwen3.5 template).  0, or -1 + err with *out zeroed. */
int qw_chat_render_opts(const char *tmpl, const qw_chat_msg *msgs, size_t n, const qw_chat_opts *o,
                        qw_chat_prompt *out, qw_error *err);
/* Frees text and segs and zeroes *p (a zeroed prompt is fine). */
void qw_chat_prompt_free(qw_chat_prompt *p);

#endif
