/* json_constraint.h — constrained decoding to JSON: a compiled subset of
 * JSON Schema, a byte-level matcher that says whether bytes keep the output a
 * valid prefix of the schema's language, and a sampler constraint
 * (sampler.h) that masks every token whose bytes would not.
 *
 * Supported schema keywords: type (object, array, string, number, integer,
 * boolean, null; one type, not a list), properties, required,
 * additionalProperties (a boolean), items, enum, const, minItems, maxItems,
 * minLength, maxLength; annotations (title, description, default, examples,
 * $schema, $id, $comment) are ignored.  Anything else is refused at compile
 * time with its path, so a request never gets output that only looks
 * constrained.
 *
 * The language generated is a subset of what the schema validates: object
 * keys come in the order `properties` lists them (optional ones may be left
 * out), no keys beyond `properties`, whitespace between tokens only as one space
 * or a newline plus an indent of up to two spaces per level,
 * numbers at most 24 characters.  Every complete output validates.
 *
 *     qw_json_schema *sc = qw_json_schema_compile(text, len, &err); // or qw_json_schema_any_object()
 *     qw_sampler_constraint *k = qw_json_constraint_new(vocab, sc); // takes sc
 *     params.constraint = k;   ... k->free(k);
 */
#ifndef QWISP_JSON_CONSTRAINT_H
#define QWISP_JSON_CONSTRAINT_H

#include "qwisp/sampler.h"
#include "qwisp/tokenizer.h"

typedef struct qw_json_schema qw_json_schema;

/* Any JSON object (response_format json_object). */
qw_json_schema *qw_json_schema_any_object(void);
/* Compiles schema text (a JSON Schema object).  NULL + err naming the path
 * and keyword of the first unsupported or malformed part. */
qw_json_schema *qw_json_schema_compile(const char *text, size_t len, qw_error *err);
void qw_json_schema_free(qw_json_schema *s);

/* Byte-level prefix matcher. */
typedef struct qw_json_matcher qw_json_matcher;
qw_json_matcher *qw_json_matcher_new(const qw_json_schema *s); /* s must outlive it */
void qw_json_matcher_free(qw_json_matcher *m);
/* A copy (to try bytes without committing them).  NULL on OOM. */
qw_json_matcher *qw_json_matcher_copy(const qw_json_matcher *m);
/* Feeds bytes; false (and m unchanged) when they do not keep the output a
 * valid prefix. */
bool qw_json_matcher_feed(qw_json_matcher *m, const char *bytes, size_t n);
/* True when the bytes so far are a complete value of the schema. */
bool qw_json_matcher_can_end(const qw_json_matcher *m);
/* True when complete and no byte may follow (only an end may). */
bool qw_json_matcher_done(const qw_json_matcher *m);

/* Every token's bytes, computed once per tokenizer (the server keeps one). */
typedef struct qw_json_vocab qw_json_vocab;
qw_json_vocab *qw_json_vocab_new(const qw_tokenizer *t);
void qw_json_vocab_free(qw_json_vocab *v);

/* A sampler constraint for schema s (taken: freed with the constraint).
 * Text tokens are allowed when their bytes keep the output a valid prefix;
 * end-of-generation tokens only once the value is complete, and then nothing
 * else, so generation ends there.  Special tokens (control, user-defined)
 * never.  NULL on OOM (s is freed). */
qw_sampler_constraint *qw_json_constraint_new(const qw_json_vocab *v, qw_json_schema *s);

#endif
