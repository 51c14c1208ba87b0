/* conns.c — the connection registry and the deadline watchdog (see
 * conns.h for the phases and why libmicrohttpd's idle timeout is not
 * enough).
 */
#include "conns.h"

#include "qwisp/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

/* Ends one connection that missed its deadline (mutex held).  true if it
 * was a request that timed out (answered 408), false for an idle keep-alive. */
static bool end_conn(qw_conn *c, double limit) {
    bool idle = c->phase == QW_CONN_HEADERS && c->served; /* a kept-alive connection with nothing new */
    const char *what = c->phase == QW_CONN_HEADERS ? "request line and headers" : "request body";
    char js[320], msg[512];
    int nj = snprintf(js, sizeof js,
                      "{\"error\":{\"message\":\"the %s did not arrive within %g s\",\"type\":"
                      "\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}",
                      what, limit);
    int nm = snprintf(msg, sizeof msg,
                      "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      "Content-Length: %d\r\n\r\n%s",
                      nj, js);
    /* Best effort, never blocking: a client that reads nothing loses the reply, not our thread. */
    if (!idle) {
        ssize_t w = send(c->fd, msg, (size_t)nm, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
    }
    /* libmicrohttpd's thread now reads end-of-stream, closes the connection and unregisters it. */
    shutdown(c->fd, SHUT_RDWR);
    c->ended = true;
    if (idle) qw_log(QW_LOG_DEBUG, "serve: idle keep-alive connection (fd %d) closed after %g s", c->fd, limit);
    else qw_log(QW_LOG_INFO, "serve: connection (fd %d) ended with 408: %s not complete within %g s", c->fd, what, limit);
    return !idle;
}

static void *watchdog(void *arg) {
    qw_conns *cs = arg;
    pthread_mutex_lock(&cs->mu);
    while (!cs->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        double now = qw_time_s();
        for (qw_conn *c = cs->head; c; c = c->next) {
            if (c->ended || c->phase == QW_CONN_BUSY) continue;
            double limit = c->phase == QW_CONN_HEADERS ? cs->header_timeout : cs->body_timeout;
            if (limit > 0 && now - c->since > limit && end_conn(c, limit)) atomic_fetch_add(cs->timeouts, 1);
        }
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

int qw_conns_start(qw_conns *cs, double header_timeout, double body_timeout, atomic_ullong *timeouts) {
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->cv, NULL);
    cs->head = NULL;
    cs->header_timeout = header_timeout;
    cs->body_timeout = body_timeout;
    cs->stop = false;
    cs->timeouts = timeouts;
    if (pthread_create(&cs->thread, NULL, watchdog, cs)) return -1;
    cs->running = true;
    return 0;
}

void qw_conns_stop(qw_conns *cs) {
    if (!cs || !cs->running) return;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_cond_signal(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    pthread_join(cs->thread, NULL);
    cs->running = false;
    pthread_cond_destroy(&cs->cv);
    pthread_mutex_destroy(&cs->mu);
}

qw_conn *qw_conns_add(qw_conns *cs, int fd) {
    qw_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->phase = QW_CONN_HEADERS;
    c->since = qw_time_s();
    pthread_mutex_lock(&cs->mu);
    c->next = cs->head;
    if (cs->head) cs->head->prev = c;
    cs->head = c;
    pthread_mutex_unlock(&cs->mu);
    return c;
}

void qw_conns_remove(qw_conns *cs, qw_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&cs->mu);
    if (c->prev) c->prev->next = c->next;
    else cs->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&cs->mu);
    free(c);
}

bool qw_conns_set_phase(qw_conns *cs, qw_conn *c, qw_conn_phase phase) {
    if (!c) return true;
    pthread_mutex_lock(&cs->mu);
    bool ok = !c->ended;
    if (ok) {
        if (phase == QW_CONN_HEADERS) c->served = true; /* HEADERS again only after a response */
        c->phase = phase;
        c->since = qw_time_s();
    }
    pthread_mutex_unlock(&cs->mu);
    return ok;
}
