/* fuzz_tokenizer.c — libFuzzer target for the byte-level BPE tokenizer
 * (src/text/tokenizer.c): encode, decode and the streaming decoder on
 * arbitrary bytes (invalid UTF-8, NULs, half special tokens included).
 *
 * Two small vocabularies are built once, from a qw_tokenizer_spec, one with
 * the Qwen2 pre-tokenizer and one with the GPT-2 one: the 256 byte tokens in
 * GPT-2 bytes_to_unicode form, a few dozen merges (multi-level: "t h" -> "th",
 * "th e" -> "the", "Ġ the" -> "Ġthe", a two-byte UTF-8 merge "Ã ©" -> é, a
 * digit pair, "\n\n"), the ChatML specials <|endoftext|>, <|im_start|>,
 * <|im_end|> (CONTROL), <think>/</think> (USER_DEFINED) and one UNUSED pad
 * token.  Each input is encoded by both, with and without parse_special, and
 * the fuzzer traps when a promise of tokenizer.h breaks:
 *   - every id is in [0, n_vocab); no CONTROL id without parse_special, and no
 *     UNUSED id ever (BPE only reaches NORMAL tokens);
 *   - decode(encode(x)) == x byte for byte (qw_detokenize, NUL-terminated at
 *     the summed qw_token_to_bytes length);
 *   - the streaming decoder, fed the ids one by one with a buffer of
 *     max_piece_len + 8, never truncates and, with its final flush, yields x;
 *     for valid UTF-8 input every piece it emits is valid UTF-8 (no character
 *     is cut at a token boundary) and the flush is empty;
 *   - encoding is deterministic (the second encode of the same mode matches).
 *
 *     make fuzz && build-fuzz/bin/fuzz_tokenizer fuzz/seeds/tokenizer
 */
#include "qwisp/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

/* Merges in byte-level form ("Ġ" is the space, "Ċ" the newline). */
static const char *const k_merges[] = {
    "t h", "h e", "th e", "Ġ t", "Ġ the", "Ġt he", "i n", "Ġ a", "a n", "an d", "Ġ and", "e r", "o u",
    "Ġ o", "Ġo f", "r e", "Ġ w", "e s", "o n", "i s", "Ġ is", "Ġ i", "Ġi s", "Ã ©", "c af", "c a", "ca f",
    "caf Ã©", "1 2", "Ċ Ċ", "Ġ Ġ", "ĠĠ ĠĠ", "' s", "< t", "<t h", "Ð ¿", "Ð¿ Ñ",
    "bogus merge", "t", "t  h", "",   /* malformed or unknown parts: must be ignored */
};

static const char *const k_extra[] = {
    "th", "he", "the", "Ġt", "Ġthe", "in", "Ġa", "an", "and", "Ġand", "er", "ou", "Ġo", "Ġof", "re",
    "Ġw", "es", "on", "is", "Ġis", "Ġi", "Ã©", "ca", "caf", "cafÃ©", "12", "ĊĊ", "ĠĠ", "ĠĠĠĠ", "'s",
    "<t", "<th", "Ð¿", "Ð¿Ñ", "he",   /* a duplicate text: the later id wins the lookup */
};

static const struct {
    const char *text;
    int type;
} k_special[] = {
    {"<|endoftext|>", QW_TOKEN_CONTROL}, {"<|im_start|>", QW_TOKEN_CONTROL}, {"<|im_end|>", QW_TOKEN_CONTROL},
    {"<think>", QW_TOKEN_USER_DEFINED},  {"</think>", QW_TOKEN_USER_DEFINED}, {"[PAD0]", QW_TOKEN_UNUSED},
};

#define N_EXTRA (sizeof k_extra / sizeof k_extra[0])
#define N_SPECIAL (sizeof k_special / sizeof k_special[0])
#define N_TOK (256 + N_EXTRA + N_SPECIAL)

static qw_tokenizer *g_tok[2];

static qw_tokenizer *build(const char *pre) {
    static char bytes[256][4];
    const char *toks[N_TOK];
    int32_t types[N_TOK];
    int n = 0;
    for (int b = 0, k = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = keep ? (unsigned)b : 256u + (unsigned)k++;
        if (cp < 0x80) {
            bytes[b][0] = (char)cp;
            bytes[b][1] = 0;
        } else {
            bytes[b][0] = (char)(0xC0 | (cp >> 6));
            bytes[b][1] = (char)(0x80 | (cp & 0x3F));
            bytes[b][2] = 0;
        }
        types[n] = QW_TOKEN_NORMAL;
        toks[n++] = bytes[b];
    }
    for (size_t i = 0; i < N_EXTRA; i++) types[n] = QW_TOKEN_NORMAL, toks[n++] = k_extra[i];
    int32_t eos = -1;
    for (size_t i = 0; i < N_SPECIAL; i++) {
        if (!strcmp(k_special[i].text, "<|im_end|>")) eos = n;
        types[n] = k_special[i].type;
        toks[n++] = k_special[i].text;
    }
    qw_tokenizer_spec sp = {
        .model = "gpt2", .pre = pre, .n_tokens = n, .tokens = toks, .token_types = types,
        .n_merges = (int32_t)(sizeof k_merges / sizeof k_merges[0]), .merges = k_merges,
        .bos_id = -1, .eos_id = eos, .eot_id = -1, .pad_id = n - 1,
    };
    qw_error err = {{0}};
    qw_tokenizer *t = qw_tokenizer_new(&sp, &err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: qw_tokenizer_new(%s): %s\n", pre, err.msg);
        abort();
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    g_tok[0] = build("qwen2");
    g_tok[1] = build("gpt2");
    return 0;
}

/* Strictly valid UTF-8 (no overlongs, surrogates or > U+10FFFF)? */
static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len;
        uint32_t v, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
        else return false;
        if (len > n - i) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            v = (v << 6) | (s[i + k] & 0x3F);
        }
        if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

static void check_mode(const qw_tokenizer *t, const char *text, size_t len, bool special, bool twice) {
    size_t n = 0;
    int32_t *ids = qw_tokenize(t, text, len, special, &n);
    CHECK(ids != NULL);
    CHECK(n <= len); /* no BOS here; every token covers at least one byte */
    const int32_t nv = qw_tokenizer_n_vocab(t);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < nv);
        int ty = qw_tokenizer_token_type(t, ids[i]);
        CHECK(ty != QW_TOKEN_UNUSED);
        if (!special) CHECK(ty != QW_TOKEN_CONTROL);
        char tmp[64];
        int b = qw_token_to_bytes(t, ids[i], tmp, sizeof tmp);
        CHECK(b >= 1 && b <= qw_tokenizer_max_piece_len(t));
        total += (size_t)b;
    }
    CHECK(total == len);

    char *dec = qw_detokenize(t, ids, n);
    CHECK(dec != NULL && dec[len] == '\0' && memcmp(dec, text, len) == 0);
    free(dec);

    /* streaming decode */
    size_t cap = (size_t)qw_tokenizer_max_piece_len(t) + 8;
    char *piece = malloc(cap);
    char *acc = malloc(len + 1);
    CHECK(piece && acc);
    size_t o = 0;
    bool utf8 = valid_utf8((const unsigned char *)text, len);
    qw_detok_stream ds = {0};
    for (size_t i = 0; i < n; i++) {
        int r = qw_detok_stream_push(&ds, t, ids[i], piece, cap);
        CHECK(r >= 0 && (size_t)r < cap && o + (size_t)r <= len);
        CHECK(piece[r] == '\0');
        memcpy(acc + o, piece, (size_t)r);
        o += (size_t)r;
        CHECK(ds.n_pending >= 0 && ds.n_pending <= 3);
        /* valid text is never cut inside a character */
        if (utf8) CHECK(valid_utf8((const unsigned char *)piece, (size_t)r));
    }
    CHECK(qw_detok_stream_push(&ds, t, nv, piece, cap) == -1);
    int r = qw_detok_stream_flush(&ds, piece, cap);
    CHECK(r >= 0 && (size_t)r < cap && o + (size_t)r == len && ds.n_pending == 0);
    if (utf8) CHECK(r == 0);
    memcpy(acc + o, piece, (size_t)r);
    CHECK(memcmp(acc, text, len) == 0);
    free(acc);
    free(piece);

    if (twice) {
        size_t n2 = 0;
        int32_t *ids2 = qw_tokenize(t, text, len, special, &n2);
        CHECK(ids2 && n2 == n && (n == 0 || memcmp(ids, ids2, n * sizeof *ids) == 0));
        free(ids2);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Exactly sized private copy: the tokenizer takes (text, len), no NUL. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    memcpy(text, data, size);
    check_mode(g_tok[0], text, size, true, size < 64);
    check_mode(g_tok[0], text, size, false, false);
    check_mode(g_tok[1], text, size, true, false);
    check_mode(g_tok[1], text, size, false, false);
    free(text);
    return 0;
}
