/* cmd_simulate.c — `qwisp simulate NGB [--ram-gb X] [-- CMD ARGS…]`: emulate a
 * machine with N GB of RAM.
 *
 * With a command: a memory cgroup limited to N GB is created under this
 * process's own memory cgroup (v2: memory.max + memory.swap.max=0; v1:
 * memory.limit_in_bytes + memory.memsw.limit_in_bytes where swap accounting
 * exists), the child joins it before exec, and QWISP_DEVICE_RAM=N (or X from
 * --ram-gb) is exported so qwisp picks its tier for that RAM.  At exit the
 * summary goes to stderr (stdout stays the child's):
 *   qwisp simulate: limit=0.200 GB peak=0.153 GB (77%) oom_kill=0 failcnt=0 exit=0
 * peak is v1 memory.max_usage_in_bytes / v2 memory.peak (page cache included:
 * that is what the kernel charges), oom_kill the kernel's count, failcnt (v1)
 * or "max" events (v2) how often the limit made it reclaim (throttling).
 * The cgroup is removed afterwards; the exit status is the child's.
 *
 * Without a command: ballast.  Anonymous memory of (MemAvailable - N) is
 * mlock'ed (or, if mlock is refused, touched) so that only N GB stay
 * available to other shells' workloads, until ^C.
 */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/experts.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *k_usage =
    "usage: qwisp simulate NGB [--ram-gb X] [-- CMD ARGS...]\n"
    "  with CMD: run it in a memory cgroup limited to N GB (QWISP_DEVICE_RAM=N exported;\n"
    "            --ram-gb X exports X instead); print its peak usage and OOM kills at exit\n"
    "  without:  hold RAM ballast so only N GB stay available, until ^C\n"
    "  N and X in GB (decimal, e.g. 2 or 0.25)\n";

typedef struct {
    char dir[1024];
    bool v2;
} cgroup;

/* This process's memory cgroup directory: v2 first ("0::/path"), then v1. */
static int own_cgroup(char *v2dir, size_t n2, char *v1dir, size_t n1) {
    v2dir[0] = v1dir[0] = '\0';
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *path = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
        char ctl[300];
        snprintf(ctl, sizeof ctl, ",%s,", c1 + 1);
        if (strcmp(line, "0") == 0 && c1[1] == '\0') snprintf(v2dir, n2, "/sys/fs/cgroup%s", path);
        else if (strstr(ctl, ",memory,")) snprintf(v1dir, n1, "/sys/fs/cgroup/memory%s", path);
    }
    fclose(f);
    return 0;
}

static int write_file(const char *dir, const char *name, const char *val) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    int rc = fputs(val, f) < 0 ? -1 : 0;
    if (fclose(f) != 0) rc = -1;
    return rc;
}

/* Value of `key` in a "key value" file, or the first number if key is NULL; -1 if absent. */
static long long read_num(const char *dir, const char *name, const char *key) {
    char p[1200], line[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    long long v = -1;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (!key) {
            v = strtoll(line, NULL, 10);
            break;
        }
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            v = strtoll(line + kl + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static int make_cgroup(cgroup *cg, uint64_t limit) {
    char v2[1024], v1[1024];
    own_cgroup(v2, sizeof v2, v1, sizeof v1);
    char lim[32];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)limit);
    const char *tried[2] = {NULL, NULL};
    int errs[2] = {0, 0};
    char v2ctl[1100];
    snprintf(v2ctl, sizeof v2ctl, "%s/cgroup.controllers", v2);
    if (v2[0] && access(v2ctl, F_OK) == 0) {
        snprintf(cg->dir, sizeof cg->dir, "%s/qwisp-sim-%d", v2, (int)getpid());
        cg->v2 = true;
        tried[0] = v2;
        if (mkdir(cg->dir, 0755) == 0) {
            if (write_file(cg->dir, "memory.max", lim) == 0) {
                write_file(cg->dir, "memory.swap.max", "0");
                return 0;
            }
            errs[0] = errno;
            rmdir(cg->dir);
        } else {
            errs[0] = errno;
        }
    }
    if (v1[0]) {
        snprintf(cg->dir, sizeof cg->dir, "%s/qwisp-sim-%d", v1, (int)getpid());
        cg->v2 = false;
        tried[1] = v1;
        if (mkdir(cg->dir, 0755) == 0) {
            if (write_file(cg->dir, "memory.limit_in_bytes", lim) == 0) {
                write_file(cg->dir, "memory.memsw.limit_in_bytes", lim); /* absent without swap accounting */
                return 0;
            }
            errs[1] = errno;
            rmdir(cg->dir);
        } else {
            errs[1] = errno;
        }
    }
    fprintf(stderr, "qwisp simulate: cannot create a memory cgroup: ");
    if (!tried[0] && !tried[1]) fprintf(stderr, "no memory controller in /proc/self/cgroup");
    for (int i = 0; i < 2; i++)
        if (tried[i]) fprintf(stderr, "%s%s under %s: %s", i && tried[0] ? "; " : "", i ? "v1" : "v2", tried[i], strerror(errs[i]));
    fprintf(stderr, " (needs root and a writable cgroup v2 or v1 memory hierarchy; without a command, "
                    "qwisp simulate NGB holds ballast instead)\n");
    return -1;
}

static int run_in_cgroup(uint64_t limit, const char *dev_ram, char **cmd) {
    cgroup cg = {0};
    if (make_cgroup(&cg, limit)) return 1;
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "qwisp simulate: fork: %s\n", strerror(errno));
        rmdir(cg.dir);
        return 1;
    }
    if (pid == 0) {
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        if (write_file(cg.dir, "cgroup.procs", me) != 0) {
            fprintf(stderr, "qwisp simulate: cannot join %s: %s\n", cg.dir, strerror(errno));
            _exit(126);
        }
        setenv("QWISP_DEVICE_RAM", dev_ram, 1);
        execvp(cmd[0], cmd);
        fprintf(stderr, "qwisp simulate: cannot run '%s': %s\n", cmd[0], strerror(errno));
        _exit(127);
    }
    signal(SIGINT, SIG_IGN); /* ^C reaches the child; we stay to clean up */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    long long peak = read_num(cg.dir, cg.v2 ? "memory.peak" : "memory.max_usage_in_bytes", NULL);
    long long oom = cg.v2 ? read_num(cg.dir, "memory.events", "oom_kill")
                          : read_num(cg.dir, "memory.oom_control", "oom_kill");
    long long fail = cg.v2 ? read_num(cg.dir, "memory.events", "max") : read_num(cg.dir, "memory.failcnt", NULL);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char peaktxt[64] = "unknown";
    if (peak >= 0)
        snprintf(peaktxt, sizeof peaktxt, "%.3f GB (%.0f%%)", (double)peak / 1e9, 100.0 * (double)peak / (double)limit);
    fprintf(stderr, "qwisp simulate: limit=%.3f GB peak=%s oom_kill=%lld %s=%lld exit=%d%s\n", (double)limit / 1e9,
            peaktxt, oom, cg.v2 ? "max_events" : "failcnt", fail, code,
            WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? " (killed: SIGKILL, likely the OOM killer)" : "");
    for (int i = 0; i < 50 && rmdir(cg.dir) != 0 && errno == EBUSY; i++) usleep(20000);
    return code;
}

static volatile sig_atomic_t g_stop;
static void on_sig(int s) { g_stop = s; }

static int ballast(uint64_t keep) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long avail_kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &avail_kb) == 1) break;
    if (f) fclose(f);
    if (!avail_kb) {
        fprintf(stderr, "qwisp simulate: cannot read MemAvailable from /proc/meminfo\n");
        return 1;
    }
    const uint64_t avail = (uint64_t)avail_kb * 1024;
    if (avail <= keep) {
        fprintf(stderr, "qwisp simulate: only %.2f GB are available, already <= %.2f GB; nothing to hold\n",
                (double)avail / 1e9, (double)keep / 1e9);
        return 0;
    }
    const size_t n = (size_t)(avail - keep);
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "qwisp simulate: cannot map %.2f GB of ballast: %s\n", (double)n / 1e9, strerror(errno));
        return 1;
    }
    const bool locked = mlock(p, n) == 0;
    const int lock_errno = errno;
    if (!locked)
        for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    fprintf(stderr, "qwisp simulate: holding %.2f GB of ballast (%s) so %.2f GB stay available; ^C releases\n",
            (double)n / 1e9, locked ? "mlock'ed" : "touched; mlock refused, it may be swapped out", (double)keep / 1e9);
    if (!locked) fprintf(stderr, "qwisp simulate: mlock: %s (raise ulimit -l to pin it)\n", strerror(lock_errno));
    while (!g_stop) pause();
    munmap(p, n);
    fprintf(stderr, "qwisp simulate: ballast released\n");
    return 0;
}

int qw_cmd_simulate(int argc, char **argv) {
    const char *ngb = NULL, *ram = NULL;
    char **cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--") == 0) {
            cmd = argv + i + 1;
            break;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(k_usage, stdout);
            return 0;
        }
        int r = qw_cli_flag("simulate", argc, argv, &i, "--ram-gb", &v);
        if (r < 0) return 2;
        if (r > 0) {
            ram = v;
        } else if (!ngb && argv[i][0] != '-') {
            ngb = argv[i];
        } else {
            fprintf(stderr, "qwisp simulate: unexpected argument '%s'\n%s", argv[i], k_usage);
            return 2;
        }
    }
    if (!ngb) {
        fprintf(stderr, "qwisp simulate: missing NGB\n%s", k_usage);
        return 2;
    }
    qw_error err = {0};
    uint64_t limit, dev;
    if (qw_parse_gb("NGB", ngb, &limit, &err) || (ram && qw_parse_gb("--ram-gb", ram, &dev, &err))) {
        fprintf(stderr, "qwisp simulate: %s\n", err.msg);
        return 2;
    }
    if (cmd && !cmd[0]) {
        fprintf(stderr, "qwisp simulate: nothing after --\n%s", k_usage);
        return 2;
    }
    if (!cmd) return ballast(limit);
    char devtxt[64];
    snprintf(devtxt, sizeof devtxt, "%s", ram ? ram : ngb);
    return run_in_cgroup(limit, devtxt, cmd);
}
