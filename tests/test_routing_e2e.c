/*
 * End to end tests of issue 3 (routing): the real llmux binary in front of
 * the real fake provider, over real sockets.  Every "provider" in the
 * config is the same fake process; each has its own X-Fake header (its
 * behaviour) and its own upstream model name, so /fake/stats' by_model
 * tells which target received how many requests.
 *
 * Two gateways: the main one (no hedging) and a hedged one
 * (hedge_after_ms), since hedging would change every other test.
 * Nothing asserts on elapsed time; where an outcome needs time to pass
 * (a circuit cooldown) the test waits for the state it needs, bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-routing-0123456789"
#define COOLDOWN_MS 4000

static struct e2e_proc fake, gw, hgw;
static char base[128], hbase[128], fbase[128];

static int run_check_file(const char *path, char *out, size_t outlen);

static int64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One fake-backed provider: name, X-Fake behaviour (or NULL), extra
 * fields, its model "m" sent upstream as "m-NAME" at the given prices. */
static void
add_provider(char *buf, size_t len, const char *name, const char *xfake,
             const char *extra, double in, double out)
{
    size_t off = strlen(buf);
    char hdr[256] = "";
    if (xfake)
        snprintf(hdr, sizeof(hdr), "\"headers\": {\"X-Fake\": \"%s\"}, ",
                 xfake);
    snprintf(buf + off, len - off,
             "%s  \"%s\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", %s%s"
             "\"models\": {\"m\": {\"upstream\": \"m-%s\", "
             "\"input_per_mtok\": %g, \"output_per_mtok\": %g}}}",
             off && buf[off - 1] != '{' && buf[off - 1] != '\n' ? ",\n" : "",
             name, fake.port, hdr, extra ? extra : "", name, in, out);
}

static int
start_llmux(struct e2e_proc *p, char *b, size_t blen, const char *cfgname,
            const char *providers, const char *routes, const char *failover)
{
    char *cfg = malloc(65536);
    if (!cfg)
        return -1;
    char *dir = e2e_temp_dir();
    snprintf(cfg, 65536,
             "{\n"
             " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/%s.db\", \"require_keys\": false,\n"
             " \"admin_key\": \"" ADMIN "\",\n"
             " \"providers\": {\n%s\n },\n"
             " \"routes\": {\n%s\n },\n"
             " \"failover\": %s\n"
             "}\n",
             dir, cfgname, providers, routes, failover);
    char *path = e2e_write_temp(cfgname, cfg);
    free(cfg);
    free(dir);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(p, argv, "listening on http://127.0.0.1:", 15000);
    free(path);
    if (rc == 0)
        snprintf(b, blen, "http://127.0.0.1:%d", p->port);
    return rc;
}

static int
start_main(void)
{
    static char prov[16384];
    prov[0] = '\0';
    const char *to = "\"first_byte_timeout_ms\": 300, \"timeout_ms\": 1500, ";
    add_provider(prov, sizeof(prov), "ok", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "s500", "status=500", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "s503", "status=503", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "s429", "status=429;retry_after=30",
                 NULL, 1, 1);
    add_provider(prov, sizeof(prov), "rst", "reset", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "slowp", "delay_ms=3000", to, 1, 1);
    add_provider(prov, sizeof(prov), "mal", "malformed", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "s400", "status=400", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "cb", "status=500", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "exp", NULL, NULL, 10, 30);
    add_provider(prov, sizeof(prov), "chp", NULL, NULL, 1, 2);
    add_provider(prov, sizeof(prov), "lslow", "delay_ms=600", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "lfast", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "wa", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "wb", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "sdead", "reset", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "sdead2", "status=503", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "ctxo",
                 "status=400;message=This model's maximum context length is "
                 "8192 tokens. However, your messages resulted in 9000 "
                 "tokens.",
                 NULL, 1, 1);
    add_provider(prov, sizeof(prov), "ctxl",
                 "status=400;message=the request exceeds the available "
                 "context size",
                 NULL, 1, 1);
    /* the native kinds: their own error shapes, and what the Anthropic
     * translation cannot carry (refused before sending) */
    size_t off = strlen(prov);
    snprintf(prov + off, sizeof(prov) - off,
             ",\n  \"ctxa\": {\"kind\": \"anthropic\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"sk-ant-routing-0123\", "
             "\"headers\": {\"X-Fake\": \"status=400;message=prompt is too "
             "long: 210000 tokens > 200000 maximum\"}, \"models\": {\"m\": "
             "{\"upstream\": \"m-ctxa\", \"input_per_mtok\": 1, "
             "\"output_per_mtok\": 1}}},\n"
             "  \"ctxg\": {\"kind\": \"gemini\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"AIza-routing-0123456\", "
             "\"headers\": {\"X-Fake\": \"status=400;message=The input token "
             "count (1234) exceeds the maximum number of tokens allowed "
             "(1000).\"}, \"models\": {\"m\": {\"upstream\": \"m-ctxg\", "
             "\"input_per_mtok\": 1, \"output_per_mtok\": 1}}},\n"
             "  \"anth\": {\"kind\": \"anthropic\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"sk-ant-routing-0123\", "
             "\"models\": {\"m\": {\"upstream\": \"m-anth\", "
             "\"input_per_mtok\": 1, \"output_per_mtok\": 1}}}",
             fake.port, fake.port, fake.port);
    const char *routes =
        "  \"f500\": {\"targets\": [\"m@s500\", \"m@ok\"]},\n"
        "  \"f503\": {\"targets\": [\"m@s503\", \"m@ok\"]},\n"
        "  \"f429\": {\"targets\": [\"m@s429\", \"m@ok\"]},\n"
        "  \"frst\": {\"targets\": [\"m@rst\", \"m@ok\"]},\n"
        "  \"fto\": {\"targets\": [\"m@slowp\", \"m@ok\"]},\n"
        "  \"fmal\": {\"targets\": [\"m@mal\", \"m@ok\"]},\n"
        "  \"f400\": {\"targets\": [\"m@s400\", \"m@ok\"]},\n"
        "  \"allfail\": {\"targets\": [\"m@s500\", \"m@s503\"]},\n"
        "  \"circ\": {\"targets\": [\"m@cb\", \"m@ok\"]},\n"
        "  \"cost\": {\"policy\": \"cost\", \"targets\": [\"m@exp\", "
        "\"m@chp\"], \"max_latency_ms\": 1000},\n"
        "  \"lat\": {\"policy\": \"latency\", \"targets\": [\"m@lslow\", "
        "\"m@lfast\"]},\n"
        "  \"w\": {\"policy\": \"weighted\", \"targets\": [\"m@wa\", "
        "\"m@wb\"], \"weights\": [1, 3]},\n"
        "  \"sfo\": {\"targets\": [\"m@sdead\", \"m@sdead2\", \"m@ok\"]},\n"
        "  \"fctx\": {\"targets\": [\"m@ctxo\", \"m@ctxl\", \"m@ok\"]},\n"
        "  \"fctxn\": {\"targets\": [\"m@ctxa\", \"m@ctxg\", \"m@ok\"]},\n"
        "  \"fanth\": {\"targets\": [\"m@anth\", \"m@ok\"]}";
    char fo[256];
    snprintf(fo, sizeof(fo),
             "{\"max_attempts\": 3, \"backoff_ms\": 10, "
             "\"circuit_failures\": 3, \"circuit_cooldown_ms\": %d}",
             COOLDOWN_MS);
    setenv("LLMUX_ROUTER_SEED", "12345", 1);
    return start_llmux(&gw, base, sizeof(base), "routing.json", prov, routes,
                       fo);
}

static int
start_hedged(void)
{
    static char prov[4096];
    prov[0] = '\0';
    add_provider(prov, sizeof(prov), "hslow", "delay_ms=2000", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "hfast", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "hchunky", "chunk_delay_ms=250", NULL, 1,
                 1);
    add_provider(prov, sizeof(prov), "hsslow", "delay_ms=2000", NULL, 1, 1);
    add_provider(prov, sizeof(prov), "hsfast", NULL, NULL, 1, 1);
    return start_llmux(&hgw, hbase, sizeof(hbase), "hedged.json", prov,
                       "  \"h\": {\"targets\": [\"m@hslow\", \"m@hfast\"]},\n"
                       "  \"hc\": {\"targets\": [\"m@hchunky\", "
                       "\"m@hsfast\"]},\n"
                       "  \"hs\": {\"targets\": [\"m@hsslow\", "
                       "\"m@hsfast\"]}",
                       "{\"max_attempts\": 3, \"backoff_ms\": 10, "
                       "\"hedge_after_ms\": 500}");
}

/* ------------------------------------------------------------------ */

static int
chat(const char *b, const char *model, const char *content, int stream,
     struct e2e_resp *r)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", b);
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (stream)
        json_object_set_new(o, "stream", json_true());
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = e2e_http("POST", url, t, NULL, 20000, r);
    free(t);
    return rc;
}

/* Requests the fake received for target m@NAME so far. */
static long
fake_count(const char *name)
{
    char url[256], key[64];
    snprintf(url, sizeof(url), "%s/fake/stats", fbase);
    snprintf(key, sizeof(key), "m-%s", name);
    struct e2e_resp r;
    long n = -1;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        json_t *v = json_object_get(json_object_get(o, "by_model"), key);
        n = v ? (long)json_integer_value(v) : 0;
        json_decref(o);
    }
    e2e_resp_free(&r);
    return n;
}

/* The /admin/providers entry of target (new reference) or NULL. */
static json_t *
admin_target(const char *b, const char *target)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/admin/providers", b);
    const char *hdr[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    json_t *found = NULL;
    if (e2e_http("GET", url, NULL, hdr, 5000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        json_t *arr = json_is_array(o) ? o : json_object_get(o, "data");
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t) {
            const char *n = json_string_value(json_object_get(t, "target"));
            if (n && !strcmp(n, target))
                found = json_incref(t);
        }
        json_decref(o);
    }
    e2e_resp_free(&r);
    return found;
}

static const char *
hdr(const struct e2e_resp *r, const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    const char *v = e2e_header(r, name, buf[k], sizeof(buf[k]));
    return v ? v : "(none)";
}

/* Sends one request to route; expects 200 from m@ok after `attempts`
 * attempts, with the failing target receiving 1..max_bad requests.
 * max_bad > 1 only for connection resets: on a reused connection that dies
 * before any response byte libcurl itself re-sends the request once on a
 * fresh connection (one attempt for llmux, two requests at the fake). */
static void
expect_failover_n(const char *route, const char *bad, const char *attempts,
                  long max_bad)
{
    long bad0 = fake_count(bad), ok0 = fake_count("ok");
    struct e2e_resp r;
    T_EQ_INT(chat(base, route, "hello", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "ok");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), attempts);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    T_CHECK(json_is_array(json_object_get(o, "choices")));
    json_decref(o);
    if (r.status != 200)
        fprintf(stderr, "  %s: %ld %s\n", route, r.status, r.body);
    e2e_resp_free(&r);
    long nb = fake_count(bad) - bad0, nok = fake_count("ok") - ok0;
    T_CHECK(nb >= 1 && nb <= max_bad);
    T_EQ_INT(nok, 1);
    if (nb < 1 || nb > max_bad || nok != 1)
        fprintf(stderr, "  route %s: %ld on m@%s, %ld on m@ok\n", route, nb,
                bad, nok);
}

static void
expect_failover(const char *route, const char *bad, const char *attempts)
{
    expect_failover_n(route, bad, attempts, 1);
}

static void
test_failover_kinds(void)
{
    expect_failover("f500", "s500", "2");
    expect_failover("f503", "s503", "2");
    expect_failover_n("frst", "rst", "2", 2);
    expect_failover("fto", "slowp", "2");
    expect_failover("fmal", "mal", "2");
}

static void
test_failover_429_retry_after(void)
{
    expect_failover("f429", "s429", "2");
    /* Retry-After: 30 took m@s429 out of rotation: the next requests go
     * straight to m@ok. */
    long n0 = fake_count("s429");
    for (int i = 0; i < 3; i++) {
        struct e2e_resp r;
        T_EQ_INT(chat(base, "f429", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
        T_EQ_STR(hdr(&r, "x-llmux-provider"), "ok");
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_count("s429") - n0, 0);
    json_t *t = admin_target(base, "m@s429");
    T_CHECK(t != NULL);
    json_t *cu = json_object_get(t, "cooldown_until");
    T_CHECK(json_is_integer(cu));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* Roughly 30 s ahead (not checking the clock's exactness). */
    T_CHECK(json_integer_value(cu) > now_ms + 20000);
    T_EQ_STR(json_string_value(json_object_get(t, "state")), "up");
    json_decref(t);
}

static void
test_no_failover_on_400(void)
{
    long ok0 = fake_count("ok"), b0 = fake_count("s400");
    struct e2e_resp r;
    T_EQ_INT(chat(base, "f400", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 400);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
    T_CHECK(r.body && strstr(r.body, "\"error\"") != NULL);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("s400") - b0, 1);
    T_EQ_INT(fake_count("ok") - ok0, 0);
}

/* A 400 that says the prompt does not fit the model's context (OpenAI's
 * code, llama-server's message, Anthropic's and Gemini's own shapes) and
 * a parameter the Anthropic translation cannot carry move on to the next
 * target (README "Failover"); a plain 400 does not (above). */
static void
test_failover_context_and_refusal(void)
{
    long ok0 = fake_count("ok");
    struct e2e_resp r;
    const char *routes[] = {"fctx", "fctxn"};
    for (int i = 0; i < 2; i++) {
        T_EQ_INT(chat(base, routes[i], "hello", i, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-provider"), "ok");
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "3");
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_count("ctxo"), 1);
    T_EQ_INT(fake_count("ctxa"), 1);
    T_EQ_INT(fake_count("ctxg"), 1);
    /* logit_bias: the Anthropic kind refuses it before sending */
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    long a0 = fake_count("anth");
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"fanth\",\"logit_bias\":{\"1\":1},"
                      "\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"hi\"}]}",
                      NULL, 20000, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "ok");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("anth") - a0, 0);
    T_EQ_INT(fake_count("ok") - ok0, 3);
}

static void
test_all_fail(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat(base, "allfail", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 502);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    const char *msg = json_string_value(
        json_object_get(json_object_get(o, "error"), "message"));
    T_CHECK(msg && strstr(msg, "m@s500") && strstr(msg, "m@s503"));
    T_CHECK(msg && strstr(msg, "500") && strstr(msg, "503"));
    json_decref(o);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    e2e_resp_free(&r);
}

struct par {
    const char *content;
    long status;
    char provider[64];
};

static void *
par_main(void *arg)
{
    struct par *p = arg;
    struct e2e_resp r;
    p->status = -1;
    if (chat(base, "circ", p->content, 0, &r) == 0) {
        p->status = r.status;
        snprintf(p->provider, sizeof(p->provider), "%s",
                 hdr(&r, "x-llmux-provider"));
    }
    e2e_resp_free(&r);
    return NULL;
}

static const char *
admin_state(const char *target, char *buf, size_t len)
{
    json_t *t = admin_target(base, target);
    snprintf(buf, len, "%s",
             t ? json_string_value(json_object_get(t, "state")) : "(none)");
    json_decref(t);
    return buf;
}

static void
test_circuit(void)
{
    char st[32];
    long cb0 = fake_count("cb");
    /* circuit_failures = 3: three failed attempts open it. */
    for (int i = 0; i < 3; i++) {
        struct e2e_resp r;
        T_EQ_INT(chat(base, "circ", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
        e2e_resp_free(&r);
    }
    int64_t opened = mono_ms();
    T_EQ_INT(fake_count("cb") - cb0, 3);
    T_EQ_STR(admin_state("m@cb", st, sizeof(st)), "open");
    json_t *t = admin_target(base, "m@cb");
    T_EQ_INT(json_integer_value(json_object_get(t, "consecutive_failures")),
             3);
    T_CHECK(json_real_value(json_object_get(t, "error_rate")) > 0.99);
    json_decref(t);
    /* While open it receives nothing: every request goes to m@ok first. */
    for (int i = 0; i < 5; i++) {
        struct e2e_resp r;
        T_EQ_INT(chat(base, "circ", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
        e2e_resp_free(&r);
    }
    if (mono_ms() - opened < COOLDOWN_MS)
        T_EQ_INT(fake_count("cb") - cb0, 3);
    else
        fprintf(stderr, "  (machine too slow to check the open period)\n");
    /* Wait (bounded) for the cooldown to end: half-open. */
    int64_t deadline = mono_ms() + COOLDOWN_MS + 10000;
    while (strcmp(admin_state("m@cb", st, sizeof(st)), "half_open") &&
           mono_ms() < deadline)
        usleep(100 * 1000);
    T_EQ_STR(st, "half_open");
    /* Four concurrent requests, each slow (500 ms) wherever it goes:
     * exactly one is the probe; it fails (500) and fails over; the others
     * never touch m@cb.  All four succeed. */
    pthread_t th[4];
    struct par p[4];
    int64_t probe_start = mono_ms();
    for (int i = 0; i < 4; i++) {
        p[i].content = "fake:delay_ms=500";
        pthread_create(&th[i], NULL, par_main, &p[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        T_EQ_INT(p[i].status, 200);
        T_EQ_STR(p[i].provider, "ok");
    }
    T_EQ_INT(fake_count("cb") - cb0, 4);
    /* The failed probe re-opened it (for a cooldown from when it failed,
     * which was after probe_start). */
    if (mono_ms() - probe_start >= COOLDOWN_MS - 500) {
        fprintf(stderr, "  (machine too slow to check the re-open)\n");
        return;
    }
    T_EQ_STR(admin_state("m@cb", st, sizeof(st)), "open");
    /* Asked for by name while open: nothing is left to try, so 503 at
     * once, saying why and when to come back, and m@cb sees nothing. */
    struct e2e_resp r;
    T_EQ_INT(chat(base, "m@cb", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 503);
    T_CHECK(r.body && strstr(r.body, "m@cb") && strstr(r.body, "circuit"));
    long ra = atol(hdr(&r, "retry-after"));
    T_CHECK(ra >= 1 && ra <= COOLDOWN_MS / 1000);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("cb") - cb0, 4);
    /* Half-open again; this time the probe succeeds ("status=200" in the
     * message overrides the provider's X-Fake) and closes the circuit. */
    deadline = mono_ms() + COOLDOWN_MS + 10000;
    while (strcmp(admin_state("m@cb", st, sizeof(st)), "half_open") &&
           mono_ms() < deadline)
        usleep(100 * 1000);
    T_EQ_STR(st, "half_open");
    T_EQ_INT(chat(base, "circ", "fake:status=200", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "cb");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
    e2e_resp_free(&r);
    T_EQ_STR(admin_state("m@cb", st, sizeof(st)), "up");
    T_EQ_INT(fake_count("cb") - cb0, 5);
    /* Closed: it is first in the plan again (and fails over again). */
    T_EQ_INT(chat(base, "circ", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("cb") - cb0, 6);
    T_EQ_STR(admin_state("m@cb", st, sizeof(st)), "up");
}

static void
test_cost_policy(void)
{
    struct e2e_resp r;
    /* The cheaper target first. */
    T_EQ_INT(chat(base, "cost", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "chp");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("chp"), 1);
    T_EQ_INT(fake_count("exp"), 0);
    /* It turns slow (1200 ms first byte > max_latency_ms 1000)... */
    T_EQ_INT(chat(base, "cost", "fake:delay_ms=1200", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "chp");
    e2e_resp_free(&r);
    /* ...so its p95 is over the limit and the dearer one goes first. */
    for (int i = 0; i < 3; i++) {
        T_EQ_INT(chat(base, "cost", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-provider"), "exp");
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_count("chp"), 2);
    T_EQ_INT(fake_count("exp"), 3);
    json_t *t = admin_target(base, "m@chp");
    T_CHECK(json_number_value(json_object_get(t, "p95_ms")) > 1000);
    json_decref(t);
}

static void
test_latency_policy(void)
{
    /* No samples: m@lslow (config order), then m@lfast (unknown is
     * tried); then every request goes to the faster one. */
    for (int i = 0; i < 6; i++) {
        struct e2e_resp r;
        T_EQ_INT(chat(base, "lat", "hello", 0, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-provider"), i == 0 ? "lslow" : "lfast");
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_count("lslow"), 1);
    T_EQ_INT(fake_count("lfast"), 5);
    json_t *s = admin_target(base, "m@lslow"), *f = admin_target(base,
                                                                  "m@lfast");
    T_CHECK(json_number_value(json_object_get(s, "ewma_ms")) >= 600);
    T_CHECK(json_number_value(json_object_get(f, "ewma_ms")) <
            json_number_value(json_object_get(s, "ewma_ms")));
    json_decref(s);
    json_decref(f);
}

static void
test_weighted_policy(void)
{
    /* Weights 1:3 over 200 requests: m@wa ~ Binomial(200, 0.25), mean 50,
     * sd 6.1; the bounds are 5 sd.  The seed is fixed anyway. */
    enum { N = 200 };
    int ok = 0;
    for (int i = 0; i < N; i++) {
        struct e2e_resp r;
        if (chat(base, "w", "hello", 0, &r) == 0 && r.status == 200)
            ok++;
        e2e_resp_free(&r);
    }
    T_EQ_INT(ok, N);
    long a = fake_count("wa"), b = fake_count("wb");
    T_EQ_INT(a + b, N);
    T_CHECK(a >= 20 && a <= 80);
    fprintf(stderr, "  weighted 1:3 over %d: %ld / %ld\n", N, a, b);
}

/* SSE body -> number of data events that parse as chunks, and [DONE]s. */
static void
sse_scan(const char *body, int *chunks, int *done, int *bad)
{
    *chunks = *done = *bad = 0;
    const char *p = body ? body : "";
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 6 && !strncmp(p, "[DONE]", 6)) {
            (*done)++;
        } else {
            json_t *o = json_loadb(p, n, 0, NULL);
            if (json_is_array(json_object_get(o, "choices")) &&
                !json_object_get(o, "error"))
                (*chunks)++;
            else
                (*bad)++;
            json_decref(o);
        }
        p += n;
    }
}

static void
test_stream_failover(void)
{
    long ok0 = fake_count("ok");
    struct e2e_resp r;
    T_EQ_INT(chat(base, "sfo", "hello there", 1, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "3");
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "ok");
    int chunks, done, bad;
    sse_scan(r.body, &chunks, &done, &bad);
    T_CHECK(chunks >= 2);
    T_EQ_INT(done, 1);
    T_EQ_INT(bad, 0);
    /* One stream: exactly one role chunk. */
    int roles = 0;
    for (const char *q = r.body; q && (q = strstr(q, "\"role\"")); q++)
        roles++;
    T_EQ_INT(roles, 1);
    e2e_resp_free(&r);
    long nd = fake_count("sdead");
    T_CHECK(nd >= 1 && nd <= 2); /* a reset: see expect_failover_n */
    T_EQ_INT(fake_count("sdead2"), 1);
    T_EQ_INT(fake_count("ok") - ok0, 1);
}

static void
test_hedging(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat(hbase, "h", "hello", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "hfast");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("hslow"), 1);
    T_EQ_INT(fake_count("hfast"), 1);
    /* The loser was cancelled (reported to the router as such: not a
     * request, not in flight)... */
    json_t *s = admin_target(hbase, "m@hslow");
    T_EQ_INT(json_integer_value(json_object_get(s, "requests")), 0);
    T_EQ_INT(json_integer_value(json_object_get(s, "in_flight")), 0);
    json_decref(s);
    json_t *f = admin_target(hbase, "m@hfast");
    T_EQ_INT(json_integer_value(json_object_get(f, "requests")), 1);
    json_decref(f);
    /* (The fake cannot show the cancel: evhttp does not read a connection
     * while a request on it is pending, so it "completes" the slow answer
     * into the closed socket after its delay either way.) */
}

static void
test_hedging_streams(void)
{
    int chunks, done, bad;
    struct e2e_resp r;
    /* A stream that is slow before its first byte: the hedge wins and the
     * client sees one clean stream from it. */
    T_EQ_INT(chat(hbase, "hs", "hello there", 1, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "hsfast");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    sse_scan(r.body, &chunks, &done, &bad);
    T_CHECK(chunks >= 2);
    T_EQ_INT(done, 1);
    T_EQ_INT(bad, 0);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("hsslow"), 1);
    T_EQ_INT(fake_count("hsfast"), 1);
    /* A stream whose first byte came at once but whose chunks are slow
     * (5 x 250 ms > hedge_after_ms): bytes reached the client, so no
     * hedge starts. */
    T_EQ_INT(chat(hbase, "hc", "hello there", 1, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "hchunky");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
    sse_scan(r.body, &chunks, &done, &bad);
    T_CHECK(chunks >= 2);
    T_EQ_INT(done, 1);
    T_EQ_INT(bad, 0);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("hchunky"), 1);
    T_EQ_INT(fake_count("hsfast"), 1);
}

/* The example config of each policy passes `llmux check`. */
static void
test_check_examples(void)
{
    static const char *const ex[] = {
        "routing-priority.example.json", "routing-weighted.example.json",
        "routing-cost.example.json", "routing-latency.example.json"};
    setenv("LLMUX_ADMIN_KEY", "adm-example", 1);
    setenv("OPENAI_API_KEY", "sk-example", 1);
    setenv("RELAY_API_KEY", "sk-example", 1);
    setenv("LLMUX_MODEL", "/nonexistent/model.gguf", 1);
    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        char path[512], out[8192];
        snprintf(path, sizeof(path), "config/%s", ex[i]);
        int code = run_check_file(path, out, sizeof(out));
        T_EQ_INT(code, 0);
        T_CHECK(strstr(out, ": OK") != NULL);
        if (code)
            fprintf(stderr, "  %s: %s\n", ex[i], out);
    }
}

static void
test_admin_auth(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/admin/providers", base);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    json_t *t = admin_target(base, "m@ok");
    T_CHECK(t != NULL);
    T_EQ_STR(json_string_value(json_object_get(t, "state")), "up");
    T_CHECK(json_integer_value(json_object_get(t, "requests")) > 10);
    T_CHECK(json_is_number(json_object_get(t, "p50_ms")));
    T_CHECK(json_is_number(json_object_get(t, "p95_ms")));
    T_CHECK(json_is_number(json_object_get(t, "ewma_ms")));
    T_CHECK(json_is_number(json_object_get(t, "error_rate")));
    json_decref(t);
}

/* ------------------------------------------------------------------ */
/* llmux check on bad routing configs.                                  */

static int
run_check_file(const char *path, char *out, size_t outlen)
{
    char *dir = e2e_temp_dir();
    char opath[512];
    snprintf(opath, sizeof(opath), "%s/check.out", dir);
    free(dir);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    int code = -1;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, "check", "--config", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) {
        int st = 0;
        int64_t deadline = mono_ms() + 30000;
        while (waitpid(pid, &st, WNOHANG) == 0) {
            if (mono_ms() > deadline) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                break;
            }
            usleep(20 * 1000);
        }
        code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    }
    out[0] = '\0';
    FILE *f = fopen(opath, "r");
    if (f) {
        size_t n = fread(out, 1, outlen - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    return code;
}

static int
run_check(const char *text, char *out, size_t outlen)
{
    char *path = e2e_write_temp("bad-routing.json", text);
    int code = run_check_file(path, out, outlen);
    free(path);
    return code;
}

static void
expect_check(const char *routes, const char *provider_extra,
             const char *path, const char *reason)
{
    char text[2048], out[4096];
    snprintf(text, sizeof(text),
             "{\"providers\": {\"up\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://h\", %s\"models\": {\"m\": {\"input_per_mtok\": 1, "
             "\"output_per_mtok\": 1}}}},\n"
             " \"routes\": {%s}}\n",
             provider_extra, routes);
    int code = run_check(text, out, sizeof(out));
    T_EQ_INT(code, 1);
    int ok = strstr(out, path) != NULL && strstr(out, reason) != NULL;
    T_CHECK(ok);
    if (!ok || code != 1)
        fprintf(stderr, "  want %s ... %s\n  got (exit %d) %s\n", path,
                reason, code, out);
}

/* POSTs a chat body to gateway b; 0 on a transport success. */
static int
post_chat(const char *b, const char *body, struct e2e_resp *r)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", b);
    return e2e_http("POST", url, body, NULL, 60000, r);
}

/* The local engine's own limits are failed over (README "Failover"): a
 * parameter it does not implement, or a prompt past its context, moves
 * the request to the next target at once; the refusal reaches the client
 * only when no target could serve (every attempt a refusal), and after a
 * real failure the run fails with both reasons.  A request error the
 * local engine finds (a value out of range) still ends the run there.
 * A gateway of its own: the local engine (stories260K, a 64-position
 * context) in front of the fake provider. */
static void
test_local_refusal_fails_over(void)
{
    char model[512], prov[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    snprintf(prov, sizeof(prov),
             "  \"loc\": {\"kind\": \"local\", \"model_path\": \"%s\", "
             "\"threads\": 1, \"context\": 64, \"parallel\": 1, "
             "\"models\": {\"l\": {}}}",
             model);
    add_provider(prov, sizeof(prov), "lok", NULL, NULL, 1, 1);
    add_provider(prov, sizeof(prov), "l500", "status=500", NULL, 1, 1);
    struct e2e_proc lgw;
    char lbase[128];
    memset(&lgw, 0, sizeof(lgw));
    int started = start_llmux(
        &lgw, lbase, sizeof(lbase), "localfo.json", prov,
        "  \"lfo\": {\"targets\": [\"l@loc\", \"m@lok\"]},\n"
        "  \"lonly\": {\"targets\": [\"l@loc\"]},\n"
        "  \"lback\": {\"targets\": [\"m@l500\", \"l@loc\"]}",
        "{\"max_attempts\": 3, \"backoff_ms\": 1, \"circuit_failures\": "
        "1000}");
    T_EQ_INT(started, 0);
    if (started != 0)
        return;
    long ok0 = fake_count("lok");
    struct e2e_resp r;
    /* the local engine serves what it can: no failover */
    T_EQ_INT(post_chat(lbase,
                       "{\"model\":\"lfo\",\"max_tokens\":4,"
                       "\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"Once\"}]}",
                       &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "loc");
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
    e2e_resp_free(&r);
    /* a parameter it does not implement: the fake serves it, second */
    const char *unsup = "{\"model\":\"%s\",\"max_tokens\":4,%s"
                        "\"web_search_options\":{},"
                        "\"messages\":[{\"role\":\"user\",\"content\":"
                        "\"Once\"}]}";
    char body[4096];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof(body), unsup, "lfo",
                 stream ? "\"stream\":true," : "");
        T_EQ_INT(post_chat(lbase, body, &r), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "x-llmux-provider"), "lok");
        T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
        if (stream)
            T_CHECK(r.body && strstr(r.body, "data: [DONE]") != NULL);
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_count("lok") - ok0, 2);
    /* a prompt past the 64-position context: the fake serves it */
    char longp[2048] = "";
    for (int i = 0; i < 40; i++)
        strcat(longp, "Once upon a time ");
    snprintf(body, sizeof(body),
             "{\"model\":\"lfo\",\"max_tokens\":4,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"%s\"}]}",
             longp);
    T_EQ_INT(post_chat(lbase, body, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "x-llmux-provider"), "lok");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("lok") - ok0, 3);
    /* no other target: the refusal, naming the parameter, as before */
    snprintf(body, sizeof(body), unsup, "lonly", "");
    T_EQ_INT(post_chat(lbase, body, &r), 0);
    T_EQ_INT(r.status, 400);
    T_CHECK(r.body && strstr(r.body, "unsupported_parameter") &&
            strstr(r.body, "web_search_options"));
    e2e_resp_free(&r);
    /* after a real failure the fallback's refusal fails the run: 502
     * naming both attempts */
    snprintf(body, sizeof(body), unsup, "lback", "");
    T_EQ_INT(post_chat(lbase, body, &r), 0);
    T_EQ_INT(r.status, 502);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "2");
    T_CHECK(r.body && strstr(r.body, "m@l500: status 500") &&
            strstr(r.body, "l@loc: status 400") &&
            strstr(r.body, "web_search_options"));
    e2e_resp_free(&r);
    /* a bad value is the request's fault: not failed over */
    T_EQ_INT(post_chat(lbase,
                       "{\"model\":\"lfo\",\"max_tokens\":4,"
                       "\"top_p\":7,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"Once\"}]}",
                       &r),
             0);
    T_EQ_INT(r.status, 400);
    T_EQ_STR(hdr(&r, "x-llmux-attempts"), "1");
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("lok") - ok0, 3);
    /* /metrics tells the five refusals from the one request error */
    char murl[256];
    snprintf(murl, sizeof(murl), "%s/metrics", lbase);
    T_EQ_INT(e2e_http("GET", murl, NULL, NULL, 5000, &r), 0);
    T_CHECK(r.body && strstr(r.body, "llmux_upstream_attempts_total{provider="
                                     "\"loc\",outcome=\"refused\"} 5\n"));
    T_CHECK(r.body &&
            strstr(r.body, "llmux_upstream_attempts_total{provider=\"loc\","
                           "outcome=\"upstream_error_status\"} 1\n"));
    e2e_resp_free(&r);
    T_EQ_INT(e2e_stop(&lgw, SIGTERM, 10000), 0);
}

static void
test_check_bad_configs(void)
{
    expect_check("\"r\": {\"targets\": []}", "", "routes.r.targets",
                 "empty");
    expect_check("\"r\": {\"targets\": [\"m@up\", \"x@up\"]}", "",
                 "routes.r.targets[1]", "no model 'x'");
    expect_check("\"r\": {\"targets\": [\"m@nope\"]}", "",
                 "routes.r.targets[0]", "nope");
    expect_check("\"r\": {\"policy\": \"weighted\", \"targets\": [\"m@up\"], "
                 "\"weights\": [1, 2]}",
                 "", "routes.r.weights", "has 2 weights but targets has 1");
    expect_check("\"r\": {\"targets\": [\"m@up\"]}", "\"timeout_ms\": -5, ",
                 "providers.up.timeout_ms", "got -5");
    expect_check("\"r\": {\"policy\": \"fastest\", \"targets\": [\"m@up\"]}",
                 "", "routes.r.policy", "fastest");
    expect_check("\"r\": {\"targets\": [\"m@up\"], \"fallback\": \"q@up\"}",
                 "", "routes.r.fallback", "q");
    expect_check("\"r\": {\"policy\": \"cost\", \"targets\": [\"m@up\"], "
                 "\"max_latency_ms\": -1}",
                 "", "routes.r.max_latency_ms", "got -1");
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "could not start the fake provider\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(fbase, sizeof(fbase), "http://127.0.0.1:%d", fake.port);
    if (start_main() != 0 || start_hedged() != 0) {
        fprintf(stderr, "could not start llmux\n");
        e2e_stop(&gw, SIGKILL, 1000);
        e2e_stop(&hgw, SIGKILL, 1000);
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_failover_kinds);
    T_RUN(test_failover_429_retry_after);
    T_RUN(test_no_failover_on_400);
    T_RUN(test_failover_context_and_refusal);
    T_RUN(test_all_fail);
    T_RUN(test_local_refusal_fails_over);
    T_RUN(test_cost_policy);
    T_RUN(test_latency_policy);
    T_RUN(test_weighted_policy);
    T_RUN(test_stream_failover);
    T_RUN(test_hedging);
    T_RUN(test_hedging_streams);
    T_RUN(test_circuit);
    T_RUN(test_admin_auth);
    T_RUN(test_check_bad_configs);
    T_RUN(test_check_examples);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    T_EQ_INT(e2e_stop(&hgw, SIGTERM, 10000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
