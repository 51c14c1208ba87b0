/* test_jsonstr.c — the request parser's issue-21 rules at the unit level:
 * qw_json_member_string (exact bytes of a top-level string member: escapes,
 * surrogate pairs, NULs, first match, nested values skipped, malformed text
 * refused) and what qw_oai_parse now checks (trailing data, the exact
 * completion prompt length, logit_bias, message content).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/jsonstr.h"
#include "serve/openai.h"

#include <stdlib.h>
#include <string.h>

static char *member(const char *body, const char *key, size_t *n) {
    return qw_json_member_string(body, strlen(body), key, n);
}

static void test_member_exact_bytes(void **state) {
    (void)state;
    size_t n = 0;
    char *s = member("{\"prompt\":\"a\\u0000b\"}", "prompt", &n);
    assert_non_null(s);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "a\0b", 3);
    assert_int_equal(s[3], 0);
    free(s);
    /* every simple escape, a 2-, 3- and 4-byte code point (a surrogate pair) */
    s = member("{\"p\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20AC\\ud83d\\ude00\"}", "p", &n);
    assert_non_null(s);
    assert_int_equal(n, 8 + 2 + 3 + 4);
    assert_memory_equal(s, "\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", n);
    free(s);
}

static void test_member_lookup(void **state) {
    (void)state;
    size_t n = 0;
    /* nested objects/arrays and strings with braces are skipped; an escaped key matches */
    const char *b = " { \"a\" : {\"prompt\":\"no\",\"x\":[1,{\"y\":\"}]\"}]} , \"n\":-1.5e3, \"t\":true,"
                    "\"pr\\u006fmpt\" : \"yes\" , \"prompt\":\"second\" } ";
    char *s = member(b, "prompt", &n);
    assert_non_null(s);
    assert_string_equal(s, "yes");
    free(s);
    s = member("{\"prompt\":[\"in\\u0000array\"]}", "prompt", &n);
    assert_non_null(s);
    assert_int_equal(n, 8);
    free(s);
    assert_null(member("{\"prompt\":5}", "prompt", &n));
    assert_null(member("{\"other\":\"x\"}", "prompt", &n));
    assert_null(member("[\"prompt\"]", "prompt", &n));
    /* malformed text is refused, not trusted */
    assert_null(member("{\"prompt\":\"abc", "prompt", &n));
    assert_null(member("{\"prompt\":\"\\ud83d\"}", "prompt", &n));
    assert_null(member("{\"prompt\":\"\\ude00\"}", "prompt", &n));
    assert_null(member("{\"prompt\":\"\\x\"}", "prompt", &n));
    assert_null(member("{\"prompt\":\"\\u12\"}", "prompt", &n));
}

static int parse(qw_oai_kind kind, const char *body, qw_oai_request *r, qw_oai_error *e) {
    return qw_oai_parse(kind, body, strlen(body), NULL, "tiny", 259, r, e);
}

static void expect_400(qw_oai_kind kind, const char *body, const char *param) {
    qw_oai_request r;
    qw_oai_error e;
    if (parse(kind, body, &r, &e) == 0) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    if (param) assert_string_equal(e.param, param);
}

static void test_parse_rules(void **state) {
    (void)state;
    qw_oai_request r;
    qw_oai_error e;
    /* trailing data */
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\"}xyz", "");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\"}{}", "");
    assert_int_equal(parse(QW_OAI_COMPLETION, "{\"prompt\":\"a\"} \n", &r, &e), 0);
    qw_oai_request_free(&r);
    /* the prompt's exact bytes */
    assert_int_equal(parse(QW_OAI_COMPLETION, "{\"prompt\":\"x\\u0000yz\"}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 4);
    assert_memory_equal(r.prompt_text, "x\0yz", 4);
    qw_oai_request_free(&r);
    /* logit_bias */
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":\"garbage\"}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[1]}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"-1\":1}}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"7x\":1}}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"259\":1}}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"7\":\"1\"}}", "logit_bias");
    expect_400(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"7\":100.5}}", "logit_bias");
    assert_int_equal(parse(QW_OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"7\":-100,\"258\":2.5}}", &r, &e), 0);
    assert_int_equal(r.sp.n_logit_bias, 2);
    assert_int_equal(r.sp.logit_bias[0].id, 7);
    assert_true(r.sp.logit_bias[0].bias == -100.0f);
    assert_int_equal(r.sp.logit_bias[1].id, 258);
    assert_true(r.sp.logit_bias[1].bias == 2.5f);
    qw_oai_request_free(&r);
    /* message content */
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content");
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"system\"},{\"role\":\"user\",\"content\":\"x\"}]}",
               "messages[0].content");
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\"}]}",
               "messages[1].content");
    /* a NUL in a chat message is refused, not cut; an escaped backslash
     * before "u0000" is text, not a NUL */
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"ab\\u0000cd\"}]}", "messages");
    expect_400(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\\u0000\"}]}]}",
               "messages");
    assert_int_equal(parse(QW_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\\\u0000\"}]}", &r, &e), 0);
    qw_oai_request_free(&r);
    assert_true(qw_json_has_nul("\"\\u0000\"", 8));
    assert_false(qw_json_has_nul("\"\\\\u0000\"", 9));
    assert_false(qw_json_has_nul("\"\\u0001\"", 8));
    assert_false(qw_json_has_nul("\"\\u000", 7));
    /* (a template with tool syntax: plain ChatML refuses tool calls; this
     * text has the Qwen3 template's markers) */
    const char *qwen3ish = "<|im_start|> <tool_call> <function-name> last_query_index reasoning_content";
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                           "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\",\"type\":"
                           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}";
    assert_int_equal(qw_oai_parse(QW_OAI_CHAT, b, strlen(b), qwen3ish, "tiny", 259, &r, &e), 0);
    assert_int_equal(r.prompt_len, strlen(r.prompt_text));
    qw_oai_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_member_exact_bytes),
        cmocka_unit_test(test_member_lookup),
        cmocka_unit_test(test_parse_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
