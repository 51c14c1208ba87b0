/* test_footprint.c — footprint counts what the process owns and not what the
 * OS can drop: reading a 64 MiB mmaped file grows RSS but not footprint;
 * touching 64 MiB of anonymous memory grows footprint.  Also the sampler's
 * peak, the fast reader, and errors for a missing process. */
#include "qwisp/footprint.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#define MIB ((uint64_t)1 << 20)
static const size_t N = 64 << 20;

static qw_footprint now(void) {
    qw_footprint f;
    qw_error err = {0};
    assert_int_equal(qw_footprint_read(0, &f, &err), 0);
    return f;
}

static void test_file_pages_excluded(void **state) {
    (void)state;
    const char *dir = getenv("QWISP_TEST_TMP");
    char path[512];
    snprintf(path, sizeof path, "%s/footprint_demo.bin", dir ? dir : "/tmp");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    char *chunk = calloc(1, 1 << 20);
    for (size_t i = 0; i < N >> 20; i++) {
        memset(chunk, (int)i + 1, 1 << 20);
        assert_int_equal(write(fd, chunk, 1 << 20), 1 << 20);
    }
    free(chunk);
    const unsigned char *m = mmap(NULL, N, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(m != MAP_FAILED);
    qw_footprint before = now();
    unsigned long sum = 0;
    for (size_t off = 0; off < N; off += 4096) sum += m[off];
    assert_true(sum > 0);
    qw_footprint after = now();
    print_message("file read: rss %+.1f MiB, file %+.1f MiB, footprint %+.1f MiB\n",
                  ((double)after.rss - (double)before.rss) / MIB, ((double)after.file - (double)before.file) / MIB,
                  ((double)after.footprint - (double)before.footprint) / MIB);
    assert_true(after.rss >= before.rss + 48 * MIB);
    assert_true(after.file >= before.file + 48 * MIB);
    assert_true(after.footprint < before.footprint + 8 * MIB);
    munmap((void *)m, N);
    close(fd);
    unlink(path);
}

static void test_anon_pages_included(void **state) {
    (void)state;
    qw_footprint before = now();
    char *m = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    for (size_t off = 0; off < N; off += 4096) m[off] = 1;
    qw_footprint after = now();
    assert_true(after.footprint >= before.footprint + 60 * MIB);
    assert_true(after.anon >= before.anon + 60 * MIB);
    qw_footprint fast;
    assert_int_equal(qw_footprint_read_fast(0, &fast, NULL), 0);
    assert_true(fast.footprint + 4 * MIB >= after.footprint && fast.footprint <= after.footprint + 4 * MIB);
    munmap(m, N);
    qw_footprint gone = now();
    assert_true(gone.footprint + 48 * MIB <= after.footprint);
}

static void test_sampler_peak(void **state) {
    (void)state;
    qw_error err = {0};
    qw_footprint base = now();
    qw_footprint_sampler *s = qw_footprint_sampler_start(5, &err);
    assert_non_null(s);
    char *m = mmap(NULL, N / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    for (size_t off = 0; off < N / 2; off += 4096) m[off] = 1;
    uint64_t peak_fp = 0, peak_rss = 0;
    qw_footprint_sampler_stop(s, &peak_fp, &peak_rss); /* samples once more before returning */
    munmap(m, N / 2);
    assert_true(peak_fp >= base.footprint + 30 * MIB);
    assert_true(peak_rss >= peak_fp);
}

static void test_missing_process(void **state) {
    (void)state;
    qw_footprint f;
    qw_error err = {0};
    assert_int_equal(qw_footprint_read(999999999, &f, &err), -1);
    assert_non_null(strstr(err.msg, "/proc/999999999/"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_pages_excluded),
        cmocka_unit_test(test_anon_pages_included),
        cmocka_unit_test(test_sampler_peak),
        cmocka_unit_test(test_missing_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
