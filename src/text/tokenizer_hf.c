/* tokenizer_hf.c — a qw_tokenizer_spec from Hugging Face tokenizer.json (+
 * tokenizer_config.json), parsed with cJSON.
 *
 * Used by the tests (our ids against the JS tokenizer of the same files) and by
 * gen-model, which writes the spec into a GGUF's tokenizer.ggml.* keys.  So the
 * spec is made the way llama.cpp's converter would make it for the same files:
 *   - ids 0..n-1 with n = max(largest id + 1, n_vocab_pad); holes are
 *     "[PAD<id>]" of type UNUSED;
 *   - model.vocab entries are NORMAL; added_tokens are CONTROL when "special"
 *     is true or the text looks special ("<|...|>"), otherwise USER_DEFINED;
 *   - merges are written "left right" (both the string and the pair form of
 *     tokenizer.json are accepted);
 *   - bos/eos/pad: tokenizer_config.json's bos_token/eos_token/pad_token (a
 *     string or an AddedToken object) looked up in the vocab;
 *   - pre: "qwen2" / "qwen35" when the pre_tokenizer carries the Qwen2 /
 *     Qwen3.5 Split regex (the latter adds \p{M} to letter runs), "gpt2"
 *     for a ByteLevel pre-tokenizer with use_regex; anything else is an
 *     error naming what was found.
 * The spec owns every string (one allocation each); qw_tokenizer_spec_free
 * releases them.
 */
#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char QWEN2_HF_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen3.5's: combining marks (\p{M}) join letter runs. */
static const char QWEN35_HF_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static cJSON *parse_json(const char *path, qw_error *err) {
    char *s = qw_read_file(path, 0, NULL, err);
    if (!s) return NULL;
    cJSON *j = cJSON_Parse(s);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        qw_fail(err, "%s: invalid JSON near byte %td", path, at ? at - s : (ptrdiff_t)-1);
    }
    free(s);
    return j;
}

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>");
}

/* Text of a config token entry: a string or {"content": ...}. */
static const char *token_str(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

/* "qwen2" / "qwen35" / "gpt2" from the pre_tokenizer object, or NULL.  In a
 * Sequence a Split regex wins over the ByteLevel that follows it. */
static const char *detect_pre(const cJSON *pt, char *seen, size_t seen_cap) {
    snprintf(seen, seen_cap, "(none)");
    if (!cJSON_IsObject(pt)) return NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return NULL;
    if (!strcmp(type->valuestring, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        const cJSON *it;
        const char *found = NULL;
        cJSON_ArrayForEach(it, list) {
            const char *p = detect_pre(it, seen, seen_cap);
            if (p && (!found || strcmp(p, "gpt2") != 0)) found = p;
        }
        return found;
    }
    if (!strcmp(type->valuestring, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(re)) {
            snprintf(seen, seen_cap, "Split regex %.200s", re->valuestring);
            if (!strcmp(re->valuestring, QWEN2_HF_REGEX)) return "qwen2";
            if (!strcmp(re->valuestring, QWEN35_HF_REGEX)) return "qwen35";
        }
        return NULL;
    }
    if (!strcmp(type->valuestring, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        snprintf(seen, seen_cap, "ByteLevel");
        if (!ur || cJSON_IsTrue(ur)) return "gpt2";
        return NULL;
    }
    snprintf(seen, seen_cap, "%.100s", type->valuestring);
    return NULL;
}

void qw_tokenizer_spec_free(qw_tokenizer_spec *sp) {
    if (!sp) return;
    if (sp->tokens)
        for (int32_t i = 0; i < sp->n_tokens; i++) free((char *)sp->tokens[i]);
    if (sp->merges)
        for (int32_t i = 0; i < sp->n_merges; i++) free((char *)sp->merges[i]);
    free((void *)sp->tokens);
    free((void *)sp->merges);
    free((void *)sp->token_types);
    free((char *)sp->model);
    free((char *)sp->pre);
    free((char *)sp->chat_template);
    free(sp);
}

static int32_t find_id(const qw_tokenizer_spec *sp, const char *s) {
    if (!s) return -1;
    for (int32_t i = sp->n_tokens - 1; i >= 0; i--) /* specials live at the end */
        if (sp->tokens[i] && !strcmp(sp->tokens[i], s)) return i;
    return -1;
}

qw_tokenizer_spec *qw_tokenizer_spec_from_hf_json(const char *json_path, const char *config_path,
                                                  int32_t n_vocab_pad, qw_error *err) {
    char pathbuf[4096], cfgbuf[4096];
    struct stat st;
    if (stat(json_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(pathbuf, sizeof pathbuf, "%s/tokenizer.json", json_path);
        json_path = pathbuf;
    }
    if (!config_path) {
        const char *slash = strrchr(json_path, '/');
        int dl = slash ? (int)(slash - json_path) : 1;
        snprintf(cfgbuf, sizeof cfgbuf, "%.*s/tokenizer_config.json", dl, slash ? json_path : ".");
        if (stat(cfgbuf, &st) == 0) config_path = cfgbuf;
    }

    qw_tokenizer_spec *sp = NULL;
    cJSON *cfg = NULL, *j = parse_json(json_path, err);
    if (!j) return NULL;
    if (config_path && !(cfg = parse_json(config_path, err))) goto fail;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE") != 0) {
        qw_fail(err, "%s: model.type is %s, only BPE is supported", json_path,
                cJSON_IsString(mtype) ? mtype->valuestring : "missing");
        goto fail;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        qw_fail(err, "%s: model.vocab (object) and model.merges (array) are required", json_path);
        goto fail;
    }
    char seen[256];
    const char *pre = detect_pre(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), seen, sizeof seen);
    if (!pre) {
        qw_fail(err, "%s: pre_tokenizer not supported (found %s; known: the Qwen2 and Qwen3.5 Split "
                "regexes, ByteLevel with use_regex)", json_path, seen);
        goto fail;
    }

    /* size: max id over vocab and added tokens */
    int64_t n = n_vocab_pad > 0 ? n_vocab_pad : 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e8) {
            qw_fail(err, "%s: model.vocab[\"%.60s\"] is not a valid id", json_path, it->string);
            goto fail;
        }
        if ((int64_t)it->valuedouble + 1 > n) n = (int64_t)it->valuedouble + 1;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 || !cJSON_IsString(ct)) {
            qw_fail(err, "%s: added_tokens entry without a valid id/content", json_path);
            goto fail;
        }
        if ((int64_t)id->valuedouble + 1 > n) n = (int64_t)id->valuedouble + 1;
    }
    if (n <= 0) {
        qw_fail(err, "%s: empty vocabulary", json_path);
        goto fail;
    }

    sp = qw_xcalloc(1, sizeof *sp);
    sp->n_tokens = (int32_t)n;
    char **toks = qw_xcalloc((size_t)n, sizeof *toks);
    int32_t *types = qw_xcalloc((size_t)n, sizeof *types);
    sp->tokens = (const char *const *)toks;
    sp->token_types = types;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        free(toks[id]);
        toks[id] = qw_xstrdup(it->string);
        types[id] = QW_TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *ct = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        free(toks[id]);
        toks[id] = qw_xstrdup(ct);
        types[id] = (special || looks_special(ct)) ? QW_TOKEN_CONTROL : QW_TOKEN_USER_DEFINED;
    }
    for (int32_t i = 0; i < sp->n_tokens; i++) {
        if (toks[i]) continue;
        char b[32];
        snprintf(b, sizeof b, "[PAD%d]", i);
        toks[i] = qw_xstrdup(b);
        types[i] = QW_TOKEN_UNUSED;
    }

    int nm = cJSON_GetArraySize(merges);
    char **ms = qw_xcalloc((size_t)(nm > 0 ? nm : 1), sizeof *ms);
    sp->merges = (const char *const *)ms;
    sp->n_merges = 0;
    cJSON_ArrayForEach(it, merges) {
        char *m = NULL;
        if (cJSON_IsString(it)) {
            m = qw_xstrdup(it->valuestring);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) && cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            m = qw_xmalloc(la + lb + 2);
            memcpy(m, a, la);
            m[la] = ' ';
            memcpy(m + la + 1, b, lb + 1);
        } else {
            qw_fail(err, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", json_path,
                    sp->n_merges);
            goto fail;
        }
        ms[sp->n_merges++] = m;
    }

    sp->model = qw_xstrdup("gpt2");
    sp->pre = qw_xstrdup(pre);
    sp->bos_id = sp->eos_id = sp->eot_id = sp->pad_id = -1;
    if (cfg) {
        const char *names[3] = {"bos_token", "eos_token", "pad_token"};
        int32_t *dst[3] = {&sp->bos_id, &sp->eos_id, &sp->pad_id};
        for (int k = 0; k < 3; k++) {
            const char *s = token_str(cJSON_GetObjectItemCaseSensitive(cfg, names[k]));
            if (!s) continue;
            *dst[k] = find_id(sp, s);
            if (*dst[k] < 0) {
                qw_fail(err, "%s: %s \"%s\" is not in the vocabulary", config_path, names[k], s);
                goto fail;
            }
        }
        sp->add_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token"));
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        if (cJSON_IsString(ct)) sp->chat_template = qw_xstrdup(ct->valuestring);
    }
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    return sp;
fail:
    qw_tokenizer_spec_free(sp);
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    return NULL;
}
