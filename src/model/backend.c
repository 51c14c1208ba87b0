/* backend.c — choosing the backend (QWISP_BACKEND) and loading the CUDA one.
 *
 * The CUDA backend is a shared object (build/libqwisp_cuda.so, src/cuda/,
 * built with the CUDA runtime linked statically) that is dlopen()ed only when
 * it is chosen, so the qwisp binary has no CUDA dependency: on a machine
 * without the object, the driver (libcuda.so.1) or a device, `auto` stays on
 * the CPU and `cuda` fails with one line naming which of the three is missing.
 * Before the object is loaded, libcuda.so.1 itself is looked for, so `auto`
 * on a CPU-only machine never maps the CUDA runtime.
 *
 * The counter rows of the device pool (QW_DEVICE_STATS, backend.h) are made
 * here, for `--json`, /metrics and the MEMDBG lines.
 */
#include "qwisp/backend.h"
#include "qwisp/host_experts.h"
#include "qwisp/ops.h" /* qw_cpu_count (the kernels only through ops.h) */
#include "qwisp/options.h"
#include "qwisp/pool.h"
#include "qwisp/route_profile.h"
#include "qwisp/stats.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int qw_backend_parse(const char *word) {
    if (!word || !strcmp(word, "auto")) return QW_BACKEND_AUTO;
    if (!strcmp(word, "cpu")) return QW_BACKEND_CPU;
    if (!strcmp(word, "cuda")) return QW_BACKEND_CUDA;
    return -1;
}

/* The object's candidate paths: QWISP_CUDA_LIB, else next to the executable,
 * else <exe>/../lib/qwisp/ (make install). */
static int lib_paths(char paths[3][PATH_MAX + 32]) {
    const char *set = qw_opt_str(QW_OPT_CUDA_LIB);
    if (set && *set) {
        snprintf(paths[0], sizeof paths[0], "%s", set);
        return 1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(paths[0], sizeof paths[0], "%s/libqwisp_cuda.so", exe);
    snprintf(paths[1], sizeof paths[1], "%s/../lib/qwisp/libqwisp_cuda.so", exe);
    return 2;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_active_lock = PTHREAD_MUTEX_INITIALIZER;
static const qw_model *g_active; /* the model most recently attached (stats) */
static const qw_backend_ops *g_ops;
static qw_error g_why;
static char g_device[256];

static void load_cuda(void) {
    /* the driver first: without it the object is useless, and not loading
     * it keeps a CPU-only machine free of the CUDA runtime */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        qw_fail(&g_why, "no NVIDIA driver (%s)", dlerror());
        return;
    }
    dlclose(drv);
    char paths[3][PATH_MAX + 32];
    const int np = lib_paths(paths);
    void *h = NULL;
    char tried[1024] = "";
    for (int i = 0; i < np && !h; i++) {
        h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            size_t at = strlen(tried);
            snprintf(tried + at, sizeof tried - at, "%s%s", at ? "; " : "", dlerror());
        }
    }
    if (!h) {
        qw_fail(&g_why, "the CUDA backend object is not there (%s; build it with `make` on a machine with nvcc, "
                        "or set QWISP_CUDA_LIB)", np ? tried : "no path to look in");
        return;
    }
    const qw_backend_ops *(*entry)(void) = (const qw_backend_ops *(*)(void))dlsym(h, QW_BACKEND_ENTRY);
    const qw_backend_ops *ops = entry ? entry() : NULL;
    if (!ops || ops->abi != QW_BACKEND_ABI) {
        qw_fail(&g_why, "the CUDA backend object has %s (want ABI %d): rebuild it with this qwisp",
                ops ? "another ABI" : "no " QW_BACKEND_ENTRY, QW_BACKEND_ABI);
        dlclose(h);
        return;
    }
    if (ops->probe(g_device, sizeof g_device, &g_why)) return; /* the object stays mapped: cheap */
    g_ops = ops;
}

const qw_backend_ops *qw_backend_cuda(qw_error *err) {
    pthread_once(&g_once, load_cuda);
    if (!g_ops && err) *err = g_why;
    return g_ops;
}

static int cfg_from_options(int64_t kv_positions, qw_backend_cfg *cfg, qw_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *vram = qw_opt_str(QW_OPT_DEVICE_VRAM);
    if (vram && qw_parse_gb("QWISP_DEVICE_VRAM", vram, &cfg->vram_limit, err)) return -1;
    cfg->expert_slots = qw_opt_int(QW_OPT_DEVICE_SLOTS);
    cfg->cache_limit = qw_pool_get_cache_limit();
    cfg->get_cache_limit = qw_pool_get_cache_limit;
    cfg->fit_exact = qw_pool_get_fit() == QW_POOL_FIT_EXACT;
    cfg->class_size = qw_pool_class_size;
    const char *kvt = qw_opt_str(QW_OPT_KV_TYPE);
    cfg->kv_f32 = kvt && !strcmp(kvt, "f32");
    cfg->kv_positions = kv_positions;
    const char *pin = qw_opt_str(QW_OPT_DEVICE_PIN);
    cfg->pin_host = !pin || !strcmp(pin, "auto") ? 1 : !strcmp(pin, "on") ? 2 : 0;
    const char *mma = qw_opt_str(QW_OPT_DEVICE_MMA);
    cfg->mma = !mma || !strcmp(mma, "auto") ? 1 : !strcmp(mma, "always") ? 2 : 0;
    cfg->chunk = (int32_t)qw_opt_int(QW_OPT_CHUNK);
    cfg->stage_bytes = (uint64_t)qw_opt_int(QW_OPT_DEVICE_STAGE_MB) << 20;
    cfg->pdl = (int)qw_opt_int(QW_OPT_DEVICE_PDL);
    cfg->lanes_group = qw_opt_is_set(QW_OPT_DEVICE_LANES_GROUP) ? (int)qw_opt_int(QW_OPT_DEVICE_LANES_GROUP)
                                                                : QW_LANES_GROUP_AUTO;
    cfg->host_experts = (int)qw_opt_int(QW_OPT_DEVICE_HOST_EXPERTS);
    const char *misses = qw_opt_str(QW_OPT_DEVICE_MISSES);
    cfg->host_misses = misses && !strcmp(misses, "host");
    cfg->fixed_order = NULL; /* qw_backend_attach reads QWISP_DEVICE_FIXED's profile */
    return 0;
}

int qw_backend_attach(qw_model *m, int64_t kv_positions, qw_error *err) {
    if (m->dev) return 0;
    const int kind = qw_backend_parse(qw_opt_str(QW_OPT_BACKEND));
    if (kind == QW_BACKEND_CPU) return 0;
    qw_error why = {{0}};
    const qw_backend_ops *ops = qw_backend_cuda(&why);
    if (!ops) {
        if (kind == QW_BACKEND_CUDA) return qw_fail(err, "QWISP_BACKEND=cuda: %s", why.msg);
        qw_log(QW_LOG_INFO, "backend: cpu (%s)", why.msg);
        return 0;
    }
    qw_backend_cfg cfg;
    if (cfg_from_options(kv_positions, &cfg, err)) return -1;
    const char *fixed = qw_opt_str(QW_OPT_DEVICE_FIXED);
    int32_t *order = NULL;
    if (fixed && *fixed && !cfg.host_misses) {
        qw_log(QW_LOG_WARN, "QWISP_DEVICE_FIXED=%s is ignored: it sets QWISP_DEVICE_MISSES=host's fixed experts", fixed);
    } else if (fixed && *fixed) {
        order = qw_xmalloc((size_t)m->hp.n_layer * (size_t)m->hp.n_expert * sizeof *order);
        if (qw_route_profile_order(fixed, m->hp.n_layer, m->hp.n_expert, order, err)) {
            char why_fixed[QW_ERROR_MAX];
            snprintf(why_fixed, sizeof why_fixed, "%s", err ? err->msg : "");
            free(order);
            return qw_fail(err, "QWISP_DEVICE_FIXED: %s", why_fixed);
        }
        cfg.fixed_order = order;
    }
    if (cfg.host_experts > 0 || cfg.host_misses) { /* its threads: QWISP_THREADS, else every CPU (the GPU's host is otherwise idle) */
        const int64_t nt = qw_opt_int(QW_OPT_THREADS);
        m->host_experts = qw_host_experts_new(m, nt > 0 ? (int)nt : qw_cpu_count());
        cfg.host_run = qw_host_experts_run;
        cfg.host = m->host_experts;
    }
    void *dm = ops->model_new(m, &cfg, &why);
    free(order); /* the fixed set is copied in at model_new */
    if (!dm) {
        qw_host_experts_free(m->host_experts);
        m->host_experts = NULL;
        if (kind == QW_BACKEND_CUDA) return qw_fail(err, "QWISP_BACKEND=cuda: %s", why.msg);
        qw_log(QW_LOG_WARN, "backend: cpu (the GPU cannot run this model: %s)", why.msg);
        return 0;
    }
    m->backend = ops;
    m->dev = dm;
    if (m->host_experts) { /* the resident tier (no expert slots) never calls the host: its threads go */
        qw_device_stats st;
        memset(&st, 0, sizeof st);
        ops->model_stats(dm, &st);
        if (!st.expert_slot_bytes) {
            qw_host_experts_free(m->host_experts);
            m->host_experts = NULL;
        }
    }
    pthread_mutex_lock(&g_active_lock);
    g_active = m;
    pthread_mutex_unlock(&g_active_lock);
    qw_log(QW_LOG_INFO, "backend: %s", ops->model_describe(dm));
    return 0;
}

void qw_backend_detach(qw_model *m) {
    if (!m->dev) return;
    pthread_mutex_lock(&g_active_lock);
    if (g_active == m) g_active = NULL;
    pthread_mutex_unlock(&g_active_lock);
    m->backend->model_free(m->dev);
    m->dev = NULL;
    m->backend = NULL;
    qw_host_experts_free(m->host_experts); /* after the device side, which calls it */
    m->host_experts = NULL;
}

bool qw_backend_active_stats(qw_device_stats *s) {
    pthread_mutex_lock(&g_active_lock);
    *s = qw_backend_stats(g_active);
    const bool on = g_active != NULL;
    pthread_mutex_unlock(&g_active_lock);
    return on;
}

void qw_backend_stats_line(FILE *f) {
    qw_device_stats s;
    if (qw_backend_active_stats(&s)) qw_stats_line(f, &qw_device_stat_group, &s, 0, -1);
}

qw_device_stats qw_backend_stats(const qw_model *m) {
    qw_device_stats s;
    memset(&s, 0, sizeof s);
    if (m && m->dev) m->backend->model_stats(m->dev, &s);
    return s;
}

#define ROW(...) QW_STAT_ROW(qw_device_stats, __VA_ARGS__)
static const qw_stat k_rows[] = {QW_DEVICE_STATS(ROW, QW_STAT_NONE)};
#undef ROW
const qw_stat_group qw_device_stat_group = {"device", "dev_", "device pool: ", k_rows,
                                            (int)(sizeof k_rows / sizeof *k_rows)};
