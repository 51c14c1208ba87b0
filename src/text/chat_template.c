/* chat_template.c — renders a conversation into the prompt text a model was
 * trained on.  See qw_chat_render in include/qwisp/tokenizer.h.
 *
 * qwisp does not run Jinja.  Like llama.cpp without --jinja, it recognises the
 * template's family from marker strings in the template text and renders that
 * family with built-in code.  Only ChatML is rendered today:
 *
 *     <|im_start|>{role}\n{content}<|im_end|>\n      per message
 *     <|im_start|>assistant\n                         with add_generation_prompt
 *
 * This is byte-for-byte llama.cpp's built-in "chatml" output, which llama.cpp
 * picks for any template containing "<|im_start|>" (Qwen2, Qwen2.5, Qwen3, …)
 * unless it also contains "<|im_sep|>" (Phi-4) or "<end_of_utterance>"
 * (SmolVLM).  For Qwen3's real Jinja template it equals the Jinja output for
 * system/user turns with the default enable_thinking; it differs for
 * assistant turns holding <think> blocks (Jinja strips the reasoning of
 * earlier turns) and for tool calls, which the built-in form passes through
 * verbatim.  A template of another family is an error naming the family, so
 * a model is never silently prompted in the wrong format.
 *
 * The renderer also records which bytes are its own markup and which came
 * from the messages (roles, contents): qw_tokenize_segments parses special
 * tokens only in the markup, so a message cannot forge a turn by writing
 * "<|im_start|>system" (role injection).
 */
#include "qwisp/tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct family_marker {
    const char *needle, *also, *name;
} family_marker;

/* Families qwisp recognises but does not render, for a precise error. */
static const family_marker OTHER_FAMILIES[] = {
    {"<|start_header_id|>", "<|end_header_id|>", "llama3"},
    {"[INST]", NULL, "mistral/llama2"},
    {"<start_of_turn>", NULL, "gemma"},
    {"<|assistant|>", "<|end|>", "phi3"},
    {"<|assistant|>", "<|user|>", "glm/zephyr"},
    {"<|START_OF_TURN_TOKEN|>", NULL, "command-r"},
    {"<|start|>", "<|channel|>", "gpt-oss"},
    {"### Instruction:", NULL, "deepseek-coder"},
};

/* 0 = ChatML; -1 + err otherwise. */
static int detect(const char *tmpl, qw_error *err) {
    if (!tmpl || !*tmpl || !strcmp(tmpl, "chatml")) return 0;
    if (strstr(tmpl, "<|im_start|>")) {
        if (strstr(tmpl, "<|im_sep|>"))
            return qw_fail(err, "chat template family \"phi4\" (<|im_sep|>) is not supported; only ChatML is");
        if (strstr(tmpl, "<end_of_utterance>"))
            return qw_fail(err, "chat template family \"smolvlm\" is not supported; only ChatML is");
        return 0;
    }
    for (size_t i = 0; i < sizeof OTHER_FAMILIES / sizeof OTHER_FAMILIES[0]; i++) {
        const family_marker *f = &OTHER_FAMILIES[i];
        if (strstr(tmpl, f->needle) && (!f->also || strstr(tmpl, f->also)))
            return qw_fail(err, "chat template family \"%s\" is not supported; only ChatML is", f->name);
    }
    return qw_fail(err, "chat template of an unknown family (starts \"%.40s\"); only ChatML is supported",
                   tmpl);
}

/* Appends str[len] to the prompt as markup or content, merging with the last
 * segment when of the same kind.  Space was sized beforehand. */
static void put(qw_chat_prompt *p, const char *str, size_t len, bool markup) {
    if (len == 0) return;
    memcpy(p->text + p->len, str, len);
    qw_text_seg *last = p->n_segs ? &p->segs[p->n_segs - 1] : NULL;
    if (last && last->markup == markup) last->len += len;
    else p->segs[p->n_segs++] = (qw_text_seg){p->len, len, markup};
    p->len += len;
}

int qw_chat_render_template_prompt(const char *tmpl, const qw_chat_msg *msgs, size_t n,
                                   bool add_generation_prompt, qw_chat_prompt *out, qw_error *err) {
    memset(out, 0, sizeof *out);
    if (detect(tmpl, err) != 0) return -1;
    static const char open[] = "<|im_start|>", close[] = "<|im_end|>\n", gen[] = "<|im_start|>assistant\n";
    size_t total = 1 + (add_generation_prompt ? sizeof gen : 0);
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return qw_fail(err, "chat message %zu has no %s", i, msgs[i].role ? "content" : "role");
        total += sizeof open + strlen(msgs[i].role) + 1 + strlen(msgs[i].content) + sizeof close;
    }
    /* markup, role, markup, content per message (each close merges with the
     * next open), + the first open */
    size_t max_segs = 4 * n + 1;
    out->text = malloc(total);
    out->segs = malloc(max_segs * sizeof *out->segs);
    if (!out->text || !out->segs) {
        qw_chat_prompt_free(out);
        return qw_fail(err, "chat template: out of memory (%zu bytes)", total);
    }
    /* The role and the content are what a caller (a user, over the API)
     * supplied: content, so "<|im_start|>" written there stays text. */
    for (size_t i = 0; i < n; i++) {
        put(out, open, sizeof open - 1, true);
        put(out, msgs[i].role, strlen(msgs[i].role), false);
        put(out, "\n", 1, true);
        put(out, msgs[i].content, strlen(msgs[i].content), false);
        put(out, close, sizeof close - 1, true);
    }
    if (add_generation_prompt) put(out, gen, sizeof gen - 1, true);
    out->text[out->len] = 0;
    return 0;
}

int qw_chat_render_prompt(const qw_gguf *g, const qw_chat_msg *msgs, size_t n, bool add_generation_prompt,
                          qw_chat_prompt *out, qw_error *err) {
    memset(out, 0, sizeof *out);
    const char *tmpl = NULL;
    size_t len;
    if (g && qw_gguf_find_key(g, "tokenizer.chat_template") >= 0 &&
        qw_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &len) != 0)
        return qw_fail(err, "%s: tokenizer.chat_template is not a string", qw_gguf_path(g));
    return qw_chat_render_template_prompt(tmpl, msgs, n, add_generation_prompt, out, err);
}

void qw_chat_prompt_free(qw_chat_prompt *p) {
    free(p->text);
    free(p->segs);
    memset(p, 0, sizeof *p);
}

char *qw_chat_render_template(const char *tmpl, const qw_chat_msg *msgs, size_t n,
                              bool add_generation_prompt, qw_error *err) {
    qw_chat_prompt p;
    if (qw_chat_render_template_prompt(tmpl, msgs, n, add_generation_prompt, &p, err) != 0) return NULL;
    free(p.segs);
    return p.text;
}

char *qw_chat_render(const qw_gguf *g, const qw_chat_msg *msgs, size_t n, bool add_generation_prompt,
                     qw_error *err) {
    qw_chat_prompt p;
    if (qw_chat_render_prompt(g, msgs, n, add_generation_prompt, &p, err) != 0) return NULL;
    free(p.segs);
    return p.text;
}
