/*
 * model.c: llama / qwen2 / qwen3 weights and the forward pass.
 *
 * What it does: reads the hyperparameters from GGUF metadata, finds every
 * tensor and checks its shape and type against them (a wrong file is a
 * clear LE_EFORMAT, never a bad read), and runs the transformer over a
 * batch of tokens of one session.  What it does not: tokenize (tokenizer.c),
 * sample (sampler.c), own the file's bytes (gguf.c maps them; they are
 * never written).  The weights of types with repacked kernels are copied
 * once at load into the model's pack arena (repack.c's layout).
 *
 * The forward pass, per token t at position pos (llama.cpp's graph):
 *   x = tok_embd[id]                                   [n_embd]
 *   per layer:
 *     xb = rmsnorm(x) * attn_norm
 *     q = Wq xb (+bq)  k = Wk xb (+bk)  v = Wv xb (+bv)  (biases: qwen2)
 *     q_h = rmsnorm(q_h) * q_norm, k_h likewise per head   (qwen3)
 *     rope(q, k, pos)   llama: adjacent pairs (GGML "normal" mode);
 *                       qwen2, qwen3: halves (GGML NEOX mode)
 *     q *= 1 + beta ln(floor(pos / floor_len) + 1)  (the attention
 *                       temperature of mistral3 and deepseek2 files that
 *                       have one)
 *     K/V cache[pos] = k, v (f16 or q8_0)
 *     att_h = softmax(q_h . K[kv(h)][0..pos] / sqrt(hd)) V[kv(h)]   (GQA)
 *     x += Wo att
 *     xb = rmsnorm(x) * ffn_norm
 *     x += Wdown (silu(Wgate xb) * (Wup xb))
 *   logits = Woutput (rmsnorm(x) * output_norm)        (last token only)
 *
 * Matrix products: the activation rows are quantised once to the weight
 * type's vec_dot_type; a repacked weight then runs its group kernel (16
 * rows x all tokens of the batch: a GEMV for one token, a blocked GEMM for
 * a prompt batch), any other one vec_dot per output row and token.  Rows
 * are split over the model's pool; a row is always computed whole by one
 * thread with the same function, so the result does not depend on the
 * thread count, and the repacked kernels give the plain C vec_dot's bits.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "le_int.h"

/* ------------------------------------------------------------------ */
/* Loading                                                              */

static enum le_status
fail(char *err, size_t errlen, enum le_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum le_status
fail(char *err, size_t errlen, enum le_status st, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

static int
arch_u32(const struct le_gguf *g, const char *arch, const char *key,
         uint32_t *out)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return le_gguf_get_u32(g, k, out);
}

static int
arch_f32(const struct le_gguf *g, const char *arch, const char *key,
         float *out)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return le_gguf_get_f32(g, k, out);
}

static int
arch_str(const struct le_gguf *g, const char *arch, const char *key,
         struct le_gguf_str *out)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return le_gguf_get_str(g, k, out);
}

/*
 * Finds tensor `name` and checks it is 1-D [ne0] (ne1 == 0) or 2-D
 * [ne0, ne1] of a type the engine can use; norms and biases (1-D) must be
 * f32.  Returns NULL with err set when absent (and required) or wrong.
 */
static const struct le_gguf_tensor *
want3(const struct le_gguf *g, const char *name, int64_t ne0, int64_t ne1,
      int64_t ne2, int required, enum le_status *st, char *err,
      size_t errlen)
{
    const struct le_gguf_tensor *t = le_gguf_tensor(g, name);
    if (!t) {
        if (required)
            *st = fail(err, errlen, LE_EFORMAT,
                       "model: tensor %s is missing", name);
        return NULL;
    }
    int dims = ne1 ? 2 : 1;
    int64_t n1 = t->n_dims >= 2 ? t->ne[1] : 1;
    int64_t n2 = t->n_dims >= 3 ? t->ne[2] : 1, w2 = ne2 ? ne2 : 1;
    if (t->ne[0] != ne0 || n1 != (ne1 ? ne1 : 1) || n2 != w2 ||
        (t->n_dims > 3 && t->ne[3] != 1)) {
        *st = fail(err, errlen, LE_EFORMAT,
                   "model: tensor %s has shape [%lld, %lld, %lld], expected "
                   "[%lld, %lld, %lld] from the hyperparameters",
                   name, (long long)t->ne[0], (long long)n1, (long long)n2,
                   (long long)ne0, (long long)(ne1 ? ne1 : 1),
                   (long long)w2);
        return NULL;
    }
    const struct le_type_traits *tt = le_type_get(t->type);
    if (!tt || !tt->to_float) {
        *st = fail(err, errlen, LE_EFORMAT,
                   "model: tensor %s has unsupported type %u", name,
                   (unsigned)t->type);
        return NULL;
    }
    if (dims == 1 && t->type != LE_TYPE_F32) {
        *st = fail(err, errlen, LE_EFORMAT,
                   "model: tensor %s must be f32, is %s", name, tt->name);
        return NULL;
    }
    if (dims == 2 && (!tt->vec_dot || ne0 % tt->blck_size != 0 ||
                      !le_type_get(tt->vec_dot_type) ||
                      (tt->vec_dot_type != LE_TYPE_F32 &&
                       !le_type_get(tt->vec_dot_type)->from_float))) {
        *st = fail(err, errlen, LE_EFORMAT,
                   "model: tensor %s: type %s cannot be used for a %lld-wide "
                   "matrix product",
                   name, tt->name, (long long)ne0);
        return NULL;
    }
    if (t->nbytes <
        le_row_size(t->type, ne0) * (size_t)(ne1 ? ne1 : 1) * (size_t)w2) {
        *st = fail(err, errlen, LE_EFORMAT, "model: tensor %s is too short",
                   name);
        return NULL;
    }
    return t;
}

static const struct le_gguf_tensor *
want(const struct le_gguf *g, const char *name, int64_t ne0, int64_t ne1,
     int required, enum le_status *st, char *err, size_t errlen)
{
    return want3(g, name, ne0, ne1, 0, required, st, err, errlen);
}

/* Rows up to which a product over repacked weights takes le_gemv_at's
 * decode kernel (generation steps, with a few prompt tokens). */
#define GEMV_MAX_TOK 16

/* GGUF's general.architecture of each enum le_arch */
static const char *const arch_names[] = {"llama",    "qwen2",  "qwen3",
                                         "gemma3",   "gemma2", "qwen3moe",
                                         "qwen2moe", "phi3",   "granite",
                                         "granitemoe", "gpt-oss",
                                         "deepseek2", "mistral3"};
#define N_ARCH (sizeof(arch_names) / sizeof(arch_names[0]))

/* The attention's head sizes of every architecture but deepseek2's
 * (load_mla): head_count_kv, key_length (value_length equal to it),
 * rope.dimension_count. */
static enum le_status
load_heads(const struct le_gguf *g, const char *arch, struct le_hparams *hp,
           char *err, size_t errlen)
{
    uint32_t u;
    hp->n_head_kv = hp->n_head;
    if (arch_u32(g, arch, "attention.head_count_kv", &u))
        hp->n_head_kv = (int32_t)u;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return fail(err, errlen, LE_EFORMAT,
                    "model: head_count %d is not a multiple of head_count_kv "
                    "%d",
                    hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (arch_u32(g, arch, "attention.key_length", &u))
        hp->head_dim = (int32_t)u;
    if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->head_dim > 1024 ||
        (!arch_u32(g, arch, "attention.key_length", &u) &&
         hp->n_embd % hp->n_head))
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad head size (embedding_length %d, heads %d)",
                    hp->n_embd, hp->n_head);
    if (arch_u32(g, arch, "attention.value_length", &u) &&
        (int32_t)u != hp->head_dim)
        return fail(err, errlen, LE_EFORMAT,
                    "model: value_length != key_length is not supported");
    hp->n_rot = hp->head_dim;
    if (arch_u32(g, arch, "rope.dimension_count", &u))
        hp->n_rot = (int32_t)u;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return fail(err, errlen, LE_EFORMAT,
                    "model: rope.dimension_count %d does not fit head size "
                    "%d",
                    hp->n_rot, hp->head_dim);
    return LE_OK;
}

/* deepseek2's attention sizes (load_hparams): the latent attention in
 * its absorbed form, one KV head of n_rot + kv_lora values that every
 * query head shares.  Both of llama.cpp's layouts: attn_kv_b
 * (key_length a query head's nope + rope size, value_length its value's)
 * and the split attn_k_b / attn_v_b (key_length_mla and
 * value_length_mla those, key_length and value_length the latent's). */
static enum le_status
load_mla(const struct le_gguf *g, const char *arch, struct le_hparams *hp,
         char *err, size_t errlen)
{
    uint32_t kl = 0, vl = 0, rot = 0, lora = 0, ql = 0, u;
    if (!arch_u32(g, arch, "attention.kv_lora_rank", &lora) || !lora ||
        lora > 8192)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.attention.kv_lora_rank is missing or out of "
                    "range",
                    arch);
    if (!arch_u32(g, arch, "rope.dimension_count", &rot) || !rot ||
        rot % 2 || rot > 1024)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.rope.dimension_count is missing or out of "
                    "range",
                    arch);
    if (arch_u32(g, arch, "attention.q_lora_rank", &ql) && ql > 65536)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.attention.q_lora_rank %u is out of range",
                    arch, ql);
    if (arch_u32(g, arch, "attention.key_length_mla", &kl)) {
        if (!arch_u32(g, arch, "attention.value_length_mla", &vl) ||
            (arch_u32(g, arch, "attention.key_length", &u) &&
             u != lora + rot) ||
            (arch_u32(g, arch, "attention.value_length", &u) && u != lora))
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s's attention.key_length_mla needs "
                        "value_length_mla, and key_length / value_length "
                        "of the latent (kv_lora_rank + rope, kv_lora_rank)",
                        arch);
    } else if (!arch_u32(g, arch, "attention.key_length", &kl) ||
               !arch_u32(g, arch, "attention.value_length", &vl)) {
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.attention.key_length or value_length is "
                    "missing",
                    arch);
    }
    if (kl <= rot || kl - rot > 1024 || !vl || vl > 1024 ||
        rot + lora > 4096)
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad attention sizes (key %u, value %u, rope %u, "
                    "kv_lora_rank %u)",
                    kl, vl, rot, lora);
    hp->kv_lora = (int32_t)lora;
    hp->q_lora = (int32_t)ql;
    hp->mla_nope = (int32_t)(kl - rot);
    hp->mla_v = (int32_t)vl;
    hp->n_rot = (int32_t)rot;
    hp->n_head_kv = 1;
    hp->head_dim = (int32_t)(rot + lora);
    return LE_OK;
}

/* deepseek2's router and scales (load_hparams, after the rotation):
 * expert_gating_func 1 softmax (the default, as llama.cpp for V2 files
 * without the key) or 2 sigmoid; expert_weights_norm and _scale; grouped
 * routing refused.  The attention's scale as llama.cpp's (and
 * DeepSeek's own, when its mscale equals its mscale_all_dim): q.k times
 * mscale^2 / sqrt(nope + rope), mscale = 1 + yarn_log_multiplier x
 * ln(factor) (the file's multiplier is 0.1 x mscale_all_dim), and cos
 * and sin unscaled (YaRN's boost cancelled). */
static enum le_status
load_ds_router(const struct le_gguf *g, const char *arch,
               struct le_hparams *hp, char *err, size_t errlen)
{
    uint32_t u, used;
    float f;
    bool b;
    if (arch_u32(g, arch, "expert_gating_func", &u) && u != 1 && u != 2)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.expert_gating_func %u is not supported "
                    "(1 softmax, 2 sigmoid)",
                    arch, u);
    hp->expert_sigmoid = arch_u32(g, arch, "expert_gating_func", &u) &&
                         u == 2;
    if (arch_f32(g, arch, "expert_weights_scale", &f)) {
        if (!(f > 0 && f < 1e4f))
            return fail(err, errlen, LE_EFORMAT,
                        "model: bad %s.expert_weights_scale %g", arch, f);
        hp->expert_wscale = f;
    }
    char key[128];
    snprintf(key, sizeof(key), "%s.expert_weights_norm", arch);
    hp->expert_norm = le_gguf_get_bool(g, key, &b) && b;
    if (arch_u32(g, arch, "expert_group_count", &u) && u > 1 &&
        (!arch_u32(g, arch, "expert_group_used_count", &used) || used < u))
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s's grouped expert routing "
                    "(expert_group_count %u) is not supported",
                    arch, u);
    float x = 0;
    if (arch_f32(g, arch, "rope.scaling.attn_factor", &f) && f != 1)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s with rope.scaling.attn_factor %g is not "
                    "supported",
                    arch, f);
    arch_f32(g, arch, "rope.scaling.yarn_log_multiplier", &x);
    if (!(x >= 0 && x < 10))
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad %s.rope.scaling.yarn_log_multiplier %g",
                    arch, x);
    float lf = logf(1.0f / hp->rope_scale);
    float ms = 1.0f + x * lf;
    hp->attn_scale = ms * ms / sqrtf((float)(hp->mla_nope + hp->n_rot));
    hp->rope_mscale =
        hp->yarn && hp->yarn_ext != 0 ? 1.0f : 1.0f / (1.0f + 0.1f * lf);
    return LE_OK;
}

/* YaRN's magnitude m(s, k) as llama.cpp's llama_context computes it
 * (transformers' get_mscale): 1 + 0.1 k ln s for a factor s past 1, else
 * 1 */
static float
yarn_m(float s, float k)
{
    return s <= 1.0f ? 1.0f : 0.1f * k * logf(s) + 1.0f;
}

/* Llama 4's attention temperature (load_hparams): mistral3's beta over
 * the original context (llama.cpp's n_ctx_orig_yarn, context_length when
 * the file has no original_context_length, refused when it says 0);
 * deepseek2's (Mistral Large 3) over attention.temperature_length,
 * which llama.cpp needs (it stops on 0 at its first batch) and llmux
 * requires.  The other architectures' llama.cpp graphs do not read the
 * key, so neither does llmux. */
static enum le_status
load_attn_temp(const struct le_gguf *g, const char *arch,
               struct le_hparams *hp, char *err, size_t errlen)
{
    float f;
    uint32_t u;
    hp->attn_temp = 0;
    hp->attn_temp_floor = 0;
    if ((hp->arch != LE_ARCH_MISTRAL3 && hp->arch != LE_ARCH_DEEPSEEK2) ||
        !arch_f32(g, arch, "attention.temperature_scale", &f) || f == 0)
        return LE_OK;
    if (!(f > -100 && f < 100))
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad %s.attention.temperature_scale %g", arch, f);
    if (hp->arch == LE_ARCH_DEEPSEEK2) {
        if (!arch_u32(g, arch, "attention.temperature_length", &u) || !u)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s.attention.temperature_scale needs "
                        "%s.attention.temperature_length (the positions "
                        "of one temperature step), missing or 0",
                        arch, arch);
        hp->attn_temp_floor = (int32_t)(u < (1u << 24) ? u : (1u << 24));
    } else {
        if (arch_u32(g, arch, "rope.scaling.original_context_length", &u) &&
            !u)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s.attention.temperature_scale needs "
                        "rope.scaling.original_context_length (the "
                        "positions of one temperature step), and it is 0",
                        arch);
        hp->attn_temp_floor = hp->n_ctx_orig;
    }
    hp->attn_temp = f;
    return LE_OK;
}

static enum le_status
load_hparams(struct le_model *m, char *err, size_t errlen)
{
    const struct le_gguf *g = m->gguf;
    struct le_hparams *hp = &m->hp;
    struct le_gguf_str as;
    char arch[32];
    if (!le_gguf_get_str(g, "general.architecture", &as))
        return fail(err, errlen, LE_EFORMAT,
                    "model: general.architecture is missing");
    if (as.len >= sizeof(arch))
        return fail(err, errlen, LE_EFORMAT, "model: architecture too long");
    memcpy(arch, as.ptr, as.len);
    arch[as.len] = '\0';
    size_t a = 0;
    while (a < N_ARCH && strcmp(arch, arch_names[a]))
        a++;
    if (a == N_ARCH)
        return fail(err, errlen, LE_EFORMAT,
                    "model: architecture '%s' is not supported (llama, "
                    "qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, "
                    "phi3, granite, granitemoe, gpt-oss, deepseek2, "
                    "mistral3)",
                    arch);
    hp->arch = (enum le_arch)a;

    uint32_t u;
    /* experts: Mixtral's llama files (and mistral3's, llama's layout),
     * qwen3moe and qwen2moe; the others' layouts have none */
    int moe_arch = hp->arch == LE_ARCH_QWEN3MOE ||
                   hp->arch == LE_ARCH_QWEN2MOE ||
                   hp->arch == LE_ARCH_GRANITEMOE ||
                   hp->arch == LE_ARCH_GPTOSS ||
                   hp->arch == LE_ARCH_DEEPSEEK2;
    int oss = hp->arch == LE_ARCH_GPTOSS, ds = hp->arch == LE_ARCH_DEEPSEEK2;
    int m3 = hp->arch == LE_ARCH_MISTRAL3;
    hp->n_expert = hp->n_expert_used = 0;
    hp->n_ff_shexp = 0;
    hp->expert_norm = hp->arch != LE_ARCH_QWEN2MOE && !oss && !ds;
    hp->expert_sigmoid = 0;
    hp->expert_wscale = 1.0f;
    hp->expert_topk_softmax = oss;
    hp->swiglu_oai = oss;
    if (arch_u32(g, arch, "expert_count", &u) && u > 0) {
        uint32_t k = 0;
        if (hp->arch != LE_ARCH_LLAMA && !m3 && !moe_arch)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s with experts (%s.expert_count %u) is not "
                        "supported; mixture-of-experts models run as llama "
                        "(Mixtral), mistral3, qwen2moe, qwen3moe, "
                        "granitemoe, gpt-oss or deepseek2",
                        arch, arch, u);
        if (u > LE_MAX_EXPERTS ||
            !arch_u32(g, arch, "expert_used_count", &k) ||
            k == 0 || k > u || k > 64)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s.expert_count %u with expert_used_count "
                        "%u is out of range (1 to 64 used of at most %d)",
                        arch, u, k, LE_MAX_EXPERTS);
        hp->n_expert = (int32_t)u;
        hp->n_expert_used = (int32_t)k;
    } else if (moe_arch) {
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.expert_count is missing", arch);
    }
#define REQ(key, field)                                                      \
    do {                                                                     \
        if (!arch_u32(g, arch, key, &u) || u == 0 || u > (1u << 24))         \
            return fail(err, errlen, LE_EFORMAT,                             \
                        "model: %s.%s is missing or out of range", arch,     \
                        key);                                                \
        hp->field = (int32_t)u;                                              \
    } while (0)
    REQ("context_length", n_ctx_train);
    REQ("embedding_length", n_embd);
    REQ("block_count", n_layer);
    /* multi-token-prediction layers after the model's own (DeepSeek V3,
     * GLM-4.x files): not run, as llama.cpp does not for generation */
    if (arch_u32(g, arch, "nextn_predict_layers", &u) && u > 0) {
        if (u >= (uint32_t)hp->n_layer)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s.nextn_predict_layers %u leaves no layer "
                        "of block_count %d",
                        arch, u, hp->n_layer);
        hp->n_layer -= (int32_t)u;
    }
    REQ("feed_forward_length", n_ff);
    hp->n_ff_dense = hp->n_ff;
    REQ("attention.head_count", n_head);
    /* qwen2moe's shared expert: its own width, else the dense one */
    if (hp->arch == LE_ARCH_QWEN2MOE) {
        hp->n_ff_shexp = hp->n_ff;
        if (arch_u32(g, arch, "expert_shared_feed_forward_length", &u))
            REQ("expert_shared_feed_forward_length", n_ff_shexp);
    }
    /* an expert's width when the file gives it apart (qwen3moe,
     * qwen2moe; absent, qwen2moe's is n_ff / expert_used_count, as
     * llama.cpp reads it) */
    if (hp->n_expert > 0 &&
        arch_u32(g, arch, "expert_feed_forward_length", &u))
        REQ("expert_feed_forward_length", n_ff);
    else if (hp->arch == LE_ARCH_QWEN2MOE)
        hp->n_ff /= hp->n_expert_used;
    else if (oss || ds) /* llama.cpp requires it of these */
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.expert_feed_forward_length is missing", arch);
    if (ds) {
        /* the shared experts: expert_shared_count of the experts' width,
         * as one FFN, ungated */
        REQ("expert_shared_count", n_ff_shexp);
        if (hp->n_ff_shexp > 64)
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s.expert_shared_count %d is out of range",
                        arch, hp->n_ff_shexp);
        hp->n_ff_shexp *= hp->n_ff;
        hp->n_dense_lead = 0;
        if (arch_u32(g, arch, "leading_dense_block_count", &u))
            hp->n_dense_lead = (int32_t)(u < (1u << 24) ? u : (1u << 24));
    }
#undef REQ
    /* bounds that keep every product below in int range (n_head *
     * head_dim, n_batch * n_ff, ...) whatever the metadata says */
    if (hp->n_layer > 4096 || hp->n_embd > 65536 || hp->n_head > 1024 ||
        hp->n_ff > (1 << 20) || hp->n_ff <= 0 || hp->n_ff_shexp > (1 << 20) ||
        hp->n_ff_dense > (1 << 20))
        return fail(err, errlen, LE_EFORMAT,
                    "model: hyperparameters out of range (block_count %d, "
                    "embedding_length %d, head_count %d, "
                    "feed_forward_length %d)",
                    hp->n_layer, hp->n_embd, hp->n_head, hp->n_ff);
    enum le_status hst = ds ? load_mla(g, arch, hp, err, errlen)
                            : load_heads(g, arch, hp, err, errlen);
    if (hst != LE_OK)
        return hst;
    hp->eps = 1e-5f;
    float f;
    if (arch_f32(g, arch, "attention.layer_norm_rms_epsilon", &f))
        hp->eps = f;
    if (!(hp->eps > 0 && hp->eps < 1))
        return fail(err, errlen, LE_EFORMAT, "model: bad rms epsilon");
    hp->rope_base = 10000.0f;
    if (arch_f32(g, arch, "rope.freq_base", &f))
        hp->rope_base = f;
    if (!(hp->rope_base > 1))
        return fail(err, errlen, LE_EFORMAT, "model: bad rope.freq_base");
    hp->rope_scale = 1.0f;
    struct le_gguf_str st;
    float factor = 0;
    if (arch_f32(g, arch, "rope.scale_linear", &f) && f > 0)
        factor = f;
    if (arch_str(g, arch, "rope.scaling.type", &st)) {
        if (le_gguf_str_eq(st, "linear")) {
            if (arch_f32(g, arch, "rope.scaling.factor", &f) && f > 0)
                factor = f;
        } else if (le_gguf_str_eq(st, "yarn")) {
            hp->yarn = 1;
            if (arch_f32(g, arch, "rope.scaling.factor", &f) && f > 0)
                factor = f;
        }
        /* "none", and "llama3" (whose factors come as rope_freqs.weight) */
    }
    if (factor > 0)
        hp->rope_scale = 1.0f / factor;
    /* the context the rotation was trained for (YaRN's ramp, phi3's
     * long / short factors), and the factor on cos and sin (llama.cpp
     * applies rope.scaling.attn_factor to every architecture) */
    hp->n_ctx_orig = hp->n_ctx_train;
    if (arch_u32(g, arch, "rope.scaling.original_context_length", &u) && u > 0)
        hp->n_ctx_orig = (int32_t)(u < (1u << 24) ? u : (1u << 24));
    float af = 1.0f;
    if (arch_f32(g, arch, "rope.scaling.attn_factor", &f))
        af = f;
    if (!(af > 0 && af < 100))
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad rope.scaling.attn_factor %g", af);
    hp->rope_mscale = af;
    if (hp->yarn) {
        /* as llama.cpp's ggml_rope_yarn_corr_dims: the pairs that turn
         * more than beta_fast (default 32) times over the original
         * context keep their angle, those under beta_slow (1) take the
         * scaled one.  The log multiplier: deepseek2's in
         * load_ds_router, mistral3's and llama's below.  llama.cpp reads
         * it for mistral3 only; llama files carry one when its converter
         * wrote a Mistral-format model with YaRN but no temperature
         * (mscale_all_dim, 1 or 0), and llama.cpp then boosts cos and sin
         * as if there were none.  llmux applies it as the model's config
         * means it (transformers' yarn: m(f, 1) / m(f, mscale_all_dim))
         * rather than refuse such files or silently drop the key;
         * elsewhere, where no converter writes it, it is refused, and so
         * is an own attn factor */
        float oc = (float)hp->n_ctx_orig, nd = (float)hp->n_rot;
        float bf = 32.0f, bs = 1.0f, x, lm = 0;
        if (hp->arch == LE_ARCH_GEMMA2 || hp->arch == LE_ARCH_GEMMA3)
            return fail(err, errlen, LE_EFORMAT,
                        "model: YaRN rope scaling on %s is not supported",
                        arch);
        int lm_arch = m3 || hp->arch == LE_ARCH_LLAMA;
        if (lm_arch &&
            arch_f32(g, arch, "rope.scaling.yarn_log_multiplier", &lm) &&
            !(lm >= 0 && lm < 10))
            return fail(err, errlen, LE_EFORMAT,
                        "model: bad %s.rope.scaling.yarn_log_multiplier %g",
                        arch, lm);
        if ((!ds && !lm_arch &&
             arch_f32(g, arch, "rope.scaling.yarn_log_multiplier", &x) &&
             x != 0) ||
            (arch_f32(g, arch, "rope.scaling.yarn_attn_factor", &x) &&
             x != 1))
            return fail(err, errlen, LE_EFORMAT,
                        "model: YaRN's yarn_log_multiplier (on %s) and "
                        "yarn_attn_factor are not supported",
                        arch);
        if (arch_f32(g, arch, "rope.scaling.yarn_beta_fast", &x))
            bf = x;
        if (arch_f32(g, arch, "rope.scaling.yarn_beta_slow", &x))
            bs = x;
        hp->yarn_ext = 1.0f;
        if (arch_f32(g, arch, "rope.scaling.yarn_ext_factor", &x))
            hp->yarn_ext = x;
        if (!(bf > 0 && bs > 0 && bf < 1e6f && bs < 1e6f) ||
            !(hp->yarn_ext >= 0 && hp->yarn_ext <= 1))
            return fail(err, errlen, LE_EFORMAT,
                        "model: bad YaRN beta_fast %g, beta_slow %g or "
                        "ext_factor %g",
                        bf, bs, hp->yarn_ext);
        float lo = floorf(nd * logf(oc / (bf * 2 * (float)M_PI)) /
                          (2 * logf(hp->rope_base))),
              hi = ceilf(nd * logf(oc / (bs * 2 * (float)M_PI)) /
                         (2 * logf(hp->rope_base)));
        hp->yarn_lo = lo > 0 ? lo : 0;
        hp->yarn_hi = hi < nd - 1 ? hi : nd - 1;
        /* llama.cpp's rope boosts cos and sin only with a ramp, by
         * m(factor, 1), which a log multiplier (mscale_all_dim; 1 in
         * Ministral 3, so no boost) divides by its own m */
        float fs = 1.0f / hp->rope_scale;
        if (hp->yarn_ext != 0)
            hp->rope_mscale =
                af * yarn_m(fs, 1.0f) / (lm != 0 ? yarn_m(fs, lm) : 1.0f);
    }
    enum le_status tst = load_attn_temp(g, arch, hp, err, errlen);
    if (tst != LE_OK)
        return tst;
    int g3 = hp->arch == LE_ARCH_GEMMA3, g2 = hp->arch == LE_ARCH_GEMMA2;
    int gemma = g3 || g2;
    int granite =
        hp->arch == LE_ARCH_GRANITE || hp->arch == LE_ARCH_GRANITEMOE;
    hp->rope_neox = hp->arch != LE_ARCH_LLAMA && !granite && !ds && !m3;
    /* llama.cpp's mistral3 graph rotates whole heads (it stops on any
     * other rope.dimension_count) */
    if (m3 && hp->n_rot != hp->head_dim)
        return fail(err, errlen, LE_EFORMAT,
                    "model: %s.rope.dimension_count %d is not the head size "
                    "%d",
                    arch, hp->n_rot, hp->head_dim);
    /* as llama.cpp reads them: gemma3 27B (62 layers) and gemma2 27B (46)
     * scale q.k by their query_pre_attn_scalar, n_embd / n_head, the
     * others by head_dim */
    hp->attn_scale =
        1.0f / sqrtf((g3 && hp->n_layer == 62) || (g2 && hp->n_layer == 46)
                         ? (float)(hp->n_embd / hp->n_head)
                         : (float)hp->head_dim);
    hp->embd_scale = gemma ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->gelu = gemma;
    hp->n_swa = 0;
    hp->swa_pattern = 1;
    hp->swa_rope_local = g3;
    hp->rope_base_swa = hp->rope_base;
    u = 0;
    int phi3 = hp->arch == LE_ARCH_PHI3;
    if (phi3 && !arch_u32(g, arch, "attention.sliding_window", &u)) {
        /* llama.cpp's defaults for the Phi-3 files made before the key */
        if ((hp->n_layer == 32 || hp->n_layer == 40) &&
            hp->n_ctx_train == 4096)
            u = 2047;
        else if (hp->n_layer == 32 && hp->n_head_kv == 32 &&
                 hp->n_ctx_train == 131072)
            u = 262144;
        else if (hp->n_layer == 40 && hp->n_ctx_train == 131072)
            u = 131072;
        else
            return fail(err, errlen, LE_EFORMAT,
                        "model: phi3.attention.sliding_window is missing");
    }
    if (gemma && !arch_u32(g, arch, "attention.sliding_window", &u))
        u = g2 ? 4096 : 0; /* gemma2's when its file has none (llama.cpp) */
    if (oss && (!arch_u32(g, arch, "attention.sliding_window", &u) || !u))
        return fail(err, errlen, LE_EFORMAT,
                    "model: gpt-oss.attention.sliding_window is missing");
    if (u) {
        if (u > (1u << 24))
            return fail(err, errlen, LE_EFORMAT,
                        "model: bad attention.sliding_window %u", u);
        hp->n_swa = (int32_t)u;
        /* gemma3: every 6th layer global, the local ones at base 10000;
         * gemma2: the even layers local, one base */
        hp->swa_pattern = g3 ? 6 : g2 || oss ? 2 : 0; /* phi3: all */
        if (g3)
            hp->rope_base_swa = 10000.0f;
    }
    if (oss) {
        /* llama.cpp's default period 2 (the even layers local); a file
         * may say otherwise, and may give the local layers their own
         * rope base, which llmux does not implement: refused */
        uint32_t per;
        if (arch_u32(g, arch, "attention.sliding_window_pattern", &per)) {
            if (per > 64)
                return fail(err, errlen, LE_EFORMAT,
                            "model: bad attention.sliding_window_pattern %u",
                            per);
            hp->swa_pattern = (int)per;
        }
        if (arch_f32(g, arch, "rope.freq_base_swa", &f) &&
            f != hp->rope_base)
            return fail(err, errlen, LE_EFORMAT,
                        "model: gpt-oss with rope.freq_base_swa %g apart "
                        "from rope.freq_base %g is not supported",
                        f, hp->rope_base);
    }
    /* the soft caps: gemma2's defaults (50 and 30) when its file has no
     * key, as llama.cpp's */
    /* granite's multipliers, all four required as llama.cpp reads them */
    hp->residual_scale = 1.0f;
    hp->logit_scale = 0;
    if (granite) {
        float es, rs, sc, ls;
        if (!arch_f32(g, arch, "embedding_scale", &es) ||
            !arch_f32(g, arch, "residual_scale", &rs) ||
            !arch_f32(g, arch, "attention.scale", &sc) ||
            !arch_f32(g, arch, "logit_scale", &ls) || !(es > 0) ||
            !(rs > 0) || !(sc > 0) || !(ls > 0))
            return fail(err, errlen, LE_EFORMAT,
                        "model: %s needs embedding_scale, residual_scale, "
                        "attention.scale and logit_scale, all positive",
                        arch);
        hp->embd_scale = es;
        hp->residual_scale = rs;
        hp->attn_scale = sc;
        hp->logit_scale = ls;
    }
    if (ds) {
        enum le_status dst = load_ds_router(g, arch, hp, err, errlen);
        if (dst != LE_OK)
            return dst;
    }
    hp->softcap = g2 ? 30.0f : 0;
    hp->attn_softcap = g2 ? 50.0f : 0;
    if (gemma && arch_f32(g, arch, "final_logit_softcapping", &f))
        hp->softcap = f;
    if (g2 && arch_f32(g, arch, "attn_logit_softcapping", &f))
        hp->attn_softcap = f;
    if (!(hp->softcap >= 0) || !(hp->attn_softcap >= 0))
        return fail(err, errlen, LE_EFORMAT,
                    "model: bad final_logit_softcapping or "
                    "attn_logit_softcapping");
    return LE_OK;
}

/* v = rows [r0, r0 + n) of t (a 2-D or 3-D tensor whose rows are
 * ne[0] wide), as a 2-D tensor of n rows */
static void
row_view(struct le_gguf_tensor *v, const struct le_gguf_tensor *t, int64_t r0,
         int64_t n)
{
    size_t row = le_row_size(t->type, t->ne[0]);
    *v = *t;
    v->n_dims = 2;
    v->ne[1] = n;
    v->ne[2] = v->ne[3] = 1;
    v->data = (const uint8_t *)t->data + (size_t)r0 * row;
    v->offset += (uint64_t)r0 * row;
    v->nbytes = (size_t)n * row;
}

/* deepseek2's attention tensors of layer l (load_tensors); pv: the
 * layer's 2 x n_head views, k_b's then v_b's.  A file with attn_kv_b
 * gives v_b as row ranges of it and k_b transposed into m->mla_kb
 * (allocated at layer 0): a head's k_nope rows are kv_lora wide, the
 * absorbed product wants kv_lora rows of mla_nope. */
static enum le_status
load_mla_layer(struct le_model *m, int32_t l, struct le_gguf_tensor *pv,
               char *err, size_t errlen)
{
    const struct le_gguf *g = m->gguf;
    const struct le_hparams *hp = &m->hp;
    struct le_layer *L = &m->layers[l];
    int32_t E = hp->n_embd, H = hp->n_head, R = hp->n_rot, LR = hp->kv_lora,
            NP = hp->mla_nope, V = hp->mla_v, QH = H * (NP + R);
    enum le_status st = LE_EFORMAT;
    char n[96];
#define NAME(suffix) (snprintf(n, sizeof(n), "blk.%d.%s", (int)l, suffix), n)
    if (hp->q_lora > 0) {
        if (!(L->wq_a = want(g, NAME("attn_q_a.weight"), E, hp->q_lora, 1,
                             &st, err, errlen)) ||
            !(L->q_a_norm = want(g, NAME("attn_q_a_norm.weight"),
                                 hp->q_lora, 0, 1, &st, err, errlen)) ||
            !(L->wq = want(g, NAME("attn_q_b.weight"), hp->q_lora, QH, 1,
                           &st, err, errlen)))
            return st;
    } else if (!(L->wq = want(g, NAME("attn_q.weight"), E, QH, 1, &st, err,
                              errlen))) {
        return st;
    }
    if (!(L->wkv_a = want(g, NAME("attn_kv_a_mqa.weight"), E, LR + R, 1, &st,
                          err, errlen)) ||
        !(L->kv_a_norm = want(g, NAME("attn_kv_a_norm.weight"), LR, 0, 1,
                              &st, err, errlen)))
        return st;
    struct le_gguf_tensor *kb = pv, *vb = pv + H;
    L->k_b = kb;
    L->v_b = vb;
    if (le_gguf_tensor(g, NAME("attn_k_b.weight"))) {
        const struct le_gguf_tensor *k3, *v3;
        if (!(k3 = want3(g, NAME("attn_k_b.weight"), NP, LR, H, 1, &st, err,
                         errlen)) ||
            !(v3 = want3(g, NAME("attn_v_b.weight"), LR, V, H, 1, &st, err,
                         errlen)))
            return st;
        for (int32_t h = 0; h < H; h++) {
            row_view(&kb[h], k3, (int64_t)h * LR, LR);
            row_view(&vb[h], v3, (int64_t)h * V, V);
        }
        return LE_OK;
    }
    const struct le_gguf_tensor *kv =
        want(g, NAME("attn_kv_b.weight"), LR, (int64_t)H * (NP + V), 1, &st,
             err, errlen);
#undef NAME
    if (!kv)
        return st;
    /* f16 unless the file's are f32: a quantised attn_kv_b's values are
     * (nearly always) exact there at half of f32's bytes, which the
     * generation step reads whole for every head */
    enum le_type kt = kv->type == LE_TYPE_F32 ? LE_TYPE_F32 : LE_TYPE_F16;
    size_t per = (size_t)LR * (size_t)NP, /* one head's k_b values */
        esz = kt == LE_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    if (!m->mla_kb &&
        !(m->mla_kb = malloc((size_t)hp->n_layer * (size_t)H * per * esz)))
        return fail(err, errlen, LE_ENOMEM, "model: out of memory");
    const struct le_type_traits *tt = le_type_get(kv->type);
    size_t row = le_row_size(kv->type, LR);
    float *tmp = malloc((size_t)LR * sizeof(float));
    if (!tmp)
        return fail(err, errlen, LE_ENOMEM, "model: out of memory");
    for (int32_t h = 0; h < H; h++) {
        size_t at = ((size_t)l * (size_t)H + (size_t)h) * per;
        float *d32 = (float *)m->mla_kb + at;
        uint16_t *d16 = (uint16_t *)m->mla_kb + at;
        for (int32_t i = 0; i < NP; i++) {
            tt->to_float((const uint8_t *)kv->data +
                             ((size_t)h * (size_t)(NP + V) + (size_t)i) * row,
                         tmp, LR);
            for (int32_t j = 0; j < LR; j++) {
                size_t o = (size_t)j * (size_t)NP + (size_t)i;
                if (kt == LE_TYPE_F32)
                    d32[o] = tmp[j];
                else
                    d16[o] = le_fp32_to_fp16(tmp[j]);
            }
        }
        struct le_gguf_tensor *t = &kb[h];
        memset(t, 0, sizeof(*t));
        t->name = kv->name;
        t->n_dims = 2;
        t->ne[0] = NP;
        t->ne[1] = LR;
        t->ne[2] = t->ne[3] = 1;
        t->type = kt;
        t->data = kt == LE_TYPE_F32 ? (const void *)d32 : (const void *)d16;
        t->nbytes = per * esz;
        row_view(&vb[h], kv, (int64_t)h * (NP + V) + NP, V);
    }
    free(tmp);
    return LE_OK;
}

static enum le_status
load_tensors(struct le_model *m, char *err, size_t errlen)
{
    const struct le_gguf *g = m->gguf;
    struct le_hparams *hp = &m->hp;
    enum le_status st = LE_EFORMAT;
    m->tok_embd = le_gguf_tensor(g, "token_embd.weight");
    if (!m->tok_embd)
        return fail(err, errlen, LE_EFORMAT,
                    "model: tensor token_embd.weight is missing");
    if (m->tok_embd->n_dims < 2 || m->tok_embd->ne[1] <= 0 ||
        m->tok_embd->ne[1] > (1 << 24))
        return fail(err, errlen, LE_EFORMAT,
                    "model: token_embd.weight is not a matrix");
    hp->n_vocab = (int32_t)m->tok_embd->ne[1];
    int32_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    int32_t QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    if (!want(g, "token_embd.weight", E, V, 1, &st, err, errlen))
        return st;
    m->output_norm = want(g, "output_norm.weight", E, 0, 1, &st, err, errlen);
    if (!m->output_norm)
        return st;
    m->output = want(g, "output.weight", E, V, 0, &st, err, errlen);
    if (!m->output) {
        if (le_gguf_tensor(g, "output.weight"))
            return st;
        /* tied embeddings: the output projection is the embedding matrix */
        m->output = want(g, "token_embd.weight", E, V, 1, &st, err, errlen);
        if (!m->output)
            return st;
    }
    const struct le_gguf_tensor *rf =
        want(g, "rope_freqs.weight", hp->n_rot / 2, 0, 0, &st, err, errlen);
    if (!rf && le_gguf_tensor(g, "rope_freqs.weight"))
        return st;
    if (rf) {
        m->rope_freqs = malloc((size_t)hp->n_rot / 2 * sizeof(float));
        if (!m->rope_freqs)
            return LE_ENOMEM;
        memcpy(m->rope_freqs, rf->data, (size_t)hp->n_rot / 2 * sizeof(float));
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return LE_ENOMEM;
    int oss = hp->arch == LE_ARCH_GPTOSS;
    int bias = hp->arch == LE_ARCH_QWEN2 || hp->arch == LE_ARCH_QWEN2MOE ||
               oss,
        gemma = hp->arch == LE_ARCH_GEMMA3 || hp->arch == LE_ARCH_GEMMA2,
        qkn = hp->arch == LE_ARCH_QWEN3 || hp->arch == LE_ARCH_GEMMA3 ||
              hp->arch == LE_ARCH_QWEN3MOE;
    int32_t NX = hp->n_expert;
    int phi3 = hp->arch == LE_ARCH_PHI3, ds = hp->arch == LE_ARCH_DEEPSEEK2;
    /* views per layer: each expert's three, then phi3's q, k, v of its
     * attn_qkv and gate, up of its ffn_up, or deepseek2's k_b and v_b of
     * every head */
    size_t XS = 3 * (size_t)NX + (phi3 ? 5 : 0) +
                (ds ? 2 * (size_t)hp->n_head : 0);
    /* deepseek2's attention output's width (every head's value) */
    int32_t WO = ds ? hp->n_head * hp->mla_v : QD;
    if (XS > 0) {
        m->n_xviews = (size_t)hp->n_layer * XS;
        m->xviews = calloc(m->n_xviews, sizeof(*m->xviews));
        if (!m->xviews)
            return LE_ENOMEM;
    }
    if (phi3) { /* LongRoPE: le_model_load picks one for its context */
        m->rope_long = want(g, "rope_factors_long.weight", hp->n_rot / 2, 0,
                            0, &st, err, errlen);
        m->rope_short = want(g, "rope_factors_short.weight", hp->n_rot / 2, 0,
                             0, &st, err, errlen);
        if ((!m->rope_long && le_gguf_tensor(g, "rope_factors_long.weight")) ||
            (!m->rope_short && le_gguf_tensor(g, "rope_factors_short.weight")))
            return st;
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        struct le_layer *L = &m->layers[l];
        char n[96];
#define T(field, suffix, a, b, req)                                          \
    do {                                                                     \
        snprintf(n, sizeof(n), "blk.%d.%s", (int)l, suffix);                 \
        L->field = want(g, n, a, b, req, &st, err, errlen);                  \
        if (!L->field && ((req) || le_gguf_tensor(g, n)))                    \
            return st;                                                       \
    } while (0)
        T(attn_norm, "attn_norm.weight", E, 0, 1);
        /* this layer's views (none in a dense non-phi3 file: xviews NULL) */
        struct le_gguf_tensor *pv =
            m->xviews ? m->xviews + (size_t)l * XS + 3 * (size_t)NX : NULL;
        if (ds) {
            st = load_mla_layer(m, l, pv, err, errlen);
            if (st != LE_OK)
                return st;
        } else if (phi3) {
            /* q, k and v are row ranges of attn_qkv, gate and up the two
             * halves of ffn_up (the first takes the SiLU) */
            const struct le_gguf_tensor *qkv, *up;
            snprintf(n, sizeof(n), "blk.%d.attn_qkv.weight", (int)l);
            if (!(qkv = want(g, n, E, QD + 2 * KD, 1, &st, err, errlen)))
                return st;
            snprintf(n, sizeof(n), "blk.%d.ffn_up.weight", (int)l);
            if (!(up = want(g, n, E, 2 * (int64_t)F, 1, &st, err, errlen)))
                return st;
            const int32_t at[5] = {0, QD, QD + KD, 0, F},
                          rows[5] = {QD, KD, KD, F, F};
            for (int k = 0; k < 5; k++)
                row_view(&pv[k], k < 3 ? qkv : up, at[k], rows[k]);
            L->wq = &pv[0];
            L->wk = &pv[1];
            L->wv = &pv[2];
            L->w_gate = &pv[3];
            L->w_up = &pv[4];
        } else {
            T(wq, "attn_q.weight", E, QD, 1);
            T(wk, "attn_k.weight", E, KD, 1);
            T(wv, "attn_v.weight", E, KD, 1);
        }
        T(bq, "attn_q.bias", QD, 0, bias);
        T(bk, "attn_k.bias", KD, 0, bias);
        T(bv, "attn_v.bias", KD, 0, bias);
        if (qkn) {
            T(q_norm, "attn_q_norm.weight", hp->head_dim, 0, 1);
            T(k_norm, "attn_k_norm.weight", hp->head_dim, 0, 1);
        }
        if (gemma) {
            T(attn_post_norm, "post_attention_norm.weight", E, 0, 1);
            T(ffn_post_norm, "post_ffw_norm.weight", E, 0, 1);
        }
        T(wo, "attn_output.weight", WO, E, 1);
        if (oss) {
            T(bo, "attn_output.bias", E, 0, 1);
            T(sinks, "attn_sinks.weight", hp->n_head, 0, 1);
            /* gpt-oss names its pre-FFN norm post_attention_norm */
            T(ffn_norm, "post_attention_norm.weight", E, 0, 1);
        } else {
            T(ffn_norm, "ffn_norm.weight", E, 0, 1);
        }
        if (NX == 0 || (ds && l < hp->n_dense_lead)) {
            int32_t FD = hp->n_ff_dense; /* n_ff but in deepseek2 */
            if (!phi3) {
                T(w_gate, "ffn_gate.weight", E, FD, 1);
                T(w_up, "ffn_up.weight", E, FD, 1);
            }
            T(w_down, "ffn_down.weight", FD, E, 1);
            continue;
        }
        T(ffn_gate_inp, "ffn_gate_inp.weight", E, NX, 1);
        if (ds)
            T(exp_probs_b, "exp_probs_b.bias", NX, 0, 0);
        if (oss) {
            T(gate_inp_b, "ffn_gate_inp.bias", NX, 0, 1);
            T(exp_gate_b, "ffn_gate_exps.bias", F, NX, 1);
            T(exp_up_b, "ffn_up_exps.bias", F, NX, 1);
            T(exp_down_b, "ffn_down_exps.bias", E, NX, 1);
            if (L->exp_gate_b->type != LE_TYPE_F32 ||
                L->exp_up_b->type != LE_TYPE_F32 ||
                L->exp_down_b->type != LE_TYPE_F32)
                return fail(err, errlen, LE_EFORMAT,
                            "model: blk.%d's expert biases must be f32",
                            (int)l);
        }
        if (hp->n_ff_shexp > 0) {
            int32_t FS = hp->n_ff_shexp;
            if (!ds) /* deepseek2's shared experts have no gate */
                T(sh_gate_inp, "ffn_gate_inp_shexp.weight", E, 0, 1);
            T(sh_gate, "ffn_gate_shexp.weight", E, FS, 1);
            T(sh_up, "ffn_up_shexp.weight", E, FS, 1);
            T(sh_down, "ffn_down_shexp.weight", FS, E, 1);
        }
        /* Mixtral files from before the merged layout keep each expert
         * apart (blk.N.ffn_gate.E.weight): say that, not "missing" */
        snprintf(n, sizeof(n), "blk.%d.ffn_gate.0.weight", (int)l);
        if (le_gguf_tensor(g, n))
            return fail(err, errlen, LE_EFORMAT,
                        "model: the experts are stored one tensor each (an "
                        "older Mixtral GGUF); convert it again to the merged "
                        "ffn_*_exps layout");
        const char *xn[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                             "ffn_down_exps.weight"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof(n), "blk.%d.%s", (int)l, xn[k]);
            const struct le_gguf_tensor *t3 =
                want3(g, n, k < 2 ? E : F, k < 2 ? F : E, NX, 1, &st, err,
                      errlen);
            if (!t3)
                return st;
            struct le_gguf_tensor *v =
                m->xviews + (size_t)l * XS + (size_t)k * (size_t)NX;
            for (int32_t e = 0; e < NX; e++)
                row_view(&v[e], t3, (int64_t)e * t3->ne[1], t3->ne[1]);
            if (k == 0)
                L->exp_gate = v;
            else if (k == 1)
                L->exp_up = v;
            else
                L->exp_down = v;
        }
#undef T
    }
    return LE_OK;
}

/* ------------------------------------------------------------------ */
/* Repacking (repack.c): every matrix-product weight of a type with
 * repacked kernels at the active ISA level is copied once into groups of
 * 16 interleaved rows.  The copy is what generation streams, so it lives
 * in one 2 MiB-aligned arena with transparent huge pages asked for
 * (fewer TLB misses on a stream of hundreds of MB; LLMUX_HUGEPAGES=0
 * turns the request off, to measure). */

struct pack_job {
    struct le_model *m;
    const struct le_gguf_tensor **list;
    int n;
};

/* Index of t in m->packed: a GGUF tensor's own, an expert view's after
 * them. */
static size_t
slot_of(const struct le_model *m, const struct le_gguf_tensor *t)
{
    uintptr_t a = (uintptr_t)t, b = (uintptr_t)m->gguf->tensors;
    size_t n = (size_t)m->gguf->n_tensors;
    if (a >= b && a < b + n * sizeof(*t))
        return (size_t)(a - b) / sizeof(*t);
    return n + (size_t)(t - m->xviews);
}

static void
pack_groups(void *arg, int ith, int nth)
{
    struct pack_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        const struct le_gguf_tensor *t = j->list[i];
        const struct le_packed *P = j->m->packed[slot_of(j->m, t)];
        int ng = (P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
        size_t row = le_row_size(t->type, P->n_in);
        for (int g = ith; g < ng; g += nth) {
            int r0 = g * LE_PACK_ROWS;
            int nr = P->n_out - r0 < LE_PACK_ROWS ? P->n_out - r0
                                                  : LE_PACK_ROWS;
            le_pack_rows(&P->pt, (const uint8_t *)t->data + (size_t)r0 * row,
                         row, nr, P->n_in, P->data + (size_t)g * P->group_bytes);
        }
    }
}

static enum le_status
pack_weights(struct le_model *m, char *err, size_t errlen)
{
    const struct le_gguf *g = m->gguf;
    if (le_isa_active() == LE_ISA_NONE)
        return LE_OK; /* plain C: the per-row path over the GGUF bytes */
    size_t NX = (size_t)m->hp.n_expert;
    size_t cap = (size_t)m->hp.n_layer *
                     (8 + 3 * NX + 2 + 2 * (size_t)m->hp.n_head) +
                 1,
           n = 0, nc = 0;
    const struct le_gguf_tensor **list = calloc(cap, sizeof(*list));
    const struct le_gguf_tensor **cand = calloc(cap, sizeof(*cand));
    m->n_slots = (size_t)g->n_tensors + m->n_xviews;
    m->packed = calloc(m->n_slots ? m->n_slots : 1, sizeof(*m->packed));
    if (!list || !cand || !m->packed) {
        free(list);
        free(cand);
        return fail(err, errlen, LE_ENOMEM, "model: out of memory");
    }
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct le_layer *L = &m->layers[l];
        const struct le_gguf_tensor *c[7] = {L->wq,     L->wk,   L->wv,
                                             L->wo,     L->w_gate,
                                             L->w_up,   L->w_down};
        for (int k = 0; k < 7; k++)
            if (c[k])
                cand[nc++] = c[k];
        const struct le_gguf_tensor *x[4] = {
            NX ? L->ffn_gate_inp : NULL, L->sh_gate, L->sh_up, L->sh_down};
        for (int k = 0; k < 4; k++)
            if (x[k])
                cand[nc++] = x[k];
        for (size_t e = 0; L->exp_gate && e < NX; e++) {
            cand[nc++] = &L->exp_gate[e];
            cand[nc++] = &L->exp_up[e];
            cand[nc++] = &L->exp_down[e];
        }
        /* deepseek2: the q LoRA's first half, the latent's projection,
         * every head's k_b and v_b */
        if (L->wq_a)
            cand[nc++] = L->wq_a;
        if (L->wkv_a)
            cand[nc++] = L->wkv_a;
        for (int h = 0; L->k_b && h < m->hp.n_head; h++) {
            cand[nc++] = &L->k_b[h];
            cand[nc++] = &L->v_b[h];
        }
    }
    cand[nc++] = m->output;
    enum le_status st = LE_OK;
    size_t total = 0;
    for (size_t i = 0; i < nc; i++) {
        const struct le_gguf_tensor *t = cand[i];
        struct le_pack_traits pt;
        if (!le_pack_traits_at(t->type, le_isa_active(), &pt) ||
            m->packed[slot_of(m, t)] ||
            !le_pack_accepts(t->type, t->data, t->nbytes))
            continue;
        struct le_packed *P = calloc(1, sizeof(*P));
        if (!P) {
            st = fail(err, errlen, LE_ENOMEM, "model: out of memory");
            goto out;
        }
        P->pt = pt;
        P->n_in = (int)t->ne[0];
        P->n_out = (int)t->ne[1];
        P->group_bytes = le_pack_group_bytes(&pt, P->n_in);
        m->packed[slot_of(m, t)] = P;
        list[n++] = t;
        total += P->group_bytes *
                 (size_t)((P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS);
    }
    if (n == 0)
        goto out;
    size_t huge = (size_t)2 << 20;
    total = (total + huge - 1) / huge * huge;
    void *arena = NULL;
    if (posix_memalign(&arena, huge, total) != 0) {
        st = fail(err, errlen, LE_ENOMEM,
                  "model: out of memory for %zu MiB of repacked weights",
                  total >> 20);
        goto out;
    }
    m->pack_arena = arena;
    m->pack_size = total;
    const char *hp = getenv("LLMUX_HUGEPAGES");
    if (!hp || strcmp(hp, "0") != 0)
        (void)madvise(arena, total, MADV_HUGEPAGE); /* advice only */
    /* --mlock covers the copy the kernels read; a failure only costs
     * page-ins, as for the file (gguf.c) */
    if (m->params.use_mlock && mlock(arena, total) != 0)
        fprintf(stderr,
                "llmux: warning: mlock of %zu MiB of repacked weights "
                "failed; continuing without it\n",
                total >> 20);
    uint8_t *at = arena;
    for (size_t i = 0; i < n; i++) {
        struct le_packed *P = m->packed[slot_of(m, list[i])];
        P->data = at;
        at += P->group_bytes *
              (size_t)((P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS);
    }
    struct pack_job j = {m, list, (int)n};
    le_pool_run(m->pool, pack_groups, &j, 0);
out:
    free(list);
    free(cand);
    return st;
}

void
le_model_params_default(struct le_model_params *p)
{
    memset(p, 0, sizeof(*p));
    p->n_threads = 1;
    p->use_mmap = 1;
    p->n_batch = 128;
    p->kv_type = LE_KV_F16;
}

static void
set_chat(struct le_model *m)
{
    struct le_gguf_str t;
    m->chat = LE_CHAT_CHATML;
    m->chat_tools = LE_TOOLS_JSON;
    if (le_gguf_get_str(m->gguf, "tokenizer.chat_template", &t)) {
        m->chat = le_chat_detect(t.ptr, (size_t)t.len);
        m->chat_tools = le_chat_tools_detect(t.ptr, (size_t)t.len);
        m->tools_first = le_chat_tools_first(t.ptr, (size_t)t.len);
    }
    /* the tool format's and the chat format's markers that the
     * vocabulary has as control tokens (one token each, no text without
     * `special`) */
    m->n_keep_tok = 0;
    const char *const *lists[2] = {le_chat_tools_markers(m->chat_tools),
                                   le_chat_markers(m->chat)};
    for (int k = 0; k < 2; k++)
        for (const char *const *mk = lists[k];
             *mk && m->n_keep_tok < LE_KEEP_TOK_MAX; mk++) {
            int32_t id;
            if (le_tokenize(m->vocab, *mk, strlen(*mk), false, true, &id,
                            1) == 1 &&
                le_token_to_piece(m->vocab, id, false, NULL, 0) == 0)
                m->keep_tok[m->n_keep_tok++] = id;
        }
}

enum le_status
le_model_load(struct le_gguf *g, const struct le_model_params *p,
              struct le_model **out, char *err, size_t errlen)
{
    enum le_status st = LE_ENOMEM;
    struct le_model *m = calloc(1, sizeof(*m));
    if (!m) {
        le_gguf_free(g);
        return st;
    }
    m->gguf = g;
    if (p)
        m->params = *p;
    else
        le_model_params_default(&m->params);
    if (m->params.n_threads <= 0)
        m->params.n_threads = 1;
    if (m->params.n_batch <= 0)
        m->params.n_batch = 128;
    if (m->params.n_batch > 512)
        m->params.n_batch = 512;
    st = load_hparams(m, err, errlen);
    if (st != LE_OK)
        goto out;
    st = load_tensors(m, err, errlen);
    if (st != LE_OK)
        goto out;
    st = le_vocab_load(g, &m->vocab, err, errlen);
    if (st != LE_OK)
        goto out;
    if (le_vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
        st = fail(err, errlen, LE_EFORMAT,
                  "model: the vocabulary has %d tokens but token_embd.weight "
                  "only %d rows",
                  (int)le_vocab_n_tokens(m->vocab), (int)m->hp.n_vocab);
        goto out;
    }
    if (m->params.n_ctx <= 0)
        m->params.n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (m->params.n_ctx > (1 << 20)) {
        st = fail(err, errlen, LE_EINVAL, "model: context %d is too large",
                  m->params.n_ctx);
        goto out;
    }
    /* phi3's LongRoPE: the long factors when the context is longer than
     * the one the rotation was trained for, as llama.cpp picks them */
    const struct le_gguf_tensor *lr =
        m->params.n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
    if (lr && !m->rope_freqs) {
        m->rope_freqs = malloc((size_t)m->hp.n_rot / 2 * sizeof(float));
        if (!m->rope_freqs) {
            st = LE_ENOMEM;
            goto out;
        }
        memcpy(m->rope_freqs, lr->data,
               (size_t)m->hp.n_rot / 2 * sizeof(float));
    }
    if (m->params.kv_type == LE_KV_Q8_0 &&
        (m->hp.head_dim % 32 || !le_type_get(LE_TYPE_Q8_0) ||
         !le_type_get(LE_TYPE_Q8_0)->from_float)) {
        st = fail(err, errlen, LE_EINVAL,
                  "model: a q8_0 KV cache needs a head size that is a "
                  "multiple of 32 (it is %d)",
                  m->hp.head_dim);
        goto out;
    }
    const struct le_type_traits *kt = le_type_get(LE_TYPE_F16);
    if (!kt || !kt->from_float || !kt->vec_dot || !kt->to_float) {
        st = fail(err, errlen, LE_EFORMAT, "model: f16 kernels are missing");
        goto out;
    }
    set_chat(m);
    st = le_pool_new(m->params.n_threads, &m->pool);
    if (st != LE_OK)
        goto out;
    st = pack_weights(m, err, errlen);
    if (st != LE_OK)
        goto out;
    int64_t params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        params += g->tensors[i].ne[0] * g->tensors[i].ne[1] *
                  g->tensors[i].ne[2] * g->tensors[i].ne[3];
    const struct le_type_traits *wt = le_type_get(m->layers[0].wq->type);
    snprintf(m->desc, sizeof(m->desc),
             "%s, %d layers, %d embd, %d heads (%d kv), %d vocab, %s, %lld "
             "params",
             arch_names[m->hp.arch], m->hp.n_layer,
             m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv, m->hp.n_vocab,
             wt ? wt->name : "?", (long long)params);
    if (m->hp.n_expert > 0) {
        size_t dl = strlen(m->desc);
        snprintf(m->desc + dl, sizeof(m->desc) - dl, ", %d experts (%d used)",
                 m->hp.n_expert, m->hp.n_expert_used);
    }
    *out = m;
    m = NULL;
out:
    le_model_free(m);
    return st;
}

static enum le_status
open_gguf(const char *path, int use_mmap, int use_mlock, struct le_gguf **g,
          char *err, size_t errlen)
{
    int mode = use_mmap ? LE_GGUF_MMAP : LE_GGUF_READ;
    if (use_mlock)
        mode |= LE_GGUF_MLOCK;
    return le_gguf_open(path, mode, g, err, errlen);
}

enum le_status
le_model_open(const char *path, const struct le_model_params *p,
              struct le_model **out, char *err, size_t errlen)
{
    struct le_model_params dp;
    if (!p) {
        le_model_params_default(&dp);
        p = &dp;
    }
    if (!path || !out)
        return fail(err, errlen, LE_EINVAL, "model: no path");
    struct le_gguf *g = NULL;
    enum le_status st = open_gguf(path, p->use_mmap, p->use_mlock, &g, err,
                                  errlen);
    if (st != LE_OK)
        return st;
    return le_model_load(g, p, out, err, errlen);
}

enum le_status
le_model_open_vocab(const char *path, struct le_model **out, char *err,
                    size_t errlen)
{
    if (!path || !out)
        return fail(err, errlen, LE_EINVAL, "model: no path");
    struct le_gguf *g = NULL;
    enum le_status st = open_gguf(path, 1, 0, &g, err, errlen);
    if (st != LE_OK)
        return st;
    struct le_model *m = calloc(1, sizeof(*m));
    if (!m) {
        le_gguf_free(g);
        return LE_ENOMEM;
    }
    m->gguf = g;
    m->vocab_only = 1;
    le_model_params_default(&m->params);
    st = le_vocab_load(g, &m->vocab, err, errlen);
    if (st != LE_OK) {
        le_model_free(m);
        return st;
    }
    m->hp.n_vocab = le_vocab_n_tokens(m->vocab);
    set_chat(m);
    snprintf(m->desc, sizeof(m->desc), "vocabulary only, %d tokens",
             (int)m->hp.n_vocab);
    *out = m;
    return LE_OK;
}

static void
free_packed(struct le_model *m)
{
    if (m->packed)
        for (size_t i = 0; i < m->n_slots; i++)
            free(m->packed[i]);
    free(m->packed);
    free(m->pack_arena);
    m->packed = NULL;
    m->pack_arena = NULL;
    m->pack_size = 0;
}

void
le_model_free(struct le_model *m)
{
    if (!m)
        return;
    le_pool_free(m->pool);
    le_vocab_free(m->vocab);
    free_packed(m);
    free(m->layers);
    free(m->xviews);
    free(m->mla_kb);
    free(m->rope_freqs);
    le_gguf_free(m->gguf);
    free(m);
}

void
le_model_drop_packed(struct le_model *m)
{
    free_packed(m);
}

size_t
le_model_packed_bytes(const struct le_model *m)
{
    return m->pack_size;
}

int32_t
le_model_n_ctx(const struct le_model *m)
{
    return m->params.n_ctx;
}

int32_t
le_model_n_vocab(const struct le_model *m)
{
    return m->hp.n_vocab;
}

int
le_model_n_threads(const struct le_model *m)
{
    return le_pool_size(m->pool);
}

const char *
le_model_desc(const struct le_model *m)
{
    return m->desc;
}

enum le_chat_template
le_model_chat_template(const struct le_model *m)
{
    return m->chat;
}

enum le_chat_tools
le_model_chat_tools(const struct le_model *m)
{
    return m->chat_tools;
}

int
le_model_tools_first(const struct le_model *m)
{
    return m->tools_first;
}

char *
le_model_default_system(const struct le_model *m, const char *date)
{
    struct le_gguf_str t;
    if (!m || !le_gguf_get_str(m->gguf, "tokenizer.chat_template", &t))
        return NULL;
    return le_chat_default_eval(t.ptr, (size_t)t.len, date);
}

/* ------------------------------------------------------------------ */
/* Sessions                                                             */

static void *
xcalloc(size_t n, size_t size, int *bad)
{
    void *p = n ? calloc(n, size) : NULL;
    if (n && !p)
        *bad = 1;
    return p;
}

void
le_session_free(struct le_session *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->kv_k);
    free(s->kv_v);
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    free(s->moe_logits);
    free(s->moe_w);
    free(s->moe_sel);
    free(s->moe_rows);
    free(s->moe_in);
    free(s->moe_x);
    free(s->moe_y);
    free(s->mla_in);
    free(s->mla_out);
    free(s->logits);
    free(s->qact);
    free(s->qprep);
    free(s->qtile);
    free(s->scores);
    free(s->qhead);
    free(s->vrow);
    le_sampler_free(s->smp);
    free(s);
}

/* Query heads attention_heads takes a KV head's at once (up to this many
 * per call; 4 in Llama 3.2 1B): the rows of scores and fp16 query heads
 * it holds per thread. */
#define ATT_GROUP_MAX 8

static size_t
att_rows(const struct le_hparams *hp)
{
    int group = hp->n_head / hp->n_head_kv;
    return (size_t)(group < ATT_GROUP_MAX ? group : ATT_GROUP_MAX);
}

enum le_status
le_session_new_sized(struct le_model *m, int n_tok, int n_out, int with_kv,
                     struct le_session **out, char *err, size_t errlen)
{
    if (!m || !out)
        return fail(err, errlen, LE_EINVAL, "session: no model");
    if (m->vocab_only)
        return fail(err, errlen, LE_EINVAL,
                    "session: the model was opened as a vocabulary only");
    const struct le_hparams *hp = &m->hp;
    struct le_session *s = calloc(1, sizeof(*s));
    if (!s)
        return fail(err, errlen, LE_ENOMEM, "session: out of memory");
    int bad = 0;
    size_t B = (size_t)(n_tok > 0 ? n_tok : 0), C = (size_t)m->params.n_ctx;
    size_t NO = (size_t)(n_out > 0 ? n_out : 0);
    size_t E = (size_t)hp->n_embd,
           F = (size_t)(hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp);
    F = F > (size_t)hp->n_ff_dense ? F : (size_t)hp->n_ff_dense;
    size_t QD = (size_t)hp->n_head * (size_t)hp->head_dim;
    size_t KD = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t NT = (size_t)le_pool_size(m->pool);
    s->m = m;
    s->n_ctx = m->params.n_ctx;
    s->n_batch = (int32_t)B;
    const char *me = getenv("LLMUX_MOE_EACH");
    s->moe_group_off = me && !strcmp(me, "1");
    s->kv_type = m->params.kv_type == LE_KV_Q8_0   ? LE_TYPE_Q8_0
                 : m->params.kv_type == LE_KV_F32 ? LE_TYPE_F32
                                                  : LE_TYPE_F16;
    s->kv_row = le_row_size(s->kv_type, (int64_t)KD);
    size_t kv_bytes = (size_t)hp->n_layer * C;
    if (s->kv_row == 0 || kv_bytes > SIZE_MAX / s->kv_row) {
        le_session_free(s);
        return fail(err, errlen, LE_EINVAL, "session: bad KV cache size");
    }
    kv_bytes *= s->kv_row;
    if (with_kv) {
        s->hist = xcalloc(C, sizeof(int32_t), &bad);
        s->kv_k = xcalloc(kv_bytes, 1, &bad);
        s->kv_v = xcalloc(kv_bytes, 1, &bad);
    }
    s->x = xcalloc(B * E, sizeof(float), &bad);
    s->xb = xcalloc(B * (E > QD ? E : QD), sizeof(float), &bad);
    s->q = xcalloc(B * QD, sizeof(float), &bad);
    s->k = xcalloc(B * KD, sizeof(float), &bad);
    s->v = xcalloc(B * KD, sizeof(float), &bad);
    s->att = xcalloc(B * QD, sizeof(float), &bad);
    s->hb = xcalloc(B * F, sizeof(float), &bad);
    s->hb2 = xcalloc(B * F, sizeof(float), &bad);
    if (hp->n_expert > 0 && B) {
        size_t NX = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
        s->moe_logits = xcalloc(B * NX, sizeof(float), &bad);
        s->moe_w = xcalloc(B * K, sizeof(float), &bad);
        s->moe_sel = xcalloc(B * K, sizeof(int32_t), &bad);
        s->moe_rows = xcalloc(B * K, sizeof(int32_t), &bad);
        s->moe_in = xcalloc(B * E, sizeof(float), &bad);
        s->moe_x = xcalloc(B * E, sizeof(float), &bad);
        s->moe_y = xcalloc(B * E, sizeof(float), &bad);
    }
    size_t ML = 0; /* deepseek2's per-head rows */
    if (hp->arch == LE_ARCH_DEEPSEEK2 && B) {
        ML = (size_t)hp->kv_lora;
        ML = ML > (size_t)hp->q_lora ? ML : (size_t)hp->q_lora;
        ML = ML > (size_t)hp->mla_nope ? ML : (size_t)hp->mla_nope;
        ML = ML > (size_t)hp->mla_v ? ML : (size_t)hp->mla_v;
        /* and a generation step's every head at once (mla_heads):
         * [n_head][up to GEMV_MAX_TOK tokens][the widest of a head's] */
        size_t HW = (size_t)hp->kv_lora;
        HW = HW > (size_t)hp->mla_nope ? HW : (size_t)hp->mla_nope;
        HW = HW > (size_t)hp->mla_v ? HW : (size_t)hp->mla_v;
        size_t HT = B < GEMV_MAX_TOK ? B : GEMV_MAX_TOK;
        size_t MN = B * ML > HT * (size_t)hp->n_head * HW
                        ? B * ML
                        : HT * (size_t)hp->n_head * HW;
        s->mla_cap = MN;
        s->mla_in = xcalloc(MN, sizeof(float), &bad);
        s->mla_out = xcalloc(MN, sizeof(float), &bad);
    }
    s->logits = xcalloc(NO * (size_t)hp->n_vocab, sizeof(float), &bad);
    /* activations quantised for the widest input (n_embd, q dim or n_ff)
     * in the largest vec_dot type (f32 is the largest per value) */
    size_t widest = E > F ? E : F;
    widest = widest > QD ? widest : QD;
    s->qact_size = B ? B * widest * sizeof(float) + 64 : 0;
    s->qact = xcalloc(s->qact_size, 1, &bad);
    /* prep rows (repack.c) of the largest kind the repacked weights need
     * (floats for F16 / BF16: 4 bytes a value; Q8_0 half a byte) */
    s->qprep_row = 0;
    for (size_t i = 0; m->packed && i < m->n_slots; i++) {
        size_t r = m->packed[i]
                       ? le_pack_prep_size(m->packed[i]->pt.act_type,
                                           (int)widest)
                       : 0;
        s->qprep_row = r > s->qprep_row ? r : s->qprep_row;
    }
    s->qprep = B ? xcalloc(B, s->qprep_row + 64, &bad) : NULL;
    if (B && m->packed && le_amx_usable())
        s->qtile = xcalloc((B / 16 + 1) * 16, widest, &bad);
    if (B) {
        s->scores = xcalloc(NT * att_rows(hp) * C, sizeof(float), &bad);
        s->qhead_size =
            (size_t)hp->head_dim * att_rows(hp) * sizeof(float) + 64;
        s->qhead = xcalloc(NT * s->qhead_size, 1, &bad);
        s->vrow = xcalloc(NT * (size_t)hp->head_dim, sizeof(float), &bad);
    }
    if (bad) {
        le_session_free(s);
        return fail(err, errlen, LE_ENOMEM,
                    "session: out of memory for a %d-token context",
                    (int)C);
    }
    *out = s;
    return LE_OK;
}

enum le_status
le_session_new(struct le_model *m, struct le_session **out, char *err,
               size_t errlen)
{
    if (!m || !out)
        return fail(err, errlen, LE_EINVAL, "session: no model");
    return le_session_new_sized(m, m->params.n_batch, 1, 1, out, err,
                                errlen);
}

const float *
le_session_logits(const struct le_session *s)
{
    return s->logits;
}

int32_t
le_session_n_past(const struct le_session *s)
{
    return s->n_past;
}

void
le_session_reset(struct le_session *s)
{
    s->n_past = 0;
}

void
le_session_set_cancel(struct le_session *s, const _Atomic int *flag)
{
    if (s)
        s->cancel = flag;
}

enum le_status
le_session_decode(struct le_session *s, const int32_t *ids, size_t n,
                  char *err, size_t errlen)
{
    if (!s || (!ids && n))
        return fail(err, errlen, LE_EINVAL, "decode: bad arguments");
    if (n > (size_t)(s->n_ctx - s->n_past))
        return fail(err, errlen, LE_ECONTEXT,
                    "the context window of %d tokens is full (%d used, %zu "
                    "more requested)",
                    (int)s->n_ctx, (int)s->n_past, n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->m->hp.n_vocab)
            return fail(err, errlen, LE_EINVAL,
                        "decode: token id %d is outside the vocabulary",
                        (int)ids[i]);
    size_t done = 0;
    while (done < n) {
        if (s->cancel && atomic_load(s->cancel))
            return fail(err, errlen, LE_ECANCELED,
                        "cancelled after %zu of %zu prompt tokens", done, n);
        size_t b = n - done;
        if (b > (size_t)s->n_batch)
            b = (size_t)s->n_batch;
        enum le_status st = le_model_forward(s, ids + done, b, err, errlen);
        if (st != LE_OK)
            return st;
        done += b;
    }
    return LE_OK;
}

/* ------------------------------------------------------------------ */
/* Kernels of the graph                                                 */

static void
rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        o[i] = x[i] * scale * w[i];
}

/*
 * Rotates the first n_rot values of each of n_heads heads of head_dim at
 * position pos, as GGML's rope: theta_i = pos * base^(-2i/n_rot), computed
 * by repeated multiplication in float like ggml so that results match it
 * bit for bit where possible; llama3 frequency factors divide theta.
 */
static int
layer_swa(const struct le_hparams *hp, int l)
{
    return hp->n_swa > 0 &&
           (hp->swa_pattern == 0 || l % hp->swa_pattern < hp->swa_pattern - 1);
}

static void
rope(const struct le_model *m, float *x, int n_heads, int pos, int layer)
{
    const struct le_hparams *hp = &m->hp;
    int nr = hp->n_rot, loc = hp->swa_rope_local && layer_swa(hp, layer);
    /* gemma3's sliding-window layers: their own base, unscaled */
    float theta_scale =
        powf(loc ? hp->rope_base_swa : hp->rope_base, -2.0f / (float)nr);
    float scale = loc ? 1.0f : hp->rope_scale;
    float theta = (float)pos;
    for (int i0 = 0; i0 < nr; i0 += 2) {
        float ff = m->rope_freqs && !loc ? m->rope_freqs[i0 / 2] : 1.0f;
        float ext = theta / ff, th = scale * ext;
        float ms = loc ? 1.0f : hp->rope_mscale;
        if (hp->yarn && !loc) { /* llama.cpp's rope_yarn */
            float y = ((float)(i0 / 2) - hp->yarn_lo) /
                      fmaxf(0.001f, hp->yarn_hi - hp->yarn_lo);
            float mix = (1 - fminf(1, fmaxf(0, y))) * hp->yarn_ext;
            th = th * (1 - mix) + ext * mix;
        }
        float c = cosf(th) * ms, sn = sinf(th) * ms;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * hp->head_dim;
            int a = hp->rope_neox ? i0 / 2 : i0;
            int b = hp->rope_neox ? i0 / 2 + nr / 2 : i0 + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * sn;
            v[b] = x0 * sn + x1 * c;
        }
        theta *= theta_scale;
    }
}

/* Llama 4's attention temperature (le_hparams.attn_temp) on one token's
 * n query values at position pos, the factor computed as llama.cpp's
 * graph input is (the position over the floor length in float, the
 * logarithm in double).  The first floor's factor is exactly 1: no pass
 * over q for the positions of the original context. */
static void
attn_temp_q(const struct le_hparams *hp, float *q, int n, int pos)
{
    float b = floorf((float)pos / (float)hp->attn_temp_floor);
    if (b == 0)
        return;
    float s = (float)(log((double)b + 1.0) * hp->attn_temp + 1.0);
    if (s == 1.0f)
        return;
    for (int i = 0; i < n; i++)
        q[i] *= s;
}

struct mm_job {
    const struct le_type_traits *tt;
    const uint8_t *w;   /* rows of the weight */
    size_t w_row;       /* bytes per weight row */
    const uint8_t *xq;  /* n_tok activation rows in vec_dot_type */
    size_t x_row;       /* bytes per activation row */
    float *y;           /* [n_tok][n_out] */
    int n_in, n_out, n_tok;
    int amx;            /* weight type if le_gemm_amx takes it, else -1 */
};


static void
matmul_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int per = (j->n_out + nth - 1) / nth;
    int r0 = ith * per, r1 = r0 + per;
    if (r1 > j->n_out)
        r1 = j->n_out;
    if (j->amx >= 0 && r0 < r1 &&
        le_gemm_amx((enum le_type)j->amx, j->n_in, j->w, j->w_row, r0, r1,
                    j->xq, j->x_row, j->n_tok, j->y, j->n_out) == 0)
        return;
    for (int r = r0; r < r1; r++) {
        const uint8_t *wr = j->w + (size_t)r * j->w_row;
        if (j->n_tok > 1 && j->tt->vec_dot_multi) {
            /* One weight row against every token of the batch: its blocks
             * are unpacked once per 4 tokens (same results as the loop). */
            j->tt->vec_dot_multi(j->n_in, &j->y[r], (size_t)j->n_out, wr,
                                 j->xq, j->x_row, j->n_tok);
            continue;
        }
        for (int t = 0; t < j->n_tok; t++)
            j->tt->vec_dot(j->n_in, &j->y[(size_t)t * j->n_out + r], wr,
                           j->xq + (size_t)t * j->x_row);
    }
}

/* Repacked weights: each thread takes whole groups of 16 rows, for all
 * tokens of the batch (a group is read from memory once and stays in
 * cache across the tokens; threads never write the same output rows):
 * prompt batches from a shared counter (matmul_packed_dyn), generation
 * steps from per-thread regions (matmul_gemv). */
struct mmp_job {
    const struct le_packed *P;
    le_gemm_fn gemm; /* P->pt.gemm, or its gemm_amx for a prompt batch */
    struct le_pack_act act;
    float *y;
    int n_tok;
};

/* A prompt batch's product over the repacked groups (AMX or not):
 * threads take AMX_CHUNK groups at a time from a shared counter instead
 * of a fixed
 * half each, so a thread slowed by another process (2 cores shared with
 * the gateway and whatever else runs) leaves its groups to the others
 * rather than holding up the step; each group is still computed whole by
 * one thread, so the results do not depend on who took it.  4 groups (64
 * rows) per take keep the takes rare and the threads' output rows apart. */
#define AMX_CHUNK 4

struct mmp_dyn_job {
    struct mmp_job j;
    _Alignas(64) atomic_int next; /* first group not yet taken */
};

/* Takes the next run of up to chunk of ng groups from *next into [*g0,
 * *g1); 0 when none is left. */
static int
take_groups(atomic_int *next, int chunk, int ng, int *g0, int *g1)
{
    *g0 = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
    if (*g0 >= ng)
        return 0;
    *g1 = *g0 + chunk < ng ? *g0 + chunk : ng;
    return 1;
}

static void
matmul_packed_dyn(void *arg, int ith, int nth)
{
    (void)ith, (void)nth;
    struct mmp_dyn_job *d = arg;
    const struct le_packed *P = d->j.P;
    int ng = (P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
    int g0, g1;
    while (take_groups(&d->next, AMX_CHUNK, ng, &g0, &g1)) {
        for (int g = g0; g < g1; g++) {
            int r0 = g * LE_PACK_ROWS;
            int nr = P->n_out - r0 < LE_PACK_ROWS ? P->n_out - r0
                                                   : LE_PACK_ROWS;
            d->j.gemm(P->n_in, P->data + (size_t)g * P->group_bytes,
                      &d->j.act, d->j.n_tok, d->j.y + r0, (size_t)P->n_out,
                      nr);
        }
    }
}

/* The decode kernel (le_gemv_at), or the type's gemm group by group, over
 * repacked weights: runs of at most
 * GEMV_CHUNK groups for all tokens (below), never a fixed half each: on 2
 * cores shared with other processes one thread is often descheduled for a
 * while, and a fixed split made the other wait at the end of every
 * product (the wall time of a step then follows the slower thread). */
#define GEMV_CHUNK 8

/* The decode products' groups are cut into one contiguous region per
 * thread (share), each walked upwards by its owner in guided runs (a
 * quarter of what its region has left, at most GEMV_CHUNK groups, at
 * least one pair: the kernel's tile); a share that has finished its own
 * takes runs from the top of the others' regions.  So each thread streams
 * its weights in address order, which the kernel's prefetch of the groups
 * after the ones it computes relies on (quants_avx512.c dec_groups; with
 * one shared counter the next groups were mostly the other thread's), the
 * threads still finish a product close together, and a share whose
 * thread another process holds up is done by the other one.  A group's
 * floats do not depend on its run or on who took it. */
#define GEMV_REGIONS 16

struct mmv_job {
    const struct le_packed *P;
    le_gemv_fn gemv; /* NULL: P->pt.gemm group by group */
    struct le_pack_act act;
    float *y;
    int n_tok;
    int n_reg; /* regions in use, 1..GEMV_REGIONS */
    /* region r: groups [front, back) not yet taken, front in the low 32
     * bits; owners take from the front, others from the back */
    struct {
        _Alignas(64) atomic_uint_fast64_t fb;
    } reg[GEMV_REGIONS];
};

static void
mmv_regions(struct mmv_job *j, int n_reg)
{
    int ng = (j->P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
    n_reg = n_reg < 1 ? 1 : n_reg > GEMV_REGIONS ? GEMV_REGIONS : n_reg;
    j->n_reg = n_reg;
    for (int r = 0; r < n_reg; r++) {
        /* cut at pairs */
        uint64_t f = (uint64_t)((int64_t)ng * r / n_reg) & ~(uint64_t)1;
        uint64_t b = r + 1 == n_reg
                         ? (uint64_t)ng
                         : (uint64_t)((int64_t)ng * (r + 1) / n_reg) &
                               ~(uint64_t)1;
        atomic_init(&j->reg[r].fb, f | b << 32);
    }
}

/* A run of region r: from its front (own) or its back; 0 when empty. */
static int
mmv_take(struct mmv_job *j, int r, int own, int *g0, int *g1)
{
    uint_fast64_t v = atomic_load_explicit(&j->reg[r].fb,
                                           memory_order_relaxed);
    for (;;) {
        int f = (int)(uint32_t)v, b = (int)(v >> 32);
        if (f >= b)
            return 0;
        int c = (b - f) / 4;
        c = c > GEMV_CHUNK ? GEMV_CHUNK : c < 2 ? 2 : c & ~1;
        c = c > b - f ? b - f : c;
        uint_fast64_t nv = own ? (uint64_t)(f + c) | (uint64_t)b << 32
                               : (uint64_t)f | (uint64_t)(b - c) << 32;
        if (atomic_compare_exchange_weak_explicit(&j->reg[r].fb, &v, nv,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *g0 = own ? f : b - c;
            *g1 = own ? f + c : b;
            return 1;
        }
    }
}

static void
matmul_gemv(void *arg, int ith, int nth)
{
    (void)nth;
    struct mmv_job *j = arg;
    const struct le_packed *P = j->P;
    int ng = (P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
    for (int k = 0; k < j->n_reg; k++) {
        int r = (ith + k) % j->n_reg, g0, g1;
        while (mmv_take(j, r, k == 0 && ith < j->n_reg, &g0, &g1)) {
            const uint8_t *w = P->data + (size_t)g0 * P->group_bytes;
            float *y = j->y + (size_t)g0 * LE_PACK_ROWS;
            int nr_last = g1 == ng ? P->n_out - (ng - 1) * LE_PACK_ROWS
                                   : LE_PACK_ROWS;
            if (j->gemv)
                j->gemv(P->n_in, w, P->group_bytes, g1 - g0, &j->act,
                        j->n_tok, y, (size_t)P->n_out, nr_last);
            else
                le_gemm_groups(P->pt.gemm, P->n_in, w, P->group_bytes,
                               g1 - g0, &j->act, j->n_tok, y,
                               (size_t)P->n_out, nr_last);
        }
    }
}

/* Bits of *qx: s->qact holds x but not its prep rows; s->qtile holds
 * x's rows from n_rest on as AMX A tiles (matmul). */
#define QX_NO_PREP 0x100
#define QX_TILES 0x200

/*
 * y[t] = W x[t] for t < n_tok; x rows are n_in floats apart, y rows n_out.
 * *qx says which vec_dot type s->qact already holds x in (-1: none); the
 * callers reset it when x changes, so Wq/Wk/Wv (and Wgate/Wup) quantise
 * their shared input once.
 *
 * Only rows t >= amx_from may go to the AMX GEMM (and only when at least
 * le_amx_min_tok(W's type) of them do: the crossover, le_int.h): its sums
 * are rounded in another order than the per-row kernels', so which kernel
 * computes a token must depend on that token's own sequence (a prefill
 * piece of le_model_amx_min_tok or more tokens, sched.c),
 * never on what else shares the batch.  That is what makes a sequence's
 * greedy output the same alone and batched (sched.c, tests/test_sched.c).
 * Rows below amx_from take the repacked / vec_dot kernels, whose results
 * do not depend on the batch size.
 */
static void
matmul(struct le_session *s, const struct le_gguf_tensor *W, const float *x,
       float *y, int n_tok, int amx_from, int *qx)
{
    const struct le_type_traits *tt = le_type_get(W->type);
    int n_in = (int)W->ne[0], n_out = (int)W->ne[1];
    if (amx_from < 0)
        amx_from = 0;
    if (amx_from > n_tok)
        amx_from = n_tok;
    int amx_min = le_amx_min_tok(W->type);
    int n_amx = amx_min > 0 && n_tok - amx_from >= amx_min && le_amx_usable()
                    ? n_tok - amx_from
                    : 0;
    int n_rest = n_tok - n_amx; /* rows [0, n_rest): per-row kernels */
    /* Rows [n_rest, n_tok) go to the AMX GEMM: over the repacked copy
     * when it has an AMX kernel of its own, else over the GGUF mapping
     * (its tile layout unpacked on the fly).  The rest stream the
     * repacked copy if there is one. */
    const struct le_packed *P =
        s->m->packed ? s->m->packed[slot_of(s->m, W)] : NULL;
    int amx_packed = n_amx > 0 && P && P->pt.gemm_amx;
    struct mm_job j;
    j.tt = tt;
    j.w = W->data;
    j.w_row = le_row_size(W->type, n_in);
    j.n_in = n_in;
    j.n_out = n_out;
    j.n_tok = n_rest;
    j.y = y;
    j.amx = -1;
    if (tt->vec_dot_type == LE_TYPE_F32) {
        j.xq = (const uint8_t *)x;
        j.x_row = (size_t)n_in * sizeof(float);
    } else {
        j.x_row = le_row_size(tt->vec_dot_type, n_in);
        /* The prep rows serve only the repacked kernels: a batch the
         * GGUF AMX GEMM takes whole skips them, and *qx then says so
         * (QX_NO_PREP), so a later product on the same x that needs them
         * quantises again. */
        int prep = s->m->pack_arena && (n_rest > 0 || amx_packed) &&
                   le_pack_prep_size(tt->vec_dot_type, n_in) > 0;
        int vdt = (int)tt->vec_dot_type;
        int tiles = amx_packed && s->qtile && vdt == LE_TYPE_Q8_0;
        int have = *qx;
        if (have < 0 || (have & 0xff) != vdt ||
            (prep && (have & QX_NO_PREP)) || (tiles && !(have & QX_TILES))) {
            /* across the pool from 4 rows (one row is shorter than a
             * wake-up of the workers) */
            struct le_quant_job qj = {.vdt = tt->vec_dot_type,
                                      .x = x,
                                      .n = n_in,
                                      .n_rows = n_tok,
                                      .q = s->qact,
                                      .q_row = j.x_row,
                                      .p = prep ? s->qprep : NULL,
                                      .p_row = s->qprep_row,
                                      .t = tiles ? s->qtile : NULL,
                                      .t_from = n_rest};
            le_pool_run(s->m->pool, le_quant_rows, &qj, n_tok < 4 ? 1 : 0);
            *qx = (prep || !s->m->pack_arena ? vdt : (vdt | QX_NO_PREP)) |
                  (tiles ? QX_TILES : 0);
        }
        j.xq = s->qact;
    }
    if (amx_packed) {
        struct mmp_dyn_job pa = {
            {P, P->pt.gemm_amx,
             {j.xq + (size_t)n_rest * j.x_row, j.x_row,
              s->qprep ? s->qprep + (size_t)n_rest * s->qprep_row : NULL,
              s->qprep_row,
              s->qtile && tt->vec_dot_type == LE_TYPE_Q8_0 ? s->qtile
                                                           : NULL},
             y + (size_t)n_rest * n_out, n_amx},
            0};
        int small_amx = (int64_t)n_in * n_out * n_amx < 16384;
        le_pool_run(s->m->pool, matmul_packed_dyn, &pa, small_amx ? 1 : 0);
    } else if (n_amx > 0) {
        struct mm_job ja = j;
        ja.amx = (int)W->type;
        ja.n_tok = n_amx;
        ja.xq = j.xq + (size_t)n_rest * j.x_row;
        ja.y = y + (size_t)n_rest * n_out;
        int small_amx = (int64_t)n_in * n_out * n_amx < 16384;
        le_pool_run(s->m->pool, matmul_rows, &ja, small_amx ? 1 : 0);
    }
    if (n_rest == 0)
        return;
    /* Small products are not worth waking the pool for. */
    int small = (int64_t)n_in * n_out * n_rest < 16384;
    /* Generation steps (a few rows: one per generating sequence, and
     * prompt tails) take the decode kernel when the type has one (the
     * same floats as P->pt.gemm, le_int.h), else the type's gemm group
     * by group, in matmul_gemv's guided regions either way.  Those
     * against a fixed share per thread (the K-quants, 1B slices, 2
     * threads, interleaved llmux bench runs on a Zen 4): q4_k 1.02-1.11x
     * (AVX-512) and 1.03-1.22x (AVX2), q6_k 0.99-1.08x. */
    if (P && n_rest <= GEMV_MAX_TOK) {
        struct mmv_job vj = {P, le_gemv_at(P->pt.type, le_isa_active()),
                             {s->qact, j.x_row, s->qprep, s->qprep_row, NULL},
                             y, n_rest, 0, {{0}}};
        mmv_regions(&vj, small ? 1 : le_pool_size(s->m->pool));
        le_pool_run(s->m->pool, matmul_gemv, &vj, small ? 1 : 0);
        return;
    }
    if (P) {
        /* prompt batches take groups from a counter, as the AMX ones */
        struct mmp_dyn_job pd = {
            {P, P->pt.gemm, {s->qact, j.x_row, s->qprep, s->qprep_row, NULL},
             y, n_rest},
            0};
        le_pool_run(s->m->pool, matmul_packed_dyn, &pd, small ? 1 : 0);
        return;
    }
    le_pool_run(s->m->pool, matmul_rows, &j, small ? 1 : 0);
}

static void
add_bias_f(float *y, const float *bb, int n, int n_tok)
{
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < n; i++)
            y[(size_t)t * n + i] += bb[i];
}

static void
add_bias(float *y, const struct le_gguf_tensor *b, int n, int n_tok)
{
    if (b)
        add_bias_f(y, b->data, n, n_tok);
}

/* y += a x.  restrict and the fixed 8-wide inner loop let the compiler
 * vectorise it at -O2 (measured: the scalar loop was 30% of a long
 * prefill). */
static void
axpy(int n, float a, const float *restrict x, float *restrict y)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            y[i + k] += a * x[i + k];
    for (; i < n; i++)
        y[i] += a * x[i];
}

struct att_job {
    struct le_session *ws; /* scratch: q, att, scores, qhead, vrow */
    const struct le_fwd_batch *b;
    int layer;
};

/* The sequence (KV cells) and position of token t of a batch. */
static struct le_session *
tok_seq(const struct le_fwd_batch *b, int t)
{
    return b->seq ? b->seq[t] : b->one;
}

static int
tok_pos(const struct le_fwd_batch *b, int t)
{
    return b->pos ? b->pos[t] : b->one->n_past + t;
}

/* sc[p] = cap * tanh(sc[p] / cap), p < n (gemma2's attention logits);
 * returns the largest */
static float
soft_cap(float *sc, int n, float cap)
{
    float mx = -INFINITY;
    for (int p = 0; p < n; p++) {
        sc[p] = cap * tanhf(sc[p] / cap);
        mx = sc[p] > mx ? sc[p] : mx;
    }
    return mx;
}

/* What one query head's scores need (attention_heads, head_scores). */
struct att_head {
    const struct le_session *ws;
    const struct le_type_traits *kt, *qt;
    uint8_t *qh; /* the thread's query row in the vec_dot type */
    size_t head_bytes;
    float scale, cap;
    const float *sinks;
    int hd, group;
    le_exp_sub_fn exp_sub;
};

/* Query head g (of KV head kvh's group, the token's q at qoff) against
 * np cached positions by the KV type's vec_dot: sc[p] = exp(score - max)
 * (gemma2's cap on the scores, gpt-oss's sink in the maximum); returns
 * the softmax's 1 / sum (the sink's term included). */
static float
head_scores(const struct att_head *a, const struct le_session *s,
            size_t layer_off, int kvh, size_t qoff, int g, int np, float *sc)
{
    a->qt->from_float(a->ws->q + qoff + (size_t)g * a->hd, a->qh, a->hd);
    float max = -INFINITY;
    for (int p = 0; p < np; p++) {
        const uint8_t *kr = s->kv_k + layer_off + (size_t)p * s->kv_row +
                            (size_t)kvh * a->head_bytes;
        float d;
        a->kt->vec_dot(a->hd, &d, kr, a->qh);
        sc[p] = d * a->scale;
        if (sc[p] > max)
            max = sc[p];
    }
    if (a->cap > 0)
        max = soft_cap(sc, np, a->cap);
    float sk = a->sinks ? a->sinks[kvh * a->group + g] : 0;
    if (a->sinks && sk > max)
        max = sk;
    a->exp_sub(sc, np, max);
    double sum = a->sinks ? expf(sk - max) : 0;
    for (int p = 0; p < np; p++)
        sum += sc[p];
    return (float)(1.0 / sum);
}

/* Work items are (token, KV head): the query heads sharing a KV head walk
 * its positions together (attn.c), up to ATT_GROUP_MAX at a time; per
 * thread scratch: att_rows rows of n_ctx scores and as many query heads
 * (le_session_new). */
static void
attention_heads(void *arg, int ith, int nth)
{
    struct att_job *j = arg;
    struct le_session *ws = j->ws;
    const struct le_hparams *hp = &ws->m->hp;
    int hd = hp->head_dim, QD = hp->n_head * hd;
    int group = hp->n_head / hp->n_head_kv;
    const struct le_type_traits *kt = le_type_get(ws->kv_type);
    const struct le_type_traits *qt = le_type_get(kt->vec_dot_type);
    float *sc0 = ws->scores + (size_t)ith * att_rows(hp) * ws->n_ctx;
    uint8_t *qh = ws->qhead + (size_t)ith * ws->qhead_size;
    float *vr = ws->vrow + (size_t)ith * hd;
    size_t head_bytes = le_row_size(ws->kv_type, hd);
    float scale = hp->attn_scale, cap = hp->attn_softcap;
    int swa = layer_swa(hp, j->layer);
    int total = j->b->n_tok * hp->n_head_kv;
    /* gpt-oss: each head's sink logit joins its softmax with no value */
    const struct le_gguf_tensor *skt = ws->m->layers[j->layer].sinks;
    const float *sinks = skt ? skt->data : NULL;
    /* F16 cache: the fused kernels of attn.c where SIMD has them */
    struct le_attn_f16 ak;
    int fused = ws->kv_type == LE_TYPE_F16 && le_attn_f16_get(hd, &ak);
    le_exp_sub_fn exp_sub = le_exp_sub_get();
    const struct att_head ah = {ws, kt, qt, qh, head_bytes, scale, cap,
                                sinks, hd, group, exp_sub};
    for (int i = ith; i < total; i += nth) {
        int t = i / hp->n_head_kv, kvh = i % hp->n_head_kv;
        const struct le_session *s = tok_seq(j->b, t);
        int pos = tok_pos(j->b, t);
        /* a sliding-window layer sees its last n_swa positions: from p0 */
        int p0 = swa && pos >= hp->n_swa ? pos - hp->n_swa + 1 : 0;
        size_t layer_off = (size_t)j->layer * s->n_ctx * s->kv_row +
                           (size_t)p0 * s->kv_row;
        int np = pos + 1 - p0;
        size_t qoff = (size_t)t * QD + (size_t)kvh * group * hd;
        if (fused) { /* up to ATT_GROUP_MAX heads a call */
            size_t hoff = layer_off + (size_t)kvh * head_bytes;
            for (int g0 = 0; g0 < group; g0 += ATT_GROUP_MAX) {
                int gn = group - g0 < ATT_GROUP_MAX ? group - g0
                                                    : ATT_GROUP_MAX;
                size_t qo = qoff + (size_t)g0 * hd;
                float inv[ATT_GROUP_MAX], mx[ATT_GROUP_MAX];
                ak.to_f16(gn * hd, ws->q + qo, (uint16_t *)qh);
                ak.scores(hd, gn, np, (const uint16_t *)qh,
                          s->kv_k + hoff, s->kv_row, scale, sc0, ws->n_ctx,
                          mx, s->kv_v + hoff);
                for (int g = 0; g < gn && cap > 0; g++)
                    mx[g] = soft_cap(sc0 + (size_t)g * ws->n_ctx, np, cap);
                for (int g = 0; g < gn; g++) {
                    float *sc = sc0 + (size_t)g * ws->n_ctx;
                    float sk = sinks ? sinks[kvh * group + g0 + g] : 0;
                    if (sinks && sk > mx[g])
                        mx[g] = sk;
                    exp_sub(sc, np, mx[g]);
                    double sm = sinks ? expf(sk - mx[g]) : 0;
                    for (int p = 0; p < np; p++)
                        sm += sc[p];
                    inv[g] = (float)(1.0 / sm);
                }
                ak.values(hd, gn, np, sc0, ws->n_ctx, inv,
                          s->kv_v + hoff, s->kv_row, ws->att + qo);
            }
            continue;
        }
        if (ws->kv_type == LE_TYPE_F16) {
            /* a head size the fused scores do not take (deepseek2's
             * 576): each head's scores by the F16 vec_dot, then the
             * values of up to ATT_GROUP_MAX heads in one walk of the V
             * rows (each converted once; the same sums as the loop
             * below) */
            for (int g0 = 0; g0 < group; g0 += ATT_GROUP_MAX) {
                int gn = group - g0 < ATT_GROUP_MAX ? group - g0
                                                    : ATT_GROUP_MAX;
                float inv[ATT_GROUP_MAX];
                for (int g = 0; g < gn; g++) {
                    float *sc = sc0 + (size_t)g * ws->n_ctx;
                    inv[g] = head_scores(&ah, s, layer_off, kvh, qoff,
                                         g0 + g, np, sc);
                }
                ak.values(hd, gn, np, sc0, ws->n_ctx, inv,
                          s->kv_v + layer_off + (size_t)kvh * head_bytes,
                          s->kv_row, ws->att + qoff + (size_t)g0 * hd);
            }
            continue;
        }
        for (int g = 0; g < group; g++) {
            float *out = ws->att + qoff + (size_t)g * hd;
            float *sc = sc0;
            float inv = head_scores(&ah, s, layer_off, kvh, qoff, g, np, sc);
            memset(out, 0, (size_t)hd * sizeof(float));
            for (int p = 0; p < np; p++) {
                const uint8_t *vrw = s->kv_v + layer_off +
                                     (size_t)p * s->kv_row +
                                     (size_t)kvh * head_bytes;
                kt->to_float(vrw, vr, hd);
                axpy(hd, sc[p] * inv, vr, out);
            }
        }
    }
}


/*
 * The per-token steps between the products of a layer, as one pool job
 * over contiguous shares of the batch's tokens (each token's rows are its
 * own, so results do not depend on the split).  Serial on the caller they
 * were ~9% of a 128-token prompt's samples, with the other thread
 * spinning meanwhile (another 7%).
 *   TOK_NORM:  [x[t] += xb[t] when add;] xb[t] = rmsnorm(x[t], w) (w NULL:
 *              the add only)
 *   TOK_ROPE:  [qwen3: q[t], k[t] head norms;] rope of q[t], k[t]
 *              [q[t] times its position's attention temperature]; k[t],
 *              v[t] into the token's KV cells
 *   TOK_SILU:  hb[t] = silu(hb[t]) * hb2[t] (act.c)
 */
enum tok_op { TOK_NORM, TOK_ROPE, TOK_SILU };

struct tok_job {
    struct le_session *ws;
    const struct le_fwd_batch *b;
    enum tok_op op;
    int layer;
    int add;        /* TOK_NORM: residual add first */
    const float *w; /* TOK_NORM: norm weights or NULL */
    const float *pw; /* TOK_NORM: xb's own norm before the add (gemma3's
                        post-attention / post-FFN norm) or NULL */
};

/* h[i] = gelu(h[i]) * h2[i], GELU in its tanh form (ggml's, gemma's) */
static void
gelu_mul(float *h, const float *h2, int n)
{
    for (int i = 0; i < n; i++) {
        float x = h[i];
        h[i] = 0.5f * x *
               (1.0f + tanhf(0.7978845608028654f *
                             (x + 0.044715f * x * x * x))) *
               h2[i];
    }
}

static void
tok_steps(void *arg, int ith, int nth)
{
    struct tok_job *j = arg;
    struct le_session *ws = j->ws;
    const struct le_model *m = ws->m;
    const struct le_hparams *hp = &m->hp;
    /* TOK_SILU: a dense FFN's width (deepseek2's leading layers' apart
     * from its experts') */
    int nt = j->b->n_tok, E = hp->n_embd, F = hp->n_ff_dense;
    int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    int t0 = (int)((int64_t)nt * ith / nth);
    int t1 = (int)((int64_t)nt * (ith + 1) / nth);
    const struct le_type_traits *kt = le_type_get(ws->kv_type);
    struct le_attn_f16 ak;
    le_attn_f16_get(hp->head_dim, &ak);
    int f16 = ws->kv_type == LE_TYPE_F16;
    le_silu_mul_fn silu_mul = le_silu_mul_get();
    for (int t = t0; t < t1; t++) {
        switch (j->op) {
        case TOK_NORM: {
            float *x = ws->x + (size_t)t * E, *xb = ws->xb + (size_t)t * E;
            if (j->pw)
                rmsnorm(xb, xb, j->pw, E, hp->eps);
            if (j->add)
                for (int i = 0; i < E; i++)
                    x[i] += hp->residual_scale * xb[i];
            if (j->w)
                rmsnorm(xb, x, j->w, E, hp->eps);
            break;
        }
        case TOK_ROPE: {
            struct le_session *s = tok_seq(j->b, t);
            int pos = tok_pos(j->b, t);
            const struct le_layer *L = &m->layers[j->layer];
            if (L->q_norm) { /* qwen3: each head's own RMSNorm */
                int hd = hp->head_dim;
                for (int h = 0; h < hp->n_head; h++) {
                    float *v = ws->q + (size_t)t * QD + (size_t)h * hd;
                    rmsnorm(v, v, L->q_norm->data, hd, hp->eps);
                }
                for (int h = 0; h < hp->n_head_kv; h++) {
                    float *v = ws->k + (size_t)t * KD + (size_t)h * hd;
                    rmsnorm(v, v, L->k_norm->data, hd, hp->eps);
                }
            }
            rope(m, ws->q + (size_t)t * QD, hp->n_head, pos, j->layer);
            if (hp->attn_temp != 0) /* every attention path's queries */
                attn_temp_q(hp, ws->q + (size_t)t * QD, QD, pos);
            rope(m, ws->k + (size_t)t * KD, hp->n_head_kv, pos, j->layer);
            size_t off =
                ((size_t)j->layer * s->n_ctx + (size_t)pos) * s->kv_row;
            if (f16) { /* F16C where SIMD has it, le_fp32_to_fp16's bits */
                ak.to_f16(KD, ws->k + (size_t)t * KD,
                          (uint16_t *)(s->kv_k + off));
                ak.to_f16(KD, ws->v + (size_t)t * KD,
                          (uint16_t *)(s->kv_v + off));
                break;
            }
            kt->from_float(ws->k + (size_t)t * KD, s->kv_k + off, KD);
            kt->from_float(ws->v + (size_t)t * KD, s->kv_v + off, KD);
            break;
        }
        case TOK_SILU:
            (hp->gelu ? gelu_mul : silu_mul)(ws->hb + (size_t)t * F,
                                              ws->hb2 + (size_t)t * F, F);
            break;
        }
    }
}

/* One tok_steps job over the batch; batches under 4 tokens stay on the
 * caller (a token's step is shorter than waking the workers). */
static void
tok_run(struct le_session *ws, const struct le_fwd_batch *b, enum tok_op op,
        int layer, int add, const float *w, const float *pw)
{
    struct tok_job j = {ws, b, op, layer, add, w, pw};
    le_pool_run(ws->m->pool, tok_steps, &j, b->n_tok < 4 ? 1 : 0);
}

/* The k largest of n logits into sel, largest first (the lower index
 * first among equal ones). */
static void
topk_sel(const float *logits, int n, int k, int32_t *sel)
{
    unsigned char taken[LE_MAX_EXPERTS] = {0};
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n; e++)
            if (!taken[e] && (best < 0 || logits[e] > logits[best]))
                best = e;
        taken[best] = 1;
        sel[i] = best;
    }
}

/* The router of one token: the softmax of its n logits, the k largest
 * probabilities (the lower index first among equal ones) into sel, and
 * their weights, renormalised to sum 1 when norm, into w. */
static void
moe_route(const float *logits, int n, int k, int norm, int32_t *sel,
          float *w)
{
    float mx = logits[0], sum = 0, wsum = 0;
    for (int e = 1; e < n; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < n; e++)
        sum += expf(logits[e] - mx);
    topk_sel(logits, n, k, sel);
    for (int i = 0; i < k; i++) {
        w[i] = expf(logits[sel[i]] - mx) / sum;
        wsum += w[i];
    }
    for (int i = 0; i < k && norm; i++)
        w[i] /= wsum;
}

/* deepseek2's router: each expert's probability (the softmax of the
 * logits, or each one's sigmoid), the k largest of them plus the
 * selection bias (NULL: none) into sel (the lower index first among
 * equal ones), their probabilities into w, renormalised to sum 1 when
 * norm, times scale; as llama.cpp's build_moe_ffn. */
static void
moe_route_ds(const float *logits, int n, int k, int sigmoid,
             const float *bias, int norm, float scale, float *probs,
             float *biased, int32_t *sel, float *w)
{
    if (sigmoid) {
        for (int e = 0; e < n; e++)
            probs[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float mx = logits[0], sum = 0;
        for (int e = 1; e < n; e++)
            mx = logits[e] > mx ? logits[e] : mx;
        for (int e = 0; e < n; e++)
            sum += probs[e] = expf(logits[e] - mx);
        for (int e = 0; e < n; e++)
            probs[e] /= sum;
    }
    const float *pick = probs;
    if (bias) {
        for (int e = 0; e < n; e++)
            biased[e] = probs[e] + bias[e];
        pick = biased;
    }
    topk_sel(pick, n, k, sel);
    float wsum = 0;
    for (int i = 0; i < k; i++)
        wsum += w[i] = probs[sel[i]];
    for (int i = 0; i < k; i++)
        w[i] = (norm ? w[i] / wsum : w[i]) * scale;
}

/* gpt-oss's router: the k largest logits into sel, the softmax of those
 * k into w. */
static void
moe_route_topk(const float *logits, int n, int k, int32_t *sel, float *w)
{
    topk_sel(logits, n, k, sel);
    float mx = logits[sel[0]], sum = 0;
    for (int i = 0; i < k; i++) {
        w[i] = expf(logits[sel[i]] - mx);
        sum += w[i];
    }
    for (int i = 0; i < k; i++)
        w[i] /= sum;
}

/* gpt-oss's clamped SwiGLU: h = min(g, 7) sigmoid(1.702 min(g, 7))
 * (clamp(u, -7, 7) + 1), as llama.cpp's swiglu_oai */
static void
swiglu_oai(float *h, const float *u, int n)
{
    for (int i = 0; i < n; i++) {
        float x = h[i] < 7.0f ? h[i] : 7.0f;
        float y = u[i] < -7.0f ? -7.0f : u[i] > 7.0f ? 7.0f : u[i];
        h[i] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
    }
}

/* each of c rows of n floats in y += row e of the bias matrix b */
static void
add_bias_rows(float *y, const struct le_gguf_tensor *b, int e, int n, int c)
{
    if (b)
        add_bias_f(y, (const float *)b->data + (size_t)e * n, n, c);
}

/* A generation step's experts in a few pool jobs (moe_ffn): every chosen
 * expert's rows gathered at once (ws->moe_x, expert e's at [at[e],
 * at[e + 1])), quantised in one pass, their gate and up products as one
 * job and their down products as another, each worker taking whole
 * (expert, weight) products from a counter.  The same kernels over the
 * same rows as matmul's (the decode kernel for up to GEMV_MAX_TOK rows,
 * else the type's groups; the same floats either way, le_int.h), so the
 * same bits; what changes is the pool's wake-ups: a step of K experts
 * ran 3 K products, each with its own (and its quantisation's). */
/* One repacked weight P over c rows of the quantised activations act
 * from row r0 into y (c rows of P's n_out): the decode kernel for up to
 * GEMV_MAX_TOK rows, else the type's groups (the same floats either way,
 * le_int.h); on the calling thread */
static void
packed_rows(const struct le_packed *P, const struct le_pack_act *act,
            size_t r0, int c, float *y)
{
    int ng = (P->n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
    int nr_last = P->n_out - (ng - 1) * LE_PACK_ROWS;
    struct le_pack_act a = *act;
    a.q += r0 * a.q_row;
    if (a.p)
        a.p += r0 * a.p_row;
    le_gemv_fn gemv = le_gemv_at(P->pt.type, le_isa_active());
    if (gemv && c <= GEMV_MAX_TOK)
        gemv(P->n_in, P->data, P->group_bytes, ng, &a, c, y,
             (size_t)P->n_out, nr_last);
    else
        le_gemm_groups(P->pt.gemm, P->n_in, P->data, P->group_bytes, ng, &a,
                       c, y, (size_t)P->n_out, nr_last);
}

/* x's n_rows rows (n_in wide) quantised at once for W's repacked
 * kernels (W's vec_dot type, the prep rows when it has them) into the
 * session's scratch, in one pool job; *act set to read them */
static void
quant_for_packed(struct le_session *ws, const struct le_gguf_tensor *W,
                 const float *x, int n_rows, struct le_pack_act *act)
{
    const struct le_type_traits *tt = le_type_get(W->type);
    int n_in = (int)W->ne[0];
    size_t x_row = le_row_size(tt->vec_dot_type, (int64_t)n_in);
    int prep = le_pack_prep_size(tt->vec_dot_type, n_in) > 0;
    struct le_quant_job qj = {.vdt = tt->vec_dot_type,
                              .x = x,
                              .n = n_in,
                              .n_rows = n_rows,
                              .q = ws->qact,
                              .q_row = x_row,
                              .p = prep ? ws->qprep : NULL,
                              .p_row = ws->qprep_row,
                              .t = NULL,
                              .t_from = n_rows};
    le_pool_run(ws->m->pool, le_quant_rows, &qj, n_rows < 4 ? 1 : 0);
    *act = (struct le_pack_act){ws->qact, x_row, prep ? ws->qprep : NULL,
                                ws->qprep_row, NULL};
}

struct moe_job {
    struct le_session *ws;
    const struct le_gguf_tensor *W[2]; /* the experts of one or two weights */
    float *y[2];                       /* their outputs, rows as x's */
    const int *at;
    int units[2 * LE_MAX_EXPERTS]; /* (e << 1) | weight */
    int n_units;
    struct le_pack_act act;
    atomic_int next;
};

static void
moe_run(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    struct moe_job *j = arg;
    const struct le_model *m = j->ws->m;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units)
            return;
        int e = j->units[u] >> 1, w = j->units[u] & 1;
        const struct le_packed *P = m->packed[slot_of(m, &j->W[w][e])];
        int r0 = j->at[e];
        packed_rows(P, &j->act, (size_t)r0, j->at[e + 1] - r0,
                    j->y[w] + (size_t)r0 * (size_t)P->n_out);
    }
}

/* 1 when a step's n_rows (token, expert) rows can take moe_group: they
 * fit the session's scratch, and every expert of W (n of them) is
 * repacked, its activations quantised (not F32) to one type, the same
 * for each of the n_w weights of W[] */
static int
moe_group_ok(const struct le_session *ws, const struct le_gguf_tensor *const *W,
             int n_w, int n, int n_rows)
{
    const struct le_model *m = ws->m;
    if (!m->packed || n_rows > ws->n_batch || ws->moe_group_off)
        return 0;
    int vdt = -1;
    for (int w = 0; w < n_w; w++)
        for (int e = 0; e < n; e++) {
            const struct le_packed *P = m->packed[slot_of(m, &W[w][e])];
            int t = (int)le_type_get(W[w][e].type)->vec_dot_type;
            if (!P || t == LE_TYPE_F32 || (vdt >= 0 && t != vdt))
                return 0;
            vdt = t;
        }
    return 1;
}

/* The products of W[0..n_w) (the experts of gate and up, or of down)
 * over x's rows, expert e's at [at[e], at[e + 1]) (n_in wide), into
 * y[w] (rows as x's): x quantised once, then one job (moe_run). */
static void
moe_group(struct le_session *ws, const struct le_gguf_tensor *const *W,
          float *const *y, int n_w, const float *x, const int *at, int n)
{
    struct moe_job j = {.ws = ws,
                        .W = {W[0], n_w > 1 ? W[1] : NULL},
                        .y = {y[0], n_w > 1 ? y[1] : NULL},
                        .at = at,
                        .n_units = 0};
    quant_for_packed(ws, &W[0][0], x, at[n], &j.act);
    atomic_init(&j.next, 0);
    for (int e = 0; e < n; e++)
        for (int w = 0; w < n_w && at[e + 1] > at[e]; w++)
            j.units[j.n_units++] = (e << 1) | w;
    le_pool_run(ws->m->pool, moe_run, &j, j.n_units < 2 ? 1 : 0);
}

/* moe_ffn's expert rows: gather (to 1) copies the FFN input of the
 * tokens of rows[0, c) (moe_rows entries) into x; add (to 0) adds each
 * row of y times its weight to its token's output in ws->xb */
static void
moe_rows_io(struct le_session *ws, const int32_t *rows, int c, float *x,
            const float *y, int gather)
{
    int E = ws->m->hp.n_embd, K = ws->m->hp.n_expert_used;
    for (int i = 0; i < c; i++) {
        int t = rows[i] / K;
        if (gather) {
            memcpy(x + (size_t)i * E, ws->moe_in + (size_t)t * E,
                   (size_t)E * sizeof(float));
            continue;
        }
        float w = ws->moe_w[rows[i]];
        float *o = ws->xb + (size_t)t * E;
        const float *ye = y + (size_t)i * E;
        for (int d = 0; d < E; d++)
            o[d] += w * ye[d];
    }
}

/* moe_ffn's experts one after another, each as matmul's products over
 * its rows (expert e's at moe_rows [at[e], at[e + 1])) */
static void
moe_each(struct le_session *ws, const struct le_layer *L, const int *at,
         le_silu_mul_fn silu_mul)
{
    const struct le_hparams *hp = &ws->m->hp;
    int E = hp->n_embd, F = hp->n_ff, NX = hp->n_expert, qx;
    for (int e = 0; e < NX; e++) {
        int c = at[e + 1] - at[e];
        const int32_t *rows = ws->moe_rows + at[e];
        if (c == 0)
            continue;
        moe_rows_io(ws, rows, c, ws->moe_x, NULL, 1);
        qx = -1;
        matmul(ws, &L->exp_gate[e], ws->moe_x, ws->hb, c, c, &qx);
        matmul(ws, &L->exp_up[e], ws->moe_x, ws->hb2, c, c, &qx);
        add_bias_rows(ws->hb, L->exp_gate_b, e, F, c);
        add_bias_rows(ws->hb2, L->exp_up_b, e, F, c);
        (hp->swiglu_oai ? swiglu_oai : silu_mul)(ws->hb, ws->hb2, c * F);
        qx = -1;
        matmul(ws, &L->exp_down[e], ws->hb, ws->moe_y, c, c, &qx);
        add_bias_rows(ws->moe_y, L->exp_down_b, e, E, c);
        moe_rows_io(ws, rows, c, NULL, ws->moe_y, 0);
    }
}

/* A mixture-of-experts FFN over the batch's normed rows in ws->xb, its
 * output left in ws->xb: each expert's gate, up and down products run
 * once over the rows of the tokens that chose it (gathered in token
 * order, so a token's floats do not depend on the batch), and each
 * token sums its experts' outputs times their weights in expert order.
 * The expert products never take the AMX GEMM: how many of a prefill
 * piece's rows reach an expert depends on what else shares the step, so
 * the AMX crossover (matmul) would pick a token's kernel by its
 * neighbours, and alone would differ from batched; the router's product
 * keeps amx_from. */
static void
moe_ffn(struct le_session *ws, const struct le_layer *L, int nt, int af)
{
    const struct le_hparams *hp = &ws->m->hp;
    int E = hp->n_embd, F = hp->n_ff, NX = hp->n_expert,
        K = hp->n_expert_used;
    int qx = -1;
    matmul(ws, L->ffn_gate_inp, ws->xb, ws->moe_logits, nt, af, &qx);
    add_bias(ws->moe_logits, L->gate_inp_b, NX, nt);
    float probs[LE_MAX_EXPERTS], biased[LE_MAX_EXPERTS];
    for (int t = 0; t < nt; t++) {
        if (hp->arch == LE_ARCH_DEEPSEEK2)
            moe_route_ds(ws->moe_logits + (size_t)t * NX, NX, K,
                         hp->expert_sigmoid,
                         L->exp_probs_b ? L->exp_probs_b->data : NULL,
                         hp->expert_norm, hp->expert_wscale, probs, biased,
                         ws->moe_sel + (size_t)t * K,
                         ws->moe_w + (size_t)t * K);
        else if (hp->expert_topk_softmax)
            moe_route_topk(ws->moe_logits + (size_t)t * NX, NX, K,
                           ws->moe_sel + (size_t)t * K,
                           ws->moe_w + (size_t)t * K);
        else
            moe_route(ws->moe_logits + (size_t)t * NX, NX, K,
                      hp->expert_norm, ws->moe_sel + (size_t)t * K,
                      ws->moe_w + (size_t)t * K);
    }
    memcpy(ws->moe_in, ws->xb, (size_t)nt * E * sizeof(float));
    memset(ws->xb, 0, (size_t)nt * E * sizeof(float));
    le_silu_mul_fn silu_mul = le_silu_mul_get();
    /* each expert's (token, slot) pairs, in token order: a counting sort
     * of the choices into moe_rows, expert e's at [at[e], at[e + 1]) */
    int at[LE_MAX_EXPERTS + 1] = {0};
    for (int i = 0; i < nt * K; i++)
        at[ws->moe_sel[i] + 1]++;
    for (int e = 0; e < NX; e++)
        at[e + 1] += at[e];
    int fill[LE_MAX_EXPERTS];
    memcpy(fill, at, (size_t)NX * sizeof(int));
    for (int i = 0; i < nt * K; i++)
        ws->moe_rows[fill[ws->moe_sel[i]]++] = i;
    const struct le_gguf_tensor *gu[2] = {L->exp_gate, L->exp_up},
                                *dn[1] = {L->exp_down};
    if (!L->exp_gate_b && !L->exp_up_b && !L->exp_down_b &&
        !hp->swiglu_oai && moe_group_ok(ws, gu, 2, NX, nt * K) &&
        moe_group_ok(ws, dn, 1, NX, nt * K)) {
        /* every chosen expert at once (moe_group); rows as moe_rows */
        ws->moe_grouped++;
        moe_rows_io(ws, ws->moe_rows, nt * K, ws->moe_x, NULL, 1);
        float *yg[2] = {ws->hb, ws->hb2}, *yd[1] = {ws->moe_y};
        moe_group(ws, gu, yg, 2, ws->moe_x, at, NX);
        for (int e = 0; e < NX; e++) /* each expert's rows, as moe_each */
            silu_mul(ws->hb + (size_t)at[e] * F, ws->hb2 + (size_t)at[e] * F,
                     (at[e + 1] - at[e]) * F);
        moe_group(ws, dn, yd, 1, ws->hb, at, NX);
        /* in expert order, as moe_each */
        moe_rows_io(ws, ws->moe_rows, nt * K, NULL, ws->moe_y, 0);
    } else {
        moe_each(ws, L, at, silu_mul);
    }
    if (!L->sh_gate)
        return;
    /* qwen2moe's shared expert over every row, weighted by the sigmoid of
     * its gate's dot with the row, added after the experts (deepseek2's,
     * without a gate, as they are) */
    int FS = hp->n_ff_shexp;
    qx = -1;
    matmul(ws, L->sh_gate, ws->moe_in, ws->hb, nt, af, &qx);
    matmul(ws, L->sh_up, ws->moe_in, ws->hb2, nt, af, &qx);
    silu_mul(ws->hb, ws->hb2, nt * FS);
    qx = -1;
    matmul(ws, L->sh_down, ws->hb, ws->moe_y, nt, af, &qx);
    const float *gw = L->sh_gate_inp ? L->sh_gate_inp->data : NULL;
    for (int t = 0; t < nt; t++) {
        const float *xi = ws->moe_in + (size_t)t * E;
        float dot = 0;
        for (int d = 0; gw && d < E; d++)
            dot += gw[d] * xi[d];
        float g = gw ? 1.0f / (1.0f + expf(-dot)) : 1.0f;
        float *y = ws->xb + (size_t)t * E;
        const float *ys = ws->moe_y + (size_t)t * E;
        for (int d = 0; d < E; d++)
            y[d] += g * ys[d];
    }
}

/* deepseek2's per-head products of a generation step in one pool job:
 * head h's rows of ws->mla_in ([h][t], n_in each) through W[h] into
 * ws->mla_out ([h][t], n_out each), all heads' activations quantised in
 * one pass, each worker taking whole heads.  The same kernels and rows
 * as matmul's, so the same floats; 32 products a layer as 2 pool jobs
 * instead of 64 (the quantisation's and the product's each).  Only when
 * every head's weight is repacked with the same kernel and its rows fit
 * the scratch (mla_heads_ok). */
struct mlh_job {
    const struct le_gguf_tensor *W;
    struct le_session *ws;
    struct le_pack_act act;
    int n_tok, H;
    atomic_int next;
};

static void
mla_heads_run(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    struct mlh_job *j = arg;
    const struct le_model *m = j->ws->m;
    for (;;) {
        int h = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (h >= j->H)
            return;
        const struct le_packed *P = m->packed[slot_of(m, &j->W[h])];
        size_t r0 = (size_t)h * (size_t)j->n_tok;
        packed_rows(P, &j->act, r0, j->n_tok,
                    j->ws->mla_out + r0 * (size_t)P->n_out);
    }
}

static int
mla_heads_ok(const struct le_session *ws, const struct le_gguf_tensor *W,
             int nt)
{
    const struct le_model *m = ws->m;
    int H = m->hp.n_head, n_in = (int)W[0].ne[0], n_out = (int)W[0].ne[1];
    const struct le_type_traits *tt = le_type_get(W[0].type);
    if (!m->packed || nt > GEMV_MAX_TOK || nt > ws->n_batch ||
        tt->vec_dot_type == LE_TYPE_F32 ||
        (size_t)H * (size_t)nt * (size_t)(n_in > n_out ? n_in : n_out) >
            ws->mla_cap ||
        (size_t)H * (size_t)nt *
                le_row_size(tt->vec_dot_type, (int64_t)n_in) >
            ws->qact_size ||
        (size_t)H * (size_t)nt * ws->qprep_row >
            (size_t)ws->n_batch * (ws->qprep_row + 64))
        return 0;
    for (int h = 0; h < H; h++) {
        const struct le_packed *P = m->packed[slot_of(m, &W[h])];
        if (!P || P->pt.type != m->packed[slot_of(m, &W[0])]->pt.type)
            return 0;
    }
    return 1;
}

static void
mla_heads(struct le_session *ws, const struct le_gguf_tensor *W, int nt)
{
    int H = ws->m->hp.n_head;
    struct mlh_job j = {W, ws, {0}, nt, H, 0};
    quant_for_packed(ws, &W[0], ws->mla_in, H * nt, &j.act);
    le_pool_run(ws->m->pool, mla_heads_run, &j, 0);
}

/* deepseek2's queries and key in the absorbed layout (le_int.h): q into
 * ws->att, the LoRA's half through ws->mla_in; the latent and rotary key
 * into ws->k as [rotary | normed latent], ws->v the same row (its values
 * from n_rot on are the latent, the rest unused); per head, the query
 * [rotary | k_b[h] . nope] into ws->q. */
static void
mla_qkv(struct le_session *ws, const struct le_layer *L, int nt, int af)
{
    const struct le_hparams *hp = &ws->m->hp;
    int H = hp->n_head, R = hp->n_rot, LR = hp->kv_lora, NP = hp->mla_nope,
        QL = hp->q_lora, HD = hp->head_dim, QH = NP + R;
    float *raw = ws->att; /* [nt][H * QH] until the attention */
    int qx = -1;
    if (L->wq_a) {
        matmul(ws, L->wq_a, ws->xb, ws->mla_in, nt, af, &qx);
        for (int t = 0; t < nt; t++)
            rmsnorm(ws->mla_in + (size_t)t * QL, ws->mla_in + (size_t)t * QL,
                    L->q_a_norm->data, QL, hp->eps);
        int qa = -1;
        matmul(ws, L->wq, ws->mla_in, raw, nt, af, &qa);
        qx = -1; /* the activations' scratch now holds q_a's */
    } else {
        matmul(ws, L->wq, ws->xb, raw, nt, af, &qx);
    }
    matmul(ws, L->wkv_a, ws->xb, ws->k, nt, af, &qx);
    float pe[1024];
    for (int t = 0; t < nt; t++) {
        float *k = ws->k + (size_t)t * HD;
        memcpy(pe, k + LR, (size_t)R * sizeof(float));
        memmove(k + R, k, (size_t)LR * sizeof(float));
        rmsnorm(k + R, k + R, L->kv_a_norm->data, LR, hp->eps);
        memcpy(k, pe, (size_t)R * sizeof(float));
        memcpy(ws->v + (size_t)t * HD, k, (size_t)HD * sizeof(float));
    }
    /* all heads in one product (mla_heads), or head by head; rows of
     * head h at [h][t] either way (h 0 when one at a time) */
    int all = mla_heads_ok(ws, L->k_b, nt);
    for (int h0 = 0; h0 < H; h0 += all ? H : 1) {
        int nh = all ? H : 1;
        for (int h = h0; h < h0 + nh; h++)
            for (int t = 0; t < nt; t++)
                memcpy(ws->mla_in + ((size_t)(h - h0) * nt + t) * NP,
                       raw + (size_t)t * H * QH + (size_t)h * QH,
                       (size_t)NP * sizeof(float));
        if (all) {
            mla_heads(ws, L->k_b, nt);
        } else {
            int qk = -1;
            matmul(ws, &L->k_b[h0], ws->mla_in, ws->mla_out, nt, nt, &qk);
        }
        for (int h = h0; h < h0 + nh; h++)
            for (int t = 0; t < nt; t++) {
                float *q = ws->q + ((size_t)t * H + (size_t)h) * HD;
                memcpy(q, raw + (size_t)t * H * QH + (size_t)h * QH + NP,
                       (size_t)R * sizeof(float));
                memcpy(q + R,
                       ws->mla_out + ((size_t)(h - h0) * nt + t) * LR,
                       (size_t)LR * sizeof(float));
            }
    }
}

/* deepseek2 after the attention: each head's latent output (ws->att,
 * from n_rot on) through v_b[h], the heads' values side by side into
 * ws->q ([nt][n_head * mla_v], attn_output's input). */
static void
mla_values(struct le_session *ws, const struct le_layer *L, int nt)
{
    const struct le_hparams *hp = &ws->m->hp;
    int H = hp->n_head, R = hp->n_rot, LR = hp->kv_lora, V = hp->mla_v,
        HD = hp->head_dim;
    int all = mla_heads_ok(ws, L->v_b, nt);
    for (int h0 = 0; h0 < H; h0 += all ? H : 1) {
        int nh = all ? H : 1;
        for (int h = h0; h < h0 + nh; h++)
            for (int t = 0; t < nt; t++)
                memcpy(ws->mla_in + ((size_t)(h - h0) * nt + t) * LR,
                       ws->att + ((size_t)t * H + (size_t)h) * HD + R,
                       (size_t)LR * sizeof(float));
        if (all) {
            mla_heads(ws, L->v_b, nt);
        } else {
            int qv = -1;
            matmul(ws, &L->v_b[h0], ws->mla_in, ws->mla_out, nt, nt, &qv);
        }
        for (int h = h0; h < h0 + nh; h++)
            for (int t = 0; t < nt; t++)
                memcpy(ws->q + ((size_t)t * H + (size_t)h) * V,
                       ws->mla_out + ((size_t)(h - h0) * nt + t) * V,
                       (size_t)V * sizeof(float));
    }
}

int32_t
le_model_n_embd(const struct le_model *m)
{
    return m->hp.n_embd;
}

/* The final hidden states (after output_norm) of ids, mean-pooled and
 * L2-normalised, in a session of its own (the pool's run_lock orders its
 * products with the scheduler's); no logits are computed. */
enum le_status
le_model_embed(struct le_model *m, const int32_t *ids, size_t n, float *out,
               char *err, size_t errlen)
{
    int E = m->hp.n_embd;
    if (n == 0)
        return fail(err, errlen, LE_EINVAL, "embed: no tokens");
    if (n > (size_t)m->params.n_ctx)
        return fail(err, errlen, LE_ECONTEXT,
                    "the input has %zu tokens; the context window is %d", n,
                    (int)m->params.n_ctx);
    struct le_session *s = NULL;
    enum le_status st = le_session_new(m, &s, err, errlen);
    double *sum = st == LE_OK ? calloc((size_t)E, sizeof(*sum)) : NULL;
    float *h = sum ? malloc((size_t)E * sizeof(*h)) : NULL;
    if (st == LE_OK && !h)
        st = fail(err, errlen, LE_ENOMEM, "embed: out of memory");
    for (size_t at = 0; st == LE_OK && at < n;) {
        size_t k = n - at < (size_t)s->n_batch ? n - at : (size_t)s->n_batch;
        struct le_fwd_batch b = {0};
        b.n_tok = (int32_t)k;
        b.ids = ids + at;
        b.one = s;
        st = le_model_forward_batch(s, &b, err, errlen);
        for (size_t t = 0; st == LE_OK && t < k; t++) {
            rmsnorm(h, s->x + t * (size_t)E, m->output_norm->data, E,
                    m->hp.eps);
            for (int i = 0; i < E; i++)
                sum[i] += h[i];
        }
        at += k;
    }
    if (st == LE_OK) {
        double ss = 0;
        for (int i = 0; i < E; i++)
            ss += sum[i] * sum[i]; /* the mean's 1/n cancels */
        double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
        for (int i = 0; i < E; i++)
            out[i] = (float)(sum[i] * inv);
    }
    free(h);
    free(sum);
    le_session_free(s);
    return st;
}

enum le_status
le_model_forward(struct le_session *s, const int32_t *ids, size_t n,
                 char *err, size_t errlen)
{
    if (n == 0)
        return LE_OK;
    if (n > (size_t)s->n_batch || s->n_past + (int64_t)n > s->n_ctx)
        return fail(err, errlen, LE_ECONTEXT,
                    "the context window of %d tokens is full", s->n_ctx);
    int32_t last = (int32_t)n - 1;
    struct le_fwd_batch b = {0};
    b.n_tok = (int32_t)n;
    b.ids = ids;
    b.one = s;
    b.amx_from = 0; /* one sequence's chunk: AMX past le_amx_min_tok */
    b.n_out = 1;
    b.out = &last;
    b.logits = s->logits;
    return le_model_forward_batch(s, &b, err, errlen);
}

int
le_model_amx_min_tok(const struct le_model *m)
{
    /* the layers' products only: the output one runs on the logits rows,
     * never on the AMX part (le_model_forward_batch) */
    int most = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct le_layer *L = &m->layers[l];
        const struct le_gguf_tensor *w[7] = {L->wq, L->wk, L->wv, L->wo,
                                             L->w_gate, L->w_up, L->w_down};
        for (int i = 0; i < 7; i++) {
            int k = w[i] ? le_amx_min_tok(w[i]->type) : 0;
            most = k > most ? k : most;
        }
    }
    return most;
}

enum le_status
le_model_forward_batch(struct le_session *ws, const struct le_fwd_batch *b,
                       char *err, size_t errlen)
{
    struct le_model *m = ws->m;
    const struct le_hparams *hp = &m->hp;
    int E = hp->n_embd;
    int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    int nt = b->n_tok, af = b->amx_from;
    if (nt <= 0)
        return LE_OK;
    if (nt > ws->n_batch || b->n_out > nt || b->n_out < 0)
        return fail(err, errlen, LE_EINVAL,
                    "forward: a batch of %d tokens (%d outputs) exceeds the "
                    "scratch of %d",
                    nt, (int)b->n_out, (int)ws->n_batch);
    for (int t = 0; t < nt; t++) {
        const struct le_session *s = tok_seq(b, t);
        int pos = tok_pos(b, t);
        if (!s->kv_k || pos < 0 || pos >= s->n_ctx)
            return fail(err, errlen, LE_ECONTEXT,
                        "the context window of %d tokens is full",
                        s->n_ctx);
        if (b->ids[t] < 0 || b->ids[t] >= hp->n_vocab)
            return fail(err, errlen, LE_EINVAL,
                        "forward: token id %d is outside the vocabulary",
                        (int)b->ids[t]);
    }

    /* embeddings */
    const struct le_type_traits *et = le_type_get(m->tok_embd->type);
    size_t erow = le_row_size(m->tok_embd->type, E);
    for (int t = 0; t < nt; t++) {
        float *x = ws->x + (size_t)t * E;
        et->to_float((const uint8_t *)m->tok_embd->data +
                         (size_t)b->ids[t] * erow,
                     x, E);
        if (hp->embd_scale != 1.0f) /* gemma3: sqrt(n_embd) */
            for (int i = 0; i < E; i++)
                x[i] *= hp->embd_scale;
    }

    int64_t att_work = 0;
    for (int t = 0; t < nt; t++)
        att_work += (int64_t)hp->n_head * (tok_pos(b, t) + 1) * hp->head_dim;
    if (hp->n_layer > 0)
        tok_run(ws, b, TOK_NORM, 0, 0, m->layers[0].attn_norm->data, NULL);
    for (int l = 0; l < hp->n_layer; l++) {
        const struct le_layer *L = &m->layers[l];
        int qx = -1; /* ws->xb changed */
        if (L->wkv_a) { /* deepseek2 */
            mla_qkv(ws, L, nt, af);
        } else {
            matmul(ws, L->wq, ws->xb, ws->q, nt, af, &qx);
            matmul(ws, L->wk, ws->xb, ws->k, nt, af, &qx);
            matmul(ws, L->wv, ws->xb, ws->v, nt, af, &qx);
            add_bias(ws->q, L->bq, QD, nt);
            add_bias(ws->k, L->bk, KD, nt);
            add_bias(ws->v, L->bv, KD, nt);
        }
        tok_run(ws, b, TOK_ROPE, l, 0, NULL, NULL);
        struct att_job aj = {ws, b, l};
        le_pool_run(m->pool, attention_heads, &aj, att_work < 16384 ? 1 : 0);
        if (L->wkv_a)
            mla_values(ws, L, nt);
        qx = -1;
        matmul(ws, L->wo, L->wkv_a ? ws->q : ws->att, ws->xb, nt, af, &qx);
        add_bias(ws->xb, L->bo, E, nt);
        tok_run(ws, b, TOK_NORM, l, 1, L->ffn_norm->data,
                L->attn_post_norm ? L->attn_post_norm->data : NULL);
        if (L->ffn_gate_inp) {
            moe_ffn(ws, L, nt, af);
        } else {
            qx = -1;
            matmul(ws, L->w_gate, ws->xb, ws->hb, nt, af, &qx);
            matmul(ws, L->w_up, ws->xb, ws->hb2, nt, af, &qx);
            tok_run(ws, b, TOK_SILU, l, 0, NULL, NULL);
            qx = -1;
            matmul(ws, L->w_down, ws->hb, ws->xb, nt, af, &qx);
        }
        /* the residual, and the next layer's attention norm */
        tok_run(ws, b, TOK_NORM, l, 1,
                l + 1 < hp->n_layer ? m->layers[l + 1].attn_norm->data
                                    : NULL,
                L->ffn_post_norm ? L->ffn_post_norm->data : NULL);
    }

    /* logits of the wanted tokens only, never through the AMX GEMM (one
     * sequence alone asks for one row) */
    for (int o = 0; o < b->n_out; o++)
        rmsnorm(ws->xb + (size_t)o * E, ws->x + (size_t)b->out[o] * E,
                m->output_norm->data, E, hp->eps);
    int qo = -1;
    if (b->n_out > 0)
        matmul(ws, m->output, ws->xb, b->logits, b->n_out, b->n_out, &qo);
    if (hp->logit_scale > 0) { /* granite: times 1 / logit_scale */
        float inv = 1.0f / hp->logit_scale;
        for (size_t i = 0; i < (size_t)b->n_out * (size_t)hp->n_vocab; i++)
            b->logits[i] *= inv;
    }
    if (hp->softcap > 0) /* final_logit_softcapping */
        for (size_t i = 0; i < (size_t)b->n_out * (size_t)hp->n_vocab; i++)
            b->logits[i] = hp->softcap * tanhf(b->logits[i] / hp->softcap);
    for (int t = 0; t < nt; t++) {
        struct le_session *s = tok_seq(b, t);
        int pos = tok_pos(b, t);
        s->hist[pos] = b->ids[t];
    }
    /* n_past last: tok_pos of a single-sequence batch reads it */
    for (int t = 0; t < nt; t++) {
        struct le_session *s = tok_seq(b, t);
        int pos = b->pos ? b->pos[t] : -1;
        if (pos >= s->n_past)
            s->n_past = pos + 1;
    }
    if (!b->pos)
        b->one->n_past += nt;
    return LE_OK;
}
