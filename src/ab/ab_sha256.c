/* ab_sha256.c — SHA-256 (FIPS 180-4) for `qwisp ab`: the hash of the
 * criteria file and of the binary each trial runs, in the form `sha256sum`
 * prints, so a reader can check a report against the files with standard
 * tools.  Straight from the standard; no tables but the round constants.
 */
#include "qwisp/ab.h"

#include <errno.h>
#include <string.h>

typedef struct {
    uint32_t h[8];
    uint8_t buf[64];
    size_t n_buf;
    uint64_t n_bits;
} sha256_ctx;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void block(sha256_ctx *c, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g, g = f, f = e, e = d + t1, d = cc, cc = b, b = a, a = t1 + t2;
    }
    c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d;
    c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

static void init(sha256_ctx *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->n_buf = 0;
    c->n_bits = 0;
}

static void update(sha256_ctx *c, const uint8_t *p, size_t n) {
    c->n_bits += (uint64_t)n * 8;
    while (n) {
        size_t k = 64 - c->n_buf < n ? 64 - c->n_buf : n;
        memcpy(c->buf + c->n_buf, p, k);
        c->n_buf += k, p += k, n -= k;
        if (c->n_buf == 64) {
            block(c, c->buf);
            c->n_buf = 0;
        }
    }
}

static void final(sha256_ctx *c, char hex[65]) {
    uint64_t bits = c->n_bits;
    uint8_t pad = 0x80, zero = 0, len[8];
    update(c, &pad, 1);
    while (c->n_buf != 56) update(c, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    update(c, len, 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", c->h[i]);
}

void qw_ab_sha256(const void *data, size_t n, char hex[65]) {
    sha256_ctx c;
    init(&c);
    update(&c, data, n);
    final(&c, hex);
}

int qw_ab_sha256_file(const char *path, char hex[65], qw_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return qw_fail(err, "%s: %s", path, strerror(errno));
    sha256_ctx c;
    init(&c);
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) update(&c, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) return qw_fail(err, "%s: read error", path);
    final(&c, hex);
    return 0;
}
