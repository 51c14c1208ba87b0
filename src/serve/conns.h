/* conns.h — every open connection's phase and the watchdog that holds
 * clients to the request deadlines (against slowloris: issue 21, item 2).
 *
 * libmicrohttpd's own timeout is an *idle* timeout: a client that sends one
 * header byte every few seconds keeps a connection (and, in
 * thread-per-connection mode, a thread) for ever.  So each connection is
 * registered here when it opens and moves through phases:
 *   HEADERS  waiting for a request's headers: since the connection opened or
 *            the previous response ended (the keep-alive gap counts);
 *   BODY     headers in, the body arriving;
 *   BUSY     the request is being answered (generation may take minutes:
 *            no deadline).
 * A watchdog thread wakes 4 times a second and ends a connection that stayed
 * in HEADERS past header_timeout or in BODY past body_timeout: it writes a
 * 408 error object (not on a kept-alive connection idle since its last
 * response: an unasked-for reply there would confuse a client that reuses it,
 * so that one is closed silently, as idle keep-alives usually are) and
 * shuts the socket down, which makes libmicrohttpd's
 * thread see the end of the stream and close it.  The mutex makes that and
 * the phase changes exclusive, so the watchdog never writes once a handler
 * may be answering, and never touches a socket libmicrohttpd has closed
 * (it notifies the close before it closes the descriptor).
 */
#ifndef QWISP_SERVE_CONNS_H
#define QWISP_SERVE_CONNS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef enum qw_conn_phase { QW_CONN_HEADERS = 0, QW_CONN_BODY, QW_CONN_BUSY } qw_conn_phase;

typedef struct qw_conn {
    struct qw_conn *prev, *next;
    int fd;
    qw_conn_phase phase;
    double since; /* when the phase began (qw_time_s) */
    bool ended;   /* the watchdog ended it: its handler must not answer */
    bool served;  /* a response was completed on it (now an idle keep-alive until more comes) */
} qw_conn;

typedef struct qw_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qw_conn *head;
    double header_timeout, body_timeout; /* seconds; <= 0: no deadline */
    bool running, stop;
    pthread_t thread;
    atomic_ullong *timeouts; /* counts requests ended by a deadline with 408 (the server's metric) */
} qw_conns;

/* Starts the watchdog; timeouts (not NULL) counts what it ends.  0, or -1 if
 * the thread could not start. */
int qw_conns_start(qw_conns *cs, double header_timeout, double body_timeout, atomic_ullong *timeouts);
/* Stops and joins the watchdog and frees its lock: call once the listener
 * is stopped (every connection unregistered).  NULL-safe; no-op if never started. */
void qw_conns_stop(qw_conns *cs);
/* Registers a new connection in HEADERS; NULL on OOM (then unwatched). */
qw_conn *qw_conns_add(qw_conns *cs, int fd);
void qw_conns_remove(qw_conns *cs, qw_conn *c);
/* Moves c to a phase (its clock restarts).  false if the watchdog has
 * already ended the connection: the caller must drop the request.
 * NULL c (unwatched) is always true. */
bool qw_conns_set_phase(qw_conns *cs, qw_conn *c, qw_conn_phase phase);

#endif
