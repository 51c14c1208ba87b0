/* fuzz_chat_tools.c — libFuzzer target for what chat requests with tools go
 * through: the tool-call parser (src/text/tool_calls.c) on a model reply,
 * and a request body rendered with the Qwen3, Qwen3.5 and Qwen3-Coder
 * renderers (src/serve/chat_req.c -> src/text/chat_qwen.c, chat_coder.c,
 * chat_json.c).
 *
 * Each input is used both ways:
 *   - as a reply, parsed in both syntaxes against fixed tools.  Invariants:
 *     the result is 1, 0 or -1; 1 has at least one call, each naming a
 *     defined tool with arguments that parse as a JSON object, and content
 *     that is a prefix's trim; 0 and -1 hold nothing; the streaming
 *     hold-back never passes the first "<tool_call>";
 *   - as a /v1/chat/completions body, rendered with Qwen3-, Qwen3.5- and
 *     Qwen3-Coder-like template texts (the families' markers: the real texts are
 *     t_chat_templates.sh's).  Invariants: failure is a 400 with a message;
 *     success is a prompt whose segments cover its bytes in order and whose
 *     length is its strlen (a message cannot hold a NUL: cJSON).
 *
 *     make fuzz && build-fuzz/bin/fuzz_chat_tools fuzz/seeds/chat_tools
 */
#include "qwisp/tool_calls.h"
#include "serve/openai.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";

static const char *TEMPLATES[] = {
    "<|im_start|> <tool_call> <function-name> last_query_index reasoning_content",
    "<|im_start|> <function=example_function_name> enable_thinking last_query_index reasoning_content",
    "<|im_start|> <function=example_function_name> render_extra_keys",
};

static void reply(const char *text) {
    const char *first = strstr(text, "<tool_call>");
    size_t safe = qw_tool_calls_safe_prefix(text, strlen(text));
    CHECK(safe <= strlen(text));
    if (first) CHECK(safe <= (size_t)(first - text));
    for (int f = QW_CHAT_QWEN3; f <= QW_CHAT_QWEN35; f++) {
        qw_tool_calls tc;
        char why[200];
        int rc = qw_tool_calls_parse((qw_chat_family)f, text, TOOLS, &tc, why, sizeof why);
        CHECK(rc >= -1 && rc <= 1);
        if (rc != 1) {
            CHECK(tc.n == 0 && tc.calls == NULL && tc.content == NULL);
            if (rc < 0) CHECK(why[0]);
            continue;
        }
        CHECK(first && tc.n >= 1 && tc.content && strlen(tc.content) <= (size_t)(first - text));
        for (size_t i = 0; i < tc.n; i++) {
            CHECK(!strcmp(tc.calls[i].name, "get_weather") || !strcmp(tc.calls[i].name, "f"));
            cJSON *a = cJSON_Parse(tc.calls[i].arguments);
            CHECK(cJSON_IsObject(a));
            cJSON_Delete(a);
        }
        qw_tool_calls_free(&tc);
    }
}

static void request(const char *body, size_t len) {
    for (int t = 0; t < 3; t++) {
        qw_oai_request r;
        qw_oai_error e;
        memset(&e, 0, sizeof e);
        if (qw_oai_parse(QW_OAI_CHAT, body, len, TEMPLATES[t], "qwisp-fuzz", 1000, &r, &e) != 0) {
            CHECK(e.status == 400 || e.status == 404);
            CHECK(e.message[0]);
            continue;
        }
        CHECK(r.prompt_text && r.prompt_len == strlen(r.prompt_text));
        size_t off = 0;
        for (size_t k = 0; k < r.n_prompt_segs; k++) {
            CHECK(r.prompt_segs[k].off == off && r.prompt_segs[k].len > 0);
            off += r.prompt_segs[k].len;
        }
        CHECK(off == r.prompt_len);
        qw_oai_request_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    reply(s);
    request(s, size);
    free(s);
    return 0;
}
