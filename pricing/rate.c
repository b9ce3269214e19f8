/*
 * rate.c: requests-per-minute across instances, leased from PostgreSQL
 * (see pricing.h, pr_rate).  The gateway's own token buckets keep
 * smoothing per instance; this adds the cluster-wide count.
 *
 * Windows are fixed UTC minutes.  rate_windows(key_id, window_ms, used)
 * counts what all instances leased in a window; a lease is taken under
 * the row's lock and never past the limit, so per window the cluster
 * admits at most rpm requests (over any sliding 60 s, at most 2 x rpm:
 * the end of one window and the start of the next).  Per request only
 * memory is touched: one counter under the table mutex.  pr_rate_sync
 * (aux thread, every second) leases what the last second's demand needs
 * (twice what was taken and refused, at least rpm/16) and gives back
 * what an idle instance holds beyond that, so one instance alone grows
 * to the whole limit within a few seconds of demand, and several share
 * it.  A lease dies with its window, and with its instance (kill -9
 * loses at most that instance's unused part of one window: a refusal,
 * never an excess).
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
    int64_t allowance; /* leased, not yet taken */
    int64_t taken, refused; /* since the last sync */
    int64_t exhausted; /* window whose cluster limit is spent, or -1 */
};

struct pr_rate {
    pthread_mutex_t mu;
    struct rentry *all; /* a list: syncs walk it; takes search it */
    char *database;
};

struct pr_rate *
pr_rate_new(const char *database)
{
    struct pr_rate *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->database = strdup(database ? database : "");
    if (!r->database) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    return r;
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
pr_rate_take(struct pr_rate *r, int64_t key_id, int64_t now_ms,
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
    if (e->window != w) { /* a lease ends with its window */
        e->window = w;
        e->allowance = 0;
    }
    if (e->allowance > 0) {
        e->allowance--;
        e->taken++;
        goto out;
    }
    e->refused++;
    st = GX_EAGAIN;
    if (retry_s) /* spent cluster-wide: next window; else next sync */
        *retry_s = e->exhausted == w ? (w + WINDOW_MS - now_ms + 999) / 1000
                                     : 1;
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

void
pr_rate_untake(struct pr_rate *r, int64_t key_id, int64_t now_ms)
{
    if (!r)
        return;
    int64_t w = now_ms - now_ms % WINDOW_MS;
    pthread_mutex_lock(&r->mu);
    struct rentry *e = rfind(r, key_id);
    if (e && e->window == w) {
        e->allowance++;
        if (e->taken > 0)
            e->taken--;
    }
    pthread_mutex_unlock(&r->mu);
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
        if (e->window != w) {
            e->window = w;
            e->allowance = 0;
        }
        int64_t target = e->per_min / 16;
        if (2 * (e->taken + e->refused) > target)
            target = 2 * (e->taken + e->refused);
        if (target < 1)
            target = 1;
        if (target > e->per_min)
            target = e->per_min;
        struct pr_lease_item *x = &it[n++];
        memset(x, 0, sizeof(*x));
        x->key_id = e->key_id;
        x->limit = e->per_min;
        if (e->allowance < target && e->exhausted != w) {
            x->want = target - e->allowance;
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
        struct rentry *e = rfind(r, it[i].key_id);
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
