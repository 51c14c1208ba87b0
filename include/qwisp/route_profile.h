/* route_profile.h — which experts a model uses most, read from a routing trace.
 *
 * QWISP_ROUTE_TRACE writes one line per layer per evaluated chunk: the layer,
 * then the experts the chunk chose.  Counting how often each layer's experts
 * appear gives a profile of the model's routing on the text that was run.
 * The CUDA streaming tier's QWISP_DEVICE_MISSES=host keeps a fixed set of
 * experts in VRAM; QWISP_DEVICE_FIXED=TRACE makes that set each layer's most
 * used experts instead of the first ones, so fewer picks go to the host.
 *
 *     int32_t *order = malloc(n_layer * n_expert * sizeof *order);
 *     qw_route_profile_order("trace.txt", n_layer, n_expert, order, &err);
 *     // order[il * n_expert + r] = layer il's r-th most used expert
 *
 * Ties keep the lower expert index first, so the order depends on the file
 * alone.
 */
#ifndef QWISP_ROUTE_PROFILE_H
#define QWISP_ROUTE_PROFILE_H

#include "qwisp/base.h"

#include <stdint.h>
#include <stdio.h>

/* Reads the trace at path (every line "LAYER EXPERT..." with 0 <= LAYER <
 * n_layer and 0 <= EXPERT < n_expert; empty lines skipped) and fills
 * order[n_layer * n_expert]: each layer's experts from the most to the least
 * often named.  0, or -1 and err naming the file and line (a missing or
 * empty file, a malformed line, a layer or expert out of range). */
int qw_route_profile_order(const char *path, int n_layer, int n_expert, int32_t *order, qw_error *err);

/* The same from an open stream (path only names it in messages). */
int qw_route_profile_read(FILE *f, const char *path, int n_layer, int n_expert, int32_t *order, qw_error *err);

#endif
