/* metrics.h — the server's counters and the Prometheus text of /metrics.
 *
 * HTTP-side counters live here (requests by endpoint and status class,
 * client disconnects, open connections); runtime-side numbers are read at
 * scrape time from the scheduler (qw_sched_stats), the pool
 * (qw_pool_get_stats) and the footprint probe, so nothing is counted twice.
 */
#ifndef QWISP_SERVE_METRICS_H
#define QWISP_SERVE_METRICS_H

#include "qwisp/sched.h"
#include "text/textout.h"

#include <stdatomic.h>

typedef enum qw_endpoint {
    QW_EP_CHAT = 0,
    QW_EP_COMPLETIONS,
    QW_EP_MODELS,
    QW_EP_HEALTH,
    QW_EP_METRICS,
    QW_EP_READY,
    QW_EP_PAGE, /* GET /: the chat page */
    QW_EP_OTHER,
    QW_EP_COUNT
} qw_endpoint;

typedef struct qw_metrics {
    atomic_ullong requests[QW_EP_COUNT][3]; /* [endpoint][2xx, 4xx, 5xx] */
    atomic_ullong disconnects;              /* clients gone before their response ended */
    atomic_ullong request_timeouts;         /* connections ended by the header/body deadlines (conns.c) */
    atomic_ullong stop_strings;             /* generations ended by a stop string */
    atomic_int open_conns;
    atomic_int in_flight;                   /* generation requests admitted, response not done */
    double start_time;
} qw_metrics;

void qw_metrics_init(qw_metrics *m);
void qw_metrics_request(qw_metrics *m, qw_endpoint ep, int status);
/* Appends the Prometheus text exposition to out.  sched is NULL while the
 * model loads (the runtime families are then left out); ready is what
 * /ready answers (1: 200). */
void qw_metrics_render(qw_metrics *m, qw_sched *sched, const char *path_name, bool ready, qw_strbuf *out);

#endif
