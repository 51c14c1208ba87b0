/* chat_qwen.c — the Qwen3 and Qwen3.5/3.6 chat templates as C, statement by
 * statement (the Jinja each block reproduces is quoted above it).  Exactness
 * is checked against Jinja itself by tests/text/t_chat_templates.sh.
 *
 * Where Jinja engines differ, these follow Python's (transformers renders the
 * training data with it): str.strip('\n') strips only newlines, `| trim`
 * strips Unicode whitespace, True/False/None print as such.
 */
#include "chat_json.h"
#include "chat_render.h"

#include <stdlib.h>

/* Tool definitions, one `tool | tojson` per line (both templates). */
static int put_tools(qw_chat_buf *b, const cJSON *tools, qw_error *err) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *js = qw_json_dumps(t);
        if (!js) return qw_fail(err, "chat template: out of memory");
        QW_CB_MARK(b, "\n");
        qw_cb_text(b, js);
        free(js);
    }
    return 0;
}

/* `if tools` / `if tools and tools is iterable …`: a non-empty list. */
static bool have_tools(const cJSON *tools) { return tools && cJSON_GetArraySize(tools) > 0; }

/* ns.last_query_index: the last user message that is not a wrapped tool
 * response (found walking backwards); -1 when none.  trim: Qwen3.5 trims
 * the content first. */
static long last_query(const qw_chat_msg *m, size_t n, bool trim) {
    for (size_t k = n; k-- > 0;) {
        if (strcmp(m[k].role, "user")) continue;
        qw_sv c = qw_sv_of(m[k].content);
        if (trim) c = qw_sv_trim(c);
        if (!(qw_sv_starts(c, "<tool_response>") && qw_sv_ends(c, "</tool_response>"))) return (long)k;
    }
    return -1;
}

/* An assistant message's reasoning and answer:
 *   content.split('</think>')[-1].lstrip('\n') and
 *   content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
static void split_think(qw_sv content, qw_sv *reasoning, qw_sv *answer) {
    *answer = qw_sv_strip(qw_sv_split_last(content, "</think>"), "\n", true, false);
    qw_sv r = qw_sv_strip(qw_sv_split_first(content, "</think>"), "\n", false, true);
    *reasoning = qw_sv_strip(qw_sv_split_last(r, "<think>"), "\n", true, false);
}

/* ---- Qwen3 ---- */

int qw_chat_render_qwen3(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                         const cJSON *tools, qw_error *err) {
    bool sys0 = n > 0 && !strcmp(m[0].role, "system");
    if (have_tools(tools)) {
        QW_CB_MARK(b, "<|im_start|>system\n");
        if (sys0) {
            qw_cb_text(b, m[0].content);
            QW_CB_MARK(b, "\n\n");
        }
        QW_CB_MARK(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                      "provided with function signatures within <tools></tools> XML tags:\n<tools>");
        if (put_tools(b, tools, err)) return -1;
        QW_CB_MARK(b, "\n</tools>\n\nFor each function call, return a json object with function name and "
                      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (sys0) {
        QW_CB_MARK(b, "<|im_start|>system\n");
        qw_cb_text(b, m[0].content);
        QW_CB_MARK(b, "<|im_end|>\n");
    }
    /* ns.last_query_index starts at messages|length - 1 */
    long lq = last_query(m, n, false);
    if (lq < 0) lq = (long)n - 1;
    for (size_t i = 0; i < n; i++) {
        const qw_chat_msg *x = &m[i];
        if (!strcmp(x->role, "user") || (!strcmp(x->role, "system") && i > 0)) {
            QW_CB_MARK(b, "<|im_start|>");
            qw_cb_text(b, x->role);
            QW_CB_MARK(b, "\n");
            qw_cb_text(b, x->content);
            QW_CB_MARK(b, "<|im_end|>\n");
        } else if (!strcmp(x->role, "assistant")) {
            qw_sv content = qw_sv_of(x->content), reasoning = {"", 0};
            if (x->reasoning_content) reasoning = qw_sv_of(x->reasoning_content);
            else if (qw_sv_has(content, "</think>")) split_think(qw_sv_of(x->content), &reasoning, &content);
            bool last = i + 1 == n;
            if ((long)i > lq && (last || reasoning.n)) {
                QW_CB_MARK(b, "<|im_start|>assistant\n<think>\n");
                qw_cb_sv(b, qw_sv_strip(reasoning, "\n", true, true));
                QW_CB_MARK(b, "\n</think>\n\n");
                qw_cb_sv(b, qw_sv_strip(content, "\n", true, false));
            } else {
                QW_CB_MARK(b, "<|im_start|>assistant\n");
                qw_cb_sv(b, content);
            }
            for (size_t k = 0; k < x->n_tool_calls; k++) {
                const qw_chat_tool_call *tc = &x->tool_calls[k];
                if ((k == 0 && content.n) || k > 0) QW_CB_MARK(b, "\n");
                QW_CB_MARK(b, "<tool_call>\n{\"name\": \"");
                qw_cb_text(b, tc->name);
                QW_CB_MARK(b, "\", \"arguments\": ");
                /* arguments is a string (OpenAI's form): printed as it is */
                qw_cb_text(b, tc->arguments ? tc->arguments : "");
                QW_CB_MARK(b, "}\n</tool_call>");
            }
            QW_CB_MARK(b, "<|im_end|>\n");
        } else if (!strcmp(x->role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool")) QW_CB_MARK(b, "<|im_start|>user");
            QW_CB_MARK(b, "\n<tool_response>\n");
            qw_cb_text(b, x->content);
            QW_CB_MARK(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool")) QW_CB_MARK(b, "<|im_end|>\n");
        }
        /* a first system message was printed above; other roles print nothing */
    }
    if (o->add_generation_prompt) {
        QW_CB_MARK(b, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) QW_CB_MARK(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* ---- Qwen3.5 / 3.6 ---- */

/* One <parameter=…> value: `args_value | tojson` for a mapping or a list,
 * else `args_value | string`. */
static int put_param(qw_chat_buf *b, const cJSON *v, qw_error *err) {
    char *s = cJSON_IsObject(v) || cJSON_IsArray(v) ? qw_json_dumps(v) : qw_json_pystr(v);
    if (!s) return qw_fail(err, "chat template: out of memory");
    qw_cb_text(b, s);
    free(s);
    return 0;
}

int qw_chat_put_xml_call(qw_chat_buf *b, size_t i, const qw_chat_tool_call *tc, qw_error *err) {
    qw_cb_text(b, tc->name);
    QW_CB_MARK(b, ">\n");
    if (tc->arguments) {
        cJSON *args = cJSON_Parse(tc->arguments);
        if (!cJSON_IsObject(args)) {
            cJSON_Delete(args);
            return qw_fail(err, "chat message %zu: tool call '%s': arguments must be a JSON object for this template "
                                "(it prints each as a <parameter=…>)", i, tc->name);
        }
        const cJSON *a;
        cJSON_ArrayForEach(a, args) {
            QW_CB_MARK(b, "<parameter=");
            qw_cb_text(b, a->string);
            QW_CB_MARK(b, ">\n");
            if (put_param(b, a, err)) {
                cJSON_Delete(args);
                return -1;
            }
            QW_CB_MARK(b, "\n</parameter>\n");
        }
        cJSON_Delete(args);
    }
    QW_CB_MARK(b, "</function>\n</tool_call>");
    return 0;
}

int qw_chat_render_qwen35(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                          const cJSON *tools, qw_error *err) {
    if (n == 0) return qw_fail(err, "the Qwen3.5 chat template refuses this: No messages provided.");
    bool sys0 = !strcmp(m[0].role, "system");
    if (have_tools(tools)) {
        QW_CB_MARK(b, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
        if (put_tools(b, tools, err)) return -1;
        QW_CB_MARK(b, "\n</tools>");
        QW_CB_MARK(b, "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
                      "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                      "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
                      "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
                      "Reminder:\n- Function calls MUST follow the specified format: an inner "
                      "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
                      "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
                      "function call in natural language BEFORE the function call, but NOT after\n- If there is "
                      "no function call available, answer the question like normal with your current knowledge "
                      "and do not tell the user about function calls\n</IMPORTANT>");
        if (sys0) {
            qw_sv c = qw_sv_trim(qw_sv_of(m[0].content));
            if (c.n) {
                QW_CB_MARK(b, "\n\n");
                qw_cb_sv(b, c);
            }
        }
        QW_CB_MARK(b, "<|im_end|>\n");
    } else if (sys0) {
        QW_CB_MARK(b, "<|im_start|>system\n");
        qw_cb_sv(b, qw_sv_trim(qw_sv_of(m[0].content)));
        QW_CB_MARK(b, "<|im_end|>\n");
    }
    long lq = last_query(m, n, true);
    if (lq < 0) return qw_fail(err, "the Qwen3.5 chat template refuses this: No user query found in messages.");
    for (size_t i = 0; i < n; i++) {
        const qw_chat_msg *x = &m[i];
        qw_sv content = qw_sv_trim(qw_sv_of(x->content));
        if (!strcmp(x->role, "system")) {
            if (i > 0)
                return qw_fail(err, "the Qwen3.5 chat template refuses this: System message must be at the "
                                    "beginning. (message %zu)", i);
        } else if (!strcmp(x->role, "user")) {
            QW_CB_MARK(b, "<|im_start|>user\n");
            qw_cb_sv(b, content);
            QW_CB_MARK(b, "<|im_end|>\n");
        } else if (!strcmp(x->role, "assistant")) {
            qw_sv reasoning = {"", 0};
            if (x->reasoning_content) reasoning = qw_sv_of(x->reasoning_content);
            else if (qw_sv_has(content, "</think>")) split_think(content, &reasoning, &content);
            reasoning = qw_sv_trim(reasoning);
            if ((long)i > lq) {
                QW_CB_MARK(b, "<|im_start|>assistant\n<think>\n");
                qw_cb_sv(b, reasoning);
                QW_CB_MARK(b, "\n</think>\n\n");
                qw_cb_sv(b, content);
            } else {
                QW_CB_MARK(b, "<|im_start|>assistant\n");
                qw_cb_sv(b, content);
            }
            for (size_t k = 0; k < x->n_tool_calls; k++) {
                if (k == 0 && qw_sv_trim(content).n) QW_CB_MARK(b, "\n\n<tool_call>\n<function=");
                else if (k == 0) QW_CB_MARK(b, "<tool_call>\n<function=");
                else QW_CB_MARK(b, "\n<tool_call>\n<function=");
                if (qw_chat_put_xml_call(b, i, &x->tool_calls[k], err)) return -1;
            }
            QW_CB_MARK(b, "<|im_end|>\n");
        } else if (!strcmp(x->role, "tool")) {
            /* loop.previtem is undefined for the first message: no opening then */
            if (i > 0 && strcmp(m[i - 1].role, "tool")) QW_CB_MARK(b, "<|im_start|>user");
            QW_CB_MARK(b, "\n<tool_response>\n");
            qw_cb_sv(b, content);
            QW_CB_MARK(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool")) QW_CB_MARK(b, "<|im_end|>\n");
        } else {
            return qw_fail(err, "the Qwen3.5 chat template refuses this: Unexpected message role. ('%s')", x->role);
        }
    }
    if (o->add_generation_prompt) {
        QW_CB_MARK(b, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) QW_CB_MARK(b, "<think>\n\n</think>\n\n");
        else QW_CB_MARK(b, "<think>\n");
    }
    return 0;
}
