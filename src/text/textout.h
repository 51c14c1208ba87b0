/* textout.h — turns a stream of generated token ids into the text a client
 * sees: `content` and `reasoning_content`, with stop strings cut.
 *
 * Pipeline per token: end-of-generation token -> end (its text is never
 * shown); otherwise token bytes -> streaming UTF-8 decode (incomplete
 * sequences held) -> invalid bytes replaced by U+FFFD (maximal subparts, as
 * WHATWG/Node decode) -> stop-string matcher (holds back a suffix that could
 * still become a stop string; a match ends the output before it) -> think
 * splitter (Qwen3: text between a leading <think> and </think> is reasoning;
 * whitespace around the tags is dropped; a partial tag is held back).
 *
 * Both parts accumulate in full; a streaming caller sends what is new since
 * the last take (qw_textout_take_*), a non-streaming caller reads the whole.
 * Used by serve (HTTP) and chat (terminal).
 */
#ifndef QWISP_TEXT_TEXTOUT_H
#define QWISP_TEXT_TEXTOUT_H

#include "qwisp/tokenizer.h"

typedef struct qw_strbuf {
    char *p;
    size_t n, cap;
} qw_strbuf;

void qw_strbuf_add(qw_strbuf *b, const char *s, size_t n);
void qw_strbuf_free(qw_strbuf *b);

typedef struct qw_textout {
    const qw_tokenizer *tok;
    qw_detok_stream ds;
    char **stops; /* owned copies */
    int n_stops;
    size_t max_stop;
    qw_strbuf hold;     /* stop matcher's held-back text */
    qw_strbuf taghold;  /* think splitter's held-back text */
    int think;          /* 0 = before content (a <think> may open), 1 = in reasoning, 2 = content */
    bool skip_ws;       /* drop leading whitespace of the current part */
    qw_strbuf content, reasoning;
    size_t content_taken, reasoning_taken;
    int32_t n_tokens;   /* tokens consumed, including the one that ended the output */
    bool ended;         /* a stop string or an end-of-generation token was seen */
    bool stop_hit;      /* ended by a stop string */
    bool eos_hit;       /* ended by an end-of-generation token */
    bool ignore_eos;    /* end-of-generation tokens are skipped, not an end */
} qw_textout;

typedef enum qw_think_mode {
    QW_THINK_NONE = 0,  /* no splitting: everything is content (raw completions) */
    QW_THINK_SPLIT = 1, /* a leading <think>…</think> is reasoning (chat) */
    QW_THINK_OPEN = 2,  /* the prompt already opened <think>: output starts as reasoning */
} qw_think_mode;

/* stops[n_stops] are copied (empty strings ignored). */
void qw_textout_init(qw_textout *o, const qw_tokenizer *tok, const char *const *stops, int n_stops,
                     qw_think_mode think);
void qw_textout_free(qw_textout *o);
/* Feeds one token; returns true when the output has ended (stop string or
 * end-of-generation).  Tokens after the end are ignored (not counted). */
bool qw_textout_push(qw_textout *o, int32_t id);
/* The generation ended without a stop: flush everything held back. */
void qw_textout_flush(qw_textout *o);
/* New text since the last take (pointer into the buffer, valid until the next
 * push); *n = 0 when nothing is new. */
const char *qw_textout_take_content(qw_textout *o, size_t *n);
const char *qw_textout_take_reasoning(qw_textout *o, size_t *n);

/* Replaces invalid UTF-8 in s[n] with U+FFFD (maximal subparts); appends to b. */
void qw_utf8_sanitize(qw_strbuf *b, const char *s, size_t n);

#endif
