/* cmd_logits.c — `qwisp logits`: teacher forcing.  Evaluates a token sequence
 * in one pass and prints, for every position, the top-K entries of the
 * next-token distribution as [id, logprob, text] (log-softmax of the
 * logits; the token's text for people, U+FFFD for a partial character), as
 * one JSON object, with the input tokens' text in "pieces".  The parity
 * tests compare this with llama.cpp (they read [0] and [1] of each entry). */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/place.h"
#include "qwisp/model.h"
#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp logits [-m FILE] (-p TEXT | --tokens 1,2,3 | --prompt-tokens N) [--top K] "
    "[--threads K]\n"
    "Prints {\"tokens\":[…],\"pieces\":[text,…],\"positions\":[{\"top\":[[id,logprob,text],…]},…]}:\n"
    "one entry per input position, the distribution of the token that follows it.\n"
    "  -m FILE   model GGUF (default: $QWISP_MODEL or models/default.gguf)\n";

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
    const char *C = "logits", *model = NULL, *prompt = NULL, *tokens = NULL;
    long top = 10, threads = 0, prompt_tokens = -1;
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
    if (!c || qw_ctx_eval(c, ids, (int32_t)n, QW_LOGITS_ALL, &err)) {
        fprintf(stderr, "qwisp logits: %s\n", err.msg);
        goto done;
    }
    const int32_t V = m->hp.n_vocab;
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
    const float *logits = qw_ctx_logits(c);
    for (size_t p = 0; p < n; p++) {
        const float *row = logits + p * (size_t)V;
        float mx = -INFINITY;
        for (int32_t j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int32_t j = 0; j < V; j++) sum += exp((double)row[j] - mx);
        const double lse = mx + log(sum);
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
