/* cmd_logits.c — `qwisp logits`: teacher forcing.  Evaluates a token sequence
 * in one pass and prints, for every position, the top-K entries of the
 * next-token distribution as [id, logprob, text] (log-softmax of the
 * logits; the token's text for people, U+FFFD for a partial character), as
 * one JSON object, with the input tokens' text in "pieces".  The parity
 * tests compare this with llama.cpp (they read [0] and [1] of each entry).
 *
 * Quality of a setting against a reference (bench/near_lossless.sh):
 *   --step          one token per evaluation, as decode runs (the streaming
 *                   tier's cache then evolves token by token)
 *   --dump FILE     also write every position's raw logits (float32 [n][V])
 *   --compare FILE  instead of the table, print one JSON object comparing
 *                   this run with a --dump: mean / max KL(ref || this) of
 *                   the next-token distributions, top-1 agreement, and both
 *                   perplexities on the text itself (the next input token). */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/experts.h"
#include "qwisp/place.h"
#include "qwisp/model.h"
#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp logits [-m FILE] (-p TEXT | --tokens 1,2,3 | --prompt-tokens N) [--top K] "
    "[--threads K]\n"
    "                    [--step] [--dump FILE] [--compare FILE]\n"
    "Prints {\"tokens\":[…],\"pieces\":[text,…],\"positions\":[{\"top\":[[id,logprob,text],…]},…]}:\n"
    "one entry per input position, the distribution of the token that follows it.\n"
    "  -m FILE   model GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  --step          evaluate one token at a time (as decode does)\n"
    "  --dump FILE     also write the raw logits, float32 [positions][vocab]\n"
    "  --compare FILE  print {kl_mean, kl_max, top1_agree, ppl, ppl_ref, experts} against a --dump\n";

/* log-sum-exp of row[n]. */
static double lse_of(const float *row, int32_t n) {
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0;
    for (int32_t j = 0; j < n; j++) sum += exp((double)row[j] - mx);
    return mx + log(sum);
}

static int32_t argmax_of(const float *row, int32_t n) {
    int32_t b = 0;
    for (int32_t j = 1; j < n; j++)
        if (row[j] > row[b]) b = j;
    return b;
}

/* Running comparison of this run's rows (q) with a reference's (p). */
typedef struct {
    double kl_sum, kl_max, nll_q, nll_p;
    long agree, rows, scored;
} compare_acc;

static void compare_row(compare_acc *a, const float *q, const float *p, int32_t V, int32_t next) {
    const double lq = lse_of(q, V), lp = lse_of(p, V);
    double kl = 0;
    for (int32_t j = 0; j < V; j++) {
        const double lpj = p[j] - lp;
        kl += exp(lpj) * (lpj - (q[j] - lq));
    }
    a->kl_sum += kl;
    if (kl > a->kl_max) a->kl_max = kl;
    a->agree += argmax_of(q, V) == argmax_of(p, V);
    a->rows++;
    if (next >= 0) {
        a->nll_q -= q[next] - lq;
        a->nll_p -= p[next] - lp;
        a->scored++;
    }
}

static void print_compare(const compare_acc *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "positions", (double)a->rows);
    cJSON_AddNumberToObject(o, "kl_mean", a->rows ? a->kl_sum / (double)a->rows : 0);
    cJSON_AddNumberToObject(o, "kl_max", a->kl_max);
    cJSON_AddNumberToObject(o, "top1_agree", a->rows ? (double)a->agree / (double)a->rows : 0);
    cJSON_AddNumberToObject(o, "ppl", a->scored ? exp(a->nll_q / (double)a->scored) : 0);
    cJSON_AddNumberToObject(o, "ppl_ref", a->scored ? exp(a->nll_p / (double)a->scored) : 0);
    qw_experts_stats_json(o);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* Writes the indices of the k largest values of x[n] into idx (descending). */
static void top_indices(const float *x, int32_t n, int k, int32_t *idx) {
    for (int i = 0; i < k; i++) idx[i] = -1;
    for (int32_t j = 0; j < n; j++) {
        int pos = k;
        while (pos > 0 && (idx[pos - 1] < 0 || x[j] > x[idx[pos - 1]])) pos--;
        if (pos >= k) continue;
        memmove(idx + pos + 1, idx + pos, (size_t)(k - pos - 1) * sizeof(int32_t));
        idx[pos] = j;
    }
}

int qw_cmd_logits(int argc, char **argv) {
    const char *C = "logits", *model = NULL, *prompt = NULL, *tokens = NULL, *dump = NULL, *cmp = NULL;
    long top = 10, threads = 0, prompt_tokens = -1;
    bool step = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        }
        if ((r = qw_cli_flag(C, argc, argv, &i, "-m", &v)) != 0) {
            if (r < 0) return 2;
            model = v;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "-p", &v)) != 0) {
            if (r < 0) return 2;
            prompt = v;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--tokens", &v)) != 0) {
            if (r < 0) return 2;
            tokens = v;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--prompt-tokens", &v)) != 0) {
            if (r < 0 || qw_cli_long(C, "--prompt-tokens", v, 1, 1 << 20, &prompt_tokens)) return 2;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--top", &v)) != 0) {
            if (r < 0 || qw_cli_long(C, "--top", v, 1, 1000, &top)) return 2;
        } else if (!strcmp(argv[i], "--step")) {
            step = true;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--dump", &v)) != 0) {
            if (r < 0) return 2;
            dump = v;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--compare", &v)) != 0) {
            if (r < 0) return 2;
            cmp = v;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--threads", &v)) != 0) {
            if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &threads)) return 2;
        } else {
            fprintf(stderr, "qwisp logits: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if ((prompt != NULL) + (tokens != NULL) + (prompt_tokens > 0) != 1) {
        fprintf(stderr, "qwisp logits: give exactly one of -p, --tokens, --prompt-tokens\n");
        return 2;
    }
    const char *path = qw_cli_model_path(C, model);
    if (!path) return 2;
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    qw_tokenizer *tok = m ? qw_tokenizer_from_gguf(m->gguf, &err) : NULL;
    if (!m || !tok) {
        fprintf(stderr, "qwisp logits: %s\n", err.msg);
        qw_model_free(m);
        return 1;
    }
    int rc = 1;
    size_t n = 0;
    int32_t *ids = NULL;
    if (tokens) {
        ids = qw_cli_parse_ids(C, tokens, &n);
        if (!ids) rc = 2; /* a malformed list is a usage error */
    } else if (prompt) ids = qw_tokenize(tok, prompt, strlen(prompt), true, &n);
    else {
        n = (size_t)prompt_tokens;
        ids = qw_cli_natural_prompt(tok, (int32_t)n);
    }
    qw_ctx *c = NULL;
    if (!ids || n == 0) {
        if (ids) fprintf(stderr, "qwisp logits: the prompt is empty\n");
        goto done;
    }
    c = qw_ctx_new_placed(m, (int32_t)n, qw_cli_threads(threads), &err);
    if (!c || (!step && qw_ctx_eval(c, ids, (int32_t)n, QW_LOGITS_ALL, &err))) {
        fprintf(stderr, "qwisp logits: %s\n", err.msg);
        goto done;
    }
    const int32_t V = m->hp.n_vocab;
    FILE *fdump = NULL, *fcmp = NULL;
    float *ref = NULL;
    if (dump && !(fdump = fopen(dump, "wb"))) {
        fprintf(stderr, "qwisp logits: --dump %s: %s\n", dump, strerror(errno));
        goto done;
    }
    if (cmp) {
        fcmp = fopen(cmp, "rb");
        long want = (long)n * V * (long)sizeof(float);
        if (!fcmp || fseek(fcmp, 0, SEEK_END) || ftell(fcmp) != want || fseek(fcmp, 0, SEEK_SET)) {
            fprintf(stderr, "qwisp logits: --compare %s: %s (want %ld bytes: %zu positions x %d logits)\n", cmp,
                    fcmp ? "wrong size" : strerror(errno), want, n, V);
            if (fcmp) fclose(fcmp);
            if (fdump) fclose(fdump);
            goto done;
        }
        ref = malloc((size_t)V * sizeof(float));
    }
    compare_acc acc = {0};
    bool bad = false;
    int k = top < V ? (int)top : V;
    int32_t *idx = malloc((size_t)k * sizeof(int32_t));
    cJSON *o = cJSON_CreateObject();
    cJSON *ta = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(ids[i]));
    qw_strbuf piece = {0};
    cJSON *pc = cJSON_AddArrayToObject(o, "pieces");
    for (size_t i = 0; i < n; i++) {
        piece.n = 0;
        qw_cli_piece(tok, ids[i], &piece);
        cJSON_AddItemToArray(pc, cJSON_CreateString(piece.p));
    }
    cJSON *pa = cJSON_AddArrayToObject(o, "positions");
    for (size_t p = 0; p < n; p++) {
        if (step && qw_ctx_eval(c, ids + p, 1, QW_LOGITS_LAST, &err)) {
            fprintf(stderr, "qwisp logits: position %zu: %s\n", p, err.msg);
            bad = true;
            break;
        }
        const float *row = step ? qw_ctx_logits(c) : qw_ctx_logits(c) + p * (size_t)V;
        if (fdump && fwrite(row, sizeof(float), (size_t)V, fdump) != (size_t)V) {
            fprintf(stderr, "qwisp logits: --dump %s: %s\n", dump, strerror(errno));
            bad = true;
            break;
        }
        if (fcmp) {
            if (fread(ref, sizeof(float), (size_t)V, fcmp) != (size_t)V) {
                fprintf(stderr, "qwisp logits: --compare %s: short read\n", cmp);
                bad = true;
                break;
            }
            compare_row(&acc, row, ref, V, p + 1 < n ? ids[p + 1] : -1);
            continue;
        }
        const double lse = lse_of(row, V);
        top_indices(row, V, k, idx);
        cJSON *pos = cJSON_CreateObject();
        cJSON *tops = cJSON_AddArrayToObject(pos, "top");
        for (int i = 0; i < k; i++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(idx[i]));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(row[idx[i]] - lse));
            piece.n = 0;
            qw_cli_piece(tok, idx[i], &piece);
            cJSON_AddItemToArray(pair, cJSON_CreateString(piece.p));
            cJSON_AddItemToArray(tops, pair);
        }
        cJSON_AddItemToArray(pa, pos);
    }
    if (fdump && fclose(fdump)) {
        fprintf(stderr, "qwisp logits: --dump %s: %s\n", dump, strerror(errno));
        bad = true;
    }
    if (fcmp) fclose(fcmp);
    free(ref);
    if (bad) { /* the message is out */
        cJSON_Delete(o);
        qw_strbuf_free(&piece);
        free(idx);
        goto done;
    }
    if (cmp) {
        print_compare(&acc);
        cJSON_Delete(o);
        qw_strbuf_free(&piece);
        free(idx);
        rc = 0;
        goto done;
    }
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    qw_strbuf_free(&piece);
    free(idx);
    rc = 0;
done:
    free(ids);
    qw_ctx_free(c);
    qw_tokenizer_free(tok);
    qw_model_free(m);
    return rc;
}
