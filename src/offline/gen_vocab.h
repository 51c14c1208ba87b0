/* gen_vocab.h — private to src/offline: the vocabulary of a synthetic model
 * (gen_vocab.c builds it, gen_model.c writes it).
 */
#ifndef QWISP_GEN_VOCAB_H
#define QWISP_GEN_VOCAB_H

#include "qwisp/base.h"

#include <stddef.h>
#include <stdint.h>

/* The vocabulary in GGUF form: tokens in byte-level unicode, ggml types,
 * merges "a b", special ids, chat template.  All strings owned. */
typedef struct gen_vocab {
    char **tokens;
    int32_t *types;
    size_t n_tokens, cap_tokens;
    char **merges;
    size_t n_merges, cap_merges;
    int32_t bos, eos, pad;
    char *chat_template;
} gen_vocab;

void qw_gen_vocab_free(gen_vocab *v);
/* 256 byte tokens + merges learned from the built-in corpus + ChatML specials. */
void qw_gen_vocab_build_bytes(gen_vocab *v);
/* Fills v from a Hugging Face tokenizer directory via the tokenizer layer.
 * 0, or -1 + err (v then holds what was added: free it). */
int qw_gen_vocab_build_hf(gen_vocab *v, const char *dir, qw_error *err);

#endif
