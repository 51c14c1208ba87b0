/* safetensors.c — safetensors reader: mmap, validate the JSON header, index.
 *
 * What it owns: the mappings of one or more .safetensors files, the tensor
 * table (one sorted array over all shards, so lookups are a binary search
 * even for checkpoints with tens of thousands of expert tensors), and the
 * dtype -> f32 conversion used by the converter.
 *
 * Validation order for one file (each failure is one message naming the file
 * and, where there is one, the tensor):
 *   1. at least 8 bytes; header length N <= file size - 8 and <= 100 MB;
 *   2. the N bytes parse as a JSON object (cJSON, with an explicit length:
 *      the header is not NUL-terminated in the file);
 *   3. every entry but "__metadata__" is an object with a known dtype, a
 *      shape of 0..8 non-negative integers, data_offsets [begin, end] with
 *      begin <= end <= the data buffer's size, and end - begin equal to
 *      prod(shape) * dtype size, computed with overflow checks.
 * Across shards: no tensor name twice, and every name the index's weight_map
 * gives must be in the shard it names (and nothing else is read).
 * Invariant after open: every tensor's bytes lie inside its file's mapping.
 */
#include "qwisp/safetensors.h"


#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)

typedef struct st_file {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped; /* munmap on close (false for open_memory) */
} st_file;

struct qw_safetensors {
    st_file *files;
    size_t n_files;
    qw_st_tensor *t;
    size_t n_t, cap_t;
};

static const struct {
    const char *name;
    size_t size;
} k_dtypes[] = {
    [QW_ST_F32] = {"F32", 4},      [QW_ST_F16] = {"F16", 2},       [QW_ST_BF16] = {"BF16", 2},
    [QW_ST_F64] = {"F64", 8},      [QW_ST_I64] = {"I64", 8},       [QW_ST_I32] = {"I32", 4},
    [QW_ST_I16] = {"I16", 2},      [QW_ST_I8] = {"I8", 1},         [QW_ST_U64] = {"U64", 8},
    [QW_ST_U32] = {"U32", 4},      [QW_ST_U16] = {"U16", 2},       [QW_ST_U8] = {"U8", 1},
    [QW_ST_BOOL] = {"BOOL", 1},    [QW_ST_F8_E4M3] = {"F8_E4M3", 1}, [QW_ST_F8_E5M2] = {"F8_E5M2", 1},
};
#define N_DTYPES (sizeof k_dtypes / sizeof k_dtypes[0])

const char *qw_st_dtype_name(qw_st_dtype d) {
    return (size_t)d < N_DTYPES ? k_dtypes[d].name : "?";
}

size_t qw_st_dtype_size(qw_st_dtype d) {
    return (size_t)d < N_DTYPES ? k_dtypes[d].size : 0;
}

/* A JSON number that is a non-negative integer below 2^53. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!isfinite(v) || v < 0 || v != floor(v) || v >= 9007199254740992.0) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_entry(qw_safetensors *st, size_t fi, const cJSON *e, const uint8_t *data,
                       uint64_t dsize, qw_error *err) {
    const char *path = st->files[fi].path, *name = e->string;
    if (!cJSON_IsObject(e)) return qw_fail(err, "%s: tensor '%s': entry is not a JSON object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return qw_fail(err, "%s: tensor '%s': missing \"dtype\" string", path, name);
    size_t d = 0;
    while (d < N_DTYPES && strcmp(k_dtypes[d].name, dt->valuestring) != 0) d++;
    if (d == N_DTYPES) return qw_fail(err, "%s: tensor '%s': unknown dtype '%s'", path, name, dt->valuestring);
    if (!cJSON_IsArray(sh)) return qw_fail(err, "%s: tensor '%s': missing \"shape\" array", path, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > QW_ST_MAX_DIMS) return qw_fail(err, "%s: tensor '%s': %d dims (at most %d)", path, name, nd, QW_ST_MAX_DIMS);
    qw_st_tensor t = {.file = path, .dtype = (qw_st_dtype)d, .n_dims = nd, .n_elems = 1};
    uint64_t n = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        if (json_uint(cJSON_GetArrayItem(sh, i), &v) != 0)
            return qw_fail(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        if (v != 0 && n > (UINT64_MAX >> 1) / v)
            return qw_fail(err, "%s: tensor '%s': shape overflows", path, name);
        n *= v;
        t.shape[i] = (int64_t)v;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || json_uint(cJSON_GetArrayItem(of, 0), &b) ||
        json_uint(cJSON_GetArrayItem(of, 1), &en))
        return qw_fail(err, "%s: tensor '%s': \"data_offsets\" must be [begin, end] integers", path, name);
    if (b > en || en > dsize)
        return qw_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] exceed the data size %llu", path,
                       name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)dsize);
    uint64_t need = n * k_dtypes[d].size;
    if (need / k_dtypes[d].size != n || en - b != need)
        return qw_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, shape of %s needs %llu",
                       path, name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)(en - b), k_dtypes[d].name, (unsigned long long)need);
    t.n_elems = (int64_t)n;
    t.data = data + b;
    t.nbytes = (size_t)need;
    t.name = qw_xstrdup(name);
    if (st->n_t == st->cap_t) {
        st->cap_t = st->cap_t ? 2 * st->cap_t : 64;
        st->t = qw_xrealloc(st->t, st->cap_t * sizeof *st->t);
    }
    st->t[st->n_t++] = t;
    return 0;
}

/* Parses file fi (already mapped) and appends its tensors. */
static int parse_file(qw_safetensors *st, size_t fi, qw_error *err) {
    const st_file *f = &st->files[fi];
    if (f->size < 8)
        return qw_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length", f->path, f->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | f->base[i];
    if (hl > f->size - 8)
        return qw_fail(err, "%s: header length %llu exceeds the file size %zu", f->path,
                       (unsigned long long)hl, f->size);
    if (hl > ST_MAX_HEADER)
        return qw_fail(err, "%s: header length %llu is over the %u-byte limit", f->path,
                       (unsigned long long)hl, ST_MAX_HEADER);
    const char *hdr = (const char *)f->base + 8;
    const char *end_parse = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hl, &end_parse, 0);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        long at = (ep && ep >= hdr && ep <= hdr + hl) ? (long)(ep - hdr) : -1;
        return qw_fail(err, "%s: header is not valid JSON (near header byte %ld)", f->path, at);
    }
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = qw_fail(err, "%s: header is not a JSON object", f->path);
        goto done;
    }
    const uint8_t *data = f->base + 8 + hl;
    uint64_t dsize = f->size - 8 - hl;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string) continue;
        if (!strcmp(e->string, "__metadata__")) continue;
        if ((rc = parse_entry(st, fi, e, data, dsize, err)) != 0) break;
    }
done:
    cJSON_Delete(root);
    return rc;
}

static size_t add_file(qw_safetensors *st, const char *path) {
    st->files = qw_xrealloc(st->files, (st->n_files + 1) * sizeof *st->files);
    st->files[st->n_files] = (st_file){.path = qw_xstrdup(path)};
    return st->n_files++;
}

static int map_file(st_file *f, qw_error *err) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qw_fail(err, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qw_fail(err, "%s: not a regular file", f->path);
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return qw_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length", f->path, f->size);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return qw_fail(err, "%s: cannot mmap %zu bytes: %s", f->path, f->size, strerror(e));
    f->base = m;
    f->mapped = true;
    return 0;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const qw_st_tensor *)a)->name, ((const qw_st_tensor *)b)->name);
}

/* Sorts the table and refuses duplicate names. */
static int finish(qw_safetensors *st, qw_error *err) {
    if (st->n_t) qsort(st->t, st->n_t, sizeof *st->t, cmp_tensor);
    for (size_t i = 1; i < st->n_t; i++)
        if (!strcmp(st->t[i - 1].name, st->t[i].name))
            return qw_fail(err, "tensor '%s' appears twice (in %s and %s)", st->t[i].name, st->t[i - 1].file,
                           st->t[i].file);
    return 0;
}

void qw_safetensors_close(qw_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_t; i++) free((char *)st->t[i].name);
    for (size_t i = 0; i < st->n_files; i++) {
        if (st->files[i].mapped) munmap((void *)st->files[i].base, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    free(st->t);
    free(st);
}

qw_safetensors *qw_safetensors_open_memory(const void *data, size_t size, const char *name, qw_error *err) {
    qw_safetensors *st = qw_xcalloc(1, sizeof *st);
    size_t fi = add_file(st, name ? name : "<memory>");
    st->files[fi].base = data;
    st->files[fi].size = size;
    if (parse_file(st, fi, err) != 0 || finish(st, err) != 0) {
        qw_safetensors_close(st);
        return NULL;
    }
    return st;
}

qw_safetensors *qw_safetensors_open(const char *path, qw_error *err) {
    qw_safetensors *st = qw_xcalloc(1, sizeof *st);
    size_t fi = add_file(st, path);
    if (map_file(&st->files[fi], err) != 0 || parse_file(st, fi, err) != 0 || finish(st, err) != 0) {
        qw_safetensors_close(st);
        return NULL;
    }
    return st;
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = qw_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

/* Sharded checkpoint: opens every shard the weight_map names, then checks
 * each name is where the index says. */
static int open_index(qw_safetensors *st, const char *dir, const char *ipath, qw_error *err) {
    size_t len;
    char *txt = qw_read_file(ipath, 2u * ST_MAX_HEADER, &len, err); /* an index file is small */
    if (!txt) return -1;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root) return qw_fail(err, "%s: not valid JSON", ipath);
    int rc = 0;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        rc = qw_fail(err, "%s: no \"weight_map\" object", ipath);
        goto done;
    }
    for (const cJSON *e = wm->child; e && rc == 0; e = e->next) {
        if (!cJSON_IsString(e) || !e->string) {
            rc = qw_fail(err, "%s: weight_map entry '%s' is not a file name", ipath, e->string ? e->string : "?");
            break;
        }
        if (strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..") || !*e->valuestring) {
            rc = qw_fail(err, "%s: weight_map file name '%s' must be a plain name in the directory", ipath,
                         e->valuestring);
            break;
        }
        char *path = join(dir, e->valuestring);
        size_t fi = 0;
        while (fi < st->n_files && strcmp(st->files[fi].path, path) != 0) fi++;
        if (fi == st->n_files) {
            fi = add_file(st, path);
            if (map_file(&st->files[fi], err) != 0 || parse_file(st, fi, err) != 0) rc = -1;
        }
        free(path);
    }
    if (rc == 0) rc = finish(st, err);
    for (const cJSON *e = wm->child; e && rc == 0; e = e->next) {
        const qw_st_tensor *t = qw_safetensors_find(st, e->string);
        if (!t) {
            rc = qw_fail(err, "%s: tensor '%s' is listed in the index (file %s) but no shard holds it", ipath,
                         e->string, e->valuestring);
        } else {
            const char *base = strrchr(t->file, '/');
            base = base ? base + 1 : t->file;
            if (strcmp(base, e->valuestring) != 0)
                rc = qw_fail(err, "%s: tensor '%s' is in %s, the index says %s", ipath, e->string, t->file,
                             e->valuestring);
        }
    }
done:
    cJSON_Delete(root);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

qw_safetensors *qw_safetensors_open_dir(const char *dir, qw_error *err) {
    qw_safetensors *st = qw_xcalloc(1, sizeof *st);
    char *ipath = join(dir, "model.safetensors.index.json");
    char *single = join(dir, "model.safetensors");
    int rc = 0;
    if (access(ipath, F_OK) == 0) {
        rc = open_index(st, dir, ipath, err);
    } else if (access(single, F_OK) == 0) {
        size_t fi = add_file(st, single);
        rc = (map_file(&st->files[fi], err) || parse_file(st, fi, err) || finish(st, err)) ? -1 : 0;
    } else {
        DIR *d = opendir(dir);
        if (!d) {
            rc = qw_fail(err, "%s: cannot open directory: %s", dir, strerror(errno));
        } else {
            char **names = NULL;
            size_t n = 0;
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                size_t l = strlen(de->d_name);
                if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
                    names = qw_xrealloc(names, (n + 1) * sizeof *names);
                    names[n++] = qw_xstrdup(de->d_name);
                }
            }
            closedir(d);
            if (n == 0)
                rc = qw_fail(err, "%s: no model.safetensors.index.json, model.safetensors or *.safetensors", dir);
            if (n) qsort(names, n, sizeof *names, cmp_str);
            for (size_t i = 0; i < n; i++) {
                if (rc == 0) {
                    char *p = join(dir, names[i]);
                    size_t fi = add_file(st, p);
                    free(p);
                    if (map_file(&st->files[fi], err) || parse_file(st, fi, err)) rc = -1;
                }
                free(names[i]);
            }
            free(names);
            if (rc == 0) rc = finish(st, err);
        }
    }
    free(ipath);
    free(single);
    if (rc != 0) {
        qw_safetensors_close(st);
        return NULL;
    }
    return st;
}

size_t qw_safetensors_n_tensors(const qw_safetensors *st) {
    return st->n_t;
}

const qw_st_tensor *qw_safetensors_tensor_at(const qw_safetensors *st, size_t i) {
    return i < st->n_t ? &st->t[i] : NULL;
}

const qw_st_tensor *qw_safetensors_find(const qw_safetensors *st, const char *name) {
    size_t lo = 0, hi = st->n_t;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[mid].name, name);
        if (c == 0) return &st->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int qw_st_read_f32(const qw_st_tensor *t, int64_t first, int64_t n, float *out, qw_error *err) {
    if (first < 0 || n < 0 || first > t->n_elems || n > t->n_elems - first)
        return qw_fail(err, "%s: tensor '%s': elements [%lld, %lld) out of range (%lld)", t->file, t->name,
                       (long long)first, (long long)(first + n), (long long)t->n_elems);
    const uint8_t *p = (const uint8_t *)t->data;
    switch (t->dtype) {
    case QW_ST_F32: memcpy(out, p + first * 4, (size_t)n * 4); return 0;
    case QW_ST_F16:
    case QW_ST_BF16: {
        p += first * 2;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = t->dtype == QW_ST_F16 ? qw_fp16_to_f32(h) : qw_bf16_to_f32(h);
        }
        return 0;
    }
    default:
        return qw_fail(err, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16 are)", t->file, t->name,
                       qw_st_dtype_name(t->dtype));
    }
}
