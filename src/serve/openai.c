/* openai.c — request parsing and response building for /v1/chat/completions
 * and /v1/completions (see openai.h).
 *
 * Validation is strict about types (a string where a number belongs is a 400
 * naming the field) and about fields: nothing is silently ignored.  A field
 * this server does not implement is a 400 `unsupported_parameter` naming it
 * (OpenAI's own server rejects unknown arguments too), so an agent or a
 * JSON-mode client fails loudly instead of getting plain text.  The only
 * exceptions are listed in k_ignored (they change nothing a client can
 * observe here, e.g. `user`) and fields given at their no-op value
 * (`echo: false`, `best_of: 1`, `tools: []`, …; harmless_default).
 * Fields honoured: model, messages / prompt,
 * max_tokens (alias max_completion_tokens), temperature, top_p, seed, stop,
 * presence_penalty, frequency_penalty, stream, stream_options.include_usage,
 * n (must be 1), logit_bias, logprobs / top_logprobs, response_format
 * (json_object, json_schema: compiled here, json_constraint.h), the chat
 * fields of chat_req.c (messages, tools, tool_choice, parallel_tool_calls,
 * chat_template_kwargs); llama.cpp-style extensions: top_k, min_p,
 * repeat_penalty, return_tokens (the generated ids in the choice), ignore_eos.
 * Defaults follow OpenAI: temperature 1, top_p 1; no seed means a fresh one
 * per request.
 *
 * The body must be one JSON value and nothing else (trailing bytes are a
 * 400, not ignored); a completion prompt keeps its exact bytes, NULs
 * included (jsonstr.c), since cJSON's strings end at the first NUL.
 */
#include "openai.h"

#include "jsonstr.h"
#include "qwisp/tokenizer.h"
#include "qwisp/tool_calls.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int qw_oai_fail(qw_oai_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *qw_oai_error_json(const qw_oai_error *e) {
    cJSON *o = cJSON_CreateObject(), *er = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(er, "message", e->message);
    cJSON_AddStringToObject(er, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(er, "param", e->param);
    else cJSON_AddNullToObject(er, "param");
    if (e->code) cJSON_AddStringToObject(er, "code", e->code);
    else cJSON_AddNullToObject(er, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

#define BAD(param, ...) qw_oai_fail(e, 400, "invalid_request_error", "invalid_value", param, __VA_ARGS__)

/* A present, non-null field; NULL when absent or null. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static int get_num(const cJSON *o, const char *name, double lo, double hi, double *out, qw_oai_error *e) {
    const cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f)) return BAD(name, "'%s' must be a number", name);
    double v = f->valuedouble;
    if (!isfinite(v) || v < lo || v > hi) return BAD(name, "'%s' = %g is out of range [%g, %g]", name, v, lo, hi);
    *out = v;
    return 1;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, double *out, qw_oai_error *e) {
    int r = get_num(o, name, lo, hi, out, e);
    if (r == 1 && *out != floor(*out)) return BAD(name, "'%s' must be an integer", name);
    return r;
}

static int get_bool(const cJSON *o, const char *name, bool *out, qw_oai_error *e) {
    const cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return BAD(name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return 1;
}

static int parse_prompt(const cJSON *root, const char *body, size_t len, int32_t n_vocab, qw_oai_request *r,
                        qw_oai_error *e) {
    const cJSON *p = field(root, "prompt");
    if (!p) return qw_oai_fail(e, 400, "invalid_request_error", "missing_required_parameter", "prompt",
                               "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        /* the exact bytes: p->valuestring would end at a "\u0000" */
        r->prompt_text = qw_json_member_string(body, len, "prompt", &r->prompt_len);
        if (!r->prompt_text) return BAD("prompt", "'prompt' could not be decoded");
        r->think = QW_THINK_NONE;
        return 0;
    }
    if (!cJSON_IsArray(p)) return BAD("prompt", "'prompt' must be a string or an array of token ids");
    int n = cJSON_GetArraySize(p);
    r->prompt_ids = qw_xcalloc((size_t)(n ? n : 1), sizeof(int32_t));
    const cJSON *x;
    cJSON_ArrayForEach(x, p) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= n_vocab)
            return BAD("prompt", "'prompt' must be one string or token ids in [0, %d)", n_vocab);
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)x->valuedouble;
    }
    r->think = QW_THINK_NONE;
    return 0;
}

static int parse_stop(const cJSON *root, qw_oai_request *r, qw_oai_error *e) {
    const cJSON *s = field(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (s->valuestring[0]) r->stops[r->n_stops++] = qw_xstrdup(s->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(s)) return BAD("stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > QW_OAI_MAX_STOPS) return BAD("stop", "'stop' has more than %d strings", QW_OAI_MAX_STOPS);
    const cJSON *x;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsString(x)) return BAD("stop", "'stop' must contain only strings");
        if (x->valuestring[0]) r->stops[r->n_stops++] = qw_xstrdup(x->valuestring);
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100], …}, as OpenAI's API. */
static int parse_logit_bias(const cJSON *root, int32_t n_vocab, qw_oai_request *r, qw_oai_error *e) {
    const cJSON *lb = field(root, "logit_bias");
    if (!lb) return 0;
    if (!cJSON_IsObject(lb))
        return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases in [-100, 100]");
    if (cJSON_GetArraySize(lb) > QW_SAMPLER_MAX_BIAS)
        return BAD("logit_bias", "'logit_bias' has %d entries; at most %d", cJSON_GetArraySize(lb), QW_SAMPLER_MAX_BIAS);
    const cJSON *x;
    cJSON_ArrayForEach(x, lb) {
        char *end = NULL;
        const char *k = x->string;
        long id = k && *k >= '0' && *k <= '9' ? strtol(k, &end, 10) : -1;
        if (id < 0 || !end || *end || id >= n_vocab)
            return BAD("logit_bias", "'logit_bias' key '%.40s' is not a token id in [0, %d)", k ? k : "", n_vocab);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < -100 || x->valuedouble > 100)
            return BAD("logit_bias", "'logit_bias' value for token %ld must be a number in [-100, 100]", id);
        r->sp.logit_bias[r->sp.n_logit_bias++] = (qw_logit_bias){(int32_t)id, (float)x->valuedouble};
    }
    return 0;
}

/* ---- which fields exist ---- */

static const char *const k_common[] = {"model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                                       "stop", "presence_penalty", "frequency_penalty", "stream", "stream_options", "n",
                                       "logit_bias", "logprobs", "response_format",
                                       /* llama.cpp-style extensions */
                                       "top_k", "min_p", "repeat_penalty", "ignore_eos", "return_tokens", NULL};
static const char *const k_chat_only[] = {"messages", "top_logprobs", NULL};
static const char *const k_completion_only[] = {"prompt", NULL};
/* Deliberately ignored: bookkeeping for OpenAI's platform that changes
 * nothing in what this server generates (docs/serve.md lists them). */
static const char *const k_ignored[] = {"user", "metadata", "store", "service_tier", "prompt_cache_key",
                                        "safety_identifier", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* A field this server does not implement, given at the value that asks for
 * nothing (so clients that always send it still work). */
static bool harmless_default(const cJSON *f) {
    const char *k = f->string;
    if (!strcmp(k, "echo")) return cJSON_IsFalse(f);
    if (!strcmp(k, "best_of")) return cJSON_IsNumber(f) && f->valuedouble == 1;
    if (!strcmp(k, "suffix")) return cJSON_IsString(f) && !f->valuestring[0];
    if (!strcmp(k, "tools") || !strcmp(k, "functions")) return cJSON_IsArray(f) && cJSON_GetArraySize(f) == 0;
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call"))
        return cJSON_IsString(f) && (!strcmp(f->valuestring, "none") || !strcmp(f->valuestring, "auto"));
    if (!strcmp(k, "modalities"))
        return cJSON_IsArray(f) && cJSON_GetArraySize(f) == 1 && cJSON_IsString(cJSON_GetArrayItem(f, 0)) &&
               !strcmp(cJSON_GetArrayItem(f, 0)->valuestring, "text");
    return false;
}

static int check_fields(const cJSON *root, qw_oai_kind kind, qw_oai_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string;
        if (cJSON_IsNull(f) || in_list(k_common, k) || in_list(k_ignored, k)) continue;
        if (in_list(kind == QW_OAI_CHAT ? k_chat_only : k_completion_only, k)) continue;
        if (kind == QW_OAI_CHAT && in_list(qw_oai_chat_fields, k)) continue; /* chat_req.c reads them */
        if (harmless_default(f)) continue;
        return qw_oai_fail(e, 400, "invalid_request_error", "unsupported_parameter", k,
                           "'%.48s' is not supported by this server%s", k,
                           in_list(kind == QW_OAI_CHAT ? k_completion_only : k_chat_only, k)
                               ? (kind == QW_OAI_CHAT ? " on /v1/chat/completions" : " on /v1/completions")
                               : "");
    }
    return 0;
}

/* logprobs: chat takes logprobs (bool) + top_logprobs (0..20, needs
 * logprobs); completions the legacy logprobs number (0..20; OpenAI's limit
 * is 5). */
static int parse_logprobs(const cJSON *root, qw_oai_kind kind, qw_oai_request *r, qw_oai_error *e) {
    double v;
    int k;
    if (kind == QW_OAI_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
        if ((k = get_int(root, "top_logprobs", 0, QW_SAMPLER_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
        if (k && !r->logprobs)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (k) r->top_logprobs = (int32_t)v;
        return 0;
    }
    if ((k = get_int(root, "logprobs", 0, QW_SAMPLER_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
    if (k) {
        r->logprobs = true;
        r->top_logprobs = (int32_t)v;
    }
    return 0;
}

/* response_format: {"type":"text"} | {"type":"json_object"} |
 * {"type":"json_schema","json_schema":{"name","schema","strict","description"}}.
 * The schema is compiled here; what it cannot express is a 400 naming it. */
static int parse_response_format(const cJSON *root, qw_oai_request *r, qw_oai_error *e) {
    const cJSON *rf = field(root, "response_format");
    if (!rf) return 0;
    const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (!cJSON_IsString(t))
        return BAD("response_format", "'response_format' must be an object with a 'type': text, json_object or json_schema");
    const cJSON *f;
    cJSON_ArrayForEach(f, rf) {
        if (strcmp(f->string, "type") && strcmp(f->string, "json_schema"))
            return qw_oai_fail(e, 400, "invalid_request_error", "unsupported_parameter", "response_format",
                               "'response_format.%.40s' is not supported", f->string);
    }
    const char *ty = t->valuestring;
    if (!strcmp(ty, "text")) return 0;
    if (!strcmp(ty, "json_object")) {
        r->response_format = QW_OAI_RF_JSON_OBJECT;
        r->schema = qw_json_schema_any_object();
        if (!r->schema) return qw_oai_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        return 0;
    }
    if (strcmp(ty, "json_schema"))
        return BAD("response_format", "'response_format.type' = '%.40s': expected text, json_object or json_schema", ty);
    const cJSON *js = field(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return qw_oai_fail(e, 400, "invalid_request_error", "missing_required_parameter", "response_format",
                           "'response_format.json_schema' (an object with 'name' and 'schema') is required");
    cJSON_ArrayForEach(f, js) {
        if (strcmp(f->string, "name") && strcmp(f->string, "schema") && strcmp(f->string, "strict") &&
            strcmp(f->string, "description"))
            return qw_oai_fail(e, 400, "invalid_request_error", "unsupported_parameter", "response_format",
                               "'response_format.json_schema.%.40s' is not supported", f->string);
    }
    const cJSON *name = field(js, "name"), *schema = field(js, "schema"), *strict = field(js, "strict");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return BAD("response_format", "'response_format.json_schema.name' must be a non-empty string");
    if (strict && !cJSON_IsBool(strict)) return BAD("response_format", "'response_format.json_schema.strict' must be a boolean");
    if (!schema) {
        r->schema = qw_json_schema_any_object(); /* OpenAI: no schema = any JSON object */
    } else {
        if (!cJSON_IsObject(schema)) return BAD("response_format", "'response_format.json_schema.schema' must be an object");
        char *txt = cJSON_PrintUnformatted(schema);
        qw_error err = {0};
        r->schema = txt ? qw_json_schema_compile(txt, strlen(txt), &err) : NULL;
        free(txt);
        if (!r->schema)
            return qw_oai_fail(e, 400, "invalid_request_error", "unsupported_schema", "response_format",
                               "response_format.json_schema.%s", err.msg);
    }
    if (!r->schema) return qw_oai_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    r->response_format = QW_OAI_RF_JSON_SCHEMA;
    return 0;
}

static uint64_t fresh_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static _Atomic uint64_t ctr;
    return qw_hash64(&ts, sizeof ts, ++ctr);
}

int qw_oai_parse(qw_oai_kind kind, const char *body, size_t len, const char *tmpl, const char *model_id,
                 int32_t n_vocab, qw_oai_request *r, qw_oai_error *e) {
    *r = (qw_oai_request){.kind = kind, .max_tokens = -1, .sp = qw_sampler_default_params()};
    r->sp.temp = 1.0f;
    r->sp.seed = fresh_seed();
    const char *at = NULL; /* where parsing stopped: the error, or the end of the value */
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &at, 0);
    long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
    if (!root)
        return qw_oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                           "the request body is not valid JSON (near byte %ld)", off);
    int rc = -1;
    double v;
    while (at && at < body + len && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
    if (at != body + len) {
        qw_oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                    "the request body has data after its JSON value (at byte %ld)", off);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        BAD(NULL, "the request body must be a JSON object");
        goto out;
    }
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) {
        BAD("model", "'model' must be a string");
        goto out;
    }
    if (model && strcmp(model->valuestring, model_id) != 0) {
        qw_oai_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%s' does not exist; this server serves '%s'", model->valuestring, model_id);
        goto out;
    }
    if (check_fields(root, kind, e)) goto out;
    if (get_bool(root, "stream", &r->stream, e) < 0) goto out;
    if (get_bool(root, "return_tokens", &r->return_tokens, e) < 0) goto out;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) goto out;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) {
        BAD("stream_options", "'stream_options' must be an object");
        goto out;
    }
    if (so && get_bool(so, "include_usage", &r->include_usage, e) < 0) goto out;
    int k;
    if ((k = get_int(root, "n", 1, 1, &v, e)) < 0) {
        snprintf(e->message, sizeof e->message, "'n' must be 1 (one choice per request)");
        goto out;
    }
    const char *mt = field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((k = get_int(root, mt, 0, 1 << 24, &v, e)) < 0) goto out;
    if (k) r->max_tokens = (int32_t)v;
    if ((k = get_num(root, "temperature", 0, 2, &v, e)) < 0) goto out;
    if (k) r->sp.temp = (float)v;
    if ((k = get_num(root, "top_p", 0, 1, &v, e)) < 0) goto out;
    if (k) r->sp.top_p = (float)v;
    if ((k = get_num(root, "min_p", 0, 1, &v, e)) < 0) goto out;
    if (k) r->sp.min_p = (float)v;
    if ((k = get_int(root, "top_k", 0, 1 << 24, &v, e)) < 0) goto out;
    if (k) r->sp.top_k = (int32_t)v;
    if ((k = get_int(root, "seed", -9.2e18, 1.8e19, &v, e)) < 0) goto out;
    /* Negative seeds wrap (two's complement); seeds >= 2^63 convert as
     * unsigned: (int64_t)v would be undefined for them (found by fuzzing). */
    if (k) r->sp.seed = v < 0 ? (uint64_t)(int64_t)v : (uint64_t)v;
    if ((k = get_num(root, "presence_penalty", -2, 2, &v, e)) < 0) goto out;
    if (k) r->sp.presence_penalty = (float)v;
    if ((k = get_num(root, "frequency_penalty", -2, 2, &v, e)) < 0) goto out;
    if (k) r->sp.frequency_penalty = (float)v;
    if ((k = get_num(root, "repeat_penalty", 0, 10, &v, e)) < 0) goto out;
    if (k) r->sp.repeat_penalty = (float)v;
    if (r->sp.presence_penalty != 0 || r->sp.frequency_penalty != 0 || r->sp.repeat_penalty != 1)
        r->sp.penalty_last_n = 64; /* as `qwisp run`'s penalty flags */
    if (parse_stop(root, r, e)) goto out;
    if (parse_logit_bias(root, n_vocab, r, e)) goto out;
    if (parse_logprobs(root, kind, r, e)) goto out;
    if (parse_response_format(root, r, e)) goto out;
    if (r->schema && r->ignore_eos) {
        BAD("ignore_eos", "'ignore_eos' cannot be combined with a JSON 'response_format' (generation ends when the value is complete)");
        goto out;
    }
    if (kind == QW_OAI_CHAT && qw_json_has_nul(body, len)) {
        BAD("messages", "a string in the request holds \\u0000 (a NUL character), which chat messages cannot carry "
                        "(they would be cut there); remove it, or send the text to /v1/completions");
        goto out;
    }
    if (kind == QW_OAI_CHAT ? qw_oai_parse_chat(root, tmpl, r, e) : parse_prompt(root, body, len, n_vocab, r, e)) goto out;
    /* Constrained output is all content: a template that opens <think>
     * would otherwise make the JSON reasoning. */
    if (r->schema) r->think = QW_THINK_NONE;
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) qw_oai_request_free(r);
    return rc;
}

void qw_oai_request_free(qw_oai_request *r) {
    free(r->prompt_text);
    free(r->prompt_segs);
    r->prompt_segs = NULL;
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    qw_json_schema_free(r->schema);
    r->schema = NULL;
    r->prompt_text = NULL;
    r->prompt_ids = NULL;
    r->n_stops = 0;
    free(r->tools_json);
    free(r->tool_name);
    free(r->prefill);
    r->tools_json = r->tool_name = r->prefill = NULL;
}

/* ---- responses ---- */

static void add_head(cJSON *o, const qw_oai_reply *rep, const char *object) {
    cJSON_AddStringToObject(o, "id", rep->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)rep->created);
    cJSON_AddStringToObject(o, "model", rep->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "qwisp");
}

static void add_usage(cJSON *o, const qw_oai_reply *rep) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", rep->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", rep->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", rep->n_prompt + rep->n_gen);
}

/* llama.cpp-style timings (an extension clients ignore). */
static void add_timings(cJSON *o, const qw_oai_reply *rep) {
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", rep->n_prompt);
    cJSON_AddNumberToObject(t, "prompt_ms", rep->prefill_s * 1e3);
    cJSON_AddNumberToObject(t, "prompt_per_second", rep->prefill_s > 0 ? rep->n_prompt / rep->prefill_s : 0);
    cJSON_AddNumberToObject(t, "predicted_n", rep->n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", rep->decode_s * 1e3);
    cJSON_AddNumberToObject(t, "predicted_per_second",
                            rep->decode_s > 0 && rep->n_gen > 1 ? (rep->n_gen - 1) / rep->decode_s : 0);
    cJSON_AddNumberToObject(t, "ttft_ms", rep->ttft_s * 1e3);
}

/* ---- logprobs ---- */

/* A token's text (invalid UTF-8 -> U+FFFD; "bytes" keeps the exact bytes)
 * into b; returns its raw byte length. */
static int token_text(const qw_tokenizer *tok, int32_t id, qw_strbuf *b, char *raw, size_t cap) {
    int n = qw_token_to_bytes(tok, id, raw, cap);
    if (n < 0) n = 0;
    if ((size_t)n > cap) n = (int)cap;
    b->n = 0;
    qw_strbuf_add(b, "", 0);
    qw_utf8_sanitize(b, raw, (size_t)n);
    return n;
}

/* -inf (a token the model gives no mass) as OpenAI writes it. */
static double lp_value(float x) { return isfinite(x) ? (double)x : -9999.0; }

static cJSON *chat_entry(const qw_tokenizer *tok, int32_t id, float lp, qw_strbuf *b) {
    char raw[512];
    int n = token_text(tok, id, b, raw, sizeof raw);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", b->p);
    cJSON_AddNumberToObject(o, "logprob", lp_value(lp));
    cJSON *by = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(by, cJSON_CreateNumber((unsigned char)raw[i]));
    return o;
}

/* choice.logprobs: chat {"content":[{token, logprob, bytes, top_logprobs}],
 * "refusal":null}; completions (legacy) {"tokens", "token_logprobs",
 * "top_logprobs":[{text: logprob}] (the alternatives plus the chosen token),
 * "text_offset"}.  null when not asked for or when this chunk has none. */
static void add_logprobs(cJSON *ch, const qw_oai_request *r, const qw_oai_reply *rep) {
    if (!r->logprobs || !rep->tok || rep->n_lps == 0) {
        cJSON_AddNullToObject(ch, "logprobs");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(ch, "logprobs");
    qw_strbuf b = {0};
    if (r->kind == QW_OAI_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int32_t i = 0; i < rep->n_lps; i++) {
            const qw_token_logprobs *t = &rep->lps[i];
            cJSON *en = chat_entry(rep->tok, t->id, t->logprob, &b);
            cJSON *tops = cJSON_AddArrayToObject(en, "top_logprobs");
            for (int32_t k = 0; k < t->n_top && k < r->top_logprobs; k++)
                cJSON_AddItemToArray(tops, chat_entry(rep->tok, t->top_id[k], t->top_logprob[k], &b));
            cJSON_AddItemToArray(content, en);
        }
        cJSON_AddNullToObject(o, "refusal");
    } else {
        cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
        size_t off = rep->text_offset;
        char raw[512];
        for (int32_t i = 0; i < rep->n_lps; i++) {
            const qw_token_logprobs *t = &rep->lps[i];
            int n = token_text(rep->tok, t->id, &b, raw, sizeof raw);
            cJSON_AddItemToArray(toks, cJSON_CreateString(b.p));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_value(t->logprob)));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
            off += (size_t)n;
            cJSON *d = cJSON_CreateObject();
            for (int32_t k = 0; k < t->n_top && k < r->top_logprobs; k++) {
                token_text(rep->tok, t->top_id[k], &b, raw, sizeof raw);
                if (!cJSON_GetObjectItemCaseSensitive(d, b.p)) cJSON_AddNumberToObject(d, b.p, lp_value(t->top_logprob[k]));
            }
            token_text(rep->tok, t->id, &b, raw, sizeof raw);
            if (!cJSON_GetObjectItemCaseSensitive(d, b.p)) cJSON_AddNumberToObject(d, b.p, lp_value(t->logprob));
            cJSON_AddItemToArray(tops, d);
        }
    }
    qw_strbuf_free(&b);
}

static void add_finish(cJSON *o, const char *finish) {
    if (finish) cJSON_AddStringToObject(o, "finish_reason", finish);
    else cJSON_AddNullToObject(o, "finish_reason");
}

/* "call_" + 24 hex digits, from the response id and the call's index. */
static void call_id(const qw_oai_reply *rep, size_t i, char out[32]) {
    uint64_t h = qw_hash64(rep->id, strlen(rep->id), i + 1);
    snprintf(out, 32, "call_%016llx%08llx", (unsigned long long)h, (unsigned long long)(i & 0xffffffffu));
}

/* message.tool_calls, or one stream delta's (part 0: head, 1: arguments). */
static cJSON *tool_calls_json(const qw_oai_reply *rep, const qw_tool_calls *tc, bool index) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < tc->n; i++) {
        cJSON *c = cJSON_CreateObject();
        char id[32];
        call_id(rep, i, id);
        if (index) cJSON_AddNumberToObject(c, "index", (double)i);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", tc->calls[i].name);
        cJSON_AddStringToObject(f, "arguments", tc->calls[i].arguments);
        cJSON_AddItemToArray(arr, c);
    }
    return arr;
}

char *qw_oai_response_json(const qw_oai_request *r, const qw_oai_reply *rep, const char *content,
                           const char *reasoning) {
    cJSON *o = cJSON_CreateObject();
    bool chat = r->kind == QW_OAI_CHAT;
    add_head(o, rep, chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (rep->tool_calls && !(content && content[0])) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", content ? content : "");
        if (reasoning && reasoning[0]) cJSON_AddStringToObject(m, "reasoning_content", reasoning);
        if (rep->tool_calls) cJSON_AddItemToObject(m, "tool_calls", tool_calls_json(rep, rep->tool_calls, false));
    } else {
        cJSON_AddStringToObject(ch, "text", content ? content : "");
    }
    add_logprobs(ch, r, rep);
    add_finish(ch, rep->finish);
    if (r->return_tokens) {
        cJSON *ta = cJSON_AddArrayToObject(ch, "tokens");
        for (int32_t i = 0; i < rep->n_gen && rep->tokens; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(rep->tokens[i]));
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(arr, ch);
    add_usage(o, rep);
    add_timings(o, rep);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void emit_sse(qw_strbuf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    qw_strbuf_add(out, "data: ", 6);
    qw_strbuf_add(out, s, strlen(s));
    qw_strbuf_add(out, "\n\n", 2);
    free(s);
    cJSON_Delete(o);
}

void qw_oai_chunk_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep, bool role,
                      const char *content, const char *reasoning) {
    cJSON *o = cJSON_CreateObject();
    bool chat = r->kind == QW_OAI_CHAT;
    add_head(o, rep, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (content) cJSON_AddStringToObject(d, "content", content);
        if (reasoning) cJSON_AddStringToObject(d, "reasoning_content", reasoning);
    } else {
        cJSON_AddStringToObject(ch, "text", content ? content : "");
    }
    add_logprobs(ch, r, rep);
    add_finish(ch, rep->finish);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(arr, ch);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    emit_sse(out, o);
}

void qw_oai_tool_calls_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep,
                           const qw_tool_calls *tc) {
    for (size_t i = 0; i < tc->n; i++)
        for (int part = 0; part < 2; part++) {
            cJSON *o = cJSON_CreateObject();
            add_head(o, rep, "chat.completion.chunk");
            cJSON *ch = cJSON_CreateObject();
            cJSON_AddNumberToObject(ch, "index", 0);
            cJSON *d = cJSON_AddObjectToObject(ch, "delta");
            cJSON *arr = cJSON_AddArrayToObject(d, "tool_calls");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", (double)i);
            cJSON *f;
            if (part == 0) {
                char id[32];
                call_id(rep, i, id);
                cJSON_AddStringToObject(c, "id", id);
                cJSON_AddStringToObject(c, "type", "function");
                f = cJSON_AddObjectToObject(c, "function");
                cJSON_AddStringToObject(f, "name", tc->calls[i].name);
                cJSON_AddStringToObject(f, "arguments", "");
            } else {
                f = cJSON_AddObjectToObject(c, "function");
                cJSON_AddStringToObject(f, "arguments", tc->calls[i].arguments);
            }
            cJSON_AddItemToArray(arr, c);
            cJSON_AddNullToObject(ch, "logprobs");
            cJSON_AddNullToObject(ch, "finish_reason");
            cJSON *chs = cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToArray(chs, ch);
            if (r->include_usage) cJSON_AddNullToObject(o, "usage");
            emit_sse(out, o);
        }
}

void qw_oai_usage_sse(qw_strbuf *out, const qw_oai_request *r, const qw_oai_reply *rep) {
    cJSON *o = cJSON_CreateObject();
    add_head(o, rep, r->kind == QW_OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, rep);
    add_timings(o, rep);
    emit_sse(out, o);
}

void qw_oai_done_sse(qw_strbuf *out) { qw_strbuf_add(out, "data: [DONE]\n\n", 14); }

char *qw_oai_models_json(const char *model_id, long created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *arr = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "qwisp");
    cJSON_AddItemToArray(arr, m);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
