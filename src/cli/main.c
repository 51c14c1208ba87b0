/* main.c — the qwisp command line: a table of subcommands, each in its own
 * cmd_<name>.c.  Parses the knob table from the environment first so a bad
 * QWISP_* value is reported once, before any work.  `--version` prints the
 * release and the commit (QW_VERSION, QW_GIT_REV: set by the Makefile). */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/base.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"

#include <stdio.h>
#include <string.h>

#ifndef QW_VERSION
#define QW_VERSION "0.1.0"
#endif
#ifndef QW_GIT_REV
#define QW_GIT_REV "unknown"
#endif

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subcommand;

static const subcommand g_cmds[] = {
    {"run", qw_cmd_run, "generate text from a prompt"},
    {"logits", qw_cmd_logits, "teacher-forced next-token distributions (JSON)"},
    {"info", qw_cmd_info, "print a GGUF file's metadata and tensor table"},
    {"tokenize", qw_cmd_tokenize, "text to token ids and back"},
    {"gen-model", qw_cmd_gen_model, "write a synthetic qwen3moe or qwen35moe GGUF"},
    {"convert", qw_cmd_convert, "Hugging Face Qwen3-MoE / Qwen3.5-MoE checkpoint (safetensors) to GGUF"},
    {"config", qw_cmd_config, "print every knob, its value and where it came from"},
    {"serve", qw_cmd_serve, "OpenAI-compatible HTTP server (chat/completions, SSE, /metrics)"},
    {"chat", qw_cmd_chat, "chat with the model in the terminal (or one-shot from args/stdin)"},
    {"template", qw_cmd_template, "print the prompt a chat request renders to (chat template check)"},
    {"footprint", qw_cmd_footprint, "a process's memory footprint (what the OS cannot drop) vs RSS"},
    {"simulate", qw_cmd_simulate, "run a command as if on a machine with N GB of RAM (cgroup), or hold ballast"},
    {"ab", qw_cmd_ab, "paired A/B experiment with pre-registered kill criteria (docs/ab.md)"},
    {"tune", qw_cmd_tune, "measure this machine's kernel parameters once and cache them (see qwisp config)"},
    {"ab-worker", qw_cmd_ab_worker, "(started by ab) the speed trials, every arm inside one process"},
    {"bench", qw_cmd_bench, "prefill/decode tok/s (llama-bench style) and the bandwidth roofline"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: qwisp <command> [options]   (qwisp --version: the version)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].help);
    fprintf(f, "\n'qwisp <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        printf("qwisp %s (git %s, built with %s %s)\n", QW_VERSION, QW_GIT_REV,
#ifdef __clang__
               "clang",
#else
               "gcc",
#endif
               __VERSION__);
        return 0;
    }
    qw_error err = {0};
    if (qw_options_init(&err)) {
        fprintf(stderr, "qwisp: %s\n", err.msg);
        return 2;
    }
    const char *simd = qw_opt_str(QW_OPT_SIMD);
    if (simd && strcmp(simd, "auto") != 0) qw_simd_force(simd);
    qw_simd_amx_kquants(qw_opt_int(QW_OPT_AMX_KQUANT) != 0);
    qw_simd_amx_q4_0(qw_opt_int(QW_OPT_AMX_Q4_0) != 0);
    qw_cli_tune_init(qw_cli_argv_threads(argc, argv));
    /* calibration at first use, before anything is loaded or timed */
    static const char *const k_model_cmds[] = {"run", "chat", "serve", "bench", "ab", "simulate"};
    for (size_t i = 0; i < sizeof k_model_cmds / sizeof k_model_cmds[0]; i++)
        if (!strcmp(argv[1], k_model_cmds[i]) && !(argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))))
            qw_cli_tune_first_use();
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(argv[1], g_cmds[i].name)) return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "qwisp: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
