/* cmd_bench.c — `qwisp bench`: llama-bench-style throughput of one model.
 *
 * Tests (as llama-bench defines them, so numbers compare one to one):
 *   pp<P>: prefill of P tokens into an empty context, logits of the last one;
 *   tg<N>: N single-token decode steps from an empty context, logits each step;
 *   tg<N>@<B> (--lanes): B sequences decoding together, the lanes path's step
 *   (qw_batch_eval: one forward pass of B tokens, each sequence attending over
 *   its own KV cache), N steps from empty contexts; aggregate tok/s = B x N /
 *   time, as llama-batched-bench's S_TG.  Each sequence decodes its own token
 *   stream, so the B tokens route to different experts, as real lanes do.
 * Each test runs once untimed (warm-up: page faults, caches, thread wake-up),
 * then R timed repetitions; we report min / median / max tokens per second.
 * Prompt tokens are pseudo-random ids (seeded), like llama-bench's.
 *
 * Roofline: a decode step must read every active weight byte once
 * (qw_model_active_bytes: non-expert tensors + n_expert_used experts per layer
 * + the LM head), so tg tok/s <= bandwidth / active bytes.  The bandwidth is
 * measured here: all threads stream-read a 1 GiB buffer (>> LLC) a few times
 * with four access patterns (one or four streams per thread, with and
 * without software prefetch: the best is the bandwidth this machine can
 * reach, see measure_read_bw) and the best pass counts.  `roofline_pct` =
 * median tg / that bound.
 * The bound holds only for weights that stream from memory: when the active
 * weights fit in the last-level cache, decode reads them from the cache,
 * which is faster than the memory the probe reads, and the share can pass
 * 100 %.  The output then says so (text and `roofline_note`).
 */
#include "cli_common.h"
#include "commands.h"
#include "phase_report.h"
#include "qwisp/backend.h"
#include "qwisp/experts.h"
#include "qwisp/place.h"
#include "qwisp/model.h"
#include "qwisp/threadpool.h"
#include "qwisp/tune.h"

#include <cjson/cJSON.h>
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *k_usage =
    "usage: qwisp bench [-m FILE] [-p N] [-n N] [-r R] [--threads K] [--json]\n"
    "  -m FILE        model GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  -p N           prompt tokens for the prefill test pp<N> (default 512; 0 = skip)\n"
    "  -n N           tokens for the decode test tg<N> (default 128; 0 = skip)\n"
    "  -r R           timed repetitions of each test (default 5)\n"
    "  --threads K    compute threads (default: $QWISP_THREADS or all CPUs)\n"
    "  --bw-mb M      size of the bandwidth probe buffer in MiB (default 1024; 0 = skip)\n"
    "  --lanes LIST   also tg<N>@<B>: B sequences decoding together (the lanes path), aggregate\n"
    "                 tok/s, for each B of the comma-separated LIST (e.g. 1,4,8; each 1..256)\n"
    "  --json         print one JSON object instead of the table\n"
    "The roofline (memory read bandwidth / active weight bytes per token) bounds decode only when the\n"
    "active weights do not fit in the CPU's last-level cache; when they do, the share reached can\n"
    "pass 100 % and a note says why (docs/bench.md).\n";

enum { MAX_LANE_TESTS = 16, MAX_LANES = QW_BATCH_MAX_SEQS };

typedef struct {
    const char *model;
    long p, n, r, threads, bw_mb;
    long lanes[MAX_LANE_TESTS]; /* --lanes: B of each tg<N>@<B> test */
    int n_lane_tests;
    bool json;
} bench_args;

/* "1,4,8" -> a->lanes; -1 with a message naming the bad item. */
static int parse_lanes(const char *v, bench_args *a) {
    const char *p = v;
    a->n_lane_tests = 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        char item[32];
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= sizeof item || a->n_lane_tests == MAX_LANE_TESTS) {
            fprintf(stderr, "qwisp bench: --lanes '%s': expected up to %d comma-separated counts 1..%d\n", v,
                    MAX_LANE_TESTS, MAX_LANES);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (qw_cli_long("bench", "--lanes", item, 1, MAX_LANES, &a->lanes[a->n_lane_tests])) return -1;
        a->n_lane_tests++;
        p += len + (comma ? 1 : 0);
        if (comma && !*p) {
            fprintf(stderr, "qwisp bench: --lanes '%s': ends with a comma\n", v);
            return -1;
        }
    }
    if (!a->n_lane_tests) {
        fprintf(stderr, "qwisp bench: --lanes: empty list\n");
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    const char *C = "bench";
    a->p = 512, a->n = 128, a->r = 5, a->bw_mb = 1024;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 1;
        } else if (!strcmp(argv[i], "--json")) a->json = true;
        else if (QW_CLI_FLAG("-m") || QW_CLI_FLAG("--model")) { if (r < 0) return -1; a->model = v; }
        else if (QW_CLI_FLAG("-p") || QW_CLI_FLAG("--n-prompt")) {
            if (r < 0 || qw_cli_long(C, "-p", v, 0, 1 << 20, &a->p)) return -1;
        } else if (QW_CLI_FLAG("-n") || QW_CLI_FLAG("--n-gen")) {
            if (r < 0 || qw_cli_long(C, "-n", v, 0, 1 << 20, &a->n)) return -1;
        } else if (QW_CLI_FLAG("-r") || QW_CLI_FLAG("--repetitions")) {
            if (r < 0 || qw_cli_long(C, "-r", v, 1, 1000, &a->r)) return -1;
        } else if (QW_CLI_FLAG("--threads") || QW_CLI_FLAG("-t")) {
            if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &a->threads)) return -1;
        } else if (QW_CLI_FLAG("--bw-mb")) {
            if (r < 0 || qw_cli_long(C, "--bw-mb", v, 0, 1 << 20, &a->bw_mb)) return -1;
        } else if (QW_CLI_FLAG("--lanes")) {
            if (r < 0 || parse_lanes(v, a)) return -1;
        } else {
            fprintf(stderr, "qwisp bench: unknown option '%s' (see qwisp bench --help)\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

/* ---- memory read bandwidth ----
 *
 * What one core can stream from DRAM depends on how many cache misses it
 * keeps in flight, and that differs by CPU: a Zen core reaches its share
 * with plain sequential loads, an Intel server core needs software prefetch
 * or several streams at once.  A single plain-load probe therefore
 * understates the bandwidth on some machines and the roofline share passes
 * 100 %.  So four probes run — one stream or four interleaved streams per
 * thread, each with and without software prefetch ~8 KiB ahead (what the
 * decode row loops do) — and the roofline uses the best; all four are
 * printed with --json.  Best of `passes` each. */

typedef struct {
    const char *buf;
    size_t chunk;
    int streams;  /* 1 or 4 interleaved streams per chunk */
    bool prefetch;
    __m128i sink[64]; /* per-thread result, so the loads are not dead code */
} bw_job;

enum { BW_CHUNK = 4 << 20, BW_AHEAD = 8 << 10 };

static void bw_read(void *p, int64_t i0, int64_t i1, int ith) {
    bw_job *j = p;
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    const size_t per = j->chunk / (size_t)j->streams / sizeof(__m128i); /* vectors per stream */
    const size_t ahead = BW_AHEAD / sizeof(__m128i);
    for (int64_t c = i0; c < i1; c++) {
        const __m128i *v = (const __m128i *)(j->buf + (size_t)c * j->chunk);
        if (j->streams == 1) {
            for (size_t i = 0; i < per; i += 4) {
                if (j->prefetch && (i & 3) == 0) _mm_prefetch((const char *)(v + i + ahead), _MM_HINT_T0);
                a0 = _mm_add_epi64(a0, _mm_load_si128(v + i));
                a1 = _mm_add_epi64(a1, _mm_load_si128(v + i + 1));
                a2 = _mm_add_epi64(a2, _mm_load_si128(v + i + 2));
                a3 = _mm_add_epi64(a3, _mm_load_si128(v + i + 3));
            }
        } else { /* four quarters of the chunk read side by side, a 64-byte line each step */
            const __m128i *s0 = v, *s1 = v + per, *s2 = v + 2 * per, *s3 = v + 3 * per;
            for (size_t i = 0; i < per; i += 4) {
                if (j->prefetch) {
                    _mm_prefetch((const char *)(s0 + i + ahead), _MM_HINT_T0);
                    _mm_prefetch((const char *)(s1 + i + ahead), _MM_HINT_T0);
                    _mm_prefetch((const char *)(s2 + i + ahead), _MM_HINT_T0);
                    _mm_prefetch((const char *)(s3 + i + ahead), _MM_HINT_T0);
                }
                for (int k = 0; k < 4; k++) {
                    a0 = _mm_add_epi64(a0, _mm_load_si128(s0 + i + k));
                    a1 = _mm_add_epi64(a1, _mm_load_si128(s1 + i + k));
                    a2 = _mm_add_epi64(a2, _mm_load_si128(s2 + i + k));
                    a3 = _mm_add_epi64(a3, _mm_load_si128(s3 + i + k));
                }
            }
        }
    }
    j->sink[ith & 63] = _mm_add_epi64(j->sink[ith & 63], _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3)));
}

typedef struct {
    const char *name;
    int streams;
    bool prefetch;
    double bytes_s;
} bw_probe;

/* Runs every probe of `probes` on one mb-MiB buffer (best of `passes` each,
 * the probes interleaved pass by pass so drift hits them alike); returns the
 * best bytes/s, 0 on OOM. */
static double measure_read_bw(qw_threadpool *tp, long mb, int passes, bw_probe *probes, int n_probes) {
    const size_t bytes = (size_t)mb << 20;
    char *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes); /* fault every page in before timing */
    double best = 0;
    for (int p = 0; p < passes; p++)
        for (int k = 0; k < n_probes; k++) {
            bw_job j = {.buf = buf, .chunk = BW_CHUNK, .streams = probes[k].streams, .prefetch = probes[k].prefetch};
            double t0 = qw_time_s();
            qw_parallel_for(tp, (int64_t)(bytes / BW_CHUNK), 1, bw_read, &j);
            double dt = qw_time_s() - t0;
            if (dt > 0 && (double)bytes / dt > probes[k].bytes_s) probes[k].bytes_s = (double)bytes / dt;
            if (probes[k].bytes_s > best) best = probes[k].bytes_s;
        }
    free(buf);
    return best;
}

/* ---- tests ---- */

typedef struct {
    double min, median, max;
    const double *runs; /* every repetition's figure, in run order (the spread's shape: --json's "samples") */
    long n;
} stats3;

static stats3 summarize(const double *v, long n) {
    double *sorted = qw_xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, v, (size_t)n * sizeof *sorted);
    qw_sort_doubles(sorted, (size_t)n);
    stats3 s = {sorted[0], qw_median_sorted(sorted, (size_t)n), sorted[n - 1], v, n};
    free(sorted);
    return s;
}

/* One prefill of n tokens from an empty context; returns seconds or -1. */
static double run_pp(qw_ctx *c, const int32_t *toks, int32_t n, qw_error *err) {
    qw_ctx_truncate(c, 0);
    double t0 = qw_time_s();
    if (qw_ctx_eval(c, toks, n, QW_LOGITS_LAST, err)) return -1;
    return qw_time_s() - t0;
}

/* n decode steps from an empty context; returns seconds or -1. */
static double run_tg(qw_ctx *c, const int32_t *toks, int32_t n, qw_error *err) {
    qw_ctx_truncate(c, 0);
    double t0 = qw_time_s();
    for (int32_t i = 0; i < n; i++)
        if (qw_ctx_eval(c, &toks[i], 1, QW_LOGITS_LAST, err)) return -1;
    return qw_time_s() - t0;
}

/* n batched decode steps of b sequences (lanes[0..b), emptied first) on
 * workspace ws; sequence i decodes toks[i], toks[i+1], ... (toks holds
 * n + b ids).  Returns seconds or -1. */
static double run_tg_lanes(qw_ctx *ws, qw_ctx **lanes, int b, const int32_t *toks, int32_t n, qw_error *err) {
    qw_batch_seq seqs[MAX_LANES];
    for (int i = 0; i < b; i++) qw_ctx_truncate(lanes[i], 0);
    double t0 = qw_time_s();
    for (int32_t t = 0; t < n; t++) {
        for (int i = 0; i < b; i++) seqs[i] = (qw_batch_seq){lanes[i], &toks[i + t], 1, true};
        if (qw_batch_eval(ws, seqs, b, err)) return -1;
    }
    return qw_time_s() - t0;
}

static void add_stats(cJSON *o, const char *name, stats3 s) {
    cJSON *t = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(t, "min", s.min);
    cJSON_AddNumberToObject(t, "median", s.median);
    cJSON_AddNumberToObject(t, "max", s.max);
    cJSON *runs = cJSON_AddArrayToObject(t, "samples");
    for (long i = 0; i < s.n; i++) cJSON_AddItemToArray(runs, cJSON_CreateNumber(s.runs[i]));
}

/* Last-level cache size in bytes, 0 if unknown: the highest level in sysfs
 * (what lscpu shows; glibc's sysconf reads cpuid, which some VMs fill oddly). */
static long llc_bytes(void) {
    long best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char p[96], buf[32];
        int level = 0;
        long kb = 0;
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(p, "r"))) continue;
        if (fgets(buf, sizeof buf, f) && sscanf(buf, "%ldK", &kb) == 1 && level >= best_level) {
            best_level = level;
            best = kb * 1024;
        }
        fclose(f);
    }
    if (best > 0) return best;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l3 > 0 ? l3 : l2 > 0 ? l2 : 0;
}

/* Why the roofline share is not a bound here, or NULL when it is one. */
static const char *roofline_note(double active, long llc, double pct, char *buf, size_t cap) {
    if (llc > 0 && active <= (double)llc) {
        snprintf(buf, cap,
                 "the active weights (%.1f MB) fit in the last-level cache (%.1f MB): decode reads them from "
                 "the cache, faster than the memory the probe reads, so the roofline is no bound here and the "
                 "share can pass 100%%",
                 active / 1e6, (double)llc / 1e6);
        return buf;
    }
    if (pct > 100) {
        snprintf(buf, cap,
                 "over 100%%: decode read weights faster than the probe read memory (part of the active "
                 "weights stayed in the caches, or the probe ran while neighbours loaded the memory bus)");
        return buf;
    }
    return NULL;
}

int qw_cmd_bench(int argc, char **argv) {
    bench_args a = {0};
    int pr = parse_args(argc, argv, &a);
    if (pr) return pr > 0 ? 0 : 2;
    const char *path = qw_cli_model_path("bench", a.model);
    if (!path) return 2;
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    if (!m) {
        fprintf(stderr, "qwisp bench: %s\n", err.msg);
        return 1;
    }
    const int threads = qw_cli_threads(a.threads);
    const int32_t n_max = (int32_t)(a.p > a.n ? a.p : a.n);
    int b_max = 0;
    for (int k = 0; k < a.n_lane_tests; k++)
        if (a.lanes[k] > b_max) b_max = (int)a.lanes[k];
    if (b_max > 0 && a.n == 0) {
        fprintf(stderr, "qwisp bench: --lanes needs decode tokens (-n N > 0)\n");
        qw_model_free(m);
        return 2;
    }
    qw_ctx **lanes = calloc(b_max > 0 ? (size_t)b_max : 1u, sizeof *lanes);
    double *tgl = calloc((size_t)a.r * (size_t)(a.n_lane_tests ? a.n_lane_tests : 1), sizeof *tgl);
    stats3 stgl[MAX_LANE_TESTS] = {0};
    /* the tier sees the lanes' contexts too (as serve's lanes path places it) */
    qw_ctx *c = NULL;
    if (lanes && !qw_place_experts(m, (int64_t)(n_max + 16) + (int64_t)b_max * (a.n + 16), &err))
        c = qw_ctx_new(m, n_max + 16, threads, &err);
    /* lane contexts never compute (the workspace c does): one thread each, as in runtime/lanes.c */
    for (int i = 0; c && i < b_max; i++)
        if (!(lanes[i] = qw_ctx_new(m, (int32_t)a.n + 16, 1, &err))) break;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_max + b_max + 1));
    double *pp = malloc(sizeof(double) * (size_t)a.r), *tg = malloc(sizeof(double) * (size_t)a.r);
    int rc = 1;
    if (!c || (b_max && !lanes[b_max - 1]) || !toks || !pp || !tg || !tgl) {
        fprintf(stderr, "qwisp bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int32_t i = 0; i <= n_max + b_max; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((rng >> 33) % (uint64_t)m->hp.n_vocab);
    }

    /* Bandwidth first, on the pool the model will use, so both see the same threads. */
    qw_threadpool *bw_tp = qw_threadpool_new(threads);
    bw_probe probes[] = {{"plain", 1, false, 0}, {"prefetch", 1, true, 0},
                         {"4-streams", 4, false, 0}, {"4-streams+prefetch", 4, true, 0}};
    enum { N_PROBES = sizeof probes / sizeof probes[0] };
    const double bw = a.bw_mb > 0 ? measure_read_bw(bw_tp, a.bw_mb, 4, probes, N_PROBES) : 0;
    const char *bw_best = "none";
    for (int k = 0; k < N_PROBES; k++)
        if (bw > 0 && probes[k].bytes_s == bw) bw_best = probes[k].name;
    qw_threadpool_free(bw_tp);

    stats3 spp = {0}, stg = {0};
    qw_phase_times ph_pp, ph_tg; /* QWISP_PROFILE=1: the timed repetitions' phases */
    qw_ctx_phase_times(c, &ph_pp);
    ph_tg = ph_pp;
    if (a.p > 0) {
        if (run_pp(c, toks, (int32_t)a.p, &err) < 0) goto fail; /* warm-up */
        qw_ctx_phase_times_reset(c);
        for (long r = 0; r < a.r; r++) {
            double dt = run_pp(c, toks, (int32_t)a.p, &err);
            if (dt < 0) goto fail;
            pp[r] = a.p / dt;
        }
        spp = summarize(pp, a.r);
        qw_ctx_phase_times(c, &ph_pp);
    }
    if (a.n > 0) {
        if (run_tg(c, toks, (int32_t)(a.n < 16 ? a.n : 16), &err) < 0) goto fail; /* warm-up */
        qw_ctx_phase_times_reset(c);
        for (long r = 0; r < a.r; r++) {
            double dt = run_tg(c, toks, (int32_t)a.n, &err);
            if (dt < 0) goto fail;
            tg[r] = a.n / dt;
        }
        stg = summarize(tg, a.r);
        qw_ctx_phase_times(c, &ph_tg);
    }
    for (int k = 0; k < a.n_lane_tests; k++) {
        const int b = (int)a.lanes[k];
        double *v = tgl + (size_t)k * (size_t)a.r;
        if (run_tg_lanes(c, lanes, b, toks, (int32_t)(a.n < 16 ? a.n : 16), &err) < 0) goto fail; /* warm-up */
        for (long r = 0; r < a.r; r++) {
            double dt = run_tg_lanes(c, lanes, b, toks, (int32_t)a.n, &err);
            if (dt < 0) goto fail;
            v[r] = (double)b * (double)a.n / dt;
        }
        stgl[k] = summarize(v, a.r);
    }
    const double active = (double)qw_model_active_bytes(m);
    /* where the resident weights are read from (QWISP_WEIGHTS_COPY): it moves decode */
    const qw_experts_stats xst = qw_experts_get_stats();
    const uint64_t copied = xst.copied_bytes;
    const double roof = bw > 0 ? bw / active : 0;
    const double pct = roof > 0 && a.n > 0 ? 100.0 * stg.median / roof : 0;
    const long llc = llc_bytes();
    char note_buf[400];
    const char *note = roof > 0 && a.n > 0 ? roofline_note(active, llc, pct, note_buf, sizeof note_buf) : NULL;
    char trial[200]; /* the decode-loop trial's pick, where this process ran one (docs/kernels.md) */
    qw_decode_trial_report(trial, sizeof trial);
    if (a.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", path);
        cJSON_AddNumberToObject(o, "threads", threads);
        cJSON_AddNumberToObject(o, "repetitions", (double)a.r);
        cJSON_AddNumberToObject(o, "n_prompt", (double)a.p);
        cJSON_AddNumberToObject(o, "n_gen", (double)a.n);
        if (a.p > 0) add_stats(o, "pp_tok_s", spp);
        if (a.n > 0) add_stats(o, "tg_tok_s", stg);
        if (a.n_lane_tests) {
            cJSON *lt = cJSON_AddArrayToObject(o, "tg_lanes");
            for (int k = 0; k < a.n_lane_tests; k++) {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddNumberToObject(t, "lanes", (double)a.lanes[k]);
                add_stats(t, "agg_tok_s", stgl[k]);
                cJSON_AddItemToArray(lt, t);
            }
        }
        cJSON_AddNumberToObject(o, "weight_bytes", (double)m->weight_bytes);
        cJSON_AddNumberToObject(o, "active_bytes_per_token", active);
        cJSON_AddNumberToObject(o, "weights_copied_bytes", (double)copied);
        cJSON_AddNumberToObject(o, "mem_read_gb_s", bw / 1e9);
        cJSON_AddStringToObject(o, "mem_read_probe", bw_best);
        cJSON *pr = cJSON_AddObjectToObject(o, "mem_read_probes_gb_s");
        for (int k = 0; k < N_PROBES; k++) cJSON_AddNumberToObject(pr, probes[k].name, probes[k].bytes_s / 1e9);
        cJSON_AddNumberToObject(o, "roofline_tg_tok_s", roof);
        cJSON_AddNumberToObject(o, "roofline_pct", pct);
        cJSON_AddNumberToObject(o, "llc_bytes", (double)llc);
        if (note) cJSON_AddStringToObject(o, "roofline_note", note);
        if (trial[0]) cJSON_AddStringToObject(o, "decode_loop", trial);
        if (ph_pp.passes || ph_tg.passes) {
            cJSON *prof = cJSON_AddObjectToObject(o, "profile");
            if (ph_pp.passes) qw_phase_report_json(prof, "pp", &ph_pp);
            if (ph_tg.passes) qw_phase_report_json(prof, "tg", &ph_tg);
        }
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("model: %s  threads: %d  repetitions: %ld\n", path, threads, a.r);
        printf("%-8s %10s %10s %10s\n", "test", "min t/s", "median", "max");
        if (a.p > 0) printf("pp%-6ld %10.2f %10.2f %10.2f\n", a.p, spp.min, spp.median, spp.max);
        if (a.n > 0) printf("tg%-6ld %10.2f %10.2f %10.2f\n", a.n, stg.min, stg.median, stg.max);
        for (int k = 0; k < a.n_lane_tests; k++) {
            char name[32];
            snprintf(name, sizeof name, "tg%ld@%ld", a.n, a.lanes[k]);
            printf("%-8s %10.2f %10.2f %10.2f   (aggregate of %ld lanes)\n", name, stgl[k].min, stgl[k].median,
                   stgl[k].max, a.lanes[k]);
        }
        printf("active weights/token: %.1f MB   memory read: %.2f GB/s (best of 4 probes: %s)   roofline: %.2f tok/s",
               active / 1e6, bw / 1e9, bw_best, roof);
        if (a.n > 0 && roof > 0) printf("   reached: %.1f%%", pct);
        printf("\n");
        if (note) printf("note: %s\n", note);
        if (trial[0]) printf("decode loop: %s\n", trial);
        char label[32];
        snprintf(label, sizeof label, "pp%ld", a.p);
        qw_phase_report_print(stdout, label, &ph_pp);
        snprintf(label, sizeof label, "tg%ld", a.n);
        qw_phase_report_print(stdout, label, &ph_tg);
        qw_device_stats ds; /* on a device there are no host weight reads to name */
        const bool on_host = !qw_backend_active_stats(&ds);
        if (on_host && copied) printf("weights: an anonymous copy of %.2f GB (QWISP_WEIGHTS_COPY=1)\n", copied / 1e9);
        else if (on_host && xst.tier == QW_TIER_RESIDENT)
            printf("weights: read through the file mapping (page cache; docs/tiers.md)\n");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qwisp bench: %s\n", err.msg);
done:
    free(toks);
    free(pp);
    free(tg);
    free(tgl);
    for (int i = 0; lanes && i < b_max; i++) qw_ctx_free(lanes[i]);
    free(lanes);
    qw_ctx_free(c);
    qw_model_free(m);
    return rc;
}
