/* cmd_config.c — `qwisp config`: prints the knob table with each value and
 * its source (default, env, env alias), then the kernels' tune.h parameters
 * in force with theirs (default / calibrated / knob) and the calibration
 * cache's path and state; `--markdown` prints the knob table itself as
 * Markdown, the generated part of docs/knobs.md. */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"
#include "qwisp/tune.h"

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
    for (int i = 0; i < QW_TUNE_COUNT; i++) {
        char name[40];
        snprintf(name, sizeof name, "(tune) %s", qw_tune_key_name((qw_tune_id)i));
        printf("%-28s %-12lld %-16s %s (default %lld)\n", name, (long long)qw_tune_effective((qw_tune_id)i),
               qw_tune_src_name(qw_tune_source((qw_tune_id)i)), qw_tune_help((qw_tune_id)i),
               (long long)qw_tune_default((qw_tune_id)i));
    }
    printf("%-28s %s: %s\n", "(tune cache)", qw_cli_tune_path()[0] ? qw_cli_tune_path() : "(none)", qw_cli_tune_state());
    printf("%-28s %s\n", "(tune machine)", qw_tune_machine_key());
    return 0;
}
