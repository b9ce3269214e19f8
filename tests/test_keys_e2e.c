/*
 * End to end: bearer keys on the real llmux binary in front of the fake
 * provider (issue 5's security tests).  Missing, malformed, wrong-prefix,
 * truncated, unknown, revoked and expired keys; keys made by the CLI and
 * by the admin API; admin routes refuse normal keys; allowlists on chat
 * and /v1/models; a tenant cannot read another's usage; RPM and budget
 * hold under concurrent connections; hostile header and body sizes are
 * refused cleanly; and neither the upstream api_key nor any key's
 * plaintext shows up in a response, the log or the database files.
 *
 * The whole suite runs twice: on SQLite (a file), then on PostgreSQL (a
 * private server, tests/lib/pgtest: one instance in leased mode, the
 * budget and limits taken from the shared database), when the server
 * binaries are installed (CI: required, LLMUX_REQUIRE_PG).
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "../common/common.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/pgtest.h"

#define SECRET "sk-upstream-SECRET-e2e-5f1d0c9a7b3e"
#define ADMIN "llmux-admin-0123456789abcdef0123456789"

static struct e2e_proc fake, gw;
static char base[128];
static char dbpath[512];
static const char *pg_name; /* the PostgreSQL pass: its database, else NULL */
static const char *bin;

/* Every key plaintext this test saw: none may be stored anywhere. */
static char secrets[32][128];
static int n_secrets;
static int leaks; /* responses holding SECRET */

static void
remember(const char *k)
{
    if (k && n_secrets < 32)
        snprintf(secrets[n_secrets++], sizeof(secrets[0]), "%s", k);
}

static void
scan_resp(const struct e2e_resp *r)
{
    if ((r->body && strstr(r->body, SECRET)) ||
        (r->headers && strstr(r->headers, SECRET))) {
        leaks++;
        fprintf(stderr, "  upstream secret in a response: %s\n", r->body);
    }
}

static int
req(const char *method, const char *path, const char *key, const char *body,
    struct e2e_resp *r)
{
    char url[256], auth[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    const char *h[2] = {NULL, NULL};
    if (key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        h[0] = auth;
    }
    int rc = e2e_http(method, url, body, h, 20000, r);
    scan_resp(r);
    return rc;
}

static int
chat(const char *key, const char *model, const char *content, int max_tokens,
     struct e2e_resp *r)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (max_tokens > 0)
        json_object_set_new(o, "max_tokens", json_integer(max_tokens));
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = req("POST", "/v1/chat/completions", key, b, r);
    free(b);
    return rc;
}

static const char *
err_code(const struct e2e_resp *r, char *buf, size_t len)
{
    json_t *o = json_loads(r->body, 0, NULL);
    const char *c =
        json_string_value(json_object_get(json_object_get(o, "error"), "code"));
    snprintf(buf, len, "%s", c ? c : "(none)");
    json_decref(o);
    return buf;
}

/* Runs the CLI; returns its exit code and its stdout's first line. */
static int
cli(const char *args, char *out, size_t outlen)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s keys %s --db '%s' 2>/dev/null", bin, args,
             dbpath);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    if (out) {
        out[0] = '\0';
        if (fgets(out, (int)outlen, p)) {
            size_t n = strlen(out);
            while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
                out[--n] = '\0';
        }
    }
    char drain[256];
    while (fgets(drain, sizeof(drain), p))
        ;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long long
db_int(const char *sql)
{
    if (!pg_name)
        return e2e_db_int(dbpath, sql);
    char out[128];
    if (pgt_sql(pg_name, sql, out, sizeof(out)) != 0) {
        fprintf(stderr, "  sql failed (%s): %s\n", sql, out);
        return -1;
    }
    return atoll(out);
}

static int
file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t nl = strlen(needle), keep = nl ? nl - 1 : 0, have = 0;
    char buf[65536 + 256];
    int found = 0;
    size_t r;
    while (!found && (r = fread(buf + have, 1, 65536, f)) > 0) {
        have += r;
        for (size_t i = 0; i + nl <= have && !found; i++)
            found = !memcmp(buf + i, needle, nl);
        if (have > keep) {
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    fclose(f);
    return found;
}

/* ------------------------------------------------------------------ */

static char cli_key[128], key_a[128], key_b[128], key_r[128], key_q[128];
static long long cli_id, id_a, id_b, id_q;

static int
start_gateway(void)
{
    if (!pg_name) {
        char *dir = e2e_temp_dir();
        snprintf(dbpath, sizeof(dbpath), "%s/keys.db", dir);
        free(dir);
    }
    /* A key made by the CLI before the server starts. */
    if (cli("create --name from-cli --rpm 1000", cli_key, sizeof(cli_key)) !=
        0)
        return -1;
    remember(cli_key);
    char cfg[4096];
    snprintf(cfg, sizeof(cfg),
             "{\n"
             " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s\", \"require_keys\": true,\n"
             " \"admin_key\": \"%s\",\n"
             " \"limits\": {\"max_body_bytes\": 65536},\n"
             " \"providers\": {\n"
             "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\",\n"
             "   \"api_key\": \"%s\", \"timeout_ms\": 8000,\n"
             "   \"models\": {\"gpt-4.1\": {}, \"cheap\": {"
             "\"input_per_mtok\": 0.5, \"output_per_mtok\": 1.0}}}\n"
             " },\n"
             " \"routes\": {\n"
             "  \"main\": {\"policy\": \"priority\", \"targets\": "
             "[\"gpt-4.1@fake\"]}\n"
             " }\n"
             "}\n",
             dbpath, ADMIN, fake.port, SECRET);
    char *path = e2e_write_temp("keys.json", cfg);
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000);
    free(path);
    if (rc == 0)
        snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    return rc;
}

static void
test_cli(void)
{
    T_CHECK(!strncmp(cli_key, "sk-llmux-", 9) && strlen(cli_key) >= 41);
    char line[512];
    T_EQ_INT(cli("list", line, sizeof(line)), 0);
    T_CHECK(strstr(line, "ID") && strstr(line, "NAME"));
    T_EQ_INT(cli("create", NULL, 0), 2);          /* --name missing */
    T_EQ_INT(cli("create --name x --rpm -3", NULL, 0), 2);
    T_EQ_INT(cli("frobnicate", NULL, 0), 2);
    T_EQ_INT(cli("revoke 999999", NULL, 0), 1);
    cli_id = db_int("SELECT id FROM keys WHERE name = 'from-cli'");
    T_CHECK(cli_id > 0);
}

static void
test_bad_keys(void)
{
    struct e2e_resp r;
    char code[64];
    char trunc[128], one_less[128], wrong[128], flipped[128];
    snprintf(trunc, sizeof(trunc), "%.30s", cli_key); /* below 32 */
    snprintf(one_less, sizeof(one_less), "%.*s", (int)strlen(cli_key) - 1,
             cli_key);
    snprintf(wrong, sizeof(wrong), "sk-proj-%s", cli_key + 9);
    snprintf(flipped, sizeof(flipped), "%s", cli_key);
    flipped[20] = flipped[20] == 'a' ? 'b' : 'a';
    const char *keys[] = {NULL, "", "not-a-key", trunc, one_less, wrong,
                          flipped, "sk-llmux-", ADMIN "x"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        T_EQ_INT(chat(keys[i], "main", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 401);
        T_EQ_STR(err_code(&r, code, sizeof(code)), "invalid_api_key");
        /* The presented secret is never echoed. */
        if (keys[i] && strlen(keys[i]) > 12)
            T_CHECK(strstr(r.body, keys[i] + 9) == NULL);
        e2e_resp_free(&r);
    }
    /* Not Bearer at all. */
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *h[] = {"Authorization: Basic dXNlcjpwYXNz", NULL};
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"x\"}]}",
                      h, 10000, &r),
             0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    /* The caller is checked before the body is parsed: garbage from an
     * unknown caller is a 401, not a 400 about its JSON. */
    const char *h2[] = {"Authorization: Bearer sk-llmux-nope", NULL};
    T_EQ_INT(e2e_http("POST", url, "{not json", h2, 10000, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    T_EQ_INT(e2e_http("POST", url, "{not json", NULL, 10000, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    /* The good one works and its row carries its key id. */
    T_EQ_INT(chat(cli_key, "main", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM usage WHERE key_id = %lld AND status = 200",
             cli_id);
    T_EQ_INT(db_int(sql), 1);
    /* The admin key is for admin routes, not chat. */
    T_EQ_INT(chat(ADMIN, "main", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    T_EQ_INT(db_int("SELECT count(*) FROM usage WHERE key_id IS NULL"), 0);
}

/* POST /admin/keys; returns the id and copies the secret. */
static long long
admin_create(const char *body, char *key, size_t keylen)
{
    struct e2e_resp r;
    long long id = -1;
    if (req("POST", "/admin/keys", ADMIN, body, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        id = json_integer_value(json_object_get(o, "id"));
        snprintf(key, keylen, "%s",
                 json_string_value(json_object_get(o, "key")) ?: "");
        remember(key);
        json_decref(o);
    } else {
        fprintf(stderr, "  admin create failed: %ld %s\n", r.status, r.body);
    }
    e2e_resp_free(&r);
    return id;
}

static void
test_admin_api(void)
{
    id_a = admin_create("{\"name\":\"tenant-a\",\"models\":[\"main\"]}",
                        key_a, sizeof(key_a));
    id_b = admin_create("{\"name\":\"tenant-b\"}", key_b, sizeof(key_b));
    T_CHECK(id_a > 0 && id_b > 0 && id_a != id_b);
    T_CHECK(!strncmp(key_a, "sk-llmux-", 9) && strcmp(key_a, key_b));

    struct e2e_resp r;
    char code[64];
    /* Normal keys, no key, a wrong key: refused on every admin route. */
    const char *who[] = {key_a, cli_key, NULL, "wrong-admin"};
    for (size_t i = 0; i < 4; i++) {
        long want = i < 2 ? 403 : 401;
        T_EQ_INT(req("POST", "/admin/keys", who[i], "{\"name\":\"evil\"}",
                     &r),
                 0);
        T_EQ_INT(r.status, want);
        e2e_resp_free(&r);
        T_EQ_INT(req("GET", "/admin/keys", who[i], NULL, &r), 0);
        T_EQ_INT(r.status, want);
        e2e_resp_free(&r);
        char p[64];
        snprintf(p, sizeof(p), "/admin/keys/%lld", id_b);
        T_EQ_INT(req("DELETE", p, who[i], NULL, &r), 0);
        T_EQ_INT(r.status, want);
        e2e_resp_free(&r);
    }
    T_EQ_INT(db_int("SELECT count(*) FROM keys WHERE name = 'evil'"), 0);
    T_EQ_INT(db_int("SELECT count(*) FROM keys WHERE revoked_ms IS NOT NULL"),
             0);

    /* Bad bodies. */
    T_EQ_INT(req("POST", "/admin/keys", ADMIN, "{\"name\":5}", &r), 0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/admin/keys", ADMIN, "{\"name\":\"x\",\"rpm\":"
                 "-1}", &r), 0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/admin/keys", ADMIN, "not json", &r), 0);
    T_EQ_INT(r.status, 400);
    T_EQ_STR(err_code(&r, code, sizeof(code)), "invalid_json");
    e2e_resp_free(&r);

    /* A new key works at once, on any worker. */
    for (int i = 0; i < 4; i++) {
        T_EQ_INT(chat(key_b, "main", "hi", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
    }

    /* The list: names and limits, never a secret or a hash. */
    T_EQ_INT(req("GET", "/admin/keys", ADMIN, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "tenant-a") && strstr(r.body, "from-cli"));
    T_CHECK(!strstr(r.body, "sk-llmux-"));
    char hexcol[80];
    snprintf(hexcol, sizeof(hexcol), "\"hash\"");
    T_CHECK(!strstr(r.body, hexcol));
    e2e_resp_free(&r);
}

static void
test_allowlist(void)
{
    struct e2e_resp r;
    char code[64];
    T_EQ_INT(chat(key_a, "cheap", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 403);
    T_EQ_STR(err_code(&r, code, sizeof(code)), "model_not_allowed");
    e2e_resp_free(&r);
    T_EQ_INT(chat(key_a, "gpt-4.1@fake", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 403);
    e2e_resp_free(&r);
    T_EQ_INT(chat(key_a, "main", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    /* /v1/models: only what the key may use; others see all. */
    T_EQ_INT(req("GET", "/v1/models", key_a, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    json_t *d = json_object_get(o, "data");
    T_EQ_INT(json_array_size(d), 1);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(d, 0), "id")),
             "main");
    json_decref(o);
    e2e_resp_free(&r);
    T_EQ_INT(req("GET", "/v1/models", key_b, NULL, &r), 0);
    T_CHECK(strstr(r.body, "\"cheap\"") && strstr(r.body, "\"main\""));
    e2e_resp_free(&r);
    T_EQ_INT(req("GET", "/v1/models", NULL, NULL, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
}

/* ---- concurrency ---- */

struct worker {
    const char *key, *model;
    int n, max_tokens;
    int ok, rate, quota, other, retry_after;
};

static void *
worker_main(void *arg)
{
    struct worker *x = arg;
    for (int i = 0; i < x->n; i++) {
        struct e2e_resp r;
        char code[64], ra[32];
        if (chat(x->key, x->model, "hi", x->max_tokens, &r) != 0) {
            x->other++;
        } else if (r.status == 200) {
            x->ok++;
        } else if (r.status == 429 &&
                   !strcmp(err_code(&r, code, sizeof(code)),
                           "rate_limit_exceeded")) {
            x->rate++;
            if (e2e_header(&r, "retry-after", ra, sizeof(ra)) && atoi(ra) > 0)
                x->retry_after++;
        } else if (r.status == 429 &&
                   !strcmp(err_code(&r, code, sizeof(code)),
                           "insufficient_quota")) {
            x->quota++;
        } else {
            x->other++;
            fprintf(stderr, "  unexpected %ld %s\n", r.status, r.body);
        }
        e2e_resp_free(&r);
    }
    return NULL;
}

static void
run_workers(struct worker *w, int n)
{
    pthread_t th[8];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* PostgreSQL pass: the instance holds a lease of each key's limits and
 * budget (pricing/budget.c, rate.c), at first a small part, grown each
 * second to what demand needs.  A new key's first burst is therefore
 * refused beyond that part: warm the lease up with one request retried
 * until it is admitted (bounded, 10 s); the checks then hold as on
 * SQLite, except the lower bounds of a burst, which a lease only reaches
 * by the next syncs.  1 when that request was admitted. */
static int
lease_warmup(const char *key, const char *model, int max_tokens)
{
    for (int t = 0; pg_name && t < 100; t++) {
        struct e2e_resp r;
        int ok = chat(key, model, "hi", max_tokens, &r) == 0 &&
                 r.status == 200;
        e2e_resp_free(&r);
        if (ok)
            return 1;
        usleep(100000);
    }
    return 0;
}

static void
test_rate_limit(void)
{
    long long id = admin_create("{\"name\":\"rpm5\",\"rpm\":5}", key_r,
                                sizeof(key_r));
    T_CHECK(id > 0);
    int64_t t0 = gx_mono_us();
    int warm = lease_warmup(key_r, "main", 0);
    T_EQ_INT(warm, pg_name ? 1 : 0);
    struct worker w[4];
    for (int i = 0; i < 4; i++)
        w[i] = (struct worker){key_r, "main", 4, 0, 0, 0, 0, 0, 0};
    run_workers(w, 4);
    double secs = (double)(gx_mono_us() - t0) / 1e6;
    int ok = warm, rate = 0, other = 0, ra = 0;
    for (int i = 0; i < 4; i++) {
        ok += w[i].ok;
        rate += w[i].rate;
        other += w[i].other;
        ra += w[i].retry_after;
    }
    /* 5 a minute: the burst of 5, plus one per 12 s the test took. */
    T_CHECK(ok >= (pg_name ? 1 : 5));
    T_CHECK(ok <= 5 + (int)(secs / 12.0) + 1);
    if (ok < 5 || ok > 5 + (int)(secs / 12.0) + 1)
        fprintf(stderr, "  ok %d in %.1f s\n", ok, secs);
    T_EQ_INT(ok + rate, 16 + warm);
    T_EQ_INT(ra, rate);
    T_EQ_INT(other, 0);
}

static void
test_tpm(void)
{
    /* 60 tokens a minute.  The first request is admitted on its estimate
     * (a few tokens), then charged what the upstream reported (100 prompt
     * + 4 completion): the bucket is in debt and the next is refused with
     * a Retry-After. */
    char key_t[128];
    long long id = admin_create("{\"name\":\"tpm60\",\"tpm\":60}", key_t,
                                sizeof(key_t));
    T_CHECK(id > 0);
    struct e2e_resp r;
    char code[64], ra[32];
    for (int t = 0; t < (pg_name ? 100 : 1); t++) { /* see lease_warmup */
        T_EQ_INT(chat(key_t, "main", "fake:prompt_tokens=100", 0, &r), 0);
        if (r.status == 200 || !pg_name)
            break;
        e2e_resp_free(&r);
        usleep(100000);
    }
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    T_EQ_INT(chat(key_t, "main", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(err_code(&r, code, sizeof(code)), "rate_limit_exceeded");
    T_CHECK(strstr(r.body, "tokens") != NULL);
    T_CHECK(e2e_header(&r, "retry-after", ra, sizeof(ra)) && atoi(ra) >= 1 &&
            atoi(ra) <= 120);
    e2e_resp_free(&r);
}

static void
test_budget(void)
{
    /* cheap: 0.5 / 1.0 USD per Mtok.  Reservation of "hi" with
     * max_tokens 10: (2 + 16 prompt bytes bound) x 500000 + 10 x 1e6
     * = 19e6 pUSD; actual (9 prompt, 4 completion) = 8.5e6.  A budget of
     * 95e6 pUSD fits five reservations at once. */
    id_q = admin_create("{\"name\":\"budget\",\"budget_usd\":0.000095}",
                        key_q, sizeof(key_q));
    T_CHECK(id_q > 0);
    int warm = lease_warmup(key_q, "cheap", 10);
    T_EQ_INT(warm, pg_name ? 1 : 0);
    struct worker w[5];
    for (int i = 0; i < 5; i++)
        w[i] = (struct worker){key_q, "cheap", 4, 10, 0, 0, 0, 0, 0};
    run_workers(w, 5);
    int ok = warm, quota = 0, other = 0;
    for (int i = 0; i < 5; i++) {
        ok += w[i].ok;
        quota += w[i].quota;
        other += w[i].other;
    }
    T_CHECK(ok >= (pg_name ? 1 : 5) && ok <= 9);
    T_CHECK(quota >= 11);
    T_EQ_INT(ok + quota, 20 + warm);
    T_EQ_INT(other, 0);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(sum(cost_pusd), 0) FROM usage WHERE key_id = "
             "%lld",
             id_q);
    long long spent = db_int(sql);
    T_CHECK(spent > 0 && spent <= 95000000);
    T_EQ_INT(spent, ok * 8500000LL);
    snprintf(sql, sizeof(sql), "SELECT spent_pusd FROM keys WHERE id = %lld",
             id_q);
    T_EQ_INT(db_int(sql), spent);
}

static long long
usage_total(const char *key, const char *query, long *status, char *body,
            size_t bodylen)
{
    struct e2e_resp r;
    char p[256];
    snprintf(p, sizeof(p), "/v1/usage%s", query);
    long long total = -1;
    *status = -1;
    if (req("GET", p, key, NULL, &r) == 0) {
        *status = r.status;
        if (body)
            snprintf(body, bodylen, "%s", r.body);
        json_t *o = json_loads(r.body, 0, NULL);
        size_t i;
        json_t *g;
        if (r.status == 200)
            total = 0;
        json_array_foreach(json_object_get(o, "data"), i, g)
            total += json_integer_value(json_object_get(g, "requests"));
        json_decref(o);
    }
    e2e_resp_free(&r);
    return total;
}

static void
test_usage_tenancy(void)
{
    long st;
    char body[8192];
    char sql[256];
    /* A sees exactly its own rows, grouped by key: one group, its id. */
    long long a = usage_total(key_a, "?since=1h&group_by=key", &st, body,
                              sizeof(body));
    T_EQ_INT(st, 200);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM usage WHERE key_id = %lld",
             id_a);
    T_EQ_INT(a, db_int(sql));
    json_t *o = json_loads(body, 0, NULL);
    json_t *d = json_object_get(o, "data");
    T_EQ_INT(json_array_size(d), 1);
    char ida[32];
    snprintf(ida, sizeof(ida), "%lld", id_a);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(d, 0),
                                               "group")),
             ida);
    json_decref(o);
    /* Asking for B's usage with A's key: refused. */
    char q[64];
    snprintf(q, sizeof(q), "?since=1h&key=%lld", id_b);
    usage_total(key_a, q, &st, NULL, 0);
    T_EQ_INT(st, 403);
    /* The admin sees everyone, and B alone when it asks. */
    long long all = usage_total(ADMIN, "?since=1h", &st, NULL, 0);
    T_EQ_INT(st, 200);
    T_EQ_INT(all, db_int("SELECT count(*) FROM usage"));
    long long b = usage_total(ADMIN, q, &st, NULL, 0);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM usage WHERE key_id = %lld",
             id_b);
    T_EQ_INT(b, db_int(sql));
    T_CHECK(b >= 4 && all > a + b);
    usage_total(NULL, "", &st, NULL, 0);
    T_EQ_INT(st, 401);
    usage_total(key_a, "?group_by=nonsense", &st, NULL, 0);
    T_EQ_INT(st, 400);
}

static void
test_revoke(void)
{
    struct e2e_resp r;
    char p[64], code[64];
    snprintf(p, sizeof(p), "/admin/keys/%lld", id_b);
    T_EQ_INT(req("DELETE", p, ADMIN, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    /* Refused at once, on every worker. */
    for (int i = 0; i < 4; i++) {
        T_EQ_INT(chat(key_b, "main", "hi", 0, &r), 0);
        T_EQ_INT(r.status, 401);
        T_EQ_STR(err_code(&r, code, sizeof(code)), "invalid_api_key");
        T_CHECK(strstr(r.body, "revoked") != NULL);
        e2e_resp_free(&r);
    }
    T_EQ_INT(req("DELETE", "/admin/keys/987654", ADMIN, NULL, &r), 0);
    T_EQ_INT(r.status, 404);
    e2e_resp_free(&r);
    /* Revoked by the CLI while serving: refused within the reload
     * period (polled, bounded). */
    char idarg[64];
    snprintf(idarg, sizeof(idarg), "revoke %lld", cli_id);
    T_EQ_INT(cli(idarg, NULL, 0), 0);
    int refused = 0;
    for (int i = 0; i < 100 && !refused; i++) {
        T_EQ_INT(chat(cli_key, "main", "hi", 0, &r), 0);
        refused = r.status == 401;
        e2e_resp_free(&r);
        if (!refused)
            usleep(100 * 1000);
    }
    T_CHECK(refused);
    /* A key that expires: refused once its time has passed. */
    char key_e[128];
    long long id = admin_create("{\"name\":\"short\",\"expires_days\":"
                                "0.00001}",
                                key_e, sizeof(key_e));
    T_CHECK(id > 0);
    int expired = 0;
    for (int i = 0; i < 100 && !expired; i++) {
        T_EQ_INT(chat(key_e, "main", "hi", 0, &r), 0);
        expired = r.status == 401 && strstr(r.body, "expired");
        e2e_resp_free(&r);
        if (!expired)
            usleep(100 * 1000);
    }
    T_CHECK(expired);
}

static void
test_upstream_secret(void)
{
    struct e2e_resp r;
    /* The upstream's own error text quotes its key: scrubbed. */
    T_EQ_INT(chat(key_a, "main",
                  "fake:status=400;message=bad_key_" SECRET "_given", 0, &r),
             0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
    T_EQ_INT(chat(key_a, "main", "fake:status=401;message=" SECRET, 0, &r),
             0);
    T_CHECK(r.status >= 400);
    e2e_resp_free(&r);
    T_EQ_INT(leaks, 0);
}

static void
test_hostile_sizes(void)
{
    struct e2e_resp r;
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *body = "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
                       "\"content\":\"x\"}]}";
    /* A 200 KB header: refused (or the connection closed), never served. */
    size_t big = 200 * 1024;
    char *h = malloc(big + 32);
    memcpy(h, "X-Big: ", 7);
    memset(h + 7, 'a', big);
    h[7 + big] = '\0';
    const char *hs[] = {h, NULL};
    int rc = e2e_http("POST", url, body, hs, 10000, &r);
    T_CHECK(rc != 0 || (r.status >= 400 && r.status < 500));
    e2e_resp_free(&r);
    /* A 40 KB Authorization header: 401, not a crash. */
    size_t ak = 40 * 1024;
    snprintf(h, 32, "Authorization: Bearer ");
    size_t hl = strlen(h);
    memset(h + hl, 'k', ak);
    h[hl + ak] = '\0';
    rc = e2e_http("POST", url, body, hs, 10000, &r);
    T_CHECK(rc != 0 || r.status == 401 || r.status == 400 ||
            r.status == 431);
    e2e_resp_free(&r);
    free(h);
    /* A body past max_body_bytes (64 KiB): 413 or closed, never run. */
    size_t bl = 200 * 1024;
    char *b = malloc(bl + 128);
    int n = snprintf(b, 128, "{\"model\":\"main\",\"messages\":[{\"role\":"
                             "\"user\",\"content\":\"");
    memset(b + n, 'y', bl);
    strcpy(b + n + bl, "\"}]}");
    char auth[256];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key_a);
    const char *ah[] = {auth, NULL};
    rc = e2e_http("POST", url, b, ah, 10000, &r);
    T_CHECK(rc != 0 || r.status == 413);
    e2e_resp_free(&r);
    free(b);
    /* Still serving. */
    T_EQ_INT(chat(key_a, "main", "still there?", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

static void
test_no_plaintext(void)
{
    /* Let the last rows commit, then scan the log and the database files
     * for the upstream secret and every key's plaintext. */
    char wal[600], shm[600];
    snprintf(wal, sizeof(wal), "%s-wal", dbpath);
    snprintf(shm, sizeof(shm), "%s-shm", dbpath);
    const char *files[] = {dbpath, wal, shm, gw.log_path};
    char *dump = NULL;
    if (pg_name) { /* every row of every table, as pg_dump writes them */
        dump = e2e_write_temp("keys_pg.sql", "");
        T_EQ_INT(pgt_dump(pg_name, dump), 0);
        T_CHECK(file_contains(dump, "from-cli")); /* it holds the keys */
        files[0] = dump;
        files[1] = files[2] = "/nonexistent";
    }
    T_CHECK(n_secrets >= 6);
    for (size_t f = 0; f < 4; f++) {
        T_CHECK(!file_contains(files[f], SECRET));
        T_CHECK(!file_contains(files[f], ADMIN));
        for (int i = 0; i < n_secrets; i++)
            if (strlen(secrets[i]) > 9)
                T_CHECK(!file_contains(files[f], secrets[i] + 9));
    }
    /* The log did record the requests (so the scan looked at something). */
    FILE *lf = fopen(gw.log_path, "r");
    T_CHECK(lf != NULL);
    if (lf)
        fclose(lf);
    T_EQ_INT(db_int("SELECT count(*) FROM usage WHERE error LIKE '%" SECRET
                    "%' OR request_id LIKE '%sk-%'"),
             0);
    free(dump);
}

/* The suite on the database in dbpath (or pg_name's URI there). */
static void
run_suite(void)
{
    n_secrets = 0;
    if (start_gateway() != 0) {
        fprintf(stderr, "could not start llmux on %s\n",
                pg_name ? "PostgreSQL" : "SQLite");
        T_CHECK(0);
        return;
    }
    T_RUN(test_cli);
    T_RUN(test_bad_keys);
    T_RUN(test_admin_api);
    T_RUN(test_allowlist);
    T_RUN(test_rate_limit);
    T_RUN(test_tpm);
    T_RUN(test_budget);
    T_RUN(test_usage_tenancy);
    T_RUN(test_revoke);
    T_RUN(test_upstream_secret);
    T_RUN(test_hostile_sizes);
    T_RUN(test_no_plaintext);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    setenv("LLMUX_LOG", "debug", 1);
    bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "could not start the fake provider\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    fprintf(stderr, "-- SQLite\n");
    run_suite();
    if (pgt_start() == 0 &&
        pgt_createdb("llmux_keys", dbpath, sizeof(dbpath)) == 0) {
        fprintf(stderr, "-- PostgreSQL\n");
        pg_name = "llmux_keys";
        run_suite();
    } else {
        fprintf(stderr, "test_keys_e2e: PostgreSQL not available: SQLite"
                        " only%s\n",
                getenv("LLMUX_REQUIRE_PG") ? " (required: failing)" : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PG"));
    }
    pgt_stop();
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
