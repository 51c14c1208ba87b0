/* cmd_tokenize.c — `qwisp tokenize`: text -> token ids and ids -> text, with
 * the tokenizer of a GGUF or of Hugging Face tokenizer files.  Used by people
 * checking a prompt and by tests/text/t_tokenizer_corpus.sh, which compares
 * the ids with the JS reference tokenizer line by line.
 *
 *   qwisp tokenize [-m MODEL.gguf | --hf-tokenizer DIR_OR_tokenizer.json]
 *                  [--no-special] [-v]
 *   (no -m and no --hf-tokenizer: the default model, as `qwisp run` finds it)
 *                  (-p TEXT | -f FILE | --lines FILE | --decode IDS | --decode-lines FILE)
 *
 *   -p / -f        one JSON array of ids for the whole text
 *   --lines        one JSON array per '\n'-separated line (the '\n' excluded)
 *   --decode IDS   ids as "1,2,3" or "[1,2,3]"; prints the raw decoded bytes
 *   --decode-lines one JSON array of ids per line in; one JSON string out
 *   --no-special   do not match CONTROL tokens in the text (USER_DEFINED
 *                  tokens are still matched, as llama.cpp does)
 *   -v             each token's id and text on stdout after its array (or
 *                  after the decoded text), load and encode times on stderr
 * Exit codes: 0 ok, 1 runtime error, 2 usage error.
 */
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "qwisp/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: qwisp tokenize [-m MODEL.gguf | --hf-tokenizer DIR_OR_tokenizer.json] [--no-special] [-v]\n"
            "                      (-p TEXT | -f FILE | --lines FILE | --decode IDS | --decode-lines FILE)\n"
            "  -m FILE        model GGUF whose tokenizer is used (default: $QWISP_MODEL or models/default.gguf)\n"
            "  -p / -f        one JSON array of ids for the text; --lines: one array per line\n"
            "  --decode IDS   ids (1,2,3) to text; --decode-lines: one JSON string per line of ids\n"
            "  --no-special   do not match control tokens (<|im_start|> …) in the text\n"
            "  -v             also each token's id and text, one per line; timings on stderr\n");
}

/* -v: one "  ID  \"text\"" line per token, under the array it explains. */
static void print_pieces(const qw_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        printf("%8d  ", ids[i]);
        qw_cli_print_piece(stdout, t, ids[i]);
        putchar('\n');
    }
}

static void print_ids(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]\n", stdout);
}

static void print_json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') { putchar('\\'); putchar(*p); }
        else if (*p == '\n') fputs("\\n", stdout);
        else if (*p == '\t') fputs("\\t", stdout);
        else if (*p == '\r') fputs("\\r", stdout);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    fputs("\"\n", stdout);
}

/* Parses "1,2,3", "[1, 2, 3]" or "1 2 3" into ids; returns count or -1. */
static long parse_ids(const char *s, int32_t **out) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        while (*p == '[' || *p == ']' || *p == ',' || *p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p || *p == '\n') break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) { free(ids); return -1; }
        if (n == cap) {
            int32_t *q = realloc(ids, (cap *= 2) * sizeof *q);
            if (!q) { free(ids); return -1; }
            ids = q;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return (long)n;
}

static int encode_print(const qw_tokenizer *t, const char *s, size_t n, bool special, bool verbose, double *enc_s) {
    size_t nids;
    double t0 = qw_time_s();
    int32_t *ids = qw_tokenize(t, s, n, special, &nids);
    *enc_s += qw_time_s() - t0;
    if (!ids) {
        fprintf(stderr, "qwisp tokenize: out of memory\n");
        return 1;
    }
    print_ids(ids, nids);
    if (verbose) print_pieces(t, ids, nids);
    free(ids);
    return 0;
}

int qw_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *hf = NULL, *text = NULL, *file = NULL, *lines = NULL, *decode = NULL,
               *decode_lines = NULL;
    bool special = true, verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) dst = &model;
        else if (!strcmp(a, "--hf-tokenizer")) dst = &hf;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) dst = &text;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) dst = &file;
        else if (!strcmp(a, "--lines")) dst = &lines;
        else if (!strcmp(a, "--decode")) dst = &decode;
        else if (!strcmp(a, "--decode-lines")) dst = &decode_lines;
        else if (!strcmp(a, "--no-special")) { special = false; continue; }
        else if (!strcmp(a, "-v")) { verbose = true; continue; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "qwisp tokenize: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "qwisp tokenize: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }
    int modes = !!text + !!file + !!lines + !!decode + !!decode_lines;
    if ((model && hf) || modes != 1) {
        fprintf(stderr, "qwisp tokenize: give at most one of -m/--hf-tokenizer and exactly one of "
                        "-p/-f/--lines/--decode/--decode-lines\n");
        usage(stderr);
        return 2;
    }
    if (!model && !hf && !(model = qw_cli_model_path("tokenize", NULL))) return 2;

    qw_error err = {0};
    double t0 = qw_time_s();
    qw_tokenizer *tok = NULL;
    qw_gguf *g = NULL;
    if (model) {
        g = qw_gguf_open(model, &err);
        if (g) tok = qw_tokenizer_from_gguf(g, &err);
    } else {
        qw_tokenizer_spec *sp = qw_tokenizer_spec_from_hf_json(hf, NULL, 0, &err);
        if (sp) tok = qw_tokenizer_new(sp, &err);
        qw_tokenizer_spec_free(sp);
    }
    if (!tok) {
        fprintf(stderr, "qwisp tokenize: %s\n", err.msg);
        qw_gguf_close(g);
        return 1;
    }
    double load_s = qw_time_s() - t0, enc_s = 0;
    int rc = 0;
    size_t n = 0;
    char *buf = NULL;

    if (text) {
        rc = encode_print(tok, text, strlen(text), special, verbose, &enc_s);
    } else if (file || lines || decode_lines) {
        buf = qw_cli_read_file("tokenize", file ? file : lines ? lines : decode_lines, &n);
        if (!buf) rc = 1;
        else if (file) rc = encode_print(tok, buf, n, special, verbose, &enc_s);
        else {
            char *p = buf, *end = buf + n;
            while (p < end && rc == 0) {
                char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (lines) {
                    rc = encode_print(tok, p, len, special, verbose, &enc_s);
                } else {
                    p[len] = 0;
                    int32_t *ids;
                    long k = parse_ids(p, &ids);
                    if (k < 0) {
                        fprintf(stderr, "qwisp tokenize: bad id list: %.60s\n", p);
                        rc = 1;
                        break;
                    }
                    char *s = qw_detokenize(tok, ids, (size_t)k);
                    free(ids);
                    if (!s) { rc = 1; break; }
                    print_json_str(s);
                    free(s);
                }
                p += len + 1;
            }
        }
    } else {
        int32_t *ids;
        long k = parse_ids(decode, &ids);
        if (k < 0) {
            fprintf(stderr, "qwisp tokenize: --decode wants ids like 1,2,3 (got %s)\n", decode);
            rc = 2;
        } else {
            for (long i = 0; i < k; i++) {
                if (ids[i] < 0 || ids[i] >= qw_tokenizer_n_vocab(tok)) {
                    fprintf(stderr, "qwisp tokenize: id %d is outside the vocabulary (n_vocab %d)\n",
                            ids[i], qw_tokenizer_n_vocab(tok));
                    rc = 1;
                }
            }
            char *s = rc ? NULL : qw_detokenize(tok, ids, (size_t)k);
            if (s) {
                fwrite(s, 1, strlen(s), stdout);
                putchar('\n');
                free(s);
                if (verbose) print_pieces(tok, ids, (size_t)k);
            }
            free(ids);
        }
    }
    if (verbose)
        fprintf(stderr, "tokenize: load %.1f ms, encode %.1f ms (%zu bytes in)\n", load_s * 1e3,
                enc_s * 1e3, n ? n : (text ? strlen(text) : 0));
    free(buf);
    qw_tokenizer_free(tok);
    qw_gguf_close(g);
    return rc;
}
