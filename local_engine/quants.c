/*
 * quants.c: the per-type table of the local engine (plain C reference).
 *
 * For each tensor type: dequantise (to_float), quantise (from_float) and
 * the dot product against the type's vec_dot_type, bit-exact to the
 * GGUF/ggml block layouts.  The SIMD kernels (quants_avx2.c) are twins of
 * these and are held against them in tests/test_quants.c.
 *
 * Invariants: every function takes counts that are multiples of the
 * type's block size (callers check shapes; gguf.c checks ne[0]); blocks are
 * read and written as packed little-endian structs whose sizes are pinned
 * with _Static_assert.  Nothing here allocates.
 */
#include "le_int.h"

#include <math.h>
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

#define FP16(x) le_fp16_to_fp32(x)
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
/* The table.                                                           */

static const struct le_type_traits type_table[LE_TYPE_COUNT] = {
    [LE_TYPE_F32] = {"f32", 1, 4, 0, f32_to_float, f32_from_float,
                     f32_vec_dot, LE_TYPE_F32},
    [LE_TYPE_F16] = {"f16", 1, 2, 0, f16_to_float, f16_from_float,
                     f16_vec_dot, LE_TYPE_F16},
    [LE_TYPE_BF16] = {"bf16", 1, 2, 0, bf16_to_float, bf16_from_float,
                      bf16_vec_dot, LE_TYPE_BF16},
};

const struct le_type_traits *
le_type_get(uint32_t type)
{
    if (type >= LE_TYPE_COUNT || !type_table[type].name)
        return NULL;
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
