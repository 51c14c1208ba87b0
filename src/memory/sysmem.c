/* sysmem.c — how much memory this machine lets the process have: physical
 * RAM (sysconf) and the smallest cgroup memory limit on the path from this
 * process's cgroup up to the root (a parent's limit binds its children too;
 * v2 memory.max or v1 memory.limit_in_bytes; "max" or absurd values = none).
 * Probes only: what to do with the numbers (the expert tier) is decided above.
 */
#include "qwisp/sysmem.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t qw_ram_physical(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

/* Reads one number from a cgroup file; "max" or absurd values = no limit (0). */
static uint64_t read_limit(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    const bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0) return 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    return v >= (1ull << 60) ? 0 : (uint64_t)v;
}

/* Smallest limit of `file` in dir root+cg and its ancestors. */
static uint64_t walk_limits(const char *root, char *cg, const char *file) {
    uint64_t best = 0;
    for (;;) {
        char p[1024];
        snprintf(p, sizeof p, "%s%s/%s", root, strcmp(cg, "/") == 0 ? "" : cg, file);
        uint64_t v = read_limit(p);
        if (v && (!best || v < best)) best = v;
        char *slash = strrchr(cg, '/');
        if (!slash || cg[0] == '\0' || strcmp(cg, "/") == 0) break;
        if (slash == cg) strcpy(cg, "/");
        else *slash = '\0';
    }
    return best;
}

uint64_t qw_ram_cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024];
    uint64_t best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1;
        char cg[1024];
        snprintf(cg, sizeof cg, "%s", c2 + 1);
        uint64_t v = 0;
        if (strcmp(line, "0") == 0 && ctrls[0] == '\0') {
            v = walk_limits("/sys/fs/cgroup", cg, "memory.max");
        } else {
            /* v1: the controller list may be "memory" or e.g. "memory,foo" */
            char tmp[256];
            snprintf(tmp, sizeof tmp, ",%s,", ctrls);
            if (strstr(tmp, ",memory,")) v = walk_limits("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes");
        }
        if (v && (!best || v < best)) best = v;
    }
    fclose(f);
    return best;
}
