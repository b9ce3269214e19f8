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
 *
 * Leased mode (PostgreSQL, several instances): a key's local limit is not
 * its budget but this instance's lease, capacity taken from the shared
 * budget by one atomic UPDATE (keys.reserved_pusd + grant, only WHERE
 * spent + reserved + grant <= budget) and recorded in budget_leases.
 * Per request nothing leaves memory: reserve/settle work on the lease as
 * above.  A committed row moves its cost from the lease to spent_pusd in
 * the row's own transaction (pg.c), and pr_budget_committed then lowers
 * the local lease by the same amount.  pr_budget_sync (aux thread, every
 * second) returns surplus and leases more.  The local lease only shrinks
 * before PostgreSQL's does and only grows after it, so
 *     sum over instances of local leases <= keys.reserved_pusd
 *     spent_pusd + reserved_pusd <= budget_pusd   (the UPDATE's WHERE)
 * and the cluster spends past a budget only by what requests cost beyond
 * their own reservations, exactly as one instance does.  The price: a
 * request larger than what this instance holds is refused until the
 * next sync (<= 1 s) leases more, while another instance may hold the
 * rest; an idle instance gives back all but a small reserve each sync.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pr_bentry {
    struct pr_bentry *next;
    int64_t key_id;
    int64_t limit;    /* pUSD; < 0 = unlimited */
    int64_t spent;    /* pUSD, settled */
    int64_t reserved; /* pUSD, in flight */
    /* leased mode only */
    int64_t budget;   /* the key's whole budget (pUSD) */
    int64_t want;     /* largest reservation refused since the last sync */
    int64_t used;     /* settled since the last sync (sizes the next lease) */
    int64_t to_return; /* taken off limit, not yet off the database's lease */
};

struct pr_budget {
    pthread_mutex_t mu;
    struct pr_bentry **slots;
    size_t nslots; /* power of two */
    size_t n;
    int leased;
    char *database; /* leased mode */
    char instance[40];
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
    free(b->database);
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
    if (b->leased) {
        /* The lease, not the budget, bounds this instance; spent is
         * this instance's settled-but-uncommitted cost. */
        if (e->budget == 0 && e->limit == 0 && e->reserved == 0)
            e->limit = limit_pusd < 0 ? -1 : 0;
        if (limit_pusd < 0)
            e->limit = -1;
        else if (e->limit < 0)
            e->limit = 0;
        e->budget = limit_pusd < 0 ? -1 : limit_pusd;
        goto out;
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
        if (amount_pusd > e->want)
            e->want = amount_pusd; /* the next sync leases for it */
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
        if (actual_pusd > 0)
            e->used += actual_pusd;
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

/* ---- leased mode ------------------------------------------------- */

int
pr_lease_items_room(struct pr_lease_item **it, size_t n, size_t *cap)
{
    if (n < *cap)
        return 1;
    size_t nc = *cap ? *cap * 2 : 16;
    struct pr_lease_item *ni = realloc(*it, nc * sizeof(*ni));
    if (!ni)
        return 0;
    *it = ni;
    *cap = nc;
    return 1;
}

enum gx_status
pr_budget_use_leases(struct pr_budget *b, const char *database,
                     const char *instance)
{
    if (!b || !database || !instance)
        return GX_EINVAL;
    char *d = strdup(database);
    if (!d)
        return GX_ENOMEM;
    pthread_mutex_lock(&b->mu);
    free(b->database);
    b->database = d;
    snprintf(b->instance, sizeof(b->instance), "%s", instance);
    b->leased = 1;
    pthread_mutex_unlock(&b->mu);
    return GX_OK;
}

const char *
pr_budget_instance(const struct pr_budget *b)
{
    return b && b->leased ? b->instance : NULL;
}

void
pr_budget_committed(struct pr_budget *b, int64_t key_id, int64_t cost_pusd)
{
    if (!b || !b->leased || cost_pusd <= 0)
        return;
    pthread_mutex_lock(&b->mu);
    struct pr_bentry *e = find(b, key_id);
    if (e && e->limit >= 0) {
        /* The database moved min(cost, its lease) to spent; ours follows
         * (never above the database's: subtract the whole cost). */
        e->spent = e->spent > cost_pusd ? e->spent - cost_pusd : 0;
        e->limit = e->limit > cost_pusd ? e->limit - cost_pusd : 0;
    }
    pthread_mutex_unlock(&b->mu);
}

static enum gx_status budget_sync(struct pr_budget *b, int closing, char *err,
                                  size_t errlen);

enum gx_status
pr_budget_sync(struct pr_budget *b, char *err, size_t errlen)
{
    return budget_sync(b, 0, err, errlen);
}

enum gx_status
pr_budget_release_leases(struct pr_budget *b, char *err, size_t errlen)
{
    return budget_sync(b, 1, err, errlen);
}

static enum gx_status
budget_sync(struct pr_budget *b, int closing, char *err, size_t errlen)
{
    if (!b || !b->leased)
        return GX_OK;
    struct pr_lease_item *it = NULL;
    size_t n = 0, cap = 0;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->nslots && st == GX_OK; i++)
        for (struct pr_bentry *e = b->slots[i]; e; e = e->next) {
            if (e->limit < 0)
                continue; /* unlimited: nothing to lease */
            if (!pr_lease_items_room(&it, n, &cap)) {
                st = GX_ENOMEM;
                break;
            }
            /* Hold enough for twice the last second's spend and four of
             * the largest refused request, at least 1/16 of the budget. */
            int64_t target = e->budget / 16;
            if (e->used > INT64_MAX / 4 || e->want > INT64_MAX / 8)
                target = e->budget;
            else if (2 * e->used + 4 * e->want > target)
                target = 2 * e->used + 4 * e->want;
            if (target > e->budget)
                target = e->budget;
            int64_t avail = e->limit - e->spent - e->reserved;
            struct pr_lease_item *x = &it[n++];
            memset(x, 0, sizeof(*x));
            x->key_id = e->key_id;
            if (closing) {
                if (avail > 0) { /* all of it: this instance is leaving */
                    e->limit -= avail;
                    e->to_return += avail;
                }
            } else if (avail > 2 * target + 1) {
                int64_t s = avail - target;
                e->limit -= s; /* ours first: never above the database's */
                e->to_return += s;
            } else if (avail < target) {
                x->want = target - avail;
            }
            x->give_back = e->to_return;
            e->used = 0;
            e->want = 0;
        }
    pthread_mutex_unlock(&b->mu);
    if (st == GX_OK && n > 0)
        st = pr_pg_lease_sync(b->database, b->instance, it, n, err, errlen);
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < n; i++) {
        struct pr_bentry *e = find(b, it[i].key_id);
        if (!e || e->limit < 0 || !it[i].done)
            continue;
        e->to_return -= it[i].give_back;
        if (it[i].lost) /* reclaimed as stale: we hold nothing */
            e->limit = 0;
        e->limit += it[i].granted;
    }
    pthread_mutex_unlock(&b->mu);
    free(it);
    return st;
}
