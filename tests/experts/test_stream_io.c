/* test_stream_io.c — the streaming tier's read engines, look-ahead, eviction
 * policies and near-lossless mode, against the resident tier.
 *
 * A generated qwen3moe (16 experts, top-4, 3 layers, Q8_0) runs a 40-token
 * prompt in chunks of 16 and 12 greedy decode steps.  Bit-identical logits to
 * the resident tier with: QWISP_STREAM_IO=uring and =pread, look-ahead on and
 * off, QD 1 and 32, LFU and LRU eviction; the counters say which engine ran
 * and that the look-ahead predicted, read and was scored.  A read error under
 * either engine fails the eval with the file and the knob named, and the
 * context then reproduces the reference.  Near-lossless (QWISP_NEAR_LOSSLESS)
 * substitutes (counted) and is refused when R <= top-k; resident ignores it.
 * Where the kernel refuses io_uring (a seccomp filter in a child process
 * makes io_uring_setup fail with ENOSYS): auto falls back to pread threads,
 * bit-exactly, and uring fails naming the knob and the reason.
 * The throttle holds under io_uring.  Bad knob values are refused with the
 * allowed values named.  QWISP_ROUTE_TRACE writes one line per layer per
 * chunk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stream_testlib.h"

#include "qwisp/experts.h"
#include "qwisp/gen_model.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/place.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256], g_path[300], g_trace[300];
static int32_t g_vocab;
static float *g_ref; /* [N_GEN + 1][vocab] resident logits */

/* The knobs every test starts from: the defaults of options.h. */
static void defaults(void) {
    set_opt(QW_OPT_STREAM_IO, "auto");
    set_opt(QW_OPT_STREAM_QD, "8");
    set_opt(QW_OPT_EXPERT_READERS, "4");
    set_opt(QW_OPT_LOOKAHEAD, "-1");
    set_opt(QW_OPT_EXPERT_POLICY, "lfu");
    set_opt(QW_OPT_NEAR_LOSSLESS, "0");
    set_opt(QW_OPT_FAULT_READ, "0");
    set_opt(QW_OPT_ROUTE_TRACE, "");
}

static qw_model *load(const char *raw_c) {
    set_opt(QW_OPT_RAW_C, raw_c);
    qw_error err = {0};
    qw_model *m = qw_model_load(g_path, &err);
    assert_non_null(m);
    if (qw_place_experts(m, 256, &err)) fprintf(stderr, "place: %s\n", err.msg);
    assert_non_null(m->experts);
    return m;
}

static size_t logits_bytes(void) { return (size_t)(N_GEN + 1) * g_vocab * sizeof(float); }

static int setup(void **st) {
    snprintf(g_dir, sizeof g_dir, "/tmp/qwisp-test-stream-io.XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/m.gguf", g_dir);
    snprintf(g_trace, sizeof g_trace, "%s/route.trace", g_dir);
    qw_gen_model_params p;
    qw_error err = {0};
    if (qw_gen_model_preset("tiny", &p)) return -1;
    p.type = QW_TYPE_Q8_0;
    p.n_expert = 16;
    p.n_expert_used = 4;
    p.n_layer = 3;
    if (qw_gen_model_write(&p, g_path, &err)) return -1;
    defaults();
    qw_model *m = load("0");
    g_vocab = m->hp.n_vocab;
    g_ref = malloc(logits_bytes());
    qw_ctx *c = new_ctx(m);
    if (run_seq(c, g_vocab, g_ref, &err)) return -1;
    qw_ctx_free(c);
    qw_model_free(m);
    return 0;
}

static int teardown(void **st) {
    free(g_ref);
    unlink(g_trace);
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

/* Streams at C=7 with the knobs set, checks bit-identity (twice: cold and
 * warm cache), returns the counters. */
static qw_experts_stats exact_run(void) {
    qw_model *m = load("7");
    assert_int_equal(qw_experts_tier(m->experts), QW_TIER_STREAMING);
    qw_ctx *c = new_ctx(m);
    float *got = malloc(logits_bytes());
    qw_error err = {0};
    for (int pass = 0; pass < 2; pass++) {
        if (run_seq(c, g_vocab, got, &err)) fprintf(stderr, "eval: %s\n", err.msg);
        assert_memory_equal(got, g_ref, logits_bytes());
    }
    const qw_experts_stats s = qw_experts_get_stats();
    assert_int_equal(s.read_errors, 0);
    assert_true(s.misses > 0);
    free(got);
    qw_ctx_free(c);
    qw_model_free(m);
    return s;
}

/* The io_uring tests need a kernel (and a build) that lets this process set
 * a ring up: a kernel with io_uring disabled (sysctl, container seccomp) or
 * a build without liburing skips them with the reason, not fails. */
static void need_uring(void) {
#ifdef QW_NO_URING
    printf("SKIP: io_uring tests: built without liburing\n");
    skip();
#else
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    long fd = syscall(__NR_io_uring_setup, 1, &p);
    if (fd < 0) {
        printf("SKIP: io_uring tests: io_uring_setup refused here (%s)\n", strerror(errno));
        skip();
    }
    close((int)fd);
#endif
}

static void test_uring_exact(void **st) {
    need_uring();
    defaults();
    set_opt(QW_OPT_STREAM_IO, "uring");
    const qw_experts_stats s = exact_run();
    assert_int_equal(s.uring, 1);
}

static void test_uring_qd1_no_lookahead_exact(void **st) {
    need_uring();
    defaults();
    set_opt(QW_OPT_STREAM_IO, "uring");
    set_opt(QW_OPT_STREAM_QD, "1");
    set_opt(QW_OPT_LOOKAHEAD, "0");
    const qw_experts_stats s = exact_run();
    assert_int_equal(s.uring, 1);
    assert_int_equal(s.ahead_predicted, 0);
    assert_int_equal(s.ahead_reads, 0);
}

static void test_pread_exact(void **st) {
    defaults();
    set_opt(QW_OPT_STREAM_IO, "pread");
    set_opt(QW_OPT_EXPERT_READERS, "3");
    const qw_experts_stats s = exact_run();
    assert_int_equal(s.uring, 0);
}

static void test_lookahead_counters(void **st) {
    defaults();
    set_opt(QW_OPT_LOOKAHEAD, "6"); /* more than top-k: capped at k */
    const qw_experts_stats s = exact_run();
    /* every layer but the first is predicted, on every chunk */
    assert_true(s.ahead_predicted > 0);
    assert_true(s.ahead_needed > 0);
    assert_true(s.ahead_correct <= s.ahead_predicted && s.ahead_correct <= s.ahead_needed);
    assert_true(s.ahead_reads > 0);
    assert_true(s.ahead_used <= s.ahead_reads);
    assert_true(s.ahead_correct > 0); /* the residual barely changes across a layer */
}

static void test_lru_exact(void **st) {
    defaults();
    set_opt(QW_OPT_EXPERT_POLICY, "lru");
    exact_run();
}

static void fault_then_usable(const char *io) {
    defaults();
    set_opt(QW_OPT_STREAM_IO, io);
    set_opt(QW_OPT_FAULT_READ, "7");
    qw_model *m = load("4");
    qw_ctx *c = new_ctx(m);
    float *got = malloc(logits_bytes());
    qw_error err = {0};
    assert_int_equal(run_seq(c, g_vocab, got, &err), -1);
    assert_non_null(strstr(err.msg, "Input/output error"));
    assert_non_null(strstr(err.msg, "QWISP_FAULT_READ=7"));
    assert_non_null(strstr(err.msg, g_path));
    assert_true(qw_experts_get_stats().read_errors >= 1);
    assert_int_equal(run_seq(c, g_vocab, got, &err), 0);
    assert_memory_equal(got, g_ref, logits_bytes());
    free(got);
    qw_ctx_free(c);
    qw_model_free(m);
    set_opt(QW_OPT_FAULT_READ, "0");
}

static void test_fault_uring(void **st) {
    need_uring();
    fault_then_usable("uring");
}
static void test_fault_pread(void **st) { fault_then_usable("pread"); }

static void test_throttle_uring(void **st) {
    need_uring();
    defaults();
    set_opt(QW_OPT_STREAM_IO, "uring");
    set_opt(QW_OPT_SSD_THROTTLE_GBS, "0.2");
    const qw_experts_stats s = exact_run();
    set_opt(QW_OPT_SSD_THROTTLE_GBS, "");
    assert_true(s.throttle_ns > 0);
}

static void test_near_lossless(void **st) {
    defaults();
    set_opt(QW_OPT_NEAR_LOSSLESS, "10");
    qw_model *m = load("5");
    qw_ctx *c = new_ctx(m);
    float *got = malloc(logits_bytes());
    qw_error err = {0};
    assert_int_equal(run_seq(c, g_vocab, got, &err), 0);
    const qw_experts_stats s = qw_experts_get_stats();
    assert_true(s.substituted > 0);
    for (size_t i = 0; i < (size_t)(N_GEN + 1) * g_vocab; i++) assert_false(got[i] != got[i]); /* finite */
    qw_ctx_free(c);
    qw_model_free(m);
    /* R <= top-k is refused, naming the knob and k */
    set_opt(QW_OPT_NEAR_LOSSLESS, "4");
    m = load("5");
    c = new_ctx(m);
    assert_int_equal(run_seq(c, g_vocab, got, &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_NEAR_LOSSLESS=4"));
    assert_non_null(strstr(err.msg, "top-k (4)"));
    qw_ctx_free(c);
    qw_model_free(m);
    /* resident: off, bit-exact */
    set_opt(QW_OPT_NEAR_LOSSLESS, "10");
    m = load("0");
    c = new_ctx(m);
    assert_int_equal(run_seq(c, g_vocab, got, &err), 0);
    assert_memory_equal(got, g_ref, logits_bytes());
    assert_int_equal(qw_experts_get_stats().substituted, 0);
    free(got);
    qw_ctx_free(c);
    qw_model_free(m);
    set_opt(QW_OPT_NEAR_LOSSLESS, "0");
}

/* In this process from now on, io_uring_setup fails with ENOSYS. */
static int refuse_io_uring(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The child's checks; its exit status: 0 = all held, else the failed step. */
static int refused_child(void) {
    if (refuse_io_uring()) return 10;
    defaults(); /* auto: pread threads, same logits */
    set_opt(QW_OPT_RAW_C, "7");
    qw_error err = {0};
    qw_model *m = qw_model_load(g_path, &err);
    if (!m || qw_place_experts(m, 256, &err)) return 11;
    if (qw_experts_get_stats().uring != 0) return 12;
    qw_ctx *c = qw_ctx_new_placed(m, 256, 2, &err);
    if (!c) return 13;
    qw_ctx_set_chunk_size(c, CHUNK);
    float *got = malloc(logits_bytes());
    if (run_seq(c, g_vocab, got, &err) || memcmp(got, g_ref, logits_bytes())) return 14;
    free(got);
    qw_ctx_free(c);
    qw_model_free(m);
    set_opt(QW_OPT_STREAM_IO, "uring"); /* insisting fails, saying why */
    m = qw_model_load(g_path, &err);
    if (!m) return 15;
    memset(&err, 0, sizeof err);
    if (qw_place_experts(m, 256, &err) == 0) return 16;
    if (!strstr(err.msg, "QWISP_STREAM_IO=uring") || !strstr(err.msg, "io_uring_setup refused")) {
        fprintf(stderr, "child: %s\n", err.msg);
        return 17;
    }
    qw_model_free(m);
    return 0;
}

static void test_uring_refused_falls_back(void **st) {
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(refused_child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_bad_knobs(void **st) {
    qw_error err = {0};
    assert_int_equal(qw_opt_set(QW_OPT_STREAM_IO, "aio", "test", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_STREAM_IO='aio'"));
    assert_non_null(strstr(err.msg, "auto|uring|pread"));
    assert_int_equal(qw_opt_set(QW_OPT_STREAM_QD, "0", "test", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_STREAM_QD"));
    assert_int_equal(qw_opt_set(QW_OPT_LOOKAHEAD, "-2", "test", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_LOOKAHEAD"));
    assert_int_equal(qw_opt_set(QW_OPT_EXPERT_POLICY, "fifo", "test", &err), -1);
    assert_non_null(strstr(err.msg, "lfu|lru"));
    assert_int_equal(qw_opt_set(QW_OPT_NEAR_LOSSLESS, "x", "test", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_NEAR_LOSSLESS"));
}

static void test_route_trace(void **st) {
    defaults();
    unlink(g_trace);
    set_opt(QW_OPT_ROUTE_TRACE, g_trace);
    qw_model *m = load("0");
    qw_ctx *c = new_ctx(m);
    float *got = malloc(logits_bytes());
    qw_error err = {0};
    assert_int_equal(run_seq(c, g_vocab, got, &err), 0);
    assert_memory_equal(got, g_ref, logits_bytes());
    qw_ctx_free(c);
    qw_model_free(m); /* closes the trace */
    set_opt(QW_OPT_ROUTE_TRACE, "");
    FILE *f = fopen(g_trace, "r");
    assert_non_null(f);
    char line[4096];
    int lines = 0, first_words = 0;
    while (fgets(line, sizeof line, f)) {
        if (lines == 0)
            for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) first_words++;
        lines++;
    }
    fclose(f);
    /* 3 prompt chunks (16+16+8) and 12 decode steps, 3 layers each */
    assert_int_equal(lines, 3 * (3 + N_GEN));
    assert_int_equal(first_words, 1 + CHUNK * 4); /* layer, then 16 tokens x top-4 */
    free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uring_exact),
        cmocka_unit_test(test_uring_qd1_no_lookahead_exact),
        cmocka_unit_test(test_pread_exact),
        cmocka_unit_test(test_lookahead_counters),
        cmocka_unit_test(test_lru_exact),
        cmocka_unit_test(test_fault_uring),
        cmocka_unit_test(test_fault_pread),
        cmocka_unit_test(test_throttle_uring),
        cmocka_unit_test(test_near_lossless),
        cmocka_unit_test(test_uring_refused_falls_back),
        cmocka_unit_test(test_bad_knobs),
        cmocka_unit_test(test_route_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
