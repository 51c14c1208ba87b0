/* stream.h — private interface between experts.c (the source: dispatch,
 * resident tier, statistics) and streaming.c (the slot cache and its readers).
 * See include/qwisp/experts.h for the protocol. */
#ifndef QWISP_EXPERTS_STREAM_H
#define QWISP_EXPERTS_STREAM_H

#include "qwisp/experts.h"

#include <stdatomic.h>

typedef struct qw_stream qw_stream;

/* The counters (the TOTAL rows of experts.h's QW_EXPERTS_STATS), updated with
 * relaxed atomics by the forward and the readers. */
#define QW_X_ATOMIC_(field, kind, ...) QW_STAT_IF_TOTAL(kind, _Atomic uint64_t field;)
typedef struct qw_experts_counters {
    QW_EXPERTS_STATS(QW_X_ATOMIC_, QW_STAT_NONE)
} qw_experts_counters;
#undef QW_X_ATOMIC_

typedef enum { QW_STREAM_IO_AUTO = 0, QW_STREAM_IO_URING, QW_STREAM_IO_PREAD } qw_stream_io;

typedef struct qw_stream_config {
    int32_t c;              /* slots per layer */
    bool lfu;               /* victims by use count (QWISP_EXPERT_POLICY=lfu), else LRU */
    qw_stream_io io;        /* read engine (QWISP_STREAM_IO) */
    int qd;                 /* io_uring: reads in flight */
    int readers;            /* pread: reader threads */
    double throttle_bps;    /* 0 = no cap */
    int64_t fault_read;     /* fail this 1-based read with EIO; 0 = never */
} qw_stream_config;

qw_stream *qw_stream_open(const qw_expert_layout *l, const qw_stream_config *cfg, qw_experts_counters *ctr,
                          qw_error *err);
void qw_stream_close(qw_stream *s);
uint64_t qw_stream_arena_bytes(const qw_stream *s);
void qw_stream_need(qw_stream *s, int32_t il, const int32_t *sel, int32_t n);
int qw_stream_get(qw_stream *s, int32_t il, int32_t e, const char *w[3], qw_error *err);
void qw_stream_release(qw_stream *s, int32_t il);
/* Look-ahead: starts loads of layer il's predicted experts into free slots
 * (at most C/2); scored against the next need(il).  Never fails. */
void qw_stream_ahead(qw_stream *s, int32_t il, const int32_t *sel, int32_t n);
/* Layer il's look-ahead score so far: predicted, correct, needed. */
void qw_stream_ahead_layer(const qw_stream *s, int32_t il, uint64_t out[3]);
bool qw_stream_uses_uring(const qw_stream *s);
/* Whether expert e of layer il is in a slot (ready or loading). */
bool qw_stream_cached(qw_stream *s, int32_t il, int32_t e);
/* Whether expert e of layer il is in a slot and its reads are done. */
bool qw_stream_ready(qw_stream *s, int32_t il, int32_t e);

#endif
