/* tune.c — the kernels' machine-dependent parameters (tune.h): the values in
 * force and their sources, the cache key, and the cache file.
 *
 * The cache file is text, one "key value" per line, so a person can read it:
 *
 *     qwisp-tune 1
 *     machine AMD EPYC 9R14 96-Core Processor | 5d1c…
 *     threads 2
 *     decode_item_bytes 262144
 *     decode_ahead_bytes 8192
 *     prefill_rows 32
 *     check 9f0c2b7d3a1e4f60
 *
 * `check` is the FNV-1a hash of every byte before that line: a truncated or
 * edited file fails it.  Loading is all or nothing — a file with any fault
 * (bad header, another machine's key or thread count, a missing, repeated,
 * unknown or out-of-range value, a bad check) changes no value, and the caller prints one
 * line saying why.  Values are only ever clamped into range by qw_tune_set;
 * none of them can change a result bit (tune.h).
 */
#include "qwisp/tune.h"
#include "qwisp/quant.h"

#include <cpuid.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *key, *help;
    int64_t def, min, max;
} tune_def;

static const tune_def k_defs[QW_TUNE_COUNT] = {
#define QW_TUNE_DEF(id, key, def, mn, mx, help) {key, help, def, mn, mx},
    QW_TUNE_PARAMS(QW_TUNE_DEF)
#undef QW_TUNE_DEF
};

int64_t qw_tune_vals[QW_TUNE_COUNT] = {
#define QW_TUNE_VAL(id, key, def, ...) def,
    QW_TUNE_PARAMS(QW_TUNE_VAL)
#undef QW_TUNE_VAL
};
static qw_tune_src g_src[QW_TUNE_COUNT];

const char *qw_tune_key_name(qw_tune_id id) { return k_defs[id].key; }
const char *qw_tune_help(qw_tune_id id) { return k_defs[id].help; }
int64_t qw_tune_default(qw_tune_id id) { return k_defs[id].def; }
qw_tune_src qw_tune_source(qw_tune_id id) { return g_src[id]; }

const char *qw_tune_src_name(qw_tune_src src) {
    static const char *names[] = {"default", "calibrated", "knob", "measured in decode"};
    return (unsigned)src < 4 ? names[src] : "?";
}

static int64_t clamp(qw_tune_id id, int64_t v) {
    if (v < k_defs[id].min) v = k_defs[id].min;
    if (v > k_defs[id].max) v = k_defs[id].max;
    if (id == QW_TUNE_PREFILL_ROWS) v = (v + 3) & ~(int64_t)3;
    if (id == QW_TUNE_DECODE_ROWS) v = v <= 2 ? 2 : v <= 4 ? 4 : 8;
    return v;
}

int64_t qw_tune_effective(qw_tune_id id) {
    if (id == QW_TUNE_PREFILL_ROWS && g_src[id] == QW_TUNE_SRC_DEFAULT && qw_gemm_wide_get(QW_TYPE_Q8_0))
        return QW_TUNE_AMX_PREFILL_ROWS;
    return qw_tune_vals[id];
}

int64_t qw_tune_set(qw_tune_id id, int64_t v, qw_tune_src src) {
    qw_tune_vals[id] = clamp(id, v);
    g_src[id] = src;
    return qw_tune_vals[id];
}

void qw_tune_reset(void) {
    for (int i = 0; i < QW_TUNE_COUNT; i++) qw_tune_set((qw_tune_id)i, k_defs[i].def, QW_TUNE_SRC_DEFAULT);
}

/* ---- the key: CPU model + build id -------------------------------------- */

static void cpu_model(char *buf, size_t n) {
    unsigned r[12] = {0};
    unsigned a, b, c, d;
    snprintf(buf, n, "unknown CPU");
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = 0;
    const char *p = s;
    while (*p == ' ') p++;
    size_t len = strlen(p);
    while (len && p[len - 1] == ' ') len--;
    snprintf(buf, n, "%.*s", (int)len, p);
}

typedef struct {
    char hex[2 * 64 + 1];
} build_id;

/* The main executable's NT_GNU_BUILD_ID note (the first object dl_iterate_phdr
 * reports is the executable). */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *p) {
    build_id *id = p;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const char *note = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = note + ph->p_memsz;
        while (note + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)note;
            const char *name = note + sizeof *nh, *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) && nh->n_descsz <= 64) {
                for (unsigned k = 0; k < nh->n_descsz; k++)
                    snprintf(id->hex + 2 * k, 3, "%02x", (unsigned char)desc[k]);
                return 1;
            }
            note = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1; /* only the executable */
}

const char *qw_tune_machine_key(void) {
    static char key[256];
    if (key[0]) return key;
    char cpu[64];
    cpu_model(cpu, sizeof cpu);
    build_id id = {{0}};
    dl_iterate_phdr(find_build_id, &id);
    if (!id.hex[0]) { /* no build-id note: the binary's size and mtime stand in */
        struct stat st;
        if (stat("/proc/self/exe", &st) == 0)
            snprintf(id.hex, sizeof id.hex, "size%lld-mtime%lld", (long long)st.st_size, (long long)st.st_mtime);
        else snprintf(id.hex, sizeof id.hex, "unknown");
    }
    /* the SIMD level too: QWISP_SIMD=avx512 on an AMX machine runs other
     * kernels, whose best work items differ */
    snprintf(key, sizeof key, "%s | %s | %s", cpu, qw_simd_level(), id.hex);
    return key;
}

/* ---- the file ------------------------------------------------------------ */

int qw_tune_default_path(const char *xdg_cache_home, const char *home, const char *level, char *buf, size_t n,
                         qw_error *err) {
    int len;
    if (xdg_cache_home && *xdg_cache_home) len = snprintf(buf, n, "%s/qwisp/tune-%s.txt", xdg_cache_home, level);
    else if (home && *home) len = snprintf(buf, n, "%s/.cache/qwisp/tune-%s.txt", home, level);
    else return qw_fail(err, "tune cache: neither XDG_CACHE_HOME nor HOME is set");
    if (len < 0 || (size_t)len >= n) return qw_fail(err, "tune cache: path too long");
    return 0;
}

enum { MAX_FILE = 4096 };

int qw_tune_load(const char *path, int threads, qw_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 1;
        return qw_fail(err, "tune cache %s: %s", path, strerror(errno));
    }
    char text[MAX_FILE + 1];
    const size_t len = fread(text, 1, MAX_FILE + 1, f);
    fclose(f);
    if (len > MAX_FILE) return qw_fail(err, "tune cache %s: corrupt (larger than %d bytes)", path, MAX_FILE);
    text[len] = 0;
    if (memchr(text, 0, len)) return qw_fail(err, "tune cache %s: corrupt (a NUL byte)", path);

    /* the check line first: it covers every byte before it */
    char *chk = strstr(text, "\ncheck ");
    if (!chk) return qw_fail(err, "tune cache %s: corrupt (no check line)", path);
    char want[17];
    snprintf(want, sizeof want, "%016" PRIx64, qw_hash64(text, (size_t)(chk + 1 - text), 0));
    const char *got = chk + 7;
    if (strncmp(got, want, 16) || (got[16] != 0 && strcmp(got + 16, "\n")))
        return qw_fail(err, "tune cache %s: corrupt (the check does not match its text)", path);
    chk[1] = 0;

    int64_t vals[QW_TUNE_COUNT];
    bool seen[QW_TUNE_COUNT] = {0}, header = false, machine = false;
    long long measured_threads = 0;
    int lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *sp = strchr(line, ' ');
        if (!sp) return qw_fail(err, "tune cache %s:%d: corrupt (no value on the line)", path, lineno);
        *sp = 0;
        const char *k = line, *v = sp + 1;
        if (lineno == 1) {
            if (strcmp(k, "qwisp-tune") || strcmp(v, "1"))
                return qw_fail(err, "tune cache %s: corrupt (not a version-1 qwisp tune file)", path);
            header = true;
        } else if (!strcmp(k, "machine")) {
            if (strcmp(v, qw_tune_machine_key())) {
                qw_fail(err, "tune cache %s: written for another CPU, SIMD level or binary (%s)", path, v);
                return 2; /* well formed, someone else's: stale, not corrupt */
            }
            machine = true;
        } else if (!strcmp(k, "threads")) {
            char *end;
            errno = 0;
            measured_threads = strtoll(v, &end, 10);
            if (errno || end == v || *end || measured_threads < 1 || measured_threads > 1 << 20)
                return qw_fail(err, "tune cache %s:%d: corrupt (threads '%s')", path, lineno, v);
        } else {
            int id = -1;
            for (int i = 0; i < QW_TUNE_COUNT; i++)
                if (!strcmp(k, k_defs[i].key)) id = i;
            if (id < 0) return qw_fail(err, "tune cache %s:%d: corrupt (unknown key '%s')", path, lineno, k);
            if (seen[id]) return qw_fail(err, "tune cache %s:%d: corrupt ('%s' twice)", path, lineno, k);
            char *end;
            errno = 0;
            const long long x = strtoll(v, &end, 10);
            if (errno || end == v || *end || x < k_defs[id].min || x > k_defs[id].max)
                return qw_fail(err, "tune cache %s:%d: corrupt (%s '%s' is not in [%lld, %lld])", path, lineno, k, v,
                               (long long)k_defs[id].min, (long long)k_defs[id].max);
            vals[id] = x;
            seen[id] = true;
        }
    }
    if (!header) return qw_fail(err, "tune cache %s: corrupt (empty)", path);
    if (!machine) return qw_fail(err, "tune cache %s: corrupt (no machine line)", path);
    if (!measured_threads) return qw_fail(err, "tune cache %s: corrupt (no threads line)", path);
    for (int i = 0; i < QW_TUNE_COUNT; i++)
        if (!seen[i]) return qw_fail(err, "tune cache %s: corrupt (no %s)", path, k_defs[i].key);
    if (threads > 0 && measured_threads != threads) {
        qw_fail(err, "tune cache %s: measured with %lld threads, this run uses %d", path, measured_threads, threads);
        return 2; /* well formed, for another thread count: stale, not corrupt */
    }
    for (int i = 0; i < QW_TUNE_COUNT; i++) qw_tune_set((qw_tune_id)i, vals[i], QW_TUNE_SRC_CALIBRATED);
    return 0;
}

int qw_tune_save(const char *path, const int64_t vals[QW_TUNE_COUNT], int threads, qw_error *err) {
    qw_error why = {0};
    if (qw_mkdir_p(path, true, &why)) return qw_fail(err, "tune cache: %s", why.msg);
    char text[MAX_FILE];
    int len = snprintf(text, sizeof text, "qwisp-tune 1\nmachine %s\nthreads %d\n", qw_tune_machine_key(), threads);
    for (int i = 0; i < QW_TUNE_COUNT && len > 0 && len < MAX_FILE; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s %lld\n", k_defs[i].key,
                        (long long)clamp((qw_tune_id)i, vals[i]));
    if (len <= 0 || len >= MAX_FILE - 32) return qw_fail(err, "tune cache %s: text too long", path);
    qw_atomic_file w;
    FILE *f = qw_atomic_open(&w, path, err);
    if (!f) return -1;
    fprintf(f, "%scheck %016" PRIx64 "\n", text, qw_hash64(text, (size_t)len, 0));
    return qw_atomic_commit(&w, err);
}
