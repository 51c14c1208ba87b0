/* cfile.c — see cfile.h.  The checksum is FNV-1a 64 continued across calls
 * (qw_hash64 seeded so it resumes from the running state), so it does not
 * depend on how the bytes were split into writes and reads. */
#include "cfile.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint64_t k_basis = 1469598103934665603ULL;

static uint64_t fnv_more(uint64_t h, const void *p, size_t n) { return qw_hash64(p, n, h ^ k_basis); }

int qw_cfile_create(qw_cfile *w, const char *path, qw_error *err) {
    *w = (qw_cfile){.h = k_basis};
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return qw_fail(err, "%s: cannot create: %s", w->tmp, strerror(errno));
    return 0;
}

int qw_cfile_write(qw_cfile *w, const void *p, size_t n) {
    w->h = fnv_more(w->h, p, n);
    return fwrite(p, 1, n, w->f) == n ? 0 : -1;
}

int qw_cfile_commit(qw_cfile *w, qw_error *err) {
    uint64_t sum = w->h;
    bool ok = fwrite(&sum, sizeof sum, 1, w->f) == 1 && fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
    int e = errno;
    ok = fclose(w->f) == 0 && ok;
    w->f = NULL;
    if (!ok || rename(w->tmp, w->path) != 0) {
        if (ok) e = errno;
        unlink(w->tmp);
        return qw_fail(err, "%s: cannot write: %s", w->path, strerror(e));
    }
    return 0;
}

void qw_cfile_abort(qw_cfile *w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    unlink(w->tmp);
}

int qw_cfile_open(qw_cfile *r, const char *path, qw_error *err) {
    *r = (qw_cfile){.h = k_basis};
    snprintf(r->path, sizeof r->path, "%s", path);
    r->f = fopen(path, "rb");
    struct stat st;
    if (!r->f || fstat(fileno(r->f), &st) != 0) {
        int e = errno;
        if (r->f) fclose(r->f);
        r->f = NULL;
        return qw_fail(err, "%s: cannot open: %s", path, strerror(e));
    }
    r->size = (uint64_t)st.st_size;
    return 0;
}

int qw_cfile_read(qw_cfile *r, void *p, size_t n) {
    if (fread(p, 1, n, r->f) != n) return -1;
    r->h = fnv_more(r->h, p, n);
    return 0;
}

int qw_cfile_verify(qw_cfile *r, qw_error *err) {
    uint64_t sum;
    if (fread(&sum, sizeof sum, 1, r->f) != 1) return qw_fail(err, "%s: truncated (no checksum at the end)", r->path);
    if (sum != r->h)
        return qw_fail(err, "%s: checksum mismatch (stored %016llx, computed %016llx)", r->path,
                       (unsigned long long)sum, (unsigned long long)r->h);
    if (fgetc(r->f) != EOF) return qw_fail(err, "%s: bytes after the checksum", r->path);
    return 0;
}

void qw_cfile_close(qw_cfile *r) {
    if (r->f) fclose(r->f);
    r->f = NULL;
}
