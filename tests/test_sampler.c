/*
 * test_sampler: each step of the sampler chain on hand-made logits, the
 * PRNG's determinism, the full sampler (greedy, seeds, penalties) and the
 * stop-string hold-back scanner.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../local_engine/le_int.h"
#include "harness.h"

/* logits 0..n-1 given; candidates in id order, unsorted */
static struct le_cands
mk(struct le_cand *buf, const float *logits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        buf[i].id = (int32_t)i;
        buf[i].logit = logits[i];
        buf[i].p = 0;
    }
    struct le_cands c = {buf, n, 0};
    return c;
}

static int
has_id(const struct le_cands *c, int32_t id)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->data[i].id == id)
            return 1;
    return 0;
}

static void
test_argmax_ties(void)
{
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
    T_EQ_INT(le_samp_argmax(l, 6), 1); /* ties go to the lowest id */
    float l2[3] = {-3, -2, -2.5f};
    T_EQ_INT(le_samp_argmax(l2, 3), 1);
}

/* The plain scan le_samp_argmax must agree with: the first id whose logit
 * beats every one before it, from id 0. */
static int32_t
argmax_scan(const float *l, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

static void
test_argmax_scan(void)
{
    static float l[32011];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int round = 0; round < 400; round++) {
        int32_t n = round < 200 ? 1 + round % 41 : 32000 + round % 12;
        for (int32_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            /* few distinct values, so ties are common */
            l[i] = (float)((int)(x >> 59) - 16) * 0.25f;
        }
        if (round % 5 == 1) /* a NaN somewhere, sometimes first */
            l[(round / 5) % n] = NAN;
        if (round % 7 == 2)
            l[n - 1] = 100.0f; /* the maximum in the scalar tail */
        if (round % 11 == 3)
            l[(round * 31) % n] = -INFINITY;
        bad += le_samp_argmax(l, n) != argmax_scan(l, n);
    }
    T_EQ_INT(bad, 0);
}

static void
test_top_k(void)
{
    float l[8] = {0.1f, 3.0f, -2.0f, 2.5f, 7.0f, 0.0f, 2.5f, 1.0f};
    struct le_cand buf[8];
    struct le_cands c = mk(buf, l, 8);
    le_samp_top_k(&c, 3);
    T_EQ_INT(c.n, 3);
    T_CHECK(c.sorted);
    T_EQ_INT(c.data[0].id, 4);
    T_EQ_INT(c.data[1].id, 1);
    T_EQ_INT(c.data[2].id, 3); /* 3 and 6 tie at 2.5: lower id kept */
    T_CHECK(!has_id(&c, 6));
    /* k >= n or k <= 0 keeps all */
    c = mk(buf, l, 8);
    le_samp_top_k(&c, 0);
    T_EQ_INT(c.n, 8);
    le_samp_top_k(&c, 100);
    T_EQ_INT(c.n, 8);
    /* k = 1 on sorted input */
    c = mk(buf, l, 8);
    le_samp_sort(&c);
    le_samp_top_k(&c, 1);
    T_EQ_INT(c.n, 1);
    T_EQ_INT(c.data[0].id, 4);
}

static void
test_softmax(void)
{
    float l[3] = {0.0f, (float)log(2.0), (float)log(5.0)}; /* 1 : 2 : 5 */
    struct le_cand buf[3];
    struct le_cands c = mk(buf, l, 3);
    le_samp_softmax(&c);
    T_EQ_INT(c.data[0].id, 2);
    T_NEAR(c.data[0].p, 5.0 / 8, 1e-6);
    T_NEAR(c.data[1].p, 2.0 / 8, 1e-6);
    T_NEAR(c.data[2].p, 1.0 / 8, 1e-6);
}

static void
test_top_p(void)
{
    /* probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 */
    float l[5] = {(float)log(0.0625), (float)log(0.5), (float)log(0.125),
                  (float)log(0.25), (float)log(0.0625)};
    struct le_cand buf[5];
    struct le_cands c = mk(buf, l, 5);
    le_samp_top_p(&c, 0.7f, 1); /* 0.5 < 0.7 <= 0.75: two kept */
    T_EQ_INT(c.n, 2);
    T_EQ_INT(c.data[0].id, 1);
    T_EQ_INT(c.data[1].id, 3);
    c = mk(buf, l, 5);
    le_samp_top_p(&c, 0.8f, 1); /* 0.75 < 0.8 <= 0.875: three */
    T_EQ_INT(c.n, 3);
    c = mk(buf, l, 5);
    le_samp_top_p(&c, 0.1f, 1); /* the top token alone */
    T_EQ_INT(c.n, 1);
    c = mk(buf, l, 5);
    le_samp_top_p(&c, 0.1f, 3); /* min_keep wins */
    T_EQ_INT(c.n, 3);
    c = mk(buf, l, 5);
    le_samp_top_p(&c, 1.0f, 1); /* off */
    T_EQ_INT(c.n, 5);
}

static void
test_min_p(void)
{
    /* p: 0.5, 0.25, 0.125, 0.0625, 0.0625; min_p 0.2 -> keep p >= 0.1 */
    float l[5] = {(float)log(0.0625), (float)log(0.5), (float)log(0.125),
                  (float)log(0.25), (float)log(0.0625)};
    struct le_cand buf[5];
    struct le_cands c = mk(buf, l, 5);
    le_samp_min_p(&c, 0.2f, 1);
    T_EQ_INT(c.n, 3);
    T_CHECK(has_id(&c, 1) && has_id(&c, 3) && has_id(&c, 2));
    c = mk(buf, l, 5);
    le_samp_min_p(&c, 0.9f, 1);
    T_EQ_INT(c.n, 1);
    T_EQ_INT(c.data[0].id, 1);
    c = mk(buf, l, 5);
    le_samp_min_p(&c, 0.0f, 1);
    T_EQ_INT(c.n, 5);
}

static void
test_temperature(void)
{
    float l[2] = {2.0f, -4.0f};
    struct le_cand buf[2];
    struct le_cands c = mk(buf, l, 2);
    le_samp_temp(&c, 2.0f);
    T_NEAR(c.data[0].logit, 1.0, 1e-7);
    T_NEAR(c.data[1].logit, -2.0, 1e-7);
}

static void
test_penalties(void)
{
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
    int32_t last[5] = {0, 1, 0, 0, 3};
    struct le_cand buf[5];
    struct le_cands c = mk(buf, l, 5);
    le_samp_penalties(&c, last, 5, 2.0f, 0.0f, 0.0f);
    /* repeat: positive divided, negative multiplied, unseen unchanged */
    T_NEAR(c.data[0].logit, 1.0, 1e-7);
    T_NEAR(c.data[1].logit, -4.0, 1e-7);
    T_NEAR(c.data[2].logit, 1.0, 1e-7);
    T_NEAR(c.data[3].logit, 0.25, 1e-7);
    T_NEAR(c.data[4].logit, 3.0, 1e-7);
    c = mk(buf, l, 5);
    le_samp_penalties(&c, last, 5, 1.0f, 0.5f, 0.25f);
    /* frequency: count * f; presence: p once */
    T_NEAR(c.data[0].logit, 2.0 - 3 * 0.5 - 0.25, 1e-6);
    T_NEAR(c.data[1].logit, -2.0 - 0.5 - 0.25, 1e-6);
    T_NEAR(c.data[3].logit, 0.5 - 0.5 - 0.25, 1e-6);
    T_NEAR(c.data[2].logit, 1.0, 1e-7);
    T_NEAR(c.data[4].logit, 3.0, 1e-7);
    /* candidates not in id order (e.g. after top-k) are found by id */
    c = mk(buf, l, 5);
    le_samp_sort(&c); /* 4, 0, 2, 3, 1 */
    le_samp_penalties(&c, last, 5, 2.0f, 0.0f, 0.0f);
    for (size_t i = 0; i < 5; i++) {
        float want = c.data[i].id == 0   ? 1.0f
                     : c.data[i].id == 1 ? -4.0f
                     : c.data[i].id == 3 ? 0.25f
                                         : l[c.data[i].id];
        T_NEAR(c.data[i].logit, want, 1e-7);
    }
    T_CHECK(!c.sorted);
}

static int
cand_id_cmp(const void *a, const void *b)
{
    const struct le_cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The shortcuts for large unsorted lists (top-p on the best 256 first,
 * min-p as a linear filter) keep exactly the set the sorted rule keeps. */
static void
test_large_lists(void)
{
    enum { N = 5000 };
    static float l[N];
    static struct le_cand a[N], b[N];
    struct le_rng r;
    le_rng_seed(&r, 5);
    for (int i = 0; i < N; i++)
        l[i] = (float)(le_rng_uniform(&r) * 60.0); /* top 256 hold ~95% */
    float ps[3] = {0.5f, 0.9f, 0.999f};
    for (int t = 0; t < 3; t++) {
        struct le_cands ca = mk(a, l, N), cb = mk(b, l, N);
        le_samp_sort(&cb); /* sorted: the reference path */
        le_samp_top_p(&ca, ps[t], 1);
        le_samp_top_p(&cb, ps[t], 1);
        T_EQ_INT(ca.n, cb.n);
        qsort(ca.data, ca.n, sizeof(*ca.data), cand_id_cmp);
        qsort(cb.data, cb.n, sizeof(*cb.data), cand_id_cmp);
        int same = ca.n == cb.n;
        for (size_t i = 0; same && i < ca.n; i++)
            same = ca.data[i].id == cb.data[i].id;
        T_CHECK(same);
    }
    float mps[2] = {0.05f, 0.5f};
    for (int t = 0; t < 2; t++) {
        struct le_cands ca = mk(a, l, N), cb = mk(b, l, N);
        le_samp_sort(&cb);
        le_samp_min_p(&ca, mps[t], 1);
        le_samp_min_p(&cb, mps[t], 1);
        T_EQ_INT(ca.n, cb.n);
        qsort(ca.data, ca.n, sizeof(*ca.data), cand_id_cmp);
        qsort(cb.data, cb.n, sizeof(*cb.data), cand_id_cmp);
        int same = ca.n == cb.n;
        for (size_t i = 0; same && i < ca.n; i++)
            same = ca.data[i].id == cb.data[i].id;
        T_CHECK(same);
    }
}

static void
test_rng(void)
{
    struct le_rng a, b, c;
    le_rng_seed(&a, 42);
    le_rng_seed(&b, 42);
    le_rng_seed(&c, 43);
    int same = 1, diff = 0, in_range = 1;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = le_rng_next(&a), y = le_rng_next(&b),
                 z = le_rng_next(&c);
        same &= x == y;
        diff += x != z;
    }
    for (int i = 0; i < 1000; i++) {
        double u = le_rng_uniform(&a);
        in_range &= u >= 0 && u < 1;
    }
    T_CHECK(same);
    T_CHECK(diff > 990);
    T_CHECK(in_range);
}

/* logits shaped so that several tokens are likely */
static void
fill_logits(float *l, int n)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)((i * 37) % 11) * 0.3f;
}

static void
draw(const struct le_sampling *sp, float *l, int n, int32_t *out, int k)
{
    struct le_sampler *s = NULL;
    T_EQ_INT(le_sampler_new(sp, n, &s), LE_OK);
    if (!s)
        return;
    for (int i = 0; i < k; i++) {
        out[i] = le_sampler_sample(s, l);
        le_sampler_accept(s, out[i]);
    }
    le_sampler_free(s);
}

static void
test_sampler_seed(void)
{
    enum { N = 100, K = 64 };
    float l[N];
    fill_logits(l, N);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 1234;
    int32_t a[K], b[K], c[K];
    draw(&sp, l, N, a, K);
    draw(&sp, l, N, b, K);
    sp.seed = 999;
    draw(&sp, l, N, c, K);
    T_CHECK(memcmp(a, b, sizeof(a)) == 0);
    T_CHECK(memcmp(a, c, sizeof(a)) != 0);
    /* several distinct tokens drawn, all among the top logit group */
    int distinct = 0;
    for (int i = 0; i < K; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= a[j] == a[i];
        distinct += !dup;
    }
    T_CHECK(distinct > 3);

    /* top_k 1 is greedy whatever the temperature */
    sp.top_k = 1;
    draw(&sp, l, N, a, 8);
    int all_top = 1;
    int32_t am = le_samp_argmax(l, N);
    for (int i = 0; i < 8; i++)
        all_top &= a[i] == am;
    T_CHECK(all_top);

    /* temperature 0: greedy */
    sp.top_k = 0;
    sp.temperature = 0;
    draw(&sp, l, N, a, 4);
    T_EQ_INT(a[0], am);
    T_EQ_INT(a[3], am);
}

static void
test_sampler_repeat_greedy(void)
{
    /* with a strong repeat penalty greedy moves off a token once seen */
    float l[4] = {1.0f, 0.9f, 0.8f, -1.0f};
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.repeat_penalty = 2.0f;
    sp.penalty_last_n = 2;
    int32_t out[4];
    draw(&sp, l, 4, out, 4);
    T_EQ_INT(out[0], 0);
    T_EQ_INT(out[1], 1);
    T_EQ_INT(out[2], 2);
    T_EQ_INT(out[3], 0); /* token 0 fell out of the 2-token window */
}

/* logit_bias: added before the chain, greedy too; -100 bans a token
 * (sampled or greedy), +100 forces one, the grammar's mask still wins;
 * the caller's logits untouched; a bias of 0 and no bias give the same
 * draws (the plain path is unchanged); bad ids and non-finite biases are
 * refused. */
static void
test_sampler_bias(void)
{
    enum { N = 100, K = 200 };
    float l[N], keep[N];
    fill_logits(l, N);
    memcpy(keep, l, sizeof(l));
    int32_t am = le_samp_argmax(l, N);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    int32_t one_id = 7;
    float one_b = 5.0f;
    sp.bias_id = &one_id;
    sp.bias = &one_b;
    sp.n_bias = 1;
    int32_t out[K];
    T_CHECK(am != 7 && l[7] + 5.0f > l[am]);
    draw(&sp, l, N, out, 3);
    T_EQ_INT(out[0], 7); /* the bias changed the greedy pick */
    T_EQ_INT(out[2], 7);
    T_CHECK(memcmp(l, keep, sizeof(l)) == 0);
    /* -100 on the argmax: greedy takes the best of the others */
    one_id = am;
    one_b = -100.0f;
    float l2[N];
    memcpy(l2, l, sizeof(l));
    l2[am] = -1e30f;
    draw(&sp, l, N, out, 2);
    T_EQ_INT(out[0], le_samp_argmax(l2, N));
    T_CHECK(out[0] != am);
    /* sampled: the banned token never comes, a bias of 0 draws exactly as
     * no bias does */
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 77;
    draw(&sp, l, N, out, K);
    int banned = 0;
    for (int i = 0; i < K; i++)
        banned += out[i] == am;
    T_EQ_INT(banned, 0);
    int32_t plain[K], zero[K];
    one_b = 0.0f;
    draw(&sp, l, N, zero, K);
    sp.n_bias = 0;
    draw(&sp, l, N, plain, K);
    T_CHECK(memcmp(plain, zero, sizeof(plain)) == 0);
    int hits = 0; /* and the plain draws do pick the token banned above */
    for (int i = 0; i < K; i++)
        hits += plain[i] == am;
    T_CHECK(hits > 0);
    /* +100 forces a low token whatever the temperature */
    one_id = 3;
    one_b = 100.0f;
    sp.n_bias = 1;
    draw(&sp, l, N, out, 32);
    int forced = 0;
    for (int i = 0; i < 32; i++)
        forced += out[i] == 3;
    T_EQ_INT(forced, 32);
    /* the mask applies after the bias: a forced token it forbids loses */
    uint64_t mask[(N + 63) / 64] = {0};
    mask[0] = (1ull << 10) | (1ull << 20);
    struct le_sampler *s = NULL;
    sp.temperature = 0;
    T_EQ_INT(le_sampler_new(&sp, N, &s), LE_OK);
    if (s) {
        int32_t id = le_sampler_sample_masked(s, l, mask);
        T_CHECK(id == 10 || id == 20);
        T_EQ_INT(id, l[10] >= l[20] ? 10 : 20);
        le_sampler_free(s);
    }
    /* refused: an id outside the vocabulary, a negative one, NaN, inf */
    int32_t bad_ids[2] = {N, -1};
    float bad_b[2] = {NAN, INFINITY};
    s = NULL;
    for (int i = 0; i < 2; i++) {
        sp.bias_id = &bad_ids[i];
        sp.bias = &one_b;
        T_EQ_INT(le_sampler_new(&sp, N, &s), LE_EINVAL);
        T_CHECK(s == NULL);
        sp.bias_id = &one_id;
        sp.bias = &bad_b[i];
        T_EQ_INT(le_sampler_new(&sp, N, &s), LE_EINVAL);
        T_CHECK(s == NULL);
    }
}

static void
test_stop_scan(void)
{
    const char *stops[] = {"END", "\n\n"};
    int matched;
    size_t safe;
    safe = le_stop_scan("hello", 5, stops, 2, &matched);
    T_EQ_INT(matched, 0);
    T_EQ_INT(safe, 5);
    safe = le_stop_scan("hello E", 7, stops, 2, &matched);
    T_EQ_INT(matched, 0);
    T_EQ_INT(safe, 6); /* "E" may begin END */
    safe = le_stop_scan("hello EN", 8, stops, 2, &matched);
    T_EQ_INT(safe, 6);
    safe = le_stop_scan("hello ENX", 9, stops, 2, &matched);
    T_EQ_INT(matched, 0);
    T_EQ_INT(safe, 9);
    safe = le_stop_scan("hi END more", 11, stops, 2, &matched);
    T_EQ_INT(matched, 1);
    T_EQ_INT(safe, 3); /* text before the stop string only */
    safe = le_stop_scan("a\n\nb END", 8, stops, 2, &matched);
    T_EQ_INT(matched, 1);
    T_EQ_INT(safe, 1); /* the earliest stop wins */
    safe = le_stop_scan("line\n", 5, stops, 2, &matched);
    T_EQ_INT(safe, 4);
    /* an incomplete UTF-8 character is held back, a complete one not */
    safe = le_stop_scan("caf\xc3", 4, NULL, 0, &matched);
    T_EQ_INT(safe, 3);
    safe = le_stop_scan("caf\xc3\xa9", 5, NULL, 0, &matched);
    T_EQ_INT(safe, 5);
    safe = le_stop_scan("x\xe2\x96", 3, NULL, 0, &matched);
    T_EQ_INT(safe, 1);
}


/* le_logprobs against a log-softmax in long double, over a vocabulary
 * longer than its chunk; the top list sorted, ties to the lower id; a
 * NaN never listed; the bounds of top clamped. */
static void
test_logprobs(void)
{
    enum { N = 2500 };
    float *l = malloc(N * sizeof(float));
    T_CHECK(l != NULL);
    if (!l)
        return;
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((int)(x >> 40 & 0xffff) - 32768) / 2048.0f;
    }
    l[7] = 30.0f;   /* the top one */
    l[900] = 29.0f; /* two equal seconds: the lower id first */
    l[33] = 29.0f;
    l[1500] = 0.0f / 0.0f; /* a NaN: never listed, counts for nothing */
    long double mx = 30.0L, sum = 0;
    for (int i = 0; i < N; i++)
        if (l[i] == l[i])
            sum += expl((long double)l[i] - mx);
    long double lse = mx + logl(sum);
    struct le_logprob lp;
    le_logprobs(l, N, 900, 4, &lp);
    T_EQ_INT(lp.id, 900);
    T_CHECK(fabsl((long double)lp.logprob - (29.0L - lse)) < 1e-5L);
    T_EQ_INT(lp.n_top, 4);
    T_EQ_INT(lp.top_id[0], 7);
    T_EQ_INT(lp.top_id[1], 33);
    T_EQ_INT(lp.top_id[2], 900);
    T_CHECK(lp.top_logprob[1] == lp.top_logprob[2]);
    T_CHECK(lp.top_logprob[2] >= lp.top_logprob[3]);
    T_CHECK(fabsl((long double)lp.top_logprob[0] - (30.0L - lse)) < 1e-5L);
    for (int k = 3; k < 4; k++) {
        int id = lp.top_id[k];
        T_CHECK(id != 1500 && id >= 0 && id < N);
        T_CHECK(fabsl((long double)lp.top_logprob[k] - ((long double)l[id] - lse)) < 1e-5L);
        for (int i = 0; i < N; i++) /* nothing else above the fourth */
            if (i != 7 && i != 33 && i != 900 && i != id && l[i] == l[i])
                T_CHECK(l[i] <= l[id]);
    }
    le_logprobs(l, N, 5, 99, &lp); /* clamped to LE_TOP_LOGPROBS_MAX */
    T_EQ_INT(lp.n_top, LE_TOP_LOGPROBS_MAX);
    T_CHECK(fabsl((long double)lp.logprob - ((long double)l[5] - lse)) < 1e-5L);
    le_logprobs(l, 3, 1, 5, &lp); /* top beyond the vocabulary */
    T_EQ_INT(lp.n_top, 3);
    le_logprobs(l, N, 5, -1, &lp);
    T_EQ_INT(lp.n_top, 0);
    free(l);
}

int
main(void)
{
    T_RUN(test_argmax_ties);
    T_RUN(test_argmax_scan);
    T_RUN(test_logprobs);
    T_RUN(test_top_k);
    T_RUN(test_softmax);
    T_RUN(test_top_p);
    T_RUN(test_min_p);
    T_RUN(test_temperature);
    T_RUN(test_penalties);
    T_RUN(test_large_lists);
    T_RUN(test_rng);
    T_RUN(test_sampler_seed);
    T_RUN(test_sampler_repeat_greedy);
    T_RUN(test_sampler_bias);
    T_RUN(test_stop_scan);
    return T_END();
}
