/* kquant_ref.c — scalar references for the K-quants (Q2_K..Q6_K) and their
 * activation type Q8_K: unpacking, dequantization, the dots (the oracle the
 * SIMD files are tested against) and the quantizers the writers use.
 *
 * Block layouts are in qwisp/quant.h; the shared dot contract (integer sums
 * per super-block, one float expression per block) in kquant_impl.h.
 *
 * Dequantization computes (d*sc)*q - (dmin*m) per weight, the same products
 * in the same order as ggml, so values are bit-identical with it.
 *
 * Quantizers (weights): per super-block, each group of 16 or 32 weights gets
 * its own best scale (and min, for the affine types) by a small search over
 * candidate step sizes with a weighted least-squares refit, then those scales
 * are themselves quantized to 4/6/8 bits against one fp16 super-scale, and the
 * weights are re-rounded against the scales actually stored.  This is the
 * scheme of ggml's reference quantizers (quantize_row_q*_K_ref), written for
 * qwisp; results are close to, not bit-identical with, ggml's.
 *
 * Q8_K (activations) is bit-exact with ggml's quantize_row_q8_K (which its
 * x86 build also uses): scale -127/max where max is the signed value of
 * largest magnitude, round half to even via the 1.5*2^23 trick, clamp at 127.
 */
#include <math.h>
#include <string.h>

#include "kernels/kquant_impl.h"

/* Round to nearest, ties to even (|f| < 2^22). */
static inline int round_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- unpacking ----------------------------------------------------------- */

static void unpack_q2_K(const qw_block_q2_K *b, qw_kq_unpacked *u) {
    for (int i = 0; i < QW_QK_K; i++) {
        const int h = i / 128, s = (i % 128) / 32, l = i % 32;
        u->q[i] = (int8_t)((b->qs[32 * h + l] >> (2 * s)) & 3);
    }
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g] & 0xF;
        u->mn[g] = b->scales[g] >> 4;
    }
    u->d = qw_fp16_to_f32(b->d);
    u->dmin = qw_fp16_to_f32(b->dmin);
}

static void unpack_q3_K(const qw_block_q3_K *b, qw_kq_unpacked *u) {
    for (int i = 0; i < QW_QK_K; i++) {
        const int h = i / 128, s = (i % 128) / 32, l = i % 32;
        const int lo = (b->qs[32 * h + l] >> (2 * s)) & 3;
        const int hi = (b->hmask[l] >> (4 * h + s)) & 1;
        u->q[i] = (int8_t)((lo | (hi << 2)) - 4);
    }
    for (int g = 0; g < 16; g++) {
        u->sc[g] = (int16_t)qw_kq_scale_q3(g, b->scales);
        u->mn[g] = 0;
    }
    u->d = qw_fp16_to_f32(b->d);
    u->dmin = 0.0f;
}

/* Q4_K/Q5_K: 8 six-bit (scale, min) pairs, one per 32 elements, and the
 * two fp16 super-scales. */
static void unpack_k4_scales(const uint8_t *scales, uint16_t d, uint16_t dmin, qw_kq_unpacked *u) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        qw_kq_scale_min_k4(j, scales, &sc, &mn);
        u->sc[2 * j] = u->sc[2 * j + 1] = sc;
        u->mn[2 * j] = u->mn[2 * j + 1] = mn;
    }
    u->d = qw_fp16_to_f32(d);
    u->dmin = qw_fp16_to_f32(dmin);
}

static void unpack_q4_K(const qw_block_q4_K *b, qw_kq_unpacked *u) {
    for (int i = 0; i < QW_QK_K; i++) {
        const uint8_t v = b->qs[32 * (i / 64) + i % 32];
        u->q[i] = (int8_t)(i % 64 < 32 ? v & 0xF : v >> 4);
    }
    unpack_k4_scales(b->scales, b->d, b->dmin, u);
}

static void unpack_q5_K(const qw_block_q5_K *b, qw_kq_unpacked *u) {
    for (int i = 0; i < QW_QK_K; i++) {
        const uint8_t v = b->qs[32 * (i / 64) + i % 32];
        const int lo = i % 64 < 32 ? v & 0xF : v >> 4;
        const int hi = (b->qh[i % 32] >> (i / 32)) & 1;
        u->q[i] = (int8_t)(lo | (hi << 4));
    }
    unpack_k4_scales(b->scales, b->d, b->dmin, u);
}

static void unpack_q6_K(const qw_block_q6_K *b, qw_kq_unpacked *u) {
    for (int i = 0; i < QW_QK_K; i++) {
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const uint8_t v = b->ql[64 * h + 32 * (k & 1) + l];
        const int lo = k < 2 ? v & 0xF : v >> 4;
        const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
        u->q[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g];
        u->mn[g] = 0;
    }
    u->d = qw_fp16_to_f32(b->d);
    u->dmin = 0.0f;
}

static void unpack_q8_K(const qw_block_q8_K *b, qw_kq_unpacked *u) {
    memcpy(u->q, b->qs, QW_QK_K);
    for (int g = 0; g < 16; g++) u->sc[g] = 1, u->mn[g] = 0;
    memcpy(&u->d, &b->d, sizeof u->d);
    u->dmin = 0.0f;
}

void qw_kq_unpack(qw_type type, const void *block, qw_kq_unpacked *u) {
    switch ((int)type) {
    case QW_TYPE_Q2_K: unpack_q2_K(block, u); return;
    case QW_TYPE_Q3_K: unpack_q3_K(block, u); return;
    case QW_TYPE_Q4_K: unpack_q4_K(block, u); return;
    case QW_TYPE_Q5_K: unpack_q5_K(block, u); return;
    case QW_TYPE_Q6_K: unpack_q6_K(block, u); return;
    case QW_TYPE_Q8_K: unpack_q8_K(block, u); return;
    default: memset(u, 0, sizeof *u); return;
    }
}

static size_t block_bytes(qw_type type) {
    switch ((int)type) {
    case QW_TYPE_Q2_K: return sizeof(qw_block_q2_K);
    case QW_TYPE_Q3_K: return sizeof(qw_block_q3_K);
    case QW_TYPE_Q4_K: return sizeof(qw_block_q4_K);
    case QW_TYPE_Q5_K: return sizeof(qw_block_q5_K);
    case QW_TYPE_Q6_K: return sizeof(qw_block_q6_K);
    case QW_TYPE_Q8_K: return sizeof(qw_block_q8_K);
    default: return 0;
    }
}

/* ---- dequantize and dot -------------------------------------------------- */

void qw_kq_dequantize(qw_type type, const void *src, float *y, int64_t n) {
    const size_t bb = block_bytes(type);
    qw_kq_unpacked u;
    for (int64_t b = 0; b < n / QW_QK_K; b++) {
        qw_kq_unpack(type, (const char *)src + (size_t)b * bb, &u);
        for (int i = 0; i < QW_QK_K; i++) {
            const int g = i / 16;
            y[b * QW_QK_K + i] = u.d * (float)u.sc[g] * (float)u.q[i] - u.dmin * (float)u.mn[g];
        }
    }
}

/* The shared dot (kquant_impl.h) on unpacked blocks. */
static void dot_ref(qw_type type, int64_t n, float *s, const void *w, const void *x) {
    const size_t bb = block_bytes(type);
    const qw_block_q8_K *y = x;
    qw_kq_unpacked u;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QW_QK_K; b++) {
        qw_kq_unpack(type, (const char *)w + (size_t)b * bb, &u);
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < 16; g++) {
            int32_t sg = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) sg += (int32_t)u.q[i] * y[b].qs[i];
            sumi += u.sc[g] * sg;
            summ += u.mn[g] * y[b].bsums[g];
        }
        float yd;
        memcpy(&yd, &y[b].d, sizeof yd);
        if (u.dmin == 0.0f && summ == 0) acc += yd * (u.d * (float)sumi); /* symmetric types */
        else acc += yd * (u.d * (float)sumi - u.dmin * (float)summ);
    }
    *s = acc;
}

static void ref_dot_q2_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q2_K, n, s, w, x); }
static void ref_dot_q3_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q3_K, n, s, w, x); }
static void ref_dot_q4_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q4_K, n, s, w, x); }
static void ref_dot_q5_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q5_K, n, s, w, x); }
static void ref_dot_q6_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q6_K, n, s, w, x); }
void qw_ref_dot_q8_K(int64_t n, float *s, const void *w, const void *x) { dot_ref(QW_TYPE_Q8_K, n, s, w, x); }

const qw_kq_dots qw_kq_dots_ref = {
    .q2_K = ref_dot_q2_K, .q3_K = ref_dot_q3_K, .q4_K = ref_dot_q4_K, .q5_K = ref_dot_q5_K, .q6_K = ref_dot_q6_K,
    .q8_K = qw_ref_dot_q8_K, .quantize_q8_K = qw_ref_quantize_q8_K, /* no tiles, no row loops */
};

/* ---- Q8_K activations ---------------------------------------------------- */

void qw_ref_quantize_q8_K(const float *x, void *dst, int64_t n) {
    qw_block_q8_K *y = dst;
    for (int64_t b = 0; b < n / QW_QK_K; b++, x += QW_QK_K) {
        float mx = 0.0f, amax = 0.0f;
        for (int i = 0; i < QW_QK_K; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), mx = x[i];
        qw_block_q8_K *o = &y[b];
        if (amax == 0.0f) {
            memset(o, 0, sizeof *o); /* d = 0, qs = 0, bsums = 0 */
            continue;
        }
        const float iscale = -127.0f / mx;
        for (int i = 0; i < QW_QK_K; i++) {
            const int v = round_int(iscale * x[i]);
            o->qs[i] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += o->qs[16 * g + i];
            o->bsums[g] = (int16_t)sum;
        }
        const float d = 1.0f / iscale;
        memcpy(&o->d, &d, sizeof d);
    }
}

/* ---- weight quantizers --------------------------------------------------- */

/* Affine fit of x[0..n) to scale*L + min, L in [0, nmax], min <= 0, weights
 * w: tries step nmax/(max-min) and nstep candidates around it, refitting
 * (scale, min) by weighted least squares for each rounding; keeps the lowest
 * weighted squared error.  Returns scale, stores -min (>= 0) in *neg_min. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                        float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sw = 0.0f, sx = 0.0f;
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sw += w[i];
        sx += w[i] * x[i];
    }
    if (lo > 0.0f) lo = 0.0f;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float scale = (hi - lo) / (float)nmax, mn = lo, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(round_int((x[i] - lo) / scale), 0, nmax);
        const float e = scale * L[i] + lo - x[i];
        best += w[i] * e * e;
    }
    uint8_t cand[32];
    for (int k = 0; k <= nstep; k++) {
        const float is = (rmin + rdelta * (float)k + (float)nmax) / (hi - lo);
        float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
        for (int i = 0; i < n; i++) {
            cand[i] = (uint8_t)clampi(round_int(is * (x[i] - lo)), 0, nmax);
            sl += w[i] * cand[i];
            sl2 += w[i] * cand[i] * cand[i];
            sxl += w[i] * cand[i] * x[i];
        }
        const float det = sw * sl2 - sl * sl;
        if (det <= 0.0f) continue;
        float sc = (sw * sxl - sx * sl) / det, m = (sl2 * sx - sl * sxl) / det;
        if (m > 0.0f) m = 0.0f, sc = sxl / sl2;
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            const float e = sc * cand[i] + m - x[i];
            err += w[i] * e * e;
        }
        if (err < best) best = err, scale = sc, mn = m, memcpy(L, cand, (size_t)n);
    }
    *neg_min = -mn;
    return scale;
}

/* Symmetric fit of x[0..n) to scale*l, l in [-nmax, nmax-1], weighted by
 * x^2: the step -nmax/max (max = signed value of largest magnitude) and 18
 * neighbours, each refit by least squares.  Returns the scale (0 if x is
 * all zero). */
static float fit_symmetric(int n, int nmax, const float *x) {
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), mx = x[i];
    if (amax < 1e-15f) return 0.0f;
    float scale = 0.0f, best = -1.0f;
    for (int k = 0; k <= 18; k++) {
        const float is = -((float)nmax + 0.1f * (float)(k == 0 ? 0 : k <= 9 ? k - 10 : k - 9)) / mx;
        float slx = 0.0f, sl2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_int(is * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            slx += w * x[i] * (float)l;
            sl2 += w * (float)l * (float)l;
        }
        /* error = sum w x^2 - slx^2/sl2: maximize slx^2/sl2 */
        if (sl2 > 0.0f && (best < 0.0f || slx * slx > best * sl2)) scale = slx / sl2, best = scale * slx;
    }
    return scale;
}

/* Packs 6-bit scale/min j into Q4_K/Q5_K's 12 bytes (inverse of qw_kq_scale_min_k4). */
static void pack_scale_min_k4(uint8_t *s, int j, int sc, int mn) {
    if (j < 4) {
        s[j] = (uint8_t)sc;
        s[j + 4] = (uint8_t)mn;
    } else {
        s[j + 4] = (uint8_t)((sc & 0xF) | ((mn & 0xF) << 4));
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((mn >> 4) << 6);
    }
}

/* Q4_K / Q5_K: 8 affine groups of 32, nmax = 15 or 31.  Fills qs levels in L. */
static void quant_k45(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales,
                      uint8_t L[QW_QK_K]) {
    float w[32], sc[8], mn[8], sum2 = 0.0f;
    for (int i = 0; i < QW_QK_K; i++) sum2 += x[i] * x[i];
    const float av = sqrtf(sum2 / QW_QK_K);
    float max_sc = 0.0f, max_mn = 0.0f;
    for (int j = 0; j < 8; j++) {
        for (int i = 0; i < 32; i++) w[i] = av + fabsf(x[32 * j + i]);
        sc[j] = fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], -1.0f, 0.1f, 20);
        max_sc = sc[j] > max_sc ? sc[j] : max_sc;
        max_mn = mn[j] > max_mn ? mn[j] : max_mn;
    }
    const float isc = max_sc > 0.0f ? 63.0f / max_sc : 0.0f, imn = max_mn > 0.0f ? 63.0f / max_mn : 0.0f;
    memset(scales, 0, 12);
    int ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = clampi(round_int(isc * sc[j]), 0, 63);
        lm[j] = clampi(round_int(imn * mn[j]), 0, 63);
        pack_scale_min_k4(scales, j, ls[j], lm[j]);
    }
    *d_out = qw_f32_to_fp16(max_sc / 63.0f);
    *dmin_out = qw_f32_to_fp16(max_mn / 63.0f);
    const float d = qw_fp16_to_f32(*d_out), dmin = qw_fp16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        const float dl = d * (float)ls[j], ml = dmin * (float)lm[j];
        if (dl == 0.0f) {
            memset(L + 32 * j, 0, 32);
            continue;
        }
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clampi(round_int((x[32 * j + i] + ml) / dl), 0, nmax);
    }
}

static void quantize_q4_K(const float *x, qw_block_q4_K *b) {
    uint8_t L[QW_QK_K];
    quant_k45(x, 15, &b->d, &b->dmin, b->scales, L);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

static void quantize_q5_K(const float *x, qw_block_q5_K *b) {
    uint8_t L[QW_QK_K];
    quant_k45(x, 31, &b->d, &b->dmin, b->scales, L);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)((L[64 * c + l] & 0xF) | ((L[64 * c + 32 + l] & 0xF) << 4));
    for (int i = 0; i < QW_QK_K; i++) b->qh[i % 32] |= (uint8_t)((L[i] >> 4) << (i / 32));
}

static void quantize_q6_K(const float *x, qw_block_q6_K *b) {
    float sc[16], max_sc = 0.0f, amax = 0.0f;
    for (int g = 0; g < 16; g++) {
        sc[g] = fit_symmetric(16, 32, x + 16 * g);
        if (fabsf(sc[g]) > amax) amax = fabsf(sc[g]), max_sc = sc[g];
    }
    memset(b, 0, sizeof *b);
    if (amax < 1e-15f) return; /* all zero: d = 0 and every level decodes to 0 */
    const float is = -128.0f / max_sc;
    b->d = qw_f32_to_fp16(1.0f / is);
    for (int g = 0; g < 16; g++) b->scales[g] = (int8_t)clampi(round_int(is * sc[g]), -128, 127);
    const float d = qw_fp16_to_f32(b->d);
    for (int i = 0; i < QW_QK_K; i++) {
        const float dl = d * (float)b->scales[i / 16];
        const int q = dl == 0.0f ? 32 : clampi(round_int(x[i] / dl), -32, 31) + 32;
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        uint8_t *lo = &b->ql[64 * h + 32 * (k & 1) + l];
        *lo |= (uint8_t)(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
        b->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
    }
}

static void quantize_q3_K(const float *x, qw_block_q3_K *b) {
    float sc[16], max_sc = 0.0f, amax = 0.0f;
    for (int g = 0; g < 16; g++) {
        sc[g] = fit_symmetric(16, 4, x + 16 * g);
        if (fabsf(sc[g]) > amax) amax = fabsf(sc[g]), max_sc = sc[g];
    }
    memset(b, 0, sizeof *b);
    int ls[16];
    const float is = amax < 1e-15f ? 0.0f : -32.0f / max_sc;
    for (int g = 0; g < 16; g++) {
        ls[g] = clampi(round_int(is * sc[g]), -32, 31) + 32;
        if (g < 8) b->scales[g] |= (uint8_t)(ls[g] & 0xF);
        else b->scales[g - 8] |= (uint8_t)((ls[g] & 0xF) << 4);
        b->scales[8 + g % 4] |= (uint8_t)((ls[g] >> 4) << (2 * (g / 4)));
    }
    b->d = qw_f32_to_fp16(is == 0.0f ? 0.0f : 1.0f / is);
    const float d = qw_fp16_to_f32(b->d);
    for (int i = 0; i < QW_QK_K; i++) {
        const float dl = d * (float)(ls[i / 16] - 32);
        const int q = dl == 0.0f ? 4 : clampi(round_int(x[i] / dl), -4, 3) + 4;
        const int h = i / 128, s = (i % 128) / 32, l = i % 32;
        b->qs[32 * h + l] |= (uint8_t)((q & 3) << (2 * s));
        b->hmask[l] |= (uint8_t)((q >> 2) << (4 * h + s));
    }
}

static void quantize_q2_K(const float *x, qw_block_q2_K *b) {
    uint8_t L[QW_QK_K];
    float w[16], sc[16], mn[16], max_sc = 0.0f, max_mn = 0.0f;
    for (int g = 0; g < 16; g++) {
        for (int i = 0; i < 16; i++) w[i] = fabsf(x[16 * g + i]);
        sc[g] = fit_affine(16, 3, x + 16 * g, w, L + 16 * g, &mn[g], -0.5f, 0.1f, 15);
        max_sc = sc[g] > max_sc ? sc[g] : max_sc;
        max_mn = mn[g] > max_mn ? mn[g] : max_mn;
    }
    memset(b, 0, sizeof *b);
    const float isc = max_sc > 0.0f ? 15.0f / max_sc : 0.0f, imn = max_mn > 0.0f ? 15.0f / max_mn : 0.0f;
    for (int g = 0; g < 16; g++)
        b->scales[g] = (uint8_t)(clampi(round_int(isc * sc[g]), 0, 15) | (clampi(round_int(imn * mn[g]), 0, 15) << 4));
    b->d = qw_f32_to_fp16(max_sc / 15.0f);
    b->dmin = qw_f32_to_fp16(max_mn / 15.0f);
    const float d = qw_fp16_to_f32(b->d), dmin = qw_fp16_to_f32(b->dmin);
    for (int i = 0; i < QW_QK_K; i++) {
        const float dl = d * (float)(b->scales[i / 16] & 0xF), ml = dmin * (float)(b->scales[i / 16] >> 4);
        const int q = dl == 0.0f ? 0 : clampi(round_int((x[i] + ml) / dl), 0, 3);
        const int h = i / 128, s = (i % 128) / 32, l = i % 32;
        b->qs[32 * h + l] |= (uint8_t)(q << (2 * s));
    }
}

void qw_kq_quantize(qw_type type, const float *x, void *dst, int64_t n) {
    const size_t bb = block_bytes(type);
    for (int64_t b = 0; b < n / QW_QK_K; b++) {
        void *o = (char *)dst + (size_t)b * bb;
        const float *xb = x + b * QW_QK_K;
        switch ((int)type) {
        case QW_TYPE_Q2_K: quantize_q2_K(xb, o); break;
        case QW_TYPE_Q3_K: quantize_q3_K(xb, o); break;
        case QW_TYPE_Q4_K: quantize_q4_K(xb, o); break;
        case QW_TYPE_Q5_K: quantize_q5_K(xb, o); break;
        case QW_TYPE_Q6_K: quantize_q6_K(xb, o); break;
        case QW_TYPE_Q8_K: qw_ref_quantize_q8_K(xb, o, QW_QK_K); break;
        default: break;
        }
    }
}
