/* cli_common.h — helpers shared by subcommands: flag value parsing with clear
 * errors, default model lookup, thread count, natural-text prompts, bounded
 * file reading, random seeds and printable token text. */
#ifndef QWISP_CLI_COMMON_H
#define QWISP_CLI_COMMON_H

#include "qwisp/sampler.h"
#include "qwisp/tokenizer.h"
#include "text/textout.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* If argv[*i] is `flag`, stores the next argument in *val, advances *i and
 * returns 1; returns -1 (after printing "qwisp CMD: FLAG needs a value") when
 * the value is missing; 0 if argv[*i] is not this flag. */
int qw_cli_flag(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **val);

/* In a flag loop with locals C (command name), argc, argv, i, v (value) and r
 * (result): true when argv[i] is `name`; then r < 0 means its value is missing
 * (already reported) and v holds it otherwise. */
#define QW_CLI_FLAG(name) ((r = qw_cli_flag(C, argc, argv, &i, name, &v)) != 0)

/* The sampling flags run and chat share (--temp, --top-k, --top-p, --min-p,
 * --seed, --repeat-penalty, --presence-penalty, --frequency-penalty,
 * --penalty-last-n) into *sp.  Returns 1 if argv[*i] was one (advancing *i),
 * 0 if not, -1 after printing an error. */
int qw_cli_sampler_flag(const char *cmd, int argc, char **argv, int *i, qw_sampler_params *sp);

/* Parse numbers; on error print "qwisp CMD: FLAG 'TEXT': reason" and return -1. */
int qw_cli_long(const char *cmd, const char *flag, const char *s, long min, long max, long *out);
int qw_cli_float(const char *cmd, const char *flag, const char *s, double min, double max, float *out);
int qw_cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);

/* -m given, else QWISP_MODEL, else models/default.gguf in the working
 * directory or next to the binary (<bin>/../models/, or <bin>/../share/qwisp/
 * for an installed binary).  Returns NULL (and prints why) if none exists. */
const char *qw_cli_model_path(const char *cmd, const char *flag_value);

/* Thread count: flag if > 0, else QWISP_THREADS if > 0, else all CPUs. */
int qw_cli_threads(long flag_value);

/* The kernels' tune.h values for a run of `threads` threads: the
 * calibration cache (unless QWISP_TUNE=off; QWISP_TUNE_FILE or the default
 * path) when it was measured with that many, then the knobs
 * QWISP_DECODE_ITEM_BYTES / _AHEAD_BYTES / QWISP_PREFILL_ROWS over it.  A
 * cache that cannot be used leaves the defaults and prints one "qwisp: …"
 * line on stderr; an absent one is silent.  Called once by main(). */
void qw_cli_tune_init(int threads);
/* The thread count a command line asks for (its -t / --threads N, checked
 * later by the command), else qw_cli_threads(0): what main() calibrates and
 * loads the cache for. */
int qw_cli_argv_threads(int argc, char **argv);
/* The cache path used (or "" when none could be formed) and a word on what
 * became of it: "loaded", "absent", "off", "unusable: <why>", "stale: <why>"
 * (another CPU, SIMD level, binary or thread count's). */
const char *qw_cli_tune_path(void);
const char *qw_cli_tune_state(void);
/* The thread count qw_cli_tune_init was given. */
int qw_cli_tune_threads(void);
/* QWISP_TUNE=auto with no cache file for this machine and thread count
 * ("absent", "stale"): measures the parameters once in a child process with
 * qw_cli_tune_init's thread count, caches them (replacing a stale file) and loads them
 * (tune_first_use.c); a one-line notice on stderr.  main() calls it for the
 * commands that run a model. */
void qw_cli_tune_first_use(void);

/* Exactly n tokens of natural English text (repeated as needed). */
int32_t *qw_cli_natural_prompt(const qw_tokenizer *tok, int32_t n);

/* Parses "1,2,3" into a malloc'd array; prints an error and returns NULL on junk. */
int32_t *qw_cli_parse_ids(const char *cmd, const char *s, size_t *n_out);

/* Reads a whole file (NUL-terminated); prints an error and returns NULL on
 * failure.  Devices, directories and sockets are refused (/dev/zero never
 * ends) and at most QW_CLI_MAX_FILE_BYTES are read (pipes are accepted). */
#define QW_CLI_MAX_FILE_BYTES ((size_t)64 << 20)
char *qw_cli_read_file(const char *cmd, const char *path, size_t *len);

/* A fresh 32-bit sampling seed (getrandom), for runs given no --seed. */
uint64_t qw_cli_random_seed(void);

/* Token id's text for people: as valid UTF-8 into *out (NUL-terminated; a
 * byte token that is part of a character becomes U+FFFD), or quoted with
 * control bytes escaped on f. */
void qw_cli_piece(const qw_tokenizer *tok, int32_t id, qw_strbuf *out);
void qw_cli_print_piece(FILE *f, const qw_tokenizer *tok, int32_t id);

#endif
