/* commands.h — the subcommand table's entry points.  Each subcommand lives in
 * its own file src/cli/cmd_<name>.c, parses its own flags, prints one clear
 * line on error and returns the process exit code (0 ok, 1 runtime error,
 * 2 usage error). */
#ifndef QWISP_CLI_COMMANDS_H
#define QWISP_CLI_COMMANDS_H

#include <stddef.h>

int qw_cmd_run(int argc, char **argv);       /* generate text */
int qw_cmd_logits(int argc, char **argv);    /* teacher-forced logits (parity tests) */
int qw_cmd_info(int argc, char **argv);      /* metadata + tensor table */
int qw_cmd_gen_model(int argc, char **argv); /* synthetic qwen3moe GGUF */
int qw_cmd_tokenize(int argc, char **argv);  /* text -> ids / ids -> text */
int qw_cmd_config(int argc, char **argv);    /* every knob, its value and source */
int qw_cmd_serve(int argc, char **argv);     /* OpenAI-compatible HTTP server */
int qw_cmd_chat(int argc, char **argv);      /* terminal chat, interactive or one-shot */
int qw_cmd_template(int argc, char **argv);  /* the prompt a chat request renders to */
int qw_cmd_footprint(int argc, char **argv); /* footprint PID [--watch MS] */
int qw_cmd_simulate(int argc, char **argv);  /* simulate NGB [--ram-gb X] [-- CMD...] */
int qw_cmd_bench(int argc, char **argv);     /* pp/tg tok/s + bandwidth roofline */
int qw_cmd_tune(int argc, char **argv);      /* kernel parameters measured and cached */
int qw_cmd_ab(int argc, char **argv);        /* paired A/B with kill criteria (docs/ab.md) */
int qw_cmd_ab_worker(int argc, char **argv); /* ab's in-process speed trials (cmd_ab_worker.c) */
/* 1 when an in-process arm may switch this knob (the pool's policy only). */
int qw_ab_worker_switchable(const char *name, size_t len);

int qw_cmd_convert(int argc, char **argv);   /* Hugging Face checkpoint -> GGUF */
#endif
