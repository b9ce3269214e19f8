/*
 * Unit tests of gateway/auth.c and the keys table functions of admin.c:
 * key format and randomness, SHA-256, constant-time admin compare, token
 * buckets (exact arithmetic, and exact under threads), identification of
 * every kind of bad key, allowlists, admission order (all or nothing),
 * budgets under threads, and the keys table on a real SQLite file holding
 * no plaintext.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gateway/gw_int.h"
#include "harness.h"
#include "lib/e2e.h"

static void
test_key_format(void)
{
    char keys[50][GW_KEY_LEN + 1];
    for (int i = 0; i < 50; i++) {
        T_EQ_INT(gw_key_generate(keys[i], sizeof(keys[i])), GX_OK);
        T_EQ_INT(strlen(keys[i]), GW_KEY_LEN);
        T_CHECK(!strncmp(keys[i], "sk-llmux-", 9));
        T_CHECK(strlen(keys[i]) - 9 >= 32);
        T_CHECK(gw_key_well_formed(keys[i], strlen(keys[i])));
    }
    int dup = 0, bad = 0;
    int seen[128] = {0};
    for (int i = 0; i < 50; i++) {
        for (int j = 0; j < i; j++)
            dup += !strcmp(keys[i], keys[j]);
        for (const char *p = keys[i] + 9; *p; p++) {
            int c = (unsigned char)*p;
            bad += !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z'));
            seen[c & 127] = 1;
        }
    }
    T_EQ_INT(dup, 0);
    T_EQ_INT(bad, 0);
    /* 50 x 43 draws from 62 symbols: every symbol shows up (a biased or
     * broken generator, e.g. hex only, would not). */
    int distinct = 0;
    for (int c = 0; c < 128; c++)
        distinct += seen[c];
    T_EQ_INT(distinct, 62);
    /* Too small a buffer is refused, not overflowed. */
    char small[20];
    T_EQ_INT(gw_key_generate(small, sizeof(small)), GX_EINVAL);

    /* Malformed: wrong prefix, truncated below 32, bad characters. */
    char k[GW_KEY_LEN + 1];
    strcpy(k, keys[0]);
    T_CHECK(!gw_key_well_formed("", 0));
    T_CHECK(!gw_key_well_formed(NULL, 0));
    T_CHECK(!gw_key_well_formed(k, 9 + 31));
    T_CHECK(gw_key_well_formed(k, 9 + 32));
    k[1] = 'x'; /* sx-llmux- */
    T_CHECK(!gw_key_well_formed(k, strlen(k)));
    strcpy(k, keys[0]);
    k[20] = '-';
    T_CHECK(!gw_key_well_formed(k, strlen(k)));
    k[20] = '\0';
    T_CHECK(!gw_key_well_formed(k, 21));
    const char *other = "sk-proj-0123456789abcdefghijklmnopqrstuvwxyzABCD";
    T_CHECK(!gw_key_well_formed(other, strlen(other)));
    char huge[300];
    memset(huge, 'a', sizeof(huge));
    memcpy(huge, "sk-llmux-", 9);
    T_CHECK(!gw_key_well_formed(huge, sizeof(huge)));
}

static void
test_hash(void)
{
    unsigned char h[32];
    char hex[65];
    gw_key_hash("abc", 3, h, hex);
    T_EQ_STR(hex,
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    gw_key_hash("", 0, h, hex);
    T_EQ_STR(hex,
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void
test_admin_equal(void)
{
    const char *adm = "admin-secret-0123456789";
    T_CHECK(gw_admin_equal(adm, adm, strlen(adm)));
    T_CHECK(!gw_admin_equal(adm, "admin-secret-0123456788", 23));
    T_CHECK(!gw_admin_equal(adm, adm, strlen(adm) - 1)); /* prefix */
    T_CHECK(!gw_admin_equal(adm, "admin-secret-01234567890", 24));
    T_CHECK(!gw_admin_equal(adm, "", 0));
    T_CHECK(!gw_admin_equal("", "", 0)); /* no admin key: nobody */
    T_CHECK(!gw_admin_equal(NULL, "x", 1));
    T_CHECK(!gw_admin_equal(adm, NULL, 0));
}

static void
test_bucket(void)
{
    struct gw_bucket b;
    int64_t ra = 0, t0 = 1000000;
    gw_bucket_init(&b, 60, t0); /* one a second, burst 60 */
    int ok = 0;
    for (int i = 0; i < 100; i++)
        ok += gw_bucket_take(&b, 1, t0, &ra);
    T_EQ_INT(ok, 60);
    T_EQ_INT(ra, 1);
    /* 0.999999 s later: still nothing; 1 s later: exactly one. */
    T_EQ_INT(gw_bucket_take(&b, 1, t0 + 999999, &ra), 0);
    T_EQ_INT(gw_bucket_take(&b, 1, t0 + 1000000, &ra), 1);
    T_EQ_INT(gw_bucket_take(&b, 1, t0 + 1000000, &ra), 0);
    /* Ten seconds refill ten. */
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += gw_bucket_take(&b, 1, t0 + 11000000, &ra);
    T_EQ_INT(ok, 10);
    /* Never above the cap after a long idle. */
    ok = 0;
    for (int i = 0; i < 100; i++)
        ok += gw_bucket_take(&b, 1, t0 + 3600000000LL, &ra);
    T_EQ_INT(ok, 60);

    /* rpm 1: the retry after a take is a minute. */
    gw_bucket_init(&b, 1, 0);
    T_EQ_INT(gw_bucket_take(&b, 1, 0, &ra), 1);
    T_EQ_INT(gw_bucket_take(&b, 1, 0, &ra), 0);
    T_EQ_INT(ra, 60);
    T_EQ_INT(gw_bucket_take(&b, 1, 30000000, &ra), 0);
    T_EQ_INT(ra, 30);

    /* Unlimited. */
    gw_bucket_init(&b, 0, 0);
    for (int i = 0; i < 1000; i++)
        ok = gw_bucket_take(&b, 1000000, 0, &ra);
    T_EQ_INT(ok, 1);

    /* TPM: a request bigger than the bucket passes on a full bucket;
     * debits after the fact go negative, credits stop at full. */
    gw_bucket_init(&b, 100, 0);
    T_EQ_INT(gw_bucket_take(&b, 500, 0, &ra), 1);
    T_EQ_INT(gw_bucket_take(&b, 1, 0, &ra), 0);
    gw_bucket_init(&b, 100, 0);
    T_EQ_INT(gw_bucket_take(&b, 60, 0, &ra), 1);
    gw_bucket_adjust(&b, 90, 0); /* it used 150: 50 in debt */
    T_EQ_INT(gw_bucket_take(&b, 1, 0, &ra), 0);
    T_EQ_INT(ra, 31); /* 51 tokens at 100/min = 30.6 s */
    gw_bucket_adjust(&b, -1000, 0); /* one credit is at most a minute's */
    T_EQ_INT(gw_bucket_take(&b, 100, 0, &ra), 0);
    gw_bucket_adjust(&b, -1000, 0);
    T_EQ_INT(gw_bucket_take(&b, 100, 0, &ra), 1);
    T_EQ_INT(gw_bucket_take(&b, 1, 0, &ra), 0);
}

/* ---- the key table ---- */

static struct gw_auth *
auth_with_key(int64_t id, const char *secret, int64_t rpm, int64_t tpm,
              int64_t budget, const char *models, int64_t expires_ms)
{
    char err[256];
    struct gw_auth *a = gw_auth_new("admin-secret-xyz", 1, NULL, err,
                                    sizeof(err));
    if (!a)
        return NULL;
    struct pr_key k;
    memset(&k, 0, sizeof(k));
    k.id = id;
    k.name = "t";
    gw_key_hash(secret, strlen(secret), k.hash, NULL);
    k.expires_ms = expires_ms;
    k.revoked_ms = -1;
    k.budget_pusd = budget;
    k.rpm = rpm;
    k.tpm = tpm;
    k.models = models;
    gw_auth_put(a, &k);
    return a;
}

static char *
bearer(const char *secret)
{
    static char b[512];
    size_t n = strlen(secret);
    if (n > sizeof(b) - 8)
        n = sizeof(b) - 8;
    memcpy(b, "Bearer ", 7);
    memcpy(b + 7, secret, n);
    b[7 + n] = '\0';
    return b;
}

static void
test_identify(void)
{
    char s[GW_KEY_LEN + 1], other[GW_KEY_LEN + 1];
    gw_key_generate(s, sizeof(s));
    gw_key_generate(other, sizeof(other));
    struct gw_auth *a = auth_with_key(7, s, 0, 0, -1, NULL, -1);
    T_CHECK(a != NULL);
    if (!a)
        return;
    struct gw_authn an;
    int64_t now = gx_now_ms();
    gw_auth_identify(a, bearer(s), now, &an);
    T_EQ_INT(an.who, GW_CALLER_KEY);
    T_EQ_INT(an.key_id, 7);
    gw_auth_identify(a, "bearer   admin-secret-xyz  ", now, &an);
    T_EQ_INT(an.who, GW_CALLER_ADMIN);

    const char *bad[] = {NULL, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ",
                         "Bearer sk-llmux-short", "Bearer admin-secret-xy",
                         "Token sk-llmux-0123456789abcdefghijklmnopqrstuvwxyz"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gw_auth_identify(a, bad[i], now, &an);
        T_EQ_INT(an.who, GW_CALLER_NONE);
        T_EQ_INT(an.status, 401);
        T_EQ_STR(an.code, "invalid_api_key");
    }
    /* Unknown, truncated by one, wrong prefix: refused, never echoed. */
    gw_auth_identify(a, bearer(other), now, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    T_CHECK(strstr(an.message, other + 9) == NULL);
    char t[GW_KEY_LEN + 1];
    strcpy(t, s);
    t[strlen(t) - 1] = '\0';
    gw_auth_identify(a, bearer(t), now, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    T_CHECK(strstr(an.message, t + 9) == NULL);
    strcpy(t, s);
    memcpy(t, "sk-llmuy-", 9);
    gw_auth_identify(a, bearer(t), now, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);

    /* Revoked: refused from then on. */
    gw_auth_revoke(a, 7, now);
    gw_auth_identify(a, bearer(s), now, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    T_CHECK(strstr(an.message, "revoked") != NULL);
    gw_auth_free(a);

    /* Expired. */
    a = auth_with_key(8, s, 0, 0, -1, NULL, now + 1000);
    gw_auth_identify(a, bearer(s), now + 999, &an);
    T_EQ_INT(an.who, GW_CALLER_KEY);
    gw_auth_identify(a, bearer(s), now + 1000, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    T_CHECK(strstr(an.message, "expired") != NULL);
    gw_auth_free(a);

    /* require_keys false: no key is anonymous, a bad key still fails. */
    char err[128];
    a = gw_auth_new(NULL, 0, NULL, err, sizeof(err));
    gw_auth_identify(a, NULL, now, &an);
    T_EQ_INT(an.who, GW_CALLER_ANON);
    T_EQ_INT(an.key_id, -1);
    gw_auth_identify(a, bearer(s), now, &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    /* No admin key configured: nothing is the admin. */
    gw_auth_identify(a, "Bearer ", now, &an);
    T_CHECK(an.who != GW_CALLER_ADMIN);
    gw_auth_free(a);
}

static void
test_allowlist(void)
{
    char s[GW_KEY_LEN + 1];
    gw_key_generate(s, sizeof(s));
    struct gw_auth *a =
        auth_with_key(1, s, 0, 0, -1, " main , gpt-4.1,,", -1);
    struct gw_authn an;
    gw_auth_identify(a, bearer(s), gx_now_ms(), &an);
    T_CHECK(gw_key_allows(an.key, "main"));
    T_CHECK(gw_key_allows(an.key, "gpt-4.1"));
    T_CHECK(gw_key_allows(an.key, "gpt-4.1@relay"));
    T_CHECK(!gw_key_allows(an.key, "gpt-4.1-mini"));
    T_CHECK(!gw_key_allows(an.key, "mai"));
    T_CHECK(!gw_key_allows(an.key, "cheap@relay"));
    T_CHECK(!gw_key_allows(an.key, ""));
    T_CHECK(!gw_key_allows(an.key, NULL));
    T_CHECK(gw_key_allows(NULL, "anything"));
    T_CHECK(gw_key_restricted(an.key));
    T_CHECK(!gw_key_restricted(NULL));
    gw_auth_free(a);
    a = auth_with_key(1, s, 0, 0, -1, "*", -1);
    gw_auth_identify(a, bearer(s), gx_now_ms(), &an);
    T_CHECK(gw_key_allows(an.key, "anything"));
    T_CHECK(!gw_key_restricted(an.key));
    gw_auth_free(a);
}

static void
test_admit(void)
{
    char s[GW_KEY_LEN + 1];
    gw_key_generate(s, sizeof(s));
    /* rpm 3, budget 100 pUSD, only "main". */
    struct gw_auth *a = auth_with_key(5, s, 3, 0, 100, "main", -1);
    struct gw_ticket t[4];
    struct gw_refusal r;
    int64_t now = gx_now_ms();

    gw_auth_admit(a, bearer(s), "other", 1, 1, now, &t[0], &r);
    T_EQ_INT(r.status, 403);
    T_EQ_STR(r.code, "model_not_allowed");
    gw_auth_admit(a, "Bearer admin-secret-xyz", "main", 1, 1, now, &t[0], &r);
    T_EQ_INT(r.status, 401); /* the admin key is not a chat key */
    gw_auth_admit(a, NULL, "main", 1, 1, now, &t[0], &r);
    T_EQ_INT(r.status, 401);

    /* Budget refusal takes no request from the RPM bucket. */
    gw_auth_admit(a, bearer(s), "main", 1, 101, now, &t[0], &r);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(r.code, "insufficient_quota");
    T_EQ_INT(r.retry_after_s, 0);
    for (int i = 0; i < 3; i++) {
        gw_auth_admit(a, bearer(s), "main", 1, 30, now, &t[i], &r);
        T_EQ_INT(r.status, 0);
        T_EQ_INT(t[i].key_id, 5);
    }
    int64_t lim, spent, res;
    T_EQ_INT(pr_budget_get(gw_auth_budget(a), 5, &lim, &spent, &res), GX_OK);
    T_EQ_INT(res, 90);
    gw_auth_admit(a, bearer(s), "main", 1, 1, now, &t[3], &r);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(r.code, "rate_limit_exceeded");
    T_CHECK(r.retry_after_s >= 1 && r.retry_after_s <= 20);
    /* Settle: actual 10 each; release the third; twice is harmless. */
    gw_ticket_settle(a, &t[0], 5, 10);
    gw_ticket_settle(a, &t[1], 5, 10);
    gw_ticket_settle(a, &t[2], 0, 0);
    gw_ticket_settle(a, &t[2], 0, 50);
    pr_budget_get(gw_auth_budget(a), 5, &lim, &spent, &res);
    T_EQ_INT(spent, 20);
    T_EQ_INT(res, 0);
    T_EQ_INT(lim, 100);
    gw_auth_free(a);

    /* TPM: 100 a minute; a 60-token estimate, then 60 more is refused;
     * settling the first at 10 tokens gives 50 back. */
    a = auth_with_key(6, s, 0, 100, -1, NULL, -1);
    gw_auth_admit(a, bearer(s), "m", 60, 0, now, &t[0], &r);
    T_EQ_INT(r.status, 0);
    gw_auth_admit(a, bearer(s), "m", 60, 0, now, &t[1], &r);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(r.code, "rate_limit_exceeded");
    T_CHECK(strstr(r.message, "tokens") != NULL);
    gw_ticket_settle(a, &t[0], 10, 0);
    gw_auth_admit(a, bearer(s), "m", 60, 0, now, &t[1], &r);
    T_EQ_INT(r.status, 0);
    gw_ticket_settle(a, &t[1], 60, 0);
    gw_auth_free(a);
}

static void
test_many_keys(void)
{
    /* 500 keys: the tables grow several times; each key is found by its
     * secret and by its id; putting one again changes nothing but a
     * revocation. */
    char err[128];
    struct gw_auth *a = gw_auth_new(NULL, 1, NULL, err, sizeof(err));
    static char secrets[500][GW_KEY_LEN + 1];
    for (int i = 0; i < 500; i++) {
        gw_key_generate(secrets[i], sizeof(secrets[i]));
        struct pr_key k;
        memset(&k, 0, sizeof(k));
        k.id = 1000 + i;
        k.name = "many";
        gw_key_hash(secrets[i], strlen(secrets[i]), k.hash, NULL);
        k.expires_ms = -1;
        k.revoked_ms = -1;
        k.budget_pusd = -1;
        T_EQ_INT(gw_auth_put(a, &k), GX_OK);
        if (i % 7 == 0) /* again: a reload */
            T_EQ_INT(gw_auth_put(a, &k), GX_OK);
    }
    int found = 0;
    struct gw_authn an;
    for (int i = 0; i < 500; i++) {
        gw_auth_identify(a, bearer(secrets[i]), gx_now_ms(), &an);
        found += an.who == GW_CALLER_KEY && an.key_id == 1000 + i;
    }
    T_EQ_INT(found, 500);
    for (int i = 0; i < 500; i += 2)
        gw_auth_revoke(a, 1000 + i, gx_now_ms());
    int active = 0;
    for (int i = 0; i < 500; i++) {
        gw_auth_identify(a, bearer(secrets[i]), gx_now_ms(), &an);
        active += an.who == GW_CALLER_KEY;
    }
    T_EQ_INT(active, 250);
    /* A reload that still says "active" does not un-revoke. */
    struct pr_key k;
    memset(&k, 0, sizeof(k));
    k.id = 1000;
    k.name = "many";
    gw_key_hash(secrets[0], strlen(secrets[0]), k.hash, NULL);
    k.expires_ms = k.revoked_ms = k.budget_pusd = -1;
    gw_auth_put(a, &k);
    gw_auth_identify(a, bearer(secrets[0]), gx_now_ms(), &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    gw_auth_free(a);
}

/* ---- concurrency ---- */

struct race {
    struct gw_auth *a;
    const char *authz;
    int n;
    int64_t cost;
    int ok, rate, quota;
};

static void *
race_main(void *arg)
{
    struct race *x = arg;
    for (int i = 0; i < x->n; i++) {
        struct gw_ticket t;
        struct gw_refusal r;
        gw_auth_admit(x->a, x->authz, "main", 1, x->cost, gx_now_ms(), &t,
                      &r);
        if (r.status == 0) {
            x->ok++;
            gw_ticket_settle(x->a, &t, 1, x->cost);
        } else if (!strcmp(r.code, "rate_limit_exceeded")) {
            x->rate++;
        } else if (!strcmp(r.code, "insufficient_quota")) {
            x->quota++;
        }
    }
    return NULL;
}

static void
test_concurrent_limits(void)
{
    char s[GW_KEY_LEN + 1];
    gw_key_generate(s, sizeof(s));
    char authz[128];
    snprintf(authz, sizeof(authz), "Bearer %s", s);

    /* RPM 1000 across 4 threads x 1000 attempts: exactly the burst, plus
     * whatever refilled while they ran (bounded by the elapsed time). */
    struct gw_auth *a = auth_with_key(1, s, 1000, 0, -1, NULL, -1);
    struct race x[4];
    pthread_t th[4];
    int64_t t0 = gx_mono_us();
    for (int i = 0; i < 4; i++) {
        x[i] = (struct race){a, authz, 1000, 0, 0, 0, 0};
        pthread_create(&th[i], NULL, race_main, &x[i]);
    }
    int ok = 0, rate = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += x[i].ok;
        rate += x[i].rate;
    }
    double secs = (double)(gx_mono_us() - t0) / 1e6;
    T_CHECK(ok >= 1000);
    T_CHECK(ok <= 1000 + (int)(secs * 1000.0 / 60.0) + 1);
    T_EQ_INT(ok + rate, 4000);
    gw_auth_free(a);

    /* Budget 1000 pUSD, requests of 7: at most 142 pass, never more. */
    a = auth_with_key(2, s, 0, 0, 1000, NULL, -1);
    for (int i = 0; i < 4; i++) {
        x[i] = (struct race){a, authz, 100, 7, 0, 0, 0};
        pthread_create(&th[i], NULL, race_main, &x[i]);
    }
    int quota = 0;
    ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += x[i].ok;
        quota += x[i].quota;
    }
    T_EQ_INT(ok, 142);
    T_EQ_INT(quota, 400 - 142);
    int64_t lim, spent, res;
    pr_budget_get(gw_auth_budget(a), 2, &lim, &spent, &res);
    T_EQ_INT(spent, 994);
    T_EQ_INT(res, 0);
    gw_auth_free(a);
}

/* ---- the keys table on a real file ---- */

static int
file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t nl = strlen(needle), n = 0, cap = 1 << 20;
    char *buf = malloc(cap);
    int found = 0;
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
    }
    for (size_t i = 0; buf && i + nl <= n && !found; i++)
        found = !memcmp(buf + i, needle, nl);
    free(buf);
    fclose(f);
    return found;
}

static void
test_keys_db(void)
{
    char *dir = e2e_temp_dir();
    char path[512], wal[530], err[256];
    snprintf(path, sizeof(path), "%s/keys.db", dir);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);

    json_t *o = json_loads("{\"name\":\"team-a\",\"budget_usd\":1.25,"
                           "\"rpm\":5,\"tpm\":1000,\"models\":[\"main\","
                           "\"gpt-4.1\"],\"expires_days\":30}",
                           0, NULL);
    struct pr_key spec;
    char models[256];
    T_EQ_INT(gw_key_spec_from_json(o, &spec, models, sizeof(models), err,
                                   sizeof(err)),
             GX_OK);
    T_EQ_INT(spec.budget_pusd, 1250000000000LL);
    T_EQ_INT(spec.rpm, 5);
    T_EQ_STR(spec.models, "main,gpt-4.1");
    T_CHECK(spec.expires_ms > gx_now_ms() + 29LL * 86400000);
    char secret[GW_KEY_LEN + 1], hex[65];
    gw_key_generate(secret, sizeof(secret));
    gw_key_hash(secret, strlen(secret), spec.hash, hex);
    int64_t id = 0, id2 = 0;
    T_EQ_INT(gw_keys_db_create(path, &spec, &id, err, sizeof(err)), GX_OK);
    T_CHECK(id > 0);
    /* Same secret twice: the UNIQUE hash refuses it. */
    T_CHECK(gw_keys_db_create(path, &spec, &id2, err, sizeof(err)) != GX_OK);
    json_decref(o);

    /* A server starting now loads it. */
    struct gw_auth *a = gw_auth_new("adm", 1, path, err, sizeof(err));
    T_CHECK(a != NULL);
    struct gw_authn an;
    gw_auth_identify(a, bearer(secret), gx_now_ms(), &an);
    T_EQ_INT(an.who, GW_CALLER_KEY);
    T_EQ_INT(an.key_id, id);
    int64_t lim = 0, spent = 0, res = 0;
    T_EQ_INT(pr_budget_get(gw_auth_budget(a), id, &lim, &spent, &res), GX_OK);
    T_EQ_INT(lim, 1250000000000LL);

    json_t *list = NULL;
    T_EQ_INT(gw_keys_db_list(path, &list, err, sizeof(err)), GX_OK);
    T_EQ_INT(json_array_size(list), 1);
    char *text = json_dumps(list, 0);
    T_CHECK(text && !strstr(text, secret) && !strstr(text, hex) &&
            !strstr(text, "sk-llmux-"));
    T_CHECK(text && strstr(text, "\"team-a\"") && strstr(text, "\"active\""));
    free(text);
    json_decref(list);

    /* Revoke: the table says so; a running table learns it by reload
     * (here, a second load through a fresh auth). */
    T_EQ_INT(gw_keys_db_revoke(path, id, gx_now_ms(), err, sizeof(err)),
             GX_OK);
    T_EQ_INT(gw_keys_db_revoke(path, id, gx_now_ms(), err, sizeof(err)),
             GX_OK);
    T_EQ_INT(gw_keys_db_revoke(path, id + 100, gx_now_ms(), err, sizeof(err)),
             GX_ENOTFOUND);
    struct gw_auth *b = gw_auth_new("adm", 1, path, err, sizeof(err));
    gw_auth_identify(b, bearer(secret), gx_now_ms(), &an);
    T_EQ_INT(an.who, GW_CALLER_NONE);
    gw_auth_free(b);
    /* The running one picks the revocation up within its reload period. */
    int revoked = 0;
    for (int i = 0; i < 100 && !revoked; i++) {
        gw_auth_identify(a, bearer(secret), gx_now_ms(), &an);
        revoked = an.who == GW_CALLER_NONE;
        if (!revoked)
            usleep(100 * 1000);
    }
    T_CHECK(revoked);
    gw_auth_free(a);
    pr_ledger_close(l);

    /* No plaintext anywhere in the database files; the hash is there. */
    T_CHECK(!file_contains(path, secret));
    T_CHECK(!file_contains(path, secret + 9));
    T_CHECK(!file_contains(wal, secret + 9));
    T_CHECK(file_contains(path, hex) || file_contains(wal, hex));

    /* Validation names the field. */
    const char *bad[] = {"{}", "{\"name\":\"\"}", "{\"name\":\"x\",\"rpm\":-1}",
                         "{\"name\":\"x\",\"budget_usd\":\"5\"}",
                         "{\"name\":\"x\",\"budget_usd\":-1}",
                         "{\"name\":\"x\",\"models\":[\"a,b\"]}",
                         "{\"name\":\"x\",\"models\":\"a\"}",
                         "{\"name\":\"x\",\"expires_days\":0}",
                         "{\"name\":\"x\",\"admin\":true}",
                         "{\"name\":\"a\\u0001b\"}", "[]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        err[0] = '\0';
        T_EQ_INT(gw_key_spec_from_json(j, &spec, models, sizeof(models), err,
                                       sizeof(err)),
                 GX_EINVAL);
        T_CHECK(err[0] != '\0');
        json_decref(j);
    }
    free(dir);
}

int
main(void)
{
    T_RUN(test_key_format);
    T_RUN(test_hash);
    T_RUN(test_admin_equal);
    T_RUN(test_bucket);
    T_RUN(test_identify);
    T_RUN(test_allowlist);
    T_RUN(test_admit);
    T_RUN(test_many_keys);
    T_RUN(test_concurrent_limits);
    T_RUN(test_keys_db);
    return T_END();
}
