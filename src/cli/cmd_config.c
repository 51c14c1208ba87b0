/* cmd_config.c — `qwisp config`: prints the knob table with each value and
 * its source (default, env, env alias); `--markdown` prints the table itself
 * as Markdown, the generated part of docs/knobs.md. */
#include "commands.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"

#include <stdio.h>
#include <string.h>

int qw_cmd_config(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: qwisp config [--markdown]\nPrints every QWISP_* knob, its value and its source;\n"
               "--markdown prints the knob table (defaults, values, meaning) for docs/knobs.md.\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--markdown")) {
        qw_options_print_markdown(stdout);
        return 0;
    }
    if (argc > 1) { /* the first argument that is not the one flag taken */
        const char *bad = strcmp(argv[1], "--markdown") ? argv[1] : argv[2];
        fprintf(stderr, "qwisp config: unexpected argument '%s'\n", bad);
        return 2;
    }
    qw_options_print(stdout);
    printf("%-28s %-12s %-16s %s\n", "(kernels)", qw_simd_level(), "detected", "SIMD level in use");
    return 0;
}
