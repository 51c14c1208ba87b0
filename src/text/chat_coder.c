/* chat_coder.c — the Qwen3-Coder chat template as C (Qwen3-Coder-30B-A3B,
 * -480B-A35B): no thinking; tools listed as XML (<function><name>…
 * <parameters><parameter>…), extra schema keys as <key>value</key>; calls
 * in the <function=…><parameter=…> form Qwen3.5 also uses.  Exactness is
 * checked against Jinja by tests/text/t_chat_templates.sh; semantics of
 * `| string` and `| trim` as Python's (chat_qwen.c says why).
 */
#include "chat_json.h"
#include "chat_render.h"

#include <stdlib.h>

static int oom(qw_error *err) { return qw_fail(err, "chat template: out of memory"); }

static bool handled(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (!strcmp(key, *keys)) return true;
    return false;
}

/* Content text: a string as it is, anything else as `| string`. */
static int put_str(qw_chat_buf *b, const cJSON *v, bool trim, qw_error *err) {
    if (cJSON_IsString(v)) {
        qw_sv s = qw_sv_of(v->valuestring);
        qw_cb_sv(b, trim ? qw_sv_trim(s) : s);
        return 0;
    }
    char *s = qw_json_pystr(v);
    if (!s) return oom(err);
    qw_cb_sv(b, trim ? qw_sv_trim(qw_sv_of(s)) : qw_sv_of(s));
    free(s);
    return 0;
}

/* macro render_extra_keys(json_dict, handled_keys): every other key as
 * \n<key>value</key>, a mapping or list as tojson, else `| string`. */
static int extra_keys(qw_chat_buf *b, const cJSON *dict, const char *const *keys, qw_error *err) {
    if (!cJSON_IsObject(dict)) return 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, dict) {
        if (handled(x->string, keys)) continue;
        QW_CB_MARK(b, "\n<");
        qw_cb_text(b, x->string);
        QW_CB_MARK(b, ">");
        char *v = cJSON_IsObject(x) || cJSON_IsArray(x) ? qw_json_dumps(x) : qw_json_pystr(x);
        if (!v) return oom(err);
        qw_cb_text(b, v);
        free(v);
        QW_CB_MARK(b, "</");
        qw_cb_text(b, x->string);
        QW_CB_MARK(b, ">");
    }
    return 0;
}

static int put_tool(qw_chat_buf *b, const cJSON *tool, qw_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tool, "function");
    if (f) tool = f; /* {%- if tool.function is defined %}{%- set tool = tool.function %} */
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tool, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(tool, "description");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(tool, "parameters");
    QW_CB_MARK(b, "\n<function>\n<name>");
    if (name && put_str(b, name, false, err)) return -1;
    QW_CB_MARK(b, "</name>");
    if (desc) {
        QW_CB_MARK(b, "\n<description>");
        if (put_str(b, desc, true, err)) return -1;
        QW_CB_MARK(b, "</description>");
    }
    QW_CB_MARK(b, "\n<parameters>");
    const cJSON *props = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "properties") : NULL;
    if (cJSON_IsObject(props)) {
        static const char *const PARAM_KEYS[] = {"name", "type", "description", NULL};
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            QW_CB_MARK(b, "\n<parameter>\n<name>");
            qw_cb_text(b, p->string);
            QW_CB_MARK(b, "</name>");
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
            const cJSON *pdesc = cJSON_GetObjectItemCaseSensitive(p, "description");
            if (type) {
                QW_CB_MARK(b, "\n<type>");
                if (put_str(b, type, false, err)) return -1;
                QW_CB_MARK(b, "</type>");
            }
            if (pdesc) {
                QW_CB_MARK(b, "\n<description>");
                if (put_str(b, pdesc, true, err)) return -1;
                QW_CB_MARK(b, "</description>");
            }
            if (extra_keys(b, p, PARAM_KEYS, err)) return -1;
            QW_CB_MARK(b, "\n</parameter>");
        }
    }
    static const char *const PARAMS_KEYS[] = {"type", "properties", NULL};
    if (extra_keys(b, params, PARAMS_KEYS, err)) return -1;
    QW_CB_MARK(b, "\n</parameters>");
    static const char *const TOOL_KEYS[] = {"type", "name", "description", "parameters", NULL};
    if (extra_keys(b, tool, TOOL_KEYS, err)) return -1;
    QW_CB_MARK(b, "\n</function>");
    return 0;
}

int qw_chat_render_qwen3_coder(qw_chat_buf *b, const qw_chat_msg *m, size_t n, const qw_chat_opts *o,
                               const cJSON *tools, qw_error *err) {
    bool sys0 = n > 0 && !strcmp(m[0].role, "system");
    bool have_tools = tools && cJSON_GetArraySize(tools) > 0;
    size_t first = sys0 ? 1 : 0; /* loop_messages = messages[1:] after a system message */
    if (sys0) {
        QW_CB_MARK(b, "<|im_start|>system\n");
        qw_cb_text(b, m[0].content);
    } else if (have_tools) {
        QW_CB_MARK(b, "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer "
                      "to solve tasks.");
    }
    if (have_tools) {
        QW_CB_MARK(b, "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            if (put_tool(b, t, err)) return -1;
        }
        QW_CB_MARK(b, "\n</tools>");
        QW_CB_MARK(b, "\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n"
                      "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                      "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n"
                      "</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: "
                      "the tool calling block MUST begin with an opening <tool_call> tag and end with a closing "
                      "</tool_call> tag.\n- Required parameters MUST be specified\n- You may provide optional "
                      "reasoning for your function call in natural language BEFORE the function call, but NOT "
                      "after\n- If there is no function call available, answer the question like normal with your "
                      "current knowledge and do not tell the user about function calls\n</IMPORTANT>");
    }
    if (sys0 || have_tools) QW_CB_MARK(b, "<|im_end|>\n");
    for (size_t i = first; i < n; i++) {
        const qw_chat_msg *x = &m[i];
        if (!strcmp(x->role, "assistant") && x->n_tool_calls) {
            QW_CB_MARK(b, "<|im_start|>assistant");
            qw_sv c = qw_sv_trim(qw_sv_of(x->content));
            if (c.n) {
                QW_CB_MARK(b, "\n");
                qw_cb_sv(b, c);
                QW_CB_MARK(b, "\n");
            }
            for (size_t k = 0; k < x->n_tool_calls; k++) {
                QW_CB_MARK(b, "\n<tool_call>\n<function=");
                if (qw_chat_put_xml_call(b, i, &x->tool_calls[k], err)) return -1;
            }
            QW_CB_MARK(b, "<|im_end|>\n");
        } else if (!strcmp(x->role, "tool")) {
            /* loop.previtem: the previous of loop_messages, undefined for its first */
            if (i > first && strcmp(m[i - 1].role, "tool")) QW_CB_MARK(b, "<|im_start|>user\n");
            QW_CB_MARK(b, "<tool_response>\n");
            qw_cb_text(b, x->content);
            QW_CB_MARK(b, "\n</tool_response>\n");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool")) QW_CB_MARK(b, "<|im_end|>\n");
        } else {
            /* user, system, assistant (and any other role) alike */
            QW_CB_MARK(b, "<|im_start|>");
            qw_cb_text(b, x->role);
            QW_CB_MARK(b, "\n");
            qw_cb_text(b, x->content);
            QW_CB_MARK(b, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) QW_CB_MARK(b, "<|im_start|>assistant\n");
    return 0;
}
