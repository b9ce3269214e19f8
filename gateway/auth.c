/*
 * auth: bearer keys, rate limits and budgets for every request, and the
 * aux thread that does the gateway's blocking work (admin writes, usage
 * queries, key reloads) off the event loops.
 *
 * Per request nothing here touches the disk: the presented secret is
 * hashed (SHA-256) and looked up in an in-memory table under a read lock.
 * Secrets are high-entropy, so a plain hash (no salt, no KDF) is the
 * right tool: nobody can brute-force 256 random bits, and a fast hash
 * keeps the check in microseconds.  Lookup is by digest, so the table's
 * timing reveals nothing usable about the secret; the admin key, which is
 * compared rather than looked up, goes through CRYPTO_memcmp on digests.
 *
 * Rate limits: two token buckets per key (requests, tokens) behind the
 * key's own mutex, so a check-and-take is one critical section and the
 * limits hold exactly across workers; over PostgreSQL also pricing's
 * pr_rate leases (requests and tokens across instances).  Budgets:
 * pricing's pr_budget (reserve the worst case before routing, settle the
 * actual cost after).
 *
 * Key entries are never freed before gw_auth_free: a revoked key stays in
 * the table flagged, so a request that holds a pointer to it (a ticket)
 * stays valid.  The table only grows by keys created; that is a few
 * hundred bytes a key.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "gw_int.h"

#define TICKS_PER_UNIT 60000000LL /* 60 s in microseconds */
#define LIMIT_MAX 1000000000LL    /* rpm/tpm cap: keeps ticks in int64 */
#define RELOAD_MS 1000 /* the keys table is re-read this often: a key
                          created or revoked by another instance (or the
                          CLI) takes effect here within 1 s + one read */
#define AUX_QUEUE_MAX 256 /* jobs waiting for the aux thread; more: 503 */

/* ------------------------------------------------------------------ */
/* Key material.                                                        */

static const char base62[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

enum gx_status
gw_key_generate(char *out, size_t outlen)
{
    size_t plen = sizeof(GW_KEY_PREFIX) - 1;
    if (outlen < GW_KEY_LEN + 1)
        return GX_EINVAL;
    memcpy(out, GW_KEY_PREFIX, plen);
    size_t n = 0;
    unsigned char buf[64];
    while (n < GW_KEY_RANDOM_LEN) {
        if (RAND_bytes(buf, sizeof(buf)) != 1)
            return GX_EIO;
        /* Rejection sampling: 248 = 4 x 62, so every kept byte maps to a
         * base62 digit with equal probability (no modulo bias). */
        for (size_t i = 0; i < sizeof(buf) && n < GW_KEY_RANDOM_LEN; i++)
            if (buf[i] < 248)
                out[plen + n++] = base62[buf[i] % 62];
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    out[plen + n] = '\0';
    return GX_OK;
}

void
gw_key_hash(const char *s, size_t n, unsigned char out[32], char *hex)
{
    unsigned int len = 32;
    if (EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) != 1 || len != 32)
        memset(out, 0, 32); /* cannot happen with the default provider;
                               all-zero matches no stored key */
    if (hex) {
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", out[i]);
    }
}

int
gw_key_well_formed(const char *s, size_t n)
{
    size_t plen = sizeof(GW_KEY_PREFIX) - 1;
    if (!s || n < plen + GW_KEY_MIN_RANDOM || n > plen + GW_KEY_MAX_RANDOM ||
        memcmp(s, GW_KEY_PREFIX, plen) != 0)
        return 0;
    for (size_t i = plen; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z')))
            return 0;
    }
    return 1;
}

int
gw_admin_equal(const char *admin, const char *presented, size_t n)
{
    if (!admin || !admin[0] || !presented)
        return 0;
    unsigned char a[32], b[32];
    gw_key_hash(admin, strlen(admin), a, NULL);
    gw_key_hash(presented, n, b, NULL);
    return CRYPTO_memcmp(a, b, 32) == 0;
}

/* ------------------------------------------------------------------ */
/* Token buckets.                                                       */

void
gw_bucket_init(struct gw_bucket *b, int64_t per_min, int64_t now_us)
{
    if (per_min < 0)
        per_min = 0;
    if (per_min > LIMIT_MAX)
        per_min = LIMIT_MAX;
    b->per_min = per_min;
    b->level = per_min * TICKS_PER_UNIT; /* starts full */
    b->last_us = now_us;
}

static void
refill(struct gw_bucket *b, int64_t now_us)
{
    int64_t cap = b->per_min * TICKS_PER_UNIT;
    if (now_us > b->last_us) {
        int64_t dt = now_us - b->last_us;
        /* dt * per_min overflows only after ~2.9 hours at the cap;
         * saturate instead. */
        int64_t add;
        if (__builtin_mul_overflow(dt, b->per_min, &add) ||
            __builtin_add_overflow(b->level, add, &b->level) ||
            b->level > cap)
            b->level = cap;
        b->last_us = now_us;
    }
}

int
gw_bucket_take(struct gw_bucket *b, int64_t n, int64_t now_us,
               int64_t *retry_after_s)
{
    if (b->per_min == 0)
        return 1;
    if (n > b->per_min)
        n = b->per_min;
    if (n < 0)
        n = 0;
    refill(b, now_us);
    int64_t need = n * TICKS_PER_UNIT;
    if (b->level >= need) {
        b->level -= need;
        return 1;
    }
    if (retry_after_s) {
        /* Ticks missing / ticks per microsecond, rounded up to seconds. */
        int64_t us = (need - b->level + b->per_min - 1) / b->per_min;
        int64_t s = (us + 999999) / 1000000;
        *retry_after_s = s < 1 ? 1 : s;
    }
    return 0;
}

void
gw_bucket_adjust(struct gw_bucket *b, int64_t n, int64_t now_us)
{
    if (b->per_min == 0 || n == 0)
        return;
    refill(b, now_us);
    int64_t cap = b->per_min * TICKS_PER_UNIT;
    /* Bounded both ways: a huge overrun makes the key wait at most two
     * minutes, never forever. */
    if (n > 2 * b->per_min)
        n = 2 * b->per_min;
    if (n < -b->per_min)
        n = -b->per_min;
    b->level -= n * TICKS_PER_UNIT;
    if (b->level > cap)
        b->level = cap;
    if (b->level < -cap)
        b->level = -cap;
}

/* ------------------------------------------------------------------ */
/* The key table.                                                       */

struct gw_key {
    struct gw_key *next;    /* chain by digest */
    struct gw_key *next_id; /* chain by id */
    struct gw_key *all;     /* every entry, for free */
    int64_t id;
    unsigned char hash[32];
    char name[128];
    int64_t expires_ms; /* -1 never */
    atomic_llong revoked_ms; /* -1 active */
    char **models;      /* NULL = every model */
    size_t n_models;
    pthread_mutex_t mu; /* the buckets */
    struct gw_bucket rpm, tpm;
};

struct aux_job;

struct gw_auth {
    pthread_rwlock_t lk;
    struct gw_key **slots;    /* by digest */
    struct gw_key **id_slots; /* by id (reloads, revocations) */
    size_t nslots;            /* of each; a power of two */
    struct gw_key *all;
    size_t n;
    struct pr_budget *budget;
    struct pr_rate *rate; /* PostgreSQL: RPM across instances, else NULL */
    struct pr_rate *trate; /* PostgreSQL: TPM across instances, else NULL */
    char *admin_key;
    int require_keys;
    char *db_path;
    /* aux thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct aux_job *head, *tail;
    size_t queued; /* jobs in head..tail */
    int stop;
    int running;
    pthread_t thread;
    struct gw_server *srv; /* set by gw_aux_submit's first caller */
};

static size_t
slot_of(const struct gw_auth *a, const unsigned char *hash)
{
    uint64_t h;
    memcpy(&h, hash, sizeof(h));
    return (size_t)h & (a->nslots - 1);
}

/* Read or write lock held. */
static struct gw_key *
find_hash(struct gw_auth *a, const unsigned char *hash)
{
    for (struct gw_key *k = a->slots[slot_of(a, hash)]; k; k = k->next)
        if (CRYPTO_memcmp(k->hash, hash, 32) == 0)
            return k;
    return NULL;
}

static size_t
id_slot_of(const struct gw_auth *a, int64_t id)
{
    return (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32) &
           (a->nslots - 1);
}

/* Read or write lock held. */
static struct gw_key *
find_id(struct gw_auth *a, int64_t id)
{
    for (struct gw_key *k = a->id_slots[id_slot_of(a, id)]; k; k = k->next_id)
        if (k->id == id)
            return k;
    return NULL;
}

static void
link_key(struct gw_auth *a, struct gw_key *k)
{
    size_t s = slot_of(a, k->hash), t = id_slot_of(a, k->id);
    k->next = a->slots[s];
    a->slots[s] = k;
    k->next_id = a->id_slots[t];
    a->id_slots[t] = k;
}

/* Doubles both tables, relinking from the list of all keys; on allocation
 * failure keeps the old ones (longer chains, still correct).  Write lock
 * held. */
static void
grow(struct gw_auth *a)
{
    size_t nn = a->nslots * 2;
    struct gw_key **ns = calloc(nn, sizeof(*ns));
    struct gw_key **ni = calloc(nn, sizeof(*ni));
    if (!ns || !ni) {
        free(ns);
        free(ni);
        return;
    }
    free(a->slots);
    free(a->id_slots);
    a->slots = ns;
    a->id_slots = ni;
    a->nslots = nn;
    for (struct gw_key *k = a->all; k; k = k->all)
        link_key(a, k);
}

static void
key_free(struct gw_key *k)
{
    for (size_t i = 0; i < k->n_models; i++)
        free(k->models[i]);
    free(k->models);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* Splits "a,b , c" into trimmed names; empty list -> NULL (every model). */
static int
split_models(const char *s, char ***out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!s)
        return 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    char **v = calloc(cap, sizeof(*v));
    if (!v)
        return -1;
    size_t n = 0;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, ',');
        if (!e)
            e = p + strlen(p);
        const char *b = p, *t = e;
        while (b < t && (*b == ' ' || *b == '\t'))
            b++;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if (t > b) {
            v[n] = strndup(b, (size_t)(t - b));
            if (!v[n]) {
                for (size_t i = 0; i < n; i++)
                    free(v[i]);
                free(v);
                return -1;
            }
            n++;
        }
        p = *e ? e + 1 : e;
    }
    if (n == 0) {
        free(v);
        return 0;
    }
    *out = v;
    *n_out = n;
    return 0;
}

/* A key we already have (a reload): only its revocation can move; its
 * buckets stay, tickets may point at them.  1 if found. */
static int
update_known(struct gw_auth *a, const struct pr_key *ks)
{
    struct gw_key *old = find_id(a, ks->id);
    if (old && ks->revoked_ms >= 0 && atomic_load(&old->revoked_ms) < 0)
        atomic_store(&old->revoked_ms, ks->revoked_ms);
    return old != NULL;
}

enum gx_status
gw_auth_put(struct gw_auth *a, const struct pr_key *ks)
{
    /* The periodic reload puts every row again: find the known ones
     * without allocating. */
    pthread_rwlock_rdlock(&a->lk);
    int known = update_known(a, ks);
    pthread_rwlock_unlock(&a->lk);
    if (known)
        return GX_OK;
    struct gw_key *k = calloc(1, sizeof(*k));
    if (!k)
        return GX_ENOMEM;
    k->id = ks->id;
    memcpy(k->hash, ks->hash, 32);
    snprintf(k->name, sizeof(k->name), "%s", ks->name ? ks->name : "");
    k->expires_ms = ks->expires_ms;
    atomic_store(&k->revoked_ms, ks->revoked_ms);
    if (split_models(ks->models, &k->models, &k->n_models) != 0) {
        free(k);
        return GX_ENOMEM;
    }
    pthread_mutex_init(&k->mu, NULL);
    int64_t now = gx_mono_us();
    gw_bucket_init(&k->rpm, ks->rpm, now);
    gw_bucket_init(&k->tpm, ks->tpm, now);

    pthread_rwlock_wrlock(&a->lk);
    if (update_known(a, ks)) { /* put meanwhile by another thread */
        pthread_rwlock_unlock(&a->lk);
        key_free(k);
        return GX_OK;
    }
    k->all = a->all;
    a->all = k;
    a->n++;
    if (a->n > a->nslots)
        grow(a); /* links k too */
    else
        link_key(a, k);
    pthread_rwlock_unlock(&a->lk);
    if (ks->revoked_ms < 0 && a->rate &&
        (pr_rate_set(a->rate, ks->id, ks->rpm) != GX_OK ||
         pr_rate_set(a->trate, ks->id, ks->tpm) != GX_OK))
        return GX_ENOMEM;
    if (ks->revoked_ms < 0)
        return pr_budget_set(a->budget, ks->id, ks->budget_pusd,
                             ks->spent_pusd < 0 ? 0 : ks->spent_pusd);
    return GX_OK;
}

void
gw_auth_revoke(struct gw_auth *a, int64_t id, int64_t revoked_ms)
{
    pthread_rwlock_rdlock(&a->lk);
    struct gw_key *k = find_id(a, id);
    if (k)
        atomic_store(&k->revoked_ms, revoked_ms < 0 ? 0 : revoked_ms);
    pthread_rwlock_unlock(&a->lk);
    pr_budget_remove(a->budget, id);
}

struct pr_budget *
gw_auth_budget(struct gw_auth *a)
{
    return a->budget;
}

const char *
gw_auth_db_path(const struct gw_auth *a)
{
    return a->db_path;
}

/* ------------------------------------------------------------------ */
/* Loading the keys table.                                              */

struct load_ctx {
    struct gw_auth *a;
    enum gx_status st;
};

static int
load_one(void *ud, const struct pr_key *pk)
{
    struct load_ctx *c = ud;
    c->st = gw_auth_put(c->a, pk);
    if (c->st != GX_OK)
        return 1;
    if (pk->revoked_ms >= 0)
        pr_budget_remove(c->a->budget, pk->id);
    return 0;
}

/* Reads every key row (pricing's keys table, either backend): new ones
 * are added, revocations applied. */
static enum gx_status
load_keys(struct gw_auth *a, char *err, size_t errlen)
{
    struct load_ctx c = {a, GX_OK};
    enum gx_status rs = pr_key_list(a->db_path, load_one, &c, err, errlen);
    if (rs == GX_ECANCELED) {
        gx_errf(err, errlen, "keys: %s", gx_status_str(c.st));
        rs = c.st;
    }
    return rs;
}

/* ------------------------------------------------------------------ */
/* The aux thread.                                                      */

struct aux_job {
    struct aux_job *next;
    struct gw_worker *w;
    struct gw_hreq *req;
    int gone;
    gw_aux_run_fn run;
    gw_aux_reply_fn reply;
    void *arg;
    struct event *ev;
};

static void *
aux_main(void *arg)
{
    struct gw_auth *a = arg;
    int64_t next_reload = gx_now_ms() + RELOAD_MS;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        if (a->head) {
            struct aux_job *j = a->head;
            a->head = j->next;
            if (!a->head)
                a->tail = NULL;
            a->queued--;
            pthread_mutex_unlock(&a->mu);
            j->run(j->w->srv, j->arg);
            event_active(j->ev, EV_READ, 0); /* back to the worker */
            pthread_mutex_lock(&a->mu);
            continue;
        }
        if (a->stop)
            break;
        int64_t now = gx_now_ms();
        if (now >= next_reload) {
            /* Keys created or revoked by `llmux keys` while we run. */
            pthread_mutex_unlock(&a->mu);
            char err[256];
            if (load_keys(a, err, sizeof(err)) != GX_OK)
                GX_LOG(GX_LOG_DEBUG, NULL, "key reload: %s", err);
            else if (pr_budget_sync(a->budget, err, sizeof(err)) != GX_OK ||
                     pr_rate_sync(a->rate, gx_now_ms(), err, sizeof(err)) !=
                         GX_OK ||
                     pr_rate_sync(a->trate, gx_now_ms(), err, sizeof(err)) !=
                         GX_OK)
                GX_LOG(GX_LOG_WARN, NULL, "budget/rate leases: %s", err);
            pthread_mutex_lock(&a->mu);
            next_reload = gx_now_ms() + RELOAD_MS;
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t wait_ms = next_reload - now;
        ts.tv_sec += wait_ms / 1000;
        ts.tv_nsec += (wait_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void
aux_on_close(struct gw_hreq *req, void *arg)
{
    (void)req;
    struct aux_job *j = arg;
    j->gone = 1;
    /* conn.c frees the request right after this callback. */
    j->req = NULL;
}

static void
aux_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct aux_job *j = arg;
    struct gw_worker *w = j->w;
    if (!j->gone) {
        gw_hreq_set_close_cb(j->req, NULL, NULL);
        j->reply(w->srv, j->req, j->arg);
    } else {
        j->reply(w->srv, NULL, j->arg);
    }
    event_free(j->ev);
    w->inflight--;
    free(j);
}

int
gw_aux_submit(struct gw_worker *w, struct gw_hreq *req,
              gw_aux_run_fn run, gw_aux_reply_fn reply, void *arg)
{
    struct gw_auth *a = w->srv->auth;
    if (!a || !a->running)
        return -1;
    /* Bounded: a flood of usage queries must not queue without limit
     * (nor delay admin writes by more than AUX_QUEUE_MAX jobs). */
    pthread_mutex_lock(&a->mu);
    int full = a->queued >= AUX_QUEUE_MAX;
    pthread_mutex_unlock(&a->mu);
    if (full)
        return -1;
    struct aux_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -1;
    j->w = w;
    j->req = req;
    j->run = run;
    j->reply = reply;
    j->arg = arg;
    j->ev = event_new(w->base, -1, 0, aux_done, j);
    if (!j->ev) {
        free(j);
        return -1;
    }
    gw_hreq_set_close_cb(req, aux_on_close, j);
    w->inflight++;
    pthread_mutex_lock(&a->mu);
    if (a->tail)
        a->tail->next = j;
    else
        a->head = j;
    a->tail = j;
    a->queued++;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Lifecycle.                                                           */

struct gw_auth *
gw_auth_new(const char *admin_key, int require_keys, const char *db_path,
            char *err, size_t errlen)
{
    struct gw_auth *a = calloc(1, sizeof(*a));
    if (!a)
        goto nomem;
    pthread_rwlock_init(&a->lk, NULL);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->require_keys = require_keys;
    a->nslots = 64;
    a->slots = calloc(a->nslots, sizeof(*a->slots));
    a->id_slots = calloc(a->nslots, sizeof(*a->id_slots));
    a->budget = pr_budget_new();
    if (!a->slots || !a->id_slots || !a->budget)
        goto nomem;
    if (admin_key && admin_key[0] && !(a->admin_key = strdup(admin_key)))
        goto nomem;
    if (db_path) {
        if (!(a->db_path = strdup(db_path)))
            goto nomem;
        if (pr_store_is_pg(db_path)) {
            /* Several instances share the budgets: lease them (pricing's
             * budget.c), under an id unique to this process. */
            unsigned char rnd[8];
            char inst[40];
            if (RAND_bytes(rnd, sizeof(rnd)) != 1)
                goto nomem;
            int n = snprintf(inst, sizeof(inst), "%ld-", (long)getpid());
            for (int i = 0; i < 8; i++)
                n += snprintf(inst + n, sizeof(inst) - (size_t)n, "%02x",
                              rnd[i]);
            if (pr_budget_use_leases(a->budget, db_path, inst) != GX_OK)
                goto nomem;
            if (!(a->rate = pr_rate_new(db_path)) ||
                !(a->trate = pr_rate_new_tokens(db_path)))
                goto nomem;
        }
        if (load_keys(a, err, errlen) != GX_OK)
            goto fail;
        if (pr_budget_sync(a->budget, err, errlen) != GX_OK ||
            pr_rate_sync(a->rate, gx_now_ms(), err, errlen) != GX_OK ||
            pr_rate_sync(a->trate, gx_now_ms(), err, errlen) != GX_OK)
            goto fail;
        if (pthread_create(&a->thread, NULL, aux_main, a) != 0) {
            gx_errf(err, errlen, "cannot start the auth thread");
            goto fail;
        }
        a->running = 1;
    }
    return a;
nomem:
    gx_errf(err, errlen, "out of memory");
fail:
    gw_auth_free(a);
    return NULL;
}

void
gw_auth_stop(struct gw_auth *a)
{
    if (!a || !a->running)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    a->running = 0;
}

void
gw_auth_free(struct gw_auth *a)
{
    if (!a)
        return;
    gw_auth_stop(a);
    struct gw_key *k = a->all;
    while (k) {
        struct gw_key *next = k->all;
        key_free(k);
        k = next;
    }
    free(a->slots);
    free(a->id_slots);
    char lerr[256];
    if (pr_budget_release_leases(a->budget, lerr, sizeof(lerr)) != GX_OK)
        GX_LOG(GX_LOG_WARN, NULL, "budget leases not given back: %s", lerr);
    pr_budget_free(a->budget);
    pr_rate_free(a->rate);
    pr_rate_free(a->trate);
    if (a->admin_key) {
        OPENSSL_cleanse(a->admin_key, strlen(a->admin_key));
        free(a->admin_key);
    }
    free(a->db_path);
    pthread_rwlock_destroy(&a->lk);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* ------------------------------------------------------------------ */
/* Identification and admission.                                        */

static void
refuse(struct gw_authn *out, const char *fmt)
{
    out->who = GW_CALLER_NONE;
    out->status = 401;
    out->code = "invalid_api_key";
    snprintf(out->message, sizeof(out->message), "%s", fmt);
}

void
gw_auth_identify(struct gw_auth *a, const char *authorization,
                 int64_t now_ms, struct gw_authn *out)
{
    memset(out, 0, sizeof(*out));
    out->key_id = -1;
    if (!authorization || !authorization[0]) {
        if (a->require_keys) {
            refuse(out, "You didn't provide an API key. Send it as "
                        "'Authorization: Bearer sk-llmux-...'.");
            return;
        }
        out->who = GW_CALLER_ANON;
        return;
    }
    /* "Bearer <token>", scheme case-insensitive (RFC 7235). */
    if (strncasecmp(authorization, "Bearer ", 7) != 0) {
        refuse(out, "Malformed Authorization header; expected "
                    "'Bearer sk-llmux-...'.");
        return;
    }
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    while (n && tok[n - 1] == ' ')
        n--;
    if (a->admin_key && gw_admin_equal(a->admin_key, tok, n)) {
        out->who = GW_CALLER_ADMIN;
        return;
    }
    if (!gw_key_well_formed(tok, n)) {
        /* Never echo what was sent: it may be someone's secret. */
        refuse(out, "Incorrect API key provided: llmux keys look like "
                    "sk-llmux- followed by at least 32 letters and digits.");
        return;
    }
    unsigned char h[32];
    gw_key_hash(tok, n, h, NULL);
    pthread_rwlock_rdlock(&a->lk);
    struct gw_key *k = find_hash(a, h);
    pthread_rwlock_unlock(&a->lk);
    if (!k) {
        refuse(out, "Incorrect API key provided.");
        return;
    }
    if (atomic_load(&k->revoked_ms) >= 0) {
        refuse(out, "This API key has been revoked.");
        return;
    }
    if (k->expires_ms >= 0 && now_ms >= k->expires_ms) {
        refuse(out, "This API key has expired.");
        return;
    }
    out->who = GW_CALLER_KEY;
    out->key = k;
    out->key_id = k->id;
}

int
gw_key_allows(const struct gw_key *k, const char *model)
{
    if (!k || !k->models)
        return 1;
    if (!model)
        return 0;
    /* An entry allows itself, and a bare model name allows its targets
     * (gpt-4.1 allows gpt-4.1@relay).  "*" allows everything. */
    const char *at = strrchr(model, '@');
    size_t mlen = at ? (size_t)(at - model) : strlen(model);
    for (size_t i = 0; i < k->n_models; i++) {
        const char *e = k->models[i];
        if (!strcmp(e, "*") || !strcmp(e, model))
            return 1;
        if (at && strlen(e) == mlen && !memcmp(e, model, mlen))
            return 1;
    }
    return 0;
}

int
gw_key_restricted(const struct gw_key *k)
{
    if (!k || !k->models)
        return 0;
    for (size_t i = 0; i < k->n_models; i++)
        if (!strcmp(k->models[i], "*"))
            return 0;
    return 1;
}

void
gw_auth_precheck(struct gw_auth *a, const char *authorization,
                 const char *model, int64_t now_ms, struct gw_authn *an,
                 struct gw_refusal *ref)
{
    memset(ref, 0, sizeof(*ref));
    gw_auth_identify(a, authorization, now_ms, an);
    if (an->who == GW_CALLER_NONE) {
        ref->status = an->status;
        ref->type = "invalid_request_error";
        ref->code = an->code;
        snprintf(ref->message, sizeof(ref->message), "%s", an->message);
        return;
    }
    if (an->who == GW_CALLER_ADMIN) {
        /* Least privilege: the admin secret manages keys; it is not a
         * spending key (no budget, no limits), so it is refused here. */
        ref->status = 401;
        ref->type = "invalid_request_error";
        ref->code = "invalid_api_key";
        snprintf(ref->message, sizeof(ref->message),
                 "The admin key only works on /admin routes and /v1/usage; "
                 "create a key with POST /admin/keys for chat requests.");
        return;
    }
    if (an->who == GW_CALLER_KEY && !gw_key_allows(an->key, model)) {
        ref->status = 403;
        ref->type = "invalid_request_error";
        ref->code = "model_not_allowed";
        snprintf(ref->message, sizeof(ref->message),
                 "This key may not use the model '%.80s'.", model);
    }
}

void
gw_auth_admit(struct gw_auth *a, const char *authorization,
              const char *model, int64_t est_tokens, int64_t max_cost_pusd,
              int64_t now_ms, struct gw_ticket *t, struct gw_refusal *ref)
{
    memset(t, 0, sizeof(*t));
    t->key_id = -1;
    struct gw_authn an;
    gw_auth_precheck(a, authorization, model, now_ms, &an, ref);
    if (ref->status)
        return;
    if (an.who == GW_CALLER_ANON) {
        t->active = 1;
        return;
    }
    struct gw_key *k = an.key;
    int64_t now_us = gx_mono_us(), retry = 0;
    if (est_tokens < 1)
        est_tokens = 1;
    pthread_mutex_lock(&k->mu);
    int ok_rpm = gw_bucket_take(&k->rpm, 1, now_us, &retry);
    int ok_tpm = ok_rpm && gw_bucket_take(&k->tpm, est_tokens, now_us, &retry);
    if (ok_rpm && !ok_tpm)
        gw_bucket_adjust(&k->rpm, -1, now_us);
    pthread_mutex_unlock(&k->mu);
    if (!ok_rpm || !ok_tpm) {
        ref->status = 429;
        ref->type = "requests";
        ref->code = "rate_limit_exceeded";
        ref->retry_after_s = retry;
        snprintf(ref->message, sizeof(ref->message),
                 "Rate limit reached for this key: %s per minute. Retry "
                 "after %lld s.",
                 ok_rpm ? "tokens" : "requests", (long long)retry);
        return;
    }
    int64_t take_tpm = est_tokens > k->tpm.per_min && k->tpm.per_min
                           ? k->tpm.per_min
                           : est_tokens;
    /* The cluster's counts for the key (PostgreSQL, rate.c). */
    int c_rpm = !k->rpm.per_min ||
                pr_rate_take(a->rate, k->id, now_ms, &retry) == GX_OK;
    int c_tpm = c_rpm && (!k->tpm.per_min ||
                          pr_rate_take_n(a->trate, k->id, now_ms, take_tpm,
                                         &retry) == GX_OK);
    if (!c_rpm || !c_tpm) {
        if (c_rpm && k->rpm.per_min)
            pr_rate_untake(a->rate, k->id, now_ms);
        pthread_mutex_lock(&k->mu);
        gw_bucket_adjust(&k->rpm, -1, now_us);
        gw_bucket_adjust(&k->tpm, -take_tpm, now_us);
        pthread_mutex_unlock(&k->mu);
        ref->status = 429;
        ref->type = "requests";
        ref->code = "rate_limit_exceeded";
        ref->retry_after_s = retry;
        snprintf(ref->message, sizeof(ref->message),
                 "Rate limit reached for this key across instances: "
                 "%s per minute. Retry after %lld s.",
                 c_rpm ? "tokens" : "requests", (long long)retry);
        return;
    }
    enum gx_status bs = pr_budget_reserve(a->budget, k->id,
                                          max_cost_pusd < 0 ? 0
                                                            : max_cost_pusd);
    if (bs != GX_OK) {
        if (k->rpm.per_min)
            pr_rate_untake(a->rate, k->id, now_ms);
        if (k->tpm.per_min)
            pr_rate_untake_n(a->trate, k->id, now_ms, take_tpm);
        pthread_mutex_lock(&k->mu);
        gw_bucket_adjust(&k->rpm, -1, now_us);
        gw_bucket_adjust(&k->tpm, -take_tpm, now_us);
        pthread_mutex_unlock(&k->mu);
        ref->status = 429;
        ref->type = "insufficient_quota";
        ref->code = "insufficient_quota";
        snprintf(ref->message, sizeof(ref->message),
                 "This key's budget is spent (or this request's worst-case "
                 "cost would exceed what is left).");
        return;
    }
    t->key = k;
    t->key_id = k->id;
    t->reserved_pusd = max_cost_pusd < 0 ? 0 : max_cost_pusd;
    t->tpm_reserved = k->tpm.per_min ? take_tpm : 0;
    t->admit_ms = now_ms;
    t->active = 1;
}

void
gw_ticket_settle(struct gw_auth *a, struct gw_ticket *t, int64_t tokens,
                 int64_t cost_pusd)
{
    if (!a || !t || !t->active)
        return;
    t->active = 0;
    if (!t->key)
        return;
    pr_budget_settle(a->budget, t->key_id, t->reserved_pusd,
                     cost_pusd < 0 ? 0 : cost_pusd);
    if (t->key->tpm.per_min) {
        int64_t now_us = gx_mono_us();
        pthread_mutex_lock(&t->key->mu);
        gw_bucket_adjust(&t->key->tpm, tokens - t->tpm_reserved, now_us);
        pthread_mutex_unlock(&t->key->mu);
        pr_rate_settle(a->trate, t->key_id, t->admit_ms, t->tpm_reserved,
                       tokens < 0 ? 0 : tokens, gx_now_ms());
    }
}

/* ------------------------------------------------------------------ */
/* The chat hook.                                                       */

int
gw_chat_admit(struct gw_server *srv, struct gw_hreq *req, const char *model,
              int64_t est_tokens, int64_t max_cost, struct gw_ticket *t)
{
    if (!pr_ledger_available(srv->ledger)) {
        /* PostgreSQL unreachable, fail-closed: nothing we serve now could
         * be logged or charged. */
        gw_obs_refused(srv, req, 503, model,
                       "storage_unavailable"); /* before the reply */
        gw_reply_error(req, 503, "server_error", "storage_unavailable", NULL,
                       "The usage database is unreachable, so llmux cannot "
                       "record this request; retry shortly.");
        atomic_fetch_add(&srv->stats.errors, 1);
        return -1;
    }
    if (!srv->auth) { /* no auth configured (embedded/tests): anonymous */
        memset(t, 0, sizeof(*t));
        t->key_id = -1;
        return 0;
    }
    const char *authz = gw_hreq_credentials(req);
    struct gw_refusal ref;
    gw_auth_admit(srv->auth, authz, model, est_tokens, max_cost,
                  gx_now_ms(), t, &ref);
    if (ref.status == 0)
        return 0;
    struct gw_hreq *h = req;
    if (ref.retry_after_s > 0) {
        char ra[32];
        snprintf(ra, sizeof(ra), "%lld", (long long)ref.retry_after_s);
        gw_hreq_add_header(h, "Retry-After", ra);
    }
    if (ref.status == 401)
        gw_hreq_add_header(h, "WWW-Authenticate", "Bearer realm=\"llmux\"");
    gw_obs_refused(srv, req, ref.status, model,
                   ref.code); /* before the reply */
    gw_reply_error(req, ref.status, ref.type, ref.code, NULL, "%s",
                   ref.message);
    atomic_fetch_add(&srv->stats.errors, 1);
    return -1;
}
