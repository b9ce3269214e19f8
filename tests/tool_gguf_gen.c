/*
 * tool_gguf_gen: writes a random-weight llama GGUF (tests/lib/gguf_writer)
 * of a chosen shape and weight type, for benchmarks.
 *
 *   tool_gguf_gen --out FILE --type q4_0|q8_0|q4_k|q6_k|f16|f32|...
 *                 --n-embd N --n-layer N --n-head N --n-head-kv N
 *                 --n-ff N --n-vocab N [--n-ctx N] [--seed S] [--tied]
 *                 [--chat-template TEXT] [--control TOKEN]...
 *                 [--arch llama|qwen3|qwen3moe|qwen2moe|gemma2|gemma3|phi3|
 *                         granite|granitemoe|gpt-oss|deepseek2|mistral3]
 *                 [--head-dim N] [--sliding-window N] [--user-token TOKEN]...
 *                 [--experts N,K] [--exp-type TYPE] [--n-ff-exp N]
 *                 [--n-ff-shexp N]
 *                 [--yarn FACTOR,ORIG_CTX] [--longrope ORIG_CTX,ATTN]
 *                 [--kv-lora N] [--q-lora N] [--ds-heads NOPE,ROPE,V]
 *                 [--dense-lead N] [--n-shared N] [--ds-wscale F]
 *                 [--ds-wnorm] [--ds-gating softmax|sigmoid]
 *                 [--ds-probs-b] [--ds-mla] [--yarn-log-mul F]
 *                 [--attn-temp BETA] [--attn-temp-len N]
 *
 * Every 2-D weight is of --type (norms F32), as gguf_writer.h describes;
 * the same seed and shape give the same float weights at every type;
 * --chat-template sets tokenizer.chat_template (its markers choose the
 * chat and tool formats, local_engine/chat.c); each --control adds a
 * control token (e.g. mistral's "[TOOL_CALLS]") at the vocabulary's end
 * (at most 16), each --user-token a user-defined one (type 4, always
 * written as text: qwen3's "<think>") just before them; --arch qwen3
 * writes qwen3's metadata and head norms (gemma3 also its post norms,
 * --sliding-window its window; gemma2 the post norms and window, and
 * with --softcap A,F its attention and final logit caps);
 * --head-dim sets attention.key_length (q then n_head * N wide);
 * --experts N,K gives every layer N experts of which K are used (llama,
 * mistral3: Mixtral's layout; qwen3moe needs them), --n-ff-exp an
 * expert's width apart from --n-ff (expert_feed_forward_length), --exp-type their
 * weights' type apart from --type (gpt-oss's files: mxfp4); qwen2moe adds qwen2's
 * biases and a shared expert of --n-ff-shexp (else --n-ff); --yarn
 * writes YaRN rope scaling (rope.scaling.type yarn, its factor and
 * original_context_length); --arch phi3 writes fused attn_qkv and
 * ffn_up, --sliding-window as its window, and with --longrope its
 * short / long rope factors, original context and attn_factor; granite
 * and granitemoe the llama layout with Granite 3's four multipliers;
 * gpt-oss (--experts and --sliding-window needed) its biases, attention
 * sinks and the router's and experts' biases; deepseek2 (--experts,
 * --n-ff-exp, --kv-lora and --ds-heads needed; --n-head-kv optional and
 * ignored) DeepSeek-V2 / V3 with Multi-head Latent Attention: --kv-lora
 * the kv latent rank, --q-lora the q one (none: attn_q directly),
 * --ds-heads each head's unrotated q/k, rotated q/k and v sizes,
 * --dense-lead the leading layers with a dense FFN of --n-ff,
 * --n-shared the shared experts (default 1), --ds-wscale the experts'
 * weight scale (default 1), --ds-wnorm normalised expert weights,
 * --ds-gating the router's function (unset: the key not written),
 * --ds-probs-b the selection bias exp_probs_b, --yarn-log-mul
 * rope.scaling.yarn_log_multiplier (default 0), and --ds-mla the split
 * attn_k_b / attn_v_b layout of newer llama.cpp in place of attn_kv_b
 * (the same network from the same seed).  --arch mistral3 (Ministral 3)
 * writes the llama layout under mistral3's keys; with it --yarn-log-mul
 * writes rope.scaling.yarn_log_multiplier (mscale_all_dim, 1 in
 * Ministral 3) and --attn-temp the attention temperature's beta
 * (attention.temperature_scale; its step is --yarn's original context,
 * else --n-ctx).  --attn-temp goes with deepseek2 too, with
 * --attn-temp-len its step (attention.temperature_length).  The
 * whole file is built in memory before it is written: a 1B-model slice
 * (n_embd 2048, 4 layers, n_vocab 32000) needs about 1.5 GB for a moment.
 * Exit codes: 0 written, 1 the writer failed, 2 usage error.
 */
#include "lib/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(FILE *f)
{
    fputs("usage: tool_gguf_gen --out FILE --type TYPE --n-embd N "
          "--n-layer N\n"
          "                     --n-head N --n-head-kv N --n-ff N "
          "--n-vocab N\n"
          "                     [--n-ctx N] [--seed S] [--tied] "
          "[--chat-template TEXT]\n"
          "                     [--control TOKEN]... "
          "[--arch llama|qwen3|qwen3moe|qwen2moe|gemma2|gemma3|phi3|\n"
          "                             granite|granitemoe|gpt-oss|"
          "deepseek2|mistral3]\n"
          "                     [--head-dim N] [--sliding-window N] "
          "[--softcap A,F]\n"
          "                     [--user-token TOKEN]... [--experts N,K] "
          "[--exp-type TYPE] "
          "[--n-ff-exp N]\n"
          "                     [--n-ff-shexp N] [--yarn FACTOR,ORIG_CTX]\n"
          "                     [--longrope ORIG_CTX,ATTN]\n"
          "  deepseek2:         --kv-lora N --ds-heads NOPE,ROPE,V "
          "[--q-lora N]\n"
          "                     [--dense-lead N] [--n-shared N] "
          "[--ds-wscale F] [--ds-wnorm]\n"
          "                     [--ds-gating softmax|sigmoid] "
          "[--ds-probs-b] [--ds-mla]\n"
          "                     [--yarn-log-mul F] [--attn-temp BETA "
          "--attn-temp-len N]\n"
          "  mistral3:          [--yarn-log-mul F] [--attn-temp BETA]\n"
          "TYPE: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k "
          "q5_k q6_k mxfp4\n",
          f);
}

/* "A,B": A copied into first (at most cap - 1 bytes), B returned; NULL
 * without a comma or with A too long */
static const char *
split_comma(const char *v, char *first, size_t cap)
{
    const char *c = strchr(v, ',');
    if (!c || (size_t)(c - v) >= cap)
        return NULL;
    memcpy(first, v, (size_t)(c - v));
    first[c - v] = '\0';
    return c + 1;
}

static int
parse_range(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int
parse_pos(const char *s, long hi, int *out)
{
    return parse_range(s, 1, hi, out);
}

/* a finite float, all of s */
static int
parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v - v == 0))
        return -1;
    *out = v;
    return 0;
}

static int
parse_type(const char *s, enum le_type *out)
{
    static const struct {
        const char *name;
        enum le_type t;
    } types[] = {
        {"f32", LE_TYPE_F32},   {"f16", LE_TYPE_F16},
        {"bf16", LE_TYPE_BF16}, {"q4_0", LE_TYPE_Q4_0},
        {"q4_1", LE_TYPE_Q4_1}, {"q5_0", LE_TYPE_Q5_0},
        {"q5_1", LE_TYPE_Q5_1}, {"q8_0", LE_TYPE_Q8_0},
        {"q2_k", LE_TYPE_Q2_K}, {"q3_k", LE_TYPE_Q3_K},
        {"q4_k", LE_TYPE_Q4_K}, {"q5_k", LE_TYPE_Q5_K},
        {"q6_k", LE_TYPE_Q6_K}, {"mxfp4", LE_TYPE_MXFP4},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcasecmp(s, types[i].name)) {
            *out = types[i].t;
            return 0;
        }
    return -1;
}

int
main(int argc, char **argv)
{
    const char *out = NULL, *tmpl = NULL, *ctl[17] = {NULL},
               *usr[17] = {NULL};
    int n_ctl = 0, n_usr = 0;
    struct gguf_w_llama p;
    memset(&p, 0, sizeof(p));
    /* ds_opt: a deepseek2 option seen; lm_opt: --yarn-log-mul or
     * --attn-temp (deepseek2 or mistral3) */
    int have_type = 0, ds_opt = 0, lm_opt = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied")) {
            p.tied = 1;
            continue;
        }
        /* deepseek2's flags */
        int *flag = !strcmp(a, "--ds-wnorm")     ? &p.ds_wnorm
                    : !strcmp(a, "--ds-probs-b") ? &p.ds_probs_b
                    : !strcmp(a, "--ds-mla")     ? &p.ds_mla
                                                 : NULL;
        if (flag) {
            *flag = 1;
            ds_opt = 1;
            continue;
        }
        if (!v) {
            bad = 1;
        } else if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--chat-template")) {
            tmpl = v;
        } else if (!strcmp(a, "--control")) {
            bad = n_ctl == 16 || !*v;
            if (!bad)
                ctl[n_ctl++] = v;
        } else if (!strcmp(a, "--user-token")) {
            bad = n_usr == 16 || !*v;
            if (!bad)
                usr[n_usr++] = v;
        } else if (!strcmp(a, "--arch")) {
            bad = strcmp(v, "llama") && strcmp(v, "qwen3") &&
                  strcmp(v, "qwen3moe") && strcmp(v, "qwen2moe") &&
                  strcmp(v, "gemma3") && strcmp(v, "gemma2") &&
                  strcmp(v, "phi3") && strcmp(v, "granite") &&
                  strcmp(v, "granitemoe") && strcmp(v, "gpt-oss") &&
                  strcmp(v, "deepseek2") && strcmp(v, "mistral3");
            p.arch = v;
        } else if (!strcmp(a, "--softcap")) {
            /* gemma2: attention,final (e.g. 50,30) */
            char *end;
            p.attn_softcap = strtof(v, &end);
            bad = *end != ',' || !(p.attn_softcap > 0);
            if (!bad) {
                p.final_softcap = strtof(end + 1, &end);
                bad = *end || !(p.final_softcap > 0);
            }
        } else if (!strcmp(a, "--experts")) {
            /* N,K: N experts a layer, K used a token */
            char nb[16];
            const char *c = split_comma(v, nb, sizeof(nb));
            bad = !c || parse_pos(nb, 1024, &p.n_expert) ||
                  parse_pos(c, p.n_expert, &p.n_expert_used);
        } else if (!strcmp(a, "--exp-type")) {
            bad = parse_type(v, &p.exp_type);
            p.exp_typed = !bad;
        } else if (!strcmp(a, "--n-ff-exp")) {
            bad = parse_pos(v, 1 << 18, &p.n_ff_exp);
        } else if (!strcmp(a, "--yarn")) {
            /* FACTOR,ORIGINAL_CONTEXT */
            char *end;
            p.yarn_factor = strtof(v, &end);
            bad = *end != ',' || !(p.yarn_factor > 0);
            if (!bad)
                bad = parse_pos(end + 1, 1 << 24, &p.yarn_orig);
        } else if (!strcmp(a, "--longrope")) {
            /* ORIGINAL_CONTEXT,ATTN_FACTOR (phi3) */
            char nb[16], *end = NULL;
            const char *c = split_comma(v, nb, sizeof(nb));
            if (c)
                p.longrope_attn = strtof(c, &end);
            bad = !c || parse_pos(nb, 1 << 24, &p.longrope_orig) || *end ||
                  !(p.longrope_attn > 0);
        } else if (!strcmp(a, "--kv-lora")) {
            bad = parse_pos(v, 1 << 16, &p.kv_lora);
            ds_opt = 1;
        } else if (!strcmp(a, "--q-lora")) {
            bad = parse_pos(v, 1 << 16, &p.q_lora);
            ds_opt = 1;
        } else if (!strcmp(a, "--ds-heads")) {
            /* NOPE,ROPE,V */
            char nb[16], rb[16];
            const char *c = split_comma(v, nb, sizeof(nb));
            const char *d = c ? split_comma(c, rb, sizeof(rb)) : NULL;
            bad = !d || parse_pos(nb, 1024, &p.ds_nope) ||
                  parse_pos(rb, 1024, &p.ds_rope) || p.ds_rope % 2 ||
                  parse_pos(d, 1024, &p.ds_v);
            ds_opt = 1;
        } else if (!strcmp(a, "--dense-lead")) {
            bad = parse_range(v, 0, 1024, &p.n_dense_lead);
            ds_opt = 1;
        } else if (!strcmp(a, "--n-shared")) {
            bad = parse_pos(v, 64, &p.n_shared);
            ds_opt = 1;
        } else if (!strcmp(a, "--ds-wscale")) {
            bad = parse_float(v, &p.ds_wscale) || !(p.ds_wscale > 0);
            ds_opt = 1;
        } else if (!strcmp(a, "--ds-gating")) {
            p.ds_gating = !strcmp(v, "softmax")   ? 1
                          : !strcmp(v, "sigmoid") ? 2
                                                  : 0;
            bad = !p.ds_gating;
            ds_opt = 1;
        } else if (!strcmp(a, "--yarn-log-mul")) {
            bad = parse_float(v, &p.yarn_log_mul) || p.yarn_log_mul < 0;
            lm_opt = 1;
        } else if (!strcmp(a, "--attn-temp")) {
            bad = parse_float(v, &p.attn_temp);
            lm_opt = 1;
        } else if (!strcmp(a, "--attn-temp-len")) {
            bad = parse_pos(v, 1 << 24, &p.attn_temp_len);
            ds_opt = 1;
        } else if (!strcmp(a, "--n-ff-shexp")) {
            bad = parse_pos(v, 1 << 18, &p.n_ff_shexp);
        } else if (!strcmp(a, "--sliding-window")) {
            bad = parse_pos(v, 1 << 20, &p.n_swa);
        } else if (!strcmp(a, "--head-dim")) {
            bad = parse_pos(v, 1024, &p.head_dim) || p.head_dim % 2;
        } else if (!strcmp(a, "--type")) {
            bad = parse_type(v, &p.type);
            have_type = !bad;
        } else if (!strcmp(a, "--n-embd")) {
            bad = parse_pos(v, 1 << 16, &p.n_embd);
        } else if (!strcmp(a, "--n-layer")) {
            bad = parse_pos(v, 1024, &p.n_layer);
        } else if (!strcmp(a, "--n-head")) {
            bad = parse_pos(v, 1024, &p.n_head);
        } else if (!strcmp(a, "--n-head-kv")) {
            bad = parse_pos(v, 1024, &p.n_head_kv);
        } else if (!strcmp(a, "--n-ff")) {
            bad = parse_pos(v, 1 << 18, &p.n_ff);
        } else if (!strcmp(a, "--n-vocab")) {
            bad = parse_pos(v, 1 << 20, &p.n_vocab);
        } else if (!strcmp(a, "--n-ctx")) {
            bad = parse_pos(v, 1 << 20, &p.n_ctx);
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            bad = errno || end == v || *end || *v == '-';
            p.seed = (uint64_t)s;
        } else {
            fprintf(stderr, "tool_gguf_gen: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "tool_gguf_gen: bad or missing value for '%s'\n\n",
                    a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    int ds2 = p.arch && !strcmp(p.arch, "deepseek2");
    if (!out || !have_type || !p.n_embd || !p.n_layer || !p.n_head ||
        (!p.n_head_kv && !ds2) || !p.n_ff || !p.n_vocab) {
        fprintf(stderr, "tool_gguf_gen: --out, --type and every --n-* "
                        "shape option are required\n\n");
        usage(stderr);
        return 2;
    }
    if (p.n_vocab < 259 + n_ctl + n_usr ||
        (!ds2 && ((!p.head_dim && p.n_embd % p.n_head) ||
                  p.n_head % p.n_head_kv))) {
        fprintf(stderr, "tool_gguf_gen: need n_vocab >= 259 (and one more "
                        "for each --control and --user-token), n_embd a multiple of n_head "
                        "(without --head-dim), n_head a multiple of "
                        "n_head_kv\n");
        return 2;
    }
    int moe = p.arch && (!strcmp(p.arch, "qwen3moe") ||
                         !strcmp(p.arch, "qwen2moe") ||
                         !strcmp(p.arch, "granitemoe") ||
                         !strcmp(p.arch, "gpt-oss") || ds2);
    if (moe && !p.n_expert) {
        fprintf(stderr, "tool_gguf_gen: --arch %s needs --experts\n",
                p.arch);
        return 2;
    }
    int m3 = p.arch && !strcmp(p.arch, "mistral3");
    if (p.n_expert && p.arch && strcmp(p.arch, "llama") && !m3 && !moe) {
        fprintf(stderr, "tool_gguf_gen: --experts goes with --arch llama, "
                        "mistral3, qwen2moe, qwen3moe, granitemoe or "
                        "gpt-oss\n");
        return 2;
    }
    if (ds_opt && !ds2) {
        fprintf(stderr, "tool_gguf_gen: --kv-lora, --q-lora, --ds-*, "
                        "--dense-lead, --n-shared and --attn-temp-len go "
                        "with --arch deepseek2\n");
        return 2;
    }
    if (lm_opt && !ds2 && !m3) {
        fprintf(stderr, "tool_gguf_gen: --yarn-log-mul and --attn-temp go "
                        "with --arch deepseek2 or mistral3\n");
        return 2;
    }
    if (ds2 && p.attn_temp != 0 && !p.attn_temp_len) {
        fprintf(stderr, "tool_gguf_gen: --attn-temp with --arch deepseek2 "
                        "needs --attn-temp-len\n");
        return 2;
    }
    if (ds2 && (!p.n_ff_exp || !p.kv_lora || !p.ds_nope || p.head_dim ||
                p.n_dense_lead > p.n_layer)) {
        fprintf(stderr, "tool_gguf_gen: --arch deepseek2 needs --n-ff-exp, "
                        "--kv-lora and --ds-heads, no --head-dim, and "
                        "--dense-lead at most --n-layer\n");
        return 2;
    }
    if (p.arch && !strcmp(p.arch, "gpt-oss") && p.n_swa <= 0) {
        fprintf(stderr, "tool_gguf_gen: --arch gpt-oss needs "
                        "--sliding-window\n");
        return 2;
    }
    p.chat_template = tmpl;
    p.controls = n_ctl ? ctl : NULL;
    p.user_tokens = n_usr ? usr : NULL;
    if (gguf_w_llama_write(&p, out) != 0) {
        fprintf(stderr, "tool_gguf_gen: could not write %s (out of memory, "
                        "an unwritable path, or a type without a "
                        "quantiser)\n",
                out);
        return 1;
    }
    return 0;
}
