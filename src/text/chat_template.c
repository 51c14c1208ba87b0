/* chat_template.c — renders a conversation into the prompt text a model was
 * trained on: which renderer a template gets, the prompt buffer with its
 * markup/content segments, plain ChatML, and the public entry points.  The
 * Qwen renderers are in chat_qwen.c.  See qw_chat_render_opts in
 * include/qwisp/tokenizer.h.
 *
 * qwisp does not run Jinja.  It recognises a GGUF's template text and renders
 * it with built-in C that reproduces that template's output byte for byte
 * (checked against two Jinja engines by tests/text/t_chat_templates.sh):
 *
 *   - exact: the text hashes to a template qwisp knows (Qwen3's, shared by
 *     every Qwen3 hybrid-thinking model; Qwen3.5/3.6's; Qwen3-Coder's) -> its
 *     renderer;
 *   - family: the text carries a family's markers but is not a known text (an
 *     edited or newer template) -> that family's renderer, with a note the
 *     CLI prints once ("may differ from it");
 *   - any other ChatML template (<|im_start|>: Qwen2.5, QwQ, …) -> plain
 *     ChatML with a note; a request with tools is then an error, as ChatML
 *     has no tool syntax;
 *   - another family (llama3, gemma, …) or unknown text -> an error naming it.
 * So a prompt is never silently wrong: it is exact, or the user was told.
 * Why not a Jinja interpreter: the Qwen templates use macros, namespaces,
 * loop.previtem, slicing, Python string methods and filters; an interpreter
 * faithful enough to trust is a project of its own, and a subset one fails
 * at run time on the first unimplemented construct of a new template.  The
 * models qwisp runs are one family with three templates.
 *
 * The renderer records which bytes are its own markup and which came from
 * the request (contents, reasoning, tool definitions and calls):
 * qw_tokenize_segments parses special tokens only in the markup, so a
 * message cannot forge a turn by writing "<|im_start|>system".
 */
#include "chat_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the prompt buffer ---- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void qw_cb_put(qw_chat_buf *b, const char *s, size_t n, bool markup) {
    if (n == 0 || b->oom) return;
    qw_chat_prompt *p = &b->p;
    if (!grow((void **)&p->text, &b->cap, p->len + n + 1, 1) ||
        !grow((void **)&p->segs, &b->seg_cap, p->n_segs + 1, sizeof *p->segs)) {
        b->oom = true;
        return;
    }
    memcpy(p->text + p->len, s, n);
    qw_text_seg *last = p->n_segs ? &p->segs[p->n_segs - 1] : NULL;
    if (last && last->markup == markup) last->len += n;
    else p->segs[p->n_segs++] = (qw_text_seg){p->len, n, markup};
    p->len += n;
    p->text[p->len] = 0;
}

/* ---- string helpers (Python semantics) ---- */

static bool in_set(char c, const char *chars) { return c && strchr(chars, c); }

qw_sv qw_sv_strip(qw_sv s, const char *chars, bool left, bool right) {
    while (left && s.n && in_set(s.p[0], chars)) s.p++, s.n--;
    while (right && s.n && in_set(s.p[s.n - 1], chars)) s.n--;
    return s;
}

/* Length of a Unicode whitespace code point (Python's str.isspace) at the
 * start (or, back, the end) of s; 0 if none. */
static size_t ws_len(qw_sv s, bool back) {
    static const char *const WS[] = {" ", "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f",
                                     "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                     "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85",
                                     "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89",
                                     "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                     "\xe2\x81\x9f", "\xe3\x80\x80"};
    for (size_t i = 0; i < sizeof WS / sizeof WS[0]; i++) {
        size_t l = strlen(WS[i]);
        if (l <= s.n && !memcmp(back ? s.p + s.n - l : s.p, WS[i], l)) return l;
    }
    return 0;
}

qw_sv qw_sv_trim(qw_sv s) {
    size_t l;
    while ((l = ws_len(s, false))) s.p += l, s.n -= l;
    while ((l = ws_len(s, true))) s.n -= l;
    return s;
}

static const char *sv_find(qw_sv s, const char *needle, bool last) {
    size_t l = strlen(needle);
    if (l > s.n) return NULL;
    const char *hit = NULL;
    for (size_t i = 0; i + l <= s.n; i++)
        if (!memcmp(s.p + i, needle, l)) {
            hit = s.p + i;
            if (!last) break;
        }
    return hit;
}

bool qw_sv_has(qw_sv s, const char *needle) { return sv_find(s, needle, false) != NULL; }
bool qw_sv_starts(qw_sv s, const char *pre) { return strlen(pre) <= s.n && !memcmp(s.p, pre, strlen(pre)); }
bool qw_sv_ends(qw_sv s, const char *suf) {
    size_t l = strlen(suf);
    return l <= s.n && !memcmp(s.p + s.n - l, suf, l);
}

qw_sv qw_sv_split_first(qw_sv s, const char *sep) {
    const char *h = sv_find(s, sep, false);
    return h ? (qw_sv){s.p, (size_t)(h - s.p)} : s;
}

qw_sv qw_sv_split_last(qw_sv s, const char *sep) {
    const char *h = sv_find(s, sep, true);
    if (!h) return s;
    h += strlen(sep);
    return (qw_sv){h, s.n - (size_t)(h - s.p)};
}

/* ---- which renderer ---- */

/* Hashes (qw_hash64, seed 0, of the text without trailing whitespace) of the
 * template texts rendered exactly; the texts are llama.cpp's
 * models/templates/ copies of the models' tokenizer_config.json. */
static const struct {
    uint64_t hash;
    qw_chat_family family;
    const char *what;
} KNOWN[] = {
    {0x5dd4244f5f466bc0ULL, QW_CHAT_QWEN3, "Qwen3 (Qwen3-0.6B … Qwen3-235B-A22B)"},
    {0xcdff116097e1144aULL, QW_CHAT_QWEN35, "Qwen3.5 (Qwen3.5-4B)"},
    {0x4fe0f3088a405011ULL, QW_CHAT_QWEN3_CODER, "Qwen3-Coder (Qwen3-Coder-30B-A3B, -480B-A35B)"},
};

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

static const char *family_name(qw_chat_family f) {
    return f == QW_CHAT_QWEN3 ? "qwen3" : f == QW_CHAT_QWEN35 ? "qwen3.5" : f == QW_CHAT_QWEN3_CODER ? "qwen3-coder" : "chatml";
}

uint64_t qw_chat_template_hash(const char *tmpl) {
    size_t n = strlen(tmpl);
    while (n && strchr(" \t\r\n", tmpl[n - 1])) n--;
    return qw_hash64(tmpl, n, 0);
}

int qw_chat_template_identify(const char *tmpl, qw_chat_template_info *info, qw_error *err) {
    memset(info, 0, sizeof *info);
    info->family = QW_CHAT_CHATML;
    info->name = "chatml";
    info->exact = true;
    if (!tmpl || !*tmpl || !strcmp(tmpl, "chatml")) return 0;
    uint64_t h = qw_chat_template_hash(tmpl);
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (KNOWN[i].hash == h) {
            info->family = KNOWN[i].family;
            info->name = family_name(info->family);
            info->tools = true;
            return 0;
        }
    info->exact = false;
    if (strstr(tmpl, "<|im_start|>")) {
        if (strstr(tmpl, "<|im_sep|>"))
            return qw_fail(err, "chat template family \"phi4\" (<|im_sep|>) is not supported");
        if (strstr(tmpl, "<end_of_utterance>"))
            return qw_fail(err, "chat template family \"smolvlm\" is not supported");
        /* markers of the Qwen3 / Qwen3.5 logic itself (the last-query rule,
         * reasoning_content), not only of their tool syntax, which Qwen2.5,
         * QwQ and Qwen3-Coder share with different templates */
        bool qwen_logic = strstr(tmpl, "last_query_index") && strstr(tmpl, "reasoning_content");
        if (qwen_logic && strstr(tmpl, "<function=example_function_name>") && strstr(tmpl, "enable_thinking"))
            info->family = QW_CHAT_QWEN35;
        else if (qwen_logic && strstr(tmpl, "<function-name>") && strstr(tmpl, "<tool_call>"))
            info->family = QW_CHAT_QWEN3;
        else if (strstr(tmpl, "<function=example_function_name>") && strstr(tmpl, "render_extra_keys"))
            info->family = QW_CHAT_QWEN3_CODER;
        info->name = family_name(info->family);
        info->tools = info->family != QW_CHAT_CHATML;
        if (info->tools)
            snprintf(info->note, sizeof info->note,
                     "the model's chat template (%zu bytes, hash %016llx) is not one qwisp knows byte for "
                     "byte; it has the %s template's markers and is rendered as that template, which may "
                     "differ from it",
                     strlen(tmpl), (unsigned long long)h, info->name);
        else
            snprintf(info->note, sizeof info->note,
                     "the model's chat template (%zu bytes, hash %016llx, starts \"%.40s\") is not one qwisp "
                     "renders; it uses <|im_start|>, so it is rendered as plain ChatML (no tools, no "
                     "thinking switch)",
                     strlen(tmpl), (unsigned long long)h, tmpl);
        return 0;
    }
    for (size_t i = 0; i < sizeof OTHER_FAMILIES / sizeof OTHER_FAMILIES[0]; i++) {
        const family_marker *f = &OTHER_FAMILIES[i];
        if (strstr(tmpl, f->needle) && (!f->also || strstr(tmpl, f->also)))
            return qw_fail(err, "chat template family \"%s\" is not supported (qwisp renders qwen3, qwen3.5, "
                                "qwen3-coder and ChatML templates)", f->name);
    }
    return qw_fail(err, "chat template of an unknown family (starts \"%.40s\"); qwisp renders qwen3, qwen3.5, "
                        "qwen3-coder and ChatML templates", tmpl);
}

int qw_chat_template_text(const qw_gguf *g, const char **tmpl, qw_error *err) {
    *tmpl = NULL;
    size_t len;
    if (g && qw_gguf_find_key(g, "tokenizer.chat_template") >= 0 &&
        qw_gguf_get_str(g, "tokenizer.chat_template", tmpl, &len) != 0)
        return qw_fail(err, "%s: tokenizer.chat_template is not a string", qw_gguf_path(g));
    return 0;
}

/* ---- ChatML ---- */

static int render_chatml(qw_chat_buf *b, const qw_chat_msg *msgs, size_t n, const qw_chat_opts *o,
                         qw_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].n_tool_calls)
            return qw_fail(err, "chat message %zu has tool calls, which a plain ChatML template cannot show", i);
        /* The role and the content are what a caller supplied: content, so
         * "<|im_start|>" written there stays text. */
        QW_CB_MARK(b, "<|im_start|>");
        qw_cb_text(b, msgs[i].role);
        QW_CB_MARK(b, "\n");
        qw_cb_text(b, msgs[i].content);
        QW_CB_MARK(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) QW_CB_MARK(b, "<|im_start|>assistant\n");
    return 0;
}

/* ---- entry points ---- */

int qw_chat_render_opts(const char *tmpl, const qw_chat_msg *msgs, size_t n, const qw_chat_opts *o,
                        qw_chat_prompt *out, qw_error *err) {
    memset(out, 0, sizeof *out);
    qw_chat_template_info info;
    if (qw_chat_template_identify(tmpl, &info, err) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return qw_fail(err, "chat message %zu has no %s", i, msgs[i].role ? "content" : "role");
        for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
            if (!msgs[i].tool_calls[k].name)
                return qw_fail(err, "chat message %zu: tool call %zu has no function name", i, k);
    }
    cJSON *tools = NULL;
    if (o->tools_json) {
        if (!info.tools)
            return qw_fail(err, "tools were given but the chat template (%s) has no tool syntax qwisp renders",
                           info.name);
        tools = cJSON_Parse(o->tools_json);
        if (!cJSON_IsArray(tools)) {
            cJSON_Delete(tools);
            return qw_fail(err, "tools must be a JSON array");
        }
    }
    qw_chat_buf b = {0};
    int rc = info.family == QW_CHAT_QWEN3         ? qw_chat_render_qwen3(&b, msgs, n, o, tools, err)
             : info.family == QW_CHAT_QWEN35      ? qw_chat_render_qwen35(&b, msgs, n, o, tools, err)
             : info.family == QW_CHAT_QWEN3_CODER ? qw_chat_render_qwen3_coder(&b, msgs, n, o, tools, err)
                                                  : render_chatml(&b, msgs, n, o, err);
    cJSON_Delete(tools);
    if (rc == 0 && o->prefill) qw_cb_put(&b, o->prefill, strlen(o->prefill), true);
    if (rc == 0 && b.oom) rc = qw_fail(err, "chat template: out of memory");
    if (rc == 0 && !b.p.text) { /* an empty prompt is still a string */
        b.p.text = calloc(1, 1);
        if (!b.p.text) rc = qw_fail(err, "chat template: out of memory");
    }
    if (rc != 0) {
        qw_chat_prompt_free(&b.p);
        return -1;
    }
    *out = b.p;
    return 0;
}

int qw_chat_render_template_prompt(const char *tmpl, const qw_chat_msg *msgs, size_t n,
                                   bool add_generation_prompt, qw_chat_prompt *out, qw_error *err) {
    qw_chat_opts o = {.add_generation_prompt = add_generation_prompt, .enable_thinking = -1};
    return qw_chat_render_opts(tmpl, msgs, n, &o, out, err);
}

int qw_chat_render_prompt(const qw_gguf *g, const qw_chat_msg *msgs, size_t n, bool add_generation_prompt,
                          qw_chat_prompt *out, qw_error *err) {
    memset(out, 0, sizeof *out);
    const char *tmpl;
    if (qw_chat_template_text(g, &tmpl, err) != 0) return -1;
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
