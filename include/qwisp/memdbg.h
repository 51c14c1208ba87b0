/* memdbg.h — memory breakdown lines (QWISP_PREFILL_MEMDBG, QWISP_LANE_MEMDBG).
 *
 * One stderr line per report, greppable, bytes in MiB, times in ms:
 *   [prefill-memdbg] pos=P/T active=MB cache=MB peak=MB footprint=MB rss=MB kv=MB file=MB hits=N misses=N …
 * The pool's fields are its counter list (pool.h's QW_POOL_STATS: the first
 * QW_POOL_STATS_LINE_HEAD rows, the footprint fields, then the other rows),
 * then what the tail hook adds (the runtime sets the expert source's list:
 * expert_c=… expert_hits=… …).
 * Mode 1 only reads (pool stats, /proc/self smaps_rollup).  Mode 2 then calls
 * qw_pool_clear_cache() and appends the after-clear values to the same line:
 *   … | cleared active=MB cache=MB footprint=MB rss=MB
 * Mode 2 PERTURBS the run: everything cached is returned to the OS at each
 * report, so later chunks allocate afresh — footprint and speed are no longer
 * those of an unobserved run (the seed's #150 observer effect).
 *
 *     qw_memdbg d;
 *     qw_memdbg_init(&d, "prefill", mode, every, stderr);
 *     // after each chunk:
 *     qw_memdbg_chunk(&d, n_done, n_total, kv_bytes);
 */
#ifndef QWISP_MEMDBG_H
#define QWISP_MEMDBG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct qw_memdbg {
    const char *tag; /* "prefill", "lane" */
    int mode;        /* 0 off, 1 report, 2 report + clear cache */
    int every;       /* chunks between reports (>= 1) */
    int64_t n_chunks;
    FILE *out;
    void (*tail)(FILE *f); /* appends " key=value" fields to each line; NULL: none */
} qw_memdbg;

void qw_memdbg_init(qw_memdbg *d, const char *tag, int mode, int every, FILE *out);
/* Counts one chunk; reports when it is the every-th or pos == total.
 * Returns whether a line was printed. */
bool qw_memdbg_chunk(qw_memdbg *d, int64_t pos, int64_t total, uint64_t kv_bytes);
/* Prints one line now (mode 2 also clears the cache). */
void qw_memdbg_report(const qw_memdbg *d, int64_t pos, int64_t total, uint64_t kv_bytes);

#endif
