/* cfile.h — atomic, checksummed files (the prefix cache's copies on disk,
 * QWISP_PREFIX_CACHE_DIR).
 *
 * A writer goes to PATH.tmp, keeps a running FNV-1a 64 of every byte, and
 * on commit appends that checksum, fsyncs and renames over PATH: a reader
 * sees the old file or the whole new one, never half of one.  A reader
 * hashes what it reads the same way; verify checks the trailer and that the
 * file ends there, so a flipped bit, a truncation or trailing junk fails
 * with a message naming the file and what was wrong.
 */
#ifndef QWISP_RUNTIME_CFILE_H
#define QWISP_RUNTIME_CFILE_H

#include "qwisp/base.h"

#include <stdio.h>

typedef struct qw_cfile {
    FILE *f;
    uint64_t h;          /* FNV-1a 64 state over the payload so far */
    uint64_t size;       /* reader: the file's size */
    char path[1024], tmp[1040];
} qw_cfile;

/* Writer.  0, or -1 + err (create/commit); write returns -1 on an I/O error. */
int qw_cfile_create(qw_cfile *w, const char *path, qw_error *err);
int qw_cfile_write(qw_cfile *w, const void *p, size_t n);
int qw_cfile_commit(qw_cfile *w, qw_error *err);
void qw_cfile_abort(qw_cfile *w); /* closes and removes the temporary file */

/* Reader.  read returns -1 when the file ends first. */
int qw_cfile_open(qw_cfile *r, const char *path, qw_error *err);
int qw_cfile_read(qw_cfile *r, void *p, size_t n);
int qw_cfile_verify(qw_cfile *r, qw_error *err); /* trailer equals the running checksum, then EOF */
void qw_cfile_close(qw_cfile *r);

#endif
