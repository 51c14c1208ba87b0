/* cmd_info.c — `qwisp info [FILE | -m FILE] [--no-tensors]`: what a GGUF
 * file holds (no FILE: the default model, as `qwisp run` finds it).
 *
 * Prints the header facts (path, version, alignment, data offset, counts),
 * then every metadata kv as `key (type) = value`, then a tensor table (index,
 * name, ggml type, dims, byte size, offset in the data section).  It works on
 * any valid GGUF, including types qwisp cannot compute with, because the
 * reader validates against the full ggml type table (format/ggml_types.h).
 *
 * Output is meant for people and grep: one kv per line, strings quoted with
 * control characters escaped, long strings cut at a UTF-8 boundary with
 * "…(N bytes)", arrays shown as type, length and their first few elements.
 * Errors: one line "qwisp info: <message>" on stderr, exit 1; usage errors
 * exit 2.
 */
#include "cli/cli_common.h"
#include "cli/commands.h"

#include "format/ggml_types.h"
#include "qwisp/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define INFO_STR_MAX 96     /* bytes of a string value shown before cutting */
#define INFO_ARR_SHOWN 8    /* array elements shown */
#define INFO_ARR_STR_MAX 32 /* bytes of each shown string-array element */

static void usage(FILE *f) {
    fprintf(f, "usage: qwisp info [FILE | -m FILE] [--no-tensors]\n"
               "  Prints a GGUF file's header, every metadata key and the tensor table.\n"
               "  FILE defaults to $QWISP_MODEL or models/default.gguf, as for qwisp run.\n"
               "  --no-tensors   skip the tensor table\n");
}

/* Prints s[0..len) quoted, escaping quotes, backslashes and control bytes,
 * and cutting after max bytes (backing off to a UTF-8 character start). */
static void print_quoted(const char *s, size_t len, size_t max) {
    size_t shown = len;
    if (len > max) {
        shown = max;
        while (shown > 0 && ((unsigned char)s[shown] & 0xC0) == 0x80) shown--;
    }
    putchar('"');
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
            else putchar(c);
        }
    }
    putchar('"');
    if (shown < len) printf("\xe2\x80\xa6(%zu bytes)", len);
}

/* One element of a numeric array (little-endian, possibly unaligned). */
static void print_elem(qw_gguf_vtype t, const uint8_t *p) {
    switch (t) {
    case QW_GGUF_UINT8: printf("%u", p[0]); break;
    case QW_GGUF_INT8: printf("%d", (int8_t)p[0]); break;
    case QW_GGUF_BOOL: fputs(p[0] ? "true" : "false", stdout); break;
    case QW_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); printf("%u", v); break; }
    case QW_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); printf("%d", v); break; }
    case QW_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); printf("%" PRIu32, v); break; }
    case QW_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); printf("%" PRId32, v); break; }
    case QW_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); printf("%g", v); break; }
    case QW_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); printf("%" PRIu64, v); break; }
    case QW_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); printf("%" PRId64, v); break; }
    case QW_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); printf("%.17g", v); break; }
    default: fputs("?", stdout);
    }
}

static void print_array(const qw_gguf *g, size_t i) {
    qw_gguf_vtype et;
    uint64_t n;
    const void *data;
    qw_gguf_kv_arr(g, i, &et, &n, &data);
    printf("(arr[%s], %" PRIu64 ") = [", qw_gguf_vtype_name(et), n);
    uint64_t shown = n < INFO_ARR_SHOWN ? n : INFO_ARR_SHOWN;
    if (et == QW_GGUF_ARRAY) {
        shown = 0; /* nested arrays: the reader exposes type and count only */
        if (n) fputs("…", stdout);
    }
    for (uint64_t j = 0; j < shown; j++) {
        if (j) fputs(", ", stdout);
        if (et == QW_GGUF_STRING) {
            size_t len;
            const char *s = qw_gguf_arr_str(g, i, j, &len);
            print_quoted(s, len, INFO_ARR_STR_MAX);
        } else {
            print_elem(et, (const uint8_t *)data + j * qw_gguf_vtype_size(et));
        }
    }
    if (shown < n && et != QW_GGUF_ARRAY) fputs(", …", stdout);
    putchar(']');
}

static void print_kv(const qw_gguf *g, size_t i) {
    const char *key = qw_gguf_kv_key(g, i);
    qw_gguf_vtype t = qw_gguf_kv_type(g, i);
    printf("  %s ", key);
    if (t == QW_GGUF_ARRAY) {
        print_array(g, i);
    } else {
        printf("(%s) = ", qw_gguf_vtype_name(t));
        if (t == QW_GGUF_STRING) {
            size_t len;
            const char *s = qw_gguf_kv_str(g, i, &len);
            print_quoted(s, len, INFO_STR_MAX);
        } else if (t == QW_GGUF_BOOL) {
            int64_t v = 0;
            qw_gguf_kv_as_i64(g, i, &v);
            fputs(v ? "true" : "false", stdout);
        } else if (t == QW_GGUF_FLOAT32 || t == QW_GGUF_FLOAT64) {
            double d = 0;
            qw_gguf_kv_as_f64(g, i, &d);
            printf(t == QW_GGUF_FLOAT32 ? "%.9g" : "%.17g", d); /* round-trip precision */
        } else if (t == QW_GGUF_UINT64) {
            uint64_t u = 0; /* may exceed INT64_MAX, so not via kv_as_i64 */
            qw_gguf_get_u64(g, key, &u);
            printf("%" PRIu64, u);
        } else {
            int64_t v = 0;
            qw_gguf_kv_as_i64(g, i, &v);
            printf("%" PRId64, v);
        }
    }
    putchar('\n');
}

static void print_tensors(const qw_gguf *g) {
    size_t n = qw_gguf_n_tensors(g);
    size_t name_w = 4;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(qw_gguf_tensor_at(g, i)->name);
        if (l > name_w) name_w = l;
    }
    if (name_w > 64) name_w = 64;
    printf("tensors:\n  %5s  %-*s  %-7s  %-28s  %14s  %14s\n", "#", (int)name_w, "name", "type", "dims",
           "bytes", "offset");
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const qw_gguf_tensor *t = qw_gguf_tensor_at(g, i);
        char dims[96];
        int k = snprintf(dims, sizeof dims, "[");
        for (uint32_t d = 0; d < t->n_dims && k < (int)sizeof dims; d++)
            k += snprintf(dims + k, sizeof dims - (size_t)k, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        if (k < (int)sizeof dims) snprintf(dims + k, sizeof dims - (size_t)k, "]");
        printf("  %5zu  %-*s  %-7s  %-28s  %14" PRIu64 "  %14" PRIu64 "\n", i, (int)name_w, t->name,
               qw_ggml_type_name(t->type), dims, t->nbytes, t->offset);
        total += t->nbytes;
    }
    printf("tensor data: %" PRIu64 " bytes (%.2f MiB) in %zu tensors\n", total, (double)total / (1 << 20), n);
}

int qw_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-tensors") == 0) {
            tensors = false;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "qwisp info: %s needs a value\n", argv[i]);
                return 2;
            }
            if (path) {
                fprintf(stderr, "qwisp info: more than one FILE ('%s' and '%s')\n", path, argv[i + 1]);
                return 2;
            }
            path = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "qwisp info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "qwisp info: more than one FILE ('%s' and '%s')\n", path, argv[i]);
            usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path && !(path = qw_cli_model_path("info", NULL))) return 2;
    qw_error err = {{0}};
    qw_gguf *g = qw_gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "qwisp info: %s\n", err.msg);
        return 1;
    }
    printf("file: %s\n", qw_gguf_path(g));
    printf("size: %zu bytes\n", qw_gguf_map_size(g));
    printf("version: %" PRIu32 "\n", qw_gguf_version(g));
    printf("alignment: %zu\n", qw_gguf_alignment(g));
    printf("data offset: %zu\n", qw_gguf_data_offset(g));
    printf("n_kv: %zu\n", qw_gguf_n_kv(g));
    printf("n_tensors: %zu\n", qw_gguf_n_tensors(g));
    printf("metadata:\n");
    for (size_t i = 0; i < qw_gguf_n_kv(g); i++) print_kv(g, i);
    if (tensors) print_tensors(g);
    qw_gguf_close(g);
    return 0;
}
