/* footprint.h — a process's honest memory footprint on Linux.
 *
 * Footprint = memory the process owns that the OS cannot drop for free:
 * anonymous pages (heap, pool buffers, private copies of file pages) + shared
 * memory (shmem/tmpfs/memfd) + what was swapped out.  Clean file-backed pages
 * — an mmaped model's weights — are *not* in it: the kernel can drop them at
 * any time and read them back from the file.  RSS counts both, so a process
 * that merely reads a 30 GB mmaped model shows 30 GB of RSS while owning
 * almost nothing (docs/memory.md has the demonstration).
 *
 *     qw_footprint f;
 *     if (qw_footprint_read(0, &f, &err) == 0)   // 0 = this process
 *         printf("%.1f MB\n", f.footprint / 1e6);
 *
 * qw_footprint_read parses /proc/PID/smaps_rollup (+ status for shmem and the
 * RSS high-water mark): exact, but the kernel walks the page tables, so it
 * costs ~ms per GB resident.  qw_footprint_read_fast reads only
 * /proc/PID/status counters (O(1), used by samplers).  Neither allocates.
 */
#ifndef QWISP_FOOTPRINT_H
#define QWISP_FOOTPRINT_H

#include "qwisp/base.h"

#include <sys/types.h>

typedef struct qw_footprint {
    uint64_t footprint;     /* anon + shmem + swap, bytes */
    uint64_t rss;           /* resident, all kinds */
    uint64_t anon;          /* resident anonymous */
    uint64_t file;          /* resident file-backed (clean + dirty), e.g. mmaped weights */
    uint64_t shmem;         /* resident shared memory */
    uint64_t swap;          /* swapped out */
    uint64_t pss;           /* proportional set size (smaps_rollup only; 0 from _fast) */
    uint64_t private_dirty; /* smaps_rollup only */
    uint64_t rss_hwm;       /* peak RSS the kernel saw (VmHWM) */
} qw_footprint;

/* pid 0 = this process.  -1 + err naming the file when it cannot be read
 * (no such process, no permission, not Linux). */
int qw_footprint_read(pid_t pid, qw_footprint *out, qw_error *err);
int qw_footprint_read_fast(pid_t pid, qw_footprint *out, qw_error *err);

/* A background thread sampling qw_footprint_read_fast every interval_ms and
 * keeping the peaks; it reads /proc only and never touches the pool, so it
 * does not perturb what it measures. */
typedef struct qw_footprint_sampler qw_footprint_sampler;
qw_footprint_sampler *qw_footprint_sampler_start(int interval_ms, qw_error *err);
/* Stops (one last sample first), writes the peaks, frees.  NULL-safe. */
void qw_footprint_sampler_stop(qw_footprint_sampler *s, uint64_t *peak_footprint, uint64_t *peak_rss);

#endif
