/*
 * gemv.c: the decode products' kernel table and its plain C twin.
 *
 * A generation step multiplies each weight matrix by a few activation
 * rows (one token per generating sequence).  le_gemv_at gives, for a
 * repacked weight type, a kernel that walks a run of 16-row groups itself
 * (quants_avx512.c: two groups per register tile), or NULL: model.c's
 * matmul then calls the type's le_gemm_fn group by group.  Both give the
 * same floats (the twin below is that group-by-group loop over the plain
 * C gemm; tests/test_quants.c holds the SIMD kernel against it).
 */
#include "le_int.h"

static void
gemv_groups(le_gemm_fn gemm, int n, const void *w, size_t gb, int ng,
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
    gemv_groups(le_gemm_q4_0_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

void
le_gemv_q8_0_ref(int n, const void *w, size_t gb, int ng,
                 const struct le_pack_act *a, int ntok, float *y, size_t ys,
                 int nr_last)
{
    gemv_groups(le_gemm_q8_0_ref, n, w, gb, ng, a, ntok, y, ys, nr_last);
}

le_gemv_fn
le_gemv_at(enum le_type t, enum le_isa isa)
{
    if (!le_isa_supported(isa))
        return NULL;
#if defined(__x86_64__)
    if (isa == LE_ISA_AVX512 && t == LE_TYPE_Q4_0)
        return le_gemv_q4_0_avx512;
    if (isa == LE_ISA_AVX512 && t == LE_TYPE_Q8_0)
        return le_gemv_q8_0_avx512;
#endif
    if (isa == LE_ISA_NONE && t == LE_TYPE_Q4_0)
        return le_gemv_q4_0_ref;
    if (isa == LE_ISA_NONE && t == LE_TYPE_Q8_0)
        return le_gemv_q8_0_ref;
    return NULL;
}
