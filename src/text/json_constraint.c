/* json_constraint.c — JSON Schema subset -> byte-level prefix matcher ->
 * token mask for the sampler.  See include/qwisp/json_constraint.h.
 *
 * The schema compiles to a tree of nodes.  The matcher is a pushdown
 * automaton: a stack of frames, one per value being read (object, array,
 * string, number, literal), each with a small sub-state.  A byte either is
 * consumed by the top frame, or completes it (numbers and literals end
 * where the next byte cannot continue them: the frame pops and the byte is
 * offered to the parent), or is refused.  Literals cover enum, const,
 * boolean, null and the keys of a schema object: a set of candidate texts
 * (at most 64, a bit mask) matched byte by byte.
 *
 * Masking cost: per sampled token the constraint tries every vocabulary
 * token's bytes against a copy of the state.  Two things keep that cheap:
 * the 256 possible first bytes are tried once and tokens whose first byte
 * fails are skipped without a copy, and a copy is only the frames in use
 * (the stack is shallow).  Measured on the Qwen3 vocabulary (151,936
 * tokens): 0.5-1.5 ms per token on one core, small next to a forward pass of
 * a real MoE model.  A trie over the token bytes would share the work of
 * common prefixes if this ever matters.
 *
 * Termination: whitespace runs are bounded (one space, or a newline and an
 * indent of up to two spaces per level), numbers are capped
 * (24 characters), arrays honour maxItems and strings maxLength; when the
 * root value is complete only end-of-generation tokens are allowed, so the
 * output ends there.  Strings without maxLength can still run to max_tokens
 * (finish_reason "length"), as with OpenAI's API.
 */
#include "qwisp/json_constraint.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 32, MAX_ALTS = 64, MAX_WS = 16, MAX_NUM = 24, MAX_SCHEMA_DEPTH = 16 };

typedef enum ntype { N_ANY, N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER, N_LITERAL } ntype;

typedef struct node {
    ntype type;
    /* object: any_keys (a free-form object: any keys, any values) or props */
    bool any_keys;
    int n_props;
    char **keys;         /* quoted, escaped: "\"name\"" */
    struct node **props;
    bool *required;
    /* array */
    struct node *items;
    long min_items, max_items; /* max -1: none */
    /* string */
    long min_len, max_len;     /* max -1: none */
    /* literal */
    int n_lits;
    char **lits;
} node;

struct qw_json_schema {
    node *root;
};

/* ---- schema ---- */

static node *node_new(ntype t) {
    node *n = calloc(1, sizeof *n);
    if (n) {
        n->type = t;
        n->max_items = n->max_len = -1;
    }
    return n;
}

static void node_free(node *n) {
    if (!n) return;
    for (int i = 0; i < n->n_props; i++) {
        free(n->keys[i]);
        node_free(n->props[i]);
    }
    free(n->keys);
    free(n->props);
    free(n->required);
    node_free(n->items);
    for (int i = 0; i < n->n_lits; i++) free(n->lits[i]);
    free(n->lits);
    free(n);
}

static node k_any = {.type = N_ANY, .max_items = -1, .max_len = -1};

qw_json_schema *qw_json_schema_any_object(void) {
    qw_json_schema *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->root = node_new(N_OBJECT);
    if (!s->root) {
        free(s);
        return NULL;
    }
    s->root->any_keys = true;
    return s;
}

void qw_json_schema_free(qw_json_schema *s) {
    if (!s) return;
    node_free(s->root);
    free(s);
}

static const char *const k_annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", NULL};

static bool is_annotation(const char *k) {
    for (int i = 0; k_annotations[i]; i++)
        if (!strcmp(k, k_annotations[i])) return true;
    return false;
}

static int get_count(const cJSON *o, const char *kw, long *out, const char *path, qw_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, kw);
    if (!f) return 0;
    if (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 1e9 || f->valuedouble != (double)(long)f->valuedouble)
        return qw_fail(err, "%s: '%s' must be a non-negative integer", path, kw);
    *out = (long)f->valuedouble;
    return 0;
}

static int add_literal(node *n, const cJSON *v, const char *path, qw_error *err) {
    if (n->n_lits >= MAX_ALTS) return qw_fail(err, "%s: more than %d enum values", path, MAX_ALTS);
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return qw_fail(err, "%s: out of memory", path);
    char **l = realloc(n->lits, (size_t)(n->n_lits + 1) * sizeof *l);
    if (!l) {
        free(t);
        return qw_fail(err, "%s: out of memory", path);
    }
    n->lits = l;
    n->lits[n->n_lits++] = t;
    return 0;
}

static node *compile(const cJSON *o, const char *path, int depth, qw_error *err);

/* Checks every keyword of o against those its type allows. */
static int check_keywords(const cJSON *o, const char *const *allowed, const char *type, const char *path, qw_error *err) {
    const cJSON *k;
    cJSON_ArrayForEach(k, o) {
        if (is_annotation(k->string)) continue;
        bool ok = false;
        for (int i = 0; allowed[i]; i++)
            if (!strcmp(k->string, allowed[i])) ok = true;
        if (!ok)
            return qw_fail(err, "%s: '%s' is not supported%s%s (supported: type, properties, required, "
                                "additionalProperties, items, enum, const, minItems, maxItems, minLength, maxLength)",
                           path, k->string, type ? " for type " : "", type ? type : "");
    }
    return 0;
}

static node *compile_object(const cJSON *o, const char *path, int depth, qw_error *err) {
    static const char *const kws[] = {"type", "properties", "required", "additionalProperties", NULL};
    if (check_keywords(o, kws, "object", path, err)) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(o, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(o, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(o, "additionalProperties");
    if (ap && !cJSON_IsBool(ap)) {
        qw_fail(err, "%s: 'additionalProperties' must be a boolean (a schema there is not supported)", path);
        return NULL;
    }
    if (props && !cJSON_IsObject(props)) {
        qw_fail(err, "%s: 'properties' must be an object", path);
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        qw_fail(err, "%s: 'required' must be an array of property names", path);
        return NULL;
    }
    node *n = node_new(N_OBJECT);
    if (!n) {
        qw_fail(err, "out of memory");
        return NULL;
    }
    int np = props ? cJSON_GetArraySize(props) : 0;
    if (np == 0) {
        /* No properties: free-form unless additionalProperties is false ({} only). */
        n->any_keys = !(ap && cJSON_IsFalse(ap));
    }
    if (np > MAX_ALTS) {
        qw_fail(err, "%s: more than %d properties", path, MAX_ALTS);
        node_free(n);
        return NULL;
    }
    n->keys = calloc((size_t)(np ? np : 1), sizeof *n->keys);
    n->props = calloc((size_t)(np ? np : 1), sizeof *n->props);
    n->required = calloc((size_t)(np ? np : 1), sizeof *n->required);
    if (!n->keys || !n->props || !n->required) {
        qw_fail(err, "out of memory");
        node_free(n);
        return NULL;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.properties.%s", path, p->string);
        cJSON *ks = cJSON_CreateString(p->string);
        n->keys[n->n_props] = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        n->props[n->n_props] = n->keys[n->n_props] ? compile(p, sub, depth + 1, err) : NULL;
        n->n_props++;
        if (!n->props[n->n_props - 1]) {
            if (!n->keys[n->n_props - 1]) qw_fail(err, "out of memory");
            node_free(n);
            return NULL;
        }
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        int found = -1;
        for (int i = 0; cJSON_IsString(r) && i < n->n_props; i++)
            if (!strcmp(cJSON_GetArrayItem(props, i)->string, r->valuestring)) found = i;
        if (found < 0) {
            qw_fail(err, "%s: 'required' names '%s', which is not in 'properties'", path,
                    cJSON_IsString(r) ? r->valuestring : "(not a string)");
            node_free(n);
            return NULL;
        }
        n->required[found] = true;
    }
    return n;
}

static node *compile(const cJSON *o, const char *path, int depth, qw_error *err) {
    if (depth > MAX_SCHEMA_DEPTH) {
        qw_fail(err, "%s: the schema nests deeper than %d levels", path, MAX_SCHEMA_DEPTH);
        return NULL;
    }
    if (cJSON_IsTrue(o)) return node_new(N_ANY);
    if (!cJSON_IsObject(o)) {
        qw_fail(err, "%s: a schema must be an object", path);
        return NULL;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(o, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(o, "const");
    if (type && !cJSON_IsString(type)) {
        qw_fail(err, "%s: 'type' must be one type name (a list of types is not supported)", path);
        return NULL;
    }
    if (en || cn) {
        static const char *const kws[] = {"type", "enum", "const", NULL};
        if (check_keywords(o, kws, NULL, path, err)) return NULL;
        if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)) {
            qw_fail(err, "%s: 'enum' must be a non-empty array", path);
            return NULL;
        }
        node *n = node_new(N_LITERAL);
        if (!n) {
            qw_fail(err, "out of memory");
            return NULL;
        }
        const cJSON *v;
        if (cn && add_literal(n, cn, path, err)) goto bad_lit;
        if (en) cJSON_ArrayForEach(v, en) {
                if (cn) break; /* const narrows enum to itself */
                if (add_literal(n, v, path, err)) goto bad_lit;
            }
        return n;
    bad_lit:
        node_free(n);
        return NULL;
    }
    const char *t = type ? type->valuestring : NULL;
    if (!t) {
        /* no type: an object schema if it has properties, else anything */
        if (cJSON_GetObjectItemCaseSensitive(o, "properties")) return compile_object(o, path, depth, err);
        static const char *const kws[] = {NULL};
        if (check_keywords(o, kws, NULL, path, err)) return NULL;
        return node_new(N_ANY);
    }
    if (!strcmp(t, "object")) return compile_object(o, path, depth, err);
    if (!strcmp(t, "array")) {
        static const char *const kws[] = {"type", "items", "minItems", "maxItems", NULL};
        if (check_keywords(o, kws, t, path, err)) return NULL;
        node *n = node_new(N_ARRAY);
        if (!n) return NULL;
        if (get_count(o, "minItems", &n->min_items, path, err) || get_count(o, "maxItems", &n->max_items, path, err)) {
            node_free(n);
            return NULL;
        }
        if (n->max_items >= 0 && n->max_items < n->min_items) {
            qw_fail(err, "%s: maxItems < minItems", path);
            node_free(n);
            return NULL;
        }
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "items");
        char sub[256];
        snprintf(sub, sizeof sub, "%s.items", path);
        n->items = it ? compile(it, sub, depth + 1, err) : node_new(N_ANY);
        if (!n->items) {
            node_free(n);
            return NULL;
        }
        return n;
    }
    if (!strcmp(t, "string")) {
        static const char *const kws[] = {"type", "minLength", "maxLength", NULL};
        if (check_keywords(o, kws, t, path, err)) return NULL;
        node *n = node_new(N_STRING);
        if (!n) return NULL;
        if (get_count(o, "minLength", &n->min_len, path, err) || get_count(o, "maxLength", &n->max_len, path, err)) {
            node_free(n);
            return NULL;
        }
        if (n->max_len >= 0 && n->max_len < n->min_len) {
            qw_fail(err, "%s: maxLength < minLength", path);
            node_free(n);
            return NULL;
        }
        return n;
    }
    static const char *const kws[] = {"type", NULL};
    if (!strcmp(t, "number") || !strcmp(t, "integer")) {
        if (check_keywords(o, kws, t, path, err)) return NULL;
        return node_new(t[0] == 'n' ? N_NUMBER : N_INTEGER);
    }
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
        if (check_keywords(o, kws, t, path, err)) return NULL;
        node *n = node_new(N_LITERAL);
        if (!n) return NULL;
        const char *const *alts = t[0] == 'b' ? (const char *const[]){"true", "false", NULL}
                                              : (const char *const[]){"null", NULL};
        for (int i = 0; alts[i]; i++) {
            cJSON *v = cJSON_Parse(alts[i]);
            int rc = add_literal(n, v, path, err);
            cJSON_Delete(v);
            if (rc) {
                node_free(n);
                return NULL;
            }
        }
        return n;
    }
    qw_fail(err, "%s: unknown type '%s'", path, t);
    return NULL;
}

qw_json_schema *qw_json_schema_compile(const char *text, size_t len, qw_error *err) {
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!o) {
        qw_fail(err, "schema: not valid JSON");
        return NULL;
    }
    qw_json_schema *s = calloc(1, sizeof *s);
    if (s) s->root = compile(o, "schema", 0, err);
    else qw_fail(err, "out of memory");
    cJSON_Delete(o);
    if (s && !s->root) {
        free(s);
        return NULL;
    }
    return s;
}

/* ---- matcher ---- */

typedef enum kind { K_START, K_OBJ, K_ARR, K_STR, K_NUM, K_LIT, K_KEY } kind;

enum { /* object */ O_OPEN, O_NEXT, O_KEYSTR, O_COLON, O_VAL, O_AFTER };
enum { /* array */ A_OPEN, A_NEXT, A_VAL, A_AFTER };
enum { /* string */ S_IN, S_ESC, S_U1, S_U2, S_U3, S_U4 };
enum { /* number */ M_MINUS, M_ZERO, M_INT, M_DOT, M_FRAC, M_E, M_ESIGN, M_EXP };

typedef struct frame {
    const node *n;  /* NULL: an any-object key string */
    uint8_t kind, st, need; /* need: UTF-8 continuation bytes still due (strings) */
    uint8_t lo, hi;         /* range of the next continuation byte (no overlongs, surrogates, > U+10FFFF) */
    int32_t idx;    /* object: last property taken (-1); array: items; string: chars; number/literal: bytes */
    uint64_t alive; /* literal/key: candidate texts still possible */
} frame;

typedef struct state {
    int depth, ws;
    frame f[MAX_DEPTH];
} state;

struct qw_json_matcher {
    const qw_json_schema *s;
    state st;
};

static void copy_state(state *dst, const state *src) {
    dst->depth = src->depth;
    dst->ws = src->ws;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof(frame));
}

static bool push(state *S, const node *n, kind k) {
    if (S->depth >= MAX_DEPTH) return false;
    S->f[S->depth++] = (frame){.n = n, .kind = (uint8_t)k, .idx = -1};
    return true;
}

/* The next property indices an object at `last` may take: bit i set for
 * last < i <= the first required one after last (or every later one). */
static uint64_t key_candidates(const node *n, int32_t last) {
    uint64_t m = 0;
    for (int i = last + 1; i < n->n_props; i++) {
        m |= 1ull << i;
        if (n->required[i]) break;
    }
    return m;
}

static bool required_left(const node *n, int32_t last) {
    for (int i = last + 1; i < n->n_props; i++)
        if (n->required[i]) return true;
    return false;
}

static const char *lit_text(const frame *F, int i) {
    return F->kind == K_KEY ? F->n->keys[i] : F->n->lits[i];
}
static int lit_count(const frame *F) { return F->kind == K_KEY ? F->n->n_props : F->n->n_lits; }

/* A literal or key frame is complete when an alive text is exactly matched. */
static int lit_complete(const frame *F) {
    for (int i = 0; i < lit_count(F); i++)
        if ((F->alive >> i & 1) && (int32_t)strlen(lit_text(F, i)) == F->idx) return i;
    return -1;
}

static bool num_complete(const frame *F) {
    return F->st == M_ZERO || F->st == M_INT || F->st == M_FRAC || F->st == M_EXP;
}

/* A child frame finished: advance its parent. */
static void child_done(state *S) {
    if (S->depth == 0) return;
    frame *P = &S->f[S->depth - 1];
    if (P->kind == K_OBJ) P->st = P->st == O_KEYSTR ? O_COLON : O_AFTER;
    else if (P->kind == K_ARR) {
        P->idx++;
        P->st = A_AFTER;
    }
}

static void pop(state *S) {
    S->depth--;
    child_done(S);
}

static bool is_ws(unsigned char b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
static bool is_digit(unsigned char b) { return b >= '0' && b <= '9'; }
static bool is_hex(unsigned char b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

/* Whitespace between tokens: one space, or one newline followed by up to
 * two spaces per nesting level (pretty-printing with a 2-space indent).
 * Bounded so a model cannot fill its budget with it. ws counts the run:
 * 0 none, 1 a space, 2 + k a newline and k spaces. */
static bool take_ws(state *S, unsigned char b) {
    if (b == '\n' && S->ws == 0) {
        S->ws = 2;
        return true;
    }
    if (b != ' ') return false;
    if (S->ws == 0) {
        S->ws = 1;
        return true;
    }
    if (S->ws >= 2 && S->ws - 2 < 2 * S->depth && S->ws - 2 < MAX_WS) {
        S->ws++;
        return true;
    }
    return false;
}

static char *k_tfn[] = {"true", "false", "null"};
static node k_any_lit = {.type = N_LITERAL, .n_lits = 3, .lits = k_tfn, .max_items = -1, .max_len = -1};
static node k_any_obj = {.type = N_OBJECT, .any_keys = true, .max_items = -1, .max_len = -1};
static node k_any_arr = {.type = N_ARRAY, .items = &k_any, .max_items = -1, .max_len = -1};
static node k_any_str = {.type = N_STRING, .max_items = -1, .max_len = -1};
static node k_any_num = {.type = N_NUMBER, .max_items = -1, .max_len = -1};

/* Starts a value of node n with byte b (the frame is K_START on top). */
static bool start_value(state *S, frame *F, unsigned char b) {
    const node *n = F->n;
    ntype t = n->type;
    if (t == N_ANY) {
        if (b == '{') t = N_OBJECT;
        else if (b == '[') t = N_ARRAY;
        else if (b == '"') t = N_STRING;
        else if (b == '-' || is_digit(b)) t = N_NUMBER;
        else if (b == 't' || b == 'f' || b == 'n') {
            F->n = n = &k_any_lit;
            t = N_LITERAL;
        } else return false;
        /* the any-node's children are any too: a free-form node stands in */
        if (t != N_LITERAL)
            F->n = n = t == N_OBJECT ? &k_any_obj : t == N_ARRAY ? &k_any_arr : t == N_STRING ? &k_any_str : &k_any_num;
    }
    switch (t) {
    case N_OBJECT:
        if (b != '{') return false;
        F->kind = K_OBJ;
        F->st = O_OPEN;
        F->idx = -1;
        return true;
    case N_ARRAY:
        if (b != '[') return false;
        F->kind = K_ARR;
        F->st = A_OPEN;
        F->idx = 0;
        return true;
    case N_STRING:
        if (b != '"') return false;
        F->kind = K_STR;
        F->st = S_IN;
        F->idx = 0;
        return true;
    case N_NUMBER:
    case N_INTEGER:
        if (b != '-' && !is_digit(b)) return false;
        F->kind = K_NUM;
        F->st = b == '-' ? M_MINUS : b == '0' ? M_ZERO : M_INT;
        F->idx = 1;
        return true;
    case N_LITERAL:
        F->kind = K_LIT;
        F->alive = 0;
        for (int i = 0; i < n->n_lits; i++)
            if ((unsigned char)n->lits[i][0] == b) F->alive |= 1ull << i;
        F->idx = 1;
        return F->alive != 0;
    default:
        return false;
    }
    (void)S;
}

/* Feeds one byte; false when it does not continue a valid prefix (S is then garbage). */
static bool feed(state *S, unsigned char b) {
    for (;;) {
        if (S->depth == 0) return false; /* the value is complete */
        frame *F = &S->f[S->depth - 1];
        switch (F->kind) {
        case K_START:
            if (is_ws(b)) return S->depth > 1 && take_ws(S, b);
            S->ws = 0;
            return start_value(S, F, b);
        case K_OBJ: {
            const node *n = F->n;
            if (is_ws(b) && F->st != O_VAL && F->st != O_KEYSTR) return take_ws(S, b);
            S->ws = 0;
            switch (F->st) {
            case O_OPEN:
            case O_NEXT:
                if (b == '}' && F->st == O_OPEN && (n->any_keys || !required_left(n, F->idx))) {
                    pop(S);
                    return true;
                }
                if (b != '"') return false;
                if (n->any_keys) {
                    F->st = O_KEYSTR;
                    if (!push(S, NULL, K_STR)) return false;
                    S->f[S->depth - 1].st = S_IN;
                    S->f[S->depth - 1].idx = 0;
                    return true;
                }
                {
                    uint64_t c = key_candidates(n, F->idx);
                    if (!c) return false;
                    F->st = O_KEYSTR;
                    if (!push(S, n, K_KEY)) return false;
                    frame *K = &S->f[S->depth - 1];
                    K->alive = c;
                    K->idx = 1; /* every key text starts with the quote */
                    return true;
                }
            case O_COLON:
                if (b != ':') return false;
                F->st = O_VAL;
                {
                    const node *v = n->any_keys ? &k_any : n->props[F->idx];
                    return push(S, v, K_START);
                }
            case O_AFTER:
                if (b == ',') {
                    if (!n->any_keys && !key_candidates(n, F->idx)) return false;
                    F->st = O_NEXT;
                    return true;
                }
                if (b == '}' && (n->any_keys || !required_left(n, F->idx))) {
                    pop(S);
                    return true;
                }
                return false;
            default:
                return false;
            }
        }
        case K_KEY: {
            /* a schema object's key: match the candidate texts; the closing
             * quote makes exactly one complete */
            uint64_t next = 0;
            for (int i = 0; i < F->n->n_props; i++)
                if ((F->alive >> i & 1) && (unsigned char)F->n->keys[i][F->idx] == b) next |= 1ull << i;
            if (!next) return false;
            F->alive = next;
            F->idx++;
            int done = lit_complete(F);
            if (done >= 0) {
                S->depth--;
                frame *P = &S->f[S->depth - 1];
                P->idx = done;
                P->st = O_COLON;
            }
            return true;
        }
        case K_ARR: {
            const node *n = F->n;
            if (is_ws(b) && F->st != A_VAL) return take_ws(S, b);
            if (F->st == A_AFTER) {
                S->ws = 0;
                if (b == ',' && (n->max_items < 0 || F->idx < n->max_items)) {
                    F->st = A_NEXT;
                    return true;
                }
                if (b == ']' && F->idx >= n->min_items) {
                    pop(S);
                    return true;
                }
                return false;
            }
            if (F->st == A_OPEN && b == ']' && n->min_items == 0) {
                S->ws = 0;
                pop(S);
                return true;
            }
            if (F->st == A_OPEN && n->max_items == 0) return false;
            F->st = A_VAL;
            if (!push(S, n->items, K_START)) return false;
            continue; /* the item starts with b */
        }
        case K_STR: {
            const node *n = F->n;
            long maxl = n ? n->max_len : -1;
            if (F->need) {
                if (b < F->lo || b > F->hi) return false;
                F->need--;
                F->lo = 0x80, F->hi = 0xBF;
                return true;
            }
            switch (F->st) {
            case S_IN:
                if (b == '"') {
                    if (n && F->idx < n->min_len) return false;
                    pop(S);
                    return true;
                }
                if (b < 0x20) return false;
                if (maxl >= 0 && F->idx >= maxl) return false;
                F->idx++;
                if (b == '\\') F->st = S_ESC;
                else if (b >= 0x80) {
                    /* well-formed UTF-8 (Unicode table 3-7): the second byte's range depends on the first */
                    F->lo = 0x80, F->hi = 0xBF;
                    if (b >= 0xC2 && b <= 0xDF) F->need = 1;
                    else if (b >= 0xE0 && b <= 0xEF) {
                        F->need = 2;
                        if (b == 0xE0) F->lo = 0xA0;
                        if (b == 0xED) F->hi = 0x9F;
                    } else if (b >= 0xF0 && b <= 0xF4) {
                        F->need = 3;
                        if (b == 0xF0) F->lo = 0x90;
                        if (b == 0xF4) F->hi = 0x8F;
                    } else return false;
                }
                return true;
            case S_ESC:
                if (b == 'u') {
                    F->st = S_U1;
                    return true;
                }
                if (!strchr("\"\\/bfnrt", b) || !b) return false;
                F->st = S_IN;
                return true;
            default: /* S_U1..S_U4 */
                if (!is_hex(b)) return false;
                F->st = F->st == S_U4 ? S_IN : F->st + 1;
                return true;
            }
        }
        case K_NUM: {
            bool integer = F->n->type == N_INTEGER;
            bool room = F->idx < MAX_NUM;
            switch (F->st) {
            case M_MINUS:
                if (!is_digit(b)) return false;
                F->st = b == '0' ? M_ZERO : M_INT;
                F->idx++;
                return true;
            case M_DOT:
            case M_ESIGN:
                if (!is_digit(b)) return false;
                F->st = F->st == M_DOT ? M_FRAC : M_EXP;
                F->idx++;
                return true;
            case M_E:
                if (b == '+' || b == '-') F->st = M_ESIGN;
                else if (is_digit(b)) F->st = M_EXP;
                else return false;
                F->idx++;
                return true;
            default: /* M_ZERO, M_INT, M_FRAC, M_EXP: complete so far */
                if (is_digit(b) && F->st != M_ZERO && room) {
                    F->idx++;
                    return true;
                }
                if (b == '.' && !integer && room && (F->st == M_ZERO || F->st == M_INT)) {
                    F->st = M_DOT;
                    F->idx++;
                    return true;
                }
                if ((b == 'e' || b == 'E') && !integer && room && F->st != M_EXP) {
                    F->st = M_E;
                    F->idx++;
                    return true;
                }
                pop(S); /* the number ended before b */
                continue;
            }
        }
        case K_LIT: {
            uint64_t next = 0;
            for (int i = 0; i < F->n->n_lits; i++)
                if ((F->alive >> i & 1) && (unsigned char)F->n->lits[i][F->idx] == b && F->n->lits[i][F->idx])
                    next |= 1ull << i;
            if (next) {
                F->alive = next;
                F->idx++;
                return true;
            }
            if (lit_complete(F) < 0) return false;
            pop(S);
            continue;
        }
        default:
            return false;
        }
    }
}

static bool frame_can_complete(const frame *F) {
    if (F->kind == K_NUM) return num_complete(F);
    if (F->kind == K_LIT) return lit_complete(F) >= 0;
    return false;
}

static bool can_end(const state *S) { return S->depth == 0 || (S->depth == 1 && frame_can_complete(&S->f[0])); }

qw_json_matcher *qw_json_matcher_new(const qw_json_schema *s) {
    qw_json_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->s = s;
    push(&m->st, s->root, K_START);
    return m;
}

void qw_json_matcher_free(qw_json_matcher *m) { free(m); }

qw_json_matcher *qw_json_matcher_copy(const qw_json_matcher *m) {
    qw_json_matcher *c = malloc(sizeof *c);
    if (c) {
        c->s = m->s;
        copy_state(&c->st, &m->st);
    }
    return c;
}

bool qw_json_matcher_feed(qw_json_matcher *m, const char *bytes, size_t n) {
    state t;
    copy_state(&t, &m->st);
    for (size_t i = 0; i < n; i++)
        if (!feed(&t, (unsigned char)bytes[i])) return false;
    copy_state(&m->st, &t);
    return true;
}

bool qw_json_matcher_can_end(const qw_json_matcher *m) { return can_end(&m->st); }
bool qw_json_matcher_done(const qw_json_matcher *m) { return m->st.depth == 0; }

/* ---- vocabulary ---- */

struct qw_json_vocab {
    int32_t n;
    uint32_t *off;  /* [n + 1] into bytes */
    char *bytes;
    uint8_t *cls;   /* [n] T_TEXT, T_EOG, T_NEVER */
};

enum { T_TEXT, T_EOG, T_NEVER };

qw_json_vocab *qw_json_vocab_new(const qw_tokenizer *t) {
    int32_t n = qw_tokenizer_n_vocab(t);
    qw_json_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->cls = malloc((size_t)n);
    size_t cap = (size_t)n * 8 + 64, used = 0;
    v->bytes = malloc(cap);
    if (!v->off || !v->cls || !v->bytes) goto oom;
    char buf[512];
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = (uint32_t)used;
        int ty = qw_tokenizer_token_type(t, i);
        if (qw_tokenizer_is_eog(t, i)) {
            v->cls[i] = T_EOG;
            continue;
        }
        int k = qw_token_to_bytes(t, i, buf, sizeof buf);
        if (ty == QW_TOKEN_CONTROL || ty == QW_TOKEN_USER_DEFINED || ty == QW_TOKEN_UNUSED || k <= 0 ||
            k > (int)sizeof buf) {
            v->cls[i] = T_NEVER;
            continue;
        }
        if (used + (size_t)k > cap) {
            cap = cap * 2 + (size_t)k;
            char *nb = realloc(v->bytes, cap);
            if (!nb) goto oom;
            v->bytes = nb;
        }
        memcpy(v->bytes + used, buf, (size_t)k);
        used += (size_t)k;
        v->cls[i] = T_TEXT;
    }
    v->off[n] = (uint32_t)used;
    return v;
oom:
    qw_json_vocab_free(v);
    return NULL;
}

void qw_json_vocab_free(qw_json_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->cls);
    free(v);
}

/* ---- the sampler constraint ---- */

typedef struct jc {
    qw_sampler_constraint base;
    const qw_json_vocab *v;
    qw_json_schema *schema;
    state st;
    bool broken; /* a token outside the mask was accepted: stop constraining */
} jc;

static int32_t jc_mask(qw_sampler_constraint *c, uint8_t *allowed) {
    jc *j = (jc *)c;
    const qw_json_vocab *v = j->v;
    memset(allowed, 0, (size_t)v->n);
    if (j->broken) return 0;
    bool first[256];
    state t;
    for (int b = 0; b < 256; b++) {
        copy_state(&t, &j->st);
        first[b] = feed(&t, (unsigned char)b);
    }
    bool end = can_end(&j->st);
    int32_t n_ok = 0;
    for (int32_t i = 0; i < v->n; i++) {
        if (v->cls[i] != T_TEXT) {
            if (v->cls[i] == T_EOG && end) allowed[i] = 1, n_ok++;
            continue;
        }
        const unsigned char *p = (const unsigned char *)v->bytes + v->off[i];
        uint32_t len = v->off[i + 1] - v->off[i];
        if (!first[p[0]]) continue;
        copy_state(&t, &j->st);
        uint32_t k = 0;
        while (k < len && feed(&t, p[k])) k++;
        if (k == len) allowed[i] = 1, n_ok++;
    }
    return n_ok;
}

static void jc_accept(qw_sampler_constraint *c, int32_t id) {
    jc *j = (jc *)c;
    const qw_json_vocab *v = j->v;
    if (j->broken || id < 0 || id >= v->n) return;
    if (v->cls[id] == T_EOG) {
        if (!can_end(&j->st)) j->broken = true;
        return;
    }
    state t;
    copy_state(&t, &j->st);
    const unsigned char *p = (const unsigned char *)v->bytes + v->off[id];
    for (uint32_t k = 0; k < v->off[id + 1] - v->off[id]; k++)
        if (!feed(&t, p[k])) {
            j->broken = true;
            return;
        }
    if (v->cls[id] != T_TEXT) j->broken = true;
    else copy_state(&j->st, &t);
}

static void jc_free(qw_sampler_constraint *c) {
    jc *j = (jc *)c;
    qw_json_schema_free(j->schema);
    free(j);
}

qw_sampler_constraint *qw_json_constraint_new(const qw_json_vocab *v, qw_json_schema *s) {
    jc *j = calloc(1, sizeof *j);
    if (!j) {
        qw_json_schema_free(s);
        return NULL;
    }
    j->base = (qw_sampler_constraint){.mask = jc_mask, .accept = jc_accept, .free = jc_free};
    j->v = v;
    j->schema = s;
    push(&j->st, s->root, K_START);
    return &j->base;
}
