/* memdbg.c — the breakdown reporter of memdbg.h.  Its job is printing: it
 * writes one line to its FILE per report and nothing else.  A /proc read
 * failure prints "footprint=? rss=?" rather than failing the run: the
 * reporter observes, it never changes the outcome (except mode 2's
 * documented cache clear).
 */
#include "qwisp/memdbg.h"
#include "qwisp/footprint.h"
#include "qwisp/pool.h"

#define MIB(x) ((double)(x) / 1048576.0)

void qw_memdbg_init(qw_memdbg *d, const char *tag, int mode, int every, FILE *out) {
    *d = (qw_memdbg){.tag = tag, .mode = mode, .every = every > 0 ? every : 1, .out = out ? out : stderr};
}

static void print_fp(FILE *f) {
    qw_footprint fp;
    if (qw_footprint_read(0, &fp, NULL) == 0)
        fprintf(f, " footprint=%.1f rss=%.1f", MIB(fp.footprint), MIB(fp.rss));
    else
        fprintf(f, " footprint=? rss=?");
}

void qw_memdbg_report(const qw_memdbg *d, int64_t pos, int64_t total, uint64_t kv_bytes) {
    FILE *f = d->out;
    qw_pool_stats s = qw_pool_get_stats();
    qw_footprint fp;
    bool ok = qw_footprint_read(0, &fp, NULL) == 0;
    fprintf(f, "[%s-memdbg] pos=%lld/%lld", d->tag, (long long)pos, (long long)total);
    qw_stats_line(f, &qw_pool_stat_group, &s, 0, QW_POOL_STATS_LINE_HEAD);
    if (ok)
        fprintf(f, " footprint=%.1f rss=%.1f kv=%.1f file=%.1f", MIB(fp.footprint), MIB(fp.rss),
                MIB(kv_bytes), MIB(fp.file));
    else
        fprintf(f, " footprint=? rss=? kv=%.1f file=?", MIB(kv_bytes));
    qw_stats_line(f, &qw_pool_stat_group, &s, QW_POOL_STATS_LINE_HEAD, -1);
    if (d->tail) d->tail(f);
    if (d->mode >= 2) {
        qw_pool_clear_cache();
        s = qw_pool_get_stats();
        fprintf(f, " | cleared active=%.1f cache=%.1f", MIB(s.active_bytes), MIB(s.cache_bytes));
        print_fp(f);
    }
    fputc('\n', f);
    fflush(f);
}

bool qw_memdbg_chunk(qw_memdbg *d, int64_t pos, int64_t total, uint64_t kv_bytes) {
    if (d->mode <= 0) return false;
    d->n_chunks++;
    if (d->n_chunks % d->every != 0 && pos != total) return false;
    qw_memdbg_report(d, pos, total, kv_bytes);
    return true;
}
