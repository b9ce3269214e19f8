/*
 * le_int.h: structs and functions shared inside local_engine only.  Never
 * included from another folder.
 *
 * Modules (one file each, prefix le_):
 *   gguf.c      GGUF v2/v3 reader (mmap / read / mlock), every length checked
 *   quants.c    per-type table: dequantise, quantise, dot product (plain C;
 *               SIMD entries patched in per ISA level), ISA detection
 *   quants_avx2.c, quants_avx512.c  SIMD twins (x86-64, per-file flags)
 *   repack.c    weights repacked at load into 16-row groups, plain C
 *               kernels over them (memory: see struct le_model)
 *   tokenizer.c SPM and byte-level BPE tokenizers from GGUF metadata
 *   unicode.c   code point categories for the BPE pre-tokenizers
 *   model.c     llama / qwen2 weights and the forward pass (batched)
 *   sched.c     continuous batching, prefix cache, admission
 *   sampler.c, grammar.c (constrained generation), chat.c, pool.c
 *               (thread pool), cli.c
 */
#ifndef LLMUX_LE_INT_H
#define LLMUX_LE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "local_engine.h"

/* ------------------------------------------------------------------ */
/* Tensor types (values are GGUF's ggml_type numbers).                  */

enum le_type {
    LE_TYPE_F32 = 0,
    LE_TYPE_F16 = 1,
    LE_TYPE_Q4_0 = 2,
    LE_TYPE_Q4_1 = 3,
    LE_TYPE_Q5_0 = 6,
    LE_TYPE_Q5_1 = 7,
    LE_TYPE_Q8_0 = 8,
    LE_TYPE_Q8_1 = 9,
    LE_TYPE_Q2_K = 10,
    LE_TYPE_Q3_K = 11,
    LE_TYPE_Q4_K = 12,
    LE_TYPE_Q5_K = 13,
    LE_TYPE_Q6_K = 14,
    LE_TYPE_Q8_K = 15,
    LE_TYPE_BF16 = 30,
    /* OCP microscaling FP4: blocks of 32 E2M1 values (4 bits each, low
     * nibbles the first 16) sharing an E8M0 power-of-two scale byte
     * first; gpt-oss's experts */
    LE_TYPE_MXFP4 = 39,
    LE_TYPE_COUNT = 40
};

/* MXFP4's values as integers (twice E2M1's, so that they are whole) and
 * the block scale of byte e halved to match: 2^(e - 128), exact for
 * every byte (subnormal for e < 2). */
extern const int8_t le_mxfp4_values[16];
static inline float
le_e8m0_half(uint8_t e)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/*
 * What the engine needs of a type.  A row of n values (n a multiple of
 * blck_size) takes n / blck_size * type_size bytes.
 *   to_float:   dequantise k values (k % blck_size == 0)
 *   from_float: quantise k values (used for activations in vec_dot_type,
 *               and by the test GGUF writer); NULL if not supported
 *   vec_dot:    *s = dot(x, y) over n values, x of this type, y of
 *               vec_dot_type
 *   vec_dot_multi: one weight row x against nc activation rows:
 *               s[c * bs] = dot(x, y + c * by bytes) for c < nc, exactly
 *               what nc vec_dot calls give (bit for bit), with x's blocks
 *               unpacked once for up to 4 rows (for a batch of prompt
 *               tokens).  NULL for types without such a kernel.
 */
struct le_type_traits {
    const char *name; /* "q4_0" */
    int blck_size;    /* values per block */
    size_t type_size; /* bytes per block */
    int is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float)(const float *x, void *y, int64_t k);
    void (*vec_dot)(int n, float *s, const void *x, const void *y);
    enum le_type vec_dot_type;
    void (*vec_dot_multi)(int n, float *s, size_t bs, const void *x,
                          const void *y, size_t by, int nc);
};

/* NULL for a type number this build does not support. */
const struct le_type_traits *le_type_get(uint32_t type);
/* Bytes of a row of n values, 0 if n is not a multiple of the block. */
size_t le_row_size(enum le_type t, int64_t n);
/* The plain C table whatever the CPU (le_type_get may hold SIMD vec_dot
 * kernels instead; tests hold those against these).  NULL as le_type_get. */
const struct le_type_traits *le_type_get_ref(uint32_t type);
/* AVX2 kernels (quants_avx2.c, x86 only; le_type_get uses them when the
 * active level is AVX2 or above, see le_isa_active).  Same contract as
 * le_type_traits.vec_dot; the same integer sums as the plain C twins,
 * results bit-identical for the K-quants and within 1e-5 of sum |x_i y_i|
 * for Q4_0/Q8_0 (8-lane float accumulation; test_quants.c). */
void le_vec_dot_q4_0_q8_0_avx2(int n, float *s, const void *x, const void *y);
void le_vec_dot_q8_0_q8_0_avx2(int n, float *s, const void *x, const void *y);
void le_vec_dot_mxfp4_q8_0_avx2(int n, float *s, const void *x,
                                const void *y);
/* vec_dot_multi for Q4_0 (le_type_traits; bit-identical to the
 * single-row kernel above). */
void le_vec_dot_q4_0_q8_0_multi_avx2(int n, float *s, size_t bs,
                                     const void *x, const void *y, size_t by,
                                     int nc);
void le_vec_dot_q4_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void le_vec_dot_q6_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void le_vec_dot_q5_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void le_vec_dot_f16_f16_avx2(int n, float *s, const void *x, const void *y);
/* F32: products exact in double, summed in double lanes; the plain C
 * twin's float result but for rare ties (test_quants.c: within 1e-6). */
void le_vec_dot_f32_f32_avx2(int n, float *s, const void *x, const void *y);
void le_f16_to_float_avx2(const void *x, float *y, int64_t k);

/* AMX-INT8 prefill GEMM (quants_amx.c; detection and the plain C twin in
 * amx.c).
 *
 * le_amx_usable: 1 when this process may use AMX tiles: CPU (AMX-TILE,
 * AMX-INT8, AVX-512 F/BW/VL/VNNI, F16C), OS (XCR0) and Linux's
 * ARCH_REQ_XCOMP_PERM (asked once per process), and LLMUX_NO_AMX and
 * LLMUX_NO_SIMD unset or 0.  Checked once, thread-safe.  le_amx_status: why, in words (static).
 * le_gemm_amx_type: 1 for the weight types the GEMM takes (Q8_0, Q4_0
 * with activations in Q8_0; Q4_K, Q5_K, Q6_K with activations in Q8_K).
 *
 * le_gemm_amx: for weight rows r0 <= r < r1 and tokens t < n_tok,
 * y[t * n_out + r] = the dot of weight row r and activation row t, from
 * the weight in its GGUF layout (row r at w + r * w_row) and n_in-wide
 * activation rows in the type's vec_dot_type (row t at xq + t * x_row):
 *   Q8_0, Q4_0: over 32-value blocks b, in order,
 *       acc = fmaf((float)isum_b, d_act(t, b) * d_w(r, b), acc)
 *     (isum_b the exact integer dot of the block): within 1e-5 of
 *     sum |x_i y_i| of the type's vec_dot (another rounding order);
 *   Q4_K, Q5_K, Q6_K: over 256-value blocks, in order,
 *       fi = the fmaf sum over sub-blocks s (8 of 32 values; Q6_K 16 of
 *            16) of (float)isum_s * sc_s,
 *       mi = sum of mn_s * bsum_s (exact; 0 for Q6_K, dmin 0),
 *       acc = acc + (d_act * (d * fi) - d_act * (dmin * (float)mi)):
 *     the plain C vec_dot's expression, so equal to it whenever the
 *     partial sums stay below 2^24 in magnitude (always in practice);
 * bit-identical to le_gemm_amx_ref in every case.
 * Only when le_amx_usable(); any thread, uses a per-thread scratch buffer
 * that lives until the thread exits.  Returns 0, or -1 (nothing written)
 * for a type it does not take or when the scratch cannot be allocated. */
/* The 6-bit scale and min of 32-value sub-block j (0..7) of a Q4_K/Q5_K
 * block from its 12 scale bytes (ggml's get_scale_min_k4). */
static inline void
le_k4_scale_min(const uint8_t *q, int j, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
/* Milliseconds on the monotonic clock (engine.c). */
double le_now_ms(void);

int le_amx_usable(void);
const char *le_amx_status(void);
int le_gemm_amx_type(enum le_type t);
int le_gemm_amx(enum le_type wt, int n_in, const void *w, size_t w_row,
                int r0, int r1, const void *xq, size_t x_row, int n_tok,
                float *y, int n_out);
int le_gemm_amx_ref(enum le_type wt, int n_in, const void *w, size_t w_row,
                    int r0, int r1, const void *xq, size_t x_row, int n_tok,
                    float *y, int n_out);

/* ------------------------------------------------------------------ */
/* ISA levels and repacked weights (quants.c, repack.c, quants_avx2.c,  */
/* quants_avx512.c).                                                    */

/* Kernel levels, in order of preference.  AVX2 = AVX2 + FMA + F16C;
 * AVXVNNI = AVX2 + AVX-VNNI (256-bit vpdpbusd); AVX512 = F, BW, VL, DQ
 * and VNNI with the OS saving the ZMM and opmask state (XCR0 bits 5-7,
 * checked with xgetbv).  A CPU may have AVX512 without AVXVNNI. */
enum le_isa {
    LE_ISA_NONE = 0,
    LE_ISA_AVX2 = 1,
    LE_ISA_AVXVNNI = 2,
    LE_ISA_AVX512 = 3
};
/* The best level this CPU and OS support (NONE off x86-64). */
enum le_isa le_isa_detected(void);
/* 1 if the CPU and OS run level isa's kernels. */
int le_isa_supported(enum le_isa isa);
/* What the engine uses: the detected level, lowered by the environment
 * (read once) to the best supported level at or below: LLMUX_NO_SIMD=1 or
 * LLMUX_SIMD=none -> NONE, LLMUX_SIMD=avx2|avxvnni|avx512 -> at most that.
 * NONE also turns off the AVX2 vec_dots of le_type_get and the
 * repacking. */
enum le_isa le_isa_active(void);
/* "none", "avx2", "avxvnni", "avx512" */
const char *le_isa_name(enum le_isa isa);

/* Rows interleaved in one repacked group (repack.c draws the layouts). */
#define LE_PACK_ROWS 16
/* Q4_K: bytes of per-super-block scales of a group (d, dmin, sc, mn). */
#define LE_PACK_Q4_K_META 320
/* Q6_K: bytes of per-super-block scales of a group (sc pairs, d). */
#define LE_PACK_Q6_K_META 288

/* 0x4B400000 is the float 1.5 * 2^23: its bits plus an int32 i, |i| <
 * 2^22, are the bits of the float 1.5 * 2^23 + i (same exponent). */
#define LE_MAGIC_I 0x4B400000
#define LE_MAGIC_F 12582912.0f

/* Prep of a Q8_0 activation block (le_pack_prep). */
struct le_prep_q8_0 {
    float d;        /* the block's scale */
    int32_t sum;    /* sum of its 32 quants */
    int32_t neg8;   /* -8 * sum (Q4_0's offset), */
    int32_t neg128; /* -128 * sum (VNNI Q8_0's bias): broadcast as is */
    /* neg8, neg128 + 0x4B400000 (the bits of 1.5 * 2^23): a chain of
     * vpdpbusd started from them ends at the bits of the float
     * 1.5 * 2^23 + isum, exact for |isum| < 2^22 (quants_avx512.c's
     * decode kernel) */
    int32_t neg8m, neg128m;
};

/* Activations of one product, made once: ntok rows in the weight type's
 * vec_dot_type (q_row bytes apart) and their prep rows (p_row apart). */
struct le_pack_act {
    const uint8_t *q;
    size_t q_row;
    const uint8_t *p;
    size_t p_row;
    /* Q8_0 only, or NULL: the same quants as AMX A tiles, 16 rows x 32
     * bytes per tile and block, tile tt's block b at t + (tt * n / 32 +
     * b) * 512 (le_quant_job.t); the AMX kernels load these instead of
     * the 34-byte-strided rows */
    const uint8_t *t;
};

/* One group of LE_PACK_ROWS repacked rows (w, n values each) against ntok
 * activation rows: y[t * ys + r] = dot(row r, activation t) for r < nr
 * (rows nr..15 are not stored), bit-identical to the type's vec_dot. */
typedef void (*le_gemm_fn)(int n, const void *w, const struct le_pack_act *a,
                           int ntok, float *y, size_t ys, int nr);

struct le_pack_traits {
    enum le_type type;     /* weight type */
    enum le_type act_type; /* vec_dot_type */
    int blck;              /* values per block */
    size_t col_bytes;      /* bytes of one block of all 16 rows */
    void (*pack)(const void *src, size_t row_bytes, int nr, int n,
                 void *dst);
    le_gemm_fn gemm;
    /* Prompt batches (from le_amx_min_tok) through the AMX tiles from
     * this layout (quants_amx.c): le_gemm_amx_ref's results bit for bit,
     * not gemm's; needs the prep rows too.  NULL unless the type has one,
     * isa is AVX512 and le_amx_usable(). */
    le_gemm_fn gemm_amx;
};

/* The kernels of type t at level isa: 1 and *out filled, or 0 if t is not
 * repacked or isa is above le_isa_detected(). */
int le_pack_traits_at(enum le_type t, enum le_isa isa,
                      struct le_pack_traits *out);
/* Bytes of one group for rows of n values (a multiple of 64). */
size_t le_pack_group_bytes(const struct le_pack_traits *pt, int n);
/* Packs nr <= 16 rows (row_bytes apart, n values each) into dst
 * (le_pack_group_bytes; rows nr..15 are zero). */
void le_pack_rows(const struct le_pack_traits *pt, const void *src,
                  size_t row_bytes, int nr, int n, void *dst);
/* Prep row of one activation row q (n values of vdt) into prep
 * (le_pack_prep_size bytes; 0 for types without one). */
void le_pack_prep(enum le_type vdt, const void *q, int n, void *prep);
size_t le_pack_prep_size(enum le_type vdt, int n);
/* The activation rows of one product quantised as a pool job (model.c's
 * matmul, le_pool_run): row t of x (n floats) -> q + t * q_row in vdt
 * (le_type_get's from_float) and, when p != NULL, its prep row at p + t *
 * p_row; thread ith of nth takes a contiguous share of the rows.  The
 * bytes do not depend on the split. */
struct le_quant_job {
    enum le_type vdt;
    const float *x;
    int n, n_rows;
    uint8_t *q;
    size_t q_row;
    uint8_t *p;
    size_t p_row;
    /* when t != NULL (vdt Q8_0): rows t_from.. also as A tiles (struct
     * le_pack_act.t), row r in tile (r - t_from) / 16 */
    uint8_t *t;
    int t_from;
};
void le_quant_rows(void *arg, int ith, int nth);

/* Activation quantisers (le_type_traits.from_float of Q8_0 / Q8_K at
 * those levels), bit-identical to the plain C ones. */
void le_quantize_q8_0_avx2(const float *x, void *y, int64_t k);
void le_quantize_q8_K_avx2(const float *x, void *y, int64_t k);
void le_quantize_q8_0_avx512(const float *x, void *y, int64_t k);
void le_quantize_q8_K_avx512(const float *x, void *y, int64_t k);

/* The kernels, per level (same contract as le_gemm_fn). */
void le_gemm_q4_0_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q8_0_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_K_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_0_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_q8_0_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_K_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_0_avxvnni(int n, const void *w, const struct le_pack_act *a,
                          int ntok, float *y, size_t ys, int nr);
void le_gemm_q8_0_avxvnni(int n, const void *w, const struct le_pack_act *a,
                          int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_0_amx(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q8_0_amx(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_0_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);
/* MXFP4 repacked as Q4_0 (the codes' bytes, the scales 2^(e - 128) as
 * fp16): repack.c's twin and the AVX-512 and AVX2 gemm and decode
 * kernels.  Only
 * a tensor every scale of which fp16 holds is repacked (le_pack_accepts);
 * the others stay on the per-row vec_dot, with the same floats. */
void le_gemm_mxfp4_ref(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_mxfp4_avx512(int n, const void *w, const struct le_pack_act *a,
                          int ntok, float *y, size_t ys, int nr);
void le_gemv_mxfp4_ref(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_mxfp4_avx512(int n, const void *w, size_t gb, int ng,
                          const struct le_pack_act *a, int ntok, float *y,
                          size_t ys, int nr_last);
void le_gemv_mxfp4_avx512_l1(int n, const void *w, size_t gb, int ng,
                             const struct le_pack_act *a, int ntok, float *y,
                             size_t ys, int nr_last);
void le_gemm_mxfp4_avx2(int n, const void *w, const struct le_pack_act *a,
                        int ntok, float *y, size_t ys, int nr);
void le_gemv_mxfp4_avx2(int n, const void *w, size_t gb, int ng,
                        const struct le_pack_act *a, int ntok, float *y,
                        size_t ys, int nr_last);
void le_gemv_mxfp4_avx2_l1(int n, const void *w, size_t gb, int ng,
                           const struct le_pack_act *a, int ntok, float *y,
                           size_t ys, int nr_last);
/* 1 when the bytes of a tensor of type t (nbytes) can be repacked: all
 * but MXFP4 always; MXFP4 when every block's scale is 2^-24 .. 2^15. */
int le_pack_accepts(enum le_type t, const void *data, size_t nbytes);
void le_gemm_q8_0_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_K_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);
void le_gemm_q5_K_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q5_K_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_K_avx2_l2(int n, const void *w, const struct le_pack_act *a,
                          int ntok, float *y, size_t ys, int nr);
void le_gemm_q5_K_avx2_l2(int n, const void *w, const struct le_pack_act *a,
                          int ntok, float *y, size_t ys, int nr);
void le_gemm_q5_K_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);
void le_gemm_q4_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                            int ntok, float *y, size_t ys, int nr);
void le_gemm_q5_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                            int ntok, float *y, size_t ys, int nr);
void le_gemm_q6_K_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_q6_K_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_q6_K_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);
void le_gemm_q6_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                            int ntok, float *y, size_t ys, int nr);
void le_gemm_f16_ref(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr);
void le_gemm_f16_avx2(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_f16_avx512(int n, const void *w, const struct le_pack_act *a,
                        int ntok, float *y, size_t ys, int nr);
void le_gemm_bf16_ref(int n, const void *w, const struct le_pack_act *a,
                      int ntok, float *y, size_t ys, int nr);
void le_gemm_bf16_avx2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr);
void le_gemm_bf16_avx512(int n, const void *w, const struct le_pack_act *a,
                         int ntok, float *y, size_t ys, int nr);

/* Attention over an F16 KV cache for the g query heads that share one KV
 * head (attn.c states the contract; attn_avx512.c and attn_avx2.c the
 * SIMD twins).  scores: sc[h * scs + p] = scale * the dot of fp16 query
 * head h (q + h * hd) and key row p (k + p * ks bytes), h < g, p < n.
 * values: out[h * hd + i] = sum over p < n in order of
 * (w[h * wst + p] * inv[h]) * value i of row p of v (vs bytes apart).
 * scores also writes mx[h] = le_attn_row_max(n, row h of sc), up to the
 * sign of a zero maximum (expf(s - mx) is the same either way), and may
 * prefetch the n rows at pv (ks bytes apart: the V rows values will
 * read; NULL: none).  Each
 * head's result is the same bits whatever g (a call for g heads is g
 * calls for one).  to_f16: y[i] = le_fp32_to_fp16(x[i]), i < n, bit
 * for bit, any n.  le_attn_f16_get: the kernels for head size hd at the
 * active ISA level (1: SIMD scores and values, 0: the plain C twin's
 * scores; to_f16 and values are the level's at any hd, values SIMD for
 * hd a multiple of its block: 64 values AVX-512, 32 AVX2). */
struct le_attn_f16 {
    void (*scores)(int hd, int g, int n, const uint16_t *q, const uint8_t *k,
                   size_t ks, float scale, float *sc, size_t scs, float *mx,
                   const uint8_t *pv);
    void (*values)(int hd, int g, int n, const float *w, size_t wst,
                   const float *inv, const uint8_t *v, size_t vs, float *out);
    void (*to_f16)(int n, const float *x, uint16_t *y);
};
int le_attn_f16_get(int hd, struct le_attn_f16 *out);

/* The feed-forward activation h[i] = silu(h[i]) * h2[i], i < n (act.c: the
 * contract, e^x by le_act_expf).  le_silu_mul_get: the kernel for the
 * active level (AVX-512, AVX2 or the plain twin), bit-identical to the
 * twin. */
typedef void (*le_silu_mul_fn)(float *h, const float *h2, int n);
float le_act_expf(float x);
void le_silu_mul_ref(float *h, const float *h2, int n);
#if defined(__x86_64__)
void le_silu_mul_avx512(float *h, const float *h2, int n);
void le_silu_mul_avx2(float *h, const float *h2, int n);
#endif
le_silu_mul_fn le_silu_mul_get(void);
/* The softmax's x[i] = le_act_expf(x[i] - m), i < n; le_exp_sub_get: the
 * kernel for the active level, bit-identical to the twin. */
typedef void (*le_exp_sub_fn)(float *x, int n, float m);
void le_exp_sub_ref(float *x, int n, float m);
#if defined(__x86_64__)
void le_exp_sub_avx512(float *x, int n, float m);
void le_exp_sub_avx2(float *x, int n, float m);
#endif
le_exp_sub_fn le_exp_sub_get(void);
/* m = x[i] > m ? x[i] : m over i < n from -INFINITY (NaNs skipped) */
float le_attn_row_max(int n, const float *x);
void le_attn_scores_f16_ref(int hd, int g, int n, const uint16_t *q,
                            const uint8_t *k, size_t ks, float scale, float *sc,
                            size_t scs, float *mx,
                            const uint8_t *pv);
void le_attn_values_f16_ref(int hd, int g, int n, const float *w, size_t wst,
                            const float *inv, const uint8_t *v, size_t vs,
                            float *out);
void le_attn_to_f16_ref(int n, const float *x, uint16_t *y);
void le_attn_scores_f16_avx2(int hd, int g, int n, const uint16_t *q,
                             const uint8_t *k, size_t ks, float scale,
                             float *sc, size_t scs, float *mx,
                            const uint8_t *pv);
void le_attn_values_f16_avx2(int hd, int g, int n, const float *w, size_t wst,
                             const float *inv, const uint8_t *v, size_t vs,
                             float *out);
void le_attn_to_f16_avx2(int n, const float *x, uint16_t *y);
void le_attn_scores_f16_avx512(int hd, int g, int n, const uint16_t *q,
                               const uint8_t *k, size_t ks, float scale,
                               float *sc, size_t scs, float *mx,
                            const uint8_t *pv);
void le_attn_values_f16_avx512(int hd, int g, int n, const float *w, size_t wst,
                               const float *inv, const uint8_t *v, size_t vs,
                               float *out);
void le_attn_to_f16_avx512(int n, const float *x, uint16_t *y);

/* A decode kernel's fetch of the next group into L2 while it computes one
 * (quants_avx2.c, quants_avx512.c): pass i of np, walking nb blocks,
 * takes its share of the len bytes at pf, `step` bytes (whole lines) a
 * block from p.  p NULL: nothing to fetch (a plain gemm call). */
struct le_pf {
    const uint8_t *p;
    size_t step;
};

static inline struct le_pf
le_pf_share(const uint8_t *pf, size_t len, int i, int np, int nb)
{
    struct le_pf s = {NULL, 0};
    if (!pf)
        return s;
    size_t a = len * (size_t)i / (size_t)np & ~(size_t)63;
    size_t b = len * (size_t)(i + 1) / (size_t)np & ~(size_t)63;
    s.p = pf + a;
    s.step = ((b - a) / (size_t)nb + 63) & ~(size_t)63;
    return s;
}

/* Decode products (gemv.c, quants_avx512.c, quants_avx2.c): ng repacked groups of
 * n-value rows, gb bytes apart from w, against ntok activation rows:
 * y[t * ys + 16 g + r] = dot(row r of group g, activation t), r < 16
 * except r < nr_last in the last group; the floats of the type's
 * le_gemm_fn called group by group (bit for bit, for any ntok and ng).
 * le_gemv_at: the kernel of type t at level isa, or NULL (then call the
 * le_gemm_fn per group); the _ref twins are the plain C loop. */
typedef void (*le_gemv_fn)(int n, const void *w, size_t gb, int ng,
                           const struct le_pack_act *a, int ntok, float *y,
                           size_t ys, int nr_last);
le_gemv_fn le_gemv_at(enum le_type t, enum le_isa isa);
/* What a le_gemv_fn computes, by a le_gemm_fn called group by group (the
 * twins below; model.c for types without a decode kernel). */
void le_gemm_groups(le_gemm_fn gemm, int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last);
/* The kernel with a given prefetch plan (the same floats): l1 1 also
 * fetches each block's bytes a few blocks ahead into L1, 0 leaves that to
 * the hardware (both fetch the next groups into L2).  le_gemv_at, and
 * repack.c for the generation passes of the AVX-512 Q4_K, Q5_K and Q6_K
 * kernels and the AVX2 Q4_K and Q5_K ones (their _l2 twins skip the
 * 4 KiB lookahead), take
 * le_gemv_l1_prefetch(t, isa)'s plan: LLMUX_DEC_PREFETCH=l1 or l2 for
 * every type, else l1 but l2 on AMD for Q4_K, Q5_K and Q6_K and the
 * AVX-512 Q8_0 (the AVX2 Q8_0 decode kernel generated 1.04-1.09x faster
 * with the lookahead on a Zen 4: 155-162 vs 149-151 t/s, q8_0 slice).  On a Zen 4
 * (2 threads, the 1B slices, interleaved llmux bench runs) generation
 * without the L1 lookahead was 1.02-1.13x (q8_0), 1.17-1.24x (q4_k),
 * 1.07-1.24x (q5_k) and 1.14-1.17x (q6_k) faster, prompts the same, and
 * the q4_0 models 1.01-1.09x slower; the Xeons of earlier sessions were
 * measured with the lookahead.  Levels without the choice ignore l1. */
le_gemv_fn le_gemv_at_pf(enum le_type t, enum le_isa isa, int l1);
int le_gemv_l1_prefetch(enum le_type t, enum le_isa isa);
void le_gemv_q4_0_ref(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last);
void le_gemv_q8_0_ref(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last);
void le_gemv_q4_0_avx512(int n, const void *w, size_t gb, int ng,
                         const struct le_pack_act *a, int ntok, float *y,
                         size_t ys, int nr_last);
void le_gemv_q8_0_avx512(int n, const void *w, size_t gb, int ng,
                         const struct le_pack_act *a, int ntok, float *y,
                         size_t ys, int nr_last);
void le_gemv_q4_0_avx2(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_q8_0_avx2(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_q4_0_avx2_l1(int n, const void *w, size_t gb, int ng,
                          const struct le_pack_act *a, int ntok, float *y,
                          size_t ys, int nr_last);
void le_gemv_q8_0_avx2_l1(int n, const void *w, size_t gb, int ng,
                          const struct le_pack_act *a, int ntok, float *y,
                          size_t ys, int nr_last);
void le_gemv_q4_K_avx2(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_q4_K_avx2_l1(int n, const void *w, size_t gb, int ng,
                          const struct le_pack_act *a, int ntok, float *y,
                          size_t ys, int nr_last);
void le_gemv_q5_K_avx2(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_q5_K_avx2_l1(int n, const void *w, size_t gb, int ng,
                          const struct le_pack_act *a, int ntok, float *y,
                          size_t ys, int nr_last);
void le_gemv_q4_K_avx512(int n, const void *w, size_t gb, int ng,
                         const struct le_pack_act *a, int ntok, float *y,
                         size_t ys, int nr_last);
void le_gemv_q4_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                            const struct le_pack_act *a, int ntok, float *y,
                            size_t ys, int nr_last);
void le_gemv_q5_K_avx512(int n, const void *w, size_t gb, int ng,
                         const struct le_pack_act *a, int ntok, float *y,
                         size_t ys, int nr_last);
void le_gemv_q5_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                            const struct le_pack_act *a, int ntok, float *y,
                            size_t ys, int nr_last);
void le_gemv_q6_K_avx512(int n, const void *w, size_t gb, int ng,
                         const struct le_pack_act *a, int ntok, float *y,
                         size_t ys, int nr_last);
void le_gemv_q6_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                            const struct le_pack_act *a, int ntok, float *y,
                            size_t ys, int nr_last);
void le_gemv_q6_K_avx2(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last);
void le_gemv_q6_K_ref(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last);
void le_gemv_q4_K_ref(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last);
void le_gemv_q5_K_ref(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last);
void le_gemv_q4_0_avx512_l1(int n, const void *w, size_t gb, int ng,
                            const struct le_pack_act *a, int ntok, float *y,
                            size_t ys, int nr_last);
void le_gemv_q8_0_avx512_l1(int n, const void *w, size_t gb, int ng,
                            const struct le_pack_act *a, int ntok, float *y,
                            size_t ys, int nr_last);

/* IEEE half and bfloat16 conversions (plain C, exact, round to nearest
 * even on the way down). */
float le_fp16_to_fp32(uint16_t h);
uint16_t le_fp32_to_fp16(float f);
float le_bf16_to_fp32(uint16_t h);
uint16_t le_fp32_to_bf16(float f);

/* ------------------------------------------------------------------ */
/* GGUF reader.                                                         */

enum le_gguf_vtype {
    LE_GGUF_UINT8 = 0,
    LE_GGUF_INT8 = 1,
    LE_GGUF_UINT16 = 2,
    LE_GGUF_INT16 = 3,
    LE_GGUF_UINT32 = 4,
    LE_GGUF_INT32 = 5,
    LE_GGUF_FLOAT32 = 6,
    LE_GGUF_BOOL = 7,
    LE_GGUF_STRING = 8,
    LE_GGUF_ARRAY = 9,
    LE_GGUF_UINT64 = 10,
    LE_GGUF_INT64 = 11,
    LE_GGUF_FLOAT64 = 12
};

/* A string inside the file: NOT NUL-terminated; ptr points into the
 * mapping and lives as long as the le_gguf. */
struct le_gguf_str {
    uint64_t len;
    const char *ptr;
};

struct le_gguf_kv {
    struct le_gguf_str key;
    enum le_gguf_vtype type;
    union {
        uint64_t u64; /* every unsigned integer type and bool */
        int64_t i64;  /* every signed integer type */
        double f64;   /* float32 and float64 */
        struct le_gguf_str str;
        struct {
            enum le_gguf_vtype type; /* element type (never ARRAY) */
            uint64_t n;
            const void *data; /* raw little-endian elements (non-strings) */
            struct le_gguf_str *strs; /* n entries when type == STRING */
        } arr;
    } v;
};

struct le_gguf_tensor {
    struct le_gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];    /* ne[0] = row length (innermost); unused dims = 1 */
    enum le_type type;
    uint64_t offset;  /* from the start of the data section */
    const void *data; /* checked to lie inside the file */
    size_t nbytes;
};

enum le_gguf_mode {
    LE_GGUF_MMAP = 0,   /* default */
    LE_GGUF_READ = 1,   /* read the whole file into memory (no-mmap) */
    LE_GGUF_MLOCK = 2   /* flag: also mlock the bytes */
};

struct le_gguf {
    uint32_t version;
    uint64_t n_kv;
    struct le_gguf_kv *kv;
    uint64_t n_tensors;
    struct le_gguf_tensor *tensors;
    uint32_t alignment; /* general.alignment or 32 */
    const uint8_t *base; /* the file's bytes */
    size_t size;
    /* private to gguf.c */
    int owns_map; /* 1 mmap'd, 2 malloc'd, 0 borrowed */
};

/* Opens and checks a GGUF file; mode is LE_GGUF_MMAP or LE_GGUF_READ, or'ed
 * with LE_GGUF_MLOCK.  Every offset, count, shape and type is checked
 * against the file size; errors are sentences naming the file and what is
 * wrong.  The caller frees with le_gguf_free. */
enum le_status le_gguf_open(const char *path, int mode, struct le_gguf **out,
                            char *err, size_t errlen);
/* Same over bytes the caller keeps alive for the le_gguf's life (tensor
 * data must land 4-byte aligned in memory: pass a malloc'd buffer). */
enum le_status le_gguf_open_mem(const void *buf, size_t len,
                                struct le_gguf **out, char *err,
                                size_t errlen);
void le_gguf_free(struct le_gguf *g);

/* Lookups by key / name; NULL if absent. */
const struct le_gguf_kv *le_gguf_find(const struct le_gguf *g,
                                      const char *key);
const struct le_gguf_tensor *le_gguf_tensor(const struct le_gguf *g,
                                            const char *name);
/* Typed getters: return 1 and fill *out when the key exists with a
 * compatible type (any integer type in range for the integer getters,
 * float32/float64 for get_f32); 0 otherwise. */
int le_gguf_get_u32(const struct le_gguf *g, const char *key, uint32_t *out);
int le_gguf_get_i64(const struct le_gguf *g, const char *key, int64_t *out);
int le_gguf_get_f32(const struct le_gguf *g, const char *key, float *out);
int le_gguf_get_bool(const struct le_gguf *g, const char *key, bool *out);
int le_gguf_get_str(const struct le_gguf *g, const char *key,
                    struct le_gguf_str *out);
/* 1 if s equals the NUL-terminated z. */
int le_gguf_str_eq(struct le_gguf_str s, const char *z);

/* ------------------------------------------------------------------ */
/* Tokenizer (tokenizer.c).                                             */

struct le_vocab;

/* Builds the vocabulary from tokenizer.ggml.* metadata (model "llama" =
 * SentencePiece, "gpt2" = byte-level BPE with tokenizer.ggml.pre rules).
 * The result copies what it needs; g may be freed afterwards. */
enum le_status le_vocab_load(const struct le_gguf *g, struct le_vocab **out,
                             char *err, size_t errlen);
void le_vocab_free(struct le_vocab *v);

/* Tokenizes text[0..len).  add_special: add BOS (and EOS) as the vocab's
 * add_bos_token / add_eos_token say.  parse_special: text of special /
 * control tokens becomes those tokens.  Writes up to cap ids, returns the
 * total count needed (may be > cap: call again with more room), or -1 on
 * error. */
int64_t le_tokenize(const struct le_vocab *v, const char *text, size_t len,
                    bool add_special, bool parse_special, int32_t *ids,
                    size_t cap);
/* The bytes of one token as it appears in text (SPM's U+2581 becomes a
 * space, byte tokens become their byte, BPE's byte-level mapping is
 * undone).  Control tokens give "" unless special is true.  Returns the
 * length written (up to cap; the needed length if larger). */
size_t le_token_to_piece(const struct le_vocab *v, int32_t id, bool special,
                         char *buf, size_t cap);
int32_t le_vocab_n_tokens(const struct le_vocab *v);
int32_t le_vocab_bos(const struct le_vocab *v); /* -1 if none */
int32_t le_vocab_eos(const struct le_vocab *v); /* -1 if none */
/* 1 if id ends generation (EOS, EOT, EOM...). */
int le_vocab_is_eog(const struct le_vocab *v, int32_t id);
/* Debug / test hook for BPE vocabularies: splits text[0..len) into the
 * words of the vocab's tokenizer.ggml.pre rules (no special-token cutting)
 * and writes the byte offset where each word ends to ends (up to cap).
 * Returns the word count (may be > cap), or -1 for a non-BPE vocab or on
 * error. */
int64_t le_vocab_pretokenize(const struct le_vocab *v, const char *text,
                             size_t len, size_t *ends, size_t cap);

/* ------------------------------------------------------------------ */
/* Thread pool (pool.c).                                                */

struct le_pool;

/* Starts n_threads - 1 workers (the caller of le_pool_run is worker 0). */
enum le_status le_pool_new(int n_threads, struct le_pool **out);
void le_pool_free(struct le_pool *p);
int le_pool_size(const struct le_pool *p);
/* Runs fn(arg, ith, nth) once for each share ith = 0..nth-1 and returns
 * when all are done: share 0 on the calling thread, the others on the
 * workers that claim them in time, the rest on the calling thread too
 * (so fn must not depend on which thread runs a share, nor on shares
 * running at the same time).  max_nth == 1 runs fn(arg, 0, 1) inline
 * (work too small to share); otherwise nth is the pool size.  Calls from
 * several threads are serialised. */
void le_pool_run(struct le_pool *p, void (*fn)(void *arg, int ith, int nth),
                 void *arg, int max_nth);

/* ------------------------------------------------------------------ */
/* Sampler (sampler.c).                                                 */

struct le_cand {
    int32_t id;
    float logit;
    float p; /* after le_samp_softmax */
};

struct le_cands {
    struct le_cand *data;
    size_t n;
    int sorted; /* 1: data sorted by logit, descending (ties: lower id) */
};

/* The steps, each on a candidate list (exposed for tests). */
void le_samp_sort(struct le_cands *c);
void le_samp_softmax(struct le_cands *c); /* sorts, fills p */
void le_samp_top_k(struct le_cands *c, int k);
void le_samp_top_p(struct le_cands *c, float p, size_t min_keep);
void le_samp_min_p(struct le_cands *c, float p, size_t min_keep);
void le_samp_temp(struct le_cands *c, float t);
void le_samp_penalties(struct le_cands *c, const int32_t *last,
                       size_t n_last, float repeat, float freq,
                       float presence);
int32_t le_samp_argmax(const float *logits, int32_t n);

/* splitmix64-seeded xoshiro256** PRNG. */
struct le_rng {
    uint64_t s[4];
};
void le_rng_seed(struct le_rng *r, uint64_t seed);
uint64_t le_rng_next(struct le_rng *r);
double le_rng_uniform(struct le_rng *r); /* [0, 1) */

struct le_sampler;

/* grammar.c: a trie from explicit pieces (tests use it without a model);
 * eog may be NULL.  The mask is one bit per token id (words of
 * le_token_trie_words); le_gstate_mask sets the bits of every token whose
 * whole piece can follow (plus EOG tokens where the input is complete)
 * and counts them in *n_allowed (may be NULL).  LE_EINVAL when the
 * grammar's bounds were passed (too ambiguous, or left recursive). */
enum le_status le_token_trie_build(const char *const *pieces,
                                   const size_t *lens, const uint8_t *eog,
                                   int32_t n_tokens,
                                   struct le_token_trie **out);
size_t le_token_trie_words(const struct le_token_trie *t);
enum le_status le_gstate_mask(struct le_gstate *gs,
                              const struct le_token_trie *t, uint64_t *mask,
                              size_t *n_allowed);
/* 1 when sp's logit biases are usable with a vocabulary of n_vocab: ids
 * in [0, n_vocab), biases finite. */
int le_sampling_bias_ok(const struct le_sampling *sp, int32_t n_vocab);
/* Copies sp (not its stop strings; its logit biases are copied too:
 * LE_EINVAL for an id outside [0, n_vocab) or a bias not finite). */
enum le_status le_sampler_new(const struct le_sampling *sp, int32_t n_vocab,
                              struct le_sampler **out);
void le_sampler_free(struct le_sampler *s);
/* Picks a token from logits[0..n_vocab) (not modified; the biases go to
 * a copy). */
int32_t le_sampler_sample(struct le_sampler *s, const float *logits);
/* The same chain over the tokens whose bit is set in mask (one bit per id,
 * as le_gstate_mask); -1 when mask allows none. */
int32_t le_sampler_sample_masked(struct le_sampler *s, const float *logits,
                                 const uint64_t *mask);
/* Records a token (prompt or generated) for the penalty window. */
void le_sampler_accept(struct le_sampler *s, int32_t id);

/* Stop strings over generated text held in buf[0..len): returns the number
 * of leading bytes safe to emit now.  *matched is set to 1 when a stop
 * string occurs (the return value is then where it starts).  Bytes that
 * could begin a stop string, or an incomplete UTF-8 sequence at the end,
 * are held back. */
size_t le_stop_scan(const char *buf, size_t len, const char *const *stops,
                    size_t n_stop, int *matched);

/* ------------------------------------------------------------------ */
/* One generation's state machine (engine.c), shared by                */
/* le_session_generate and the scheduler (sched.c).                     */

struct le_pending { /* generated text held back (stop strings, UTF-8) */
    char *p;
    size_t len, cap;
};

struct le_constraint { /* sp->grammar set */
    struct le_gstate *gs;
    const struct le_token_trie *trie;
    struct le_token_trie *own_trie;
    uint64_t *mask;
};

struct le_gen {
    const struct le_model *m;
    const struct le_sampling *sp; /* borrowed for the generation */
    struct le_sampler *smp;
    struct le_constraint con;
    struct le_pending pend;
    struct le_gen_result r;
    le_token_cb cb;
    void *ud;
    le_logprob_cb lp_cb; /* NULL: no log-probabilities (set after init) */
    size_t text_total;   /* bytes of the sampled tokens' text so far */
};

/* out: token id's log-probability under softmax(logits[0..n)) and the
 * top (<= LE_TOP_LOGPROBS_MAX) most likely tokens, most likely first, ties
 * to the lower id; out->text_end is left to the caller. */
void le_logprobs(const float *logits, int32_t n, int32_t id, int top,
                 struct le_logprob *out);

/* LE_ECONTEXT (with the numbers in err) when n_prompt + max_tokens do not
 * fit n_ctx; LE_EINVAL for an empty prompt. */
enum le_status le_gen_check(const struct le_sampling *sp, size_t n_prompt,
                            int32_t n_ctx, char *err, size_t errlen);
/* Sampler (penalty window fed with the prompt) and grammar state; on
 * failure nothing is left to clean up.  r.prompt_tokens is set; the
 * caller sets r.cached_tokens and the times. */
enum le_status le_gen_init(struct le_gen *g, const struct le_model *m,
                           const struct le_sampling *sp,
                           const int32_t *prompt, size_t n_prompt,
                           le_token_cb cb, void *ud, char *err,
                           size_t errlen);
/* From the logits of the sequence's last evaluated token (n_past cells
 * filled of n_ctx): picks the next token and hands its text to cb.
 * LE_OK with *next >= 0: decode *next and call again.  LE_OK with
 * *next == -1: finished (r.finish set, held-back text flushed).
 * LE_ECANCELED: cb asked to stop.  Other: an error, in err. */
enum le_status le_gen_step(struct le_gen *g, const float *logits,
                           int32_t n_past, int32_t n_ctx, int32_t *next,
                           char *err, size_t errlen);
void le_gen_cleanup(struct le_gen *g);

/* ------------------------------------------------------------------ */
/* Model (model.c).                                                     */

enum le_arch {
    LE_ARCH_LLAMA = 0,
    LE_ARCH_QWEN2 = 1,
    LE_ARCH_QWEN3 = 2, /* qwen2 without the biases, with q/k norms */
    /* q/k norms, post-attention and post-FFN norms, GELU, embeddings
     * scaled by sqrt(n_embd), sliding-window attention on 5 layers of 6 */
    LE_ARCH_GEMMA3 = 3,
    /* gemma3's layout without q/k norms: attention logits soft-capped,
     * every other layer (the even ones) on the sliding window */
    LE_ARCH_GEMMA2 = 4,
    /* qwen3 with a mixture of experts in place of every FFN */
    LE_ARCH_QWEN3MOE = 5,
    /* qwen2 (biases) with experts, unnormalised weights, and a shared
     * expert gated by a sigmoid */
    LE_ARCH_QWEN2MOE = 6,
    /* Phi-3 / Phi-3.5 / Phi-4-mini: fused attn_qkv and gate+up (read as
     * views), NEOX rotation with LongRoPE's short / long factors, a
     * sliding window on every layer */
    LE_ARCH_PHI3 = 7,
    /* IBM Granite 3.x: llama with four multipliers (embedding_scale,
     * residual_scale, attention.scale, logit_scale); -moe: with Mixtral's
     * experts */
    LE_ARCH_GRANITE = 8,
    LE_ARCH_GRANITEMOE = 9,
    /* OpenAI gpt-oss: biases on q, k, v and the attention's output, a
     * learned sink logit per head in every softmax, the sliding window on
     * the even layers, NEOX YaRN rotation; experts chosen by the router's
     * biased logits, weighted by the softmax of the chosen ones, each
     * with biased gate, up and down and the clamped SwiGLU (alpha 1.702,
     * limit 7) */
    LE_ARCH_GPTOSS = 10,
    /* DeepSeek V2 / V3 (and the files converted as deepseek2: V2-Lite,
     * Coder-V2-Lite, Moonlight, ...): multi-head latent attention, run
     * in its absorbed form (below), the first leading_dense_block_count
     * layers dense, the others experts (softmax or sigmoid router, an
     * optional selection bias, weights scaled) plus ungated shared
     * experts */
    LE_ARCH_DEEPSEEK2 = 11,
    /* Ministral 3 (3B / 8B / 14B): the llama layout and rotation (and
     * Mixtral's experts if the file has them), YaRN whose
     * yarn_log_multiplier (mscale_all_dim) divides the magnitude boost,
     * and Llama 4's attention temperature (le_hparams.attn_temp) */
    LE_ARCH_MISTRAL3 = 12
};

struct le_layer {
    const struct le_gguf_tensor *attn_norm; /* [n_embd] f32 */
    const struct le_gguf_tensor *wq;        /* [n_embd] x n_head*head_dim */
    const struct le_gguf_tensor *wk;        /* [n_embd] x n_head_kv*hd */
    const struct le_gguf_tensor *wv;        /* [n_embd] x n_head_kv*hd */
    const struct le_gguf_tensor *bq, *bk, *bv; /* qwen2 biases, f32 */
    const struct le_gguf_tensor *bo;         /* gpt-oss: [n_embd] f32 */
    const struct le_gguf_tensor *sinks;      /* gpt-oss: [n_head] f32 */
    /* qwen3, gemma3: RMSNorm weights [head_dim] f32 of every q and k head,
     * applied after the projection and before the rotation */
    const struct le_gguf_tensor *q_norm, *k_norm;
    /* gemma2, gemma3: RMSNorm [n_embd] f32 of the attention's and the
     * FFN's output before each joins the residual */
    const struct le_gguf_tensor *attn_post_norm, *ffn_post_norm;
    const struct le_gguf_tensor *wo;        /* [n_head*hd] x n_embd */
    const struct le_gguf_tensor *ffn_norm;  /* [n_embd] f32 */
    const struct le_gguf_tensor *w_gate;    /* [n_embd] x n_ff */
    const struct le_gguf_tensor *w_up;      /* [n_embd] x n_ff */
    const struct le_gguf_tensor *w_down;    /* [n_ff] x n_embd */
    /* mixture of experts (n_expert > 0; w_gate/w_up/w_down NULL): the
     * router [n_embd] x n_expert, and each expert's gate, up and down as
     * 2-D views of the GGUF's 3-D ffn_*_exps tensors (le_model.xviews) */
    const struct le_gguf_tensor *ffn_gate_inp;
    const struct le_gguf_tensor *exp_gate, *exp_up, *exp_down; /* [n_expert] */
    /* gpt-oss: the router's bias [n_expert] and the experts' biases,
     * [n_ff] x n_expert (gate, up) and [n_embd] x n_expert (down), f32 */
    const struct le_gguf_tensor *gate_inp_b, *exp_gate_b, *exp_up_b,
        *exp_down_b;
    /* qwen2moe's shared expert, every token's: a gate [n_embd] f32 (its
     * output weighted by sigmoid(gate . x)), and gate, up, down of width
     * n_ff_shexp */
    const struct le_gguf_tensor *sh_gate_inp, *sh_gate, *sh_up, *sh_down;
    /* deepseek2 (multi-head latent attention, absorbed): wq is attn_q or,
     * with a q LoRA, attn_q_b after wq_a [n_embd] x q_lora and its norm
     * q_a_norm [q_lora]; wkv_a [n_embd] x (kv_lora + n_rot) gives the
     * latent c (kv_lora, normed by kv_a_norm) and the shared rotary key
     * (n_rot); per head h, k_b[h] [mla_nope] x kv_lora takes the head's
     * nope query into the latent space and v_b[h] [kv_lora] x mla_v the
     * attention's latent output to the head's value (2-D views of
     * attn_k_b / attn_v_b, or of attn_kv_b's rows: v_b as they are, k_b
     * transposed at load, le_model.mla_kb); exp_probs_b [n_expert] f32: the
     * router's selection bias (V3) */
    const struct le_gguf_tensor *wq_a, *q_a_norm, *wkv_a, *kv_a_norm;
    const struct le_gguf_tensor *k_b, *v_b; /* [n_head] each */
    const struct le_gguf_tensor *exp_probs_b;
};

struct le_hparams {
    enum le_arch arch;
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    int32_t n_head, n_head_kv, head_dim, n_rot;
    float eps;            /* RMSNorm epsilon */
    float rope_base;      /* rope.freq_base, default 10000 */
    float rope_scale;     /* 1 / rope.scaling.factor (linear, yarn), else
                             1 */
    /* YaRN (rope.scaling.type yarn): rotation pair i0 / 2 mixes the
     * scaled and the unscaled angle by a ramp between yarn_lo and yarn_hi
     * (from original_context_length, beta_fast 32, beta_slow 1), and cos
     * and sin are multiplied by yarn_mscale (attn_factor x (1 + 0.1
     * ln factor)); yarn 0: plain scaling */
    int yarn;
    float yarn_lo, yarn_hi;
    float yarn_ext;       /* rope.scaling.yarn_ext_factor (1): the ramp's
                             weight */
    /* cos and sin times this: rope.scaling.attn_factor (default 1), for
     * YaRN with a ramp times m(factor, 1) / m(factor, yarn_log_multiplier)
     * where m(s, k) = 1 + 0.1 k ln s for s > 1, else 1 (mistral3's
     * multiplier; 0 or absent leaves the divisor out; deepseek2 sets its
     * own in load_ds_router) */
    float rope_mscale;
    /* Llama 4's attention temperature (attention.temperature_scale of
     * mistral3 and deepseek2; 0: off): each query at position pos is
     * multiplied, after its rotation, by 1 + attn_temp x
     * ln(floor(pos / attn_temp_floor) + 1), so positions under
     * attn_temp_floor (mistral3: the original context; deepseek2:
     * attention.temperature_length) are unchanged */
    float attn_temp;
    int32_t attn_temp_floor;
    int32_t n_ctx_orig;   /* rope.scaling.original_context_length, else
                             n_ctx_train */
    int rope_neox;        /* 1: rotate halves (qwen2, qwen3, gemma3); 0:
                             adjacent pairs */
    float attn_scale;     /* of q.k: 1 / sqrt(head_dim) (gemma3 27B: 1 /
                             sqrt(n_embd / n_head)) */
    float embd_scale;     /* of the token embeddings (gemma3: sqrt(n_embd)) */
    int gelu;             /* 1: the FFN's gate is GELU (tanh form), else
                             SiLU */
    /* sliding-window attention: layers l with l % swa_pattern <
     * swa_pattern - 1 (gemma3 6, gemma2 2; 0: every layer, phi3) attend
     * to their last n_swa positions only; with swa_rope_local (gemma3)
     * they rotate with base rope_base_swa, unscaled; n_swa 0: none */
    int32_t n_swa, swa_pattern;
    int swa_rope_local;
    float rope_base_swa;
    float softcap;        /* final logits: softcap * tanh(l / softcap); 0:
                             none */
    float attn_softcap;   /* the same of q.k before the softmax (gemma2) */
    /* mixture of experts: each token's FFN is the sum of its n_expert_used
     * best experts' (by the router's softmax), weighted by their
     * probabilities renormalised to sum 1; n_ff is an expert's width */
#define LE_MAX_EXPERTS 1024
    int32_t n_expert, n_expert_used;
    int expert_norm;      /* 0: the chosen weights not renormalised
                             (qwen2moe) */
    int expert_topk_softmax; /* 1: the experts of the largest logits,
                                weighted by the softmax of those logits
                                only (gpt-oss) */
    int swiglu_oai;       /* 1: the experts' activation is gpt-oss's
                             clamped SwiGLU */
    int32_t n_ff_shexp;   /* qwen2moe's shared expert's width; 0: none */
    /* deepseek2: the latent (kv_lora_rank) and q LoRA (0: none) ranks,
     * each head's nope query / key size and value size; the absorbed
     * layout has one KV head of head_dim = n_rot + kv_lora: [rotary key
     * | normed latent], its value the same row (the attention's output
     * taken from its n_rot-th value on); the queries [rotary | nope
     * through k_b] */
    int32_t kv_lora, q_lora, mla_nope, mla_v;
    /* the dense FFN's width (deepseek2's leading dense layers apart from
     * the experts' n_ff; n_ff elsewhere) and how many layers lead dense */
    int32_t n_ff_dense, n_dense_lead;
    int expert_sigmoid;   /* deepseek2 V3: the router's sigmoid, not its
                             softmax */
    float expert_wscale;  /* the chosen experts' weights times this (1) */
    float residual_scale; /* each branch's output times this before it
                             joins the residual (granite; else 1) */
    float logit_scale;    /* the logits times 1 / this (granite; 0: none) */
};

/* A weight matrix repacked at load (repack.c's layout for pt.type):
 * n_out rows in ceil(n_out / 16) groups of group_bytes, 64-byte aligned,
 * inside the model's pack arena.  The GGUF copy stays mapped and valid
 * (the embedding lookup and the AMX path read it). */
struct le_packed {
    struct le_pack_traits pt;
    int n_in, n_out;
    size_t group_bytes;
    uint8_t *data;
};

struct le_model {
    struct le_gguf *gguf; /* owns the bytes every tensor points into */
    /* [gguf->n_tensors]: the repacked copy of tensor i or NULL (types and
     * levels without repacked kernels, tensors not in a matrix product).
     * Memory: the repacked tensors' size again (Q4_0/Q8_0 the same bytes,
     * Q4_K 148/144 of them), anonymous, in one arena of pack_size bytes
     * (2 MiB aligned; MADV_HUGEPAGE unless LLMUX_HUGEPAGES=0). */
    struct le_packed **packed;
    /* the experts' 2-D views (n_layer x 3 x n_expert; owned), indexed in
     * packed after the GGUF's tensors: packed has n_slots entries */
    struct le_gguf_tensor *xviews;
    size_t n_xviews, n_slots;
    uint8_t *pack_arena;
    size_t pack_size;
    struct le_vocab *vocab;
    struct le_hparams hp;
    struct le_model_params params;
    int vocab_only;
    const struct le_gguf_tensor *tok_embd;    /* [n_embd] x n_vocab */
    const struct le_gguf_tensor *output_norm; /* [n_embd] f32 */
    const struct le_gguf_tensor *output;      /* [n_embd] x n_vocab */
    float *rope_freqs;  /* [n_rot/2] llama3 frequency factors or NULL */
    /* phi3's LongRoPE factors [n_rot/2] or NULL; one of them becomes
     * rope_freqs once the context is known */
    const struct le_gguf_tensor *rope_long, *rope_short;
    struct le_layer *layers; /* [n_layer] */
    /* deepseek2 files with attn_kv_b: every head's k_b transposed, f32
     * from an f32 attn_kv_b, else f16 (owned; the views in xviews point
     * into it) */
    void *mla_kb;
    struct le_pool *pool;
    enum le_chat_template chat;
    enum le_chat_tools chat_tools;
    int tools_first; /* le_chat_tools_first of its template */
    /* control tokens whose text le_model_token_to_piece gives even
     * without `special`: the tool format's call markers
     * (le_chat_tools_markers) when the vocabulary has them as such
     * (mistral's [TOOL_CALLS], v11's [ARGS], DeepSeek's five), so that a
     * grammar can take them and the output shows where the calls begin */
#define LE_KEEP_TOK_MAX 8
    int32_t keep_tok[LE_KEEP_TOK_MAX];
    int n_keep_tok;
    char desc[160];
};

/* Loads weights and hyperparameters from an opened GGUF (model takes
 * ownership of g on success and on failure). */
enum le_status le_model_load(struct le_gguf *g, const struct le_model_params *p,
                             struct le_model **out, char *err, size_t errlen);
/* Test hook: frees the repacked copies so that later sessions run the
 * per-row vec_dot path over the GGUF bytes (results must not change). */
void le_model_drop_packed(struct le_model *m);
/* Bytes of repacked weights the model holds (0: none). */
size_t le_model_packed_bytes(const struct le_model *m);
/* Tokens of one product from which it goes to the AMX GEMM (model.c's
 * matmul), per weight type (0: the type has no AMX kernel).  The AMX
 * GEMM's cost grows in steps of 16 tokens (a token tile, 16 rows of C
 * scaled per 32-value block whatever rows are used), the per-row
 * kernels' with every token.  Measured (tests/tool_sched_bench MODEL
 * --crossover: one forward pass of n prompt tokens of the 2048x4 slices,
 * 1 thread, CPU ms, median of 7, per-row / AMX; shared machine):
 *   Q4_0  n=4 15/46  8 24/45  12 33/50  16 39-43/40-43  24 44-66/70-73
 *         32 67-77/50-63  48 88-115/64-65  64 122-124/80-90
 *   Q8_0  n=4 24/52  8 33/54  16 48/46  24 76/80  32 92/72  48 132/95
 *         64 170/119
 *   Q4_K  n=8 20/42  16 30/63  32 68/94  48 73/123  64 95/94
 * so AMX only from 32 tokens for Q4_0 and Q8_0 (a tie at 16, a loss at
 * 24), from 64 for the K-quants (a tie there; Q5_K and Q6_K take the
 * same unpack-per-call kernel as Q4_K).  But the K-quants never take it
 * where the repacked AVX-512 GEMM runs (le_isa_active() AVX512): there
 * the same tool gave a tie at 64-256 tokens (Q4_K n=64 88/90, 128
 * 193/186, 256 426/407 ms), and with 2 threads bench/engine.sh's pp128
 * was 920 t/s with AMX against 1069 without (tg after it 176 against
 * 197: the AMX panels come from the GGUF mapping, a second copy of the
 * weights through the cache; Q4_0 and Q8_0 use the repacked copy as
 * their AMX operand).  So 0 for them at that level. */
int le_amx_min_tok(enum le_type t);
/* The largest le_amx_min_tok over the model's layer weights with an AMX
 * kernel (0: none): a prompt piece of at least that many tokens takes
 * the AMX GEMM in every product that has one (sched.c). */
int le_model_amx_min_tok(const struct le_model *m);

/* Forward pass over n tokens at positions pos..pos+n-1 using the session's
 * cache and scratch (engine.c owns the session struct). */
enum le_status le_model_forward(struct le_session *s, const int32_t *ids,
                                size_t n, char *err, size_t errlen);

/*
 * One forward pass over tokens of several sequences (sched.c): every
 * weight matrix is read once for all of them.  Token t is written to the
 * KV cells of seq[t] at position pos[t] and attends to that sequence's
 * cells 0..pos[t] only (the cells below must be filled, by this batch's
 * earlier tokens of the same sequence or before).  seq == NULL: every
 * token belongs to `one` at positions one->n_past, one->n_past + 1, ...
 * Tokens t >= amx_from may take the AMX GEMM (see matmul in model.c: put
 * there only prefill pieces of >= le_model_amx_min_tok tokens, so a
 * token's kernel never depends on its batch mates).  The logits of tokens out[0..n_out) go to
 * logits[o * n_vocab ..].  Afterwards each sequence's hist[] holds the ids
 * and its n_past covers the highest position written.  ws gives the
 * scratch (n_tok <= ws->n_batch); it may be one of the sequences.
 */
struct le_fwd_batch {
    int32_t n_tok;
    const int32_t *ids;            /* [n_tok] */
    struct le_session *const *seq; /* [n_tok] or NULL (all `one`) */
    const int32_t *pos;            /* [n_tok], NULL when seq is NULL */
    struct le_session *one;
    int32_t amx_from;
    int32_t n_out;
    const int32_t *out;            /* [n_out] token indexes */
    float *logits;                 /* [n_out][n_vocab] */
};
enum le_status le_model_forward_batch(struct le_session *ws,
                                      const struct le_fwd_batch *b,
                                      char *err, size_t errlen);
/* A session with scratch for n_tok tokens per forward and n_out logits
 * rows (s->logits), and KV cells (n_ctx of them) only when with_kv: the
 * scheduler's workspace has no cells, its sequences no scratch
 * (n_tok = n_out = 0).  le_session_new is (n_batch, 1, 1). */
enum le_status le_session_new_sized(struct le_model *m, int n_tok, int n_out,
                                    int with_kv, struct le_session **out,
                                    char *err, size_t errlen);

/* One sequence's state.  Sizes: kv* = kv_rows; scratch per batch token. */
struct le_session {
    struct le_model *m;
    const _Atomic int *cancel; /* le_session_set_cancel; NULL = none */
    int32_t n_ctx, n_batch;
    int32_t n_past;          /* positions filled in the KV cache */
    int32_t *hist;           /* [n_ctx] the tokens in the cache */
    enum le_type kv_type;    /* LE_TYPE_F16, LE_TYPE_Q8_0 or LE_TYPE_F32 */
    size_t kv_row;           /* bytes of one position's K (or V) per layer */
    uint8_t *kv_k, *kv_v;    /* [n_layer][n_ctx][kv_row] */
    float *x, *xb;           /* [n_batch][n_embd] residual, normed */
    float *q;                /* [n_batch][n_head * head_dim] */
    float *k, *v;            /* [n_batch][n_head_kv * head_dim] */
    float *att;              /* [n_batch][n_head * head_dim] */
    float *hb, *hb2;         /* [n_batch][n_ff] */
    /* mixture of experts: the router's logits [n_batch][n_expert], each
     * token's experts and weights [n_batch][n_expert_used], the FFN input
     * [n_batch][n_embd], one expert's rows gathered (or a step's every
     * chosen expert's, moe_group) and their output
     * (both [n_batch][n_embd]) and every expert's (token x n_expert_used
     * + slot) in expert then token order [n_batch][n_expert_used] */
    float *moe_logits, *moe_w, *moe_in, *moe_x, *moe_y;
    int32_t *moe_sel, *moe_rows;
    /* 1: a step's experts one after another (moe_each), never all at once
     * (moe_group); LLMUX_MOE_EACH=1 at the session's start, for the tests
     * that compare the two */
    int moe_group_off;
    uint64_t moe_grouped; /* the steps' MoE layers that took moe_group */
    /* deepseek2: one head's rows gathered for k_b / v_b and their output,
     * [n_batch][max(kv_lora, q_lora, mla_nope, mla_v)] each, or a
     * generation step's every head's, [n_head][<= GEMV_MAX_TOK tokens]
     * [max(kv_lora, mla_nope, mla_v)] */
    float *mla_in, *mla_out;
    size_t mla_cap;          /* floats in each */
    float *logits;           /* [n_vocab] of the last evaluated token */
    uint8_t *qact;           /* activations in a vec_dot_type, one batch */
    size_t qact_size;
    uint8_t *qprep;          /* their le_pack_prep rows, one batch */
    uint8_t *qtile;          /* Q8_0 rows as AMX A tiles (le_pack_act.t);
                              * [n_batch / 16 + 1][widest / 32][512] */
    size_t qprep_row;        /* bytes per token in qprep */
    float *scores;           /* [n_threads][n_ctx] attention */
    uint8_t *qhead;          /* [n_threads][row of head_dim in vec_dot] */
    float *vrow;             /* [n_threads][head_dim] */
    size_t qhead_size;
    struct le_sampler *smp;  /* of the current generation */
};

#endif
