/* ab_svg.c — footprint over time, one polyline per trial coloured by arm,
 * written as plain SVG (no dependency): axes with ticks in seconds and MiB, a
 * legend with each arm's name and env.  Warm-up and failed trials are drawn
 * dashed so a crash is visible, not hidden.  Series are thinned to ≤ 600
 * points per trial (every peak sample is kept) to keep the file small.
 */
#include "qwisp/ab.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const g_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* A "nice" tick step (1, 2 or 5 × 10^k) giving about n ticks over span. */
static double nice_step(double span, int n) {
    if (!(span > 0)) return 1;
    double raw = span / n, p = pow(10, floor(log10(raw))), r = raw / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

int qw_ab_svg_write(const qw_ab_experiment *e, const char *path, qw_error *err) {
    qw_atomic_file w;
    FILE *f = qw_atomic_open(&w, path, err);
    if (!f) return -1;
    double tmax = 0, ymax = 0;
    for (int i = 0; i < e->n_trials; i++)
        for (int j = 0; j < e->trials[i].n_series; j++) {
            if (e->trials[i].t_s[j] > tmax) tmax = e->trials[i].t_s[j];
            if (e->trials[i].fp_mb[j] > ymax) ymax = e->trials[i].fp_mb[j];
        }
    if (tmax <= 0) tmax = 1;
    if (ymax <= 0) ymax = 1;
    double xs = nice_step(tmax, 8), ys = nice_step(ymax * 1.05, 6);
    tmax = ceil(tmax / xs) * xs;
    ymax = ceil(ymax * 1.05 / ys) * ys;
    const double W = 900, H = 480, L = 70, R = 20, T = 40, B = 50;
    int legend_h = 18 * e->n_arms + 10;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H + legend_h);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">footprint over time per trial "
               "(sampled from outside every trial's process)</text>\n", W / 2);
    double pw = W - L - R, ph = H - T - B;
#define PX(t) (L + (t) / tmax * pw)
#define PY(y) (T + ph - (y) / ymax * ph)
    for (double x = 0; x <= tmax + xs / 2; x += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"middle\">%g</text>\n", PX(x), T, PX(x), T + ph, PX(x), T + ph + 16, x);
    for (double y = 0; y <= ymax + ys / 2; y += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"end\">%g</text>\n", L, PY(y), L + pw, PY(y), L - 6, PY(y) + 4, y);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", L, T, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">seconds since the trial's fork</text>\n", L + pw / 2,
            T + ph + 36);
    fprintf(f, "<text transform=\"translate(18,%.0f) rotate(-90)\" text-anchor=\"middle\">footprint (MiB)</text>\n",
            T + ph / 2);
    for (int i = 0; i < e->n_trials; i++) {
        const qw_ab_trial *t = &e->trials[i];
        if (t->n_series == 0) continue;
        const char *col = g_colors[t->arm % (int)(sizeof g_colors / sizeof g_colors[0])];
        bool dashed = t->round < 0 || !t->ok;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.3\" stroke-opacity=\"0.8\"%s points=\"", col,
                dashed ? " stroke-dasharray=\"4,3\"" : "");
        int step = t->n_series > 600 ? (t->n_series + 599) / 600 : 1;
        for (int j = 0; j < t->n_series; j += step) {
            int k = j; /* keep the largest sample of each thinned group */
            for (int q = j; q < j + step && q < t->n_series; q++)
                if (t->fp_mb[q] > t->fp_mb[k]) k = q;
            fprintf(f, "%.1f,%.1f ", PX(t->t_s[k]), PY(t->fp_mb[k]));
        }
        fprintf(f, "\"><title>trial %d, arm %s, round %d%s</title></polyline>\n", i, e->arms[t->arm].name, t->round,
                t->ok ? "" : " (failed)");
    }
    for (int a = 0; a < e->n_arms; a++) {
        double y = H + 4 + 18 * a;
        const char *col = g_colors[a % (int)(sizeof g_colors / sizeof g_colors[0])];
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"/>"
                   "<text x=\"%.0f\" y=\"%.0f\">", L, y, L + 30, y, col, L + 38, y + 4);
        xml_text(f, e->arms[a].name);
        fputs(": ", f);
        xml_text(f, e->arms[a].spec);
        if (qw_ab_failed(e, a)) fputs(" (FAILED trials dashed)", f);
        fputs("</text>\n", f);
    }
#undef PX
#undef PY
    fputs("</svg>\n", f);
    return qw_atomic_commit(&w, err);
}
