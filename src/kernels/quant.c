/* quant.c — the type table and the run-time SIMD dispatcher.
 *
 * Owns: the list of element types qwisp computes with (names, block sizes,
 * row sizes, the activation type each weight type pairs with), CPU feature
 * detection, and the active kernel table that every public qw_* kernel entry
 * point goes through.
 *
 * Dispatch: one kernel table per level (quant_impl.h), indexed by an enum;
 * the first call detects the CPU once (__builtin_cpu_supports, which
 * also checks that the OS saves the AVX/AVX-512 register state) and picks the
 * best level: "avx512-amx" needs all of avx512 (with bf16 and vbmi) plus
 * AMX-TILE/AMX-INT8, the OS's tile state and the kernel's permission
 * (qw_amx_usable); "avx512" needs avx512f+bw+vl+dq+vnni (its bf16 dot additionally
 * needs avx512bf16 and its Q4_0 kernels avx512vbmi, else the AVX2 ones are
 * patched in: the "avx512-nobf16" / "avx512-novbmi" tables), "avx2" needs
 * avx2+fma+f16c, "scalar" always works.  qw_simd_force can only lower the
 * level — and can patch a table on a CPU that would not need it, so the
 * tables of smaller CPUs run here too; tests use it to run every level
 * against the reference.
 *
 * Invariant: the active table is a complete table (no NULL entries) valid for
 * this CPU.  Switching levels is not synchronized with kernels running on
 * other threads: call qw_simd_force before starting work (options parsing,
 * test setup), never during it.
 */
#include <string.h>
#include <strings.h>

#include "kernels/quant_impl.h"
#include "kernels/kquant_impl.h"

#include <cpuid.h>

/* ---- type table -------------------------------------------------------- */

typedef struct {
    uint32_t type;
    const char *name;
    size_t block_elems;
    size_t block_bytes;
    qw_type dot_type;
} type_info;

static const type_info k_types[] = {
    {QW_TYPE_F32, "f32", 1, 4, QW_TYPE_F32},
    {QW_TYPE_F16, "f16", 1, 2, QW_TYPE_F16},
    {QW_TYPE_Q4_0, "q4_0", QW_QK4_0, sizeof(qw_block_q4_0), QW_TYPE_Q8_0},
    {QW_TYPE_Q8_0, "q8_0", QW_QK8_0, sizeof(qw_block_q8_0), QW_TYPE_Q8_0},
    {QW_TYPE_Q2_K, "q2_K", QW_QK_K, sizeof(qw_block_q2_K), QW_TYPE_Q8_K},
    {QW_TYPE_Q3_K, "q3_K", QW_QK_K, sizeof(qw_block_q3_K), QW_TYPE_Q8_K},
    {QW_TYPE_Q4_K, "q4_K", QW_QK_K, sizeof(qw_block_q4_K), QW_TYPE_Q8_K},
    {QW_TYPE_Q5_K, "q5_K", QW_QK_K, sizeof(qw_block_q5_K), QW_TYPE_Q8_K},
    {QW_TYPE_Q6_K, "q6_K", QW_QK_K, sizeof(qw_block_q6_K), QW_TYPE_Q8_K},
    {QW_TYPE_Q8_K, "q8_K", QW_QK_K, sizeof(qw_block_q8_K), QW_TYPE_Q8_K},
    {QW_TYPE_BF16, "bf16", 1, 2, QW_TYPE_BF16},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static const type_info *find_type(uint32_t type) {
    for (size_t i = 0; i < N_TYPES; i++)
        if (k_types[i].type == type) return &k_types[i];
    return NULL;
}

bool qw_type_supported(uint32_t type) { return find_type(type) != NULL; }

const char *qw_type_name(uint32_t type) {
    const type_info *t = find_type(type);
    return t ? t->name : "unknown";
}

int qw_type_from_name(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < N_TYPES; i++)
        if (strcasecmp(name, k_types[i].name) == 0) return (int)k_types[i].type;
    return -1;
}

size_t qw_type_block_elems(uint32_t type) {
    const type_info *t = find_type(type);
    return t ? t->block_elems : 0;
}

size_t qw_type_block_bytes(uint32_t type) {
    const type_info *t = find_type(type);
    return t ? t->block_bytes : 0;
}

size_t qw_row_bytes(uint32_t type, int64_t n) {
    const type_info *t = find_type(type);
    if (!t || n < 0) return 0;
    return (size_t)n / t->block_elems * t->block_bytes;
}

qw_type qw_vec_dot_type(qw_type type) {
    const type_info *t = find_type((uint32_t)type);
    return t ? t->dot_type : type;
}

/* ---- CPU detection and the active table -------------------------------- */

/* The levels, best first, in qw_simd_levels' order: one kernel table each.
 * "avx512-amx" is the full AVX-512 table with AMX-INT8 prefill tiles and the
 * Q8_0 dots in the reference's order (quant_impl.h; Q4_0 too with
 * qw_simd_amx_q4_0(true), the default); it needs every
 * AVX-512 feature below plus qw_amx_usable.  The four AVX-512 ones differ by the features a CPU may lack (bits
 * MISS_BF16 / MISS_VBMI = the enum's offset from QW_LEVEL_AVX512), whose
 * kernels come from the AVX2 table. */
typedef enum {
    QW_LEVEL_AMX = 0,
    QW_LEVEL_AVX512 = 1,
    QW_LEVEL_AVX512_NOBF16 = 2,
    QW_LEVEL_AVX512_NOVBMI = 3,
    QW_LEVEL_AVX512_NOVBMI_NOBF16 = 4,
    QW_LEVEL_AVX2 = 5,
    QW_LEVEL_SCALAR = 6,
    QW_N_LEVELS
} qw_level;
enum { MISS_BF16 = 1, MISS_VBMI = 2 };

const char *const qw_simd_levels[] = {"avx512-amx", "avx512", "avx512-nobf16", "avx512-novbmi", "avx512-novbmi-nobf16",
                                      "avx2", "scalar", NULL};

static qw_kernel_table g_tables[QW_N_LEVELS]; /* filled once by detect_cpu */
static qw_level g_cpu_best = QW_LEVEL_SCALAR;  /* best level this CPU runs */
static bool g_detected = false;
static const qw_kernel_table *g_active = NULL;

/* F16C is CPUID leaf 1, ECX bit 29; read directly because clang 14's
 * __builtin_cpu_supports does not know the name. */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 29) & 1u;
}

/* The AVX-512 table with the kernels named by `missing` taken from AVX2. */
static void build_patched(qw_kernel_table *t, int missing) {
    *t = qw_kernels_avx512;
    t->name = qw_simd_levels[QW_LEVEL_AVX512 + missing];
    if (missing & MISS_BF16) t->dot_bf16 = qw_kernels_avx2.dot_bf16;
    if (missing & MISS_VBMI) { /* Q4_0 dot and tiles together: the tiles give the dot's bits */
        t->dot_q4_0 = qw_kernels_avx2.dot_q4_0;
        t->gemm_q4_0 = qw_kernels_avx2.gemm_q4_0;
        t->gemv_q4_0 = qw_kernels_avx2.gemv_q4_0;
    }
}

/* The AMX level's K-quant parts: by default (qw_simd_amx_kquants(true)) the
 * AVX-512 ones with Q4_K, Q5_K and Q6_K's tiles on AMX, Q4_K and Q6_K then in
 * the reference's order throughout — dot, decode row loop and tiles
 * (amx_kquant_avx512.c, amx_q6k_avx512.c; Q5_K's AVX-512 dot already keeps
 * that order); with qw_simd_amx_kquants(false) Q4_K and Q6_K keep the AVX-512
 * level's kernels.  On the device host's Intel Xeon the AMX tiles gave those
 * two +20–26 % prefill, and since the reference-order row loops stream their
 * terms (refrows_avx512.h) decode is even with the AVX-512 loops
 * (bench/RESULTS.md, 2026-12-05 session 11). */
static qw_kq_dots g_kq_amx, g_kq_amx_all;

/* The AMX level: the AVX-512 table, Q8_0 in the reference's order with AMX tiles, the K-quants' as above. */
static void build_amx(qw_kernel_table *t) {
    g_kq_amx = qw_kq_dots_avx512;
    g_kq_amx.gemm_q5_K = qw_amx_q5_K.gemm;
    g_kq_amx.gemm_wide_q5_K = qw_amx_q5_K.gemm_wide;
    g_kq_amx.gemm_n_q5_K = qw_amx_q5_K.gemm_n;
    /* each type's dot, row loop and tiles together: the tiles give the dot's bits */
    g_kq_amx_all = g_kq_amx;
    g_kq_amx_all.q4_K = qw_amx_q4_K.dot;
    g_kq_amx_all.gemv_q4_K = qw_amx_q4_K.gemv;
    g_kq_amx_all.gemm_q4_K = qw_amx_q4_K.gemm;
    g_kq_amx_all.gemm_wide_q4_K = qw_amx_q4_K.gemm_wide;
    g_kq_amx_all.gemm_n_q4_K = qw_amx_q4_K.gemm_n;
    g_kq_amx_all.q6_K = qw_amx_q6_K.dot;
    g_kq_amx_all.gemv_q6_K = qw_amx_q6_K.gemv;
    g_kq_amx_all.gemm_q6_K = qw_amx_q6_K.gemm;
    g_kq_amx_all.gemm_wide_q6_K = qw_amx_q6_K.gemm_wide;
    g_kq_amx_all.gemm_n_q6_K = qw_amx_q6_K.gemm_n;
    *t = qw_kernels_avx512;
    t->name = qw_simd_levels[QW_LEVEL_AMX];
    t->dot_q8_0 = qw_blockorder_avx512.dot_q8_0;
    t->gemv_q8_0 = qw_blockorder_avx512.gemv_q8_0;
    t->gemm_q8_0 = qw_amx_gemm_q8_0;
    t->gemm_wide_q8_0 = qw_amx_gemm_wide_q8_0;
    t->gemm_n_q8_0 = qw_amx_gemm_n_q8_0;
    t->wide_toks_q8 = QW_GEMM_WIDE_TOKS;
    t->kq = &g_kq_amx_all;
    /* Q4_0: AMX too unless qw_simd_amx_q4_0(false) (set in detect_cpu) */
}

/* The AMX level's Q4_0: on = the reference order with AMX tiles (dot, row
 * loop and tiles together: the tiles give the dot's bits); off = the AVX-512
 * level's kernels.  On the device host's Intel Xeon (bench/RESULTS.md,
 * 2026-12-06 session 17) the AMX Q4_0 tile widened its 16 rows' nibbles on
 * every call of 16 tokens, so prefill was 12-30 % slower than AVX-512's at 2
 * threads, and the reference-order row loop (16 rows a zmm then) streamed 6.6
 * GB/s from DRAM on a core where AVX-512's streams 11.7.  Both have changed
 * since (a strip widened once a call for up to 64 tokens; one stream a row,
 * scales without a gather), and on the Xeon on 2026-12-07 the knob gave +15 %
 * prefill for -8 % decode (the reference-order Q4_0 loop still the slower
 * from cache there).  Since the row loops read four far-apart rows (session
 * 28), the same Xeon's A3B-width Q4_0 ran +18 % prefill with decode level or
 * ahead (session 29), so on is the default now. */
static void set_amx_q4_0(qw_kernel_table *t, bool on) {
    __atomic_store_n(&t->dot_q4_0, on ? qw_blockorder_avx512.dot_q4_0 : qw_kernels_avx512.dot_q4_0, __ATOMIC_RELEASE);
    __atomic_store_n(&t->gemv_q4_0, on ? qw_blockorder_avx512.gemv_q4_0 : qw_kernels_avx512.gemv_q4_0, __ATOMIC_RELEASE);
    __atomic_store_n(&t->gemm_q4_0, on ? qw_amx_gemm_q4_0 : qw_kernels_avx512.gemm_q4_0, __ATOMIC_RELEASE);
    __atomic_store_n(&t->gemm_wide_q4_0, on ? qw_amx_gemm_wide_q4_0 : NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&t->gemm_n_q4_0, on ? qw_amx_gemm_n_q4_0 : NULL, __ATOMIC_RELEASE);
}

static void detect_cpu(void) {
    __builtin_cpu_init();
    /* Built before g_active is published, so readers never see a half-copied
     * table; racing first calls write the same bytes. */
    for (int m = 0; m <= (MISS_BF16 | MISS_VBMI); m++) build_patched(&g_tables[QW_LEVEL_AVX512 + m], m);
    build_amx(&g_tables[QW_LEVEL_AMX]);
    set_amx_q4_0(&g_tables[QW_LEVEL_AMX], true);
    g_tables[QW_LEVEL_AVX2] = qw_kernels_avx2;
    g_tables[QW_LEVEL_SCALAR] = qw_kernels_ref;
    qw_level best = QW_LEVEL_SCALAR;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) best = QW_LEVEL_AVX2;
    if (best == QW_LEVEL_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni")) {
        int missing = 0;
        if (!__builtin_cpu_supports("avx512bf16")) missing |= MISS_BF16;
        if (!__builtin_cpu_supports("avx512vbmi")) missing |= MISS_VBMI;
        best = (qw_level)(QW_LEVEL_AVX512 + missing);
        if (missing == 0 && qw_amx_usable()) best = QW_LEVEL_AMX;
    }
    g_cpu_best = best;
    __atomic_store_n(&g_detected, true, __ATOMIC_RELEASE);
}

/* The level this CPU runs for a requested one: the request lowered to the
 * CPU's best, an AVX-512 request keeping the CPU's missing features. */
static qw_level runnable(qw_level want) {
    if (want == QW_LEVEL_AMX) return g_cpu_best == QW_LEVEL_AMX ? QW_LEVEL_AMX : runnable(QW_LEVEL_AVX512);
    const bool want512 = want <= QW_LEVEL_AVX512_NOVBMI_NOBF16, cpu512 = g_cpu_best <= QW_LEVEL_AVX512_NOVBMI_NOBF16;
    const int cpu_missing = g_cpu_best == QW_LEVEL_AMX ? 0 : (int)g_cpu_best - QW_LEVEL_AVX512;
    if (want512 && cpu512) return (qw_level)(QW_LEVEL_AVX512 + ((want - QW_LEVEL_AVX512) | cpu_missing));
    return want > g_cpu_best ? want : g_cpu_best; /* a larger enum value is a lower level */
}

const qw_kernel_table *qw_kernels_active(void) {
    const qw_kernel_table *t = __atomic_load_n(&g_active, __ATOMIC_ACQUIRE);
    if (__builtin_expect(t != NULL, 1)) return t;
    /* Racing first calls each detect the same answer; the store is idempotent. */
    if (!__atomic_load_n(&g_detected, __ATOMIC_ACQUIRE)) detect_cpu();
    t = &g_tables[g_cpu_best];
    __atomic_store_n(&g_active, t, __ATOMIC_RELEASE);
    return t;
}

static inline const qw_kernel_table *active(void) { return qw_kernels_active(); }

const char *qw_simd_level(void) { return active()->name; }

qw_isa qw_simd_isa(void) { return active()->isa; }

int qw_simd_force(const char *level) {
    if (!level) return -1;
    for (int i = 0; i < QW_N_LEVELS; i++) {
        if (strcasecmp(level, qw_simd_levels[i]) != 0) continue;
        (void)active(); /* make sure the CPU has been detected */
        __atomic_store_n(&g_active, &g_tables[runnable((qw_level)i)], __ATOMIC_RELEASE);
        return 0;
    }
    return -1;
}

void qw_simd_amx_kquants(bool on) {
    (void)active(); /* make sure the tables have been built */
    __atomic_store_n(&g_tables[QW_LEVEL_AMX].kq, on ? &g_kq_amx_all : &g_kq_amx, __ATOMIC_RELEASE);
}

void qw_simd_amx_q4_0(bool on) {
    (void)active();
    set_amx_q4_0(&g_tables[QW_LEVEL_AMX], on);
}

/* ---- public entry points ----------------------------------------------- */

static qw_vec_dot_fn dot_of(const qw_kernel_table *t, qw_type type) {
    switch (type) {
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K:
    case QW_TYPE_Q8_K: return qw_kq_dot_pick(t->kq, type);
    case QW_TYPE_F32: return t->dot_f32;
    case QW_TYPE_F16: return t->dot_f16;
    case QW_TYPE_BF16: return t->dot_bf16;
    case QW_TYPE_Q8_0: return t->dot_q8_0;
    case QW_TYPE_Q4_0: return t->dot_q4_0;
    }
    return NULL;
}

qw_vec_dot_fn qw_vec_dot_get(qw_type type) { return dot_of(active(), type); }

qw_gemm_fn qw_gemm_get(qw_type type) {
    const qw_kernel_table *t = active();
    if (type == QW_TYPE_Q8_0) return t->gemm_q8_0;
    if (type == QW_TYPE_Q4_0) return t->gemm_q4_0;
    /* the level's own tile, from the same file as its dot, so bits agree */
    if (type == QW_TYPE_Q4_K) return t->kq->gemm_q4_K;
    if (type == QW_TYPE_Q2_K) return t->kq->gemm_q2_K;
    if (type == QW_TYPE_Q3_K) return t->kq->gemm_q3_K;
    if (type == QW_TYPE_Q5_K) return t->kq->gemm_q5_K;
    if (type == QW_TYPE_Q6_K) return t->kq->gemm_q6_K;
    return NULL;
}

qw_gemm_fn qw_gemm_wide_get(qw_type type) {
    const qw_kernel_table *t = active();
    if (type == QW_TYPE_Q8_0) return t->gemm_wide_q8_0;
    if (type == QW_TYPE_Q4_0) return t->gemm_wide_q4_0;
    if (type == QW_TYPE_Q4_K) return t->kq->gemm_wide_q4_K;
    if (type == QW_TYPE_Q2_K) return t->kq->gemm_wide_q2_K;
    if (type == QW_TYPE_Q3_K) return t->kq->gemm_wide_q3_K;
    if (type == QW_TYPE_Q5_K) return t->kq->gemm_wide_q5_K;
    if (type == QW_TYPE_Q6_K) return t->kq->gemm_wide_q6_K;
    return NULL;
}

qw_gemm_n_fn qw_gemm_n_get(qw_type type) {
    const qw_kernel_table *t = active();
    if (type == QW_TYPE_Q8_0) return t->gemm_n_q8_0;
    if (type == QW_TYPE_Q4_0) return t->gemm_n_q4_0;
    const qw_kq_dots *kq = t->kq;
    if (type == QW_TYPE_Q4_K) return kq->gemm_n_q4_K;
    if (type == QW_TYPE_Q5_K) return kq->gemm_n_q5_K;
    if (type == QW_TYPE_Q6_K) return kq->gemm_n_q6_K;
    return NULL;
}

int qw_gemm_wide_toks(qw_type type) {
    switch (type) {
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K:
        return qw_gemm_n_get(type) ? QW_GEMM_WIDE_TOKS : QW_KQ_WIDE_TOKS; /* on AMX: 16 */
    case QW_TYPE_Q8_0: case QW_TYPE_Q4_0: return active()->wide_toks_q8 ? active()->wide_toks_q8 : QW_GEMM_WIDE_TOKS;
    default: return QW_GEMM_WIDE_TOKS;
    }
}

qw_gemm_fn qw_gemv_get(qw_type type) {
    const qw_kernel_table *t = active();
    /* the K-quant loops read the rows in the dots' order, one after
     * another: they only save work, so they are not calibrated */
    if (type == QW_TYPE_Q4_K) return t->kq->gemv_q4_K;
    if (type == QW_TYPE_Q6_K) return t->kq->gemv_q6_K;
    if (type == QW_TYPE_Q5_K) return t->kq->gemv_q5_K;
    /* calibrated: on some cores (a Zen 4 measured 2.5x) the row dots stream
     * DRAM faster than the multi-row loop; both give the dot's bits */
    if (!qw_tune_get(QW_TUNE_DECODE_GEMV)) return NULL;
    if (type == QW_TYPE_Q8_0) return t->gemv_q8_0;
    if (type == QW_TYPE_Q4_0) return t->gemv_q4_0;
    return NULL;
}

void qw_axpy_f16(float *y, float a, const uint16_t *x, int64_t n) { active()->axpy_f16(y, a, x, n); }

void qw_vec_dot(qw_type type, int64_t n, float *s, const void *w_row, const void *x) {
    qw_vec_dot_fn f = dot_of(active(), type);
    if (!f) {
        *s = 0.0f;
        return;
    }
    f(n, s, w_row, x);
}

void qw_vec_dot_ref(qw_type type, int64_t n, float *s, const void *w_row, const void *x) {
    qw_vec_dot_fn f = dot_of(&qw_kernels_ref, type);
    if (!f) {
        *s = 0.0f;
        return;
    }
    f(n, s, w_row, x);
}

void qw_quantize_row(qw_type type, const float *x, void *dst, int64_t n) {
    const qw_kernel_table *t = active();
    switch (type) {
    case QW_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); return;
    case QW_TYPE_F16: t->f32_to_fp16(x, dst, n); return;
    case QW_TYPE_BF16: t->f32_to_bf16(x, dst, n); return;
    case QW_TYPE_Q8_0: t->quantize_q8_0(x, dst, n); return;
    case QW_TYPE_Q4_0: qw_ref_quantize_q4_0(x, dst, n); return; /* writer only */
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K:
        qw_kq_quantize(type, x, dst, n); /* writer only */
        return;
    case QW_TYPE_Q8_K: t->kq->quantize_q8_K(x, dst, n); return; /* activations: ggml's bytes */
    }
}

void qw_dequantize_row(qw_type type, const void *src, float *y, int64_t n) {
    const qw_kernel_table *t = active();
    switch (type) {
    case QW_TYPE_F32: memcpy(y, src, (size_t)n * sizeof(float)); return;
    case QW_TYPE_F16: t->fp16_to_f32(src, y, n); return;
    case QW_TYPE_BF16: t->bf16_to_f32(src, y, n); return;
    case QW_TYPE_Q8_0: qw_ref_dequantize_q8_0(src, y, n); return;
    case QW_TYPE_Q4_0: qw_ref_dequantize_q4_0(src, y, n); return;
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K:
    case QW_TYPE_Q8_K: qw_kq_dequantize(type, src, y, n); return;
    }
}

float qw_dot_f32(const float *a, const float *b, int64_t n) { return active()->dot_f32v(a, b, n); }

void qw_axpy_f32(float *y, float a, const float *x, int64_t n) { active()->axpy_f32(y, a, x, n); }
