/* tokenizer_gguf.c — qw_tokenizer_from_gguf: reads a GGUF's tokenizer.ggml.*
 * keys into a qw_tokenizer_spec and hands it to qw_tokenizer_new.
 *
 * Keys read (llama.cpp's names):
 *   tokenizer.ggml.model        string, must be "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre          string; missing = "default" (as llama.cpp)
 *   tokenizer.ggml.tokens       string[n]
 *   tokenizer.ggml.token_type   int32[n] (optional; all NORMAL if missing)
 *   tokenizer.ggml.merges       string[m] "left right"
 *   tokenizer.ggml.{bos,eos,eot,padding}_token_id   u32 (optional)
 *   tokenizer.ggml.add_bos_token bool (optional, default false)
 * Every problem is reported with the key and the value seen.  String pointers
 * come from the reader and live as long as the qw_gguf; the spec only borrows
 * them for the duration of qw_tokenizer_new, which copies what it keeps.
 */
#include "qwisp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* String array key -> malloc'd array of borrowed pointers.  -1 + err if the key
 * is missing or not a string array. */
static int str_array(const qw_gguf *g, const char *key, bool required, const char ***out, int32_t *n,
                     qw_error *err) {
    *out = NULL;
    *n = 0;
    int64_t i = qw_gguf_find_key(g, key);
    if (i < 0) {
        if (!required) return 0;
        return qw_fail(err, "%s: missing key %s", qw_gguf_path(g), key);
    }
    qw_gguf_vtype et;
    uint64_t cnt;
    const void *data;
    if (qw_gguf_kv_arr(g, (size_t)i, &et, &cnt, &data) != 0 || et != QW_GGUF_STRING)
        return qw_fail(err, "%s: key %s is not an array of strings", qw_gguf_path(g), key);
    if (cnt > (uint64_t)INT32_MAX)
        return qw_fail(err, "%s: key %s has %llu entries (too many)", qw_gguf_path(g), key,
                       (unsigned long long)cnt);
    const char **a = qw_xmalloc((cnt ? cnt : 1) * sizeof *a);
    for (uint64_t j = 0; j < cnt; j++) {
        a[j] = qw_gguf_arr_str(g, (size_t)i, j, NULL);
        if (!a[j]) {
            free(a);
            return qw_fail(err, "%s: key %s entry %llu unreadable", qw_gguf_path(g), key,
                           (unsigned long long)j);
        }
    }
    *out = a;
    *n = (int32_t)cnt;
    return 0;
}

static int32_t opt_id(const qw_gguf *g, const char *key) {
    uint32_t v;
    if (qw_gguf_get_u32(g, key, &v) != 0 || v > (uint32_t)INT32_MAX) return -1;
    return (int32_t)v;
}

qw_tokenizer *qw_tokenizer_from_gguf(const qw_gguf *g, qw_error *err) {
    const char *model = NULL, *pre = "default";
    size_t len;
    if (qw_gguf_get_str(g, "tokenizer.ggml.model", &model, &len) != 0) {
        qw_fail(err, "%s: missing key tokenizer.ggml.model (the file has no tokenizer)", qw_gguf_path(g));
        return NULL;
    }
    if (strcmp(model, "gpt2") != 0) {
        qw_fail(err, "%s: tokenizer.ggml.model = \"%s\" is not supported (only \"gpt2\", byte-level BPE)",
                qw_gguf_path(g), model);
        return NULL;
    }
    if (qw_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 &&
        qw_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &len) != 0) {
        qw_fail(err, "%s: tokenizer.ggml.pre is not a string", qw_gguf_path(g));
        return NULL;
    }

    qw_tokenizer_spec sp = {0};
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    qw_tokenizer *t = NULL;
    sp.model = model;
    sp.pre = pre;
    if (str_array(g, "tokenizer.ggml.tokens", true, &tokens, &sp.n_tokens, err) != 0) goto done;
    if (str_array(g, "tokenizer.ggml.merges", false, &merges, &sp.n_merges, err) != 0) goto done;
    sp.tokens = tokens;
    sp.merges = merges;

    int64_t ti = qw_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (ti >= 0) {
        qw_gguf_vtype et;
        uint64_t cnt;
        const void *data;
        if (qw_gguf_kv_arr(g, (size_t)ti, &et, &cnt, &data) != 0 ||
            (et != QW_GGUF_INT32 && et != QW_GGUF_UINT32) || cnt != (uint64_t)sp.n_tokens) {
            qw_fail(err, "%s: tokenizer.ggml.token_type must be an int32 array of %d entries "
                    "(one per token)", qw_gguf_path(g), sp.n_tokens);
            goto done;
        }
        types = qw_xmalloc((size_t)sp.n_tokens * sizeof *types);
        memcpy(types, data, (size_t)sp.n_tokens * sizeof *types); /* may be unaligned */
        sp.token_types = types;
    }
    sp.bos_id = opt_id(g, "tokenizer.ggml.bos_token_id");
    sp.eos_id = opt_id(g, "tokenizer.ggml.eos_token_id");
    sp.eot_id = opt_id(g, "tokenizer.ggml.eot_token_id");
    sp.pad_id = opt_id(g, "tokenizer.ggml.padding_token_id");
    bool b;
    sp.add_bos = qw_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0 && b;

    t = qw_tokenizer_new(&sp, err);
    if (!t) {
        /* prefix the file name so the message says where */
        char msg[QW_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        qw_fail(err, "%s: %s", qw_gguf_path(g), msg);
    }
done:
    free(tokens);
    free(merges);
    free(types);
    return t;
}
