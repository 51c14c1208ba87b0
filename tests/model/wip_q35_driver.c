/* wip_q35_driver.c — work-in-progress driver for the qwen35moe parity checks
 * (not part of the suite; built by tests/peers/wip_parity_qwen35.sh):
 *
 *   wip_q35_driver gen OUT.gguf TOKSRC.gguf [type] [seed] [n_layer] [n_embd] [attn_interval] [hk] [hv] [tied]
 *   wip_q35_driver run MODEL --tokens 1,2,3 -n 32      -> {"prompt_ids":[…],"tokens":[…]}
 *   wip_q35_driver tf  MODEL --tokens 1,2,3 --top 10   -> {"tokens":[…],"positions":[{"top":[[id,lp],…]},…]}
 */
#include "model/qwen35moe.h"
#include "qwisp/gen_model.h"
#include "qwisp/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_tokens(const char *s, int32_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    qw_error err = {0};
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "gen")) {
        qw35_gen_params p;
        qw35_gen_defaults(&p);
        if (argc > 4) p.type = !strcmp(argv[4], "q8_0") ? QW_TYPE_Q8_0 : QW_TYPE_F32;
        if (argc > 5) p.seed = strtoull(argv[5], NULL, 10);
        if (argc > 6) p.n_layer = atoi(argv[6]);
        if (argc > 7) p.n_embd = atoi(argv[7]);
        if (argc > 8) p.full_attn_interval = atoi(argv[8]);
        if (argc > 9) p.ssm_groups = atoi(argv[9]);
        if (argc > 10) p.ssm_vheads = atoi(argv[10]);
        if (argc > 11) p.tied = atoi(argv[11]) != 0;
        if (qw35_gen_write(&p, argv[3], argv[2], &err)) {
            fprintf(stderr, "gen: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    const char *mode = argv[1], *path = argv[2];
    static int32_t toks[8192];
    int n = 0, gen = 0, top = 10;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokens")) n = parse_tokens(argv[i + 1], toks, 4096);
        else if (!strcmp(argv[i], "-n")) gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--top")) top = atoi(argv[i + 1]);
    }
    qw35_model *m = qw35_model_load(path, &err);
    if (!m) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    const int V = m->hp.n_vocab;
    qw35_ctx *c = qw35_ctx_new(m, 4096, 2, &err);
    if (!c) {
        fprintf(stderr, "ctx: %s\n", err.msg);
        return 1;
    }
    if (!strcmp(mode, "run")) {
        printf("{\"prompt_ids\":[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", toks[i]);
        printf("],\"tokens\":[");
        if (qw35_eval(c, toks, n, NULL, &err)) goto fail;
        for (int g = 0; g < gen; g++) {
            int32_t t = argmax(qw35_logits(c), V);
            printf("%s%d", g ? "," : "", t);
            if (g + 1 < gen && qw35_eval(c, &t, 1, NULL, &err)) goto fail;
        }
        printf("]}\n");
    } else {
        float *all = malloc((size_t)n * V * sizeof(float));
        if (qw35_eval(c, toks, n, all, &err)) goto fail;
        printf("{\"tokens\":[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", toks[i]);
        printf("],\"positions\":[");
        for (int i = 0; i < n; i++) {
            float *l = all + (size_t)i * V;
            float mx = l[argmax(l, V)];
            double s = 0;
            for (int j = 0; j < V; j++) s += exp((double)l[j] - mx);
            const float lse = mx + (float)log(s);
            printf("%s{\"top\":[", i ? "," : "");
            for (int r = 0; r < top; r++) {
                int b = argmax(l, V);
                printf("%s[%d,%.6f]", r ? "," : "", b, l[b] - lse);
                l[b] = -INFINITY;
            }
            printf("]}");
        }
        printf("]}\n");
        free(all);
    }
    qw35_ctx_free(c);
    qw35_model_free(m);
    return 0;
fail:
    fprintf(stderr, "eval: %s\n", err.msg);
    return 1;
}
