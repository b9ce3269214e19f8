/*
 * sampler.c: turns a logits row into one token id.
 *
 * The chain, in llama.cpp's order so that the same settings mean the same
 * thing here: logit bias (added to a copy of the logits) -> penalties
 * (repeat / frequency / presence over the last N tokens) -> top-k ->
 * top-p -> min-p -> temperature -> draw.  top-p and
 * min-p look at the distribution at temperature 1, before the temperature
 * is applied (as llama.cpp does).  Temperature <= 0 is greedy: the argmax
 * after penalties, ties to the lowest id (a plain scan keeps the first).
 *
 * The PRNG is our own (xoshiro256** seeded through splitmix64), never
 * rand(), so a seed gives the same text on every platform and no other
 * code shares its state.
 *
 * Stop strings are matched on detokenized text by le_stop_scan; the engine
 * holds back any tail that could still grow into a stop string.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

/* ------------------------------------------------------------------ */
/* PRNG                                                                 */

static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void
le_rng_seed(struct le_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
le_rng_next(struct le_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double
le_rng_uniform(struct le_rng *r)
{
    return (double)(le_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------ */
/* Candidate steps                                                      */

static int
cand_cmp(const void *a, const void *b)
{
    const struct le_cand *x = a, *y = b;
    if (x->logit > y->logit)
        return -1;
    if (x->logit < y->logit)
        return 1;
    return (x->id > y->id) - (x->id < y->id);
}

void
le_samp_sort(struct le_cands *c)
{
    if (!c->sorted) {
        qsort(c->data, c->n, sizeof(*c->data), cand_cmp);
        c->sorted = 1;
    }
}

void
le_samp_softmax(struct le_cands *c)
{
    if (c->n == 0)
        return;
    le_samp_sort(c);
    float max = c->data[0].logit;
    double sum = 0;
    for (size_t i = 0; i < c->n; i++) {
        float e = expf(c->data[i].logit - max);
        c->data[i].p = e;
        sum += e;
    }
    for (size_t i = 0; i < c->n; i++)
        c->data[i].p = (float)(c->data[i].p / sum);
}

/* Min-heap on cand_cmp order reversed: the root is the worst kept. */
static void
heap_down(struct le_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_cmp(&h[l], &h[w]) > 0)
            w = l;
        if (r < n && cand_cmp(&h[r], &h[w]) > 0)
            w = r;
        if (w == i)
            return;
        struct le_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the k best candidates (cand_cmp order) to data[0..k), keeping
 * every element (swaps, not copies), in O(n log k); not sorted. */
static void
select_top(struct le_cands *c, size_t k)
{
    struct le_cand *h = c->data;
    for (size_t i = k / 2; i-- > 0;)
        heap_down(h, k, i);
    for (size_t i = k; i < c->n; i++) {
        if (cand_cmp(&c->data[i], &h[0]) < 0) {
            struct le_cand t = h[0];
            h[0] = c->data[i];
            c->data[i] = t;
            heap_down(h, k, 0);
        }
    }
}

void
le_samp_top_k(struct le_cands *c, int k)
{
    if (k <= 0 || (size_t)k >= c->n)
        return;
    if (!c->sorted) {
        select_top(c, (size_t)k);
        c->n = (size_t)k;
        le_samp_sort(c);
        return;
    }
    c->n = (size_t)k;
}

void
le_samp_top_p(struct le_cands *c, float p, size_t min_keep)
{
    if (p >= 1.0f || c->n == 0)
        return;
    if (!c->sorted && c->n > 1024) {
        /* A large unsorted list (no top-k before): the nucleus is almost
         * always within the best few hundred, so select those first and
         * sort the whole list only when they do not reach p.  Exact: the
         * candidates left out are all below the selected ones. */
        float max = -INFINITY;
        for (size_t i = 0; i < c->n; i++)
            if (c->data[i].logit > max)
                max = c->data[i].logit;
        double sum = 0;
        for (size_t i = 0; i < c->n; i++)
            sum += expf(c->data[i].logit - max);
        size_t k = 256;
        select_top(c, k);
        double top = 0;
        for (size_t i = 0; i < k; i++)
            top += expf(c->data[i].logit - max);
        if (top / sum >= p && k >= min_keep) {
            struct le_cands sub = {c->data, k, 0};
            le_samp_sort(&sub);
            double cum = 0;
            size_t keep = k;
            for (size_t i = 0; i < k; i++) {
                cum += expf(c->data[i].logit - max) / sum;
                if (cum >= p && i + 1 >= min_keep) {
                    keep = i + 1;
                    break;
                }
            }
            c->n = keep;
            c->sorted = 1;
            return;
        }
    }
    le_samp_softmax(c);
    double cum = 0;
    size_t keep = c->n;
    for (size_t i = 0; i < c->n; i++) {
        cum += c->data[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    c->n = keep;
}

void
le_samp_min_p(struct le_cands *c, float p, size_t min_keep)
{
    if (p <= 0.0f || c->n == 0)
        return;
    if (!c->sorted && min_keep <= 1 && p <= 1.0f) {
        /* p_i >= p * p_max  <=>  logit_i >= max_logit + log(p): a linear
         * filter, no sort (the best candidate always passes, so at least
         * one is kept) */
        float max = -INFINITY;
        for (size_t i = 0; i < c->n; i++)
            if (c->data[i].logit > max)
                max = c->data[i].logit;
        float thr = max + logf(p);
        size_t keep = 0;
        for (size_t i = 0; i < c->n; i++)
            if (c->data[i].logit >= thr)
                c->data[keep++] = c->data[i];
        c->n = keep ? keep : 1;
        return;
    }
    le_samp_softmax(c);
    float thr = c->data[0].p * p;
    size_t keep = 0;
    while (keep < c->n && (c->data[keep].p >= thr || keep < min_keep))
        keep++;
    c->n = keep;
}

void
le_samp_temp(struct le_cands *c, float t)
{
    if (t <= 0.0f)
        return;
    for (size_t i = 0; i < c->n; i++)
        c->data[i].logit /= t;
}

void
le_samp_penalties(struct le_cands *c, const int32_t *last, size_t n_last,
                  float repeat, float freq, float presence)
{
    if (n_last == 0 || (repeat == 1.0f && freq == 0.0f && presence == 0.0f))
        return;
    /* Count occurrences per id in the window; the window is short, so a
     * quadratic count per distinct id beats hashing. */
    for (size_t i = 0; i < n_last; i++) {
        int32_t id = last[i];
        int seen_before = 0;
        for (size_t j = 0; j < i; j++)
            if (last[j] == id) {
                seen_before = 1;
                break;
            }
        if (seen_before)
            continue;
        int count = 0;
        for (size_t j = i; j < n_last; j++)
            count += last[j] == id;
        /* the sampler passes candidates in id order (data[id].id == id):
         * index directly; otherwise search */
        struct le_cand *d = NULL;
        if (id >= 0 && (size_t)id < c->n && c->data[id].id == id) {
            d = &c->data[id];
        } else {
            for (size_t j = 0; j < c->n && !d; j++)
                if (c->data[j].id == id)
                    d = &c->data[j];
        }
        if (!d)
            continue;
        if (d->logit <= 0)
            d->logit *= repeat;
        else
            d->logit /= repeat;
        d->logit -= (float)count * freq + presence;
    }
    c->sorted = 0;
}

/* The first id of the largest logit (0 when logits[0] is NaN, as a plain
 * scan from id 0 would give; NaNs elsewhere are never picked).  Eight
 * independent running maxima, then the first id holding the maximum:
 * greedy decoding runs this once per sequence and step on the
 * scheduler's thread while the pool waits, and the one-candidate scan
 * (a compare chained through a reload) took 0.1 ms of a 32000-id
 * vocabulary, 1-2% of a decode step per sequence. */
int32_t
le_samp_argmax(const float *logits, int32_t n)
{
    if (n <= 1 || logits[0] != logits[0])
        return 0;
    float m[8];
    for (int k = 0; k < 8; k++)
        m[k] = logits[0];
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            m[k] = logits[i + k] > m[k] ? logits[i + k] : m[k];
    for (; i < n; i++)
        m[0] = logits[i] > m[0] ? logits[i] : m[0];
    float best = m[0];
    for (int k = 1; k < 8; k++)
        best = m[k] > best ? m[k] : best;
    for (i = 0; i < n; i++)
        if (logits[i] == best)
            return i;
    return 0; /* not reached: best is one of the logits */
}

/* ------------------------------------------------------------------ */
/* The sampler object                                                   */

struct le_sampler {
    struct le_sampling sp;
    int32_t n_vocab;
    struct le_rng rng;
    struct le_cand *cand; /* [n_vocab] */
    int32_t *last;        /* ring of the last penalty_last_n tokens */
    size_t n_last, last_cap, last_head;
    int32_t *win;         /* [last_cap] window in order, scratch */
    int32_t *bias_id;     /* [n_bias] logit_bias, copied from sp */
    float *bias;          /* [n_bias] */
    size_t n_bias;
    float *biased;        /* [n_vocab] the logits plus the biases, scratch */
};

int
le_sampling_bias_ok(const struct le_sampling *sp, int32_t n_vocab)
{
    if (sp->n_bias && (!sp->bias_id || !sp->bias))
        return 0;
    for (size_t i = 0; i < sp->n_bias; i++)
        if (sp->bias_id[i] < 0 || sp->bias_id[i] >= n_vocab ||
            !isfinite(sp->bias[i]))
            return 0;
    return 1;
}

enum le_status
le_sampler_new(const struct le_sampling *sp, int32_t n_vocab,
               struct le_sampler **out)
{
    if (!sp || n_vocab <= 0 || !le_sampling_bias_ok(sp, n_vocab))
        return LE_EINVAL;
    struct le_sampler *s = calloc(1, sizeof(*s));
    if (!s)
        return LE_ENOMEM;
    s->sp = *sp;
    s->sp.stop = NULL;
    s->sp.n_stop = 0;
    s->sp.bias_id = NULL;
    s->sp.bias = NULL;
    s->sp.n_bias = 0;
    if (sp->n_bias) {
        s->bias_id = malloc(sp->n_bias * sizeof(*s->bias_id));
        s->bias = malloc(sp->n_bias * sizeof(*s->bias));
        s->biased = malloc((size_t)n_vocab * sizeof(*s->biased));
        if (!s->bias_id || !s->bias || !s->biased) {
            le_sampler_free(s);
            return LE_ENOMEM;
        }
        memcpy(s->bias_id, sp->bias_id, sp->n_bias * sizeof(*s->bias_id));
        memcpy(s->bias, sp->bias, sp->n_bias * sizeof(*s->bias));
        s->n_bias = sp->n_bias;
    }
    s->n_vocab = n_vocab;
    uint64_t seed = sp->seed;
    if (seed == LE_SEED_RANDOM) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
               (uint64_t)(uintptr_t)s;
    }
    le_rng_seed(&s->rng, seed);
    s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
    s->last_cap = sp->penalty_last_n > 0 ? (size_t)sp->penalty_last_n : 0;
    if (s->last_cap) {
        s->last = malloc(s->last_cap * sizeof(*s->last));
        s->win = malloc(s->last_cap * sizeof(*s->win));
    }
    if (!s->cand || (s->last_cap && (!s->last || !s->win))) {
        le_sampler_free(s);
        return LE_ENOMEM;
    }
    *out = s;
    return LE_OK;
}

void
le_sampler_free(struct le_sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->last);
    free(s->win);
    free(s->bias_id);
    free(s->bias);
    free(s->biased);
    free(s);
}

void
le_sampler_accept(struct le_sampler *s, int32_t id)
{
    if (!s->last_cap)
        return;
    s->last[s->last_head] = id;
    s->last_head = (s->last_head + 1) % s->last_cap;
    if (s->n_last < s->last_cap)
        s->n_last++;
}

static int
mask_has(const uint64_t *mask, int32_t id)
{
    return !mask || (int)((mask[id >> 6] >> (id & 63)) & 1);
}

/*
 * The token-mask hook: with a mask (constrained generation) only allowed
 * ids become candidates, so no step of the chain, and no rounding in the
 * final draw, can pick a token the grammar forbids.  The penalties then
 * find their ids by search instead of by index (candidates are no longer
 * one per id), which le_samp_penalties already handles.
 */
static int32_t
sample(struct le_sampler *s, const float *logits, const uint64_t *mask)
{
    const struct le_sampling *sp = &s->sp;
    if (s->n_bias) {
        /* on a copy: the caller's row stays the model's (log-probabilities
         * are reported from it) */
        memcpy(s->biased, logits, (size_t)s->n_vocab * sizeof(*logits));
        for (size_t i = 0; i < s->n_bias; i++)
            s->biased[s->bias_id[i]] += s->bias[i];
        logits = s->biased;
    }
    int penal = s->n_last > 0 &&
                (sp->repeat_penalty != 1.0f || sp->frequency_penalty != 0 ||
                 sp->presence_penalty != 0);
    if (sp->temperature <= 0 && !penal && !mask)
        return le_samp_argmax(logits, s->n_vocab);

    size_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (!mask_has(mask, i))
            continue;
        s->cand[n].id = i;
        s->cand[n].logit = logits[i];
        s->cand[n].p = 0;
        n++;
    }
    if (n == 0)
        return -1;
    struct le_cands c = {s->cand, n, 0};
    if (penal) {
        size_t start = (s->last_head + s->last_cap - s->n_last) % s->last_cap;
        for (size_t i = 0; i < s->n_last; i++)
            s->win[i] = s->last[(start + i) % s->last_cap];
        le_samp_penalties(&c, s->win, s->n_last, sp->repeat_penalty,
                          sp->frequency_penalty, sp->presence_penalty);
    }
    if (sp->temperature <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < c.n; i++)
            if (c.data[i].logit > c.data[best].logit)
                best = i;
        return c.data[best].id;
    }
    le_samp_top_k(&c, sp->top_k);
    le_samp_top_p(&c, sp->top_p, 1);
    le_samp_min_p(&c, sp->min_p, 1);
    le_samp_temp(&c, sp->temperature);
    le_samp_softmax(&c);
    double u = le_rng_uniform(&s->rng), cum = 0;
    for (size_t i = 0; i < c.n; i++) {
        cum += c.data[i].p;
        if (u < cum)
            return c.data[i].id;
    }
    return c.data[c.n - 1].id; /* rounding left u above the total */
}

int32_t
le_sampler_sample(struct le_sampler *s, const float *logits)
{
    return sample(s, logits, NULL);
}

int32_t
le_sampler_sample_masked(struct le_sampler *s, const float *logits,
                         const uint64_t *mask)
{
    return sample(s, logits, mask);
}

/* ------------------------------------------------------------------ */
/* Stop strings                                                         */

/* Bytes at the end of buf[0..len) that form an incomplete UTF-8 sequence. */
static size_t
utf8_incomplete_tail(const char *buf, size_t len)
{
    size_t back = 0;
    while (back < len && back < 4) {
        unsigned char b = (unsigned char)buf[len - 1 - back];
        if ((b & 0xC0) != 0x80) {
            size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            return need > back + 1 ? back + 1 : 0;
        }
        back++;
    }
    return 0;
}

size_t
le_stop_scan(const char *buf, size_t len, const char *const *stops,
             size_t n_stop, int *matched)
{
    *matched = 0;
    size_t first = len;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        if (!sl || sl > len)
            continue;
        const char *hit = memmem(buf, len, stops[i], sl);
        if (hit && (size_t)(hit - buf) < first) {
            first = (size_t)(hit - buf);
            *matched = 1;
        }
    }
    if (*matched)
        return first;
    size_t hold = 0;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        /* the longest proper prefix of the stop string ending buf */
        for (size_t k = sl > 1 ? sl - 1 : 0; k > hold; k--) {
            if (k <= len && memcmp(buf + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    size_t u = utf8_incomplete_tail(buf, len);
    if (u > hold)
        hold = u;
    return len - hold;
}

/* ------------------------------------------------------------------ */
/* Log-probabilities (le_sched_req.on_logprob)                          */

/* The sum of e^(logits[i] - mx) goes through act.c's softmax kernel a
 * chunk at a time (a 32000-id vocabulary costs ~30 us, not the ~130 of
 * libm's expf), summed in double. */
#define LP_CHUNK 1024

void
le_logprobs(const float *logits, int32_t n, int32_t id, int top,
            struct le_logprob *out)
{
    memset(out, 0, sizeof(*out));
    out->id = id;
    if (top < 0)
        top = 0;
    if (top > LE_TOP_LOGPROBS_MAX)
        top = LE_TOP_LOGPROBS_MAX;
    if (top > n)
        top = n;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx; /* NaNs never win */
    if (!(mx > -INFINITY)) { /* nothing finite: no distribution */
        out->logprob = -INFINITY;
        return;
    }
    le_exp_sub_fn ex = le_exp_sub_get();
    float buf[LP_CHUNK];
    double sum = 0;
    for (int32_t i = 0; i < n; i += LP_CHUNK) {
        int c = n - i < LP_CHUNK ? (int)(n - i) : LP_CHUNK;
        memcpy(buf, logits + i, (size_t)c * sizeof(float));
        ex(buf, c, mx);
        for (int k = 0; k < c; k++)
            sum += buf[k] == buf[k] ? buf[k] : 0.0f;
    }
    double lse = (double)mx + log(sum);
    out->logprob = id >= 0 && id < n ? (float)((double)logits[id] - lse)
                                     : -INFINITY;
    /* the top ones: insertion into a sorted list, ascending ids so that
     * an equal later one never passes an earlier one */
    int k = 0;
    for (int32_t i = 0; i < n && top > 0; i++) {
        float v = logits[i];
        if (v != v || (k == top && !(v > out->top_logprob[k - 1])))
            continue;
        int at = k < top ? k : top - 1;
        while (at > 0 && v > out->top_logprob[at - 1]) {
            out->top_logprob[at] = out->top_logprob[at - 1];
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_logprob[at] = v;
        out->top_id[at] = i;
        if (k < top)
            k++;
    }
    out->n_top = k;
    for (int i = 0; i < k; i++)
        out->top_logprob[i] = (float)((double)out->top_logprob[i] - lse);
}
