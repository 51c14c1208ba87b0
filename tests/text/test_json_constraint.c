/* test_json_constraint.c — the JSON Schema subset compiler and the byte-level
 * prefix matcher behind response_format (src/text/json_constraint.c): valid
 * prefixes accepted, invalid bytes refused, completion, key order and
 * required keys, enum, maxLength / maxItems, numbers, the free-form object
 * of json_object, random walks over the admitted bytes (each finished one
 * well-formed UTF-8 and parsed by cJSON), unsupported keywords refused with their path, and the
 * sampler honouring a constraint's mask (greedy and sampled). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/json_constraint.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static qw_json_schema *C(const char *s) {
    qw_error err = {0};
    qw_json_schema *sc = qw_json_schema_compile(s, strlen(s), &err);
    if (!sc) fprintf(stderr, "compile: %s\n", err.msg);
    return sc;
}

/* Feeds text byte by byte; returns how many bytes were accepted. */
static size_t accepted(qw_json_matcher *m, const char *t) {
    size_t i = 0;
    for (; t[i]; i++)
        if (!qw_json_matcher_feed(m, t + i, 1)) break;
    return i;
}

/* full: the whole text is a complete value. */
static void check(qw_json_schema *sc, const char *t, bool full) {
    qw_json_matcher *m = qw_json_matcher_new(sc);
    size_t n = accepted(m, t);
    bool ok = n == strlen(t) && qw_json_matcher_can_end(m);
    if (ok != full) fail_msg("'%s': accepted %zu of %zu bytes, can_end %d; expected %s", t, n, strlen(t),
                             qw_json_matcher_can_end(m), full ? "complete" : "refused or incomplete");
    qw_json_matcher_free(m);
}

static void test_any_object(void **state) {
    (void)state;
    qw_json_schema *sc = qw_json_schema_any_object();
    check(sc, "{}", true);
    check(sc, "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": {}}}", true);
    check(sc, "{\n  \"a\": [\n    1\n  ]\n}", true);
    check(sc, "{\n\n}", false);
    check(sc, "{\t}", false);
    check(sc, "[1]", false);   /* the root must be an object */
    check(sc, " {}", false);   /* no leading whitespace */
    check(sc, "{\"a\":1,}", false);
    check(sc, "{\"a\" 1}", false);
    check(sc, "{\"a\":01}", false);
    check(sc, "{\"a\":tru}", false);
    check(sc, "{}x", false);   /* nothing after the value */
    check(sc, "{\"a\":\"\x01\"}", false); /* raw control character */
    check(sc, "{\"a\":\"\xC3\xA9\"}", true);
    check(sc, "{\"a\":\"\xC3(\"}", false); /* broken UTF-8 */
    check(sc, "{\"a\":\"\xE0\x9C\xA1\"}", false); /* overlong */
    check(sc, "{\"a\":\"\xED\xA8\x87\"}", false); /* a surrogate */
    check(sc, "{\"a\":\"\xF4\x99\xAD\x92\"}", false); /* past U+10FFFF */
    check(sc, "{\"a\":\"\xF0\x9F\x98\x80\xED\x9F\xBF\"}", true);
    qw_json_matcher *m = qw_json_matcher_new(sc);
    assert_true(qw_json_matcher_feed(m, "{\"k\":", 5));
    assert_false(qw_json_matcher_can_end(m));
    assert_false(qw_json_matcher_feed(m, "}", 1)); /* refused: m unchanged */
    assert_true(qw_json_matcher_feed(m, "12}", 3));
    assert_true(qw_json_matcher_done(m));
    qw_json_matcher_free(m);
    qw_json_schema_free(sc);
}

static void test_schema_object(void **state) {
    (void)state;
    qw_json_schema *sc = C("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
                           "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
                           "\"maxItems\":2},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],"
                           "\"additionalProperties\":false}");
    assert_non_null(sc);
    check(sc, "{\"name\":\"Bob\",\"age\":42}", true);
    check(sc, "{\"name\": \"Bo\", \"age\": -7, \"tags\": [\"a\",\"b\"], \"ok\": false}", true);
    check(sc, "{\"name\":\"Bob\",\"age\":42,\"ok\":true}", true); /* optional tags skipped */
    check(sc, "{\"age\":42,\"name\":\"Bob\"}", false);  /* declared order */
    check(sc, "{\"name\":\"Bob\"}", false);             /* age required */
    check(sc, "{\"name\":\"Bobby\",\"age\":1}", false); /* maxLength */
    check(sc, "{\"name\":\"B\",\"age\":1.5}", false);   /* integer */
    check(sc, "{\"name\":\"B\",\"age\":1,\"tags\":[\"a\",\"a\",\"b\"]}", false); /* maxItems */
    check(sc, "{\"name\":\"B\",\"age\":1,\"tags\":[\"c\"]}", false);             /* enum */
    check(sc, "{\"name\":\"B\",\"age\":1,\"extra\":1}", false);
    check(sc, "{\"name\":\"B\",\"age\":1,}", false);
    qw_json_schema_free(sc);

    sc = C("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"},\"e\":{\"enum\":[1,12,\"x\",null]}},"
           "\"required\":[\"n\",\"e\"]}");
    check(sc, "{\"n\":0.25,\"e\":12}", true);
    check(sc, "{\"n\":1E+3,\"e\":1}", true);
    check(sc, "{\"n\":1,\"e\":null}", true);
    check(sc, "{\"n\":1,\"e\":13}", false);
    check(sc, "{\"n\":1.,\"e\":1}", false);
    check(sc, "{\"n\":-,\"e\":1}", false);
    qw_json_schema_free(sc);

    sc = C("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2}},\"required\":[\"s\"]}");
    check(sc, "{\"s\":\"a\"}", false);
    check(sc, "{\"s\":\"\\\"a\"}", true); /* an escape is one character */
    qw_json_schema_free(sc);
}

static void test_numbers_end(void **state) {
    (void)state;
    /* a root number can end or go on; a long one must end */
    qw_json_schema *sc = C("{\"type\":\"number\"}");
    qw_json_matcher *m = qw_json_matcher_new(sc);
    assert_true(qw_json_matcher_feed(m, "12", 2));
    assert_true(qw_json_matcher_can_end(m));
    assert_true(qw_json_matcher_feed(m, "3", 1));
    size_t n = accepted(m, "99999999999999999999999999999999");
    assert_true(n < 30);
    qw_json_matcher_free(m);
    qw_json_schema_free(sc);
}

/* Well-formed UTF-8 (Unicode table 3-7), written here independently of the matcher. */
static bool utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
        if (k < 0 || i + (size_t)k >= n + (k == 0)) return false;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (int j = 1; j <= k; j++) {
            unsigned d = s[i + (size_t)j];
            if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xBF)) return false;
        }
        i += (size_t)k + 1;
    }
    return true;
}

/* Property: a random walk over the bytes the matcher admits (every byte
 * tried on a copy) never dead-ends, and each document it completes is
 * well-formed UTF-8, parses with cJSON, and (for the schema) keeps its
 * bounds.  Walks lean towards closing characters so they end. */
static void test_random_walks(void **state) {
    (void)state;
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":5},"
                      "\"n\":{\"type\":\"number\"},\"l\":{\"type\":\"array\",\"items\":{\"enum\":[1,12,\"x\",null,true]},"
                      "\"maxItems\":3}},\"required\":[\"a\",\"l\"]}";
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int si = 0; si < 2; si++) {
        qw_json_schema *sc = si ? C(sch) : qw_json_schema_any_object();
        assert_non_null(sc);
        int done = 0;
        for (int doc = 0; doc < 60; doc++) {
            qw_json_matcher *m = qw_json_matcher_new(sc);
            char out[1024];
            size_t n = 0;
            while (n < 600 && !qw_json_matcher_done(m)) {
                int ok[256], k = 0, close = -1;
                for (int b = 1; b < 256; b++) {
                    qw_json_matcher *t = qw_json_matcher_copy(m);
                    char c = (char)b;
                    if (qw_json_matcher_feed(t, &c, 1)) {
                        ok[k++] = b;
                        if (b == '}' || b == ']' || b == '"') close = b;
                    }
                    qw_json_matcher_free(t);
                }
                if (!k) fail_msg("dead end after '%.*s'", (int)n, out);
                seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                char c = (char)(n > 40 && close >= 0 && seed % 3 ? close : ok[seed % (uint64_t)k]);
                assert_true(qw_json_matcher_feed(m, &c, 1));
                out[n++] = c;
            }
            qw_json_matcher_free(m);
            if (n >= 600) continue; /* a long free-form string: not finished, not wrong */
            done++;
            if (!utf8_ok((const unsigned char *)out, n)) fail_msg("not UTF-8: '%.*s'", (int)n, out);
            cJSON *v = cJSON_ParseWithLength(out, n);
            if (!cJSON_IsObject(v)) fail_msg("not a JSON object: '%.*s'", (int)n, out);
            if (si) {
                const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "a"), *l = cJSON_GetObjectItemCaseSensitive(v, "l");
                assert_true(cJSON_IsString(a) && cJSON_IsArray(l) && cJSON_GetArraySize(l) <= 3);
                const cJSON *nn = cJSON_GetObjectItemCaseSensitive(v, "n");
                assert_true(!nn || cJSON_IsNumber(nn));
            }
            cJSON_Delete(v);
        }
        assert_true(done >= 30);
        qw_json_schema_free(sc);
    }
}

static void test_unsupported(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}}}", "schema.properties.a: 'minimum'"},
        {"{\"anyOf\":[{\"type\":\"string\"}]}", "'anyOf'"},
        {"{\"$ref\":\"#/x\"}", "'$ref'"},
        {"{\"type\":[\"string\",\"null\"]}", "a list of types"},
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'"},
        {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'b'"},
        {"{\"type\":\"date\"}", "unknown type 'date'"},
        {"[1]", "must be an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qw_error err = {0};
        qw_json_schema *sc = qw_json_schema_compile(bad[i][0], strlen(bad[i][0]), &err);
        if (sc || !strstr(err.msg, bad[i][1])) fail_msg("%s: got '%s', want it to mention %s", bad[i][0], err.msg, bad[i][1]);
    }
    /* annotations are fine */
    qw_json_schema *sc = C("{\"title\":\"T\",\"description\":\"d\",\"type\":\"object\",\"properties\":{\"a\":"
                           "{\"type\":\"string\",\"description\":\"x\"}},\"required\":[\"a\"],\"additionalProperties\":false}");
    assert_non_null(sc);
    qw_json_schema_free(sc);
}

/* A constraint over a 4-token vocabulary: only token 2 is allowed. */
static int32_t only2_mask(qw_sampler_constraint *c, uint8_t *a) {
    (void)c;
    memset(a, 0, 4);
    a[2] = 1;
    return 1;
}
static int accepted_id = -1;
static void only2_accept(qw_sampler_constraint *c, int32_t id) { (void)c; accepted_id = id; }
static void only2_free(qw_sampler_constraint *c) { (void)c; }

static void test_sampler_mask(void **state) {
    (void)state;
    qw_sampler_constraint k = {.mask = only2_mask, .accept = only2_accept, .free = only2_free};
    const float logits[4] = {5, 4, -3, 1};
    for (int temp = 0; temp < 2; temp++) {
        qw_sampler_params p = qw_sampler_default_params();
        p.temp = (float)temp;
        p.seed = 7;
        p.constraint = &k;
        qw_sampler *s = qw_sampler_new(&p, 4);
        for (int i = 0; i < 20; i++) assert_int_equal(qw_sampler_sample(s, logits), 2);
        assert_int_equal(accepted_id, 2);
        qw_sampler_free(s);
    }
    /* logprobs are the model's, whatever the mask */
    qw_token_logprobs lp;
    qw_logprobs_of(logits, 4, 2, 2, &lp);
    assert_int_equal(lp.n_top, 2);
    assert_int_equal(lp.top_id[0], 0);
    assert_int_equal(lp.top_id[1], 1);
    double z = exp(5) + exp(4) + exp(-3) + exp(1);
    assert_true(fabs(lp.logprob - (-3 - log(z))) < 1e-5);
    assert_true(fabs(lp.top_logprob[0] - (5 - log(z))) < 1e-5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_object),
        cmocka_unit_test(test_schema_object),
        cmocka_unit_test(test_numbers_end),
        cmocka_unit_test(test_random_walks),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_sampler_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
