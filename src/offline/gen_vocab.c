/* gen_vocab.c — the vocabulary a synthetic model carries (gen_model.c):
 *
 *   bytes  the 256 byte tokens (GPT-2's byte -> code point map), byte-level
 *          BPE merges learned here from a small built-in corpus (English
 *          prose, code, numbers: what the parity prompts use, so common words
 *          are single tokens), and the three ChatML specials;
 *   hf     a real Hugging Face tokenizer directory, read through the tokenizer
 *          layer's tokenizer.json reader (one interpretation of that format).
 *
 * The result is the GGUF form (tokens, ggml token types, merges "a b",
 * special ids, chat template) that gen_model.c hands to the GGUF writer.
 */
#include "gen_vocab.h"

#include "qwisp/tokenizer.h"

#include <stdlib.h>
#include <string.h>

void qw_gen_vocab_free(gen_vocab *v) {
    for (size_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}

static int32_t vocab_add(gen_vocab *v, const char *s, int32_t type) {
    if (v->n_tokens == v->cap_tokens) {
        v->cap_tokens = v->cap_tokens ? 2 * v->cap_tokens : 1024;
        v->tokens = qw_xrealloc(v->tokens, v->cap_tokens * sizeof *v->tokens);
        v->types = qw_xrealloc(v->types, v->cap_tokens * sizeof *v->types);
    }
    v->tokens[v->n_tokens] = qw_xstrdup(s);
    v->types[v->n_tokens] = type;
    return (int32_t)v->n_tokens++;
}

static int32_t vocab_find(const gen_vocab *v, const char *s) {
    for (size_t i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return (int32_t)i;
    return -1;
}

static void vocab_add_merge(gen_vocab *v, const char *a, const char *b) {
    if (v->n_merges == v->cap_merges) {
        v->cap_merges = v->cap_merges ? 2 * v->cap_merges : 512;
        v->merges = qw_xrealloc(v->merges, v->cap_merges * sizeof *v->merges);
    }
    size_t la = strlen(a), lb = strlen(b);
    char *m = qw_xmalloc(la + lb + 2);
    memcpy(m, a, la);
    m[la] = ' ';
    memcpy(m + la + 1, b, lb + 1);
    v->merges[v->n_merges++] = m;
}

/* GPT-2's byte -> unicode code point map: printable Latin-1 bytes map to
 * themselves, the other 68 bytes to U+0100 upward in byte order, so every
 * byte has a visible, whitespace-free character. */
static uint32_t byte_to_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256u + (uint32_t)n;
}

/* Appends the UTF-8 of code point cp (< 0x800 here) to out; returns bytes written. */
static int put_cp(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Built-in training text for the small vocabulary: English prose, code and a
 * little of everything the parity prompts use, so common words get merged. */
static const char gen_corpus[] =
    "The quick brown fox jumps over the lazy dog. The weather today is sunny with a light breeze, "
    "and the children are playing in the park near the river. She said that the meeting would "
    "start at nine in the morning and end before lunch. There is nothing more important than "
    "the time we spend with the people we love. In the beginning there was the word, and the "
    "word was written in a book that nobody could read. When the train arrived at the station, "
    "the passengers were waiting on the platform with their bags and their tickets in hand. "
    "The history of the city goes back more than a thousand years, to the time when it was a "
    "small village of farmers and fishermen living on the coast. This is a test of the "
    "tokenizer and the model, and it should work for any text that we give it. Machine "
    "learning models are trained on large amounts of data, and the quality of that data "
    "matters as much as the size of the model. Memory is a resource that must be measured "
    "and bounded, not assumed to be free. The expert cache holds the weights of the experts "
    "that were used most recently, and the pool keeps buffers for reuse.\n"
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nfor i in range(10):\n    print(i, fibonacci(i))\n\n"
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) {\n        "
    "printf(\"%s\\n\", argv[i]);\n    }\n    return 0;\n}\n\n"
    "function add(a, b) { return a + b; }\nconst result = add(1, 2);\nconsole.log(result);\n"
    "import numpy as np\nx = np.array([1, 2, 3])\nprint(x.sum())\n"
    "Hello, world! How are you doing today? I am fine, thank you. What is your name? "
    "My name is Qwisp and I am a small language model that runs on the CPU. "
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14159 42. "
    "Once upon a time, in a land far away, there lived a king who had three daughters. "
    "The first was wise, the second was brave, and the third was kind to everyone she met.\n";

/* Splits text into pre-tokenizer-like chunks (a rough cut of the qwen2 regex:
 * an optional space + letters, single digits, an optional space +
 * punctuation, whitespace runs) into starts[]/lens[]; returns the count. */
static size_t corpus_chunks(const char *s, size_t n, size_t *starts, size_t *lens, size_t cap) {
    size_t k = 0, i = 0;
#define IS_ALPHA(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || (unsigned char)(c) >= 0x80)
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_SPACE(c) ((c) == ' ' || (c) == '\n' || (c) == '\t')
    while (i < n && k < cap) {
        size_t st = i;
        if (s[i] == ' ' && i + 1 < n && !IS_SPACE(s[i + 1]) && !IS_DIGIT(s[i + 1])) i++;
        if (IS_ALPHA(s[i])) {
            while (i < n && IS_ALPHA(s[i])) i++;
        } else if (IS_DIGIT(s[i])) {
            i++;
        } else if (IS_SPACE(s[i])) {
            while (i < n && IS_SPACE(s[i])) i++;
        } else {
            while (i < n && !IS_ALPHA(s[i]) && !IS_DIGIT(s[i]) && !IS_SPACE(s[i])) i++;
        }
        starts[k] = st;
        lens[k] = i - st;
        k++;
    }
#undef IS_ALPHA
#undef IS_DIGIT
#undef IS_SPACE
    return k;
}

#define GEN_MAX_MERGES 500

/* Classic BPE training on gen_corpus: count adjacent symbol pairs over the
 * unique chunks (weighted by frequency), merge the most frequent pair (ties:
 * lowest symbol ids), repeat until GEN_MAX_MERGES or no pair occurs twice.
 * Deterministic: no hashing order leaks into the result. */
static void vocab_learn_merges(gen_vocab *v) {
    size_t n = sizeof gen_corpus - 1;
    size_t cap = n;
    size_t *st = qw_xmalloc(cap * sizeof *st), *ln = qw_xmalloc(cap * sizeof *ln);
    size_t nc = corpus_chunks(gen_corpus, n, st, ln, cap);

    /* unique chunks with counts */
    int32_t **words = qw_xcalloc(nc, sizeof *words);
    size_t *wlen = qw_xcalloc(nc, sizeof *wlen);
    int *wcount = qw_xcalloc(nc, sizeof *wcount);
    size_t nw = 0;
    for (size_t c = 0; c < nc; c++) {
        size_t j;
        for (j = 0; j < nw; j++) {
            if (wlen[j] != ln[c]) continue;
            size_t t = 0;
            while (t < ln[c] && words[j][t] == (unsigned char)gen_corpus[st[c] + t]) t++;
            if (t == ln[c]) break;
        }
        if (j < nw) {
            wcount[j]++;
            continue;
        }
        words[nw] = qw_xmalloc(ln[c] * sizeof **words);
        for (size_t t = 0; t < ln[c]; t++) words[nw][t] = (unsigned char)gen_corpus[st[c] + t];
        wlen[nw] = ln[c];
        wcount[nw] = 1;
        nw++;
    }

    /* pair counts in a dense table: symbols stay < 256 + GEN_MAX_MERGES */
    size_t ns_max = 256 + GEN_MAX_MERGES;
    int *pc = qw_xmalloc(ns_max * ns_max * sizeof *pc);
    for (int m = 0; m < GEN_MAX_MERGES; m++) {
        size_t ns = v->n_tokens;
        memset(pc, 0, ns * ns_max * sizeof *pc);
        for (size_t w = 0; w < nw; w++)
            for (size_t t = 0; t + 1 < wlen[w]; t++)
                pc[(size_t)words[w][t] * ns_max + (size_t)words[w][t + 1]] += wcount[w];
        int best = 1;
        int32_t ba = -1, bb = -1;
        for (size_t a = 0; a < ns; a++)
            for (size_t b = 0; b < ns; b++)
                if (pc[a * ns_max + b] > best) {
                    best = pc[a * ns_max + b];
                    ba = (int32_t)a, bb = (int32_t)b;
                }
        if (ba < 0) break;
        const char *sa = v->tokens[ba], *sb = v->tokens[bb];
        size_t la = strlen(sa), lb = strlen(sb);
        char *cat = qw_xmalloc(la + lb + 1);
        memcpy(cat, sa, la);
        memcpy(cat + la, sb, lb + 1);
        vocab_add_merge(v, sa, sb);
        /* two different pairs can spell the same string ("a"+"bc", "ab"+"c"):
         * the merge is still a rule, but the token exists once */
        int32_t id = vocab_find(v, cat);
        if (id < 0) id = vocab_add(v, cat, QW_TOKEN_NORMAL);
        free(cat);
        for (size_t w = 0; w < nw; w++) {
            size_t o = 0;
            for (size_t t = 0; t < wlen[w]; t++) {
                if (t + 1 < wlen[w] && words[w][t] == ba && words[w][t + 1] == bb) {
                    words[w][o++] = id;
                    t++;
                } else {
                    words[w][o++] = words[w][t];
                }
            }
            wlen[w] = o;
        }
        if (v->n_tokens >= ns_max) break;
    }
    free(pc);
    for (size_t w = 0; w < nw; w++) free(words[w]);
    free(words);
    free(wlen);
    free(wcount);
    free(st);
    free(ln);
}

static const char gen_chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

void qw_gen_vocab_build_bytes(gen_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char s[4];
        int k = put_cp(s, byte_to_cp(b));
        s[k] = 0;
        vocab_add(v, s, QW_TOKEN_NORMAL);
    }
    vocab_learn_merges(v);
    int32_t eot = vocab_add(v, "<|endoftext|>", QW_TOKEN_CONTROL);
    vocab_add(v, "<|im_start|>", QW_TOKEN_CONTROL);
    int32_t im_end = vocab_add(v, "<|im_end|>", QW_TOKEN_CONTROL);
    v->bos = eot;
    v->eos = im_end;
    v->pad = eot;
    v->chat_template = qw_xstrdup(gen_chatml_template);
}

/* ---- Hugging Face tokenizer --------------------------------------------- */

/* ---- Hugging Face tokenizer --------------------------------------------- */

/* Real vocabularies (Qwen3: 151,669 tokens, 151,387 merges) come through the
 * tokenizer layer's reader so there is one interpretation of tokenizer.json
 * in qwisp.  No padding to the HF config's vocab_size: n_vocab is the
 * tokenizer's own size.  Real Qwen GGUFs name <|endoftext|> as BOS and
 * padding even though add_bos is false, so the same is done here when the
 * config leaves them unset. */
int qw_gen_vocab_build_hf(gen_vocab *v, const char *dir, qw_error *err) {
    qw_tokenizer_spec *s = qw_tokenizer_spec_from_hf_json(dir, NULL, 0, err);
    if (!s) return -1;
    v->cap_tokens = (size_t)s->n_tokens;
    v->tokens = qw_xmalloc(v->cap_tokens * sizeof *v->tokens);
    v->types = qw_xmalloc(v->cap_tokens * sizeof *v->types);
    for (int32_t i = 0; i < s->n_tokens; i++)
        vocab_add(v, s->tokens[i], s->token_types ? s->token_types[i] : QW_TOKEN_NORMAL);
    v->cap_merges = s->n_merges > 0 ? (size_t)s->n_merges : 1;
    v->merges = qw_xmalloc(v->cap_merges * sizeof *v->merges);
    for (int32_t i = 0; i < s->n_merges; i++) v->merges[v->n_merges++] = qw_xstrdup(s->merges[i]);
    int32_t eot = vocab_find(v, "<|endoftext|>");
    v->bos = s->bos_id >= 0 ? s->bos_id : eot;
    v->eos = s->eos_id >= 0 ? s->eos_id : vocab_find(v, "<|im_end|>");
    v->pad = s->pad_id >= 0 ? s->pad_id : eot;
    v->chat_template = qw_xstrdup(s->chat_template ? s->chat_template : gen_chatml_template);
    qw_tokenizer_spec_free(s);
    if (v->n_tokens == 0 || v->n_merges == 0)
        return qw_fail(err, "gen-model: %s: empty vocabulary or no merges", dir);
    return 0;
}
