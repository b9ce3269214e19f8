/*
 * End to end, several instances: three real llmux processes on their own
 * ports over ONE PostgreSQL database (a private cluster, tests/lib/
 * pgtest), in front of the fake provider.  Concurrent clients spread
 * over the three:
 *   - a budget holds exactly across instances (leases, pricing/budget.c):
 *     what the cluster charged never passes the budget, and every 200 was
 *     charged exactly once;
 *   - requests and tokens per minute hold across instances (leased
 *     counts per UTC minute, pricing/rate.c): the cluster admits at most
 *     the key's rpm, and tokens within tpm plus the in-flight overrun;
 *   - a key created on one instance is accepted by the others, and once
 *     revoked on one it is refused by all (polling; the latency printed);
 *   - kill -9 of one instance under load loses no row of a response it
 *     completed (each x-request-id a client saw is in the database);
 *   - /v1/usage on any instance reads the shared ledger, and the rollup
 *     equals the raw rows (maintained once, not once per instance);
 *   - PostgreSQL restarted under load: every 200 has its row, once; the
 *     rest is a clear 503; with the server down, requests fail closed
 *     (503 storage_unavailable) and succeed again once it is back.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/common.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/pgtest.h"

#define ADMIN "llmux-admin-0123456789abcdef0123456789"
#define NINST 3

static struct e2e_proc fake, gw[NINST];
static char base[NINST][128];
static char pg_uri[256];
static const char *bin;

static int
req(int inst, const char *method, const char *path, const char *key,
    const char *body, struct e2e_resp *r)
{
    char url[256], auth[256];
    snprintf(url, sizeof(url), "%s%s", base[inst], path);
    const char *h[2] = {NULL, NULL};
    if (key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        h[0] = auth;
    }
    memset(r, 0, sizeof(*r));
    return e2e_http(method, url, body, h, 20000, r);
}

/* A chat whose fake answer costs exactly 10 prompt + 100 completion
 * tokens of "cheap" (0.5 / 1.0 USD per Mtok): 105,000,000 pUSD; the
 * reservation (prompt bound x input + max_tokens x output) covers it. */
#define COST_PUSD 105000000LL
static int
chat(int inst, const char *key, struct e2e_resp *r)
{
    return req(inst, "POST", "/v1/chat/completions", key,
               "{\"model\":\"cheap\",\"max_tokens\":100,\"messages\":[{"
               "\"role\":\"user\",\"content\":\"fake: prompt_tokens=10;"
               "completion_tokens=100\"}]}",
               r);
}

static int
start_instance(int i)
{
    char cfg[4096];
    snprintf(cfg, sizeof(cfg),
             "{\n"
             " \"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"storage\": {\"url\": \"%s\", \"timeout_ms\": 3000},\n"
             " \"require_keys\": true,\n"
             " \"admin_key\": \"%s\",\n"
             " \"providers\": {\n"
             "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\",\n"
             "   \"api_key\": \"sk-up\", \"timeout_ms\": 8000,\n"
             "   \"models\": {\"cheap\": {"
             "\"input_per_mtok\": 0.5, \"output_per_mtok\": 1.0}}}\n"
             " }\n"
             "}\n",
             pg_uri, ADMIN, fake.port);
    char name[32];
    snprintf(name, sizeof(name), "multi%d.json", i);
    char *path = e2e_write_temp(name, cfg);
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw[i], argv, "listening on http://127.0.0.1:", 20000);
    free(path);
    if (rc == 0)
        snprintf(base[i], sizeof(base[i]), "http://127.0.0.1:%d",
                 gw[i].port);
    return rc;
}

/* POST /admin/keys on inst; the id, and the secret into key. */
static long long
make_key(int inst, const char *body, char *key, size_t keylen)
{
    struct e2e_resp r;
    long long id = -1;
    if (req(inst, "POST", "/admin/keys", ADMIN, body, &r) == 0 &&
        r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        id = json_integer_value(json_object_get(o, "id"));
        snprintf(key, keylen, "%s",
                 json_string_value(json_object_get(o, "key"))
                     ? json_string_value(json_object_get(o, "key"))
                     : "");
        json_decref(o);
    }
    e2e_resp_free(&r);
    return id;
}

static long long
pg_count(const char *sql)
{
    char out[128];
    if (pgt_sql("llmux_m", sql, out, sizeof(out)) != 0)
        return -1;
    return atoll(out);
}

/* ---- budget across instances ------------------------------------ */

static char budget_key[128];
static _Atomic int n_paid, n_quota, n_other;

struct client {
    int inst;
    int64_t until_us;
};

static void *
budget_client(void *arg)
{
    struct client *c = arg;
    while (gx_mono_us() < c->until_us) {
        struct e2e_resp r;
        if (chat(c->inst, budget_key, &r) == 0) {
            if (r.status == 200)
                atomic_fetch_add(&n_paid, 1);
            else if (r.status == 429 && strstr(r.body, "insufficient_quota"))
                atomic_fetch_add(&n_quota, 1);
            else
                atomic_fetch_add(&n_other, 1);
        } else {
            atomic_fetch_add(&n_other, 1);
        }
        e2e_resp_free(&r);
        if (r.status == 429)
            usleep(20000); /* refused: leases move once a second */
    }
    return NULL;
}

static void
test_budget_across_instances(void)
{
    /* $0.01 = 1e10 pUSD: at most 95 requests of 105,000,000 pUSD. */
    long long id = make_key(0, "{\"name\":\"shared\",\"budget_usd\":0.01}",
                            budget_key, sizeof(budget_key));
    T_CHECK(id > 0);
    usleep(2500000); /* every instance has loaded it and leased a part */
    pthread_t th[6];
    struct client cl[6];
    int64_t until = gx_mono_us() + 8000000;
    for (int i = 0; i < 6; i++) {
        cl[i] = (struct client){i % NINST, until};
        pthread_create(&th[i], NULL, budget_client, &cl[i]);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT spent_pusd FROM keys WHERE id = %lld",
             id);
    usleep(300000);
    long long spent = pg_count(sql);
    fprintf(stderr,
            "  budget: %d paid, %d refused (quota), %d other; spent %lld of"
            " 10000000000 pUSD\n",
            atomic_load(&n_paid), atomic_load(&n_quota),
            atomic_load(&n_other), spent);
    T_CHECK(spent <= 10000000000LL);                 /* never past it */
    T_EQ_INT(spent, (long long)atomic_load(&n_paid) * COST_PUSD); /* once */
    T_EQ_INT(atomic_load(&n_other), 0);
    T_CHECK(atomic_load(&n_quota) > 0); /* the budget did run out */
    /* Leases take a second to move: the cluster still got most of it. */
    T_CHECK(atomic_load(&n_paid) >= 60);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM usage WHERE key_id = %lld AND status ="
             " 200",
             id);
    T_EQ_INT(pg_count(sql), atomic_load(&n_paid));
}

/* ---- RPM and TPM across instances ------------------------------ */

struct limit_client {
    int inst;
    int64_t until_us;
    const char *key;
    _Atomic int *ok, *refused, *other;
};

static void *
limit_client(void *arg)
{
    struct limit_client *c = arg;
    while (gx_mono_us() < c->until_us) {
        struct e2e_resp r;
        if (chat(c->inst, c->key, &r) == 0 && r.status == 200)
            atomic_fetch_add(c->ok, 1);
        else if (r.status == 429 && strstr(r.body, "rate_limit_exceeded"))
            atomic_fetch_add(c->refused, 1);
        else
            atomic_fetch_add(c->other, 1);
        e2e_resp_free(&r);
        usleep(r.status == 429 ? 30000 : 5000);
    }
    return NULL;
}

/* Each chat uses 110 tokens (10 prompt + 100 completion); the gateway
 * reserves its prompt estimate at admission and settles 110. */
#define TOKENS_PER_CHAT 110
#define TPM 2000
#define LIMIT_CLIENTS 6

static void
test_limits_across_instances(void)
{
    /* 40 requests a minute for the whole cluster; each instance alone
     * would allow 40 too, so three without sharing would admit up to
     * 120.  And 2000 tokens a minute: about 18 chats; three unshared
     * instances would admit about 54. */
    char rpm_key[128], tpm_key[128];
    long long id = make_key(1, "{\"name\":\"rpm\",\"rpm\":40}", rpm_key,
                            sizeof(rpm_key));
    T_CHECK(id > 0);
    char body[96];
    snprintf(body, sizeof(body), "{\"name\":\"tpm\",\"tpm\":%d}", TPM);
    id = make_key(2, body, tpm_key, sizeof(tpm_key));
    T_CHECK(id > 0);
    usleep(1500000);
    /* Run inside one UTC minute (windows are fixed minutes): wait while
     * fewer than 15 s of the current one are left (bounded: < 16 s). */
    while (gx_now_ms() % 60000 > 45000)
        usleep(100000);
    int64_t w0 = gx_now_ms() / 60000;
    static _Atomic int r_ok, r_429, r_other, t_ok, t_429, t_other;
    pthread_t th[2 * LIMIT_CLIENTS];
    struct limit_client cl[2 * LIMIT_CLIENTS];
    int64_t until = gx_mono_us() + 10000000;
    for (int i = 0; i < 2 * LIMIT_CLIENTS; i++) {
        int t = i >= LIMIT_CLIENTS;
        cl[i] = (struct limit_client){i % NINST, until, t ? tpm_key : rpm_key,
                                      t ? &t_ok : &r_ok, t ? &t_429 : &r_429,
                                      t ? &t_other : &r_other};
        pthread_create(&th[i], NULL, limit_client, &cl[i]);
    }
    for (int i = 0; i < 2 * LIMIT_CLIENTS; i++)
        pthread_join(th[i], NULL);
    int windows = (int)(gx_now_ms() / 60000 - w0) + 1;
    fprintf(stderr,
            "  rpm 40: %d admitted, %d refused (rate), %d other; tpm %d:"
            " %d admitted (%d tokens), %d refused, %d other; over %d minute"
            " window(s)\n",
            atomic_load(&r_ok), atomic_load(&r_429), atomic_load(&r_other),
            TPM, atomic_load(&t_ok), atomic_load(&t_ok) * TOKENS_PER_CHAT,
            atomic_load(&t_429), atomic_load(&t_other), windows);
    T_EQ_INT(windows, 1);
    T_CHECK(atomic_load(&r_ok) <= 40); /* the cluster's limit */
    T_CHECK(atomic_load(&r_ok) >= 30); /* most of it, in 10 s */
    T_CHECK(atomic_load(&r_429) > 0);
    T_EQ_INT(atomic_load(&r_other), 0);
    /* Tokens: estimates admitted <= TPM per window, the overrun of each
     * request paid by later leases, so within the window at most TPM plus
     * the overrun of the requests in flight when a lease ran dry (one
     * per client at most). */
    T_CHECK(atomic_load(&t_ok) * TOKENS_PER_CHAT <=
            TPM + LIMIT_CLIENTS * TOKENS_PER_CHAT);
    T_CHECK(atomic_load(&t_ok) * TOKENS_PER_CHAT >= TPM / 2);
    T_CHECK(atomic_load(&t_429) > 0);
    T_EQ_INT(atomic_load(&t_other), 0);
}

/* ---- keys across instances -------------------------------------- */

static void
test_keys_across_instances(void)
{
    char key[128];
    long long id = make_key(1, "{\"name\":\"roaming\"}", key, sizeof(key));
    T_CHECK(id > 0);
    /* Accepted everywhere (bounded wait: the others poll each second). */
    for (int i = 0; i < NINST; i++) {
        int ok = 0;
        for (int t = 0; t < 80 && !ok; t++) {
            struct e2e_resp r;
            ok = chat(i, key, &r) == 0 && r.status == 200;
            e2e_resp_free(&r);
            if (!ok)
                usleep(50000);
        }
        T_CHECK(ok);
    }
    char path[64];
    snprintf(path, sizeof(path), "/admin/keys/%lld", id);
    struct e2e_resp r;
    T_EQ_INT(req(2, "DELETE", path, ADMIN, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    int64_t t0 = gx_mono_us(), worst = 0;
    for (int i = 0; i < NINST; i++) {
        int refused = 0;
        while (!refused && gx_mono_us() - t0 < 4000000) {
            refused = chat(i, key, &r) == 0 && r.status == 401;
            e2e_resp_free(&r);
            if (!refused)
                usleep(20000);
        }
        T_CHECK(refused);
        if (gx_mono_us() - t0 > worst)
            worst = gx_mono_us() - t0;
    }
    fprintf(stderr, "  revoked on instance 2: refused by all after %lld ms\n",
            (long long)(worst / 1000));
}

/* ---- kill -9 under load ------------------------------------------ */

static char load_key[128];
static pid_t killed_pid;
#define MAX_SEEN 20000
static char seen[MAX_SEEN][64];
static _Atomic int n_seen;

static void *
load_client(void *arg)
{
    struct client *c = arg;
    while (gx_mono_us() < c->until_us) {
        struct e2e_resp r;
        if (chat(c->inst, load_key, &r) == 0 && r.status == 200) {
            char id[64];
            if (e2e_header(&r, "x-request-id", id, sizeof(id))) {
                int k = atomic_fetch_add(&n_seen, 1);
                if (k < MAX_SEEN)
                    snprintf(seen[k], sizeof(seen[k]), "%s", id);
            }
        }
        e2e_resp_free(&r);
    }
    return NULL;
}

static int
count_missing(int n)
{
    int missing = 0;
    for (int i = 0; i < n; i += 50) {
        struct gx_buf b;
        gx_buf_init(&b, 1 << 20);
        gx_buf_printf(&b, "SELECT %d - count(*) FROM usage WHERE request_id"
                          " IN (",
                      n - i < 50 ? n - i : 50);
        for (int j = i; j < n && j < i + 50; j++)
            gx_buf_printf(&b, "%s'%s'", j > i ? "," : "", seen[j]);
        gx_buf_printf(&b, ")");
        missing += (int)pg_count(b.data);
        gx_buf_cleanup(&b);
    }
    return missing;
}

static void
test_kill9_loses_nothing(void)
{
    long long id = make_key(0, "{\"name\":\"load\"}", load_key,
                            sizeof(load_key));
    T_CHECK(id > 0);
    usleep(1500000);
    pthread_t th[6];
    struct client cl[6];
    int64_t until = gx_mono_us() + 3000000;
    for (int i = 0; i < 6; i++) {
        cl[i] = (struct client){i % NINST, until};
        pthread_create(&th[i], NULL, load_client, &cl[i]);
    }
    usleep(1200000);
    killed_pid = gw[2].pid;
    kill(gw[2].pid, SIGKILL); /* mid-load, no goodbye */
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    e2e_stop(&gw[2], SIGKILL, 5000);
    int n = atomic_load(&n_seen);
    if (n > MAX_SEEN)
        n = MAX_SEEN;
    T_CHECK(n > 50);
    /* Every response a client saw complete has its row. */
    int missing = count_missing(n);
    fprintf(stderr, "  kill -9: %d completed responses, %d rows missing\n",
            n, missing);
    T_EQ_INT(missing, 0);
    T_EQ_INT(pg_count("SELECT count(*) - count(DISTINCT request_id) FROM"
                      " usage"),
             0);
}

/* ---- the shared ledger ------------------------------------------- */

static void
test_usage_shared(void)
{
    long long rows = pg_count("SELECT count(*) FROM usage");
    T_CHECK(rows > 0);
    for (int i = 0; i < 2; i++) { /* instance 2 is dead */
        struct e2e_resp r;
        T_EQ_INT(req(i, "GET", "/v1/usage?since=0&until=99999999999999",
                     ADMIN, NULL, &r),
                 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *d0 = json_array_get(json_object_get(o, "data"), 0);
        T_EQ_INT(json_integer_value(json_object_get(d0, "requests")), rows);
        json_decref(o);
        e2e_resp_free(&r);
    }
    T_EQ_INT(pg_count("SELECT (SELECT count(*) FROM usage) - (SELECT"
                      " sum(requests) FROM usage_hourly WHERE dim = 'none'"
                      " AND key_id = -2)"),
             0);
    /* The CLI on the same database. */
    char cmd[1024], line[4096] = "";
    snprintf(cmd, sizeof(cmd),
             "%s usage --db '%s' --since 0 --format json 2>&1", bin, pg_uri);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(line, 1, sizeof(line) - 1, p) : 0;
    line[got] = '\0';
    T_CHECK(p && pclose(p) == 0);
    char want[64];
    snprintf(want, sizeof(want), "\"requests\":%lld", rows);
    T_CHECK(strstr(line, want) != NULL);
    snprintf(cmd, sizeof(cmd), "%s keys list --db '%s' 2>&1", bin, pg_uri);
    p = popen(cmd, "r");
    got = p ? fread(line, 1, sizeof(line) - 1, p) : 0;
    line[got] = '\0';
    T_CHECK(p && pclose(p) == 0);
    T_CHECK(strstr(line, "roaming") && strstr(line, "revoked"));
    T_EQ_INT(pg_count("SELECT (SELECT sum(cost_pusd) FROM usage) - (SELECT"
                      " sum(cost_pusd) FROM usage_daily WHERE dim = 'model'"
                      " AND key_id = -2)"),
             0);
}

/* ---- PostgreSQL down, restarted -------------------------------- */

static _Atomic int n_200, n_503, n_bad;

static void *
outage_client(void *arg)
{
    struct client *c = arg;
    while (gx_mono_us() < c->until_us) {
        struct e2e_resp r;
        if (chat(c->inst, load_key, &r) == 0 && r.status == 200) {
            char id[64];
            atomic_fetch_add(&n_200, 1);
            if (e2e_header(&r, "x-request-id", id, sizeof(id))) {
                int k = atomic_fetch_add(&n_seen, 1);
                if (k < MAX_SEEN)
                    snprintf(seen[k], sizeof(seen[k]), "%s", id);
            }
        } else if (r.status == 503 && r.body &&
                   strstr(r.body, "storage_unavailable")) {
            atomic_fetch_add(&n_503, 1);
            usleep(50000);
        } else {
            atomic_fetch_add(&n_bad, 1);
        }
        e2e_resp_free(&r);
    }
    return NULL;
}

static void
test_pg_restart_under_load(void)
{
    atomic_store(&n_seen, 0);
    pthread_t th[4];
    struct client cl[4];
    int64_t until = gx_mono_us() + 4000000;
    for (int i = 0; i < 4; i++) {
        cl[i] = (struct client){i % 2, until}; /* instances 0 and 1 */
        pthread_create(&th[i], NULL, outage_client, &cl[i]);
    }
    usleep(1000000);
    T_EQ_INT(pgt_server_stop(), 0);
    usleep(500000);
    T_EQ_INT(pgt_server_start(), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    int n = atomic_load(&n_seen);
    if (n > MAX_SEEN)
        n = MAX_SEEN;
    int missing = count_missing(n);
    fprintf(stderr,
            "  PostgreSQL restarted under load: %d answered 200, %d refused"
            " 503, %d other; %d rows missing\n",
            atomic_load(&n_200), atomic_load(&n_503), atomic_load(&n_bad),
            missing);
    T_CHECK(n > 20);
    T_EQ_INT(missing, 0);
    T_EQ_INT(atomic_load(&n_bad), 0);
    T_EQ_INT(pg_count("SELECT count(*) - count(DISTINCT request_id) FROM"
                      " usage"),
             0);
}

static void
test_pg_down_fails_closed(void)
{
    T_EQ_INT(pgt_server_stop(), 0);
    struct e2e_resp r;
    T_EQ_INT(chat(0, load_key, &r), 0);
    T_EQ_INT(r.status, 503);
    T_CHECK(r.body && strstr(r.body, "storage_unavailable"));
    e2e_resp_free(&r);
    /* Admission refuses at once now (no upstream call, no wait). */
    T_EQ_INT(chat(1, load_key, &r), 0);
    T_EQ_INT(r.status, 503);
    e2e_resp_free(&r);
    T_EQ_INT(pgt_server_start(), 0);
    int ok = 0;
    for (int t = 0; t < 100 && !ok; t++) {
        ok = chat(0, load_key, &r) == 0 && r.status == 200;
        e2e_resp_free(&r);
        if (!ok)
            usleep(100000);
    }
    T_CHECK(ok); /* back once the database answers */
}

int
main(void)
{
    bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    if (pgt_start() != 0 || pgt_createdb("llmux_m", pg_uri, sizeof(pg_uri))) {
        fprintf(stderr, "test_multi_e2e: PostgreSQL not available%s\n",
                getenv("LLMUX_REQUIRE_PG") ? " (required: failing)" : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PG"));
        return T_END();
    }
    int up = e2e_start_fake(&fake) == 0;
    for (int i = 0; up && i < NINST; i++)
        up = start_instance(i) == 0;
    T_CHECK(up);
    if (up) {
        T_RUN(test_budget_across_instances);
        T_RUN(test_limits_across_instances);
        T_RUN(test_keys_across_instances);
        T_RUN(test_kill9_loses_nothing);
        T_RUN(test_usage_shared);
        T_RUN(test_pg_restart_under_load);
        T_RUN(test_pg_down_fails_closed);
    }
    for (int i = 0; i < NINST - 1; i++)
        if (gw[i].pid > 0)
            T_EQ_INT(e2e_stop(&gw[i], SIGTERM, 15000), 0);
    if (up) {
        /* The leases' books balance: each key's reserved_pusd is what its
         * lease rows hold, and the instances that stopped cleanly gave
         * theirs back (only the killed one still holds some). */
        T_EQ_INT(pg_count("SELECT count(*) FROM keys k WHERE reserved_pusd"
                          " <> COALESCE((SELECT sum(amount) FROM"
                          " budget_leases b WHERE b.key_id = k.id), 0)"),
                 0);
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT COALESCE(sum(amount), 0) FROM budget_leases WHERE"
                 " instance NOT LIKE '%ld-%%'",
                 (long)killed_pid);
        T_EQ_INT(pg_count(sql), 0);
    }
    if (fake.pid > 0)
        e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    pgt_stop();
    return T_END();
}
