/* fuzz_openai_request.c — libFuzzer target for the OpenAI request parser of
 * `qwisp serve` (qw_oai_parse in src/serve/openai.c).
 *
 * Each input is one request body, parsed twice: as /v1/chat/completions and
 * as /v1/completions (no GGUF: the chat template is the built-in ChatML one;
 * model id "qwisp-fuzz", n_vocab 1000).  The body is passed with its length
 * and no NUL terminator, as the HTTP layer passes it.  Invariants:
 *   - failure: status 400 or 404, a type and a non-empty message; the error
 *     object serialises to JSON that parses back with the same message; the
 *     request holds nothing (the parser freed it);
 *   - success: every field is inside the range the parser promises
 *     (max_tokens -1 or [0, 2^24], temperature [0, 2], top_p/min_p [0, 1],
 *     top_k [0, 2^24], penalties in range, 0..QW_OAI_MAX_STOPS non-empty stop
 *     strings); chat: a ChatML prompt ending in the generation prompt and no
 *     ids; completion: either a text prompt or ids, each in [0, n_vocab);
 *   - the response builders (whole response, stream chunk, usage chunk) turn
 *     the parsed request into JSON that parses back, and the text they carry
 *     (here: the prompt text) comes back byte for byte.
 *
 *     make fuzz && build-fuzz/bin/fuzz_openai_request fuzz/seeds/openai_request
 */
#include "serve/openai.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

#define MODEL_ID "qwisp-fuzz"
#define N_VOCAB 1000

static void check_error(const qw_oai_error *e, const qw_oai_request *r) {
    CHECK(e->status == 400 || e->status == 404);
    CHECK(e->type != NULL && e->message[0]);
    CHECK(memchr(e->param, 0, sizeof e->param) && memchr(e->message, 0, sizeof e->message));
    CHECK(r->prompt_text == NULL && r->prompt_ids == NULL && r->n_stops == 0);
    char *js = qw_oai_error_json(e);
    CHECK(js);
    cJSON *o = cJSON_Parse(js);
    CHECK(o);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
    CHECK(cJSON_IsString(m) && !strcmp(m->valuestring, e->message));
    cJSON_Delete(o);
    free(js);
}

/* The JSON text must parse; returns the string at obj.choices[0].<field> (or
 * <sub>.<field>) compared against want, when want is non-NULL. */
static void check_json(const char *js, const char *sub, const char *field, const char *want) {
    CHECK(js);
    cJSON *o = cJSON_Parse(js);
    CHECK(o);
    if (want) {
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
        if (sub) ch = cJSON_GetObjectItemCaseSensitive(ch, sub);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(ch, field);
        CHECK(cJSON_IsString(s) && !strcmp(s->valuestring, want));
    }
    cJSON_Delete(o);
}

static void check_request(qw_oai_kind kind, const qw_oai_request *r) {
    CHECK(r->kind == kind);
    CHECK(r->max_tokens == -1 || (r->max_tokens >= 0 && r->max_tokens <= (1 << 24)));
    CHECK(r->sp.temp >= 0 && r->sp.temp <= 2);
    CHECK(r->sp.top_p >= 0 && r->sp.top_p <= 1);
    CHECK(r->sp.min_p >= 0 && r->sp.min_p <= 1);
    CHECK(r->sp.top_k >= 0 && r->sp.top_k <= (1 << 24));
    CHECK(r->sp.presence_penalty >= -2 && r->sp.presence_penalty <= 2);
    CHECK(r->sp.frequency_penalty >= -2 && r->sp.frequency_penalty <= 2);
    CHECK(r->sp.repeat_penalty >= 0 && r->sp.repeat_penalty <= 10);
    CHECK(r->n_stops >= 0 && r->n_stops <= QW_OAI_MAX_STOPS);
    for (int i = 0; i < r->n_stops; i++) CHECK(r->stops[i] && r->stops[i][0]);
    if (kind == QW_OAI_CHAT) {
        static const char gen[] = "<|im_start|>assistant\n";
        CHECK(r->prompt_text && !r->prompt_ids && r->n_prompt_ids == 0);
        size_t l = strlen(r->prompt_text);
        CHECK(l >= sizeof gen - 1 && !strcmp(r->prompt_text + l - (sizeof gen - 1), gen));
        CHECK(!strncmp(r->prompt_text, "<|im_start|>", 12));
        CHECK(r->think == QW_THINK_SPLIT || r->think == QW_THINK_OPEN);
    } else {
        CHECK(r->think == QW_THINK_NONE);
        CHECK((r->prompt_text != NULL) != (r->prompt_ids != NULL));
        for (size_t i = 0; i < r->n_prompt_ids; i++) CHECK(r->prompt_ids[i] >= 0 && r->prompt_ids[i] < N_VOCAB);
    }
}

static void check_responses(const qw_oai_request *r) {
    int32_t toks[3] = {0, 1, N_VOCAB - 1};
    qw_oai_reply rep = {.id = "cmpl-fuzz", .created = 1, .model = MODEL_ID, .finish = "stop",
                        .n_prompt = (int32_t)r->n_prompt_ids, .n_gen = 3, .tokens = toks,
                        .prefill_s = 0.5, .decode_s = 0.25, .ttft_s = 0.1};
    bool chat = r->kind == QW_OAI_CHAT;
    /* The prompt text stands in for generated text: arbitrary bytes. */
    const char *text = r->prompt_text ? r->prompt_text : "";
    char *js = qw_oai_response_json(r, &rep, text, chat ? text : NULL);
    check_json(js, chat ? "message" : NULL, chat ? "content" : "text", text);
    free(js);

    qw_strbuf b = {0};
    rep.finish = NULL;
    qw_oai_chunk_sse(&b, r, &rep, true, text, NULL);
    CHECK(b.n > 8 && !memcmp(b.p, "data: ", 6) && !memcmp(b.p + b.n - 2, "\n\n", 2));
    b.p[b.n - 2] = '\0';
    check_json(b.p + 6, chat ? "delta" : NULL, chat ? "content" : "text", text);
    qw_strbuf_free(&b);

    b = (qw_strbuf){0};
    qw_oai_usage_sse(&b, r, &rep);
    CHECK(b.n > 8 && !memcmp(b.p, "data: ", 6) && !memcmp(b.p + b.n - 2, "\n\n", 2));
    b.p[b.n - 2] = '\0';
    check_json(b.p + 6, NULL, NULL, NULL);
    qw_strbuf_free(&b);
}

static void one(qw_oai_kind kind, const char *body, size_t len) {
    qw_oai_request r;
    qw_oai_error e;
    memset(&e, 0, sizeof e);
    memset(&r, 0xA5, sizeof r); /* the parser must set every field */
    if (qw_oai_parse(kind, body, len, NULL, MODEL_ID, N_VOCAB, &r, &e) != 0) {
        check_error(&e, &r);
        return;
    }
    check_request(kind, &r);
    check_responses(&r);
    qw_oai_request_free(&r);
    CHECK(r.prompt_text == NULL && r.prompt_ids == NULL && r.n_stops == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy, exactly sized: ASan sees any read past the body. */
    char *body = malloc(size ? size : 1);
    if (!body) return 0;
    memcpy(body, data, size);
    one(QW_OAI_CHAT, body, size);
    one(QW_OAI_COMPLETION, body, size);
    free(body);
    return 0;
}
