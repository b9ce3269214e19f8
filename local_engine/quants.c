/*
 * quants.c: the per-type table of the local engine (plain C reference).
 *
 * For each tensor type: dequantise (to_float), quantise (from_float) and
 * the dot product against the type's vec_dot_type, bit-exact to the
 * GGUF/ggml block layouts.  The SIMD kernels (quants_avx2.c) are twins of
 * these and are held against them in tests/test_quants.c.
 *
 * le_type_get serves this table with the AVX2 vec_dots of quants_avx2.c
 * (and the AVX2 / AVX-512 activation quantisers) patched in for the level
 * le_isa_active() picks (LLMUX_NO_SIMD=1 or LLMUX_SIMD=none turn that
 * off); le_type_get_ref always serves the plain C one.
 *
 * Invariants: every function takes counts that are multiples of the
 * type's block size (callers check shapes; gguf.c checks ne[0]); blocks are
 * read and written as packed little-endian structs whose sizes are pinned
 * with _Static_assert.  Nothing here allocates.
 */
#include "le_int.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Half and bfloat16.                                                   */

static uint32_t
f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float
u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float
le_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / nan: keep the payload */
        return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return u2f(sign);
        /* Subnormal: man * 2^-24 is exact in float. */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t
le_fp32_to_fp16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan (nan stays quiet nan) */
        return sign | (a > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {
        /* Result is subnormal (or zero): value / 2^-24, rounded to nearest
         * even.  Exact in float arithmetic since the scale is a power of
         * two and rintf rounds half to even in the default mode. */
        float v = u2f(a) * 0x1p24f;
        uint32_t m = (uint32_t)rintf(v);
        return sign | (uint16_t)m; /* m == 0x400 becomes the min normal */
    }
    /* Normal: drop 13 mantissa bits with round to nearest even. */
    uint32_t mant_odd = (a >> 13) & 1;
    a += 0xfff + mant_odd;
    a -= 112u << 23;
    return sign | (uint16_t)(a >> 13);
}

float
le_bf16_to_fp32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t
le_fp32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: force quiet */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* Every half as a float, filled once by rt_init (before any table
 * function can run: they are reached only through le_type_get /
 * le_type_get_ref).  A lookup is ~10x faster than the branchy conversion
 * on the F16 paths (KV cache, F16 weights) and gives the same values. */
static float fp16_table[65536];
#define FP16(x) fp16_table[(uint16_t)(x)]
#define TO_FP16(x) le_fp32_to_fp16(x)

/* ------------------------------------------------------------------ */
/* F32, F16, BF16.                                                      */

static void
f32_to_float(const void *x, float *y, int64_t k)
{
    memcpy(y, x, (size_t)k * sizeof(float));
}

static void
f32_from_float(const float *x, void *y, int64_t k)
{
    memcpy(y, x, (size_t)k * sizeof(float));
}

/* Dot products of float types accumulate in double, as ggml's reference
 * does (ggml_float), so long rows keep their precision. */
static void
f32_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

static void
f16_to_float(const void *vx, float *y, int64_t k)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < k; i++)
        y[i] = FP16(x[i]);
}

static void
f16_from_float(const float *x, void *vy, int64_t k)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < k; i++)
        y[i] = TO_FP16(x[i]);
}

static void
f16_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)FP16(x[i]) * (double)FP16(y[i]);
    *s = (float)sum;
}

static void
bf16_to_float(const void *vx, float *y, int64_t k)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < k; i++)
        y[i] = le_bf16_to_fp32(x[i]);
}

static void
bf16_from_float(const float *x, void *vy, int64_t k)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < k; i++)
        y[i] = le_fp32_to_bf16(x[i]);
}

static void
bf16_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)le_bf16_to_fp32(x[i]) * (double)le_bf16_to_fp32(y[i]);
    *s = (float)sum;
}

/* ------------------------------------------------------------------ */
/* Block layouts (ggml's, byte for byte).  fp16 fields are raw halves.  */

#define QK 32   /* values per block of the legacy types */
#define QK_K 256 /* values per super-block of the K-quants */

struct le_block_q4_0 {
    uint16_t d;         /* scale (fp16) */
    uint8_t qs[QK / 2]; /* nibbles: value j low, value j+16 high */
};
_Static_assert(sizeof(struct le_block_q4_0) == 18,
               "fp16 scale + 16 bytes of nibbles");

struct le_block_q4_1 {
    uint16_t d, m; /* scale and min (fp16) */
    uint8_t qs[QK / 2];
};
_Static_assert(sizeof(struct le_block_q4_1) == 20,
               "fp16 scale + fp16 min + 16 bytes of nibbles");

struct le_block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* bit j = 5th bit of value j (little-endian u32) */
    uint8_t qs[QK / 2];
};
_Static_assert(sizeof(struct le_block_q5_0) == 22,
               "fp16 scale + 32 high bits + 16 bytes of nibbles");

struct le_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
_Static_assert(sizeof(struct le_block_q5_1) == 24,
               "fp16 scale, min + 32 high bits + 16 bytes of nibbles");

struct le_block_q8_0 {
    uint16_t d;
    int8_t qs[QK];
};
_Static_assert(sizeof(struct le_block_q8_0) == 34, "fp16 scale + 32 int8");

struct le_block_mxfp4 {
    uint8_t e;          /* E8M0 scale */
    uint8_t qs[QK / 2]; /* E2M1 codes: values 0-15 low nibbles, 16-31 high */
};
_Static_assert(sizeof(struct le_block_mxfp4) == 17, "scale byte + 16 bytes");

const int8_t le_mxfp4_values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                    0, -1, -2, -3, -4, -6, -8, -12};

struct le_block_q8_1 {
    uint16_t d; /* scale */
    uint16_t s; /* d * sum(qs), fp16 */
    int8_t qs[QK];
};
_Static_assert(sizeof(struct le_block_q8_1) == 36,
               "fp16 scale + fp16 sum + 32 int8");

/* 16 sub-blocks of 16; value = d * (scales & 15) * q - dmin * (scales >> 4),
 * q 2 bits. */
struct le_block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
};
_Static_assert(sizeof(struct le_block_q2_K) == 84,
               "16 scale/min nibble pairs + 64 bytes of 2-bit q + 2 fp16");

/* 16 sub-blocks of 16; value = d * (scale6 - 32) * (q2 | hbit<<2) - 4). */
struct le_block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12]; /* 16 6-bit scales */
    uint16_t d;
};
_Static_assert(sizeof(struct le_block_q3_K) == 110,
               "32 bytes high bits + 64 bytes 2-bit q + 12 bytes scales + "
               "fp16");

/* 8 sub-blocks of 32; value = d * sc6 * q4 - dmin * m6. */
struct le_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 6-bit scales and 8 6-bit mins */
    uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct le_block_q4_K) == 144,
               "2 fp16 + 12 bytes scales/mins + 128 bytes of nibbles");

struct le_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct le_block_q5_K) == 176,
               "2 fp16 + 12 bytes scales + 32 bytes high bits + 128 nibbles");

/* 16 sub-blocks of 16; value = d * scale8 * (q6 - 32). */
struct le_block_q6_K {
    uint8_t ql[QK_K / 2]; /* low 4 bits */
    uint8_t qh[QK_K / 4]; /* high 2 bits */
    int8_t scales[QK_K / 16];
    uint16_t d;
};
_Static_assert(sizeof(struct le_block_q6_K) == 210,
               "128 + 64 bytes of 6-bit q + 16 int8 scales + fp16");

struct le_block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sums of groups of 16 qs */
};
_Static_assert(sizeof(struct le_block_q8_K) == 292,
               "f32 scale + 256 int8 + 16 int16 sums");

/* Float to int with truncation, clamped to [lo, hi], NaN to 0 (clamped):
 * a NaN or inf activation must not reach a float-to-int conversion, which
 * would be undefined behaviour. */
static int
trunc_clamp(float v, int lo, int hi)
{
    if (v != v)
        v = 0;
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

static int
nearest_int(float f)
{
    return trunc_clamp(rintf(f), -(1 << 30), 1 << 30);
}

static uint32_t
get_u32le(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static void
put_u32le(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------ */
/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.                                  */

static void
q4_0_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q4_0 *x = vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
            y[i * QK + j + QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Signed value of largest magnitude in x[0..n). */
static float
signed_absmax(const float *x, int n, float *amax_out)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax_out)
        *amax_out = amax;
    return max;
}

static void
q4_0_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q4_0 *y = vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float max = signed_absmax(xb, QK, NULL);
        float d = max / -8;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int j = 0; j < QK / 2; j++) {
            int x0 = trunc_clamp(xb[j] * id + 8.5f, 0, 15);
            int x1 = trunc_clamp(xb[j + QK / 2] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

static void
q4_1_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q4_1 *x = vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d), m = FP16(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = (x[i].qs[j] & 0x0f) * d + m;
            y[i * QK + j + QK / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void
minmax(const float *x, int n, float *mn, float *mx)
{
    float a = INFINITY, b = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] < a)
            a = x[j];
        if (x[j] > b)
            b = x[j];
    }
    *mn = a;
    *mx = b;
}

static void
q4_1_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q4_1 *y = vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float mn, mx;
        minmax(xb, QK, &mn, &mx);
        float d = (mx - mn) / 15;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(mn);
        for (int j = 0; j < QK / 2; j++) {
            int x0 = trunc_clamp((xb[j] - mn) * id + 0.5f, 0, 15);
            int x1 = trunc_clamp((xb[j + QK / 2] - mn) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

/* 5-bit values of a Q5 block, 0..31. */
static void
q5_unpack(const uint8_t *qh4, const uint8_t *qs, int *q)
{
    uint32_t qh = get_u32le(qh4);
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
        q[j + QK / 2] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void
q5_pack(const int *q, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + QK / 2] >> 4) & 1) << (j + 16);
    }
    put_u32le(qh4, qh);
}

static void
q5_0_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q5_0 *x = vx;
    int q[QK];
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d);
        q5_unpack(x[i].qh, x[i].qs, q);
        for (int j = 0; j < QK; j++)
            y[i * QK + j] = (q[j] - 16) * d;
    }
}

static void
q5_0_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q5_0 *y = vy;
    int q[QK];
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float max = signed_absmax(xb, QK, NULL);
        float d = max / -16;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int j = 0; j < QK; j++) {
            q[j] = trunc_clamp(xb[j] * id + 16.5f, 0, 31);
        }
        q5_pack(q, y[i].qh, y[i].qs);
    }
}

static void
q5_1_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q5_1 *x = vx;
    int q[QK];
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d), m = FP16(x[i].m);
        q5_unpack(x[i].qh, x[i].qs, q);
        for (int j = 0; j < QK; j++)
            y[i * QK + j] = q[j] * d + m;
    }
}

static void
q5_1_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q5_1 *y = vy;
    int q[QK];
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float mn, mx;
        minmax(xb, QK, &mn, &mx);
        float d = (mx - mn) / 31;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(mn);
        for (int j = 0; j < QK; j++) {
            q[j] = trunc_clamp((xb[j] - mn) * id + 0.5f, 0, 31);
        }
        q5_pack(q, y[i].qh, y[i].qs);
    }
}

static void
q8_0_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q8_0 *x = vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d);
        for (int j = 0; j < QK; j++)
            y[i * QK + j] = x[i].qs[j] * d;
    }
}

static void
q8_0_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float amax;
        signed_absmax(xb, QK, &amax);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int j = 0; j < QK; j++)
            y[i].qs[j] = (int8_t)trunc_clamp(roundf(xb[j] * id), -127, 127);
    }
}

static void
q8_1_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q8_1 *x = vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = FP16(x[i].d);
        for (int j = 0; j < QK; j++)
            y[i * QK + j] = x[i].qs[j] * d;
    }
}

static void
q8_1_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float amax;
        signed_absmax(xb, QK, &amax);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            y[i].qs[j] = (int8_t)trunc_clamp(roundf(xb[j] * id), -127, 127);
            sum += y[i].qs[j];
        }
        y[i].d = TO_FP16(d);
        y[i].s = TO_FP16((float)sum * d);
    }
}

static void
q4_0_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q4_0 *x = vx;
    const struct le_block_q8_0 *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            int v0 = (x[i].qs[j] & 0x0f) - 8;
            int v1 = (x[i].qs[j] >> 4) - 8;
            sumi += v0 * y[i].qs[j] + v1 * y[i].qs[j + QK / 2];
        }
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

static void
q4_1_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q4_1 *x = vx;
    const struct le_block_q8_1 *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++)
            sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j] +
                    (x[i].qs[j] >> 4) * y[i].qs[j + QK / 2];
        sumf += FP16(x[i].d) * FP16(y[i].d) * sumi +
                FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sumf;
}

static void
q5_0_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q5_0 *x = vx;
    const struct le_block_q8_0 *y = vy;
    int q[QK];
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int sumi = 0;
        for (int j = 0; j < QK; j++)
            sumi += (q[j] - 16) * y[i].qs[j];
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

static void
q5_1_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q5_1 *x = vx;
    const struct le_block_q8_1 *y = vy;
    int q[QK];
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int sumi = 0;
        for (int j = 0; j < QK; j++)
            sumi += q[j] * y[i].qs[j];
        sumf += FP16(x[i].d) * FP16(y[i].d) * sumi +
                FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sumf;
}

static void
q8_0_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q8_0 *x = vx;
    const struct le_block_q8_0 *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

static void
mxfp4_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = le_e8m0_half(x[i].e);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = le_mxfp4_values[x[i].qs[j] & 0x0f] * d;
            y[i * QK + j + QK / 2] = le_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

/* The code of the value nearest x / d (the lower code among equal
 * distances). */
static uint8_t
mxfp4_code(float x, float d)
{
    int best = 0;
    float be = fabsf(x);
    for (int c = 1; c < 16; c++) {
        float e = fabsf(le_mxfp4_values[c] * d - x);
        if (e < be) {
            best = c;
            be = e;
        }
    }
    return (uint8_t)best;
}

/* The scale puts the block's largest magnitude at 4 to 8 times it, so
 * that the largest value, 12, reaches it; non-finite input gives the
 * scale of the finite ones. */
static void
mxfp4_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float amax = 0;
        for (int j = 0; j < QK; j++)
            if (isfinite(xb[j]) && fabsf(xb[j]) > amax)
                amax = fabsf(xb[j]);
        int e = 0;
        if (amax > 0) {
            e = (int)floorf(log2f(amax)) - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        float d = le_e8m0_half((uint8_t)e);
        y[i].e = (uint8_t)e;
        for (int j = 0; j < QK / 2; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_code(xb[j], d) |
                                   mxfp4_code(xb[j + QK / 2], d) << 4);
    }
}

/* The block's integer sum times its power-of-two scale (exact), times the
 * activation's scale. */
static void
mxfp4_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_mxfp4 *x = vx;
    const struct le_block_q8_0 *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++)
            sumi += le_mxfp4_values[x[i].qs[j] & 0x0f] * y[i].qs[j] +
                    le_mxfp4_values[x[i].qs[j] >> 4] * y[i].qs[j + QK / 2];
        sumf += sumi * le_e8m0_half(x[i].e) * FP16(y[i].d);
    }
    *s = sumf;
}

static void
q8_1_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q8_1 *x = vx;
    const struct le_block_q8_1 *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

/* ------------------------------------------------------------------ */
/* K-quants.                                                            */
/*
 * Every K-quant super-block is handled through one unpacked form: 256
 * integer quants q, and for each of the 16 sub-blocks of 16 values an
 * integer scale sc and min mn (types with 32-value sub-blocks repeat them),
 * so that value = (d * sc) * q - (dmin * mn).  Dequantising computes
 * exactly that expression, as ggml does, so results are bit-identical;
 * the dot product works on the integers.
 */
struct kunpacked {
    int8_t q[QK_K];
    int sc[16];
    int mn[16];
    float d, dmin;
};

/* 6-bit scale j (0..15) of Q3_K's 12 scale bytes. */
static int
q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return lo | (hi << 4);
}

static void
q3k_set_scale(uint8_t *s, int j, int v)
{
    if (j < 8)
        s[j] = (uint8_t)((s[j] & 0xf0) | (v & 0x0f));
    else
        s[j - 8] = (uint8_t)((s[j - 8] & 0x0f) | ((v & 0x0f) << 4));
    int sh = 2 * (j >> 2);
    s[8 + (j & 3)] =
        (uint8_t)((s[8 + (j & 3)] & ~(3 << sh)) | (((v >> 4) & 3) << sh));
}

/* ggml's get_scale_min_k4: 6-bit scale and min j (0..7) of Q4_K/Q5_K. */
static void
k4_scale_min(const uint8_t *q, int j, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void
k4_set_scale_min(uint8_t *q, const int *sc, const int *mn)
{
    memset(q, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] |= (uint8_t)(sc[j] & 63);
            q[j + 4] |= (uint8_t)(mn[j] & 63);
        } else {
            q[j + 4] = (uint8_t)((sc[j] & 0x0f) | ((mn[j] & 0x0f) << 4));
            q[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            q[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

static void
q2k_unpack(const struct le_block_q2_K *x, struct kunpacked *u)
{
    u->d = FP16(x->d);
    u->dmin = FP16(x->dmin);
    for (int s = 0; s < 16; s++) {
        u->sc[s] = x->scales[s] & 0x0f;
        u->mn[s] = x->scales[s] >> 4;
    }
    for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                u->q[n * 128 + j * 32 + l] =
                    (int8_t)((x->qs[n * 32 + l] >> (2 * j)) & 3);
}

static void
q3k_unpack(const struct le_block_q3_K *x, struct kunpacked *u)
{
    u->d = FP16(x->d);
    u->dmin = 0;
    for (int s = 0; s < 16; s++) {
        u->sc[s] = q3k_scale(x->scales, s) - 32;
        u->mn[s] = 0;
    }
    for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int lo = (x->qs[n * 32 + l] >> (2 * j)) & 3;
                int hb = (x->hmask[l] >> (n * 4 + j)) & 1;
                u->q[n * 128 + j * 32 + l] = (int8_t)(lo - (hb ? 0 : 4));
            }
}

static void
q4k_unpack(const struct le_block_q4_K *x, struct kunpacked *u)
{
    u->d = FP16(x->d);
    u->dmin = FP16(x->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(x->scales, s, &sc, &mn);
        u->sc[2 * s] = u->sc[2 * s + 1] = sc;
        u->mn[2 * s] = u->mn[2 * s + 1] = mn;
    }
    for (int jj = 0; jj < 4; jj++)
        for (int l = 0; l < 32; l++) {
            u->q[jj * 64 + l] = (int8_t)(x->qs[jj * 32 + l] & 0x0f);
            u->q[jj * 64 + 32 + l] = (int8_t)(x->qs[jj * 32 + l] >> 4);
        }
}

static void
q5k_unpack(const struct le_block_q5_K *x, struct kunpacked *u)
{
    u->d = FP16(x->d);
    u->dmin = FP16(x->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(x->scales, s, &sc, &mn);
        u->sc[2 * s] = u->sc[2 * s + 1] = sc;
        u->mn[2 * s] = u->mn[2 * s + 1] = mn;
    }
    for (int jj = 0; jj < 4; jj++)
        for (int l = 0; l < 32; l++) {
            int h0 = (x->qh[l] >> (2 * jj)) & 1;
            int h1 = (x->qh[l] >> (2 * jj + 1)) & 1;
            u->q[jj * 64 + l] = (int8_t)((x->qs[jj * 32 + l] & 0x0f) | h0 << 4);
            u->q[jj * 64 + 32 + l] =
                (int8_t)((x->qs[jj * 32 + l] >> 4) | h1 << 4);
        }
}

static void
q6k_unpack(const struct le_block_q6_K *x, struct kunpacked *u)
{
    u->d = FP16(x->d);
    u->dmin = 0;
    for (int s = 0; s < 16; s++) {
        u->sc[s] = x->scales[s];
        u->mn[s] = 0;
    }
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = x->ql + n * 64, *qh = x->qh + n * 32;
        int8_t *q = u->q + n * 128;
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[l + 32] =
                (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] =
                (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void
kunpacked_to_float(const struct kunpacked *u, float *y)
{
    for (int s = 0; s < 16; s++) {
        float dl = u->d * u->sc[s], ml = u->dmin * u->mn[s];
        for (int l = 0; l < 16; l++)
            y[s * 16 + l] = dl * u->q[s * 16 + l] - ml;
    }
}

/* Dot of one unpacked super-block with one Q8_K block. */
static float
kunpacked_dot(const struct kunpacked *u, const struct le_block_q8_K *y)
{
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 16; s++) {
        int32_t si = 0, sy = 0;
        for (int l = 0; l < 16; l++) {
            si += u->q[s * 16 + l] * y->qs[s * 16 + l];
            sy += y->qs[s * 16 + l];
        }
        isum += u->sc[s] * si;
        msum += u->mn[s] * sy;
    }
    return y->d * (u->d * (float)isum) - y->d * (u->dmin * (float)msum);
}

#define KQUANT_READERS(name, unpack)                                         \
    static void name##_to_float(const void *vx, float *y, int64_t k)          \
    {                                                                         \
        const struct le_block_##name *x = vx;                                 \
        struct kunpacked u;                                                   \
        for (int64_t i = 0; i < k / QK_K; i++) {                              \
            unpack(&x[i], &u);                                                \
            kunpacked_to_float(&u, y + i * QK_K);                             \
        }                                                                     \
    }                                                                         \
    static void name##_vec_dot(int n, float *s, const void *vx,               \
                               const void *vy)                                \
    {                                                                         \
        const struct le_block_##name *x = vx;                                 \
        const struct le_block_q8_K *y = vy;                                   \
        struct kunpacked u;                                                   \
        float sumf = 0;                                                       \
        for (int i = 0; i < n / QK_K; i++) {                                  \
            unpack(&x[i], &u);                                                \
            sumf += kunpacked_dot(&u, &y[i]);                                 \
        }                                                                     \
        *s = sumf;                                                            \
    }

KQUANT_READERS(q2_K, q2k_unpack)
KQUANT_READERS(q3_K, q3k_unpack)
KQUANT_READERS(q4_K, q4k_unpack)
KQUANT_READERS(q5_K, q5k_unpack)
KQUANT_READERS(q6_K, q6k_unpack)

/*
 * K-quant quantisers: straightforward, not ggml's iterative search.  Per
 * sub-block a scale (and for the asymmetric types a min) is chosen from
 * the range, the scales are quantised against a super-block d (dmin), and
 * the values are then quantised with the scales as actually stored, so the
 * error is that of the stored block.
 */

/* Asymmetric (Q2_K, Q4_K, Q5_K): value ~ d*sc*q - dmin*mn, q in
 * [0, qmax], sc and mn in [0, smax], nsub sub-blocks of len values. */
static void
kquant_asym(const float *x, int nsub, int len, int qmax, int smax,
            uint16_t *d_out, uint16_t *dmin_out, int *sc, int *mn, int *q)
{
    float scale[16], mins[16], max_scale = 0, max_min = 0;
    for (int s = 0; s < nsub; s++) {
        float lo, hi;
        minmax(x + s * len, len, &lo, &hi);
        if (lo > 0)
            lo = 0; /* the min is subtracted: keep it >= 0 */
        scale[s] = (hi - lo) / qmax;
        mins[s] = -lo;
        if (scale[s] > max_scale)
            max_scale = scale[s];
        if (mins[s] > max_min)
            max_min = mins[s];
    }
    *d_out = TO_FP16(max_scale / smax);
    *dmin_out = TO_FP16(max_min / smax);
    float d = FP16(*d_out), dmin = FP16(*dmin_out);
    for (int s = 0; s < nsub; s++) {
        int l = d ? nearest_int(scale[s] / d) : 0;
        int m = dmin ? nearest_int(mins[s] / dmin) : 0;
        /* Round the scale up rather than to 0 so the range stays covered. */
        if (l == 0 && scale[s] > 0 && d)
            l = 1;
        sc[s] = l > smax ? smax : l;
        m = m > smax ? smax : m;
        /* Rounding the min down could push the lowest value below 0. */
        if (dmin && m * dmin < mins[s] && m < smax)
            m++;
        mn[s] = m;
        float dl = d * sc[s], ml = dmin * mn[s];
        for (int j = 0; j < len; j++) {
            int v = dl ? nearest_int((x[s * len + j] + ml) / dl) : 0;
            q[s * len + j] = v < 0 ? 0 : v > qmax ? qmax : v;
        }
    }
}

/* Symmetric (Q3_K, Q6_K): value ~ d*sc*q, q in [qmin, qmax] with
 * qmin = -(qmax+1), sc in [smin, smax] with smin = -(smax+1); 16
 * sub-blocks of 16. */
static void
kquant_sym(const float *x, int qmax, int smax, uint16_t *d_out, int *sc,
           int *q)
{
    float scale[16], max_scale = 0, amax_scale = 0;
    for (int s = 0; s < 16; s++) {
        float max = signed_absmax(x + s * 16, 16, NULL);
        scale[s] = max / -(qmax + 1); /* max lands on qmin */
        if (fabsf(scale[s]) > amax_scale) {
            amax_scale = fabsf(scale[s]);
            max_scale = scale[s];
        }
    }
    *d_out = TO_FP16(max_scale / -(smax + 1));
    float d = FP16(*d_out);
    for (int s = 0; s < 16; s++) {
        int l = d ? nearest_int(scale[s] / d) : 0;
        sc[s] = l < -(smax + 1) ? -(smax + 1) : l > smax ? smax : l;
        float dl = d * sc[s];
        for (int j = 0; j < 16; j++) {
            int v = dl ? nearest_int(x[s * 16 + j] / dl) : 0;
            q[s * 16 + j] = v < -(qmax + 1) ? -(qmax + 1) : v > qmax ? qmax : v;
        }
    }
}

static void
q2_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q2_K *y = vy;
    int sc[16], mn[16], q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        kquant_asym(x + i * QK_K, 16, 16, 3, 15, &y[i].d, &y[i].dmin, sc, mn,
                    q);
        for (int s = 0; s < 16; s++)
            y[i].scales[s] = (uint8_t)(sc[s] | (mn[s] << 4));
        memset(y[i].qs, 0, sizeof(y[i].qs));
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++)
                    y[i].qs[n * 32 + l] |=
                        (uint8_t)(q[n * 128 + j * 32 + l] << (2 * j));
    }
}

static void
q3_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q3_K *y = vy;
    int sc[16], q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        kquant_sym(x + i * QK_K, 3, 31, &y[i].d, sc, q);
        memset(y[i].scales, 0, sizeof(y[i].scales));
        for (int s = 0; s < 16; s++)
            q3k_set_scale(y[i].scales, s, sc[s] + 32);
        memset(y[i].qs, 0, sizeof(y[i].qs));
        memset(y[i].hmask, 0, sizeof(y[i].hmask));
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int u = q[n * 128 + j * 32 + l] + 4; /* 0..7 */
                    y[i].qs[n * 32 + l] |= (uint8_t)((u & 3) << (2 * j));
                    if (u & 4)
                        y[i].hmask[l] |= (uint8_t)(1 << (n * 4 + j));
                }
    }
}

static void
q4_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q4_K *y = vy;
    int sc[8], mn[8], q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        kquant_asym(x + i * QK_K, 8, 32, 15, 63, &y[i].d, &y[i].dmin, sc, mn,
                    q);
        k4_set_scale_min(y[i].scales, sc, mn);
        for (int jj = 0; jj < 4; jj++)
            for (int l = 0; l < 32; l++)
                y[i].qs[jj * 32 + l] = (uint8_t)(q[jj * 64 + l] |
                                                 (q[jj * 64 + 32 + l] << 4));
    }
}

static void
q5_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q5_K *y = vy;
    int sc[8], mn[8], q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        kquant_asym(x + i * QK_K, 8, 32, 31, 63, &y[i].d, &y[i].dmin, sc, mn,
                    q);
        k4_set_scale_min(y[i].scales, sc, mn);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int jj = 0; jj < 4; jj++)
            for (int l = 0; l < 32; l++) {
                int a = q[jj * 64 + l], b = q[jj * 64 + 32 + l];
                y[i].qs[jj * 32 + l] = (uint8_t)((a & 0x0f) | ((b & 0x0f) << 4));
                y[i].qh[l] |= (uint8_t)(((a >> 4) & 1) << (2 * jj));
                y[i].qh[l] |= (uint8_t)(((b >> 4) & 1) << (2 * jj + 1));
            }
    }
}

static void
q6_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q6_K *y = vy;
    int sc[16], q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        kquant_sym(x + i * QK_K, 31, 127, &y[i].d, sc, q);
        for (int s = 0; s < 16; s++)
            y[i].scales[s] = (int8_t)sc[s];
        for (int n = 0; n < 2; n++) {
            uint8_t *ql = y[i].ql + n * 64, *qh = y[i].qh + n * 32;
            const int *qq = q + n * 128;
            for (int l = 0; l < 32; l++) {
                int u0 = qq[l] + 32, u1 = qq[l + 32] + 32;
                int u2 = qq[l + 64] + 32, u3 = qq[l + 96] + 32;
                ql[l] = (uint8_t)((u0 & 0x0f) | ((u2 & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((u1 & 0x0f) | ((u3 & 0x0f) << 4));
                qh[l] = (uint8_t)((u0 >> 4) | ((u1 >> 4) << 2) |
                                  ((u2 >> 4) << 4) | ((u3 >> 4) << 6));
            }
        }
    }
}

static void
q8_K_to_float(const void *vx, float *y, int64_t k)
{
    const struct le_block_q8_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++)
        for (int j = 0; j < QK_K; j++)
            y[i * QK_K + j] = x[i].d * x[i].qs[j];
}

static void
q8_K_from_float(const float *x, void *vy, int64_t k)
{
    struct le_block_q8_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float *xb = x + i * QK_K;
        float amax;
        float max = signed_absmax(xb, QK_K, &amax);
        if (amax == 0) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* As ggml: -127/max (not 128) so q stays in [-127, 127]. */
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * xb[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void
q8_K_vec_dot(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q8_K *x = vx, *y = vy;
    float sumf = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK_K; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        sumf += x[i].d * y[i].d * (float)sumi;
    }
    *s = sumf;
}

/* ------------------------------------------------------------------ */
/* The table.                                                           */

static const struct le_type_traits type_table[LE_TYPE_COUNT] = {
    [LE_TYPE_F32] = {"f32", 1, 4, 0, f32_to_float, f32_from_float,
                     f32_vec_dot, LE_TYPE_F32, NULL},
    [LE_TYPE_F16] = {"f16", 1, 2, 0, f16_to_float, f16_from_float,
                     f16_vec_dot, LE_TYPE_F16, NULL},
    [LE_TYPE_BF16] = {"bf16", 1, 2, 0, bf16_to_float, bf16_from_float,
                      bf16_vec_dot, LE_TYPE_BF16, NULL},
#define Q(T, name, blck, Tvd)                                                \
    [LE_TYPE_##T] = {#name,                                                 \
                     blck,                                                   \
                     sizeof(struct le_block_##name),                         \
                     1,                                                      \
                     name##_to_float,                                        \
                     name##_from_float,                                      \
                     name##_vec_dot,                                         \
                     LE_TYPE_##Tvd,                                          \
                     NULL}
    Q(Q4_0, q4_0, QK, Q8_0),
    Q(Q4_1, q4_1, QK, Q8_1),
    Q(Q5_0, q5_0, QK, Q8_0),
    Q(Q5_1, q5_1, QK, Q8_1),
    Q(Q8_0, q8_0, QK, Q8_0),
    Q(Q8_1, q8_1, QK, Q8_1),
    Q(Q2_K, q2_K, QK_K, Q8_K),
    Q(Q3_K, q3_K, QK_K, Q8_K),
    Q(Q4_K, q4_K, QK_K, Q8_K),
    Q(Q5_K, q5_K, QK_K, Q8_K),
    Q(Q6_K, q6_K, QK_K, Q8_K),
    Q(Q8_K, q8_K, QK_K, Q8_K),
    Q(MXFP4, mxfp4, QK, Q8_0),
#undef Q
};

/* Which levels run here (filled once by isa_probe). */
static int isa_ok[LE_ISA_AVX512 + 1] = {1, 0, 0, 0};

#if defined(__x86_64__)
#include <cpuid.h>

/* XCR0: which register states the OS saves on a context switch.  A CPU
 * may have AVX-512 while the kernel does not enable ZMM state; then the
 * instructions fault, so both must be asked. */
static uint64_t
xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static enum le_isa
isa_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return LE_ISA_NONE;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    int avx = (c >> 28) & 1;
    if (!osxsave || !avx)
        return LE_ISA_NONE;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) /* SSE and YMM state */
        return LE_ISA_NONE;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return LE_ISA_NONE;
    int avx2 = (b >> 5) & 1;
    if (!avx2 || !fma || !f16c)
        return LE_ISA_NONE;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1;
    int vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    isa_ok[LE_ISA_AVX2] = 1;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1))
        isa_ok[LE_ISA_AVXVNNI] = 1;
    if (f && dq && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0)
        isa_ok[LE_ISA_AVX512] = 1;
    return isa_ok[LE_ISA_AVX512]    ? LE_ISA_AVX512
           : isa_ok[LE_ISA_AVXVNNI] ? LE_ISA_AVXVNNI
                                    : LE_ISA_AVX2;
}
#else
static enum le_isa
isa_probe(void)
{
    return LE_ISA_NONE;
}
#endif

static enum le_isa isa_hw, isa_use;

/* The environment can only lower the level (tests and bench compare
 * levels on one machine). */
static enum le_isa
isa_from_env(enum le_isa hw)
{
    const char *no = getenv("LLMUX_NO_SIMD");
    if (no && *no && strcmp(no, "0") != 0)
        return LE_ISA_NONE;
    const char *v = getenv("LLMUX_SIMD");
    enum le_isa want = hw;
    if (v && !strcmp(v, "none"))
        want = LE_ISA_NONE;
    else if (v && !strcmp(v, "avx2"))
        want = LE_ISA_AVX2;
    else if (v && !strcmp(v, "avxvnni"))
        want = LE_ISA_AVXVNNI;
    if (want > hw)
        want = hw;
    while (!isa_ok[want])
        want--;
    return want;
}

/* The table le_type_get serves: type_table with SIMD vec_dots patched in
 * for this CPU, built once (with the fp16 table). */
static struct le_type_traits rt_table[LE_TYPE_COUNT];
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static void
rt_init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        fp16_table[h] = le_fp16_to_fp32((uint16_t)h);
    memcpy(rt_table, type_table, sizeof(rt_table));
    isa_hw = isa_probe();
    isa_use = isa_from_env(isa_hw);
#if defined(__x86_64__)
    if (isa_use >= LE_ISA_AVX2) {
        rt_table[LE_TYPE_Q4_0].vec_dot = le_vec_dot_q4_0_q8_0_avx2;
        rt_table[LE_TYPE_Q8_0].vec_dot = le_vec_dot_q8_0_q8_0_avx2;
        rt_table[LE_TYPE_MXFP4].vec_dot = le_vec_dot_mxfp4_q8_0_avx2;
        rt_table[LE_TYPE_Q4_0].vec_dot_multi =
            le_vec_dot_q4_0_q8_0_multi_avx2;
        rt_table[LE_TYPE_Q4_K].vec_dot = le_vec_dot_q4_K_q8_K_avx2;
        rt_table[LE_TYPE_Q6_K].vec_dot = le_vec_dot_q6_K_q8_K_avx2;
        rt_table[LE_TYPE_Q5_K].vec_dot = le_vec_dot_q5_K_q8_K_avx2;
        rt_table[LE_TYPE_F16].vec_dot = le_vec_dot_f16_f16_avx2;
        rt_table[LE_TYPE_F32].vec_dot = le_vec_dot_f32_f32_avx2;
        rt_table[LE_TYPE_F16].to_float = le_f16_to_float_avx2;
        rt_table[LE_TYPE_Q8_0].from_float = le_quantize_q8_0_avx2;
        rt_table[LE_TYPE_Q8_K].from_float = le_quantize_q8_K_avx2;
    }
    if (isa_use >= LE_ISA_AVX512) {
        rt_table[LE_TYPE_Q8_0].from_float = le_quantize_q8_0_avx512;
        rt_table[LE_TYPE_Q8_K].from_float = le_quantize_q8_K_avx512;
    }
#endif
}

enum le_isa
le_isa_detected(void)
{
    pthread_once(&rt_once, rt_init);
    return isa_hw;
}

enum le_isa
le_isa_active(void)
{
    pthread_once(&rt_once, rt_init);
    return isa_use;
}

int
le_isa_supported(enum le_isa isa)
{
    pthread_once(&rt_once, rt_init);
    return isa >= LE_ISA_NONE && isa <= LE_ISA_AVX512 && isa_ok[isa];
}

const char *
le_isa_name(enum le_isa isa)
{
    static const char *const names[] = {"none", "avx2", "avxvnni", "avx512"};
    return isa >= LE_ISA_NONE && isa <= LE_ISA_AVX512 ? names[isa] : "?";
}

const struct le_type_traits *
le_type_get(uint32_t type)
{
    if (type >= LE_TYPE_COUNT || !type_table[type].name)
        return NULL;
    pthread_once(&rt_once, rt_init);
    return &rt_table[type];
}

const struct le_type_traits *
le_type_get_ref(uint32_t type)
{
    if (type >= LE_TYPE_COUNT || !type_table[type].name)
        return NULL;
    pthread_once(&rt_once, rt_init);
    return &type_table[type];
}

size_t
le_row_size(enum le_type t, int64_t n)
{
    const struct le_type_traits *tt = le_type_get((uint32_t)t);
    if (!tt || n < 0 || n % tt->blck_size != 0)
        return 0;
    return (size_t)(n / tt->blck_size) * tt->type_size;
}
