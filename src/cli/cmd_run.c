/* cmd_run.c — `qwisp run`: load a model, build the prompt (text, file, chat
 * template or N natural tokens), generate, and either stream text to stdout
 * (after the prompt with --echo) or print one JSON object with ids, text,
 * seed and timings (--json).  A one-line summary (tok/s, ms/token, weight
 * GB/s, seed, logits hash) goes to stderr after stdout is flushed, so with
 * 2>&1 it lands on its own line.
 *
 * The context: --ctx, else QWISP_CTX when set, is used as given: a prompt
 * longer than it is refused (exit 2), and -n is cut to the room left (said on
 * stderr).  Without either, the 4096 default grows to hold the prompt and -n,
 * but not past the model's trained length (said on stderr when it grows).
 * Passing the trained length (only with an explicit context) is warned about.
 * Without --seed a random seed is drawn (sampling at --temp > 0 differs per
 * run, as in llama.cpp); it is printed so a run can be repeated. */
#include "cli_common.h"
#include "commands.h"
#include "phase_report.h"
#include "qwisp/experts.h"
#include "qwisp/place.h"
#include "qwisp/generate.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/run_memory.h"
#include "qwisp/tokenizer.h"
#include "text/textout.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp run [-m FILE] (-p TEXT | --prompt-file F | --prompt-tokens N) [options]\n"
    "  -m FILE              model GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  -p TEXT              prompt text (special tokens like <|im_start|> are parsed)\n"
    "  --prompt-file F      read the prompt from a file or pipe (at most 64 MiB; devices refused)\n"
    "  --prompt-tokens N    a prompt of exactly N tokens of natural text (benchmarks)\n"
    "  --chat               wrap the prompt in the model's chat template (user turn)\n"
    "  --system TEXT        system message for --chat\n"
    "  --no-think           --chat with enable_thinking = false (Qwen3/3.5 templates)\n"
    "  -n N                 tokens to generate (default 128)\n"
    "  --temp T             temperature (default 0 = greedy)\n"
    "  --seed S             sampling seed (default: random, printed in the summary and --json)\n"
    "  --top-k K, --top-p P, --min-p P\n"
    "  --repeat-penalty R, --presence-penalty P, --frequency-penalty F, --penalty-last-n N\n"
    "  --threads K          compute threads (default: $QWISP_THREADS or all CPUs)\n"
    "  --ctx N              context length (default: $QWISP_CTX, else 4096 grown to fit the\n"
    "                       prompt and -n up to the model's trained length); -n is cut to fit\n"
    "  --echo               print the prompt text before the generated text\n"
    "  --ignore-eos         do not stop at end-of-generation tokens\n"
    "  --json               print one JSON object at the end instead of streaming text\n";

typedef struct {
    const qw_tokenizer *tok;
    qw_detok_stream ds;
    bool stream;
    int32_t n_seen;
    qw_experts_stats at_first; /* the expert counters when prefill ended */
} stream_state;

static bool on_token(void *user, int32_t id) {
    stream_state *st = user;
    if (st->n_seen++ == 0) st->at_first = qw_experts_get_stats();
    if (!st->stream) return true;
    char buf[512];
    int n = qw_detok_stream_push(&st->ds, st->tok, id, buf, sizeof buf);
    if (n > 0) {
        fwrite(buf, 1, (size_t)n, stdout);
        fflush(stdout);
    }
    return true;
}

typedef struct {
    const char *model, *prompt, *prompt_file, *system;
    long prompt_tokens, n_gen, threads, n_ctx;
    bool chat, json, ignore_eos, echo, seed_given, no_think;
    qw_sampler_params sp;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
    const char *C = "run";
    a->n_gen = 128;
    a->prompt_tokens = -1;
    a->sp = qw_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 1;
        } else if (!strcmp(argv[i], "--chat")) a->chat = true;
        else if (!strcmp(argv[i], "--no-think")) a->no_think = true;
        else if (!strcmp(argv[i], "--json")) a->json = true;
        else if (!strcmp(argv[i], "--ignore-eos")) a->ignore_eos = true;
        else if (!strcmp(argv[i], "--echo")) a->echo = true;
        else if (QW_CLI_FLAG("-m") || QW_CLI_FLAG("--model")) { if (r < 0) return -1; a->model = v; }
        else if (QW_CLI_FLAG("-p") || QW_CLI_FLAG("--prompt")) { if (r < 0) return -1; a->prompt = v; }
        else if (QW_CLI_FLAG("--prompt-file")) { if (r < 0) return -1; a->prompt_file = v; }
        else if (QW_CLI_FLAG("--system")) { if (r < 0) return -1; a->system = v; }
        else if (QW_CLI_FLAG("--prompt-tokens")) {
            if (r < 0 || qw_cli_long(C, "--prompt-tokens", v, 1, 1 << 24, &a->prompt_tokens)) return -1;
        } else if (QW_CLI_FLAG("-n") || QW_CLI_FLAG("--n-predict")) {
            if (r < 0 || qw_cli_long(C, "-n", v, 0, 1 << 24, &a->n_gen)) return -1;
        } else if (QW_CLI_FLAG("--threads") || QW_CLI_FLAG("-t")) {
            if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &a->threads)) return -1;
        } else if (QW_CLI_FLAG("--ctx") || QW_CLI_FLAG("-c")) {
            if (r < 0 || qw_cli_long(C, "--ctx", v, 16, 1 << 24, &a->n_ctx)) return -1;
        } else if ((r = qw_cli_sampler_flag(C, argc, argv, &i, &a->sp)) != 0) {
            if (r < 0) return -1;
            if (!strcmp(argv[i - 1], "--seed")) a->seed_given = true;
        } else {
            fprintf(stderr, "qwisp run: unknown option '%s' (see qwisp run --help)\n", argv[i]);
            return -1;
        }
    }
    int sources = (a->prompt != NULL) + (a->prompt_file != NULL) + (a->prompt_tokens >= 0);
    if (sources != 1) {
        fprintf(stderr, "qwisp run: give exactly one of -p, --prompt-file, --prompt-tokens\n");
        return -1;
    }
    if (a->chat && a->prompt_tokens >= 0) {
        fprintf(stderr, "qwisp run: --chat cannot be combined with --prompt-tokens\n");
        return -1;
    }
    if (a->echo && a->json) {
        fprintf(stderr, "qwisp run: --echo streams the prompt as text; --json has it as prompt_ids\n");
        return -1;
    }
    if (!a->seed_given) a->sp.seed = qw_cli_random_seed();
    return 0;
}

/* Builds the prompt ids; NULL after printing an error. */
static int32_t *build_prompt(const run_args *a, const qw_model *m, const qw_tokenizer *tok, size_t *n) {
    if (a->prompt_tokens >= 0) {
        *n = (size_t)a->prompt_tokens;
        int32_t *ids = qw_cli_natural_prompt(tok, (int32_t)a->prompt_tokens);
        if (!ids) fprintf(stderr, "qwisp run: could not build a natural-text prompt\n");
        return ids;
    }
    char *owned = NULL;
    int32_t *ids;
    const char *text = a->prompt;
    size_t len = text ? strlen(text) : 0;
    if (a->prompt_file) {
        owned = qw_cli_read_file("run", a->prompt_file, &len);
        if (!owned) return NULL;
        text = owned;
    }
    if (a->chat) {
        qw_chat_msg msgs[2];
        size_t nm = 0;
        if (a->system) msgs[nm++] = (qw_chat_msg){.role = "system", .content = a->system};
        msgs[nm++] = (qw_chat_msg){.role = "user", .content = text};
        qw_error err = {0};
        qw_chat_prompt cp;
        const char *tmpl;
        qw_chat_opts o = {.add_generation_prompt = true, .enable_thinking = a->no_think ? 0 : -1};
        int rc = qw_chat_template_text(m->gguf, &tmpl, &err);
        qw_chat_template_info info;
        if (rc == 0) rc = qw_chat_template_identify(tmpl, &info, &err);
        if (rc == 0 && !info.exact) fprintf(stderr, "qwisp run: note: %s\n", info.note);
        if (rc == 0) rc = qw_chat_render_opts(tmpl, msgs, nm, &o, &cp, &err);
        free(owned);
        owned = NULL;
        if (rc != 0) {
            fprintf(stderr, "qwisp run: %s\n", err.msg);
            return NULL;
        }
        /* special tokens only in the template's markup, never in the message */
        ids = qw_tokenize_segments(tok, cp.text, cp.len, cp.segs, cp.n_segs, n);
        qw_chat_prompt_free(&cp);
    } else {
        ids = qw_tokenize(tok, text, len, true, n);
    }
    free(owned);
    if (ids && *n == 0) {
        fprintf(stderr, "qwisp run: the prompt is empty\n");
        free(ids);
        return NULL;
    }
    return ids;
}

static void print_json(const qw_model *m, const qw_tokenizer *tok, const int32_t *prompt, size_t n_prompt,
                       const qw_gen_result *res, int threads, uint64_t seed_v, const qw_run_memory *rm,
                       const qw_experts_stats *at_first) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", qw_gguf_path(m->gguf));
    cJSON *pa = cJSON_AddArrayToObject(o, "prompt_ids");
    for (size_t i = 0; i < n_prompt; i++) cJSON_AddItemToArray(pa, cJSON_CreateNumber(prompt[i]));
    cJSON *ta = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; i < res->n_tokens; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(res->tokens[i]));
    /* JSON must be valid UTF-8: a generation may stop mid-character, and a
     * synthetic model can emit any byte sequence. */
    char *text = qw_detokenize(tok, res->tokens, (size_t)res->n_tokens);
    qw_strbuf clean = {0};
    qw_utf8_sanitize(&clean, text ? text : "", text ? strlen(text) : 0);
    qw_strbuf_add(&clean, "", 0); /* allocates + NUL-terminates even when empty */
    cJSON_AddStringToObject(o, "text", clean.p);
    qw_strbuf_free(&clean);
    free(text);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)n_prompt);
    cJSON_AddNumberToObject(o, "gen_tokens", res->n_tokens);
    cJSON_AddNumberToObject(o, "prefill_s", res->prefill_s);
    cJSON_AddNumberToObject(o, "decode_s", res->decode_s);
    cJSON_AddNumberToObject(o, "prefill_tok_s", res->prefill_s > 0 ? (double)n_prompt / res->prefill_s : 0);
    cJSON_AddNumberToObject(o, "decode_tok_s",
                            res->decode_s > 0 ? (double)(res->n_tokens - 1) / res->decode_s : 0);
    cJSON_AddNumberToObject(o, "ttft_ms", res->ttft_s * 1e3);
    cJSON_AddBoolToObject(o, "stopped_eos", res->stopped_eos);
    cJSON_AddNumberToObject(o, "threads", threads);
    char seed[24]; /* raw: a 64-bit --seed does not survive a double */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)seed_v);
    cJSON_AddRawToObject(o, "seed", seed);
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)res->logits_hash);
    cJSON_AddStringToObject(o, "logits_hash", hash);
    qw_run_memory_json(rm, o);
    /* the decode phase alone (first token sampled -> end): bytes per decoded token */
    if (at_first) qw_experts_stats_json_since(o, "experts_decode", at_first);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* Sets *n_ctx and may cut a->n_gen (see the header comment); prints what it
 * changed.  -1 (message printed) when the prompt does not fit. */
static int fit_context(run_args *a, const qw_model *m, long n_prompt, long *n_ctx) {
    const long train = m->hp.n_ctx_train;
    const char *src = a->n_ctx ? "--ctx" : qw_opt_is_set(QW_OPT_CTX) ? "QWISP_CTX" : NULL;
    long ctx = a->n_ctx ? a->n_ctx : (long)qw_opt_int(QW_OPT_CTX);
    if (!src && n_prompt + a->n_gen > ctx) {
        long cap = train > ctx ? train : ctx, grown = n_prompt + a->n_gen < cap ? n_prompt + a->n_gen : cap;
        if (grown > ctx) {
            fprintf(stderr, "qwisp run: context %ld -> %ld tokens to hold the prompt (%ld) and -n (%ld); --ctx sets it\n",
                    ctx, grown, n_prompt, a->n_gen);
            ctx = grown;
        }
    }
    const char *why = src ? src : "no --ctx given; --ctx N sets it";
    if (n_prompt > ctx) {
        fprintf(stderr, "qwisp run: the prompt is %ld tokens but the context holds %ld (%s)\n", n_prompt, ctx, why);
        return -1;
    }
    if (n_prompt + a->n_gen > ctx) {
        fprintf(stderr, "qwisp run: -n %ld cut to %ld: the context holds %ld tokens (%s) and the prompt takes %ld\n",
                a->n_gen, ctx - n_prompt, ctx, why, n_prompt);
        a->n_gen = ctx - n_prompt;
    }
    if (train > 0 && n_prompt + a->n_gen > train)
        fprintf(stderr, "qwisp run: warning: prompt + -n = %ld tokens passes the %ld the model was trained on; "
                        "text past position %ld may degrade\n", n_prompt + a->n_gen, train, train);
    *n_ctx = ctx;
    return 0;
}

int qw_cmd_run(int argc, char **argv) {
    run_args a = {0};
    int pr = parse_args(argc, argv, &a);
    if (pr) return pr > 0 ? 0 : 2;
    const char *path = qw_cli_model_path("run", a.model);
    if (!path) return 2;

    qw_error err = {0};
    int rc = 1;
    qw_model *m = qw_model_load(path, &err);
    qw_tokenizer *tok = m ? qw_tokenizer_from_gguf(m->gguf, &err) : NULL;
    if (!m || !tok) {
        fprintf(stderr, "qwisp run: %s\n", err.msg);
        qw_model_free(m);
        return 1;
    }
    if (qw_tokenizer_n_vocab(tok) != m->hp.n_vocab)
        qw_log(QW_LOG_WARN, "tokenizer has %d tokens, the embedding %d rows", qw_tokenizer_n_vocab(tok),
               m->hp.n_vocab);
    size_t n_prompt = 0;
    int32_t *prompt = build_prompt(&a, m, tok, &n_prompt);
    qw_ctx *c = NULL;
    qw_gen_result res = {0};
    qw_run_memory rmem = {0};
    if (!prompt) goto done;
    int threads = qw_cli_threads(a.threads);
    long n_ctx = 0;
    if (fit_context(&a, m, (long)n_prompt, &n_ctx)) {
        rc = 2;
        goto done;
    }
    if (a.echo) {
        char *text = qw_detokenize(tok, prompt, n_prompt);
        if (text) fputs(text, stdout);
        free(text);
        fflush(stdout);
    }
    c = qw_ctx_new_placed(m, (int32_t)n_ctx, threads, &err);
    if (!c) {
        fprintf(stderr, "qwisp run: %s\n", err.msg);
        goto done;
    }
    if (qw_run_memory_begin(&rmem, c, a.json, &err)) {
        fprintf(stderr, "qwisp run: %s\n", err.msg);
        goto done;
    }
    stream_state st = {.tok = tok, .stream = !a.json};
    qw_gen_request rq = {.prompt = prompt,
                         .n_prompt = (int32_t)n_prompt,
                         .max_tokens = (int32_t)a.n_gen,
                         .ignore_eos = a.ignore_eos,
                         .sampler = a.sp};
    int grc = qw_generate(c, tok, &rq, on_token, &st, &res, &err);
    qw_run_memory_end(&rmem, c);
    if (grc) {
        fprintf(stderr, "\nqwisp run: %s\n", err.msg);
        goto done;
    }
    if (a.json) {
        print_json(m, tok, prompt, n_prompt, &res, threads, a.sp.seed, &rmem, st.n_seen ? &st.at_first : NULL);
    } else {
        char tail[16];
        int n = qw_detok_stream_flush(&st.ds, tail, sizeof tail);
        if (n > 0) fwrite(tail, 1, (size_t)n, stdout);
        putchar('\n');
    }
    fflush(stdout); /* the text's last newline before the summary on a shared 2>&1 pipe */
    double dec = res.decode_s > 0 ? (res.n_tokens - 1) / res.decode_s : 0;
    double gbs = dec * (double)qw_model_active_bytes(m) / 1e9;
    fprintf(stderr,
            "qwisp: prompt=%zu prefill=%.1f tok/s gen=%d decode=%.2f tok/s (%.1f ms/tok, %.1f GB/s "
            "weights) ttft=%.0f ms threads=%d seed=%llu logits=%016llx\n",
            n_prompt, res.prefill_s > 0 ? n_prompt / res.prefill_s : 0, res.n_tokens, dec,
            dec > 0 ? 1e3 / dec : 0, gbs, res.ttft_s * 1e3, threads, (unsigned long long)a.sp.seed,
            (unsigned long long)res.logits_hash);
    qw_phase_times pt; /* QWISP_PROFILE=1 */
    if (qw_ctx_phase_times(c, &pt)) qw_phase_report_print(stderr, "run", &pt);
    rc = 0;
done:
    qw_run_memory_end(&rmem, c);
    free(res.tokens);
    free(prompt);
    qw_ctx_free(c);
    qw_tokenizer_free(tok);
    qw_model_free(m);
    return rc;
}
