/* tokenizer.c — byte-level BPE (GPT-2 / Qwen2 / Qwen3.5 family): build from a spec,
 * encode, decode, stream-decode.  See include/qwisp/tokenizer.h.
 *
 * Build (qw_tokenizer_new), everything sized once:
 *   - token texts in one blob + offsets; an open-addressing hash map
 *     text -> id (FNV-1a, power-of-two table, load <= 0.5, the hash's high
 *     half kept in the slot so a probe rarely touches another token's text);
 *     loading is these lookups (three per merge) at random places in tables
 *     of several MB, so the build loops hash and prefetch 16 items ahead:
 *     ~0.1 s of CPU for a 248k vocabulary, about half what it was without;
 *   - merges as a map (left id, right id) -> (rank, merged id).  Merging on ids
 *     instead of strings needs every merge's result to be a vocab token, which
 *     holds for any well-formed vocab; a merge whose parts or result are not in
 *     the vocab can never fire and is dropped at load;
 *   - byte_tok[b]: the token of the single byte-level char of byte b;
 *   - the decoded bytes of every token, precomputed (one blob), so decoding
 *     is a copy;
 *   - the special tokens (CONTROL, USER_DEFINED, UNKNOWN) sorted longest first;
 *   - the pre-tokenizer regex (tokenizer.ggml.pre: gpt2, qwen2, qwen35),
 *     compiled with PCRE2 (UTF + UCP, JIT).
 *
 * Encode (qw_tokenize, qw_tokenize_segments):
 *   1. Partition the text on special tokens: each special token in turn
 *      (longest first) splits every still-raw fragment at each occurrence.
 *      CONTROL/UNKNOWN tokens take part only with parse_special, or, given
 *      segments, only where the occurrence lies inside a markup segment (a
 *      chat template's own text: message content never turns into control
 *      tokens); USER_DEFINED ones always (llama.cpp's rule, after HF
 *      tokenizers).  Steps 2-3 do not see segments, so a prompt whose content
 *      holds no control-token text gets exactly qw_tokenize(text, true)'s ids.
 *   2. Each raw fragment is split by the regex; text between matches (if the
 *      regex leaves any) is a piece of its own.  \s in the patterns is spelled
 *      out as Unicode White_Space (the set llama.cpp and Rust's regex use; PCRE2's
 *      \s lacks U+0085).  Invalid UTF-8: each bad byte stands in as U+FFFD for
 *      the regex (as llama.cpp does) but its piece keeps the raw byte, so
 *      decode(encode(x)) == x for any bytes.
 *   3. Each piece is BPE-merged: symbols start as the byte tokens, a min-heap
 *      of adjacent pairs ordered by (rank, position) picks the next merge,
 *      stale heap entries are recognised by re-checking both ids.  O(n log n)
 *      per piece.
 *
 * Invariants: the tokenizer is immutable after qw_tokenizer_new, so encode and
 * decode may run concurrently from several threads (each call owns its
 * scratch and its PCRE2 match data).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "qwisp/tokenizer.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- regexes ----
 * WS is Unicode White_Space.  The Qwen2 pattern is tokenizer.json's with the
 * case-insensitive contraction group written as explicit classes.
 *
 * \p{L}, \p{M}, \p{N} are written as classes L, M, N: PCRE2's property plus
 * the letters, marks and numbers Unicode 15.0 and 15.1 added (CJK Ext. H and
 * I, Kawi, Nag Mundari, Kaktovik numerals, …).  llama.cpp classifies code
 * points with its own Unicode 15.1 tables; Debian's PCRE2 10.42 knows Unicode
 * 14, where these are unassigned, so without them a Kawi word would be cut
 * into punctuation pieces llama.cpp does not make.  The ranges were found by
 * comparing the two over every code point and checked against ICU's (Node's)
 * categories.  A PCRE2 with Unicode 15+ finds them in its own property too;
 * one with Unicode 16+ would add letters llama.cpp's tables do not have yet. */
#define WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define L15 \
    "\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}" \
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}" \
    "\\x{31350}-\\x{323AF}"
#define M15 \
    "\\x{CF3}\\x{ECE}\\x{10EFD}-\\x{10EFF}\\x{11241}\\x{11F00}-\\x{11F01}\\x{11F03}" \
    "\\x{11F34}-\\x{11F3A}\\x{11F3E}-\\x{11F42}\\x{13440}\\x{13447}-\\x{13455}" \
    "\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}"
#define N15 \
    "\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define L "\\p{L}" L15
#define M "\\p{M}" M15
#define N "\\p{N}" N15
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" L N "]?[" L "]+"
    "|[" N "]"
    "| ?[^" WS L N "]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";
/* Qwen3.5 ("qwen35"): Qwen2's with combining marks (\p{M}) joining letter runs
 * and leaving the punctuation class, so "e" + U+0301 stays one piece. */
static const char RE_QWEN35[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" L N "]?[" L M "]+"
    "|[" N "]"
    "| ?[^" WS L M N "]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?[" L "]+| ?[" N "]+"
    "| ?[^" WS L N "]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";
#undef L
#undef M
#undef N

typedef struct smap_ent {
    int32_t id;  /* -1 = empty slot */
    uint32_t h;  /* high half of the text's hash (the low bits pick the slot) */
} smap_ent;

typedef struct merge_ent {
    uint64_t key; /* (left << 32) | right; 0 = empty slot (ids are +1 biased) */
    int32_t rank;
    int32_t result;
} merge_ent;

struct qw_tokenizer {
    int32_t n_vocab;
    char *text_blob;  /* all token texts, NUL-separated */
    size_t *text_off; /* [n_vocab + 1] */
    uint8_t *type;    /* [n_vocab] QW_TOKEN_* */
    uint8_t *is_eog;  /* [n_vocab] */
    char *dec_blob;   /* decoded bytes of every token */
    size_t *dec_off;  /* [n_vocab + 1] */
    int max_piece;

    smap_ent *smap; /* text -> id, id -1 = empty */
    size_t smask;
    merge_ent *mmap;
    size_t mmask;
    int32_t byte_tok[256];

    int32_t *special; /* ids, longest text first */
    int32_t n_special;

    pcre2_code *re;
    int32_t bos, eos, eot, pad;
    bool add_bos;
};

/* ---- GPT-2 bytes_to_unicode ---- */

static void byte_map(uint32_t b2cp[256], int16_t cp2b[512]) {
    int n = 0;
    for (int i = 0; i < 512; i++) cp2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        cp2b[b2cp[b]] = (int16_t)b;
    }
}

static int put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the strictly valid UTF-8 sequence at s[0..n) (no overlongs,
 * surrogates or > U+10FFFF), or 0 if the bytes there are not one; *cp gets
 * the code point. */
static int utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ---- hash maps ---- */

#define FNV_BASIS 1469598103934665603ull

/* FNV-1a continued over s[n]: fnv_more(fnv(a), b) is the hash of a then b. */
static inline uint64_t fnv_more(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t fnv(const char *s, size_t n) { return fnv_more(FNV_BASIS, s, n); }

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static const char *tok_text(const qw_tokenizer *t, int32_t id, size_t *len) {
    *len = t->text_off[id + 1] - t->text_off[id] - 1;
    return t->text_blob + t->text_off[id];
}

/* Id of the token whose text is a[la] followed by b[lb] (lb may be 0), h
 * being that text's hash; -1 if none.  Each slot keeps the hash's high half
 * beside the id, so a probe that meets another text is rejected without
 * touching the token blob. */
static int32_t smap_find_h(const qw_tokenizer *t, uint64_t h, const char *a, size_t la, const char *b,
                           size_t lb) {
    for (size_t i = h & t->smask;; i = (i + 1) & t->smask) {
        const smap_ent *e = &t->smap[i];
        if (e->id < 0) return -1;
        if (e->h != (uint32_t)(h >> 32)) continue;
        size_t l;
        const char *x = tok_text(t, e->id, &l);
        if (l == la + lb && memcmp(x, a, la) == 0 && memcmp(x + la, b, lb) == 0) return e->id;
    }
}

static int32_t smap_find(const qw_tokenizer *t, const char *s, size_t n) {
    return smap_find_h(t, fnv(s, n), s, n, "", 0);
}

/* Later ids replace earlier ones with the same text (llama.cpp's map does the
 * same).  h: the hash of the token's text. */
static void smap_put(qw_tokenizer *t, int32_t id, uint64_t h) {
    size_t n;
    const char *s = tok_text(t, id, &n);
    for (size_t i = h & t->smask;; i = (i + 1) & t->smask) {
        smap_ent *e = &t->smap[i];
        if (e->id < 0) { *e = (smap_ent){id, (uint32_t)(h >> 32)}; return; }
        if (e->h != (uint32_t)(h >> 32)) continue;
        size_t l;
        const char *x = tok_text(t, e->id, &l);
        if (l == n && memcmp(x, s, n) == 0) { e->id = id; return; }
    }
}

/* Loading is a few hundred thousand lookups at random places in tables of
 * several MB, each a cache miss.  The build loops therefore work AHEAD items
 * in advance: hash the item, prefetch its slot, and use it AHEAD iterations
 * later, so the misses overlap instead of queueing. */
enum { AHEAD = 16 };

static void smap_prefetch(const qw_tokenizer *t, uint64_t h) { __builtin_prefetch(&t->smap[h & t->smask]); }

/* A merge "a b", split and hashed ahead of its lookups. */
typedef struct merge_pre {
    const char *a, *b;
    size_t la, lb;
    uint64_t ha, hb, hab; /* hashes of a, b and a+b */
    bool ok;              /* false: malformed, never fires */
} merge_pre;

static void merge_prep(const qw_tokenizer *t, const char *m, merge_pre *p) {
    const char *sp1 = m ? strchr(m, ' ') : NULL;
    p->ok = sp1 && sp1 != m && sp1[1];
    if (!p->ok) return;
    p->a = m;
    p->la = (size_t)(sp1 - m);
    p->b = sp1 + 1;
    p->lb = strlen(p->b);
    p->ha = fnv(p->a, p->la);
    p->hb = fnv(p->b, p->lb);
    p->hab = fnv_more(p->ha, p->b, p->lb);
    smap_prefetch(t, p->ha);
    smap_prefetch(t, p->hb);
    smap_prefetch(t, p->hab);
}

static inline uint64_t mkey(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
}

static inline uint64_t mhash(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33;
    return k;
}

static const merge_ent *mmap_find(const qw_tokenizer *t, int32_t a, int32_t b) {
    uint64_t k = mkey(a, b);
    for (size_t i = mhash(k) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mmap[i].key == k) return &t->mmap[i];
        if (t->mmap[i].key == 0) return NULL;
    }
}

/* Keeps the first (lowest) rank if a pair repeats. */
static void mmap_put(qw_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t result) {
    uint64_t k = mkey(a, b);
    for (size_t i = mhash(k) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mmap[i].key == k) return;
        if (t->mmap[i].key == 0) {
            t->mmap[i] = (merge_ent){k, rank, result};
            return;
        }
    }
}

/* ---- build ---- */

static bool is_eog_text(const char *s) {
    static const char *const names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
        "<EOT>", "<|end_of_text|>",
        /* FIM pad / repo / file separators end generation too in llama.cpp */
        "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    };
    if (s[0] != '<') return false; /* every name starts with '<': skips ~all of a vocab */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i])) return true;
    return false;
}

static const char *pre_regex(const char *pre) {
    if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt2")) return RE_GPT2;
    if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen") || !strcmp(pre, "megrez"))
        return RE_QWEN2;
    if (!strcmp(pre, "qwen35")) return RE_QWEN35;
    return NULL;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const qw_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static bool decodes_raw(int type) {
    return type == QW_TOKEN_CONTROL || type == QW_TOKEN_USER_DEFINED || type == QW_TOKEN_UNKNOWN;
}

/* Decoded bytes of every token into one blob. */
static void build_decoded(qw_tokenizer *t, const int16_t cp2b[512]) {
    size_t cap = t->text_off[t->n_vocab], n = 0;
    t->dec_blob = qw_xmalloc(cap + 1);
    t->dec_off = qw_xmalloc(((size_t)t->n_vocab + 1) * sizeof *t->dec_off);
    t->max_piece = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t len;
        const unsigned char *s = (const unsigned char *)tok_text(t, id, &len);
        t->dec_off[id] = n;
        int ty = t->type[id];
        if (ty == QW_TOKEN_UNUSED) {
            /* nothing: padding tokens decode to no bytes */
        } else if (decodes_raw(ty)) {
            memcpy(t->dec_blob + n, s, len);
            n += len;
        } else {
            for (size_t i = 0; i < len;) {
                uint32_t cp;
                int l = utf8_seq(s + i, len - i, &cp);
                if (l > 0 && cp < 512 && cp2b[cp] >= 0) {
                    t->dec_blob[n++] = (char)cp2b[cp];
                    i += (size_t)l;
                } else { /* not a byte-level char: pass it through */
                    int k = l > 0 ? l : 1;
                    memcpy(t->dec_blob + n, s + i, (size_t)k);
                    n += (size_t)k;
                    i += (size_t)k;
                }
            }
        }
        if ((int)(n - t->dec_off[id]) > t->max_piece) t->max_piece = (int)(n - t->dec_off[id]);
    }
    t->dec_off[t->n_vocab] = n;
}

qw_tokenizer *qw_tokenizer_new(const qw_tokenizer_spec *sp, qw_error *err) {
    if (sp->model && strcmp(sp->model, "gpt2") != 0) {
        qw_fail(err, "tokenizer.ggml.model = \"%s\" is not supported (only \"gpt2\", byte-level BPE)",
                sp->model);
        return NULL;
    }
    const char *pattern = pre_regex(sp->pre);
    if (!pattern) {
        qw_fail(err, "tokenizer.ggml.pre = \"%s\" is not supported (known: qwen2, qwen35, "
                "deepseek-r1-qwen, megrez, gpt2, default)", sp->pre);
        return NULL;
    }
    if (sp->n_tokens <= 0 || !sp->tokens) {
        qw_fail(err, "tokenizer.ggml.tokens: empty vocabulary");
        return NULL;
    }
    const int32_t nv = sp->n_tokens;
    const int32_t ids[4] = {sp->bos_id, sp->eos_id, sp->eot_id, sp->pad_id};
    static const char *const idnames[4] = {"bos", "eos", "eot", "padding"};
    for (int i = 0; i < 4; i++) {
        if (ids[i] < -1 || ids[i] >= nv) {
            qw_fail(err, "tokenizer.ggml.%s_token_id = %d is outside the vocabulary (n_vocab %d)",
                    idnames[i], ids[i], nv);
            return NULL;
        }
    }

    qw_tokenizer *t = qw_xcalloc(1, sizeof *t);
    t->n_vocab = nv;
    t->bos = sp->bos_id; t->eos = sp->eos_id; t->eot = sp->eot_id; t->pad = sp->pad_id;
    t->add_bos = sp->add_bos;

    /* texts */
    size_t total = 0;
    for (int32_t i = 0; i < nv; i++) total += (sp->tokens[i] ? strlen(sp->tokens[i]) : 0) + 1;
    t->text_blob = qw_xmalloc(total);
    t->text_off = qw_xmalloc(((size_t)nv + 1) * sizeof *t->text_off);
    t->type = qw_xmalloc((size_t)nv);
    t->is_eog = qw_xcalloc((size_t)nv, 1);
    size_t off = 0;
    for (int32_t i = 0; i < nv; i++) {
        const char *s = sp->tokens[i] ? sp->tokens[i] : "";
        size_t l = strlen(s);
        t->text_off[i] = off;
        memcpy(t->text_blob + off, s, l + 1);
        off += l + 1;
        int ty = sp->token_types ? sp->token_types[i] : QW_TOKEN_NORMAL;
        t->type[i] = (uint8_t)(ty >= 0 && ty <= QW_TOKEN_BYTE ? ty : QW_TOKEN_NORMAL);
    }
    t->text_off[nv] = off;

    t->smask = pow2_at_least((size_t)nv * 2) - 1;
    t->smap = qw_xmalloc((t->smask + 1) * sizeof *t->smap);
    memset(t->smap, 0xff, (t->smask + 1) * sizeof *t->smap); /* id -1 everywhere */
    uint64_t hr[AHEAD];
    for (int32_t i = 0; i < nv && i < AHEAD; i++) {
        size_t l;
        const char *x = tok_text(t, i, &l);
        hr[i] = fnv(x, l);
        smap_prefetch(t, hr[i]);
    }
    for (int32_t i = 0; i < nv; i++) {
        uint64_t h = hr[i % AHEAD];
        if (i + AHEAD < nv) {
            size_t l;
            const char *x = tok_text(t, i + AHEAD, &l);
            hr[i % AHEAD] = fnv(x, l);
            smap_prefetch(t, hr[i % AHEAD]);
        }
        smap_put(t, i, h);
    }

    uint32_t b2cp[256];
    int16_t cp2b[512];
    byte_map(b2cp, cp2b);
    for (int b = 0; b < 256; b++) {
        char u[4];
        int l = put_utf8(b2cp[b], u);
        t->byte_tok[b] = smap_find(t, u, (size_t)l);
    }

    /* merges */
    int32_t nm = sp->merges ? sp->n_merges : 0;
    t->mmask = pow2_at_least((size_t)(nm > 0 ? nm : 1) * 2) - 1;
    t->mmap = qw_xcalloc(t->mmask + 1, sizeof *t->mmap);
    /* two stages AHEAD apart: split + hash + prefetch the text slots; then
     * look the ids up and prefetch the merge slot, inserted AHEAD later
     * (in rank order, so a repeated pair still keeps its first rank) */
    merge_pre ring[AHEAD];
    merge_ent found[AHEAD];
    size_t nfound = 0, fhead = 0;
    for (int32_t r = 0; r < nm && r < AHEAD; r++) merge_prep(t, sp->merges[r], &ring[r]);
    for (int32_t r = 0; r < nm; r++) {
        merge_pre p = ring[r % AHEAD];
        if (r + AHEAD < nm) merge_prep(t, sp->merges[r + AHEAD], &ring[r % AHEAD]);
        if (!p.ok) continue;
        int32_t a = smap_find_h(t, p.ha, p.a, p.la, "", 0), b = smap_find_h(t, p.hb, p.b, p.lb, "", 0);
        if (a < 0 || b < 0) continue;
        int32_t res = smap_find_h(t, p.hab, p.a, p.la, p.b, p.lb);
        if (res < 0) continue;
        if (nfound == AHEAD) {
            merge_ent *e = &found[fhead];
            mmap_put(t, (int32_t)(e->key >> 32) - 1, (int32_t)(uint32_t)e->key - 1, e->rank, e->result);
            fhead = (fhead + 1) % AHEAD;
            nfound--;
        }
        uint64_t k = mkey(a, b);
        __builtin_prefetch(&t->mmap[mhash(k) & t->mmask]);
        found[(fhead + nfound++) % AHEAD] = (merge_ent){k, r, res};
    }
    for (; nfound > 0; nfound--, fhead = (fhead + 1) % AHEAD) {
        merge_ent *e = &found[fhead];
        mmap_put(t, (int32_t)(e->key >> 32) - 1, (int32_t)(uint32_t)e->key - 1, e->rank, e->result);
    }

    /* special tokens, EOG */
    t->special = qw_xmalloc((size_t)nv * sizeof *t->special);
    for (int32_t i = 0; i < nv; i++) {
        size_t l;
        const char *s = tok_text(t, i, &l);
        if (decodes_raw(t->type[i]) && l > 0) t->special[t->n_special++] = i;
        if (is_eog_text(s)) t->is_eog[i] = 1;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
    if (t->eos >= 0) t->is_eog[t->eos] = 1;
    if (t->eot >= 0) t->is_eog[t->eot] = 1;

    build_decoded(t, cp2b);

    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo,
                          NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(ec, msg, sizeof msg);
        qw_fail(err, "tokenizer: pre-tokenizer regex for \"%s\" does not compile at %zu: %s",
                sp->pre ? sp->pre : "default", (size_t)eo, (const char *)msg);
        qw_tokenizer_free(t);
        return NULL;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* interpreter if JIT is unavailable */
    return t;
}

void qw_tokenizer_free(qw_tokenizer *t) {
    if (!t) return;
    if (t->re) pcre2_code_free(t->re);
    free(t->text_blob); free(t->text_off); free(t->type); free(t->is_eog);
    free(t->dec_blob); free(t->dec_off); free(t->smap); free(t->mmap); free(t->special);
    free(t);
}

/* ---- accessors ---- */

int32_t qw_tokenizer_n_vocab(const qw_tokenizer *t) { return t->n_vocab; }
int32_t qw_tokenizer_bos(const qw_tokenizer *t) { return t->bos; }
int32_t qw_tokenizer_eos(const qw_tokenizer *t) { return t->eos; }
int32_t qw_tokenizer_eot(const qw_tokenizer *t) { return t->eot; }
int32_t qw_tokenizer_pad(const qw_tokenizer *t) { return t->pad; }
bool qw_tokenizer_add_bos(const qw_tokenizer *t) { return t->add_bos && t->bos >= 0; }
int qw_tokenizer_max_piece_len(const qw_tokenizer *t) { return t->max_piece; }

int32_t qw_tokenizer_find(const qw_tokenizer *t, const char *s) {
    return s ? smap_find(t, s, strlen(s)) : -1;
}

bool qw_tokenizer_is_eog(const qw_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->is_eog[id];
}

int qw_tokenizer_token_type(const qw_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->type[id] : -1;
}

const char *qw_tokenizer_piece(const qw_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->text_blob + t->text_off[id] : NULL;
}

/* ---- encode ---- */

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ivec;

static void ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, nc * sizeof *p);
        if (!p) { a->oom = true; return; }
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

typedef struct sym { int32_t id, prev, next; } sym;
typedef struct pair { int32_t rank, pos, l, r; } pair;

/* Per-call scratch for BPE, grown as needed. */
typedef struct bpe_ctx {
    sym *s;
    size_t scap;
    pair *h;
    size_t hn, hcap;
    bool oom;
} bpe_ctx;

static inline bool pair_less(const pair *a, const pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_ctx *c, pair p) {
    if (c->hn == c->hcap) {
        size_t nc = c->hcap ? c->hcap * 2 : 64;
        pair *q = realloc(c->h, nc * sizeof *q);
        if (!q) { c->oom = true; return; }
        c->h = q;
        c->hcap = nc;
    }
    size_t i = c->hn++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_less(&p, &c->h[up])) break;
        c->h[i] = c->h[up];
        i = up;
    }
    c->h[i] = p;
}

static pair heap_pop(bpe_ctx *c) {
    pair top = c->h[0], last = c->h[--c->hn];
    size_t i = 0, n = c->hn;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n) break;
        if (k + 1 < n && pair_less(&c->h[k + 1], &c->h[k])) k++;
        if (!pair_less(&c->h[k], &last)) break;
        c->h[i] = c->h[k];
        i = k;
    }
    if (n > 0) c->h[i] = last;
    return top;
}

static void try_pair(const qw_tokenizer *t, bpe_ctx *c, int32_t pos) {
    int32_t nx = c->s[pos].next;
    if (nx < 0) return;
    const merge_ent *m = mmap_find(t, c->s[pos].id, c->s[nx].id);
    if (m) heap_push(c, (pair){m->rank, pos, c->s[pos].id, c->s[nx].id});
}

/* BPE of one piece (raw bytes); appends ids. */
static void bpe_piece(const qw_tokenizer *t, bpe_ctx *c, const unsigned char *p, size_t n, ivec *out) {
    if (n == 1) {
        if (t->byte_tok[p[0]] >= 0) ivec_push(out, t->byte_tok[p[0]]);
        return;
    }
    if (n > c->scap) {
        sym *q = realloc(c->s, n * sizeof *q);
        if (!q) { c->oom = true; return; }
        c->s = q;
        c->scap = n;
    }
    /* Bytes with no byte token (a vocab without all 256) are dropped. */
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[p[i]];
        if (id < 0) continue;
        c->s[m] = (sym){id, m - 1, m + 1};
        m++;
    }
    if (m == 0) return;
    c->s[m - 1].next = -1;
    c->hn = 0;
    for (int32_t i = 0; i + 1 < m; i++) try_pair(t, c, i);
    while (c->hn > 0 && !c->oom) {
        pair pr = heap_pop(c);
        sym *a = &c->s[pr.pos];
        if (a->id != pr.l || a->next < 0) continue;
        sym *b = &c->s[a->next];
        if (b->id != pr.r) continue;
        const merge_ent *me = mmap_find(t, pr.l, pr.r);
        a->id = me->result;
        b->id = -1; /* dead */
        a->next = b->next;
        if (b->next >= 0) c->s[b->next].prev = pr.pos;
        if (a->prev >= 0) try_pair(t, c, a->prev);
        try_pair(t, c, pr.pos);
    }
    for (int32_t i = 0; i >= 0; i = c->s[i].next) ivec_push(out, c->s[i].id);
}

/* Regex split of one raw fragment, then BPE of each piece. */
static void encode_raw(const qw_tokenizer *t, bpe_ctx *c, pcre2_match_data *md, const char *txt,
                       size_t n, ivec *out) {
    /* Sanitise invalid UTF-8 for the regex, keeping a map back to the source. */
    const unsigned char *src = (const unsigned char *)txt;
    bool valid = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_seq(src + i, n - i, &cp);
        if (!l) { valid = false; break; }
        i += (size_t)l;
    }
    char *subj = (char *)txt;
    size_t sn = n;
    size_t *map = NULL; /* subject offset -> source offset, [sn + 1] */
    if (!valid) {
        subj = malloc(n * 3 + 1);
        map = malloc((n * 3 + 1) * sizeof *map);
        if (!subj || !map) { free(subj); free(map); c->oom = true; return; }
        sn = 0;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = utf8_seq(src + i, n - i, &cp);
            if (l) {
                for (int k = 0; k < l; k++) { map[sn] = i + (size_t)k; subj[sn++] = txt[i + (size_t)k]; }
                i += (size_t)l;
            } else {
                static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
                for (int k = 0; k < 3; k++) { map[sn] = i; subj[sn++] = fffd[k]; }
                i++;
            }
        }
        map[sn] = n;
    }
#define SRC(o) (map ? map[o] : (o))
#define PIECE(a, b) bpe_piece(t, c, src + SRC(a), SRC(b) - SRC(a), out)
    size_t pos = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    while (pos < sn && !c->oom) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)subj, sn, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) { PIECE(pos, sn); break; }
        size_t s = ov[0], e = ov[1];
        if (s > pos) PIECE(pos, s);
        if (e == s) { /* empty match: take one code point as a piece */
            uint32_t cp;
            int l = utf8_seq((const unsigned char *)subj + s, sn - s, &cp);
            e = s + (size_t)(l ? l : 1);
        }
        PIECE(s, e);
        pos = e;
    }
#undef PIECE
#undef SRC
    if (map) { free(subj); free(map); }
}

typedef struct frag { size_t off, len; int32_t id; } frag;

/* Whether an occurrence of special token sid at text[at, at + sl) becomes that
 * token.  USER_DEFINED tokens always do (llama.cpp's rule).  CONTROL/UNKNOWN
 * ones: with segments, only when the occurrence lies wholly inside one markup
 * segment (segments are in order, so a binary search finds the one holding
 * `at`); without, when parse_special. */
static bool special_here(const qw_tokenizer *t, int32_t sid, bool parse_special, const qw_text_seg *segs,
                         size_t n_segs, size_t at, size_t sl) {
    if (t->type[sid] == QW_TOKEN_USER_DEFINED) return true;
    if (!segs) return parse_special;
    size_t lo = 0, hi = n_segs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (segs[mid].off <= at) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return false;
    const qw_text_seg *g = &segs[lo - 1];
    return g->markup && at + sl <= g->off + g->len;
}

/* qw_tokenize and qw_tokenize_segments: segs == NULL means parse_special
 * decides for the whole text. */
static int32_t *encode(const qw_tokenizer *t, const char *text, size_t len, bool parse_special,
                       const qw_text_seg *segs, size_t n_segs, size_t *n_out) {
    ivec out = {0};
    bpe_ctx c = {0};
    frag *fr = NULL, *nf = NULL;
    size_t nfr = 0, cap = 0;
    pcre2_match_data *md = NULL;
    *n_out = 0;

    /* With segments, CONTROL tokens take part only if some markup exists. */
    bool any_control = parse_special;
    if (segs) {
        any_control = false;
        for (size_t i = 0; i < n_segs && !any_control; i++) any_control = segs[i].markup && segs[i].len > 0;
    }

    if (qw_tokenizer_add_bos(t)) ivec_push(&out, t->bos);

    /* 1. special-token partition */
    cap = 16;
    fr = malloc(cap * sizeof *fr);
    if (!fr) goto oom;
    if (len > 0) fr[nfr++] = (frag){0, len, -1};
    for (int32_t k = 0; k < t->n_special && nfr > 0; k++) {
        int32_t sid = t->special[k];
        if (!any_control && t->type[sid] != QW_TOKEN_USER_DEFINED) continue;
        size_t sl;
        const char *st = tok_text(t, sid, &sl);
        size_t nn = 0, ncap = nfr + 16;
        nf = malloc(ncap * sizeof *nf);
        if (!nf) goto oom;
        for (size_t i = 0; i < nfr; i++) {
            frag f = fr[i];
            size_t from = f.off; /* search start: past occurrences not taken */
            while (f.id < 0 && f.off + f.len - from >= sl) {
                const char *hit = memmem(text + from, f.off + f.len - from, st, sl);
                if (!hit) break;
                size_t at = (size_t)(hit - text);
                if (!special_here(t, sid, parse_special, segs, n_segs, at, sl)) {
                    from = at + 1; /* stays text; a later occurrence may still count */
                    continue;
                }
                if (nn + 3 > ncap) {
                    ncap = ncap * 2 + 3;
                    frag *q = realloc(nf, ncap * sizeof *q);
                    if (!q) goto oom;
                    nf = q;
                }
                if (at > f.off) nf[nn++] = (frag){f.off, at - f.off, -1};
                nf[nn++] = (frag){at, sl, sid};
                f.len -= at + sl - f.off;
                f.off = at + sl;
                from = f.off;
            }
            if (f.len > 0 || f.id >= 0) {
                if (nn + 1 > ncap) {
                    ncap = ncap * 2 + 1;
                    frag *q = realloc(nf, ncap * sizeof *q);
                    if (!q) goto oom;
                    nf = q;
                }
                nf[nn++] = f;
            }
        }
        free(fr);
        fr = nf;
        nf = NULL;
        nfr = nn;
    }

    /* 2+3. regex split and BPE */
    md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md) goto oom;
    for (size_t i = 0; i < nfr && !c.oom && !out.oom; i++) {
        if (fr[i].id >= 0) ivec_push(&out, fr[i].id);
        else encode_raw(t, &c, md, text + fr[i].off, fr[i].len, &out);
    }
    if (c.oom || out.oom) goto oom;
    pcre2_match_data_free(md);
    free(fr);
    free(c.s);
    free(c.h);
    if (!out.v) { /* empty result: still a valid, freeable array */
        out.v = malloc(sizeof *out.v);
        if (!out.v) return NULL;
    }
    *n_out = out.n;
    return out.v;
oom:
    if (md) pcre2_match_data_free(md);
    free(fr); free(nf); free(c.s); free(c.h); free(out.v);
    return NULL;
}

int32_t *qw_tokenize(const qw_tokenizer *t, const char *text, size_t len, bool parse_special,
                     size_t *n_out) {
    return encode(t, text, len, parse_special, NULL, 0, n_out);
}

int32_t *qw_tokenize_segments(const qw_tokenizer *t, const char *text, size_t len, const qw_text_seg *segs,
                              size_t n_segs, size_t *n_out) {
    static const qw_text_seg none = {0, 0, false}; /* no segments: all plain text */
    return encode(t, text, len, false, n_segs ? segs : &none, n_segs ? n_segs : 1, n_out);
}

/* ---- decode ---- */

int qw_token_to_bytes(const qw_tokenizer *t, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return -1;
    size_t n = t->dec_off[id + 1] - t->dec_off[id];
    memcpy(buf, t->dec_blob + t->dec_off[id], n < cap ? n : cap);
    return (int)n;
}

char *qw_detokenize(const qw_tokenizer *t, const int32_t *ids, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_vocab) total += t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
    char *s = malloc(total + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) continue;
        size_t l = t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
        memcpy(s + o, t->dec_blob + t->dec_off[ids[i]], l);
        o += l;
    }
    s[o] = 0;
    return s;
}

/* Number of trailing bytes of b[0..n) that are a valid but incomplete UTF-8
 * sequence (0..3). */
static int incomplete_tail(const unsigned char *b, size_t n) {
    for (int k = 1; k <= 3 && (size_t)k <= n; k++) {
        unsigned c = b[n - (size_t)k];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        int need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need <= k) return 0;
        /* the bytes so far must still be able to complete (E0/ED/F0/F4 limits) */
        if (k >= 2) {
            unsigned c1 = b[n - (size_t)k + 1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
                (c == 0xF4 && c1 > 0x8F))
                return 0;
        }
        return k;
    }
    return 0;
}

static int emit(char *out, size_t cap, const char *s, size_t n) {
    if (cap > 0) {
        size_t w = n < cap - 1 ? n : cap - 1;
        memcpy(out, s, w);
        out[w] = 0;
    }
    return (int)n;
}

int qw_detok_stream_push(qw_detok_stream *s, const qw_tokenizer *t, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->n_vocab) {
        if (cap > 0) out[0] = 0;
        return -1;
    }
    size_t tl = t->dec_off[id + 1] - t->dec_off[id];
    size_t n = (size_t)s->n_pending + tl;
    char small[256];
    char *b = n <= sizeof small ? small : malloc(n);
    if (!b) {
        if (cap > 0) out[0] = 0;
        return -1;
    }
    memcpy(b, s->pending, (size_t)s->n_pending);
    memcpy(b + s->n_pending, t->dec_blob + t->dec_off[id], tl);
    int hold = incomplete_tail((const unsigned char *)b, n);
    size_t done = n - (size_t)hold;
    memcpy(s->pending, b + done, (size_t)hold);
    s->n_pending = hold;
    int r = emit(out, cap, b, done);
    if (b != small) free(b);
    return r;
}

int qw_detok_stream_flush(qw_detok_stream *s, char *out, size_t cap) {
    int r = emit(out, cap, s->pending, (size_t)s->n_pending);
    s->n_pending = 0;
    return r;
}
