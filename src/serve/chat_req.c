/* chat_req.c — the chat part of a /v1/chat/completions request: messages
 * (with assistant tool_calls and reasoning_content, tool results), tools,
 * tool_choice, parallel_tool_calls and chat_template_kwargs.enable_thinking,
 * checked and rendered with the chat template into the prompt (see
 * qw_oai_parse_chat in openai.h; the rest of the request is openai.c's).
 *
 * tool_choice:
 *   "auto" (default with tools)  tools in the prompt; a call in the reply is parsed;
 *   "none"                       tools left out of the prompt, nothing parsed
 *                                (the model cannot see them, so cannot call them);
 *   "required" / a named function  the prompt already opens the call (the
 *                                generation prompt is followed by "<tool_call>\n…",
 *                                with the function's name when named) and
 *                                thinking is turned off for the request: a
 *                                prefill, not a grammar, so a model that then
 *                                writes no valid call gets its text back as content.
 * Tool and function names must match OpenAI's ^[a-zA-Z0-9_-]{1,64}$: a
 * forced call's prefill is template markup, so a name must not be able to
 * carry special-token text.
 */
#include "openai.h"

#include "qwisp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields this file reads or accepts, for a request checker that refuses unknown
 * fields (the serve-features branch): request level and per message ("name"
 * and "tool_call_id" are accepted; the Qwen templates do not print them). */
const char *const qw_oai_chat_fields[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                          "chat_template_kwargs", NULL};
const char *const qw_oai_message_fields[] = {"role", "content", "name", "tool_calls", "tool_call_id",
                                             "reasoning_content", NULL};

#define BAD(param, ...) qw_oai_fail(e, 400, "invalid_request_error", "invalid_value", param, __VA_ARGS__)

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static bool good_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A message's content: a string or an array of {"type":"text","text":…}
 * parts (joined, as the Qwen3.5 template joins them).  Null or missing only
 * on an assistant message that carries tool_calls (as OpenAI's API: every
 * other message must say something). */
static char *message_content(const cJSON *m, int i, const char *role, qw_oai_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    const cJSON *c = field(m, "content");
    if (!c) {
        if (!strcmp(role, "assistant") && field(m, "tool_calls")) return qw_xstrdup("");
        bool missing = !cJSON_GetObjectItemCaseSensitive(m, "content");
        qw_oai_fail(e, 400, "invalid_request_error", missing ? "missing_required_parameter" : "invalid_value", param,
                    "'%s' is %s; a %s message needs content (only an assistant message with tool_calls may omit it)",
                    param, missing ? "missing" : "null", role);
        return NULL;
    }
    if (cJSON_IsString(c)) return qw_xstrdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        BAD(param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    qw_strbuf b = {0};
    qw_strbuf_add(&b, "", 0);
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 ||
            !cJSON_IsString(text)) {
            qw_strbuf_free(&b);
            qw_oai_fail(e, 400, "invalid_request_error", "unsupported_content", param,
                        "'%s': only text parts ({\"type\":\"text\",\"text\":…}) are supported", param);
            return NULL;
        }
        qw_strbuf_add(&b, text->valuestring, strlen(text->valuestring));
    }
    return b.p;
}

/* What the messages own while the prompt is rendered. */
typedef struct conv {
    qw_chat_msg *msgs;
    char **strs; /* every string to free */
    size_t n_strs, cap_strs;
    qw_chat_tool_call **calls;
    int n;
} conv;

static char *keep(conv *cv, char *s) {
    if (cv->n_strs == cv->cap_strs) {
        cv->cap_strs = cv->cap_strs ? 2 * cv->cap_strs : 16;
        cv->strs = qw_xrealloc(cv->strs, cv->cap_strs * sizeof *cv->strs);
    }
    return cv->strs[cv->n_strs++] = s;
}

static void conv_free(conv *cv) {
    for (size_t i = 0; i < cv->n_strs; i++) free(cv->strs[i]);
    for (int i = 0; i < cv->n; i++) free(cv->calls[i]);
    free(cv->strs);
    free(cv->calls);
    free(cv->msgs);
}

/* messages[i].tool_calls: [{"id","type":"function","function":{"name","arguments"}}]. */
static int parse_calls(const cJSON *m, int i, conv *cv, qw_oai_error *e) {
    const cJSON *tc = field(m, "tool_calls");
    if (!tc) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(tc)) return BAD(param, "'%s' must be an array", param);
    int n = cJSON_GetArraySize(tc);
    cv->calls[i] = qw_xcalloc((size_t)(n ? n : 1), sizeof **cv->calls);
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        const cJSON *f = cJSON_IsObject(c) ? field(c, "function") : NULL;
        const cJSON *nm = f ? field(f, "name") : NULL, *args = f ? field(f, "arguments") : NULL;
        if (!cJSON_IsString(nm) || !good_name(nm->valuestring))
            return BAD(param, "'%s[%d].function.name' must be a function name (letters, digits, _ and -, up to 64)",
                       param, k);
        char *a = NULL;
        if (cJSON_IsString(args)) a = qw_xstrdup(args->valuestring);
        else if (cJSON_IsObject(args)) a = cJSON_PrintUnformatted(args);
        else if (args) return BAD(param, "'%s[%d].function.arguments' must be a JSON string", param, k);
        cv->calls[i][k++] = (qw_chat_tool_call){keep(cv, qw_xstrdup(nm->valuestring)), a ? keep(cv, a) : NULL};
    }
    cv->msgs[i].tool_calls = cv->calls[i];
    cv->msgs[i].n_tool_calls = (size_t)k;
    return 0;
}

static int parse_tools(const cJSON *root, qw_oai_request *r, qw_oai_error *e) {
    const cJSON *tools = field(root, "tools");
    const cJSON *choice = field(root, "tool_choice");
    if (tools && !cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
    int k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_IsObject(t) ? field(t, "function") : NULL;
        const cJSON *ty = cJSON_IsObject(t) ? field(t, "type") : NULL;
        const cJSON *nm = f ? field(f, "name") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
            return BAD("tools", "'tools[%d].type' must be \"function\"", k);
        if (!cJSON_IsObject(f) || !cJSON_IsString(nm) || !good_name(nm->valuestring))
            return BAD("tools", "'tools[%d].function.name' must be a function name (letters, digits, _ and -, up "
                                "to 64)", k);
        k++;
    }
    r->tool_choice = QW_TOOL_AUTO;
    if (cJSON_IsString(choice)) {
        const char *c = choice->valuestring;
        if (!strcmp(c, "none")) r->tool_choice = QW_TOOL_NONE;
        else if (!strcmp(c, "required")) r->tool_choice = QW_TOOL_REQUIRED;
        else if (strcmp(c, "auto"))
            return BAD("tool_choice", "'tool_choice' = '%.40s': expected auto, none, required or "
                                      "{\"type\":\"function\",\"function\":{\"name\":…}}", c);
    } else if (cJSON_IsObject(choice)) {
        const cJSON *f = field(choice, "function");
        const cJSON *nm = f ? field(f, "name") : NULL;
        if (!cJSON_IsString(nm))
            return BAD("tool_choice", "'tool_choice.function.name' must be a string");
        bool found = false;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *tn = field(field(t, "function"), "name");
            if (!strcmp(tn->valuestring, nm->valuestring)) found = true;
        }
        if (!found) return BAD("tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", nm->valuestring);
        r->tool_choice = QW_TOOL_NAMED;
        r->tool_name = qw_xstrdup(nm->valuestring);
    } else if (choice) {
        return BAD("tool_choice", "'tool_choice' must be a string or an object");
    }
    if ((r->tool_choice == QW_TOOL_REQUIRED || r->tool_choice == QW_TOOL_NAMED) && k == 0)
        return BAD("tool_choice", "'tool_choice' requires a tool but 'tools' is empty or missing");
    r->parallel_tool_calls = true;
    const cJSON *par = field(root, "parallel_tool_calls");
    if (par && !cJSON_IsBool(par)) return BAD("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (par) r->parallel_tool_calls = cJSON_IsTrue(par);
    if (k > 0 && r->tool_choice != QW_TOOL_NONE) r->tools_json = cJSON_PrintUnformatted(tools);
    return 0;
}

/* chat_template_kwargs.enable_thinking: -1 when not given. */
static int parse_thinking(const cJSON *root, int *enable, qw_oai_error *e) {
    *enable = -1;
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (!kw) return 0;
    if (!cJSON_IsObject(kw)) return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    const cJSON *et = field(kw, "enable_thinking");
    if (et && !cJSON_IsBool(et))
        return BAD("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
    if (et) *enable = cJSON_IsTrue(et);
    return 0;
}

int qw_oai_parse_chat(const cJSON *root, const char *tmpl, qw_oai_request *r, qw_oai_error *e) {
    const cJSON *ms = field(root, "messages");
    if (!ms) return qw_oai_fail(e, 400, "invalid_request_error", "missing_required_parameter", "messages",
                                "'messages' is required");
    if (!cJSON_IsArray(ms)) return BAD("messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return BAD("messages", "'messages' must contain at least one message");
    if (n > 100000) return BAD("messages", "too many messages (%d)", n);
    qw_error err = {0};
    qw_chat_template_info info;
    if (qw_chat_template_identify(tmpl, &info, &err) != 0)
        return qw_oai_fail(e, 400, "invalid_request_error", "template_error", "messages",
                           "cannot apply the chat template: %s", err.msg);
    r->family = info.family;
    qw_chat_opts o = {.add_generation_prompt = true};
    if (parse_tools(root, r, e) || parse_thinking(root, &o.enable_thinking, e)) return -1;
    conv cv = {.msgs = qw_xcalloc((size_t)n, sizeof *cv.msgs), .calls = qw_xcalloc((size_t)n, sizeof *cv.calls), .n = n};
    int rc = 0, i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        char param[48];
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
        if (!cJSON_IsObject(m)) { rc = BAD(param, "messages[%d] must be an object", i); break; }
        if (!cJSON_IsString(role)) { rc = BAD(param, "'%s' must be a string", param); break; }
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool")) {
            rc = BAD(param, "'%s' = '%s': expected system, developer, user, assistant or tool", param,
                     role->valuestring);
            break;
        }
        char *content = message_content(m, i, rs, e);
        if (!content) { rc = -1; break; }
        cv.msgs[i].role = rs;
        cv.msgs[i].content = keep(&cv, content);
        if (!strcmp(rs, "assistant")) {
            const cJSON *rc_ = field(m, "reasoning_content");
            if (rc_ && !cJSON_IsString(rc_)) {
                snprintf(param, sizeof param, "messages[%d].reasoning_content", i);
                rc = BAD(param, "'%s' must be a string", param);
                break;
            }
            if (rc_) cv.msgs[i].reasoning_content = keep(&cv, qw_xstrdup(rc_->valuestring));
            if ((rc = parse_calls(m, i, &cv, e))) break;
        }
        i++;
    }
    if (rc == 0 && (r->tool_choice == QW_TOOL_REQUIRED || r->tool_choice == QW_TOOL_NAMED)) {
        /* a forced call: the reply starts inside it, thinking off (see the header) */
        qw_strbuf pf = {0};
        const char *name = r->tool_name ? r->tool_name : "";
        if (info.family == QW_CHAT_QWEN3) {
            qw_strbuf_add(&pf, "<tool_call>\n{\"name\": \"", 22);
            if (r->tool_name) {
                qw_strbuf_add(&pf, name, strlen(name));
                qw_strbuf_add(&pf, "\", \"arguments\": ", 16);
            }
        } else {
            qw_strbuf_add(&pf, "<tool_call>\n<function=", 22);
            if (r->tool_name) {
                qw_strbuf_add(&pf, name, strlen(name));
                qw_strbuf_add(&pf, ">\n", 2);
            }
        }
        qw_strbuf_add(&pf, "", 1);
        r->prefill = pf.p;
        o.enable_thinking = 0;
    }
    if (rc == 0) {
        o.tools_json = r->tools_json;
        o.prefill = r->prefill;
        qw_chat_prompt cp;
        if (qw_chat_render_opts(tmpl, cv.msgs, (size_t)n, &o, &cp, &err) != 0)
            rc = qw_oai_fail(e, 400, "invalid_request_error", "template_error", "messages",
                             "cannot apply the chat template: %s", err.msg);
        else {
            r->prompt_text = cp.text;
            r->prompt_segs = cp.segs;
            r->n_prompt_segs = cp.n_segs;
            r->prompt_len = cp.len;
        }
    }
    conv_free(&cv);
    if (rc == 0) {
        /* A template that opens the think block itself (Qwen3.5, or Qwen3
         * thinking models) makes the output start inside it. */
        size_t l = r->prompt_len;
        const char *t = r->prompt_text;
        while (l && (t[l - 1] == '\n' || t[l - 1] == ' ')) l--;
        r->think = l >= 7 && !memcmp(t + l - 7, "<think>", 7) ? QW_THINK_OPEN : QW_THINK_SPLIT;
    }
    return rc;
}
