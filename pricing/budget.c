/*
 * budget.c: per-key spend counters, exact under concurrency.
 *
 * Invariant per key, under the table mutex: reserved is the sum of the
 * amounts of reservations not yet settled or released, and a reservation
 * is granted only if spent + reserved + amount <= limit.  Hence the
 * settled spend can pass the limit only by what requests cost beyond
 * their own reservation, and never because two requests raced: the check
 * and the add are one critical section.
 *
 * One mutex for the whole table: each operation is a hash lookup and two
 * additions, far shorter than anything else a request does, so striping
 * would buy nothing measurable at our request rates.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <pthread.h>
#include <stdlib.h>

struct pr_bentry {
    struct pr_bentry *next;
    int64_t key_id;
    int64_t limit;    /* pUSD; < 0 = unlimited */
    int64_t spent;    /* pUSD, settled */
    int64_t reserved; /* pUSD, in flight */
};

struct pr_budget {
    pthread_mutex_t mu;
    struct pr_bentry **slots;
    size_t nslots; /* power of two */
    size_t n;
};

static size_t
slot_of(const struct pr_budget *b, int64_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (b->nslots - 1);
}

static struct pr_bentry *
find(struct pr_budget *b, int64_t key)
{
    for (struct pr_bentry *e = b->slots[slot_of(b, key)]; e; e = e->next)
        if (e->key_id == key)
            return e;
    return NULL;
}

struct pr_budget *
pr_budget_new(void)
{
    struct pr_budget *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->nslots = 64;
    b->slots = calloc(b->nslots, sizeof(*b->slots));
    if (!b->slots) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    return b;
}

void
pr_budget_free(struct pr_budget *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nslots; i++) {
        struct pr_bentry *e = b->slots[i];
        while (e) {
            struct pr_bentry *next = e->next;
            free(e);
            e = next;
        }
    }
    free(b->slots);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* Doubles the slot array; on allocation failure keeps the old one (the
 * table still works, only slower).  Called with mu held. */
static void
grow(struct pr_budget *b)
{
    size_t nn = b->nslots * 2;
    struct pr_bentry **ns = calloc(nn, sizeof(*ns));
    if (!ns)
        return;
    struct pr_bentry **old = b->slots;
    size_t on = b->nslots;
    b->slots = ns;
    b->nslots = nn;
    for (size_t i = 0; i < on; i++) {
        struct pr_bentry *e = old[i];
        while (e) {
            struct pr_bentry *next = e->next;
            size_t s = slot_of(b, e->key_id);
            e->next = ns[s];
            ns[s] = e;
            e = next;
        }
    }
    free(old);
}

enum gx_status
pr_budget_set(struct pr_budget *b, int64_t key_id, int64_t limit_pusd,
              int64_t spent_pusd)
{
    if (!b || spent_pusd < 0)
        return GX_EINVAL;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry *e = find(b, key_id);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e) {
            st = GX_ENOMEM;
            goto out;
        }
        if (b->n + 1 > b->nslots)
            grow(b);
        e->key_id = key_id;
        size_t s = slot_of(b, key_id);
        e->next = b->slots[s];
        b->slots[s] = e;
        b->n++;
    }
    e->limit = limit_pusd < 0 ? -1 : limit_pusd;
    e->spent = spent_pusd;
out:
    pthread_mutex_unlock(&b->mu);
    return st;
}

void
pr_budget_remove(struct pr_budget *b, int64_t key_id)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry **pp = &b->slots[slot_of(b, key_id)];
    while (*pp) {
        if ((*pp)->key_id == key_id) {
            struct pr_bentry *e = *pp;
            *pp = e->next;
            free(e);
            b->n--;
            break;
        }
        pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&b->mu);
}

enum gx_status
pr_budget_reserve(struct pr_budget *b, int64_t key_id, int64_t amount_pusd)
{
    if (!b || amount_pusd < 0)
        return GX_EINVAL;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry *e = find(b, key_id);
    if (!e)
        goto out; /* no budget for this key */
    int64_t committed, total;
    if (__builtin_add_overflow(e->spent, e->reserved, &committed) ||
        __builtin_add_overflow(committed, amount_pusd, &total)) {
        st = GX_ETOOBIG;
        goto out;
    }
    if (e->limit >= 0 && total > e->limit) {
        st = GX_EAGAIN;
        goto out;
    }
    e->reserved += amount_pusd;
out:
    pthread_mutex_unlock(&b->mu);
    return st;
}

static void
unreserve(struct pr_bentry *e, int64_t reserved)
{
    /* Never below zero: a release for a reservation made before the key
     * was re-set must not make room that does not exist. */
    e->reserved = reserved > e->reserved ? 0 : e->reserved - reserved;
}

void
pr_budget_settle(struct pr_budget *b, int64_t key_id, int64_t reserved_pusd,
                 int64_t actual_pusd)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry *e = find(b, key_id);
    if (e) {
        unreserve(e, reserved_pusd < 0 ? 0 : reserved_pusd);
        if (actual_pusd > 0 &&
            __builtin_add_overflow(e->spent, actual_pusd, &e->spent))
            e->spent = INT64_MAX;
    }
    pthread_mutex_unlock(&b->mu);
}

void
pr_budget_release(struct pr_budget *b, int64_t key_id, int64_t reserved_pusd)
{
    pr_budget_settle(b, key_id, reserved_pusd, 0);
}

enum gx_status
pr_budget_get(struct pr_budget *b, int64_t key_id, int64_t *limit_pusd,
              int64_t *spent_pusd, int64_t *reserved_pusd)
{
    if (!b)
        return GX_EINVAL;
    enum gx_status st = GX_ENOTFOUND;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry *e = find(b, key_id);
    if (e) {
        if (limit_pusd)
            *limit_pusd = e->limit;
        if (spent_pusd)
            *spent_pusd = e->spent;
        if (reserved_pusd)
            *reserved_pusd = e->reserved;
        st = GX_OK;
    }
    pthread_mutex_unlock(&b->mu);
    return st;
}

struct load_ctx {
    struct pr_budget *b;
    enum gx_status st;
};

static int
load_one(void *ud, const struct pr_key *k)
{
    struct load_ctx *c = ud;
    if (k->revoked_ms >= 0)
        return 0;
    c->st = pr_budget_set(c->b, k->id, k->budget_pusd,
                          k->spent_pusd < 0 ? 0 : k->spent_pusd);
    return c->st != GX_OK;
}

enum gx_status
pr_budget_load(struct pr_budget *b, const char *path, char *err, size_t errlen)
{
    if (!b || !path)
        return GX_EINVAL;
    struct load_ctx c = {b, GX_OK};
    enum gx_status st = pr_key_list(path, load_one, &c, err, errlen);
    return st == GX_ECANCELED ? c.st : st;
}
