/* test_textout.c — the server's text assembly and request parsing, without
 * sockets: stop strings (across tokens, cut, earliest wins), the Qwen3
 * <think> split (reasoning never leaks into content), UTF-8 repair, and the
 * OpenAI request checks (types, ranges, unknown model, empty messages).
 * The tokenizer is a byte-level toy: ids 0..255 are the bytes, plus
 * <think>, </think> and <|im_end|> as single tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/openai.h"
#include "text/textout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static qw_tokenizer *g_tok;
static int32_t T_OPEN, T_CLOSE, T_END;

/* GPT-2 bytes_to_unicode for byte b, as UTF-8. */
static void byte_unicode(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp = b;
    else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

static int setup(void **state) {
    (void)state;
    static char store[256][4];
    const char *toks[259];
    int32_t types[259];
    for (int b = 0; b < 256; b++) {
        byte_unicode(b, store[b]);
        toks[b] = store[b];
        types[b] = QW_TOKEN_NORMAL;
    }
    toks[256] = "<think>", types[256] = QW_TOKEN_USER_DEFINED;
    toks[257] = "</think>", types[257] = QW_TOKEN_USER_DEFINED;
    toks[258] = "<|im_end|>", types[258] = QW_TOKEN_CONTROL;
    qw_tokenizer_spec sp = {.model = "gpt2", .pre = "qwen2", .n_tokens = 259, .tokens = toks, .token_types = types,
                            .bos_id = -1, .eos_id = 258, .eot_id = -1, .pad_id = -1};
    qw_error err = {0};
    g_tok = qw_tokenizer_new(&sp, &err);
    if (!g_tok) fprintf(stderr, "tokenizer: %s\n", err.msg);
    T_OPEN = 256, T_CLOSE = 257, T_END = 258;
    return g_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qw_tokenizer_free(g_tok);
    return 0;
}

/* Pushes the bytes of s as tokens; returns true if the output ended. */
static bool push_text(qw_textout *o, const char *s) {
    for (; *s; s++)
        if (qw_textout_push(o, (unsigned char)*s)) return true;
    return false;
}

static void test_plain_and_eos(void **state) {
    (void)state;
    qw_textout o;
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_NONE);
    assert_false(push_text(&o, "  Hello"));
    assert_true(qw_textout_push(&o, T_END));
    assert_true(o.eos_hit);
    assert_string_equal(o.content.p, "  Hello"); /* raw completions keep leading spaces */
    assert_int_equal(o.n_tokens, 8);
    assert_true(qw_textout_push(&o, 'x')); /* after the end: ignored, not counted */
    assert_int_equal(o.n_tokens, 8);
    qw_textout_free(&o);
}

static void test_stop_across_tokens(void **state) {
    (void)state;
    const char *stops[] = {"END", "xyz"};
    qw_textout o;
    qw_textout_init(&o, g_tok, stops, 2, QW_THINK_NONE);
    assert_false(push_text(&o, "abc E"));
    size_t n;
    const char *d = qw_textout_take_content(&o, &n);
    assert_int_equal(n, 4); /* "E" is held back: it may start "END" */
    assert_memory_equal(d, "abc ", 4);
    assert_false(push_text(&o, "Nx"));     /* "EN" then "x": "ENx" is no stop, "x" may start "xyz" */
    assert_true(push_text(&o, "yz tail")); /* "xyz" ends it */
    assert_true(o.stop_hit);
    assert_string_equal(o.content.p, "abc EN");
    qw_textout_free(&o);
}

static void test_stop_flush_without_match(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    qw_textout o;
    qw_textout_init(&o, g_tok, stops, 1, QW_THINK_NONE);
    assert_false(push_text(&o, "go ST"));
    qw_textout_flush(&o); /* generation ended by length: the held "ST" is text */
    assert_string_equal(o.content.p, "go ST");
    assert_false(o.stop_hit);
    qw_textout_free(&o);
}

static void test_think_split(void **state) {
    (void)state;
    qw_textout o;
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_SPLIT);
    assert_false(qw_textout_push(&o, T_OPEN));
    assert_false(push_text(&o, "\nlet me think\n"));
    assert_false(qw_textout_push(&o, T_CLOSE));
    assert_false(push_text(&o, "\n\nThe answer."));
    assert_true(qw_textout_push(&o, T_END));
    assert_string_equal(o.reasoning.p, "let me think");
    assert_string_equal(o.content.p, "The answer.");
    qw_textout_free(&o);

    /* the tags spelled out byte by byte are recognised too, and never reach content */
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_SPLIT);
    push_text(&o, "<think>hmm</think>ok");
    qw_textout_flush(&o);
    assert_string_equal(o.reasoning.p, "hmm");
    assert_string_equal(o.content.p, "ok");
    qw_textout_free(&o);

    /* no think block: leading whitespace stays, later "<think>" is content */
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_SPLIT);
    push_text(&o, " hi <think>");
    qw_textout_flush(&o);
    assert_null(o.reasoning.p);
    assert_string_equal(o.content.p, " hi <think>");
    qw_textout_free(&o);

    /* template already opened <think>: output starts as reasoning */
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_OPEN);
    push_text(&o, "step</think>\n\nDone");
    qw_textout_flush(&o);
    assert_string_equal(o.reasoning.p, "step");
    assert_string_equal(o.content.p, "Done");
    qw_textout_free(&o);
}

static void test_utf8_repair(void **state) {
    (void)state;
    qw_strbuf b = {0};
    qw_utf8_sanitize(&b, "a\xE4\xB8z\xFF\xC3\xA9", 7); /* truncated 3-byte seq, bad byte, é */
    assert_string_equal(b.p, "a\xEF\xBF\xBDz\xEF\xBF\xBD\xC3\xA9");
    qw_strbuf_free(&b);
    qw_utf8_sanitize(&b, "\xED\xA0\x80", 3); /* a surrogate: 3 replacement characters (WHATWG) */
    assert_string_equal(b.p, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    qw_strbuf_free(&b);
    /* a multi-byte character split over two tokens is joined, not replaced */
    qw_textout o;
    qw_textout_init(&o, g_tok, NULL, 0, QW_THINK_NONE);
    qw_textout_push(&o, 0xC3);
    qw_textout_push(&o, 0xA9);
    qw_textout_flush(&o);
    assert_string_equal(o.content.p, "\xC3\xA9");
    qw_textout_free(&o);
}

static int parse(const char *body, qw_oai_kind kind, qw_oai_request *r, qw_oai_error *e) {
    return qw_oai_parse(kind, body, strlen(body), NULL, "tiny", 259, r, e);
}

static void test_parse_errors(void **state) {
    (void)state;
    qw_oai_request r;
    qw_oai_error e;
    assert_int_equal(parse("{\"messages\": [", QW_OAI_CHAT, &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_json");
    assert_int_equal(parse("{\"prompt\":\"x\",\"max_tokens\":\"5\"}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_string_equal(e.param, "max_tokens");
    assert_int_equal(parse("{\"prompt\":\"x\",\"max_tokens\":2.5}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_int_equal(parse("{\"prompt\":\"x\",\"top_p\":1.5}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_string_equal(e.param, "top_p");
    assert_int_equal(parse("{\"prompt\":\"x\",\"model\":\"other\"}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "model_not_found");
    assert_int_equal(parse("{\"messages\":[]}", QW_OAI_CHAT, &r, &e), -1);
    assert_string_equal(e.param, "messages");
    assert_int_equal(parse("{\"prompt\":[1,2,999]}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_int_equal(parse("{\"prompt\":\"x\",\"n\":2}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_int_equal(parse("{\"prompt\":\"x\",\"stop\":[\"a\",3]}", QW_OAI_COMPLETION, &r, &e), -1);
    assert_string_equal(e.param, "stop");
    char *js = qw_oai_error_json(&e);
    assert_non_null(strstr(js, "{\"error\":{\"message\":"));
    assert_non_null(strstr(js, "\"param\":\"stop\""));
    free(js);
}

static void test_parse_ok(void **state) {
    (void)state;
    qw_oai_request r;
    qw_oai_error e;
    assert_int_equal(parse("{\"model\":\"tiny\",\"prompt\":\"hi\",\"max_tokens\":7,\"temperature\":0,\"top_p\":0.5,"
                           "\"seed\":42,\"stop\":[\"a\",\"\",\"bc\"],\"presence_penalty\":0.5,\"frequency_penalty\":-1,"
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"unknown\":{}}",
                           QW_OAI_COMPLETION, &r, &e),
                     0);
    assert_string_equal(r.prompt_text, "hi");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.sp.temp == 0.0f && r.sp.top_p == 0.5f && r.sp.seed == 42);
    assert_int_equal(r.n_stops, 2); /* the empty stop string is dropped */
    assert_true(r.stream && r.include_usage);
    assert_true(r.sp.penalty_last_n > 0 && r.sp.presence_penalty == 0.5f && r.sp.frequency_penalty == -1.0f);
    qw_oai_request_free(&r);
    assert_int_equal(parse("{\"prompt\":[3,4,5]}", QW_OAI_COMPLETION, &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.max_tokens, -1);
    assert_true(r.sp.temp == 1.0f); /* OpenAI's default */
    qw_oai_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_eos),        cmocka_unit_test(test_stop_across_tokens),
        cmocka_unit_test(test_stop_flush_without_match), cmocka_unit_test(test_think_split),
        cmocka_unit_test(test_utf8_repair),          cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_ok),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
