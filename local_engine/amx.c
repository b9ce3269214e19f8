/*
 * amx.c: may this process use Intel AMX tiles, and the plain C twin of the
 * AMX-INT8 prefill GEMM in quants_amx.c.
 *
 * Using AMX needs three things, checked once per process (le_amx_usable):
 *   - the CPU: CPUID leaf 7 EDX bits 24 (AMX-TILE) and 25 (AMX-INT8); the
 *     kernel also needs AVX-512 F/BW/VL/VNNI (EBX 16, 30, 31; ECX 11) and
 *     F16C (leaf 1 ECX 29) for its scaling and packing;
 *   - the OS saving the state: XCR0 (XGETBV 0) with the SSE/AVX/AVX-512
 *     bits (0xe6) and both tile bits (17 XTILECFG, 18 XTILEDATA);
 *   - Linux's per-process permission: arch_prctl(ARCH_REQ_XCOMP_PERM,
 *     XFEATURE_XTILEDATA), since 5.16 tile data is off until a process
 *     asks (the signal stack grows by 8 KiB); a refusal (older kernel, a
 *     sandbox) leaves AMX off and the other kernels in use.
 * LLMUX_NO_AMX=1 turns it off, and so does LLMUX_NO_SIMD=1 (which makes
 * the type table plain C).  With LLMUX_LOG=debug the decision is printed
 * once on stderr.
 *
 * The twin (le_gemm_amx_ref) computes, for each output, the same integer
 * block (and, for Q4_K/Q5_K, sub-block and min) sums as the AMX kernel and combines them with the same float
 * operations in the same order, so the two agree bit for bit
 * (tests/test_amx.c); see le_int.h for the formula.
 */
#include "le_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_ok;
static const char *amx_why = "not checked";

#if defined(__x86_64__)
static uint64_t
xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static const char *
amx_check(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return "no CPUID leaf 1";
    if (!(c & (1u << 27)) || !(c & (1u << 29)))
        return "the CPU lacks OSXSAVE or F16C";
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return "no CPUID leaf 7";
    if (!(d & (1u << 24)) || !(d & (1u << 25)))
        return "the CPU has no AMX-TILE/AMX-INT8";
    if (!(b & (1u << 16)) || !(b & (1u << 30)) || !(b & (1u << 31)) ||
        !(c & (1u << 11)))
        return "the CPU lacks AVX-512 F/BW/VL/VNNI";
    uint64_t x = xcr0();
    if ((x & 0xe6) != 0xe6)
        return "the OS does not save the AVX-512 state (XCR0)";
    if ((x & (3u << 17)) != (3u << 17))
        return "the OS does not save the tile state (XCR0 bits 17, 18)";
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return "the kernel refused ARCH_REQ_XCOMP_PERM for tile data";
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
        !(perm & (1ul << XFEATURE_XTILEDATA)))
        return "tile data permission not granted (ARCH_GET_XCOMP_PERM)";
    return NULL;
}
#endif

static void
amx_init(void)
{
    const char *no = getenv("LLMUX_NO_AMX");
    const char *nosimd = getenv("LLMUX_NO_SIMD"); /* plain C everywhere */
    if (no && *no && strcmp(no, "0") != 0) {
        amx_why = "LLMUX_NO_AMX is set";
    } else if (nosimd && *nosimd && strcmp(nosimd, "0") != 0) {
        amx_why = "LLMUX_NO_SIMD is set";
    } else {
#if defined(__x86_64__)
        amx_why = amx_check();
        amx_ok = amx_why == NULL;
        if (amx_ok)
            amx_why = "AMX-INT8 in use for prompt batches";
#else
        amx_why = "not an x86-64 build";
#endif
    }
    const char *lv = getenv("LLMUX_LOG");
    if (lv && strcmp(lv, "debug") == 0)
        fprintf(stderr, "llmux: debug: AMX %s: %s\n", amx_ok ? "on" : "off",
                amx_why);
}

int
le_amx_usable(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_ok;
}

const char *
le_amx_status(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_why;
}

int
le_gemm_amx_type(enum le_type t)
{
    return t == LE_TYPE_Q8_0 || t == LE_TYPE_Q4_0 || t == LE_TYPE_Q4_K ||
           t == LE_TYPE_Q5_K || t == LE_TYPE_Q6_K;
}

/* The figures behind these are in le_int.h. */
int
le_amx_min_tok(enum le_type t)
{
    if (t == LE_TYPE_Q8_0 || t == LE_TYPE_Q4_0)
        return 32;
    /* K-quants: their AMX panels are unpacked from the GGUF mapping on
     * every call; the repacked AVX-512 GEMM is as fast or faster there
     * and reads the copy generation reads (le_int.h) */
    if (le_isa_active() >= LE_ISA_AVX512)
        return 0;
    return le_gemm_amx_type(t) ? 64 : 0;
}

/* ------------------------------------------------------------------ */
/* The twin.                                                            */

/* Block layouts as in quants.c (pinned to the same sizes). */
struct amx_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
_Static_assert(sizeof(struct amx_q4_0) == 18, "as in quants.c");
struct amx_q8_0 {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct amx_q8_0) == 34, "as in quants.c");

/* The 32 weights of block b of a row as int8 and its scale. */
static float
ref_unpack(enum le_type wt, const uint8_t *row, int b, int8_t *q)
{
    if (wt == LE_TYPE_Q8_0) {
        const struct amx_q8_0 *x = (const struct amx_q8_0 *)row + b;
        memcpy(q, x->qs, 32);
        return le_fp16_to_fp32(x->d);
    }
    const struct amx_q4_0 *x = (const struct amx_q4_0 *)row + b;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((x->qs[j] & 0x0f) - 8);
        q[j + 16] = (int8_t)((x->qs[j] >> 4) - 8);
    }
    return le_fp16_to_fp32(x->d);
}

struct amx_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct amx_q4_K) == 144, "as in quants.c");
struct amx_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct amx_q5_K) == 176, "as in quants.c");
struct amx_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
_Static_assert(sizeof(struct amx_q6_K) == 210, "as in quants.c");
struct amx_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
_Static_assert(sizeof(struct amx_q8_K) == 292, "as in quants.c");

/* The 256 values (0..15 or 0..31) of K-quant block b of a row, its 8
 * scales and mins and d, dmin. */
static void
ref_unpack_k(enum le_type wt, const uint8_t *row, int b, int8_t *q, int *sc,
             int *mn, float *d, float *dmin)
{
    const struct amx_q4_K *x4 = (const struct amx_q4_K *)row + b;
    const struct amx_q5_K *x5 = (const struct amx_q5_K *)row + b;
    const uint8_t *hdr = wt == LE_TYPE_Q4_K ? (const uint8_t *)x4
                                            : (const uint8_t *)x5;
    const struct amx_q4_K *h = (const void *)hdr; /* d, dmin, scales */
    const uint8_t *qs = wt == LE_TYPE_Q4_K ? x4->qs : x5->qs;
    *d = le_fp16_to_fp32(h->d);
    *dmin = le_fp16_to_fp32(h->dmin);
    for (int s = 0; s < 8; s++)
        le_k4_scale_min(h->scales, s, &sc[s], &mn[s]);
    for (int jj = 0; jj < 4; jj++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[jj * 32 + l] & 0x0f, hi = qs[jj * 32 + l] >> 4;
            if (wt == LE_TYPE_Q5_K) {
                lo |= ((x5->qh[l] >> (2 * jj)) & 1) << 4;
                hi |= ((x5->qh[l] >> (2 * jj + 1)) & 1) << 4;
            }
            q[jj * 64 + l] = (int8_t)lo;
            q[jj * 64 + 32 + l] = (int8_t)hi;
        }
}

/* Q6_K block b: 256 values -32..31, 16 scales, d (no mins). */
static void
ref_unpack_q6_K(const uint8_t *row, int b, int8_t *q, int *sc, float *d)
{
    const struct amx_q6_K *x = (const struct amx_q6_K *)row + b;
    *d = le_fp16_to_fp32(x->d);
    for (int s = 0; s < 16; s++)
        sc[s] = x->scales[s];
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = x->ql + n * 64, *qh = x->qh + n * 32;
        for (int l = 0; l < 32; l++) {
            int8_t *o = q + n * 128 + l;
            o[0] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
            o[32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) -
                             32);
            o[64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[96] =
                (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void
ref_row_k(enum le_type wt, int nsb, const uint8_t *wr, const uint8_t *xr,
          float *out)
{
    const struct amx_q8_K *a = (const void *)xr;
    int8_t q[256];
    int sc[16], mn[8] = {0};
    /* sub-blocks of len values: 8 x 32, or Q6_K's 16 x 16 */
    int nsub = wt == LE_TYPE_Q6_K ? 16 : 8, len = 256 / nsub;
    float acc = 0;
    for (int b = 0; b < nsb; b++) {
        float d, dmin = 0;
        if (wt == LE_TYPE_Q6_K)
            ref_unpack_q6_K(wr, b, q, sc, &d);
        else
            ref_unpack_k(wt, wr, b, q, sc, mn, &d, &dmin);
        float fi = 0;
        int32_t mi = 0;
        for (int s = 0; s < nsub; s++) {
            int32_t isum = 0;
            for (int j = 0; j < len; j++)
                isum += q[s * len + j] * a[b].qs[s * len + j];
            fi = fmaf((float)isum, (float)sc[s], fi);
        }
        for (int s = 0; s < 8 && wt != LE_TYPE_Q6_K; s++)
            mi += mn[s] * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
        acc = acc + (a[b].d * (d * fi) - a[b].d * (dmin * (float)mi));
    }
    *out = acc;
}

int
le_gemm_amx_ref(enum le_type wt, int n_in, const void *w, size_t w_row,
                int r0, int r1, const void *xq, size_t x_row, int n_tok,
                float *y, int n_out)
{
    int kq = wt == LE_TYPE_Q4_K || wt == LE_TYPE_Q5_K || wt == LE_TYPE_Q6_K;
    if (!le_gemm_amx_type(wt) || n_in % (kq ? 256 : 32))
        return -1;
    int nb = n_in / 32;
    int8_t q[32];
    for (int r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;
        for (int t = 0; t < n_tok; t++) {
            const uint8_t *xr = (const uint8_t *)xq + (size_t)t * x_row;
            if (kq) {
                ref_row_k(wt, n_in / 256, wr, xr, &y[(size_t)t * n_out + r]);
                continue;
            }
            const struct amx_q8_0 *a = (const void *)xr;
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                float dw = ref_unpack(wt, wr, b, q);
                int32_t isum = 0;
                for (int j = 0; j < 32; j++)
                    isum += q[j] * a[b].qs[j];
                acc = fmaf((float)isum, le_fp16_to_fp32(a[b].d) * dw, acc);
            }
            y[(size_t)t * n_out + r] = acc;
        }
    }
    return 0;
}
