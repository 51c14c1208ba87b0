/* options.c — the knob table of options.h: parsing, validation, lookup and
 * printing.  Values are held as text plus a parsed integer; the source of each
 * value ("default", "env", "env (alias X)", "flag") is kept for `qwisp config`.
 */
#include "qwisp/options.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* SECRET is a string that `qwisp config` never prints (API keys). */
typedef enum { T_INT, T_STR, T_ENUM, T_SIZE, T_SECRET } opt_type;
#define STR T_STR
#define INT T_INT
#define ENUM T_ENUM
#define SIZE T_SIZE
#define SECRET T_SECRET

typedef struct {
    const char *name, *alias;
    opt_type type;
    const char *def;
    int64_t min, max;
    const char *help;
} opt_def;

static const opt_def g_defs[QW_OPT_COUNT] = {
#define QW_OPT_DEF(id, name, alias, type, def, mn, mx, help) {name, alias, type, def, mn, mx, help},
    QW_OPTIONS(QW_OPT_DEF)
#undef QW_OPT_DEF
};

/* Allowed words for ENUM options, by option id. */
static const char *enum_words(qw_opt id) {
    switch (id) {
    case QW_OPT_LOG: return "error|warn|info|debug";
    case QW_OPT_SIMD: return "auto|avx512-amx|avx512|avx512-nobf16|avx512-novbmi|avx512-novbmi-nobf16|avx2|scalar";
    case QW_OPT_KV_TYPE: return "f16|f32";
    case QW_OPT_TUNE: return "auto|cached|off";
    case QW_OPT_POOL_FIT: return "classes|exact";
    case QW_OPT_STREAM_IO: return "auto|uring|pread";
    case QW_OPT_EXPERT_POLICY: return "lfu|lru";
    case QW_OPT_BACKEND: return "auto|cpu|cuda";
    case QW_OPT_DEVICE_PIN: return "auto|on|off";
    case QW_OPT_DEVICE_MISSES: return "copy|host";
    case QW_OPT_DEVICE_MMA: return "auto|always|off";
    default: return "";
    }
}

typedef struct {
    char *text;
    int64_t ival;
    char source[48];
} opt_val;

static opt_val g_vals[QW_OPT_COUNT];

static int parse_int(const char *name, const char *s, int64_t mn, int64_t mx, bool size, int64_t *out,
                     qw_error *err) {
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno)
        return qw_fail(err, "%s='%s': not a number", name, s);
    int64_t mult = 1;
    if (size && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mult = 1LL << 10; break;
        case 'M': mult = 1LL << 20; break;
        case 'G': mult = 1LL << 30; break;
        default: return qw_fail(err, "%s='%s': unknown size suffix '%c' (use K, M or G)", name, s, *end);
        }
        end++;
        if (toupper((unsigned char)*end) == 'B') end++;
    }
    if (*end) return qw_fail(err, "%s='%s': trailing characters '%s'", name, s, end);
    if (v < mn || v > mx)
        return qw_fail(err, "%s='%s': out of range [%lld, %lld]", name, s, (long long)mn, (long long)mx);
    *out = (int64_t)v * mult;
    return 0;
}

static int assign(qw_opt id, const char *text, const char *source, qw_error *err) {
    const opt_def *d = &g_defs[id];
    int64_t iv = 0;
    if (d->type == T_INT || d->type == T_SIZE) {
        if (parse_int(d->name, text, d->min, d->max, d->type == T_SIZE, &iv, err)) return -1;
    } else if (d->type == T_ENUM) {
        const char *w = enum_words(id);
        size_t n = strlen(text);
        const char *p = w;
        bool ok = false;
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (len == n && !strncmp(p, text, n)) ok = true;
            p += len + (bar ? 1 : 0);
        }
        if (!ok) return qw_fail(err, "%s='%s': expected one of %s", d->name, text, w);
    }
    free(g_vals[id].text);
    g_vals[id].text = qw_xstrdup(text);
    g_vals[id].ival = iv;
    snprintf(g_vals[id].source, sizeof g_vals[id].source, "%s", source);
    return 0;
}

/* An option's default, or unset when it has none (a default in the table
 * always parses: tests/cli/t_knobs_doc.sh lists them through `qwisp config`). */
static void set_default(qw_opt id) {
    qw_error err = {0};
    if (g_defs[id].def && assign(id, g_defs[id].def, "default", &err) == 0) return;
    free(g_vals[id].text);
    g_vals[id].text = NULL;
    g_vals[id].ival = 0;
    snprintf(g_vals[id].source, sizeof g_vals[id].source, "unset");
}

static void load_defaults(void) {
    for (int i = 0; i < QW_OPT_COUNT; i++) set_default((qw_opt)i);
}

/* Every reader goes through this: a library caller that never called
 * qw_options_init still reads the table's defaults, not zeros. */
static pthread_once_t g_defaults_once = PTHREAD_ONCE_INIT;
static void ensure_loaded(void) { pthread_once(&g_defaults_once, load_defaults); }

/* The option's environment text (its name, else its alias), with the source
 * written into src; NULL when neither is set to something non-empty. */
static const char *env_text(const opt_def *d, char *src, size_t cap) {
    const char *env = getenv(d->name);
    snprintf(src, cap, "env");
    if (!env && d->alias) {
        env = getenv(d->alias);
        snprintf(src, cap, "env (%s)", d->alias);
    }
    return env && *env ? env : NULL;
}

int qw_options_init(qw_error *err) {
    ensure_loaded();
    for (int i = 0; i < QW_OPT_COUNT; i++) {
        char src[48];
        const char *env = env_text(&g_defs[i], src, sizeof src);
        if (!env) set_default((qw_opt)i);
        else if (assign((qw_opt)i, env, src, err)) return -1;
    }
    return 0;
}

int qw_opt_set(qw_opt id, const char *text, const char *source, qw_error *err) {
    ensure_loaded();
    return assign(id, text, source, err);
}

void qw_opt_reset(qw_opt id) {
    ensure_loaded();
    qw_error err = {0};
    char src[48];
    const char *env = env_text(&g_defs[id], src, sizeof src);
    if (env && assign(id, env, src, &err) == 0) return;
    set_default(id);
}

int64_t qw_opt_int(qw_opt id) {
    ensure_loaded();
    return g_vals[id].ival;
}

const char *qw_opt_str(qw_opt id) {
    ensure_loaded();
    return g_vals[id].text;
}

const char *qw_opt_name(qw_opt id) { return g_defs[id].name; }

bool qw_opt_is_set(qw_opt id) {
    ensure_loaded();
    return g_vals[id].text && strcmp(g_vals[id].source, "default") != 0;
}

void qw_options_print(FILE *f) {
    ensure_loaded();
    for (int i = 0; i < QW_OPT_COUNT; i++) {
        const opt_def *d = &g_defs[i];
        const char *shown = g_vals[i].text ? g_vals[i].text : "(unset)";
        if (d->type == T_SECRET && g_vals[i].text) shown = "(hidden)";
        fprintf(f, "%-28s %-12s %-16s %s", d->name, shown,
                g_vals[i].source[0] ? g_vals[i].source : "unset", d->help);
        if (d->alias) fprintf(f, " (alias %s)", d->alias);
        fputc('\n', f);
    }
}

/* The table as Markdown, for docs/knobs.md (tests/cli/t_knobs_doc.sh checks
 * that the file holds exactly this, so the page cannot drift from the code). */
void qw_options_print_markdown(FILE *f) {
    fprintf(f, "| knob | default | values | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < QW_OPT_COUNT; i++) {
        const opt_def *d = &g_defs[i];
        fprintf(f, "| `%s`", d->name);
        if (d->alias) fprintf(f, " (alias `%s`)", d->alias);
        fprintf(f, " | %s | ", d->def ? d->def : "unset");
        switch (d->type) {
        case T_INT: fprintf(f, "integer %lld..%lld", (long long)d->min, (long long)d->max); break;
        case T_SIZE: fprintf(f, "size (K/M/G suffixes)"); break;
        case T_ENUM: /* one of the words, comma-separated: a '|' would split the cell */
            for (const char *w = enum_words((qw_opt)i); *w;) {
                const size_t n = strcspn(w, "|");
                fprintf(f, "%s`%.*s`", w == enum_words((qw_opt)i) ? "" : ", ", (int)n, w);
                w += n + (w[n] == '|');
            }
            break;
        case T_SECRET: fprintf(f, "text (shown as `(hidden)`)"); break;
        default: fprintf(f, "text"); break;
        }
        /* a '|' inside the help text would end the cell */
        fputs(" | ", f);
        for (const char *c = d->help; *c; c++) {
            if (*c == '|') fputs("\\|", f);
            else fputc(*c, f);
        }
        fputs(" |\n", f);
    }
}
