/* cmd_config.c — `qwisp config`: prints the knob table with each value and
 * its source (default, env, env alias). */
#include "commands.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"

#include <stdio.h>
#include <string.h>

int qw_cmd_config(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: qwisp config\nPrints every QWISP_* knob, its value and its source.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "qwisp config: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    qw_options_print(stdout);
    printf("%-28s %-12s %-16s %s\n", "(kernels)", qw_simd_level(), "detected", "SIMD level in use");
    return 0;
}
