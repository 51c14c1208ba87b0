/* http.c — the libmicrohttpd request handler: body intake with a size
 * limit, the connection limit, bearer auth, routing and the small endpoints.
 *
 * MHD calls the handler several times per request: first with no body (we
 * allocate the request state and may refuse at once: a method that is not
 * an HTTP token, too many connections, a Content-Length over the limit, bad
 * auth — refusing before the body is read saves reading it), then once per
 * body piece (appended to the request's body buffer, or dropped once over
 * the limit or the server's body budget, so memory stays bounded even for
 * chunked uploads without a length), then a last time to answer.  Every
 * refusal is an OpenAI-style error object; the server keeps serving.
 * The body buffer is unmapped in qw_http_completed, whatever way the request
 * ended (bodybuf.h says why bodies are not pool buffers).
 *
 * Each call also moves the connection's watchdog phase (conns.h): headers
 * in -> BODY, answering -> BUSY, response done -> HEADERS for the next
 * request.  /health and /ready skip the connection-count refusal and the
 * API key: a load balancer or operator must see the server alive precisely
 * when every slot is taken.  /health says alive (200 "ok", or "loading"
 * while the model loads; 503 only when draining); /ready says whether to
 * send work: 503 while loading, draining, or with more requests queued than
 * QWISP_READY_MAX_QUEUE.  While loading, nothing that needs the model runs
 * (503 model_loading).
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum MHD_Result qw_http_send(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, int status,
                             const char *ctype, char *body) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 429 || status == 413) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    qw_metrics_request(&s->metrics, ep, status);
    return ok;
}

enum MHD_Result qw_http_send_error(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const qw_oai_error *e) {
    return qw_http_send(s, c, ep, e->status, "application/json", qw_oai_error_json(e));
}

static qw_endpoint route(const char *url) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return QW_EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return QW_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return QW_EP_MODELS;
    if (!strcmp(url, "/health")) return QW_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return QW_EP_METRICS;
    if (!strcmp(url, "/ready")) return QW_EP_READY;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return QW_EP_PAGE;
    return QW_EP_OTHER;
}

/* Constant-time comparison of the Authorization header with "Bearer KEY".
 * The scheme name is case-insensitive (RFC 7235 §2.1: "bearer" is Bearer);
 * the key is not. */
static bool auth_ok(const qw_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)s->api_key[i] ^ (unsigned char)(i < a ? h[i] : 0);
    return diff == 0;
}

/* What /ready answers: NULL = ready, else why not; queued/running filled. */
static const char *not_ready(qw_server *s, int *queued, int *running) {
    *queued = *running = 0;
    if (!atomic_load(&s->loaded)) return "loading";
    if (atomic_load(&s->draining)) return "draining";
    qw_sched_stats st;
    qw_sched_get_stats(s->sched, &st);
    *queued = st.queued;
    *running = st.running;
    if (s->ready_max_queue > 0 && st.queued > s->ready_max_queue) return "busy";
    return NULL;
}

static enum MHD_Result small_endpoint(qw_server *s, struct MHD_Connection *c, qw_endpoint ep) {
    if (ep == QW_EP_PAGE)
        return qw_http_send(s, c, ep, 200, "text/html; charset=utf-8", qw_xstrdup(qw_chat_page_html));
    if (ep == QW_EP_HEALTH) {
        bool dr = atomic_load(&s->draining);
        return qw_http_send(s, c, ep, dr ? 503 : 200, "application/json",
                            qw_xstrdup(dr ? "{\"status\":\"draining\"}"
                                          : atomic_load(&s->loaded) ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}"));
    }
    if (ep == QW_EP_READY) {
        int q, r;
        const char *why = not_ready(s, &q, &r);
        char buf[160];
        snprintf(buf, sizeof buf, "{\"status\":\"%s\",\"queued\":%d,\"running\":%d,\"max_queue\":%d}",
                 why ? why : "ready", q, r, s->ready_max_queue);
        return qw_http_send(s, c, ep, why ? 503 : 200, "application/json", qw_xstrdup(buf));
    }
    if (ep == QW_EP_METRICS) {
        int q, r;
        bool ready = !not_ready(s, &q, &r);
        qw_strbuf b = {0};
        bool loaded = atomic_load(&s->loaded);
        qw_metrics_render(&s->metrics, loaded ? s->sched : NULL, loaded ? s->sched->ops->name : "loading", ready, &b);
        return qw_http_send(s, c, ep, 200, "text/plain; version=0.0.4; charset=utf-8", b.p);
    }
    if (!atomic_load(&s->loaded)) {
        qw_oai_error e;
        qw_oai_fail(&e, 503, "server_error", "model_loading", NULL, "the model is still loading; retry shortly");
        return qw_http_send_error(s, c, ep, &e);
    }
    return qw_http_send(s, c, ep, 200, "application/json", qw_oai_models_json(s->model_id, s->created));
}

/* An HTTP method is a token (RFC 9110 §5.6.2): libmicrohttpd passes on
 * whatever came before the first space, binary bytes included. */
static bool method_ok(const char *m) {
    if (!*m) return false;
    for (; *m; m++)
        if (!((*m >= 'A' && *m <= 'Z') || (*m >= 'a' && *m <= 'z') || (*m >= '0' && *m <= '9') ||
              strchr("!#$%&'*+-.^_`|~", *m)))
            return false;
    return true;
}

/* First call: refusals that do not need the body. */
static enum MHD_Result first_call(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const char *method,
                                  qw_http_req *r) {
    qw_oai_error e;
    if (!method_ok(method)) {
        qw_oai_fail(&e, 400, "invalid_request_error", "bad_request", NULL, "the request line is not HTTP");
        return qw_http_send_error(s, c, ep, &e);
    }
    bool probe = ep == QW_EP_HEALTH || ep == QW_EP_READY;
    if (!probe && atomic_load(&s->metrics.open_conns) > s->cfg.max_conns) {
        qw_oai_fail(&e, 429, "rate_limit_error", "too_many_connections", NULL,
                    "too many concurrent connections (limit %d); retry later", s->cfg.max_conns);
        return qw_http_send_error(s, c, ep, &e);
    }
    /* the page holds no data: it asks for the key when the API answers 401 */
    if (!probe && ep != QW_EP_PAGE && !auth_ok(s, c)) {
        qw_oai_fail(&e, 401, "authentication_error", "invalid_api_key", NULL,
                    "missing or wrong API key (send Authorization: Bearer KEY)");
        return qw_http_send_error(s, c, ep, &e);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
        qw_oai_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                    "request body of %.20s bytes exceeds the limit of %zu bytes", cl, s->cfg.max_body);
        return qw_http_send_error(s, c, ep, &e);
    }
    r->announced = cl ? (size_t)strtoull(cl, NULL, 10) : 0;
    return MHD_YES;
}

static enum MHD_Result answer(qw_server *s, struct MHD_Connection *c, qw_endpoint ep, const char *url,
                              const char *method, qw_http_req *r) {
    qw_oai_error e;
    if (r->too_big) {
        qw_oai_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                    "request body exceeds the limit of %zu bytes", s->cfg.max_body);
        return qw_http_send_error(s, c, ep, &e);
    }
    if (r->no_room) {
        qw_oai_fail(&e, 429, "rate_limit_error", "server_busy", NULL,
                    "request bodies in flight already use the server's limit of %zu bytes; retry later",
                    s->bodies.limit);
        return qw_http_send_error(s, c, ep, &e);
    }
    bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (ep == QW_EP_OTHER) {
        qw_oai_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: %s %s", method, url);
        return qw_http_send_error(s, c, ep, &e);
    }
    bool gen = ep == QW_EP_CHAT || ep == QW_EP_COMPLETIONS;
    if ((gen && !post) || (!gen && !get)) {
        qw_oai_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s",
                    method, url);
        return qw_http_send_error(s, c, ep, &e);
    }
    if (!gen) return small_endpoint(s, c, ep);
    if (atomic_load(&s->draining)) {
        qw_oai_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return qw_http_send_error(s, c, ep, &e);
    }
    if (!atomic_load(&s->loaded)) {
        qw_oai_fail(&e, 503, "server_error", "model_loading", NULL, "the model is still loading; retry shortly");
        return qw_http_send_error(s, c, ep, &e);
    }
    return qw_gen_handle(s, c, ep, r->body.p ? r->body.p : "", r->body.n);
}

static qw_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

enum MHD_Result qw_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload, size_t *upload_size, void **req_cls) {
    qw_server *s = cls;
    qw_endpoint ep = route(url);
    qw_http_req *r = *req_cls;
    (void)version;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->t0 = qw_time_s();
        r->conn = conn_of(c);
        *req_cls = r;
        /* false: the watchdog ended the connection a moment ago; it has answered 408 */
        if (!qw_conns_set_phase(&s->conns, r->conn, QW_CONN_BODY)) return MHD_NO;
        return first_call(s, c, ep, method, r);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_big || r->no_room) return MHD_YES; /* keep reading, drop the bytes */
        if (r->body.n + n > s->cfg.max_body) {
            r->too_big = true;
            qw_bodybuf_release(&r->body, &s->bodies);
            return MHD_YES;
        }
        if (qw_bodybuf_append(&r->body, &s->bodies, upload, n, r->announced)) {
            r->no_room = true;
            qw_bodybuf_release(&r->body, &s->bodies);
        }
        return MHD_YES;
    }
    if (!qw_conns_set_phase(&s->conns, r->conn, QW_CONN_BUSY)) return MHD_NO;
    return answer(s, c, ep, url, method, r);
}

void qw_http_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
    qw_server *s = cls;
    qw_http_req *r = *req_cls;
    (void)toe;
    if (!r) return;
    qw_bodybuf_release(&r->body, &s->bodies);
    /* A kept-alive connection now waits for its next request's headers: the deadline runs again. */
    qw_conns_set_phase(&s->conns, r->conn ? r->conn : conn_of(c), QW_CONN_HEADERS);
    free(r);
    *req_cls = NULL;
}
