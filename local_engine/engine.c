/*
 * engine.c: the public face over model, tokenizer and sampler: status
 * words, defaults, tokenizer wrappers and the generation loop.
 *
 * Generation: the prompt is checked against the context window first
 * (LE_ECONTEXT, never silent truncation), the longest prefix already in
 * the session's KV cache is reused, the rest is prefilled in batches, then
 * tokens are sampled one by one.  Text goes to the callback through a
 * hold-back buffer so that no stop string (and no half UTF-8 character)
 * ever reaches the caller.  With a grammar (sp->grammar) each token is
 * drawn from those the grammar allows (grammar.c's mask, the sampler's
 * masked draw) and advances the grammar state; the loop ends when the
 * grammar is finished.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

const char *
le_status_str(enum le_status st)
{
    switch (st) {
    case LE_OK:
        return "ok";
    case LE_ENOMEM:
        return "out of memory";
    case LE_EINVAL:
        return "invalid argument";
    case LE_EIO:
        return "i/o error";
    case LE_EFORMAT:
        return "bad or unsupported model file";
    case LE_ECONTEXT:
        return "context window exceeded";
    case LE_ECANCELED:
        return "cancelled";
    case LE_EBUSY:
        return "busy";
    }
    return "unknown status";
}

void
le_sampling_default(struct le_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 0.8f;
    s->top_k = 40;
    s->top_p = 0.95f;
    s->min_p = 0.05f;
    s->repeat_penalty = 1.0f;
    s->penalty_last_n = 64;
    s->seed = LE_SEED_RANDOM;
    s->max_tokens = 256;
}

int64_t
le_model_tokenize(const struct le_model *m, const char *text, size_t len,
                  int add_special, int parse_special, int32_t *ids,
                  size_t cap)
{
    if (!m || !m->vocab || (!text && len))
        return -1;
    return le_tokenize(m->vocab, text ? text : "", len, add_special != 0,
                       parse_special != 0, ids, cap);
}

size_t
le_model_token_to_piece(const struct le_model *m, int32_t id, int special,
                        char *buf, size_t cap)
{
    if (!m || !m->vocab || id < 0 || id >= le_vocab_n_tokens(m->vocab))
        return 0;
    int keep = 0;
    for (int k = 0; k < m->n_keep_tok && !keep; k++)
        keep = id == m->keep_tok[k];
    return le_token_to_piece(m->vocab, id, special != 0 || keep, buf, cap);
}

int32_t
le_model_bos(const struct le_model *m)
{
    return le_vocab_bos(m->vocab);
}

int32_t
le_model_eos(const struct le_model *m)
{
    return le_vocab_eos(m->vocab);
}

int
le_model_is_eog(const struct le_model *m, int32_t id)
{
    if (id < 0 || id >= le_vocab_n_tokens(m->vocab))
        return 0;
    return le_vocab_is_eog(m->vocab, id);
}

/* Milliseconds on the monotonic clock (le_int.h). */
double
le_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int
pending_add(struct le_pending *b, const char *s, size_t n)
{
    if (n == 0)
        return 0; /* b->p may still be NULL */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static void
pending_drop(struct le_pending *b, size_t n)
{
    if (n == 0)
        return; /* b->p may still be NULL */
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

static void
constraint_cleanup(struct le_constraint *c)
{
    le_gstate_free(c->gs);
    le_token_trie_free(c->own_trie);
    free(c->mask);
}

static enum le_status
constraint_init(struct le_constraint *c, const struct le_model *m,
                const struct le_sampling *sp, char *err, size_t errlen)
{
    enum le_status st = le_gstate_new(sp->grammar, &c->gs);
    if (st == LE_OK && !sp->trie)
        st = le_token_trie_new(m, &c->own_trie);
    c->trie = sp->trie ? sp->trie : c->own_trie;
    if (st == LE_OK &&
        le_token_trie_words(c->trie) != ((size_t)m->hp.n_vocab + 63) / 64)
        st = LE_EINVAL; /* a trie of another model */
    if (st == LE_OK) {
        c->mask = malloc(le_token_trie_words(c->trie) * sizeof(*c->mask));
        if (!c->mask)
            st = LE_ENOMEM;
    }
    if (st != LE_OK && err && errlen)
        snprintf(err, errlen, "grammar: %s", le_status_str(st));
    return st;
}

/* Is id one the grammar allows now?  Only for the greedy shortcut; pieces
 * too long for the buffer answer no and go through the mask. */
static int
constraint_allows(struct le_constraint *c, const struct le_model *m, int32_t id)
{
    if (le_model_is_eog(m, id))
        return le_gstate_complete(c->gs);
    char piece[256];
    size_t pl = le_model_token_to_piece(m, id, 0, piece, sizeof(piece));
    return pl > 0 && pl <= sizeof(piece) &&
           le_gstate_accepts(c->gs, piece, pl);
}

/*
 * Picks the next token under the grammar.  Greedy first tries the plain
 * argmax: when the grammar allows it, it is also the argmax of the masked
 * logits, so the whole-vocabulary mask is computed only when the model's
 * favourite is forbidden.  Sampling always masks first, so top-k / top-p /
 * min-p see the allowed tokens only (as llama.cpp orders them).
 */
static enum le_status
constraint_pick(struct le_constraint *c, struct le_gen *g,
                const float *logits, int32_t *out, char *err, size_t errlen)
{
    if (g->sp->temperature <= 0) {
        int32_t id = le_sampler_sample(g->smp, logits);
        if (constraint_allows(c, g->m, id)) {
            *out = id;
            return LE_OK;
        }
    }
    size_t n = 0;
    enum le_status st = le_gstate_mask(c->gs, c->trie, c->mask, &n);
    if (st == LE_OK && n == 0)
        st = LE_EINVAL;
    if (st != LE_OK) {
        if (err && errlen)
            snprintf(err, errlen,
                     st == LE_ENOMEM
                         ? "grammar: out of memory"
                         : "grammar: no token of this vocabulary can "
                           "continue the output (or the grammar is too "
                           "ambiguous)");
        return st;
    }
    *out = le_sampler_sample_masked(g->smp, logits, c->mask);
    return LE_OK;
}

enum le_status
le_gen_check(const struct le_sampling *sp, size_t n_prompt, int32_t n_ctx,
             char *err, size_t errlen)
{
    if (n_prompt == 0) {
        if (err && errlen)
            snprintf(err, errlen, "generate: the prompt is empty");
        return LE_EINVAL;
    }
    size_t want = (size_t)(sp->max_tokens > 0 ? sp->max_tokens : 1);
    if (n_prompt <= (size_t)n_ctx && want <= (size_t)n_ctx - n_prompt)
        return LE_OK;
    if (err && errlen) {
        if (sp->max_tokens > 0)
            snprintf(err, errlen,
                     "this model's context window is %d tokens; the "
                     "prompt has %zu tokens and %d more were requested "
                     "(max_tokens)",
                     (int)n_ctx, n_prompt, sp->max_tokens);
        else
            snprintf(err, errlen,
                     "this model's context window is %d tokens; the "
                     "prompt has %zu tokens",
                     (int)n_ctx, n_prompt);
    }
    return LE_ECONTEXT;
}

void
le_gen_cleanup(struct le_gen *g)
{
    free(g->pend.p);
    g->pend.p = NULL;
    constraint_cleanup(&g->con);
    memset(&g->con, 0, sizeof(g->con));
    le_sampler_free(g->smp);
    g->smp = NULL;
}

enum le_status
le_gen_init(struct le_gen *g, const struct le_model *m,
            const struct le_sampling *sp, const int32_t *prompt,
            size_t n_prompt, le_token_cb cb, void *ud, char *err,
            size_t errlen)
{
    memset(g, 0, sizeof(*g));
    g->m = m;
    g->sp = sp;
    g->cb = cb;
    g->ud = ud;
    g->r.prompt_tokens =
        (int32_t)(n_prompt > INT32_MAX ? INT32_MAX : n_prompt);
    enum le_status st = le_sampler_new(sp, m->hp.n_vocab, &g->smp);
    if (st == LE_EINVAL && err && errlen)
        snprintf(err, errlen, "logit bias: a token id outside the "
                              "vocabulary or a bias that is not finite");
    if (st == LE_OK && sp->grammar)
        st = constraint_init(&g->con, m, sp, err, errlen);
    if (st != LE_OK) {
        if (st == LE_ENOMEM && err && errlen)
            snprintf(err, errlen, "out of memory");
        le_gen_cleanup(g);
        return st;
    }
    for (size_t i = 0; i < n_prompt; i++)
        le_sampler_accept(g->smp, prompt[i]);
    return LE_OK;
}

/* Ends the generation: held-back text goes out on a clean end. */
static enum le_status
gen_end(struct le_gen *g, enum le_finish f, enum le_status st, int32_t *next)
{
    g->r.finish = f;
    *next = -1;
    if (st == LE_OK && g->pend.len && g->cb)
        g->cb(g->ud, -1, g->pend.p, g->pend.len);
    g->pend.len = 0;
    return st;
}

enum le_status
le_gen_step(struct le_gen *g, const float *logits, int32_t n_past,
            int32_t n_ctx, int32_t *next, char *err, size_t errlen)
{
    const struct le_sampling *sp = g->sp;
    const struct le_model *m = g->m;
    struct le_gen_result *r = &g->r;
    enum le_status st;
    *next = -1;
    if (sp->max_tokens > 0 && r->completion_tokens >= sp->max_tokens)
        return gen_end(g, LE_FINISH_LENGTH, LE_OK, next);
    int32_t id = -1;
    if (g->con.gs && !le_gstate_is_free(g->con.gs)) {
        st = constraint_pick(&g->con, g, logits, &id, err, errlen);
        if (st != LE_OK)
            return st;
    } else {
        id = le_sampler_sample(g->smp, logits);
    }
    if (!sp->ignore_eos && le_model_is_eog(m, id))
        return gen_end(g, LE_FINISH_STOP, LE_OK, next);
    le_sampler_accept(g->smp, id);
    r->completion_tokens++;
    /* ids past the vocabulary (token_embd padded beyond it) have no
     * text; the wrapper checks the range */
    char piece[256];
    size_t pl = le_model_token_to_piece(m, id, 0, piece, sizeof(piece));
    int added;
    if (pl <= sizeof(piece)) {
        added = pending_add(&g->pend, piece, pl);
    } else {
        char *big = malloc(pl);
        added = -1;
        if (big && le_model_token_to_piece(m, id, 0, big, pl) == pl)
            added = pending_add(&g->pend, big, pl);
        free(big);
    }
    if (added != 0) {
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return LE_ENOMEM;
    }
    g->text_total += pl;
    if (g->lp_cb) {
        struct le_logprob lp;
        le_logprobs(logits, m->hp.n_vocab, id, sp->top_logprobs, &lp);
        lp.text_end = g->text_total;
        g->lp_cb(g->ud, &lp);
    }
    if (g->con.gs &&
        !le_gstate_accept(g->con.gs, g->pend.p + g->pend.len - pl, pl)) {
        if (err && errlen) /* cannot happen: the token was allowed */
            snprintf(err, errlen, "grammar: a forbidden token was sampled");
        return LE_EINVAL;
    }
    int matched = 0;
    size_t safe = le_stop_scan(g->pend.p, g->pend.len, sp->stop, sp->n_stop,
                               &matched);
    /* pend.p is NULL while nothing was held (tokens without text) */
    int cancel = g->cb ? g->cb(g->ud, id, g->pend.p ? g->pend.p : "", safe)
                       : 0;
    if (matched) {
        g->pend.len = 0; /* the stop string and what follows are dropped */
        if (cancel)
            return gen_end(g, LE_FINISH_CANCEL, LE_ECANCELED, next);
        return gen_end(g, LE_FINISH_STOP, LE_OK, next);
    }
    pending_drop(&g->pend, safe);
    if (cancel)
        return gen_end(g, LE_FINISH_CANCEL, LE_ECANCELED, next);
    if (g->con.gs && le_gstate_finished(g->con.gs))
        return gen_end(g, LE_FINISH_STOP, LE_OK, next); /* complete */
    if (sp->max_tokens > 0 && r->completion_tokens >= sp->max_tokens)
        return gen_end(g, LE_FINISH_LENGTH, LE_OK, next);
    if (n_past >= n_ctx) /* only when max_tokens <= 0 */
        return gen_end(g, LE_FINISH_LENGTH, LE_OK, next);
    *next = id;
    return LE_OK;
}

enum le_status
le_session_generate(struct le_session *s, const int32_t *prompt,
                    size_t n_prompt, const struct le_sampling *sp,
                    le_token_cb cb, void *ud, struct le_gen_result *res,
                    char *err, size_t errlen)
{
    struct le_gen g;
    memset(&g, 0, sizeof(g));
    struct le_sampling dsp;
    if (!sp) {
        le_sampling_default(&dsp);
        sp = &dsp;
    }
    enum le_status st;
    if (!s || !prompt) {
        st = le_gen_check(sp, 0, 0, err, errlen);
        goto out;
    }
    g.r.prompt_tokens =
        (int32_t)(n_prompt > INT32_MAX ? INT32_MAX : n_prompt);
    st = le_gen_check(sp, n_prompt, s->n_ctx, err, errlen);
    if (st != LE_OK)
        goto out;

    /* reuse the cached prefix; the last prompt token is always evaluated
     * again because its logits are needed */
    size_t common = 0;
    while (common < (size_t)s->n_past && common < n_prompt &&
           s->hist[common] == prompt[common])
        common++;
    if (common == n_prompt)
        common--;
    s->n_past = (int32_t)common;

    st = le_gen_init(&g, s->m, sp, prompt, n_prompt, cb, ud, err, errlen);
    g.r.cached_tokens = (int32_t)common;
    if (st != LE_OK)
        goto out;

    double t0 = le_now_ms();
    st = le_session_decode(s, prompt + common, n_prompt - common, err, errlen);
    double t1 = le_now_ms();
    g.r.prompt_ms = t1 - t0;
    while (st == LE_OK) {
        if (s->cancel && atomic_load(s->cancel)) {
            g.r.finish = LE_FINISH_CANCEL;
            st = LE_ECANCELED;
            break;
        }
        int32_t id;
        st = le_gen_step(&g, s->logits, s->n_past, s->n_ctx, &id, err,
                         errlen);
        if (st != LE_OK || id < 0)
            break;
        st = le_session_decode(s, &id, 1, err, errlen);
    }
    g.r.gen_ms = le_now_ms() - t1;
    if (st == LE_ECANCELED && err && errlen)
        snprintf(err, errlen, "generation cancelled");
out:
    if (res)
        *res = g.r;
    le_gen_cleanup(&g);
    return st;
}
