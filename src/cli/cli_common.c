/* cli_common.c — see cli_common.h.  The natural text used by --prompt-tokens
 * is an original passage written for qwisp (no licence concerns); it is
 * tokenized and repeated until exactly n tokens are available. */
#include "cli_common.h"

#include "qwisp/options.h"
#include "qwisp/quant.h"
#include "qwisp/threadpool.h"
#include "qwisp/tune.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int qw_cli_flag(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **val) {
    if (strcmp(argv[*i], flag) != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "qwisp %s: %s needs a value\n", cmd, flag);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int qw_cli_sampler_flag(const char *C, int argc, char **argv, int *ip, qw_sampler_params *sp) {
    const char *v = NULL;
    int r, i = *ip;
    long lv;
    int rc = 1;
    if (QW_CLI_FLAG("--temp")) rc = r < 0 || qw_cli_float(C, "--temp", v, 0, 100, &sp->temp) ? -1 : 1;
    else if (QW_CLI_FLAG("--top-p")) rc = r < 0 || qw_cli_float(C, "--top-p", v, 0, 1, &sp->top_p) ? -1 : 1;
    else if (QW_CLI_FLAG("--min-p")) rc = r < 0 || qw_cli_float(C, "--min-p", v, 0, 1, &sp->min_p) ? -1 : 1;
    else if (QW_CLI_FLAG("--top-k")) {
        rc = r < 0 || qw_cli_long(C, "--top-k", v, 0, 1 << 24, &lv) ? -1 : 1;
        if (rc > 0) sp->top_k = (int32_t)lv;
    } else if (QW_CLI_FLAG("--seed")) rc = r < 0 || qw_cli_u64(C, "--seed", v, &sp->seed) ? -1 : 1;
    else if (QW_CLI_FLAG("--penalty-last-n")) {
        rc = r < 0 || qw_cli_long(C, "--penalty-last-n", v, 0, 1 << 20, &lv) ? -1 : 1;
        if (rc > 0) sp->penalty_last_n = (int32_t)lv;
    } else {
        /* The penalties look back 64 tokens unless --penalty-last-n says otherwise. */
        float *dst = NULL;
        double lo = -2, hi = 2;
        const char *f = argv[i];
        if (QW_CLI_FLAG("--repeat-penalty")) dst = &sp->repeat_penalty, lo = 0, hi = 10;
        else if (QW_CLI_FLAG("--presence-penalty")) dst = &sp->presence_penalty;
        else if (QW_CLI_FLAG("--frequency-penalty")) dst = &sp->frequency_penalty;
        else return 0;
        rc = r < 0 || qw_cli_float(C, f, v, lo, hi, dst) ? -1 : 1;
        if (rc > 0 && sp->penalty_last_n == 0) sp->penalty_last_n = 64;
    }
    *ip = i;
    return rc;
}

int qw_cli_long(const char *cmd, const char *flag, const char *s, long min, long max, long *out) {
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno) {
        fprintf(stderr, "qwisp %s: %s '%s': not an integer\n", cmd, flag, s);
        return -1;
    }
    if (v < min || v > max) {
        fprintf(stderr, "qwisp %s: %s '%s': out of range [%ld, %ld]\n", cmd, flag, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int qw_cli_float(const char *cmd, const char *flag, const char *s, double min, double max, float *out) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "qwisp %s: %s '%s': not a number\n", cmd, flag, s);
        return -1;
    }
    if (v < min || v > max) {
        fprintf(stderr, "qwisp %s: %s '%s': out of range [%g, %g]\n", cmd, flag, s, min, max);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int qw_cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno || s[0] == '-') {
        fprintf(stderr, "qwisp %s: %s '%s': not a non-negative integer\n", cmd, flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

const char *qw_cli_model_path(const char *cmd, const char *flag_value) {
    if (flag_value) return flag_value;
    const char *env = qw_opt_str(QW_OPT_MODEL);
    if (env) return env;
    static char path[PATH_MAX + 32];
    if (file_exists("models/default.gguf")) return "models/default.gguf";
    /* Next to the binary: <repo>/build/qwisp -> <repo>/models/default.gguf */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/../models/default.gguf", exe);
            if (file_exists(path)) return path;
            /* installed: PREFIX/bin/qwisp -> PREFIX/share/qwisp/default.gguf (make install) */
            snprintf(path, sizeof path, "%s/../share/qwisp/default.gguf", exe);
            if (file_exists(path)) return path;
        }
    }
    fprintf(stderr,
            "qwisp %s: no model given and models/default.gguf not found "
            "(use -m FILE, set QWISP_MODEL, or run 'make models/default.gguf')\n",
            cmd);
    return NULL;
}

int qw_cli_threads(long flag_value) {
    if (flag_value > 0) return (int)flag_value;
    int64_t env = qw_opt_int(QW_OPT_THREADS);
    if (env > 0) return (int)env;
    return qw_cpu_count();
}

static char g_tune_path[4096], g_tune_state[600] = "not read";
static int g_tune_threads;

const char *qw_cli_tune_path(void) { return g_tune_path; }
const char *qw_cli_tune_state(void) { return g_tune_state; }
int qw_cli_tune_threads(void) { return g_tune_threads; }

int qw_cli_argv_threads(int argc, char **argv) {
    long n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--")) break; /* a command line for another program follows (simulate) */
        if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && i + 1 < argc) v = argv[i + 1];
        if (v) {
            char *end;
            const long x = strtol(v, &end, 10);
            n = *v && !*end && x > 0 && x <= 1024 ? x : 0;
        }
    }
    return qw_cli_threads(n);
}

void qw_cli_tune_init(int threads) {
    g_tune_threads = threads;
    qw_error err = {0};
    const char *file = qw_opt_str(QW_OPT_TUNE_FILE);
    if (file && *file) snprintf(g_tune_path, sizeof g_tune_path, "%s", file);
    else if (qw_tune_default_path(getenv("XDG_CACHE_HOME"), getenv("HOME"), qw_simd_level(), g_tune_path, sizeof g_tune_path, &err))
        g_tune_path[0] = 0;
    if (!strcmp(qw_opt_str(QW_OPT_TUNE), "off")) snprintf(g_tune_state, sizeof g_tune_state, "off");
    else if (!g_tune_path[0]) snprintf(g_tune_state, sizeof g_tune_state, "unusable: %s", err.msg);
    else {
        const int rc = qw_tune_load(g_tune_path, threads, &err);
        const bool auto_tune = !strcmp(qw_opt_str(QW_OPT_TUNE), "auto");
        if (rc < 0 || rc == 2) {
            snprintf(g_tune_state, sizeof g_tune_state, "%s: %s", rc < 0 ? "unusable" : "stale", err.msg);
            /* a stale cache under auto is replaced at first use (tune_first_use.c) */
            if (rc < 0 || !auto_tune)
                fprintf(stderr, "qwisp: %s; using the built-in defaults (run `qwisp tune` to recalibrate)\n", err.msg);
        } else snprintf(g_tune_state, sizeof g_tune_state, rc == 0 ? "loaded" : "absent");
    }
    static const struct { qw_opt opt; qw_tune_id id; } knobs[] = {
        {QW_OPT_DECODE_ITEM_BYTES, QW_TUNE_DECODE_ITEM},
        {QW_OPT_DECODE_AHEAD_BYTES, QW_TUNE_DECODE_AHEAD},
        {QW_OPT_DECODE_PREFETCH_L2, QW_TUNE_DECODE_PREFETCH_L2},
        {QW_OPT_DECODE_ROWS, QW_TUNE_DECODE_ROWS},
        {QW_OPT_PREFILL_ROWS, QW_TUNE_PREFILL_ROWS},
        {QW_OPT_DECODE_GEMV, QW_TUNE_DECODE_GEMV},
    };
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (qw_opt_str(knobs[i].opt)) qw_tune_set(knobs[i].id, qw_opt_int(knobs[i].opt), QW_TUNE_SRC_KNOB);
}

static const char k_natural_text[] =
    "The river came down from the hills in the spring, brown with snowmelt and loud enough to "
    "hear from the village. Every year the miller walked the bank at dawn to see how high the "
    "water had climbed on the old stone marker, and every year he wrote the number in a ledger "
    "that his grandmother had started. Some pages were stained with flour, others with rain. "
    "Children liked to read the ledger aloud, because the numbers told stories: the year the "
    "bridge washed out, the dry summer when the wheel stood still for six weeks, the winter the "
    "ice was thick enough to carry a horse and cart. Nobody in the village could say why the "
    "miller kept counting, only that the counting had become part of the season, like the first "
    "swallows or the smell of cut grass. When strangers asked about it, he would open the book, "
    "run a finger down the columns, and explain that a river remembers more than people do. "
    "In the evenings the square filled with traders selling apples, wool, copper pots and "
    "bright paper lanterns. A teacher explained fractions with slices of bread; a carpenter "
    "argued about the price of oak; two sisters practised a song for the harvest festival. "
    "Later, when the lamps were lit, the talk turned to roads and weather, to letters from "
    "cousins in the city, and to the question that every village asks in the end: what will "
    "the next year bring, and will we be ready for it? ";

int32_t *qw_cli_natural_prompt(const qw_tokenizer *tok, int32_t n) {
    size_t m = 0;
    int32_t *base = qw_tokenize(tok, k_natural_text, sizeof k_natural_text - 1, false, &m);
    if (!base || m == 0) {
        free(base);
        return NULL;
    }
    int32_t *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!out) {
        free(base);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) out[i] = base[(size_t)i % m];
    free(base);
    return out;
}

int32_t *qw_cli_parse_ids(const char *cmd, const char *s, size_t *n_out) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    const char *p = s;
    while (ids && *p) {
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "qwisp %s: bad token id list at '%s' (expected e.g. 1,2,3)\n", cmd, p);
            free(ids);
            return NULL;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, (cap *= 2) * sizeof(int32_t));
            if (!g) break;
            ids = g;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!ids || n == 0) {
        fprintf(stderr, "qwisp %s: empty token id list\n", cmd);
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

char *qw_cli_read_file(const char *cmd, const char *path, size_t *len) {
    /* A device such as /dev/zero or /dev/urandom never ends: reading it would
     * grow the buffer until the OOM killer steps in.  Regular files and pipes
     * (`--prompt-file <(cmd)`) are read, up to a cap far past any context. */
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "qwisp %s: %s: cannot open: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "qwisp %s: %s: not a regular file (%s); give a text file\n", cmd, path,
                S_ISDIR(st.st_mode) ? "a directory" : S_ISSOCK(st.st_mode) ? "a socket" : "a device");
        return NULL;
    }
    qw_error err = {0};
    char *buf = qw_read_file(path, QW_CLI_MAX_FILE_BYTES, len, &err);
    if (!buf) fprintf(stderr, "qwisp %s: %s\n", cmd, err.msg);
    return buf;
}

uint64_t qw_cli_random_seed(void) {
    /* 32 bits: the seed is printed in --json, where a number above 2^53
     * would not survive a round trip through a double. */
    uint32_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s)
        s = (uint32_t)(qw_hash64(&s, sizeof s, (uint64_t)(qw_time_s() * 1e9)) ^ (uint64_t)getpid());
    return s;
}

void qw_cli_piece(const qw_tokenizer *tok, int32_t id, qw_strbuf *out) {
    char buf[256];
    int n = qw_token_to_bytes(tok, id, buf, sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    qw_utf8_sanitize(out, buf, (size_t)n);
    qw_strbuf_add(out, "", 0); /* NUL-terminated even when empty */
}

void qw_cli_print_piece(FILE *f, const qw_tokenizer *tok, int32_t id) {
    char buf[256];
    int n = qw_token_to_bytes(tok, id, buf, sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    fputc('"', f);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}
