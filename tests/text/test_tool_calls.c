/* test_tool_calls.c — the tool-call parser (src/text/tool_calls.c) on fixed
 * model outputs: Qwen3's <tool_call>{json}</tool_call> and Qwen3.5's
 * <function=…><parameter=…> form, one and several calls, text before them,
 * parameter typing from the tool schema, and malformed output (broken JSON,
 * unknown function, text after a call, unclosed tags), which must come back
 * as "not a call" with a reason, never a crash; plus the streaming hold-back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"zip\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"q\":{\"type\":\"string\"}}}}}]";

static void test_qwen3_one_call(void **state) {
    (void)state;
    qw_tool_calls tc;
    char why[200];
    const char *out = "I'll check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                      "\"days\": 3}}\n</tool_call>";
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN3, out, TOOLS, &tc, why, sizeof why), 1);
    assert_int_equal(tc.n, 1);
    assert_string_equal(tc.content, "I'll check.");
    assert_string_equal(tc.calls[0].name, "get_weather");
    assert_string_equal(tc.calls[0].arguments, "{\"city\":\"Paris\",\"days\":3}");
    qw_tool_calls_free(&tc);
}

static void test_qwen3_parallel_and_string_args(void **state) {
    (void)state;
    qw_tool_calls tc;
    const char *out = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\\nb\"}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}\n"
                      "</tool_call>\n";
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN3, out, TOOLS, &tc, NULL, 0), 1);
    assert_int_equal(tc.n, 2);
    assert_string_equal(tc.content, "");
    assert_string_equal(tc.calls[0].arguments, "{\"q\":\"a\\nb\"}");
    assert_string_equal(tc.calls[1].name, "get_weather");
    assert_string_equal(tc.calls[1].arguments, "{\"city\":\"Oslo\"}");
    qw_tool_calls_free(&tc);
    /* no arguments at all: {} */
    out = "<tool_call>\n{\"name\": \"search\"}\n</tool_call>";
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN3, out, TOOLS, &tc, NULL, 0), 1);
    assert_string_equal(tc.calls[0].arguments, "{}");
    qw_tool_calls_free(&tc);
}

static void test_qwen35_xml(void **state) {
    (void)state;
    qw_tool_calls tc;
    char why[200];
    const char *out = "Let me look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
                      "<parameter=days>\n2\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n"
                      "<parameter=opts>\n{\"hourly\": true}\n</parameter>\n<parameter=extra>\nline one\nline two\n"
                      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=q>\n42\n"
                      "</parameter>\n</function>\n</tool_call>";
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN35, out, TOOLS, &tc, why, sizeof why), 1);
    assert_int_equal(tc.n, 2);
    assert_string_equal(tc.content, "Let me look.");
    assert_string_equal(tc.calls[0].name, "get_weather");
    /* string-typed params stay strings ("10001"); others read as JSON; unknown
     * params that are not JSON stay strings */
    assert_string_equal(tc.calls[0].arguments,
                        "{\"city\":\"New York\",\"days\":2,\"zip\":\"10001\",\"opts\":{\"hourly\":true},"
                        "\"extra\":\"line one\\nline two\"}");
    assert_string_equal(tc.calls[1].arguments, "{\"q\":\"42\"}");
    qw_tool_calls_free(&tc);
    /* a function without parameters */
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN35, "<tool_call>\n<function=search>\n</function>\n</tool_call>",
                                         TOOLS, &tc, why, sizeof why), 1);
    assert_string_equal(tc.calls[0].arguments, "{}");
    qw_tool_calls_free(&tc);
}

static void test_no_call(void **state) {
    (void)state;
    qw_tool_calls tc;
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN3, "Just an answer, <tool> is not a tag.", TOOLS, &tc, NULL, 0), 0);
    assert_null(tc.calls);
    assert_null(tc.content);
}

static void expect_malformed(qw_chat_family f, const char *out, const char *reason) {
    qw_tool_calls tc;
    char why[200];
    int rc = qw_tool_calls_parse(f, out, TOOLS, &tc, why, sizeof why);
    if (rc != -1 || !strstr(why, reason)) fprintf(stderr, "for %s: rc %d, why '%s'\n", out, rc, why);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(why, reason));
    assert_int_equal(tc.n, 0);
    assert_null(tc.calls);
}

static void test_malformed(void **state) {
    (void)state;
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
                     "JSON object");
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
                     "unknown function 'rm_rf'");
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n", "not closed");
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call> and then",
                     "text after a tool call");
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": 5}\n</tool_call>", "no \"name\"");
    expect_malformed(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"search\", \"arguments\": [1]}\n</tool_call>",
                     "not an object");
    expect_malformed(QW_CHAT_QWEN35, "<tool_call>\n<function=nope>\n</function>\n</tool_call>", "unknown function");
    expect_malformed(QW_CHAT_QWEN35, "<tool_call>\n<function=search>\n<parameter=q>\nx\n</function>\n</tool_call>",
                     "not closed");
    expect_malformed(QW_CHAT_QWEN35, "<tool_call>\n{\"name\": \"search\"}\n</tool_call>", "<function=");
    expect_malformed(QW_CHAT_QWEN35, "<tool_call>\n<function=search>\n</function>\n", "</tool_call>");
    expect_malformed(QW_CHAT_QWEN35,
                     "<tool_call>\n<function=search>\n<parameter=q>\na\n</parameter>\n<parameter=q>\nb\n</parameter>\n"
                     "</function>\n</tool_call>", "given twice");
    expect_malformed(QW_CHAT_CHATML, "<tool_call>\n{}\n</tool_call>", "no tool-call syntax");
    /* truncated at every byte: never a crash, never a half call */
    const char *full = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                       "</tool_call>";
    char buf[256];
    for (size_t n = 0; n < strlen(full); n++) {
        memcpy(buf, full, n);
        buf[n] = 0;
        qw_tool_calls tc;
        int rc = qw_tool_calls_parse(QW_CHAT_QWEN35, buf, TOOLS, &tc, NULL, 0);
        assert_true(rc == 0 || rc == -1);
        assert_int_equal(tc.n, 0);
    }
    /* without tools nothing is a call */
    qw_tool_calls tc;
    assert_int_equal(qw_tool_calls_parse(QW_CHAT_QWEN3, "<tool_call>\n{\"name\": \"search\"}\n</tool_call>", NULL,
                                         &tc, NULL, 0), -1);
}

static void test_safe_prefix(void **state) {
    (void)state;
    assert_int_equal(qw_tool_calls_safe_prefix("hello", 5), 5);
    assert_int_equal(qw_tool_calls_safe_prefix("hello <tool_call>\n{", 19), 6);
    assert_int_equal(qw_tool_calls_safe_prefix("hello <tool_", 12), 6);  /* may still become the tag */
    assert_int_equal(qw_tool_calls_safe_prefix("a <b> c <", 9), 8);
    assert_int_equal(qw_tool_calls_safe_prefix("a <tool> c", 10), 10); /* cannot become it */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_one_call),
        cmocka_unit_test(test_qwen3_parallel_and_string_args),
        cmocka_unit_test(test_qwen35_xml),
        cmocka_unit_test(test_no_call),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_safe_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
