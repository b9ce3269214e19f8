/* test_cost_e2e: the real llmux binary and tests/fake_provider.
 *
 * Dry run (`x-llmux-dry-run: 1`): 200 with the plan's targets in order,
 * each with the cost policy's expected cost and the budget's worst case
 * (recomputed here from the config's prices and the token counts the
 * answer states), affordability against the key's budget that agrees
 * with what a real request then gets (200 or 429 insufficient_quota);
 * 401/403/404 as a real request; and nothing sent upstream (the fake
 * provider's request counter), nothing charged (keys.spent_pusd) and no
 * ledger row.  /v1/completions' echo with max_tokens 0 reserves its
 * prompt alone (no completion tokens), absent caps still 1024: the dry
 * run's figures and verdicts, and the real requests' 200 and 429.
 *
 * What if: after requests with usage numbers the fake provider reports as
 * told, GET /v1/usage?what_if=1 and `llmux usage --what-if --config`
 * re-price exactly those token totals at the config's targets and at
 * published built-in prices (written here), in pUSD, sorted by cost, next
 * to the actual cost (the ledger's sum).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-0123456789abcdef-cost-e2e"
#define SECRET "sk-upstream-SECRET-cost-0123456789"

/* Prices of the config below, pUSD per token. */
#define A_IN 1000000LL   /* cheap: 1.00 / 2.00 USD per Mtok */
#define A_OUT 2000000LL
#define B_IN 10000000LL  /* dear: 10.00 / 50.00 */
#define B_OUT 50000000LL

static struct e2e_proc fake, gw;
static char base[128], dbpath[512];
static char key_budget[128], key_only_a[128], key_wi[128];
static long long id_budget, id_wi;
static char *cfgpath;

static int
req(const char *method, const char *path, const char *bearer,
    const char *body, const char *extra, struct e2e_resp *r)
{
    char url[512], auth[256];
    snprintf(url, sizeof(url), "%s%s", base, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
             bearer ? bearer : "");
    const char *h[4];
    int n = 0;
    if (bearer)
        h[n++] = auth;
    if (body)
        h[n++] = "Content-Type: application/json";
    if (extra)
        h[n++] = extra;
    h[n] = NULL;
    return e2e_http(method, url, body, h, 20000, r);
}

static long long
admin_create(const char *body, char *key, size_t keylen)
{
    struct e2e_resp r;
    long long id = -1;
    if (req("POST", "/admin/keys", ADMIN, body, NULL, &r) == 0 &&
        r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        id = json_integer_value(json_object_get(o, "id"));
        const char *k = json_string_value(json_object_get(o, "key"));
        snprintf(key, keylen, "%s", k ? k : "");
        json_decref(o);
    }
    e2e_resp_free(&r);
    return id;
}

static long long
fake_requests(void)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/fake/stats", fake.port);
    struct e2e_resp r;
    long long n = -1;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        n = json_integer_value(json_object_get(o, "requests"));
        json_decref(o);
    }
    e2e_resp_free(&r);
    return n;
}

static const char *
chat_body(const char *model)
{
    static char b[512];
    snprintf(b, sizeof(b),
             "{\"model\":\"%s\",\"max_tokens\":100,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"what would this cost, roughly?\"}]}",
             model);
    return b;
}

/* A dry run of body at path with key's bearer: its answer, *status. */
static json_t *
dry_post(const char *key, const char *path, const char *body, long *status)
{
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (req("POST", path, key, body, "x-llmux-dry-run: 1", &r) == 0) {
        *status = r.status;
        o = json_loads(r.body, 0, NULL);
    }
    e2e_resp_free(&r);
    return o;
}

static json_t *
dry(const char *key, const char *model, long *status)
{
    return dry_post(key, "/v1/chat/completions", chat_body(model), status);
}

static long long
jint(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void
test_dry_run(void)
{
    /* Budget 0.001 USD = 1e9 pUSD: the cheap target's worst case
     * (~2.6e8) fits, the dear one's (~5.3e9) does not. */
    id_budget = admin_create("{\"name\":\"dry\",\"budget_usd\":0.001}",
                             key_budget, sizeof(key_budget));
    T_CHECK(id_budget > 0);
    T_CHECK(admin_create("{\"name\":\"only-a\",\"models\":[\"a@fake\"]}",
                         key_only_a, sizeof(key_only_a)) > 0);
    long long sent0 = fake_requests();
    T_CHECK(sent0 >= 0);

    long st;
    json_t *o = dry(key_budget, "both", &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(json_string_value(json_object_get(o, "object")),
             "llmux.dry_run");
    T_EQ_STR(json_string_value(json_object_get(o, "route")), "both");
    long long est = jint(o, "estimated_prompt_tokens");
    long long maxp = jint(o, "max_prompt_tokens");
    T_CHECK(est > 0 && maxp >= est);
    T_EQ_INT(jint(o, "completion_tokens"), 100);
    json_t *ts = json_object_get(o, "targets");
    T_EQ_INT(json_array_size(ts), 2);
    /* Priority order: a, then b. */
    const char *names[] = {"a@fake", "b@fake"};
    long long in[] = {A_IN, B_IN}, out[] = {A_OUT, B_OUT};
    int afford[] = {1, 0};
    for (size_t i = 0; i < 2 && i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        T_EQ_STR(json_string_value(json_object_get(t, "target")), names[i]);
        long long exp = est * in[i] + 100 * out[i];
        long long worst = maxp * in[i] + 100 * out[i];
        T_EQ_INT(jint(t, "expected_cost_pusd"), exp);
        T_EQ_INT(e2e_usd_to_pusd(json_string_value(
                     json_object_get(t, "expected_cost_usd"))),
                 exp);
        T_EQ_INT(jint(t, "max_cost_pusd"), worst);
        T_EQ_INT(e2e_usd_to_pusd(json_string_value(
                     json_object_get(t, "max_cost_usd"))),
                 worst);
        T_EQ_INT(json_is_true(json_object_get(t, "affordable")), afford[i]);
    }
    /* The request as admission sees it: the worst case over the plan. */
    T_EQ_INT(jint(o, "max_cost_pusd"), maxp * B_IN + 100 * B_OUT);
    T_CHECK(json_is_false(json_object_get(o, "affordable")));
    json_t *b = json_object_get(o, "budget");
    T_EQ_INT(e2e_usd_to_pusd(json_string_value(json_object_get(b, "limit_usd"))),
             1000000000LL);
    T_EQ_INT(e2e_usd_to_pusd(json_string_value(json_object_get(b, "spent_usd"))),
             0);
    json_decref(o);

    /* The cheap target alone is affordable. */
    o = dry(key_budget, "a@fake", &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(o, "targets")), 1);
    T_CHECK(json_is_true(json_object_get(o, "affordable")));
    T_CHECK(json_is_null(json_object_get(o, "route")));
    json_decref(o);

    /* Anonymous-looking, wrong, admin and restricted keys: as a real
     * request; an unknown model: 404. */
    o = dry("sk-llmux-nope", "both", &st);
    T_EQ_INT(st, 401);
    json_decref(o);
    o = dry(ADMIN, "both", &st);
    T_EQ_INT(st, 401);
    json_decref(o);
    o = dry(key_only_a, "both", &st);
    T_EQ_INT(st, 403);
    json_decref(o);
    o = dry(key_only_a, "a@fake", &st);
    T_EQ_INT(st, 200);
    json_decref(o);
    o = dry(key_budget, "no-such-model", &st);
    T_EQ_INT(st, 404);
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(o, "error"), "code")),
             "model_not_found");
    json_decref(o);

    /* Nothing was sent, charged or logged. */
    T_EQ_INT(fake_requests(), sent0);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage"), 0);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COALESCE(SUM(spent_pusd),0) FROM "
                                "keys"),
             0);

    /* The same requests for real agree with the dry run's verdicts. */
    struct e2e_resp r;
    T_EQ_INT(req("POST", "/v1/chat/completions", key_budget,
                 chat_body("both"), NULL, &r),
             0);
    T_EQ_INT(r.status, 429);
    T_CHECK(r.body && strstr(r.body, "insufficient_quota"));
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/v1/chat/completions", key_budget,
                 chat_body("a@fake"), NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    T_EQ_INT(fake_requests(), sent0 + 1);
    /* And a dry run now shows what was spent. */
    o = dry(key_budget, "a@fake", &st);
    T_EQ_INT(st, 200);
    long long spent = e2e_usd_to_pusd(json_string_value(json_object_get(
        json_object_get(o, "budget"), "spent_usd")));
    T_CHECK(spent > 0);
    T_EQ_INT(spent, e2e_db_int(dbpath, "SELECT SUM(cost_pusd) FROM usage"));
    json_decref(o);
    T_EQ_INT(fake_requests(), sent0 + 1);
}

/*
 * /v1/completions with echo and max_tokens 0 (scoring a prompt, as
 * evaluation harnesses ask) generates nothing, so it reserves its prompt
 * alone: its dry run on "both" says completion_tokens 0 and prices each
 * target without output, so the dear target's worst case fits a budget
 * that the same request without a cap (1024 completion tokens, as
 * before) does not; for real the first is admitted and the second
 * refused, as the dry runs said.
 */
static void
test_score_reservation(void)
{
    /* 0.001 USD = 1e9 pUSD: b's worst case for the prompt alone (~4e8)
     * fits, with 1024 completion tokens at b's output (5.12e10) not */
    char key[128];
    T_CHECK(admin_create("{\"name\":\"score\",\"budget_usd\":0.001}", key,
                         sizeof(key)) > 0);
    for (int zero = 1; zero >= 0; zero--) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"model\":\"both\",\"echo\":true,\"prompt\":\"The "
                 "capital of France is Paris\"%s}",
                 zero ? ",\"max_tokens\":0" : "");
        long st;
        json_t *o = dry_post(key, "/v1/completions", body, &st);
        T_EQ_INT(st, 200);
        long long comp = zero ? 0 : 1024;
        long long est = jint(o, "estimated_prompt_tokens");
        long long maxp = jint(o, "max_prompt_tokens");
        T_CHECK(est > 0 && maxp >= est);
        T_EQ_INT(jint(o, "completion_tokens"), comp);
        json_t *ts = json_object_get(o, "targets");
        T_EQ_INT(json_array_size(ts), 2);
        long long in[] = {A_IN, B_IN}, out[] = {A_OUT, B_OUT};
        for (size_t i = 0; i < 2 && i < json_array_size(ts); i++) {
            json_t *t = json_array_get(ts, i);
            T_EQ_INT(jint(t, "expected_cost_pusd"),
                     est * in[i] + comp * out[i]);
            T_EQ_INT(jint(t, "max_cost_pusd"), maxp * in[i] + comp * out[i]);
        }
        T_EQ_INT(jint(o, "max_cost_pusd"), maxp * B_IN + comp * B_OUT);
        T_EQ_INT(json_is_true(json_object_get(o, "affordable")), zero);
        json_decref(o);
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/completions", key, body, NULL, &r), 0);
        if (r.status != (zero ? 200 : 429))
            fprintf(stderr, "score (max_tokens %s): %ld %s\n",
                    zero ? "0" : "absent", r.status, r.body ? r.body : "");
        T_EQ_INT(r.status, zero ? 200 : 429);
        e2e_resp_free(&r);
    }
}

/* The what-if traffic: usage as the fake provider is told to report. */
#define WI_PROMPT (1000 + 1000 + 5000 + 2000 + 1000)
#define WI_CACHED (300 + 300 + 200)
#define WI_CACHE_WRITE 800 /* the anthropic request's cache writes */
#define WI_THOUGHTS 40 /* its thinking, in its output (no separate count) */
#define WI_REASONING 200 /* the gemini request's thoughtsTokenCount */
#define WI_COMPLETION                                                      \
    (200 + 200 + 1000 + 300 + WI_THOUGHTS + 50 + WI_REASONING)
/* Prices of c@ant (config): 3.00 input, 0.30 cached, 3.75 cache write,
 * 15.00 output USD per Mtok. */
#define C_IN 3000000LL
#define C_CACHED 300000LL
#define C_WRITE 3750000LL
#define C_OUT 15000000LL
/* d@gem: 0.30 input, 2.50 output (cached and cache writes at input). */
#define D_IN 300000LL
#define D_OUT 2500000LL

/* The traffic at one model's prices; a model without a cache-write price
 * bills cache writes at input (write = in). */
static long long
cost_at(long long in, long long cached, long long write, long long out)
{
    return (WI_PROMPT - WI_CACHED - WI_CACHE_WRITE) * in + WI_CACHED * cached +
           WI_CACHE_WRITE * write + WI_COMPLETION * out;
}

/* Checks a what_if object against the traffic; returns its actual. */
static void
check_what_if(const json_t *wi)
{
    T_CHECK(json_is_object(wi));
    T_EQ_INT(jint(wi, "requests"), 5);
    T_EQ_INT(jint(wi, "prompt_tokens"), WI_PROMPT);
    T_EQ_INT(jint(wi, "cached_tokens"), WI_CACHED);
    T_EQ_INT(jint(wi, "cache_write_tokens"), WI_CACHE_WRITE);
    T_EQ_INT(jint(wi, "completion_tokens"), WI_COMPLETION);
    T_EQ_INT(jint(wi, "reasoning_tokens"), WI_REASONING);
    /* Actual: two on a (cached at a's input price: the config gives no
     * cached price), one on b. */
    long long actual = 2 * (700 * A_IN + 300 * A_IN + 200 * A_OUT) +
                       (5000 * B_IN + 1000 * B_OUT) +
                       (1000 * C_IN + 200 * C_CACHED + 800 * C_WRITE +
                        (300 + WI_THOUGHTS) * C_OUT) +
                       (1000 * D_IN + (50 + WI_REASONING) * D_OUT);
    T_EQ_INT(jint(wi, "actual_cost_pusd"), actual);
    T_EQ_INT(e2e_usd_to_pusd(json_string_value(
                 json_object_get(wi, "actual_cost_usd"))),
             actual);
    struct {
        const char *name;
        long long cost;
        int seen;
    } want[] = {
        {"a@fake", cost_at(A_IN, A_IN, A_IN, A_OUT), 0},
        {"b@fake", cost_at(B_IN, B_IN, B_IN, B_OUT), 0},
        {"c@ant", cost_at(C_IN, C_CACHED, C_WRITE, C_OUT), 0},
        {"d@gem", cost_at(D_IN, D_IN, D_IN, D_OUT), 0},
        /* Published prices: gpt-4.1 2.00 / 0.50 cached / 8.00 (no cache
         * write price: input), claude-sonnet-4.5 3.00 / 0.30 / 3.75 cache
         * write / 15.00, deepseek-v3.2 0.28 / 0.028 / 0.42 USD per Mtok. */
        {"gpt-4.1", cost_at(2000000, 500000, 2000000, 8000000), 0},
        {"claude-sonnet-4.5", cost_at(3000000, 300000, 3750000, 15000000), 0},
        {"deepseek-v3.2", cost_at(280000, 28000, 280000, 420000), 0},
    };
    size_t i;
    json_t *m;
    long long prev = -1;
    json_array_foreach(json_object_get(wi, "models"), i, m) {
        long long c = jint(m, "cost_pusd");
        T_CHECK(c >= prev); /* cheapest first */
        prev = c;
        T_EQ_INT(jint(m, "delta_pusd"), c - actual);
        T_EQ_INT(e2e_usd_to_pusd(json_string_value(
                     json_object_get(m, "cost_usd"))),
                 c);
        const char *name = json_string_value(json_object_get(m, "model"));
        for (size_t k = 0; name && k < sizeof(want) / sizeof(want[0]); k++)
            if (!strcmp(name, want[k].name)) {
                want[k].seen++;
                T_EQ_INT(c, want[k].cost);
                T_EQ_STR(json_string_value(json_object_get(m, "source")),
                         k < 4 ? "config" : "built-in");
            }
    }
    T_CHECK(json_array_size(json_object_get(wi, "models")) >= 5);
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        if (want[k].seen != 1)
            fprintf(stderr, "  %s seen %d times\n", want[k].name,
                    want[k].seen);
        T_EQ_INT(want[k].seen, 1);
    }
}

/* stdout of a command that must exit 0 (malloc'd), or NULL. */
static char *
run_cli(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    T_CHECK(p != NULL);
    if (!p)
        return NULL;
    char *out = calloc(1, 1 << 16);
    size_t n = out ? fread(out, 1, (1 << 16) - 1, p) : 0;
    (void)n;
    T_EQ_INT(pclose(p), 0);
    return out;
}

static void
test_what_if(void)
{
    id_wi = admin_create("{\"name\":\"what-if\"}", key_wi, sizeof(key_wi));
    T_CHECK(id_wi > 0);
    const char *msgs[] = {
        "fake:prompt_tokens=1000;completion_tokens=200;cached=300",
        "fake:prompt_tokens=1000;completion_tokens=200;cached=300",
        "fake:prompt_tokens=5000;completion_tokens=1000",
        "fake:prompt_tokens=2000;completion_tokens=300;cached=200;"
        "cache_write=800;thoughts=40",
        "fake:prompt_tokens=1000;completion_tokens=50;thoughts=200"};
    const char *models[] = {"a@fake", "a@fake", "b@fake", "c@ant", "d@gem"};
    for (int i = 0; i < 5; i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"%s\"}]}",
                 models[i], msgs[i]);
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/chat/completions", key_wi, body, NULL, &r),
                 0);
        T_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
    }
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT SUM(cost_pusd) FROM usage WHERE key_id = %lld", id_wi);
    long long ledger = e2e_db_int(dbpath, sql);
    snprintf(sql, sizeof(sql),
             "SELECT SUM(cache_write_tokens) FROM usage WHERE key_id = %lld",
             id_wi);
    T_EQ_INT(e2e_db_int(dbpath, sql), WI_CACHE_WRITE);
    snprintf(sql, sizeof(sql),
             "SELECT SUM(reasoning_tokens) FROM usage WHERE key_id = %lld",
             id_wi);
    T_EQ_INT(e2e_db_int(dbpath, sql), WI_REASONING);

    /* The API: this key's own period, grouped any way. */
    const char *groups[] = {"", "&group_by=model", "&group_by=provider"};
    for (int g = 0; g < 3; g++) {
        char path[128];
        snprintf(path, sizeof(path), "/v1/usage?since=1h&what_if=1%s",
                 groups[g]);
        struct e2e_resp r;
        T_EQ_INT(req("GET", path, key_wi, NULL, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *wi = json_object_get(o, "what_if");
        check_what_if(wi);
        T_EQ_INT(jint(wi, "actual_cost_pusd"), ledger);
        json_decref(o);
        e2e_resp_free(&r);
    }
    /* Without it, no what_if member; a bad value is a 400. */
    struct e2e_resp r;
    T_EQ_INT(req("GET", "/v1/usage?since=1h", key_wi, NULL, NULL, &r), 0);
    T_CHECK(r.body && !strstr(r.body, "what_if"));
    e2e_resp_free(&r);
    T_EQ_INT(req("GET", "/v1/usage?what_if=yes", key_wi, NULL, NULL, &r), 0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);

    /* The command line, from the config (its database, its targets). */
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s usage --what-if --config '%s' --key %lld --since 1h "
             "--format json",
             bin, cfgpath, id_wi);
    char *out = run_cli(cmd);
    json_t *o = json_loads(out ? out : "", 0, NULL);
    check_what_if(json_object_get(o, "what_if"));
    json_decref(o);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "%s usage --what-if --config '%s' --key %lld --since 1h", bin,
             cfgpath, id_wi);
    out = run_cli(cmd);
    char want[128];
    snprintf(want, sizeof(want),
             "what if: 5 requests, %d prompt tokens (%d cached, %d cache"
             " writes), %d completion tokens (%d reasoning)",
             WI_PROMPT, WI_CACHED, WI_CACHE_WRITE, WI_COMPLETION,
             WI_REASONING);
    T_CHECK(out && strstr(out, want) != NULL);
    T_CHECK(out && strstr(out, "gpt-4.1 ") && strstr(out, "b@fake "));
    free(out);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    char *dir = e2e_temp_dir();
    snprintf(dbpath, sizeof(dbpath), "%s/cost.db", dir);
    free(dir);
    if (e2e_start_fake(&fake) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    char cfg[4096];
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s\", \"require_keys\": true,\n"
             " \"admin_key\": \"" ADMIN "\",\n"
             " \"providers\": {\n"
             "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
             "   \"models\": {\"a\": {\"input_per_mtok\": 1.0, "
             "\"output_per_mtok\": 2.0},\n"
             "              \"b\": {\"input_per_mtok\": 10.0, "
             "\"output_per_mtok\": 50.0}}},\n"
             "  \"ant\": {\"kind\": \"anthropic\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET "\",\n"
             "   \"models\": {\"c\": {\"upstream\": \"claude-sonnet-4-5\", "
             "\"input_per_mtok\": 3.0, \"cached_input_per_mtok\": 0.3, "
             "\"cache_write_per_mtok\": 3.75, \"output_per_mtok\": 15.0}}},\n"
             "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET "\",\n"
             "   \"models\": {\"d\": {\"upstream\": \"gemini-2.5-flash\", "
             "\"input_per_mtok\": 0.3, \"output_per_mtok\": 2.5}}}},\n"
             " \"routes\": {\"both\": {\"policy\": \"priority\", "
             "\"targets\": [\"a@fake\", \"b@fake\"]}}}\n",
             dbpath, fake.port, fake.port, fake.port);
    cfgpath = e2e_write_temp("cost.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfgpath, NULL};
    if (!cfgpath ||
        e2e_start(&gw, argv, "listening on http://127.0.0.1:", 20000) != 0) {
        fprintf(stderr, "could not start llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_dry_run);
    T_RUN(test_what_if);
    T_RUN(test_score_reservation);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfgpath);
    curl_global_cleanup();
    return T_END();
}
