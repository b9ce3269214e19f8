/*
 * test_act: local_engine/act.c: le_act_expf against libm's expf (at most
 * one ulp apart, the same zeros, infinities and NaNs), and every SIMD
 * kernel (AVX-512, AVX2) of h = silu(h) * h2 and of x = e^(x - m) the CPU
 * has against the plain twins, bit for bit, at every tail length.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../local_engine/le_int.h"
#include "harness.h"

static uint32_t
bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* ulps between two finite floats of the same sign (or both zero) */
static int64_t
ulps(float a, float b)
{
    int64_t x = (int64_t)bits(a), y = (int64_t)bits(b);
    return x > y ? x - y : y - x;
}

static void
test_expf(void)
{
    int64_t worst = 0;
    long n = 0, off = 0;
    /* every 97th float from -120 to 100, and the edges */
    for (float x = -120.0f; x <= 100.0f; x = nextafterf(x, INFINITY)) {
        n++;
        float a = le_act_expf(x), b = expf(x);
        int64_t u = ulps(a, b);
        off += u != 0;
        worst = u > worst ? u : worst;
        for (int s = 0; s < 96 && x < 100.0f; s++)
            x = nextafterf(x, INFINITY);
    }
    fprintf(stderr, "  le_act_expf vs expf: %ld floats, %ld differ, worst %lld ulp\n",
            n, off, (long long)worst);
    T_CHECK(n > 1000000);
    T_CHECK(worst <= 1);
    T_CHECK(le_act_expf(0.0f) == 1.0f);
    T_CHECK(le_act_expf(-0.0f) == 1.0f);
    T_CHECK(le_act_expf(1.0f) == expf(1.0f));
    T_CHECK(isinf(le_act_expf(88.8f)) && le_act_expf(88.8f) > 0);
    T_CHECK(isinf(le_act_expf(INFINITY)));
    T_CHECK(le_act_expf(-INFINITY) == 0.0f);
    T_CHECK(le_act_expf(-104.0f) == 0.0f);
    T_CHECK(le_act_expf(-1000.0f) == 0.0f);
    T_CHECK(le_act_expf(88.72f) == expf(88.72f));
    T_CHECK(isnan(le_act_expf(NAN)));
    /* subnormal results */
    T_CHECK(ulps(le_act_expf(-100.0f), expf(-100.0f)) <= 1);
    T_CHECK(le_act_expf(-100.0f) > 0);
}

static void
test_silu_kernels(void)
{
    enum { N = 300 };
    float h[N], h2[N], a[N], b[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 19);
        h2[i] = (float)((int64_t)(x & 0xffffff) - (1 << 23)) / (float)(1 << 21);
    }
    h[3] = 0.0f;
    h[4] = -0.0f;
    h[5] = 95.0f;   /* e^-x underflows */
    h[6] = -95.0f;  /* e^-x overflows: silu -0 */
    h[7] = 1e-30f;
    h[8] = -120.0f;
    h[9] = INFINITY;
    h[10] = 88.0f;
    h[11] = -88.0f;
    int n_kernels = 0, bad = 0;
    le_silu_mul_fn k[2];
    int nk = 0;
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX512))
        k[nk++] = le_silu_mul_avx512;
    if (le_isa_supported(LE_ISA_AVX2))
        k[nk++] = le_silu_mul_avx2;
#endif
    for (int kk = 0; kk < nk; kk++) {
        n_kernels++;
        for (int n = 0; n <= 70; n++) {
            for (int off = 0; off < 3; off++) {
                memcpy(a, h + off * 13, sizeof(float) * (size_t)n);
                memcpy(b, h + off * 13, sizeof(float) * (size_t)n);
                a[n] = b[n] = 7.0f; /* past the end: untouched */
                le_silu_mul_ref(a, h2, n);
                k[kk](b, h2, n);
                bad += memcmp(a, b, sizeof(float) * (size_t)(n + 1)) != 0;
            }
        }
        memcpy(a, h, sizeof(a));
        memcpy(b, h, sizeof(b));
        le_silu_mul_ref(a, h2, N);
        k[kk](b, h2, N);
        bad += memcmp(a, b, sizeof(a)) != 0;
        /* NaN in, NaN out in both */
        float na[20], nb[20];
        for (int i = 0; i < 20; i++)
            na[i] = nb[i] = i == 9 ? NAN : (float)i - 10.0f;
        le_silu_mul_ref(na, h2, 20);
        k[kk](nb, h2, 20);
        for (int i = 0; i < 20; i++)
            bad += i == 9 ? !(isnan(na[i]) && isnan(nb[i]))
                          : bits(na[i]) != bits(nb[i]);
    }
    fprintf(stderr, "  (%d SIMD silu kernels on this CPU)\n", n_kernels);
    T_EQ_INT(bad, 0);
    /* the twin is silu(x) * y with e^x within one ulp of libm's */
    float one[1] = {2.0f}, y[1] = {3.0f};
    le_silu_mul_ref(one, y, 1);
    float want = 2.0f / (1.0f + expf(-2.0f)) * 3.0f;
    T_CHECK(ulps(one[0], want) <= 2);
    T_CHECK(le_silu_mul_get() != NULL);
}

/* x = e^(x - m): every SIMD kernel against the twin, bit for bit, at
 * every length (the softmax's rows: scores less their maximum). */
static void
test_exp_sub(void)
{
    enum { N = 200 };
    float x[N], a[N + 1], b[N + 1];
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 7919) % 401 - 200) * 0.37f;
    x[5] = -INFINITY;
    x[6] = NAN;
    int bad = 0, nk = 0;
    le_exp_sub_fn k[2];
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX512))
        k[nk++] = le_exp_sub_avx512;
    if (le_isa_supported(LE_ISA_AVX2))
        k[nk++] = le_exp_sub_avx2;
#endif
    for (int kk = 0; kk < nk; kk++)
        for (int n = 0; n <= N; n += n < 40 ? 1 : 23) {
            memcpy(a, x, sizeof(float) * (size_t)n);
            memcpy(b, x, sizeof(float) * (size_t)n);
            a[n] = b[n] = 3.0f;
            le_exp_sub_ref(a, n, 12.5f);
            k[kk](b, n, 12.5f);
            for (int i = 0; i <= n; i++)
                bad += isnan(a[i]) ? !isnan(b[i]) : bits(a[i]) != bits(b[i]);
        }
    T_EQ_INT(bad, 0);
    float one[1] = {1.0f};
    le_exp_sub_ref(one, 1, 1.0f);
    T_CHECK(one[0] == 1.0f);
    T_CHECK(le_exp_sub_get() != NULL);
}

int
main(void)
{
    T_RUN(test_exp_sub);
    T_RUN(test_expf);
    T_RUN(test_silu_kernels);
    return T_END();
}
