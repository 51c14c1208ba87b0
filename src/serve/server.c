/* server.c — the server's lifecycle (serve.h): load the model and tokenizer,
 * start the execution path, start libmicrohttpd, count connections, and on
 * shutdown drain.
 *
 * Why libmicrohttpd: a small, long-maintained C HTTP/1.1 server (GNU),
 * packaged by Debian, with chunked responses driven by a callback (what SSE
 * needs) and a thread-per-connection mode in which a handler may block on its
 * job without stalling other clients.  Connections are cheap compared to a
 * forward pass, and the execution path, not the HTTP layer, bounds the work.
 *
 * Limits: MHD refuses connections beyond max_conns + 16 at accept, and a
 * client address's connections beyond max_conns_per_client (so one client
 * cannot take every slot); between max_conns and max_conns + 16, the handler
 * answers 429 with an error object, so a client sees why — except /health,
 * answered whatever the count.  Every connection is registered with the
 * deadline watchdog (conns.h), which closes the ones whose headers or body
 * drip in too slowly.  Request bodies map at most 4 x max_body together
 * (bodybuf.h).  An empty API key is refused rather than read as "no auth".
 * The listener starts before the model loads, so a load balancer or an
 * orchestrator can probe a replica that is still loading: /health answers
 * 200 "loading" (alive), /ready 503, generation 503 model_loading; `loaded`
 * is set only once everything is up.  Handlers check it before touching
 * the model, the tokenizer or the execution path.
 * Shutdown order: mark draining (new generation requests
 * get 503, /health says "draining"), stop accepting (quiesce), let the
 * execution path finish every admitted job, wait (bounded) until their
 * responses are sent, stop MHD (joins connection threads), free.
 */
#include "server.h"

#include "qwisp/options.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

qw_serve_config qw_serve_default_config(void) {
    return (qw_serve_config){.host = "127.0.0.1",
                             .port = 8080,
                             .n_threads = 1,
                             .n_ctx = 4096,
                             .max_conns = 64,
                             .max_conns_per_client = 16,
                             .header_timeout_s = 10,
                             .body_timeout_s = 60,
                             .max_queue = 64,
                             .max_body = (size_t)8 << 20};
}

/* MHD notifies a close before it closes the descriptor, so the watchdog
 * never sees a descriptor that may have been reused. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    qw_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&s->metrics.open_conns, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = ci ? qw_conns_add(&s->conns, ci->connect_fd) : NULL;
    } else {
        atomic_fetch_sub(&s->metrics.open_conns, 1);
        qw_conns_remove(&s->conns, *socket_ctx);
        *socket_ctx = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    qw_log(QW_LOG_INFO, "http: %s", buf);
}

/* "name" of the model for clients: the file name without .gguf. */
/* The chat template (the GGUF's, or --chat-template-file's) and what qwisp
 * makes of it, said once at start: exact, rendered as a family with a note,
 * or refused (then every chat request gets 400 naming it; /v1/completions
 * still works).  Plus the test-only reply file. */
static int load_chat_template(qw_server *s, const qw_serve_config *cfg, qw_error *err) {
    if (cfg->chat_template_file) {
        size_t n;
        s->chat_template_owned = qw_read_file(cfg->chat_template_file, 1 << 20, &n, err);
        if (!s->chat_template_owned) return -1;
        s->chat_template = s->chat_template_owned;
    } else if (qw_chat_template_text(s->model->gguf, &s->chat_template, err)) {
        return -1;
    }
    qw_chat_template_info info;
    qw_error terr = {0};
    if (qw_chat_template_identify(s->chat_template, &info, &terr))
        fprintf(stderr, "qwisp serve: warning: chat requests will be refused: %s\n", terr.msg);
    else if (!info.exact)
        fprintf(stderr, "qwisp serve: note: %s\n", info.note);
    else
        fprintf(stderr, "qwisp serve: chat template: %s%s\n", info.name,
                s->chat_template ? " (known template, rendered exactly)" : " (the model has none)");
    if (cfg->test_reply_file) {
        size_t n;
        char *text = qw_read_file(cfg->test_reply_file, 1 << 20, &n, err);
        if (!text) return -1;
        s->test_reply = qw_tokenize(s->tok, text, n, true, &s->n_test_reply);
        free(text);
        fprintf(stderr, "qwisp serve: TEST MODE: every reply is the %zu tokens of %s (the model still runs)\n",
                s->n_test_reply, cfg->test_reply_file);
    }
    return 0;
}

static void model_id_of(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = 0;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, qw_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc || !res) return qw_fail(err, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

qw_server *qw_server_start(const qw_serve_config *cfg, qw_error *err) {
    qw_server *s = calloc(1, sizeof *s);
    if (!s) {
        qw_fail(err, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->host = qw_xstrdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_path = qw_xstrdup(cfg->model_path);
    s->api_key = cfg->api_key ? qw_xstrdup(cfg->api_key) : NULL;
    s->cfg.host = s->host;
    s->cfg.model_path = s->model_path;
    s->cfg.api_key = s->api_key;
    qw_metrics_init(&s->metrics);
    s->created = (long)time(NULL);
    model_id_of(cfg->model_path, s->model_id, sizeof s->model_id);

    s->bodies.limit = 4 * (cfg->max_body + 65536); /* four bodies at the limit, with their page rounding */

    struct sockaddr_storage ss;
    if (s->api_key && !s->api_key[0]) {
        /* "" would compare equal to an empty Bearer token: say so instead of serving open or half-open */
        qw_fail(err, "the API key is empty; give a key, or none to serve without auth");
        goto fail;
    }
    if (resolve(s->host, cfg->port, &ss, err)) goto fail;
    if (qw_conns_start(&s->conns, cfg->header_timeout_s, cfg->body_timeout_s, &s->metrics.request_timeouts)) {
        qw_fail(err, "cannot start the connection watchdog thread");
        goto fail;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, qw_http_handler, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_conns + 16),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)(cfg->max_conns_per_client > 0 ? cfg->max_conns_per_client : 0),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_NOTIFY_COMPLETED, qw_http_completed, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_END);
    if (!s->d) {
        qw_fail(err, "cannot listen on %s:%d (address in use, or not allowed)", s->host, cfg->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di0 = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di0 ? di0->port : cfg->port;
    s->ready_max_queue = (int)qw_opt_int(QW_OPT_READY_MAX_QUEUE);
    s->model = qw_model_load(cfg->model_path, err);
    if (!s->model) goto fail;
    s->tok = qw_tokenizer_from_gguf(s->model->gguf, err);
    if (!s->tok) goto fail;
    if (load_chat_template(s, cfg, err)) goto fail;
    s->json_vocab = qw_json_vocab_new(s->tok);
    if (!s->json_vocab) {
        qw_fail(err, "out of memory building the token table for response_format");
        goto fail;
    }
    s->n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : s->model->hp.n_ctx_train;
    qw_sched_config sc = {.model = s->model, .tok = s->tok, .n_ctx = s->n_ctx, .n_threads = cfg->n_threads,
                          .max_queue = cfg->max_queue};
    s->sched = cfg->lanes > 0 ? qw_sched_lanes_new(&sc, cfg->lanes, err) : qw_sched_serialize_new(&sc, err);
    if (!s->sched) goto fail;

    atomic_store(&s->loaded, true);
    return s;
fail:
    qw_server_shutdown(s);
    return NULL;
}

int qw_server_port(const qw_server *s) { return s->port; }
const char *qw_server_model_id(const qw_server *s) { return s->model_id; }

void qw_server_shutdown(qw_server *s) {
    if (!s) return;
    atomic_store(&s->draining, true);
    if (s->d) {
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    if (s->sched) qw_sched_drain(s->sched);
    /* Jobs are done; give their responses up to 10 s to reach the clients. */
    for (int i = 0; i < 1000 && atomic_load(&s->metrics.in_flight) > 0; i++) usleep(10000);
    if (s->d) MHD_stop_daemon(s->d);
    qw_conns_stop(&s->conns);
    qw_sched_free(s->sched);
    qw_json_vocab_free(s->json_vocab);
    qw_tokenizer_free(s->tok);
    qw_model_free(s->model);
    free(s->chat_template_owned);
    free(s->test_reply);
    free(s->host);
    free(s->model_path);
    free(s->api_key);
    free(s);
}
