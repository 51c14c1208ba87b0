/* server.h — internals shared by the serve/ files: the server object and
 * the entry points between them.
 *   server.c  lifecycle: load the model, start the execution path and the
 *             libmicrohttpd daemon, connection accounting, drain + stop;
 *   http.c    the request handler: body intake, limits, auth, routing, the
 *             small endpoints (/health, /ready, /v1/models, /metrics), error replies;
 *   gen.c     the two generation endpoints: prompt -> job -> JSON or SSE;
 *   conns.c   connection phases and the header/body deadline watchdog;
 *   bodybuf.c request bodies (own mappings under a byte budget).
 */
#ifndef QWISP_SERVE_SERVER_H
#define QWISP_SERVE_SERVER_H

#include "bodybuf.h"
#include "conns.h"
#include "metrics.h"
#include "openai.h"
#include "qwisp/model.h"
#include "qwisp/sched.h"
#include "qwisp/serve.h"
#include "qwisp/tokenizer.h"

#include <microhttpd.h>
#include <stdatomic.h>

struct qw_server {
    qw_serve_config cfg;
    char *host, *api_key, *model_path; /* owned copies */
    qw_model *model;
    qw_tokenizer *tok;
    qw_json_vocab *json_vocab; /* every token's bytes, for response_format constraints */
    qw_sched *sched;
    char model_id[256];
    long created;
    int port;
    int32_t n_ctx;
    struct MHD_Daemon *d;
    atomic_bool draining;
    atomic_bool loaded;       /* model, tokenizer and execution path are up (set last) */
    int ready_max_queue;      /* QWISP_READY_MAX_QUEUE: /ready says 503 above this many queued; 0 = off */
    atomic_ullong next_id;
    qw_metrics metrics;
    qw_conns conns;          /* open connections' phases + the deadline watchdog */
    qw_body_budget bodies;   /* what all request bodies in flight may map */
    const char *chat_template;   /* the template text (GGUF's or --chat-template-file's); NULL: none */
    char *chat_template_owned;   /* read from --chat-template-file */
    int32_t *test_reply;         /* test_reply_file's tokens [n_test_reply], or NULL */
    size_t n_test_reply;
};

/* One HTTP request's state between the handler's calls (MHD's req_cls). */
typedef struct qw_http_req {
    qw_bodybuf body;  /* unmapped in qw_http_completed */
    size_t announced; /* Content-Length, 0 if none */
    bool too_big;     /* over --max-body: the rest is read and dropped */
    bool no_room;     /* the server's body budget was full: read and dropped */
    double t0;
    qw_conn *conn;    /* the connection's watchdog entry (NULL: unwatched) */
} qw_http_req;

/* http.c */
enum MHD_Result qw_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload, size_t *upload_size, void **req_cls);
void qw_http_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe);
/* Queues a response whose body (malloc'd, taken) is JSON/text; counts it. */
enum MHD_Result qw_http_send(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, int status,
                             const char *ctype, char *body);
enum MHD_Result qw_http_send_error(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const qw_oai_error *e);

/* chat_page.c: src/serve/chat.html, NUL-terminated. */
extern const char qw_chat_page_html[];

/* gen.c: POST /v1/chat/completions and /v1/completions with the full body. */
enum MHD_Result qw_gen_handle(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const char *body, size_t n);

#endif
