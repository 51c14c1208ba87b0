/* serve.h — the OpenAI-compatible HTTP server (`qwisp serve`).
 *
 * One model, one execution path (serialize by default; lanes when QWISP_LANES
 * is set), HTTP on libmicrohttpd with a thread per connection.  Endpoints:
 * POST /v1/chat/completions, POST /v1/completions (both with SSE streaming),
 * GET /v1/models, GET /health, GET /ready, GET /metrics (Prometheus text).  docs/serve.md
 * has the details; src/serve/http.c the design.
 *
 *     qw_serve_config cfg = qw_serve_default_config();
 *     cfg.model_path = "m.gguf";
 *     qw_server *s = qw_server_start(&cfg, &err);   // listening when it returns
 *     ...wait for a signal...
 *     qw_server_shutdown(s);                        // drain in-flight requests, stop, free
 *
 * The library never installs signal handlers; the caller (cli/cmd_serve.c)
 * waits for SIGINT/SIGTERM and calls qw_server_shutdown.
 */
#ifndef QWISP_SERVE_H
#define QWISP_SERVE_H

#include "qwisp/base.h"

typedef struct qw_serve_config {
    const char *model_path;
    const char *host;   /* "127.0.0.1" by default; "0.0.0.0"/"::" widen on purpose */
    int port;           /* 0 = any free port (see qw_server_port) */
    int n_threads;      /* compute threads */
    int32_t n_ctx;      /* context per sequence */
    int max_conns;      /* open connections beyond this get 429 (/health excepted) */
    int max_conns_per_client; /* connections one client address may hold; more are closed at accept */
    double header_timeout_s;  /* a request's headers must arrive within this (s) of the connection
                                 opening or the previous response ending; else 408 and closed */
    double body_timeout_s;    /* its body within this (s) of its headers; else 408 and closed */
    int max_queue;      /* requests waiting beyond the running one get 429 */
    size_t max_body;    /* request bodies beyond this get 413 */
    const char *api_key; /* NULL = no auth; else Bearer KEY on all but /health ("" is refused) */
    int lanes;          /* 0 = serialize path; B > 0 = lanes path with B lanes */
    const char *chat_template_file; /* NULL: the GGUF's tokenizer.chat_template */
    const char *test_reply_file;    /* tests only: every reply's tokens are this file's text
                                       (tokenized with special tokens), the model still runs */
} qw_serve_config;

qw_serve_config qw_serve_default_config(void);

typedef struct qw_server qw_server;

/* Loads the model, starts the execution path and the listener.  NULL + err
 * (model not loadable, port taken, lanes requested, …). */
qw_server *qw_server_start(const qw_serve_config *cfg, qw_error *err);
/* The bound port (useful with port 0). */
int qw_server_port(const qw_server *s);
const char *qw_server_model_id(const qw_server *s);
/* Stops accepting, lets every admitted request finish and its response be
 * sent (bounded wait), stops the listener, frees everything.  NULL-safe. */
void qw_server_shutdown(qw_server *s);

#endif
