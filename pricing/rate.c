/*
 * rate.c: requests and tokens per minute across instances, leased from
 * PostgreSQL (see pricing.h, pr_rate).  The gateway's own token buckets
 * keep smoothing per instance; this adds the cluster-wide count.
 *
 * Windows are fixed UTC minutes.  rate_windows(key_id, window_ms, used)
 * counts what all instances leased in a window (request counts under the
 * key's id, token counts under -id: one table, no second schema); a lease
 * is taken under the row's lock and never past the limit.  Per request
 * only memory is touched: one counter under the table mutex.
 * pr_rate_sync (aux thread, every second) leases what the last second's
 * demand needs (twice what was taken and refused, at least limit/16) and
 * gives back what an idle instance holds beyond that, so one instance
 * alone grows to the whole limit within a few seconds of demand, and
 * several share it.  A lease dies with its window, and with its instance
 * (kill -9 loses at most that instance's unused part of one window: a
 * refusal, never an excess).
 *
 * Requests: each admission takes 1, so per window the cluster admits at
 * most rpm requests (over any sliding 60 s, at most 2 x rpm: the end of
 * one window and the start of the next).
 *
 * Tokens: an admission takes its estimate (pr_rate_take_n), the end of
 * the request settles the actual count (pr_rate_settle).  Less than the
 * estimate goes back to the lease, but only within the window it was
 * taken from (a lease is of one window's count); more is charged to the
 * current lease, which may go negative: that debt is carried into the
 * next windows (a new window starts from min(allowance, 0), never from a
 * fresh 0) and the next syncs lease it off before anything new is
 * admitted.  So per window the cluster admits requests whose estimates
 * sum to at most tpm, and every token beyond an estimate is paid out of
 * a later lease: over any run of k windows the tokens used are at most
 * k x tpm plus the overrun of the requests still unpaid (each instance's
 * debt, capped at 2 x tpm like the local bucket's), and over a sliding
 * 60 s at most 2 x tpm plus that.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_MS 60000

struct rentry {
    struct rentry *next;
    int64_t key_id;
    int64_t per_min;
    int64_t window;    /* start of the window the allowance is for */
    int64_t allowance; /* leased, not yet taken (tokens: < 0 is a debt) */
    int64_t taken, refused; /* since the last sync */
    int64_t exhausted; /* window whose cluster limit is spent, or -1 */
};

struct pr_rate {
    pthread_mutex_t mu;
    struct rentry *all; /* a list: syncs walk it; takes search it */
    char *database;
    int tokens; /* counts tokens (rows under -key_id), else requests */
};

static struct pr_rate *
rate_new(const char *database, int tokens)
{
    struct pr_rate *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->database = strdup(database ? database : "");
    if (!r->database) {
        free(r);
        return NULL;
    }
    r->tokens = tokens;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

struct pr_rate *
pr_rate_new(const char *database)
{
    return rate_new(database, 0);
}

struct pr_rate *
pr_rate_new_tokens(const char *database)
{
    return rate_new(database, 1);
}

void
pr_rate_free(struct pr_rate *r)
{
    if (!r)
        return;
    while (r->all) {
        struct rentry *n = r->all->next;
        free(r->all);
        r->all = n;
    }
    free(r->database);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static struct rentry *
rfind(struct pr_rate *r, int64_t key)
{
    for (struct rentry *e = r->all; e; e = e->next)
        if (e->key_id == key)
            return e;
    return NULL;
}

/* The entry's allowance for window w: a lease ends with its window, a
 * debt does not. */
static void
to_window(struct rentry *e, int64_t w)
{
    if (e->window != w) {
        e->window = w;
        if (e->allowance > 0)
            e->allowance = 0;
    }
}

enum gx_status
pr_rate_set(struct pr_rate *r, int64_t key_id, int64_t per_min)
{
    if (!r || per_min <= 0)
        return GX_OK;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&r->mu);
    struct rentry *e = rfind(r, key_id);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e) {
            st = GX_ENOMEM;
            goto out;
        }
        e->key_id = key_id;
        e->exhausted = -1;
        e->next = r->all;
        r->all = e;
    }
    e->per_min = per_min;
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

enum gx_status
pr_rate_take_n(struct pr_rate *r, int64_t key_id, int64_t now_ms, int64_t n,
               int64_t *retry_s)
{
    if (!r)
        return GX_OK;
    enum gx_status st = GX_OK;
    int64_t w = now_ms - now_ms % WINDOW_MS;
    pthread_mutex_lock(&r->mu);
    struct rentry *e = rfind(r, key_id);
    if (!e)
        goto out; /* no limit */
    if (n > e->per_min)
        n = e->per_min; /* one request never needs more than the limit */
    if (n < 1)
        n = 1;
    to_window(e, w);
    if (e->allowance >= n) {
        e->allowance -= n;
        e->taken += n;
        goto out;
    }
    e->refused += n;
    st = GX_EAGAIN;
    if (retry_s) /* spent cluster-wide: next window; else next sync */
        *retry_s = e->exhausted == w ? (w + WINDOW_MS - now_ms + 999) / 1000
                                     : 1;
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

enum gx_status
pr_rate_take(struct pr_rate *r, int64_t key_id, int64_t now_ms,
             int64_t *retry_s)
{
    return pr_rate_take_n(r, key_id, now_ms, 1, retry_s);
}

/* Back into the lease of the window taken_ms was in, if that is still
 * the current one; a lease of an ended window is gone. */
static void
give_back(struct rentry *e, int64_t taken_ms, int64_t n)
{
    int64_t w = taken_ms - taken_ms % WINDOW_MS;
    if (e->window == w && n > 0) {
        e->allowance += n;
        e->taken = e->taken > n ? e->taken - n : 0;
    }
}

void
pr_rate_untake_n(struct pr_rate *r, int64_t key_id, int64_t taken_ms,
                 int64_t n)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    struct rentry *e = rfind(r, key_id);
    if (e) {
        if (n > e->per_min)
            n = e->per_min; /* what take_n took */
        give_back(e, taken_ms, n < 1 ? 1 : n);
    }
    pthread_mutex_unlock(&r->mu);
}

void
pr_rate_untake(struct pr_rate *r, int64_t key_id, int64_t now_ms)
{
    pr_rate_untake_n(r, key_id, now_ms, 1);
}

void
pr_rate_settle(struct pr_rate *r, int64_t key_id, int64_t taken_ms,
               int64_t reserved, int64_t actual, int64_t now_ms)
{
    if (!r || reserved < 0 || actual < 0)
        return;
    pthread_mutex_lock(&r->mu);
    struct rentry *e = rfind(r, key_id);
    if (!e)
        goto out;
    if (actual < reserved) {
        give_back(e, taken_ms, reserved - actual);
        goto out;
    }
    /* More than estimated: a charge on the current lease, a debt when it
     * runs out (capped like the local bucket's: at most 2 x the limit). */
    int64_t over = actual - reserved;
    to_window(e, now_ms - now_ms % WINDOW_MS);
    if (over > 2 * e->per_min)
        over = 2 * e->per_min;
    e->allowance -= over;
    if (e->allowance < -2 * e->per_min)
        e->allowance = -2 * e->per_min;
    e->taken += over;
out:
    pthread_mutex_unlock(&r->mu);
}

/* The row of rate_windows a key's counts are under. */
static int64_t
row_id(const struct pr_rate *r, int64_t key_id)
{
    return r->tokens ? -key_id : key_id;
}

enum gx_status
pr_rate_sync(struct pr_rate *r, int64_t now_ms, char *err, size_t errlen)
{
    if (!r)
        return GX_OK;
    int64_t w = now_ms - now_ms % WINDOW_MS;
    struct pr_lease_item *it = NULL;
    size_t n = 0, cap = 0;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&r->mu);
    for (struct rentry *e = r->all; e; e = e->next) {
        if (!pr_lease_items_room(&it, n, &cap)) {
            st = GX_ENOMEM;
            break;
        }
        to_window(e, w);
        int64_t target = e->per_min / 16;
        if (2 * (e->taken + e->refused) > target)
            target = 2 * (e->taken + e->refused);
        if (target < 1)
            target = 1;
        if (target > e->per_min)
            target = e->per_min;
        struct pr_lease_item *x = &it[n++];
        memset(x, 0, sizeof(*x));
        x->key_id = row_id(r, e->key_id);
        x->limit = e->per_min;
        if (e->allowance < target && e->exhausted != w) {
            x->want = target - e->allowance; /* and any debt */
        } else if (e->allowance > 2 * target) {
            x->give_back = e->allowance - target;
            e->allowance -= x->give_back; /* ours first */
        }
        e->taken = e->refused = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (st == GX_OK && n > 0)
        st = pr_pg_rate_sync(r->database, w, it, n, err, errlen);
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        struct rentry *e = rfind(r, row_id(r, it[i].key_id));
        if (!e || e->window != w || !it[i].done)
            continue;
        e->allowance += it[i].granted;
        if (it[i].want > 0 && it[i].granted < it[i].want)
            e->exhausted = w;
    }
    pthread_mutex_unlock(&r->mu);
    free(it);
    return st;
}
