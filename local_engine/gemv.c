/*
 * gemv.c: the decode products' kernel table and its plain C twin.
 *
 * A generation step multiplies each weight matrix by a few activation
 * rows (one token per generating sequence).  le_gemv_at gives, for a
 * repacked weight type, a kernel that walks a run of 16-row groups itself
 * and fetches the next group into L2 while it computes one (Q4_0, Q8_0:
 * quants_avx512.c's two groups per register tile and quants_avx2.c's
 * gemm tiles; the K-quants: each level's gemm tiles), or NULL (the float
 * types, and AVX-VNNI's own Q4_0 gemm): model.c's matmul then calls the type's le_gemm_fn
 * group by group.  Both give the same floats (the twins below are that
 * group-by-group loop over the plain C gemm; tests/test_quants.c holds
 * the SIMD kernels against them).
 */
#include "le_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

void
le_gemm_groups(le_gemm_fn gemm, int n, const void *w, size_t gb, int ng,
               const struct le_pack_act *a, int ntok, float *y, size_t ys,
               int nr_last)
{
    for (int g = 0; g < ng; g++)
        gemm(n, (const uint8_t *)w + (size_t)g * gb, a, ntok, y + 16 * g, ys,
             g + 1 == ng ? nr_last : LE_PACK_ROWS);
}

void
le_gemv_q4_0_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    le_gemm_groups(le_gemm_q4_0_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_mxfp4_ref(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    le_gemm_groups(le_gemm_mxfp4_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_q8_0_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    le_gemm_groups(le_gemm_q8_0_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_q4_K_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    le_gemm_groups(le_gemm_q4_K_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_q5_K_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    le_gemm_groups(le_gemm_q5_K_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_q6_K_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    le_gemm_groups(le_gemm_q6_K_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

/* The prefetch plan (le_int.h): -1 by CPU and type, else the
 * environment's for every type; read once. */
static int l1_plan, l1_amd;
static pthread_once_t l1_once = PTHREAD_ONCE_INIT;

static int
cpu_is_amd(void)
{
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    /* vendor string in ebx, edx, ecx: "AuthenticAMD" */
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u &&
           d == 0x69746e65u && c == 0x444d4163u;
#else
    return 0;
#endif
}

static void
l1_init(void)
{
    const char *v = getenv("LLMUX_DEC_PREFETCH");
    l1_plan = v && !strcmp(v, "l1") ? 1 : v && !strcmp(v, "l2") ? 0 : -1;
    l1_amd = cpu_is_amd();
}

int
le_gemv_l1_prefetch(enum le_type t, enum le_isa isa)
{
    pthread_once(&l1_once, l1_init);
    if (l1_plan >= 0)
        return l1_plan;
    return !(l1_amd && ((t == LE_TYPE_Q8_0 && isa == LE_ISA_AVX512) ||
                        t == LE_TYPE_Q4_K || t == LE_TYPE_Q5_K ||
                        t == LE_TYPE_Q6_K));
}

le_gemv_fn
le_gemv_at_pf(enum le_type t, enum le_isa isa, int l1)
{
    if (!le_isa_supported(isa))
        return NULL;
#if defined(__x86_64__)
    if (isa == LE_ISA_AVX512)
        switch (t) {
        case LE_TYPE_Q4_0:
            return l1 ? le_gemv_q4_0_avx512_l1 : le_gemv_q4_0_avx512;
        case LE_TYPE_Q8_0:
            return l1 ? le_gemv_q8_0_avx512_l1 : le_gemv_q8_0_avx512;
        case LE_TYPE_MXFP4:
            return l1 ? le_gemv_mxfp4_avx512_l1 : le_gemv_mxfp4_avx512;
        case LE_TYPE_Q4_K:
            return l1 ? le_gemv_q4_K_avx512_l1 : le_gemv_q4_K_avx512;
        case LE_TYPE_Q5_K:
            return l1 ? le_gemv_q5_K_avx512_l1 : le_gemv_q5_K_avx512;
        case LE_TYPE_Q6_K:
            return l1 ? le_gemv_q6_K_avx512_l1 : le_gemv_q6_K_avx512;
        default: return NULL;
        }
    /* AVX-VNNI's K-quants run the AVX2 gemm (repack.c), so its decode
     * kernel too; its Q4_0 and Q8_0 have gemms of their own */
    if (isa == LE_ISA_AVX2 ||
        (isa == LE_ISA_AVXVNNI && t != LE_TYPE_Q4_0 && t != LE_TYPE_Q8_0))
        switch (t) {
        case LE_TYPE_Q4_0:
            return l1 ? le_gemv_q4_0_avx2_l1 : le_gemv_q4_0_avx2;
        case LE_TYPE_Q8_0:
            return l1 ? le_gemv_q8_0_avx2_l1 : le_gemv_q8_0_avx2;
        case LE_TYPE_MXFP4:
            return l1 ? le_gemv_mxfp4_avx2_l1 : le_gemv_mxfp4_avx2;
        case LE_TYPE_Q4_K:
            return l1 ? le_gemv_q4_K_avx2_l1 : le_gemv_q4_K_avx2;
        case LE_TYPE_Q5_K:
            return l1 ? le_gemv_q5_K_avx2_l1 : le_gemv_q5_K_avx2;
        case LE_TYPE_Q6_K: return le_gemv_q6_K_avx2;
        default: return NULL;
        }
#else
    (void)l1;
#endif
    if (isa == LE_ISA_NONE)
        switch (t) {
        case LE_TYPE_Q4_0: return le_gemv_q4_0_ref;
        case LE_TYPE_Q8_0: return le_gemv_q8_0_ref;
        case LE_TYPE_MXFP4: return le_gemv_mxfp4_ref;
        case LE_TYPE_Q4_K: return le_gemv_q4_K_ref;
        case LE_TYPE_Q5_K: return le_gemv_q5_K_ref;
        case LE_TYPE_Q6_K: return le_gemv_q6_K_ref;
        default: return NULL;
        }
    return NULL;
}

le_gemv_fn
le_gemv_at(enum le_type t, enum le_isa isa)
{
    return le_gemv_at_pf(t, isa, le_gemv_l1_prefetch(t, isa));
}
