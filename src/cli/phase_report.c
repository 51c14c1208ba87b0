/* phase_report.c — the text and JSON forms of a forward-pass profile
 * (QWISP_PROFILE=1): which phases the time went to, largest first. */
#include "phase_report.h"

void qw_phase_report_print(FILE *f, const char *label, const qw_phase_times *pt) {
    if (pt->passes <= 0 || pt->total <= 0) return;
    int order[QW_PHASE_COUNT];
    double named = 0;
    for (int p = 0; p < QW_PHASE_COUNT; p++) {
        order[p] = p;
        named += pt->seconds[p];
    }
    for (int i = 1; i < QW_PHASE_COUNT; i++) /* insertion sort, largest first */
        for (int j = i; j > 0 && pt->seconds[order[j]] > pt->seconds[order[j - 1]]; j--) {
            const int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    fprintf(f, "profile %s: %.3f s in %lld passes of %lld tokens:", label, pt->total, (long long)pt->passes,
            (long long)pt->tokens);
    for (int i = 0; i < QW_PHASE_COUNT; i++) {
        const double share = 100.0 * pt->seconds[order[i]] / pt->total;
        if (share >= 0.05) fprintf(f, " %s %.1f%%", qw_phase_name((qw_phase)order[i]), share);
    }
    const double other = pt->total - named;
    fprintf(f, " other %.1f%%\n", 100.0 * (other > 0 ? other : 0) / pt->total);
}

void qw_phase_report_json(cJSON *parent, const char *name, const qw_phase_times *pt) {
    cJSON *o = cJSON_AddObjectToObject(parent, name);
    cJSON_AddNumberToObject(o, "total_s", pt->total);
    cJSON_AddNumberToObject(o, "passes", (double)pt->passes);
    cJSON_AddNumberToObject(o, "tokens", (double)pt->tokens);
    cJSON *s = cJSON_AddObjectToObject(o, "seconds");
    for (int p = 0; p < QW_PHASE_COUNT; p++)
        if (pt->seconds[p] > 0) cJSON_AddNumberToObject(s, qw_phase_name((qw_phase)p), pt->seconds[p]);
}
