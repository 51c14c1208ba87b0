/* phase_report.h — prints a context's forward-pass time by phase
 * (QWISP_PROFILE=1, qw_ctx_phase_times) for qwisp bench and qwisp run. */
#ifndef QWISP_CLI_PHASE_REPORT_H
#define QWISP_CLI_PHASE_REPORT_H

#include "qwisp/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* One line: "profile LABEL: T s in P passes of N tokens: PHASE SHARE% ...",
 * the phases largest first (those under 0.05 % left out), then "other" for
 * the time no phase names.  Nothing when pt timed no pass. */
void qw_phase_report_print(FILE *f, const char *label, const qw_phase_times *pt);
/* parent[name] = {"total_s", "passes", "tokens", "seconds": {PHASE: s, ...}}. */
void qw_phase_report_json(cJSON *parent, const char *name, const qw_phase_times *pt);

#endif
