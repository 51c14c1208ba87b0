/* gen.c — the generation endpoints: request body -> prompt tokens -> a job
 * on the execution path -> one JSON response, or an SSE stream of chunks.
 *
 * One `gen` object per request owns the parsed request, the job reference,
 * the text assembler (textout.c: stop strings, <think> split) and, when
 * streaming, the SSE bytes not yet handed to MHD.  Both modes run the same
 * pump: read new tokens from the job, push them through textout, ask the job
 * to stop once a stop string or end-of-generation token ends the text.
 *
 * Cancellation: while waiting for tokens the pump wakes every 100 ms and
 * peeks at the client's socket; a reset socket (or, when streaming, a failed
 * write, which makes MHD call the free callback) cancels the job, so the
 * execution path stops within one token and moves to the next request.
 * End-of-file alone is not a disconnect: HTTP lets a client half-close
 * (shutdown(SHUT_WR)) once its request is sent and still read the answer,
 * so a client that closed without a reset is noticed when its response is
 * written.  A stream that has had nothing to send for a second (a queue wait,
 * a long prefill) therefore sends an SSE comment line (": keep-alive", which
 * SSE readers skip): a closed client answers it with a reset, and the job is
 * cancelled then — during the prefill, which the path stops within one chunk.
 *
 * logprobs: the job records each token's (job.c, from the logits row it was
 * drawn from); the pump copies the records of the tokens textout consumed,
 * end-of-generation tokens left out (they are never shown), and each stream
 * chunk carries the records gathered since the previous one.
 * response_format: the compiled schema (openai.c) becomes the job's sampler
 * constraint (json_constraint.h) over the server's token-bytes table.
 *
 * A generation that fails answers 500 with the request number only; the
 * cause (which may name files on the server) goes to the log.
 * Every request ends with one log line on stderr:
 *   qwisp serve: #7 chat 200 prompt=23 prefill=812.0 tok/s gen=16 ttft=31 ms
 *   decode=95.2 tok/s queue=0 ms finish=stop
 */
#include "server.h"
#include "tools.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct gen {
    qw_server *s;
    struct MHD_Connection *conn;
    int fd;
    qw_endpoint ep;
    qw_oai_request rq;
    qw_textout out;
    qw_job *job;
    int32_t cursor;
    int32_t n_prompt;
    int32_t *toks; /* tokens textout consumed [n_toks], for return_tokens */
    int32_t n_toks, cap_toks;
    qw_token_logprobs *lps; /* [cap_toks] when the request asked for logprobs */
    int32_t n_lps, lps_sent;
    size_t lps_off;         /* completions: bytes of the tokens already sent (text_offset) */
    qw_strbuf sse;
    size_t sse_off;
    char id[48];
    long created;
    unsigned long long num;
    bool role_sent, finished, gone;
    double last_write;     /* streaming: when sse_reader last handed bytes to MHD */
    qw_job_result res;
    int32_t n_read;        /* tokens read from the job (the test reply's index) */
    bool tools;            /* the reply may end in tool calls (tools.c) */
    size_t content_sent;   /* with tools, streaming: content bytes sent so far */
    qw_tool_calls calls;   /* parsed at the end (n = 0: none, the reply is content) */
} gen;

/* Gone = the socket reports an error (a reset).  0 (end-of-file) is a
 * half-close, which HTTP allows: see the header. */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* The 500 a failed generation answers: no internal detail, which is logged. */
static void generation_failed(const gen *g, qw_oai_error *e) {
    fprintf(stderr, "qwisp serve: #%llu generation failed: %s\n", g->num, g->res.error);
    qw_oai_fail(e, 500, "server_error", "generation_failed", NULL,
                "generation failed (request #%llu); the server log has the cause", g->num);
}

static const char *finish_reason(const gen *g) {
    if (g->calls.n) return "tool_calls";
    if (g->out.stop_hit || g->out.eos_hit) return "stop";
    return g->res.finish == QW_FINISH_LENGTH ? "length" : "stop";
}

static void log_line(const gen *g, int status, const char *finish) {
    const qw_job_result *r = &g->res;
    double pf = r->prefill_s > 0 ? r->n_prompt / r->prefill_s : 0;
    double dc = r->decode_s > 0 && r->n_gen > 1 ? (r->n_gen - 1) / r->decode_s : 0;
    fprintf(stderr,
            "qwisp serve: #%llu %s%s %d prompt=%d prefill=%.1f tok/s gen=%d ttft=%.0f ms decode=%.1f tok/s "
            "queue=%.0f ms finish=%s\n",
            g->num, g->ep == QW_EP_CHAT ? "chat" : "completions", g->rq.stream ? " stream" : "", status,
            g->n_prompt, pf, g->n_toks, r->ttft_s * 1e3, dc, r->queue_s * 1e3, finish);
}

static void gen_free(gen *g) {
    if (!g) return;
    if (g->job) {
        if (!g->finished) qw_job_cancel(g->job);
        qw_job_release(g->job);
        atomic_fetch_sub(&g->s->metrics.in_flight, 1);
    }
    qw_textout_free(&g->out);
    qw_tool_calls_free(&g->calls);
    qw_oai_request_free(&g->rq);
    qw_strbuf_free(&g->sse);
    free(g->toks);
    free(g->lps);
    free(g);
}

/* Reads what the job produced (waiting up to timeout_s) into textout.
 * Returns true once the job has ended and everything was read. */
static bool pump(gen *g, double timeout_s) {
    int32_t buf[64];
    bool done = false;
    int32_t at = g->cursor;
    int k = qw_job_read(g->job, &g->cursor, buf, 64, timeout_s, &done);
    for (int i = 0; i < k; i++) {
        if (g->out.ended) break;
        if (g->s->test_reply) { /* tests: the scripted reply replaces the model's tokens, then an end */
            size_t j = (size_t)g->n_read++;
            int32_t eos = qw_tokenizer_eos(g->s->tok);
            buf[i] = j < g->s->n_test_reply ? g->s->test_reply[j] : eos >= 0 ? eos : buf[i];
        }
        if (g->n_toks < g->cap_toks) g->toks[g->n_toks++] = buf[i];
        if (g->lps && g->n_lps < g->cap_toks && (g->rq.ignore_eos || !qw_tokenizer_is_eog(g->s->tok, buf[i])))
            g->n_lps += qw_job_read_logprobs(g->job, at + i, 1, &g->lps[g->n_lps]);
        if (qw_textout_push(&g->out, buf[i])) {
            qw_job_stop(g->job);
            if (g->out.stop_hit) atomic_fetch_add(&g->s->metrics.stop_strings, 1);
        }
    }
    if (done) {
        qw_job_get_result(g->job, &g->res);
        if (!g->out.ended) qw_textout_flush(&g->out);
    }
    return done;
}

static qw_oai_reply make_reply(const gen *g, const char *finish) {
    return (qw_oai_reply){.id = g->id,
                          .created = g->created,
                          .model = g->s->model_id,
                          .finish = finish,
                          .n_prompt = g->n_prompt,
                          .n_gen = g->n_toks,
                          .tokens = g->toks,
                          .prefill_s = g->res.prefill_s,
                          .decode_s = g->res.decode_s,
                          .ttft_s = g->res.ttft_s,
                          .lps = g->lps,
                          .n_lps = g->n_lps,
                          .tok = g->s->tok};
}

/* A chunk's reply: the logprobs records not sent yet (then marked sent). */
static qw_oai_reply chunk_reply(gen *g, const char *finish) {
    qw_oai_reply rep = make_reply(g, finish);
    rep.lps = g->lps ? g->lps + g->lps_sent : NULL;
    rep.n_lps = g->n_lps - g->lps_sent;
    rep.text_offset = g->lps_off;
    char raw[512];
    for (int32_t i = g->lps_sent; i < g->n_lps; i++) {
        int n = qw_token_to_bytes(g->s->tok, g->lps[i].id, raw, sizeof raw);
        if (n > 0) g->lps_off += (size_t)n;
    }
    g->lps_sent = g->n_lps;
    return rep;
}

/* ---- streaming ---- */

/* Appends one chunk with the new content/reasoning, if any. */
static void emit_deltas(gen *g) {
    size_t nc, nr;
    const char *c;
    if (g->tools) /* hold back from a "<tool_call>" on: it may be a call (tools.c) */
        c = qw_tool_stream_take(g->rq.prefill, &g->out.content, &g->content_sent, &nc);
    else
        c = qw_textout_take_content(&g->out, &nc);
    const char *r = qw_textout_take_reasoning(&g->out, &nr);
    if (!nc && !nr && g->lps_sent == g->n_lps) return;
    /* the chunk builder reads NUL-terminated text; with tools, c[nc] is not
     * the end of the buffer (the rest is held back), so it gets a copy */
    char *held = g->tools && nc ? strndup(c, nc) : NULL;
    qw_oai_reply rep = chunk_reply(g, NULL);
    qw_oai_chunk_sse(&g->sse, &g->rq, &rep, false, nc ? (held ? held : c) : NULL, nr ? r : NULL);
    free(held);
}

static void emit_end(gen *g) {
    if (g->res.finish == QW_FINISH_ERROR) {
        qw_oai_error e;
        generation_failed(g, &e);
        char *js = qw_oai_error_json(&e);
        qw_strbuf_add(&g->sse, "data: ", 6);
        qw_strbuf_add(&g->sse, js, strlen(js));
        qw_strbuf_add(&g->sse, "\n\n", 2);
        free(js);
        log_line(g, 500, "error");
    } else {
        if (g->tools) {
            /* the held-back tail: tool calls, or (not a valid call) content */
            size_t nh;
            const char *held = qw_tool_finish(&g->rq, &g->out.content, g->content_sent, &g->calls, &nh, g->num);
            qw_oai_reply rep = make_reply(g, NULL);
            if (g->calls.n) qw_oai_tool_calls_sse(&g->sse, &g->rq, &rep, &g->calls);
            else if (nh) qw_oai_chunk_sse(&g->sse, &g->rq, &rep, false, held, NULL);
            free((char *)held);
        }
        const char *fin = finish_reason(g);
        qw_oai_reply rep = chunk_reply(g, fin);
        qw_oai_chunk_sse(&g->sse, &g->rq, &rep, false, g->rq.kind == QW_OAI_CHAT ? NULL : "", NULL);
        if (g->rq.include_usage) qw_oai_usage_sse(&g->sse, &g->rq, &rep);
        log_line(g, 200, fin);
    }
    qw_oai_done_sse(&g->sse);
    g->finished = true;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    (void)pos;
    for (;;) {
        if (g->sse_off < g->sse.n) {
            size_t n = g->sse.n - g->sse_off;
            if (n > max) n = max;
            memcpy(buf, g->sse.p + g->sse_off, n);
            g->sse_off += n;
            if (g->sse_off == g->sse.n) g->sse.n = g->sse_off = 0;
            g->last_write = qw_time_s();
            return (ssize_t)n;
        }
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!g->role_sent && g->rq.kind == QW_OAI_CHAT) {
            qw_oai_reply rep = make_reply(g, NULL);
            qw_oai_chunk_sse(&g->sse, &g->rq, &rep, true, "", NULL);
            g->role_sent = true;
            continue;
        }
        bool done = pump(g, 0.1);
        emit_deltas(g);
        if (done) emit_end(g);
        else if (g->sse.n == 0 && peer_gone(g->fd)) {
            g->gone = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (g->sse.n == 0 && qw_time_s() - g->last_write >= 1.0) {
            static const char ka[] = ": keep-alive\n\n";
            qw_strbuf_add(&g->sse, ka, sizeof ka - 1);
        }
    }
}

static void sse_free(void *cls) {
    gen *g = cls;
    if (!g->finished) {
        qw_job_cancel(g->job);
        atomic_fetch_add(&g->s->metrics.disconnects, 1);
        log_line(g, 200, "cancelled (client gone)");
    }
    gen_free(g);
}

/* ---- entry ---- */

static int32_t *prompt_ids(qw_server *s, const qw_oai_request *rq, size_t *n) {
    if (rq->prompt_ids) {
        *n = rq->n_prompt_ids;
        int32_t *ids = qw_xmalloc((rq->n_prompt_ids ? rq->n_prompt_ids : 1) * sizeof(int32_t));
        memcpy(ids, rq->prompt_ids, rq->n_prompt_ids * sizeof(int32_t));
        return ids;
    }
    if (rq->prompt_segs) /* chat: special tokens only in the template's markup, never in content */
        return qw_tokenize_segments(s->tok, rq->prompt_text, rq->prompt_len, rq->prompt_segs,
                                    rq->n_prompt_segs, n);
    return qw_tokenize(s->tok, rq->prompt_text, rq->prompt_len, true, n);
}

enum MHD_Result qw_gen_handle(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const char *body, size_t n) {
    qw_oai_error e;
    gen *g = calloc(1, sizeof *g);
    if (!g) return MHD_NO;
    g->s = s;
    g->conn = c;
    g->ep = ep;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    qw_oai_kind kind = ep == QW_EP_CHAT ? QW_OAI_CHAT : QW_OAI_COMPLETION;
    if (qw_oai_parse(kind, body, n, s->chat_template, s->model_id, s->model->hp.n_vocab, &g->rq, &e)) {
        free(g);
        return qw_http_send_error(s, c, ep, &e);
    }
    size_t np = 0;
    int32_t *ids = prompt_ids(s, &g->rq, &np);
    if (!ids || np == 0) {
        free(ids);
        gen_free(g);
        qw_oai_fail(&e, 400, "invalid_request_error", "empty_prompt", kind == QW_OAI_CHAT ? "messages" : "prompt",
                    "the prompt is empty");
        return qw_http_send_error(s, c, ep, &e);
    }
    if ((int64_t)np >= s->n_ctx) {
        free(ids);
        gen_free(g);
        qw_oai_fail(&e, 400, "invalid_request_error", "context_length_exceeded",
                    kind == QW_OAI_CHAT ? "messages" : "prompt",
                    "the prompt has %zu tokens; this server's context is %d tokens (prompt + completion)", np,
                    s->n_ctx);
        return qw_http_send_error(s, c, ep, &e);
    }
    int32_t room = s->n_ctx - (int32_t)np;
    int32_t max_tokens = g->rq.max_tokens < 0 || g->rq.max_tokens > room ? room : g->rq.max_tokens;
    g->n_prompt = (int32_t)np;
    g->cap_toks = max_tokens > 0 ? max_tokens : 1;
    g->toks = qw_xmalloc((size_t)g->cap_toks * sizeof(int32_t));
    if (g->rq.logprobs) g->lps = qw_xmalloc((size_t)g->cap_toks * sizeof *g->lps);
    qw_textout_init(&g->out, s->tok, (const char *const *)g->rq.stops, g->rq.n_stops, g->rq.think);
    g->out.ignore_eos = g->rq.ignore_eos;
    g->tools = g->rq.tools_json != NULL;
    qw_job_params jp = {.prompt = ids, .n_prompt = (int32_t)np, .max_tokens = max_tokens,
                        .ignore_eos = g->rq.ignore_eos || s->test_reply, .logprobs = g->rq.logprobs,
                        .top_logprobs = g->rq.top_logprobs, .sampler = g->rq.sp};
    /* (test reply: the model must not end before the script does; the script ends with an end token) */
    if (g->rq.schema) {
        jp.sampler.constraint = qw_json_constraint_new(s->json_vocab, g->rq.schema); /* takes the schema */
        g->rq.schema = NULL;
    }
    g->job = jp.sampler.constraint || !g->rq.response_format ? qw_job_new(&jp) : NULL;
    free(ids);
    if (!g->job && jp.sampler.constraint) jp.sampler.constraint->free(jp.sampler.constraint);
    if (!g->job) {
        gen_free(g);
        qw_oai_fail(&e, 500, "server_error", "out_of_memory", NULL, "out of memory creating the job");
        return qw_http_send_error(s, c, ep, &e);
    }
    atomic_fetch_add(&s->metrics.in_flight, 1);
    g->num = atomic_fetch_add(&s->next_id, 1) + 1;
    g->created = (long)time(NULL);
    snprintf(g->id, sizeof g->id, "%s-%016llx%04llx", kind == QW_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)qw_hash64(&g->num, sizeof g->num, (uint64_t)s->created), g->num & 0xffff);
    qw_error err = {0};
    if (qw_sched_submit(s->sched, g->job, &err)) {
        bool draining = !strncmp(err.msg, QW_SCHED_DRAINING, strlen(QW_SCHED_DRAINING));
        qw_oai_fail(&e, draining ? 503 : 429, draining ? "server_error" : "rate_limit_error",
                    draining ? "shutting_down" : "queue_full", NULL, "%s", err.msg);
        g->finished = true; /* never ran: nothing to cancel */
        gen_free(g);
        return qw_http_send_error(s, c, ep, &e);
    }

    if (g->rq.stream) {
        g->last_write = qw_time_s();
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, g, sse_free);
        if (!r) {
            gen_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r); /* MHD owns it now; sse_free runs when it is done */
        qw_metrics_request(&s->metrics, ep, 200);
        return ok;
    }

    while (!pump(g, 0.1)) {
        if (peer_gone(g->fd)) {
            qw_job_cancel(g->job);
            atomic_fetch_add(&s->metrics.disconnects, 1);
            log_line(g, 499, "cancelled (client gone)");
            gen_free(g);
            return MHD_NO;
        }
    }
    g->finished = true;
    enum MHD_Result ok;
    if (g->res.finish == QW_FINISH_ERROR) {
        generation_failed(g, &e);
        log_line(g, 500, "error");
        ok = qw_http_send_error(s, c, ep, &e);
    } else {
        char *held = NULL;
        if (g->tools) {
            size_t nh;
            held = (char *)qw_tool_finish(&g->rq, &g->out.content, 0, &g->calls, &nh, g->num);
        }
        const char *fin = finish_reason(g);
        qw_oai_reply rep = make_reply(g, fin);
        rep.tool_calls = g->calls.n ? &g->calls : NULL;
        char *js = qw_oai_response_json(&g->rq, &rep, held ? held : g->out.content.p ? g->out.content.p : "",
                                        g->out.reasoning.p ? g->out.reasoning.p : "");
        free(held);
        log_line(g, 200, fin);
        ok = qw_http_send(s, c, ep, 200, "application/json", js);
    }
    gen_free(g);
    return ok;
}
