/*
 * test_sched: the scheduler (local_engine/sched.c) on stories260K and on
 * random-weight models: a sequence's greedy output is the same alone and
 * batched with others (the batched forward reads each weight once for
 * all of them), the prefix cache reuses cells and changes no output,
 * admission is bounded (LE_EBUSY at once), a paused sequence leaves the
 * batch and resumes to the same output, cancel ends a request, grammars
 * hold per sequence.  Waits are bounded; no timing asserts.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "lib/gguf_writer.h"
#include "lib/le_fixture.h"
#include <unistd.h>

#define MAX_OUT 128
#define JOIN_MAX 176 /* prompt tokens of a joiner */

/* The model lp describes, written to a temporary file, opened and the
 * file removed; NULL on failure. */
static struct le_model *
open_written(const struct gguf_w_llama *lp)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/llmux_sched_%d_%s_%llu.gguf",
             (int)getpid(), lp->arch ? lp->arch : "llama",
             (unsigned long long)lp->seed);
    struct le_model *m = NULL;
    if (gguf_w_llama_write(lp, path) != 0 ||
        le_model_open(path, NULL, &m, NULL, 0) != LE_OK)
        m = NULL;
    unlink(path);
    return m;
}

/* The shape of the random models below: a llama of n_embd (n_ff twice
 * that), 2 layers of 4 heads (2 KV), 300 tokens, n_ctx 256; n_expert >
 * 0: a mixture of that many experts a layer, 2 used (Mixtral's layout). */
static void
random_lp(struct gguf_w_llama *lp, enum le_type type, uint64_t seed,
          int n_embd, int n_expert)
{
    memset(lp, 0, sizeof(*lp));
    lp->n_vocab = 300;
    lp->n_embd = n_embd;
    lp->n_layer = 2;
    lp->n_head = 4;
    lp->n_head_kv = 2;
    lp->n_ff = 2 * n_embd;
    lp->n_ctx = 256;
    lp->type = type;
    lp->seed = seed;
    lp->n_expert = n_expert;
    lp->n_expert_used = n_expert ? 2 : 0;
}

static struct le_model *
random_llama_x(enum le_type type, uint64_t seed, int n_embd, int n_expert)
{
    struct gguf_w_llama lp;
    random_lp(&lp, type, seed, n_embd, n_expert);
    return open_written(&lp);
}

/* A random deepseek2 (latent attention of 64 with a q LoRA, 4 heads of
 * 32 + 32 with values of 32, the first of 2 layers dense, then 8 experts
 * of which 2 and a shared one), n_ctx 256: its generation steps take the
 * per-head products of all heads at once, its prompt pieces head by
 * head. */
static struct le_model *
random_ds2(enum le_type type, uint64_t seed)
{
    struct gguf_w_llama lp;
    random_lp(&lp, type, seed, 128, 8);
    lp.arch = "deepseek2";
    lp.n_ff_exp = 64;
    lp.kv_lora = 64;
    lp.q_lora = 64;
    lp.ds_nope = 32;
    lp.ds_rope = 32;
    lp.ds_v = 32;
    lp.n_dense_lead = 1;
    lp.n_shared = 1;
    lp.ds_mla = 1;
    return open_written(&lp);
}

/* A random mistral3 (the llama layout, 64 wide) with YaRN x2 over an
 * original 8 positions and the attention temperature (beta 0.5), which
 * then scales the queries a step every 8 positions: a sequence's
 * positions in a batch decide its factors. */
static struct le_model *
random_mistral3(enum le_type type, uint64_t seed)
{
    struct gguf_w_llama lp;
    random_lp(&lp, type, seed, 64, 0);
    lp.arch = "mistral3";
    lp.yarn_factor = 2;
    lp.yarn_orig = 8;
    lp.yarn_log_mul = 1;
    lp.attn_temp = 0.5f;
    return open_written(&lp);
}

static struct le_model *
random_llama(enum le_type type, uint64_t seed, int n_embd)
{
    return random_llama_x(type, seed, n_embd, 0);
}

static struct le_model *
wide_random(enum le_type type, uint64_t seed)
{
    return random_llama(type, seed, 256);
}

/* 1 when the logits of a 32-token prompt piece differ between the AMX
 * GEMM and the per-row kernels (0: the same bits, or no AMX here). */
static int
amx_differs(struct le_model *m)
{
    enum { N = 32 };
    int32_t V = le_model_n_vocab(m), ids[N], last = N - 1;
    struct le_session *kv = NULL, *ws = NULL;
    float *la = malloc((size_t)V * sizeof(float));
    int differs = 0;
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &kv, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, N, 1, 0, &ws, NULL, 0), LE_OK);
    if (!kv || !ws || !la)
        goto out;
    for (int i = 0; i < N; i++)
        ids[i] = 3 + (i * 37 + 11) % (V - 3);
    for (int pass = 0; pass < 2; pass++) {
        struct le_fwd_batch b = {0};
        kv->n_past = 0;
        b.n_tok = N;
        b.ids = ids;
        b.one = kv;
        b.amx_from = pass ? N : 0;
        b.n_out = 1;
        b.out = &last;
        b.logits = ws->logits;
        T_EQ_INT(le_model_forward_batch(ws, &b, NULL, 0), LE_OK);
        if (pass == 0)
            memcpy(la, ws->logits, (size_t)V * sizeof(float));
        else
            differs = memcmp(la, ws->logits, (size_t)V * sizeof(float)) != 0;
    }
out:
    free(la);
    le_session_free(kv);
    le_session_free(ws);
    return differs;
}

struct run {
    int32_t ids[MAX_OUT];
    int n;
    char text[1024];
    size_t tlen;
    _Atomic int done;
    enum le_status st;
    struct le_gen_result res;
    _Atomic int cancel, paused;
};

static int
on_tok(void *ud, int32_t id, const char *text, size_t len)
{
    struct run *r = ud;
    if (id >= 0 && r->n < MAX_OUT)
        r->ids[r->n++] = id;
    if (r->tlen + len < sizeof(r->text)) {
        memcpy(r->text + r->tlen, text, len);
        r->tlen += len;
        r->text[r->tlen] = 0;
    }
    return 0;
}

static void
on_done(void *ud, enum le_status st, const struct le_gen_result *res,
        const char *err)
{
    (void)err;
    struct run *r = ud;
    r->st = st;
    r->res = *res;
    atomic_store(&r->done, 1);
}

/* Waits (bounded: 120 s) until every run is done; 1 if they all are. */
static int
wait_all(struct run **rs, int n)
{
    for (int ms = 0; ms < 120000; ms += 2) {
        int all = 1;
        for (int i = 0; i < n; i++)
            all &= atomic_load(&rs[i]->done);
        if (all)
            return 1;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void
greedy(struct le_sampling *sp, int max_tokens)
{
    le_sampling_default(sp);
    sp->temperature = 0;
    sp->max_tokens = max_tokens;
    sp->ignore_eos = 1;
}

static struct le_sched *
sched(struct le_model *m, int parallel, int queue, int cache, int chunk)
{
    struct le_sched_params p;
    le_sched_params_default(&p);
    p.parallel = parallel;
    p.max_queue = queue;
    p.cache_seqs = cache;
    p.chunk = chunk;
    struct le_sched *s = NULL;
    char err[256];
    T_EQ_INT(le_sched_new(m, &p, &s, err, sizeof(err)), LE_OK);
    return s;
}

static enum le_status
submit(struct le_sched *s, const int32_t *p, size_t n,
       const struct le_sampling *sp, struct run *r)
{
    memset(r, 0, sizeof(*r));
    struct le_sched_req q = {p, n, sp, on_tok, on_done, r, &r->cancel,
                             &r->paused, NULL, NULL, 0};
    char err[256];
    return le_sched_submit(s, &q, err, sizeof(err));
}

/* Prompts whose first tokens differ (no shared prefix at all, so the
 * cache has nothing to lend between them). */
static void
prompt(int32_t *p, size_t n, int32_t n_vocab, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (int32_t)((x >> 8) % (uint32_t)(n_vocab - 3)) + 3;
    }
    p[0] = 3 + (int32_t)(seed % (uint32_t)(n_vocab - 3));
}

/* Lengths: a 3-token prompt (per-row kernels), chunked ones (chunk 16)
 * with short and long tails, one longer than several chunks. */
static const size_t lens[4] = {3, 21, 40, 70};

static void
check_alone_vs_batched(struct le_model *m, const char *what)
{
    int32_t V = le_model_n_vocab(m);
    int32_t pr[4][80];
    struct le_sampling sp;
    greedy(&sp, 24);
    static struct run alone[4], batch[4];
    for (int i = 0; i < 4; i++)
        prompt(pr[i], lens[i], V, (uint32_t)(i + 1));
    /* alone: one sequence at a time, a fresh scheduler each */
    for (int i = 0; i < 4; i++) {
        struct le_sched *s = sched(m, 1, 0, 0, 16);
        struct run *rp = &alone[i];
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rp), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        T_EQ_INT(alone[i].st, LE_OK);
        T_EQ_INT(alone[i].n, 24);
        le_sched_free(s);
    }
    /* batched: all four at once (they share steps: prefill chunks of some
     * beside the decode tokens of others) */
    struct le_sched *s = sched(m, 4, 0, 0, 16);
    struct run *rs[4];
    for (int i = 0; i < 4; i++) {
        rs[i] = &batch[i];
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rs[i]), LE_OK);
    }
    T_CHECK(wait_all(rs, 4));
    struct le_sched_stats st;
    le_sched_get_stats(s, &st);
    /* fewer steps than alone (4 x (prefill steps + 24)): they were
     * batched */
    T_CHECK(st.steps < 4 * 24);
    T_EQ_INT(st.generated_tokens, 4 * 24);
    T_EQ_INT(st.active, 0);
    le_sched_free(s);
    for (int i = 0; i < 4; i++) {
        T_EQ_INT(batch[i].st, LE_OK);
        T_EQ_INT(batch[i].n, alone[i].n);
        int same = memcmp(batch[i].ids, alone[i].ids,
                          (size_t)alone[i].n * sizeof(int32_t)) == 0;
        if (!same)
            fprintf(stderr, "%s: prompt %d differs batched\n", what, i);
        T_CHECK(same);
        T_EQ_INT(batch[i].res.completion_tokens, 24);
        T_EQ_INT(batch[i].res.finish, LE_FINISH_LENGTH);
    }
}

static void
test_alone_vs_batched(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (m) {
        check_alone_vs_batched(m, "stories260K");
        /* the plain session loop gives the same (f32: one kernel) */
        int32_t p[80];
        prompt(p, lens[3], le_model_n_vocab(m), 4);
        struct le_session *ss = NULL;
        T_EQ_INT(le_session_new(m, &ss, NULL, 0), LE_OK);
        struct le_sampling sp;
        greedy(&sp, 24);
        char out[1024];
        struct le_gen_result r;
        T_EQ_INT(le_fixture_generate(ss, p, lens[3], &sp, out, sizeof(out),
                                     &r),
                 LE_OK);
        struct le_sched *s = sched(m, 2, 0, 0, 16);
        static struct run one;
        struct run *rp = &one;
        T_EQ_INT(submit(s, p, lens[3], &sp, rp), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        T_EQ_STR(one.text, out);
        le_sched_free(s);
        le_session_free(ss);
        le_model_free(m);
    }
    const enum le_type types[] = {LE_TYPE_F32, LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    for (int k = 0; k < 3; k++) {
        struct le_model *r = le_fixture_random(300, types[k], 77 + k, 256);
        T_CHECK(r != NULL);
        if (!r)
            continue;
        char what[64];
        snprintf(what, sizeof(what), "random %s",
                 le_type_get(types[k])->name);
        check_alone_vs_batched(r, what);
        le_model_free(r);
    }
    /* experts: a step's rows of each expert gathered from every sequence
     * that chose it give each sequence its alone floats */
    struct le_model *x = random_llama_x(LE_TYPE_Q4_0, 91, 256, 8);
    T_CHECK(x != NULL);
    if (x) {
        check_alone_vs_batched(x, "random q4_0, 8 experts");
        le_model_free(x);
    }
    /* deepseek2: a step's heads of every sequence in one product */
    struct le_model *d = random_ds2(LE_TYPE_Q8_0, 95);
    T_CHECK(d != NULL);
    if (d) {
        check_alone_vs_batched(d, "random q8_0 deepseek2");
        le_model_free(d);
    }
    /* mistral3's attention temperature: each token's factor from its own
     * position, whichever sequence and step it comes in */
    struct le_model *t = random_mistral3(LE_TYPE_Q8_0, 97);
    T_CHECK(t != NULL);
    if (t) {
        check_alone_vs_batched(t, "random q8_0 mistral3");
        le_model_free(t);
    }
}

/* Prompts that join while another sequence generates (their tails then
 * take a few per-row rows per step, their whole pieces the AMX GEMM in a
 * step of their own kind): each output as alone.  The joiners' lengths:
 * 21 = one 16-token piece and a 5-token tail, 7 (a tail only), 40. */
static void
check_join_while_generating(struct le_model *m, const char *what, int chunk,
                            const size_t jl[3])
{
    int32_t V = le_model_n_vocab(m);
    int32_t pr[4][JOIN_MAX];
    struct le_sampling sp;
    greedy(&sp, 24);
    struct le_sampling spl;
    greedy(&spl, 120); /* the one generating while the others join */
    static struct run alone[4], batch[4];
    size_t len[4] = {5, jl[0], jl[1], jl[2]};
    for (int i = 0; i < 4; i++) {
        prompt(pr[i], len[i], V, (uint32_t)(i + 11));
        struct le_sched *s = sched(m, 1, 0, 0, chunk);
        struct run *rp = &alone[i];
        T_EQ_INT(submit(s, pr[i], len[i], i ? &sp : &spl, rp), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        T_EQ_INT(rp->st, LE_OK);
        le_sched_free(s);
    }
    struct le_sched *s = sched(m, 4, 0, 0, chunk);
    struct run *rs[4] = {&batch[0], &batch[1], &batch[2], &batch[3]};
    T_EQ_INT(submit(s, pr[0], len[0], &spl, rs[0]), LE_OK);
    /* bounded: the first sequence makes 120 tokens */
    struct le_sched_stats st = {0};
    for (int ms = 0; ms < 60000 && st.generated_tokens < 1 &&
                     !atomic_load(&batch[0].done);
         ms++) {
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
        le_sched_get_stats(s, &st);
    }
    for (int i = 1; i < 4; i++)
        T_EQ_INT(submit(s, pr[i], len[i], &sp, rs[i]), LE_OK);
    /* (on a loaded machine the first may have ended before they came: the
     * outputs must match all the same) */
    if (atomic_load(&batch[0].done))
        fprintf(stderr, "  (%s: the joiners came after the end)\n", what);
    T_CHECK(wait_all(rs, 4));
    le_sched_free(s);
    for (int i = 0; i < 4; i++) {
        T_EQ_INT(batch[i].st, LE_OK);
        T_EQ_INT(batch[i].n, alone[i].n);
        int same = memcmp(batch[i].ids, alone[i].ids,
                          (size_t)alone[i].n * sizeof(int32_t)) == 0;
        if (!same)
            fprintf(stderr, "%s: joiner %d differs from alone\n", what, i);
        T_CHECK(same);
    }
}

/* Requests sent together to an idle engine are prefilled in one step
 * (sched.c gather_burst): 4 prompts of 5 tokens, 8 tokens each, take 8
 * steps in all (the prompts' step gives every first token, then 7), not
 * the first alone and the others joining after it (the first is sent
 * 0.3 ms before the others).  Only checked when the 4 submissions took
 * under 0.8 ms, inside the 1 ms window (a loaded machine may hold this
 * thread up between them). */
static void
test_burst(void)
{
    struct le_model *m = wide_random(LE_TYPE_Q8_0, 57);
    T_CHECK(m != NULL);
    if (!m)
        return;
    int32_t V = le_model_n_vocab(m), pr[4][5];
    struct le_sampling sp;
    greedy(&sp, 8);
    static struct run rs[4];
    struct run *rp[4];
    int checked = 0;
    for (int attempt = 0; attempt < 5 && !checked; attempt++) {
        struct le_sched *s = sched(m, 4, 0, 0, 16);
        double t0 = le_now_ms();
        for (int i = 0; i < 4; i++) {
            prompt(pr[i], 5, V, (uint32_t)(i + 11));
            rp[i] = &rs[i];
            T_EQ_INT(submit(s, pr[i], 5, &sp, rp[i]), LE_OK);
            if (i == 0) { /* long enough for the thread to wake */
                struct timespec ts = {0, 300000};
                nanosleep(&ts, NULL);
            }
        }
        double took = le_now_ms() - t0;
        T_CHECK(wait_all(rp, 4));
        struct le_sched_stats st;
        le_sched_get_stats(s, &st);
        le_sched_free(s);
        for (int i = 0; i < 4; i++)
            T_EQ_INT(rs[i].n, 8);
        T_EQ_INT(st.generated_tokens, 32);
        if (took < 0.8) {
            T_EQ_INT(st.steps, 8);
            checked = 1;
        }
    }
    if (!checked)
        fprintf(stderr, "test_burst: submissions too slow here, the step "
                        "count was not checked\n");
    le_model_free(m);
}

static void
test_join_while_generating(void)
{
    static const size_t jl[3] = {21, 7, 40};
    const enum le_type types[] = {LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    for (int k = 0; k < 2; k++) {
        struct le_model *r = wide_random(types[k], 91 + k);
        T_CHECK(r != NULL);
        if (!r)
            continue;
        check_join_while_generating(r, "wide random", 16, jl);
        le_model_free(r);
    }
    /* deepseek2: joiners' pieces head by head, the steps all heads */
    struct le_model *d = random_ds2(LE_TYPE_Q4_0, 96);
    T_CHECK(d != NULL);
    if (d) {
        check_join_while_generating(d, "random q4_0 deepseek2", 16, jl);
        le_model_free(d);
    }
}

/* The same on a model wide enough (1024) that a 32-token piece's logits
 * differ between the AMX GEMM and the per-row kernels (checked first when
 * AMX is usable), so a scheduler that computed a joiner's piece one way
 * alone and the other batched would fail: the chunk (32) reaches the
 * Q4_0 crossover, and the joiners are 170 tokens (whole pieces past
 * SCHED_AMX_POS: AMX pieces, then a 10-token tail), 7 and 40 (per-row). */
static void
test_join_amx_model(void)
{
    static const size_t jl[3] = {170, 7, 40};
    struct le_model *m = random_llama(LE_TYPE_Q4_0, 93, 1024);
    T_CHECK(m != NULL);
    if (!m)
        return;
    if (le_amx_usable())
        T_CHECK(amx_differs(m));
    else
        fprintf(stderr, "  (no AMX here: %s; per-row only)\n",
                le_amx_status());
    check_join_while_generating(m, "1024-wide q4_0", 32, jl);
    le_model_free(m);
}

/* A shared 64-token prefix (a multiple of the chunk, so the cells are
 * made by the same kernels whoever makes them), then 8 own tokens. */
static void
check_prefix(struct le_model *m)
{
    int32_t V = le_model_n_vocab(m);
    int32_t a[72], b[72];
    prompt(a, 72, V, 11);
    memcpy(b, a, sizeof(a));
    prompt(b + 64, 8, V, 12);
    struct le_sampling sp;
    greedy(&sp, 16);
    static struct run ra, rb, rb_fresh;
    struct run *p;
    struct le_sched *s = sched(m, 2, 0, 2, 16);
    p = &ra;
    T_EQ_INT(submit(s, a, 72, &sp, p), LE_OK);
    T_CHECK(wait_all(&p, 1));
    T_EQ_INT(ra.res.cached_tokens, 0);
    p = &rb;
    T_EQ_INT(submit(s, b, 72, &sp, p), LE_OK);
    T_CHECK(wait_all(&p, 1));
    T_EQ_INT(rb.st, LE_OK);
    T_EQ_INT(rb.res.cached_tokens, 64);
    T_EQ_INT(rb.res.prompt_tokens, 72);
    struct le_sched_stats st;
    le_sched_get_stats(s, &st);
    T_EQ_INT(st.cached_tokens, 64);
    T_EQ_INT(st.prompt_tokens, 144);
    le_sched_free(s);
    /* the same request on an empty cache */
    s = sched(m, 2, 0, 2, 16);
    p = &rb_fresh;
    T_EQ_INT(submit(s, b, 72, &sp, p), LE_OK);
    T_CHECK(wait_all(&p, 1));
    T_EQ_INT(rb_fresh.res.cached_tokens, 0);
    T_EQ_INT(rb.n, rb_fresh.n);
    T_CHECK(memcmp(rb.ids, rb_fresh.ids, (size_t)rb.n * sizeof(int32_t)) ==
            0);
    le_sched_free(s);
}

static void
test_prefix_cache(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (m) {
        check_prefix(m);
        /* two at once sharing the prefix: the second copies the first's
         * cells (f32: exact whatever the chunking) */
        int32_t a[72], b[72];
        prompt(a, 72, le_model_n_vocab(m), 21);
        memcpy(b, a, sizeof(a));
        prompt(b + 64, 8, le_model_n_vocab(m), 22);
        struct le_sampling sp;
        greedy(&sp, 16);
        static struct run r1, r2, r3;
        struct run *rs[2] = {&r1, &r2};
        struct le_sched *s = sched(m, 2, 0, 0, 16);
        T_EQ_INT(submit(s, a, 72, &sp, &r3), LE_OK); /* warms the cache */
        struct run *p3 = &r3;
        T_CHECK(wait_all(&p3, 1));
        T_EQ_INT(submit(s, a, 72, &sp, &r1), LE_OK);
        T_EQ_INT(submit(s, b, 72, &sp, &r2), LE_OK);
        T_CHECK(wait_all(rs, 2));
        T_EQ_INT(r1.res.cached_tokens, 71); /* all but the last token */
        T_EQ_INT(r2.res.cached_tokens, 64);
        T_CHECK(memcmp(r1.ids, r3.ids, sizeof(r1.ids)) == 0);
        le_sched_free(s);
        /* both at once on an empty cache: the second waits for the
         * first's prefill and copies its 64 cells instead of computing
         * them again */
        static struct run r4, r5;
        struct run *rs2[2] = {&r4, &r5};
        s = sched(m, 2, 0, 0, 16);
        T_EQ_INT(submit(s, a, 72, &sp, &r4), LE_OK);
        T_EQ_INT(submit(s, b, 72, &sp, &r5), LE_OK);
        T_CHECK(wait_all(rs2, 2));
        T_EQ_INT(r4.res.cached_tokens, 0);
        T_EQ_INT(r5.res.cached_tokens, 64);
        T_CHECK(memcmp(r4.ids, r3.ids, sizeof(r4.ids)) == 0);
        T_CHECK(memcmp(r5.ids, r2.ids, sizeof(r5.ids)) == 0);
        le_sched_free(s);
        /* the very same short prompt twice at once (n > 1): the second
         * waits and takes all but the last cell */
        static struct run r6, r7;
        struct run *rs3[2] = {&r6, &r7};
        s = sched(m, 2, 0, 0, 16);
        T_EQ_INT(submit(s, a, 12, &sp, &r6), LE_OK);
        T_EQ_INT(submit(s, a, 12, &sp, &r7), LE_OK);
        T_CHECK(wait_all(rs3, 2));
        T_EQ_INT(r6.res.cached_tokens, 0);
        T_EQ_INT(r7.res.cached_tokens, 11);
        T_CHECK(memcmp(r6.ids, r7.ids, sizeof(r6.ids)) == 0);
        le_sched_free(s);
        le_model_free(m);
    }
    struct le_model *r = le_fixture_random(300, LE_TYPE_Q8_0, 5, 256);
    T_CHECK(r != NULL);
    if (r) {
        check_prefix(r);
        le_model_free(r);
    }
}

static void
test_busy_and_cancel(void)
{
    struct le_model *m = le_fixture_random(300, LE_TYPE_Q8_0, 9, 4096);
    T_CHECK(m != NULL);
    if (!m)
        return;
    int32_t p[8];
    prompt(p, 8, 300, 3);
    struct le_sampling sp;
    greedy(&sp, 4000);
    static struct run r[4];
    struct le_sched *s = sched(m, 1, 1, 0, 16);
    T_EQ_INT(submit(s, p, 8, &sp, &r[0]), LE_OK);
    T_EQ_INT(submit(s, p, 8, &sp, &r[1]), LE_OK);
    T_EQ_INT(submit(s, p, 8, &sp, &r[2]), LE_EBUSY); /* 1 + 1 taken */
    struct le_sched_stats st;
    le_sched_get_stats(s, &st);
    T_EQ_INT(st.active + st.queued, 2);
    /* a prompt that cannot fit is refused before queueing */
    struct le_sampling big;
    greedy(&big, 5000);
    T_EQ_INT(submit(s, p, 8, &big, &r[3]), LE_ECONTEXT);
    atomic_store(&r[1].cancel, 1); /* the queued one */
    atomic_store(&r[0].cancel, 1); /* the running one */
    le_sched_wake(s);
    struct run *rs[2] = {&r[0], &r[1]};
    T_CHECK(wait_all(rs, 2));
    T_EQ_INT(r[0].st, LE_ECANCELED);
    T_EQ_INT(r[1].st, LE_ECANCELED);
    T_CHECK(r[0].n < 4000);
    le_sched_get_stats(s, &st);
    T_EQ_INT(st.active + st.queued, 0);
    /* room again */
    sp.max_tokens = 4;
    struct run *p2 = &r[2];
    T_EQ_INT(submit(s, p, 8, &sp, p2), LE_OK);
    T_CHECK(wait_all(&p2, 1));
    T_EQ_INT(r[2].n, 4);
    /* shutdown with a request running: cancelled, on_done still once */
    sp.max_tokens = 4000;
    T_EQ_INT(submit(s, p, 8, &sp, &r[3]), LE_OK);
    le_sched_free(s);
    T_CHECK(atomic_load(&r[3].done));
    T_EQ_INT(r[3].st, LE_ECANCELED);
    le_model_free(m);
}

/* A paused sequence stays out of the batch (it generates nothing while the
 * other one runs to its end) and resumes to the output it has alone. */
static void
test_pause(void)
{
    struct le_model *m = le_fixture_random(300, LE_TYPE_Q4_0, 13, 256);
    T_CHECK(m != NULL);
    if (!m)
        return;
    int32_t a[12], b[12];
    prompt(a, 12, 300, 31);
    prompt(b, 12, 300, 32);
    struct le_sampling sp;
    greedy(&sp, 20);
    static struct run ra, rb, ralone;
    struct le_sched *s = sched(m, 2, 0, 0, 16);
    struct run *p = &ralone;
    T_EQ_INT(submit(s, a, 12, &sp, p), LE_OK);
    T_CHECK(wait_all(&p, 1));
    memset(&ra, 0, sizeof(ra));
    struct le_sched_req q = {a, 12, &sp, on_tok, on_done, &ra, &ra.cancel,
                             &ra.paused, NULL, NULL, 0};
    atomic_store(&ra.paused, 1);
    T_EQ_INT(le_sched_submit(s, &q, NULL, 0), LE_OK);
    p = &rb;
    T_EQ_INT(submit(s, b, 12, &sp, p), LE_OK);
    T_CHECK(wait_all(&p, 1));
    T_EQ_INT(ra.n, 0);
    T_CHECK(!atomic_load(&ra.done));
    atomic_store(&ra.paused, 0);
    le_sched_wake(s);
    p = &ra;
    T_CHECK(wait_all(&p, 1));
    T_EQ_INT(ra.n, 20);
    T_CHECK(memcmp(ra.ids, ralone.ids, sizeof(ra.ids)) == 0);
    le_sched_free(s);
    le_model_free(m);
}

/* Every sequence keeps its own grammar state. */
static void
test_grammar_per_sequence(void)
{
    struct le_model *m = le_fixture_random(300, LE_TYPE_Q8_0, 17, 256);
    T_CHECK(m != NULL);
    if (!m)
        return;
    static const char *g1 = "root ::= \"[\" [a-z]{1,6} \"]\"";
    static const char *g2 = "root ::= \"<\" [0-9]{2,4} \">\"";
    struct le_grammar *ga = NULL, *gb = NULL;
    char err[256];
    T_EQ_INT(le_grammar_parse(g1, strlen(g1), NULL, &ga, err, sizeof(err)),
             LE_OK);
    T_EQ_INT(le_grammar_parse(g2, strlen(g2), NULL, &gb, err, sizeof(err)),
             LE_OK);
    struct le_token_trie *trie = NULL;
    T_EQ_INT(le_token_trie_new(m, &trie), LE_OK);
    struct le_sampling sa, sb;
    le_sampling_default(&sa);
    sa.seed = 1;
    sa.max_tokens = 40;
    sa.grammar = ga;
    sa.trie = trie;
    sb = sa;
    sb.seed = 2;
    sb.grammar = gb;
    int32_t p[6];
    prompt(p, 6, 300, 41);
    static struct run r[6];
    struct run *rs[6];
    struct le_sched *s = sched(m, 6, 0, 0, 16);
    for (int i = 0; i < 6; i++) {
        rs[i] = &r[i];
        T_EQ_INT(submit(s, p, 6, i % 2 ? &sb : &sa, rs[i]), LE_OK);
    }
    T_CHECK(wait_all(rs, 6));
    for (int i = 0; i < 6; i++) {
        T_EQ_INT(r[i].st, LE_OK);
        T_EQ_INT(r[i].res.finish, LE_FINISH_STOP);
        const char *t = r[i].text;
        size_t n = strlen(t);
        int ok = n >= 3 && t[0] == (i % 2 ? '<' : '[') &&
                 t[n - 1] == (i % 2 ? '>' : ']');
        for (size_t k = 1; ok && k + 1 < n; k++)
            ok = i % 2 ? (t[k] >= '0' && t[k] <= '9')
                       : (t[k] >= 'a' && t[k] <= 'z');
        if (!ok)
            fprintf(stderr, "sequence %d: '%s'\n", i, t);
        T_CHECK(ok);
    }
    le_sched_free(s);
    le_token_trie_free(trie);
    le_grammar_free(ga);
    le_grammar_free(gb);
    le_model_free(m);
}

/* The batched forward itself: logits of a sequence's tokens are the same
 * bits alone and in a batch with another sequence's tokens (a decode token
 * in the per-row part, a 32-token prefill chunk in the AMX part: the
 * Q4_0 and Q8_0 crossover, le_amx_min_tok). */
#define FB_N 32
static void
check_forward_bits(struct le_model *m)
{
    int32_t V = le_model_n_vocab(m);
    int32_t a[FB_N], bp[6];
    prompt(a, FB_N, V, 51);
    prompt(bp, 6, V, 52);
    struct le_session *sa = NULL, *sb = NULL, *ka = NULL, *kb = NULL,
                      *ws = NULL;
    T_EQ_INT(le_session_new(m, &sa, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new(m, &sb, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &ka, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &kb, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, FB_N + 1, 2, 0, &ws, NULL, 0), LE_OK);
    if (!sa || !sb || !ka || !kb || !ws)
        goto out;
    float *la = malloc((size_t)V * sizeof(float));
    float *lb = malloc((size_t)V * sizeof(float));
    /* alone */
    T_EQ_INT(le_session_decode(sa, a, FB_N, NULL, 0), LE_OK);
    memcpy(la, le_session_logits(sa), (size_t)V * sizeof(float));
    T_EQ_INT(le_session_decode(sb, bp, 5, NULL, 0), LE_OK);
    T_EQ_INT(le_session_decode(sb, bp + 5, 1, NULL, 0), LE_OK);
    memcpy(lb, le_session_logits(sb), (size_t)V * sizeof(float));
    /* batched: kb gets its 5 tokens the same way first */
    struct le_fwd_batch b = {0};
    int32_t last = 4;
    b.n_tok = 5;
    b.ids = bp;
    b.one = kb;
    b.n_out = 1;
    b.out = &last;
    b.logits = ws->logits;
    T_EQ_INT(le_model_forward_batch(ws, &b, NULL, 0), LE_OK);
    int32_t ids[FB_N + 1], pos[FB_N + 1], out[2] = {0, FB_N};
    struct le_session *seq[FB_N + 1];
    ids[0] = bp[5];
    pos[0] = 5;
    seq[0] = kb;
    for (int t = 0; t < FB_N; t++) {
        ids[1 + t] = a[t];
        pos[1 + t] = t;
        seq[1 + t] = ka;
    }
    memset(&b, 0, sizeof(b));
    b.n_tok = FB_N + 1;
    b.ids = ids;
    b.seq = seq;
    b.pos = pos;
    b.amx_from = 1;
    b.n_out = 2;
    b.out = out;
    b.logits = ws->logits;
    T_EQ_INT(le_model_forward_batch(ws, &b, NULL, 0), LE_OK);
    T_CHECK(memcmp(ws->logits, lb, (size_t)V * sizeof(float)) == 0);
    T_CHECK(memcmp(ws->logits + V, la, (size_t)V * sizeof(float)) == 0);
    T_EQ_INT(le_session_n_past(ka), FB_N);
    T_EQ_INT(le_session_n_past(kb), 6);
    free(la);
    free(lb);
out:
    le_session_free(sa);
    le_session_free(sb);
    le_session_free(ka);
    le_session_free(kb);
    le_session_free(ws);
}

/* What lets the scheduler feed a prompt's tail a few tokens per step: on
 * the per-row kernels a sequence's 7 tokens give the same logits bits fed
 * in one forward alone as fed 2 + 2 + 3 over three forwards, each beside
 * another sequence's token. */
static void
check_split_bits(struct le_model *m)
{
    int32_t V = le_model_n_vocab(m);
    int32_t a[7], o[3];
    prompt(a, 7, V, 53);
    prompt(o, 3, V, 54);
    struct le_session *ka = NULL, *kb = NULL, *kc = NULL, *ws = NULL;
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &ka, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &kb, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, 0, 0, 1, &kc, NULL, 0), LE_OK);
    T_EQ_INT(le_session_new_sized(m, 16, 2, 0, &ws, NULL, 0), LE_OK);
    float *la = malloc((size_t)V * sizeof(float));
    if (!ka || !kb || !kc || !ws || !la)
        goto out;
    struct le_fwd_batch b = {0};
    int32_t last = 6;
    b.n_tok = 7;
    b.ids = a;
    b.one = ka;
    b.amx_from = 7; /* all on the per-row kernels */
    b.n_out = 1;
    b.out = &last;
    b.logits = ws->logits;
    T_EQ_INT(le_model_forward_batch(ws, &b, NULL, 0), LE_OK);
    memcpy(la, ws->logits, (size_t)V * sizeof(float));
    static const int cut[4] = {0, 2, 4, 7};
    for (int k = 0; k < 3; k++) {
        int32_t ids[4], pos[4], out[1];
        struct le_session *seq[4];
        ids[0] = o[k];
        pos[0] = k;
        seq[0] = kc;
        int nt = 1;
        for (int t = cut[k]; t < cut[k + 1]; t++, nt++) {
            ids[nt] = a[t];
            pos[nt] = t;
            seq[nt] = kb;
        }
        out[0] = nt - 1;
        memset(&b, 0, sizeof(b));
        b.n_tok = nt;
        b.ids = ids;
        b.seq = seq;
        b.pos = pos;
        b.amx_from = nt;
        b.n_out = 1;
        b.out = out;
        b.logits = ws->logits;
        T_EQ_INT(le_model_forward_batch(ws, &b, NULL, 0), LE_OK);
    }
    T_CHECK(memcmp(ws->logits, la, (size_t)V * sizeof(float)) == 0);
    T_EQ_INT(le_session_n_past(kb), 7);
out:
    free(la);
    le_session_free(ka);
    le_session_free(kb);
    le_session_free(kc);
    le_session_free(ws);
}

static void
test_forward_bits(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (m) {
        check_forward_bits(m);
        check_split_bits(m);
        le_model_free(m);
    }
    const enum le_type types[] = {LE_TYPE_F32, LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    for (int k = 0; k < 3; k++) {
        struct le_model *r = le_fixture_random(300, types[k], 61 + k, 256);
        T_CHECK(r != NULL);
        if (r) {
            check_forward_bits(r);
            check_split_bits(r);
            le_model_free(r);
        }
        r = wide_random(types[k], 71 + k);
        T_CHECK(r != NULL);
        if (r) {
            check_forward_bits(r);
            check_split_bits(r);
            check_alone_vs_batched(r, "wide random");
            le_model_free(r);
        }
    }
    /* mistral3: the temperature's factors by position in a batch of two
     * sequences (positions 5 and 0-31: four steps of 8) */
    for (int k = 0; k < 2; k++) {
        struct le_model *t = random_mistral3(types[k], 81 + k);
        T_CHECK(t != NULL);
        if (t) {
            check_forward_bits(t);
            check_split_bits(t);
            le_model_free(t);
        }
    }
    /* one where AMX and per-row differ (test_join_amx_model checks it) */
    m = random_llama(LE_TYPE_Q4_0, 95, 1024);
    T_CHECK(m != NULL);
    if (m) {
        check_forward_bits(m);
        le_model_free(m);
    }
}

/* A mixture-of-experts model's logits after a 20-token prompt and 6
 * single-token steps (the scheduler's generation steps), into out (7
 * rows of V); *grouped: its layers that took all experts at once */
static void
moe_logits(struct le_model *m, float *out, uint64_t *grouped)
{
    int32_t V = le_model_n_vocab(m), a[26];
    prompt(a, 26, V, 57);
    struct le_session *s = NULL;
    T_EQ_INT(le_session_new(m, &s, NULL, 0), LE_OK);
    *grouped = 0;
    if (!s)
        return;
    T_EQ_INT(le_session_decode(s, a, 20, NULL, 0), LE_OK);
    memcpy(out, le_session_logits(s), (size_t)V * sizeof(float));
    for (int t = 20; t < 26; t++) {
        T_EQ_INT(le_session_decode(s, a + t, 1, NULL, 0), LE_OK);
        memcpy(out + (size_t)(t - 19) * V, le_session_logits(s),
               (size_t)V * sizeof(float));
    }
    *grouped = s->moe_grouped;
    le_session_free(s);
}

/* A step's experts all at once (moe_group: one quantisation and two pool
 * jobs) give the same bits as one after another (LLMUX_MOE_EACH=1), on
 * Mixtral's layout and deepseek2's (a shared expert, a dense first
 * layer), and alone as batched (check_forward_bits, check_split_bits,
 * check_alone_vs_batched) */
static void
test_moe_grouped(void)
{
    const enum le_type types[] = {LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    for (int k = 0; k < 2; k++)
        for (int ds = 0; ds < 2; ds++) {
            struct le_model *m = ds ? random_ds2(types[k], 101 + k)
                                    : random_llama_x(types[k], 103 + k, 128,
                                                     8);
            T_CHECK(m != NULL);
            if (!m)
                continue;
            int32_t V = le_model_n_vocab(m);
            float *g = malloc((size_t)7 * V * sizeof(float)),
                  *e = malloc((size_t)7 * V * sizeof(float));
            uint64_t ng = 0, ne = 0;
            if (g && e) {
                unsetenv("LLMUX_MOE_EACH");
                moe_logits(m, g, &ng);
                setenv("LLMUX_MOE_EACH", "1", 1);
                moe_logits(m, e, &ne);
                unsetenv("LLMUX_MOE_EACH");
                T_CHECK(memcmp(g, e, (size_t)7 * V * sizeof(float)) == 0);
            }
            fprintf(stderr, "moe %s %s: %llu layers' experts at once, %llu "
                            "with LLMUX_MOE_EACH=1\n",
                    ds ? "deepseek2" : "mixtral", k ? "q4_0" : "q8_0",
                    (unsigned long long)ng, (unsigned long long)ne);
            /* every step's MoE layers (2 of mixtral's, 1 of deepseek2's) */
            T_EQ_INT(ng, ds ? 7 : 14);
            T_EQ_INT(ne, 0);
            check_forward_bits(m);
            check_split_bits(m);
            check_alone_vs_batched(m, ds ? "deepseek2 experts"
                                         : "mixtral experts");
            free(g);
            free(e);
            le_model_free(m);
        }
}

/* ---- prompt log-probabilities (on_prompt_logprob) ---------------- */

#define PLP_MAX 128

/* A run with its prompt's log-probabilities and its sampled tokens'. */
struct lprun {
    struct run r; /* first: the callbacks' ud */
    struct le_logprob plp[PLP_MAX];
    int n_plp, n_samp, late; /* late: a prompt one after a sampled one */
};

static void
on_plp(void *ud, const struct le_logprob *lp)
{
    struct lprun *q = ud;
    q->late += q->n_samp > 0;
    if (q->n_plp < PLP_MAX)
        q->plp[q->n_plp++] = *lp;
}

static void
on_slp(void *ud, const struct le_logprob *lp)
{
    (void)lp;
    ((struct lprun *)ud)->n_samp++;
}

static enum le_status
submit_lp(struct le_sched *s, const int32_t *p, size_t n,
          const struct le_sampling *sp, struct lprun *q)
{
    memset(q, 0, sizeof(*q));
    struct le_sched_req rq = {p, n, sp, on_tok, on_done, q, &q->r.cancel,
                              &q->r.paused, on_slp, on_plp, 0};
    char err[256];
    return le_sched_submit(s, &rq, err, sizeof(err));
}

/* The reference: a session fed one token at a time (its own forward
 * each), the log-softmax in double of each position's logits at the
 * next prompt token, and that position's argmax.  Returns the largest
 * difference from q's figures (entry i is prompt[i + 1]'s), 1e9 when
 * the ids, the count or the top ids disagree. */
static double
plp_vs_forward(struct le_model *m, const int32_t *p, size_t n,
               const struct lprun *q)
{
    int32_t V = le_model_n_vocab(m);
    struct le_session *ss = NULL;
    double worst = 0;
    if (le_session_new(m, &ss, NULL, 0) != LE_OK)
        return 1e9;
    if ((size_t)q->n_plp != n - 1)
        worst = 1e9;
    for (size_t i = 0; i + 1 < n && worst < 1e9; i++) {
        if (le_session_decode(ss, &p[i], 1, NULL, 0) != LE_OK) {
            worst = 1e9;
            break;
        }
        const float *l = le_session_logits(ss);
        double mx = l[0], sum = 0;
        int32_t am = 0;
        for (int32_t k = 1; k < V; k++)
            if (l[k] > mx) {
                mx = l[k];
                am = k;
            }
        for (int32_t k = 0; k < V; k++)
            sum += exp((double)l[k] - mx);
        double want = (double)l[p[i + 1]] - mx - log(sum);
        const struct le_logprob *e = &q->plp[i];
        if (e->id != p[i + 1] || e->n_top != 3 || e->top_id[0] != am)
            worst = 1e9;
        double d = fabs((double)e->logprob - want);
        worst = d > worst ? d : worst;
        /* an alternative's figure is its own log-softmax too */
        double wt = (double)l[e->top_id[1]] - mx - log(sum);
        d = fabs((double)e->top_logprob[1] - wt);
        worst = d > worst ? d : worst;
    }
    le_session_free(ss);
    return worst;
}

/*
 * on_prompt_logprob: every prompt position's figure equals the
 * log-softmax of a separate one-token-at-a-time forward over the same
 * prompt (to float precision: 1e-4, the kernels' rounding), in order,
 * before any sampled token's; the request reuses no cached cells (a warm
 * cache lends it nothing) but leaves its own for the next request; its
 * own output and the outputs of sequences batched with it are the same
 * as alone; a one-token prompt has no figures.  On stories260K (f32) and
 * random q8_0 / q4_0 models, prompts of several chunks (chunk 16).
 */
static void
check_prompt_logprobs(struct le_model *m, const char *what)
{
    int32_t V = le_model_n_vocab(m);
    int32_t pr[4][80];
    for (int i = 0; i < 4; i++)
        prompt(pr[i], lens[i], V, (uint32_t)(i + 11));
    struct le_sampling sp;
    greedy(&sp, 12);
    sp.top_logprobs = 3;
    static struct run alone[4];
    static struct lprun lp_alone, lp_batch, warm;
    struct run *rp;
    for (int i = 0; i < 4; i++) {
        struct le_sched *s = sched(m, 1, 0, 0, 16);
        rp = &alone[i];
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rp), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        le_sched_free(s);
    }
    /* alone, on a cache warmed with the same prompt */
    struct le_sched *s = sched(m, 2, 0, 2, 16);
    rp = &warm.r;
    T_EQ_INT(submit(s, pr[3], lens[3], &sp, rp), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    T_EQ_INT(warm.r.res.cached_tokens, 0);
    rp = &lp_alone.r;
    T_EQ_INT(submit_lp(s, pr[3], lens[3], &sp, &lp_alone), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    T_EQ_INT(lp_alone.r.st, LE_OK);
    T_EQ_INT(lp_alone.r.res.cached_tokens, 0);
    T_EQ_INT(lp_alone.n_plp, lens[3] - 1);
    T_EQ_INT(lp_alone.n_samp, 12);
    T_EQ_INT(lp_alone.late, 0);
    T_CHECK(memcmp(lp_alone.r.ids, alone[3].ids, sizeof(alone[3].ids)) == 0);
    double d = plp_vs_forward(m, pr[3], lens[3], &lp_alone);
    fprintf(stderr, "  %s: prompt logprobs within %.2g of a plain forward\n",
            what, d);
    T_CHECK(d <= 1e-4);
    /* its cells stay: the same prompt again reuses all but the last */
    static struct run again;
    rp = &again;
    T_EQ_INT(submit(s, pr[3], lens[3], &sp, rp), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    T_EQ_INT(again.res.cached_tokens, lens[3] - 1);
    T_CHECK(memcmp(again.ids, alone[3].ids, sizeof(again.ids)) == 0);
    le_sched_free(s);
    /* batched with three others: every output as alone, the figures as
     * alone */
    static struct run batch[3];
    struct run *rs[4] = {&batch[0], &batch[1], &batch[2], &lp_batch.r};
    s = sched(m, 4, 0, 0, 16);
    for (int i = 0; i < 3; i++)
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rs[i]), LE_OK);
    T_EQ_INT(submit_lp(s, pr[3], lens[3], &sp, &lp_batch), LE_OK);
    T_CHECK(wait_all(rs, 4));
    le_sched_free(s);
    for (int i = 0; i < 3; i++) {
        int same = memcmp(batch[i].ids, alone[i].ids,
                          sizeof(alone[i].ids)) == 0;
        if (!same)
            fprintf(stderr, "%s: prompt %d differs beside prompt "
                            "logprobs\n", what, i);
        T_CHECK(same);
    }
    T_CHECK(memcmp(lp_batch.r.ids, alone[3].ids, sizeof(alone[3].ids)) == 0);
    T_EQ_INT(lp_batch.n_plp, lp_alone.n_plp);
    double bd = 0;
    for (int i = 0; i < lp_batch.n_plp && i < lp_alone.n_plp; i++) {
        T_EQ_INT(lp_batch.plp[i].id, lp_alone.plp[i].id);
        double x = fabs((double)lp_batch.plp[i].logprob -
                        (double)lp_alone.plp[i].logprob);
        bd = x > bd ? x : bd;
    }
    T_CHECK(bd <= 1e-5);
    /* one token: nothing to report */
    s = sched(m, 1, 0, 0, 16);
    rp = &lp_alone.r;
    T_EQ_INT(submit_lp(s, pr[0], 1, &sp, &lp_alone), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    T_EQ_INT(lp_alone.r.st, LE_OK);
    T_EQ_INT(lp_alone.n_plp, 0);
    T_EQ_INT(lp_alone.n_samp, 12);
    le_sched_free(s);
}

/* submit_lp with prompt_only set (a completion's max_tokens 0). */
static enum le_status
submit_score(struct le_sched *s, const int32_t *p, size_t n,
             const struct le_sampling *sp, struct lprun *q, int with_lp)
{
    memset(q, 0, sizeof(*q));
    struct le_sched_req rq = {p, n, sp, on_tok, on_done, q, &q->r.cancel,
                              &q->r.paused, on_slp,
                              with_lp ? on_plp : NULL, 1};
    char err[256];
    return le_sched_submit(s, &rq, err, sizeof(err));
}

/*
 * prompt_only (max_tokens 0): the request ends after its prefill with
 * LE_OK, finish LENGTH, completion_tokens 0, no token callback, no
 * sampled log-probability and no generated token in the stats; its
 * prompt figures are bit for bit those of the same request with
 * max_tokens 1; beside generating sequences it changes none of their
 * outputs; without on_prompt_logprob it ends the same way; a prompt
 * filling the whole context is taken (nothing follows it) while the
 * same prompt wanting one token is LE_ECONTEXT.
 */
static void
check_prompt_only(struct le_model *m, const char *what)
{
    int32_t V = le_model_n_vocab(m);
    int32_t pr[4][80];
    for (int i = 0; i < 4; i++)
        prompt(pr[i], lens[i], V, (uint32_t)(i + 21));
    struct le_sampling sp, one;
    greedy(&sp, 12);
    sp.top_logprobs = 3;
    one = sp;
    one.max_tokens = 1;
    static struct lprun ref, sc;
    struct run *rp = &ref.r;
    struct le_sched *s = sched(m, 1, 0, 0, 16);
    T_EQ_INT(submit_lp(s, pr[3], lens[3], &one, &ref), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    le_sched_free(s);
    T_EQ_INT(ref.n_samp, 1);
    s = sched(m, 1, 0, 0, 16);
    rp = &sc.r;
    T_EQ_INT(submit_score(s, pr[3], lens[3], &sp, &sc, 1), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    struct le_sched_stats stt;
    le_sched_get_stats(s, &stt);
    le_sched_free(s);
    T_EQ_INT(sc.r.st, LE_OK);
    T_EQ_INT(sc.r.res.finish, LE_FINISH_LENGTH);
    T_EQ_INT(sc.r.res.completion_tokens, 0);
    T_EQ_INT(sc.r.res.prompt_tokens, lens[3]);
    T_EQ_INT(sc.r.n, 0);
    T_EQ_INT(sc.r.tlen, 0);
    T_EQ_INT(sc.n_samp, 0);
    T_EQ_INT((int)stt.generated_tokens, 0);
    T_EQ_INT(sc.n_plp, lens[3] - 1);
    T_EQ_INT(sc.n_plp, ref.n_plp);
    int same = 1;
    for (int i = 0; i < sc.n_plp && i < ref.n_plp; i++) {
        same &= sc.plp[i].id == ref.plp[i].id &&
                sc.plp[i].logprob == ref.plp[i].logprob &&
                sc.plp[i].n_top == ref.plp[i].n_top;
        for (int k = 0; k < sc.plp[i].n_top && k < LE_TOP_LOGPROBS_MAX; k++)
            same &= sc.plp[i].top_id[k] == ref.plp[i].top_id[k] &&
                    sc.plp[i].top_logprob[k] == ref.plp[i].top_logprob[k];
    }
    if (!same)
        fprintf(stderr, "%s: max_tokens 0's prompt figures differ from "
                        "max_tokens 1's\n", what);
    T_CHECK(same);

    /* beside three generating sequences: theirs as alone, its own the
     * same figures */
    static struct run alone[3], batch[3];
    for (int i = 0; i < 3; i++) {
        s = sched(m, 1, 0, 0, 16);
        rp = &alone[i];
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rp), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        le_sched_free(s);
    }
    struct run *rs[4] = {&batch[0], &batch[1], &batch[2], &sc.r};
    s = sched(m, 4, 0, 0, 16);
    for (int i = 0; i < 3; i++)
        T_EQ_INT(submit(s, pr[i], lens[i], &sp, rs[i]), LE_OK);
    T_EQ_INT(submit_score(s, pr[3], lens[3], &sp, &sc, 1), LE_OK);
    T_CHECK(wait_all(rs, 4));
    le_sched_free(s);
    for (int i = 0; i < 3; i++)
        T_CHECK(memcmp(batch[i].ids, alone[i].ids, sizeof(alone[i].ids)) ==
                0);
    T_EQ_INT(sc.r.res.completion_tokens, 0);
    T_EQ_INT(sc.n_plp, ref.n_plp);
    for (int i = 0; i < sc.n_plp && i < ref.n_plp; i++)
        T_NEAR(sc.plp[i].logprob, ref.plp[i].logprob, 1e-5);

    /* no figures wanted: it ends the same way */
    s = sched(m, 1, 0, 0, 16);
    rp = &sc.r;
    T_EQ_INT(submit_score(s, pr[2], lens[2], &sp, &sc, 0), LE_OK);
    T_CHECK(wait_all(&rp, 1));
    T_EQ_INT(sc.r.st, LE_OK);
    T_EQ_INT(sc.r.res.finish, LE_FINISH_LENGTH);
    T_EQ_INT(sc.r.res.completion_tokens, 0);
    T_EQ_INT(sc.r.n, 0);

    /* the whole context: taken when nothing follows, one token more is
     * LE_ECONTEXT */
    size_t nc = (size_t)le_model_n_ctx(m);
    int32_t *full = malloc((nc + 1) * sizeof(int32_t));
    T_CHECK(full != NULL);
    if (full) {
        prompt(full, nc + 1, V, 77);
        static struct run r2;
        char err[256];
        struct le_sched_req rq = {full, nc, &sp, on_tok, on_done, &r2,
                                  NULL, NULL, NULL, NULL, 0};
        T_EQ_INT(le_sched_submit(s, &rq, err, sizeof(err)), LE_ECONTEXT);
        T_EQ_INT(submit_score(s, full, nc + 1, &sp, &sc, 1), LE_ECONTEXT);
        T_EQ_INT(submit_score(s, full, nc, &sp, &sc, 1), LE_OK);
        T_CHECK(wait_all(&rp, 1));
        T_EQ_INT(sc.r.st, LE_OK);
        T_EQ_INT(sc.r.res.finish, LE_FINISH_LENGTH);
        T_EQ_INT(sc.r.res.prompt_tokens, (long)nc);
        T_EQ_INT(sc.r.n, 0);
        free(full);
    }
    le_sched_free(s);
}

static void
test_prompt_only(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (m) {
        check_prompt_only(m, "stories260K");
        le_model_free(m);
    }
    struct le_model *r = le_fixture_random(300, LE_TYPE_Q4_0, 41, 256);
    T_CHECK(r != NULL);
    if (r) {
        check_prompt_only(r, "q4_0");
        le_model_free(r);
    }
}

static void
test_prompt_logprobs(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (m) {
        check_prompt_logprobs(m, "stories260K");
        le_model_free(m);
    }
    const enum le_type types[] = {LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    for (int k = 0; k < 2; k++) {
        struct le_model *r = le_fixture_random(300, types[k], 31 + k, 256);
        T_CHECK(r != NULL);
        if (!r)
            continue;
        check_prompt_logprobs(r, le_type_get(types[k])->name);
        le_model_free(r);
    }
}

int
main(void)
{
    T_RUN(test_forward_bits);
    T_RUN(test_moe_grouped);
    T_RUN(test_alone_vs_batched);
    T_RUN(test_burst);
    T_RUN(test_join_while_generating);
    T_RUN(test_join_amx_model);
    T_RUN(test_prefix_cache);
    T_RUN(test_busy_and_cancel);
    T_RUN(test_pause);
    T_RUN(test_grammar_per_sequence);
    T_RUN(test_prompt_logprobs);
    T_RUN(test_prompt_only);
    return T_END();
}
