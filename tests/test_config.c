/*
 * test_config: config/ loading, ${VAR} interpolation, strict validation
 * with FILE:LINE:COL: path errors, defaults from the environment, lookups
 * and cfg_resolve.
 *
 * Expected error positions are computed here independently of config/:
 * where(text, needle, nth) counts lines and characters up to the nth
 * occurrence of needle; a few are also spelled out as literal numbers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/config.h"
#include "harness.h"

static const char *example =
    "{\n"
    "  \"listen\": \"127.0.0.1:8080\",\n"
    "  \"workers\": 2,\n"
    "  \"database\": \"llmux.db\",\n"
    "  \"admin_key\": \"${LLMUX_ADMIN_KEY}\",\n"
    "  \"require_keys\": true,\n"
    "  \"limits\": { \"max_body_bytes\": 4194304, \"max_connections\": 10000 "
    "},\n"
    "  \"providers\": {\n"
    "    \"relay\": {\n"
    "      \"kind\": \"openai\",\n"
    "      \"base_url\": \"https://relay.example/v1\",\n"
    "      \"api_key\": \"${RELAY_API_KEY}\",\n"
    "      \"timeout_ms\": 120000, \"connect_timeout_ms\": 3000, "
    "\"first_byte_timeout_ms\": 20000,\n"
    "      \"headers\": { \"X-Org\": \"acme\" },\n"
    "      \"models\": {\n"
    "        \"gpt-4.1\":           { \"input_per_mtok\": 2.00, "
    "\"output_per_mtok\": 8.00, \"cached_input_per_mtok\": 0.50 },\n"
    "        \"deepseek-v3.2\":     { \"upstream\": \"deepseek-chat\", "
    "\"input_per_mtok\": 0.28, \"output_per_mtok\": 0.42 }\n"
    "      }\n"
    "    },\n"
    "    \"local\": {\n"
    "      \"kind\": \"local\",\n"
    "      \"model_path\": \"${LLMUX_MODEL}\",\n"
    "      \"threads\": 2, \"context\": 4096, \"parallel\": 4,\n"
    "      \"models\": { \"local\": { \"input_per_mtok\": 0, "
    "\"output_per_mtok\": 0 } }\n"
    "    }\n"
    "  },\n"
    "  \"routes\": {\n"
    "    \"auto\": { \"policy\": \"cost\",     \"targets\": "
    "[\"deepseek-v3.2@relay\", \"gpt-4.1@relay\"], \"fallback\": "
    "\"local@local\", \"max_latency_ms\": 3000 },\n"
    "    \"fast\": { \"policy\": \"latency\",  \"targets\": "
    "[\"gpt-4.1@relay\", \"deepseek-v3.2@relay\", \"local@local\"] },\n"
    "    \"gpt\":  { \"policy\": \"priority\", \"targets\": "
    "[\"gpt-4.1@relay\", \"local@local\"] },\n"
    "    \"mix\":  { \"policy\": \"weighted\", \"targets\": "
    "[\"gpt-4.1@relay\", \"deepseek-v3.2@relay\"], \"weights\": [1, 3] }\n"
    "  },\n"
    "  \"failover\": {\n"
    "    \"max_attempts\": 3, \"retry_on_status\": [408, 409, 429, 500, 502, "
    "503, 504],\n"
    "    \"backoff_ms\": 50, \"hedge_after_ms\": 0,\n"
    "    \"circuit_failures\": 5, \"circuit_cooldown_ms\": 30000\n"
    "  }\n"
    "}\n";

/* Line and column (1-based, in characters) of the nth (0-based) occurrence
 * of needle in text. */
static void
where(const char *text, const char *needle, int nth, int *line, int *col)
{
    const char *at = strstr(text, needle);
    while (at && nth-- > 0)
        at = strstr(at + 1, needle);
    *line = 1;
    *col = 1;
    if (!at) {
        fprintf(stderr, "test bug: '%s' not in text\n", needle);
        *line = *col = -1;
        return;
    }
    for (const char *p = text; p < at; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*p & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static struct cfg *
load_ok_at(const char *text, int line)
{
    char err[1024] = "";
    struct cfg *c = NULL;
    enum gx_status st = cfg_load_string(text, "t.json", &c, err, sizeof(err));
    if (st != GX_OK)
        fprintf(stderr, "  (line %d) unexpected error: %s\n", line, err);
    T_EQ_INT(st, GX_OK);
    return c;
}
#define load_ok(text) load_ok_at((text), __LINE__)

/*
 * Expects text to fail with "t.json:L:C: path: ...reason..." where L:C is
 * the nth occurrence of at in text.
 */
static void
expect_err_at(int tline, const char *text, const char *at, int nth,
              const char *path, const char *reason)
{
    char err[1024] = "", want[512];
    struct cfg *c = NULL;
    enum gx_status st = cfg_load_string(text, "t.json", &c, err, sizeof(err));
    int line, col;
    where(text, at, nth, &line, &col);
    snprintf(want, sizeof(want), "t.json:%d:%d: %s: ", line, col, path);
    int ok = st == GX_EINVAL && c == NULL &&
             strncmp(err, want, strlen(want)) == 0 && strstr(err, reason);
    T_CHECK(ok);
    if (!ok)
        fprintf(stderr, "  (line %d) want \"%s...%s\"\n            got  \"%s\"\n",
                tline, want, reason, err);
    cfg_free(c);
}
#define EXPECT_ERR(text, at, path, reason)                                   \
    expect_err_at(__LINE__, (text), (at), 0, (path), (reason))
#define EXPECT_ERR_N(text, at, nth, path, reason)                            \
    expect_err_at(__LINE__, (text), (at), (nth), (path), (reason))

static void
test_log_block(void)
{
#define PV_MIN "\"require_keys\": false, \"providers\": {\"a\": {\"kind\": " \
               "\"openai\", \"base_url\": \"http://x.example\", " \
               "\"models\": [\"gpt-4.1\"]}}"
    struct cfg *c = load_ok("{\"log\": {\"format\": \"logfmt\", "
                            "\"file\": \"/tmp/a.log\", \"level\": \"warn\"}, "
                            PV_MIN "}");
    T_CHECK(c && c->log_logfmt == 1 && c->log_level == GX_LOG_WARN &&
            c->log_file && !strcmp(c->log_file, "/tmp/a.log"));
    cfg_free(c);
    c = load_ok("{" PV_MIN "}");
    T_CHECK(c && c->log_logfmt == 0 && c->log_level == -1 && !c->log_file);
    cfg_free(c);
    c = load_ok("{\"log\": {\"file\": \"a.log\"}, " PV_MIN "}");
    T_CHECK(c && c->log_level == GX_LOG_INFO && c->log_logfmt == 0);
    cfg_free(c);
    EXPECT_ERR("{\"log\": {\"format\": \"xml\"}}", "\"xml", "log.format",
               "expected \"json\" or \"logfmt\"");
    EXPECT_ERR("{\"log\": {\"level\": \"loud\"}}", "\"loud", "log.level",
               "expected error, warn, info or debug");
    EXPECT_ERR("{\"log\": {\"fil\": \"x\"}}", "\"fil\"", "log.fil",
               "did you mean 'file'?");
#undef PV_MIN
}

static void
set_example_env(void)
{
    setenv("LLMUX_ADMIN_KEY", "admin-secret-1", 1);
    setenv("RELAY_API_KEY", "sk-relay-secret", 1);
    setenv("LLMUX_MODEL", "/models/tiny.gguf", 1);
}

/* ---------------------------------------------------------------------- */

static void
test_example(void)
{
    set_example_env();
    struct cfg *c = load_ok(example);
    if (!c)
        return;
    T_EQ_STR(c->path, "t.json");
    T_EQ_STR(c->listen_host, "127.0.0.1");
    T_EQ_INT(c->listen_port, 8080);
    T_EQ_INT(c->workers, 2);
    T_EQ_STR(c->database, "llmux.db");
    T_EQ_STR(c->admin_key, "admin-secret-1");
    T_EQ_INT(c->require_keys, 1);
    T_EQ_INT(c->max_body_bytes, 4194304);
    T_EQ_INT(c->max_connections, 10000);
    T_CHECK(c->tls_cert == NULL && c->tls_key == NULL);

    T_EQ_INT(c->n_providers, 2);
    const struct cfg_provider *relay = cfg_provider_find(c, "relay");
    const struct cfg_provider *local = cfg_provider_find(c, "local");
    T_CHECK(relay == &c->providers[0]);
    T_CHECK(local == &c->providers[1]);
    T_CHECK(cfg_provider_find(c, "nope") == NULL);
    if (!relay || !local)
        goto out;
    T_EQ_INT(relay->kind, CFG_KIND_OPENAI);
    T_EQ_STR(relay->base_url, "https://relay.example/v1");
    T_EQ_STR(relay->api_key, "sk-relay-secret");
    T_EQ_INT(relay->timeout_ms, 120000);
    T_EQ_INT(relay->connect_timeout_ms, 3000);
    T_EQ_INT(relay->first_byte_timeout_ms, 20000);
    T_EQ_INT(relay->n_headers, 1);
    if (relay->n_headers == 1) {
        T_EQ_STR(relay->headers[0].name, "X-Org");
        T_EQ_STR(relay->headers[0].value, "acme");
    }
    T_EQ_INT(relay->n_models, 2);
    if (relay->n_models == 2) {
        const struct cfg_model *g = &relay->models[0], *d = &relay->models[1];
        T_EQ_STR(g->name, "gpt-4.1");
        T_EQ_STR(g->upstream, "gpt-4.1");
        T_EQ_INT(g->has_price, 1);
        T_EQ_INT(g->input_pusd, 2000000);
        T_EQ_INT(g->output_pusd, 8000000);
        T_EQ_INT(g->cached_input_pusd, 500000);
        T_EQ_STR(d->name, "deepseek-v3.2");
        T_EQ_STR(d->upstream, "deepseek-chat");
        T_EQ_INT(d->input_pusd, 280000); /* 0.28 exactly */
        T_EQ_INT(d->output_pusd, 420000);
        T_EQ_INT(d->cached_input_pusd, 280000); /* = input when not given */
    }
    T_EQ_INT(local->kind, CFG_KIND_LOCAL);
    T_EQ_STR(local->model_path, "/models/tiny.gguf");
    T_EQ_INT(local->threads, 2);
    T_EQ_INT(local->context, 4096);
    T_EQ_INT(local->parallel, 4);
    T_EQ_INT(local->n_models, 1);
    T_EQ_STR(local->models[0].name, "local");
    T_EQ_INT(local->models[0].input_pusd, 0);
    T_EQ_INT(local->models[0].has_price, 1);

    T_EQ_INT(c->n_routes, 4);
    const struct cfg_route *a = cfg_route_find(c, "auto");
    const struct cfg_route *mix = cfg_route_find(c, "mix");
    T_CHECK(cfg_route_find(c, "gpt-4.1") == NULL);
    if (a) {
        T_EQ_INT(a->policy, CFG_POLICY_COST);
        T_EQ_INT(a->n_targets, 2);
        T_EQ_INT(a->targets[0].provider, 0);
        T_EQ_INT(a->targets[0].model, 1); /* deepseek-v3.2 */
        T_EQ_INT(a->targets[1].model, 0);
        T_EQ_INT(a->has_fallback, 1);
        T_EQ_INT(a->fallback.provider, 1);
        T_EQ_INT(a->fallback.model, 0);
        T_EQ_INT(a->max_latency_ms, 3000);
        T_CHECK(a->weights == NULL);
    }
    T_CHECK(a != NULL);
    T_EQ_INT(cfg_route_find(c, "fast")->policy, CFG_POLICY_LATENCY);
    T_EQ_INT(cfg_route_find(c, "gpt")->policy, CFG_POLICY_PRIORITY);
    T_EQ_INT(cfg_route_find(c, "gpt")->max_latency_ms, 0);
    if (mix) {
        T_EQ_INT(mix->policy, CFG_POLICY_WEIGHTED);
        T_CHECK(mix->weights != NULL);
        if (mix->weights) {
            T_NEAR(mix->weights[0], 1.0, 0);
            T_NEAR(mix->weights[1], 3.0, 0);
        }
    }
    T_EQ_INT(c->failover.max_attempts, 3);
    T_EQ_INT(c->failover.n_retry_on_status, 7);
    T_EQ_INT(c->failover.retry_on_status[0], 408);
    T_EQ_INT(c->failover.retry_on_status[6], 504);
    T_EQ_INT(c->failover.backoff_ms, 50);
    T_EQ_INT(c->failover.circuit_cooldown_ms, 30000);
out:
    cfg_free(c);
}

static const char *minimal =
    "{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
    "\"http://127.0.0.1:9/v1//\", \"models\": {\"gpt-4.1\": {}, "
    "\"cheap\": {\"input_per_mtok\": 2.50, \"output_per_mtok\": 10}}}}}";

static void
test_defaults_filled(void)
{
    struct cfg *c = load_ok(minimal);
    if (!c)
        return;
    T_EQ_STR(c->listen_host, "127.0.0.1");
    T_EQ_INT(c->listen_port, 8080);
    T_CHECK(c->workers >= 1 && c->workers <= 256);
    T_EQ_STR(c->database, "llmux.db");
    T_CHECK(c->admin_key == NULL);
    T_EQ_INT(c->require_keys, 1); /* a file defaults to keys required */
    T_EQ_INT(c->max_body_bytes, 4194304);
    T_EQ_INT(c->max_connections, 10000);
    T_EQ_INT(c->header_timeout_ms, 10000);
    T_EQ_INT(c->idle_timeout_ms, 60000);
    T_EQ_INT(c->stream_buffer_bytes, 262144);
    T_EQ_INT(c->n_cors_origins, 0);
    T_EQ_INT(c->n_routes, 0);
    T_EQ_INT(c->failover.max_attempts, 3);
    T_EQ_INT(c->failover.n_retry_on_status, 8);
    T_EQ_INT(c->failover.retry_on_status[2], 429);
    T_EQ_INT(c->failover.retry_on_status[7], 529); /* Anthropic overloaded */
    T_EQ_INT(c->failover.backoff_ms, 50);
    T_EQ_INT(c->failover.hedge_after_ms, 0);
    T_EQ_INT(c->failover.circuit_failures, 5);
    T_EQ_INT(c->failover.circuit_cooldown_ms, 30000);
    const struct cfg_provider *p = &c->providers[0];
    T_EQ_STR(p->base_url, "http://127.0.0.1:9/v1"); /* slashes trimmed */
    T_CHECK(p->api_key == NULL);                     /* optional */
    /* The documented defaults (README, DESIGN.md section 5): a 90 s
     * answer and a 45 s first token must fit. */
    T_EQ_INT(p->timeout_ms, 600000);
    T_EQ_INT(p->connect_timeout_ms, 10000);
    T_EQ_INT(p->first_byte_timeout_ms, 300000);
    T_CHECK(p->timeout_ms >= 90000 && p->first_byte_timeout_ms >= 45000);
    T_EQ_INT(p->n_headers, 0);
    T_EQ_INT(p->n_models, 2);
    /* gpt-4.1 without prices: the built-in table (2.00 / 0.50 / 8.00). */
    T_EQ_INT(p->models[0].has_price, 1);
    T_EQ_INT(p->models[0].input_pusd, 2000000);
    T_EQ_INT(p->models[0].output_pusd, 8000000);
    T_EQ_INT(p->models[1].input_pusd, 2500000); /* 2.50 exactly */
    T_EQ_INT(p->models[1].output_pusd, 10000000);
    T_EQ_INT(p->models[1].cached_input_pusd, 2500000);
    cfg_free(c);

    /* Other forms: models as an array of names, a local provider with no
     * models (-> "local" at price 0), listen on IPv6, tls, limits. */
    c = load_ok("{\"listen\": \"[::1]:0\", \"workers\": 256, "
                "\"require_keys\": false, "
                "\"tls\": {\"cert\": \"c.pem\", \"key\": \"k.pem\"}, "
                "\"limits\": {\"max_body_bytes\": 1024}, "
                "\"providers\": {"
                "\"a\": {\"kind\": \"openai\", \"base_url\": "
                "\"HTTPS://x.example\", \"models\": [\"gpt-4.1\", "
                "\"deepseek-v3.2\"]},"
                "\"l\": {\"kind\": \"local\", \"model_path\": \"m.gguf\", "
                "\"parallel\": 1}}}");
    if (!c)
        return;
    T_EQ_STR(c->listen_host, "::1");
    T_EQ_INT(c->listen_port, 0);
    T_EQ_INT(c->workers, 256);
    T_EQ_INT(c->require_keys, 0);
    T_EQ_STR(c->tls_cert, "c.pem");
    T_EQ_STR(c->tls_key, "k.pem");
    T_EQ_INT(c->max_body_bytes, 1024);
    T_EQ_INT(c->providers[0].n_models, 2);
    T_EQ_INT(c->providers[0].models[1].input_pusd, 280000);
    T_EQ_INT(c->providers[0].models[1].output_pusd, 420000);
    T_EQ_STR(c->providers[1].models[0].name, "local");
    T_EQ_INT(c->providers[1].models[0].output_pusd, 0);
    T_EQ_INT(c->providers[1].context, 4096);
    T_EQ_INT(c->providers[1].parallel, 1);
    T_CHECK(c->providers[1].threads >= 1);
    cfg_free(c);
}

static void
test_interpolation(void)
{
    setenv("T_HOST", "10.0.0.7", 1);
    setenv("T_KEY", "sk-abc", 1);
    setenv("T_EMPTY", "", 1);
    unsetenv("T_UNSET");
    struct cfg *c = load_ok(
        "{\"listen\": \"${T_HOST}:${T_PORT:-9090}\",\n"
        " \"database\": \"/var/$${literal}/${T_UNSET:-d.db}$x\",\n"
        " \"require_keys\": false, \"admin_key\": \"${T_UNSET}\",\n"
        " \"providers\": {\"p\": {\"kind\": \"openai\",\n"
        "   \"base_url\": \"http://${T_HOST}/v1\", \"api_key\": "
        "\"${T_KEY}\",\n"
        "   \"headers\": {\"X-A\": \"${T_EMPTY}\", \"X-B\": \"v-${T_KEY}\"},\n"
        "   \"models\": [\"gpt-4.1\"]}}}");
    if (c) {
        T_EQ_STR(c->listen_host, "10.0.0.7");
        T_EQ_INT(c->listen_port, 9090);
        T_EQ_STR(c->database, "/var/${literal}/d.db$x");
        T_CHECK(c->admin_key == NULL); /* optional: keys not required */
        T_EQ_STR(c->providers[0].base_url, "http://10.0.0.7/v1");
        T_EQ_STR(c->providers[0].api_key, "sk-abc");
        T_EQ_STR(c->providers[0].headers[0].value, "");
        T_EQ_STR(c->providers[0].headers[1].value, "v-sk-abc");
    }
    cfg_free(c);

    const char *secret =
        "{\"providers\": {\"p\": {\"kind\": \"openai\",\n"
        "  \"base_url\": \"http://h\", \"api_key\": \"${T_SECRET}\",\n"
        "  \"models\": [\"gpt-4.1\"]}}}";
    unsetenv("T_SECRET");
    EXPECT_ERR(secret, "\"${T_SECRET}", "providers.p.api_key",
               "environment variable T_SECRET is not set");
    setenv("T_SECRET", "", 1);
    EXPECT_ERR(secret, "\"${T_SECRET}", "providers.p.api_key",
               "environment variable T_SECRET is empty");
    setenv("T_SECRET", "ok", 1);
    c = load_ok(secret);
    cfg_free(c);
    EXPECT_ERR("{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
               "\"http://h\", \"api_key\": \"\", \"models\": [\"gpt-4.1\"]}}}",
               "\"\"", "providers.p.api_key", "must not be empty");

    /* admin_key is a required secret only when keys are required. */
    const char *admin =
        "{\"admin_key\": \"${T_ADMIN}\",\n"
        " \"providers\": {\"p\": {\"kind\": \"local\", \"model_path\": "
        "\"m\"}}}";
    unsetenv("T_ADMIN");
    EXPECT_ERR(admin, "\"${T_ADMIN}", "admin_key",
               "environment variable T_ADMIN is not set");
    setenv("T_ADMIN", "", 1);
    EXPECT_ERR(admin, "\"${T_ADMIN}", "admin_key", "T_ADMIN is empty");

    /* Elsewhere an unset variable is an error too (model_path here). */
    unsetenv("T_MODEL");
    const char *mp = "{\"providers\": {\n"
                     "  \"local\": {\"kind\": \"local\",\n"
                     "    \"model_path\": \"${T_MODEL}\"}}}";
    EXPECT_ERR(mp, "\"${T_MODEL}", "providers.local.model_path",
               "environment variable T_MODEL is not set");
    /* Literal line/column of that value, counted by hand: line 3, col 19. */
    char err[512];
    struct cfg *bad = NULL;
    T_EQ_INT(cfg_load_string(mp, "x.json", &bad, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strncmp(err, "x.json:3:19: providers.local.model_path: ", 41) ==
            0);

    EXPECT_ERR("{\"database\": \"${1BAD}\", \"providers\": {}}", "\"${1BAD}",
               "database", "bad ${...}");
    EXPECT_ERR("{\"database\": \"${OPEN\", \"providers\": {}}", "\"${OPEN",
               "database", "missing '}'");
    /* A control character smuggled in through the environment. */
    setenv("T_CRLF", "a\r\nX-Evil: 1", 1);
    EXPECT_ERR("{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
               "\"http://h\", \"headers\": {\"X-A\": \"${T_CRLF}\"}, "
               "\"models\": [\"gpt-4.1\"]}}}",
               "\"${T_CRLF}", "providers.p.headers.X-A",
               "control character");
}

/* A base for error tests: line numbers matter, keep the layout. */
static void
test_errors_positions(void)
{
    /* Unknown key with a suggestion; exact position spelled out. */
    const char *t1 = "{\n"
                     "  \"providers\": {\n"
                     "    \"relay\": {\n"
                     "      \"kind\": \"openai\",\n"
                     "      \"base_url\": \"https://relay.example/v1\",\n"
                     "      \"timout_ms\": 5,\n"
                     "      \"models\": { \"gpt-4.1\": {} }\n"
                     "    }\n"
                     "  }\n"
                     "}\n";
    char err[512];
    struct cfg *c = NULL;
    T_EQ_INT(cfg_load_string(t1, "t.json", &c, err, sizeof(err)), GX_EINVAL);
    T_EQ_STR(err, "t.json:6:7: providers.relay.timout_ms: unknown key "
                  "'timout_ms' (did you mean 'timeout_ms'?)");
    T_CHECK(c == NULL);

    /* Wrong type: the value's position; a multi-byte character before it
     * counts as one column. */
    const char *t2 =
        "{\"providers\": {\"r\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://h\",\n\n"
        "  \"headers\": {\"X-N\": \"\xc3\xa9t\xc3\xa9\"}, "
        "\"models\": {\"gpt-4.1\": {\"input_per_mtok\": \"2.0\", "
        "\"output_per_mtok\": 8}}}}}";
    EXPECT_ERR(t2, "\"2.0\"", "providers.r.models.gpt-4.1.input_per_mtok",
               "expected a number, got a string");
    T_EQ_INT(cfg_load_string(t2, "t.json", &c, err, sizeof(err)), GX_EINVAL);
    T_CHECK(strncmp(err, "t.json:3:71: ", 13) == 0);

    const char *t3 = "{\"workers\": \"2\",\n \"providers\": {}}";
    EXPECT_ERR(t3, "\"2\"", "workers", "expected an integer, got a string");
    T_EQ_INT(cfg_load_string(t3, "t.json", &c, err, sizeof(err)), GX_EINVAL);
    T_EQ_STR(err, "t.json:1:13: workers: expected an integer, got a string");

    /* A UTF-8 BOM is skipped and not counted as a column. */
    T_EQ_INT(cfg_load_string("\xEF\xBB\xBF{\"workers\": 0}", "t.json", &c,
                             err, sizeof(err)),
             GX_EINVAL);
    T_EQ_STR(err, "t.json:1:13: workers: must be between 1 and 256, got 0");

    /* Keys spelled with escapes still map to their decoded path. */
    EXPECT_ERR("{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
               "\"http://h\", \"models\": {\"gpt\\u002d4.1\": {\n"
               "  \"upstream\": 7}}}}}",
               "7", "providers.p.models.gpt-4.1.upstream",
               "expected a string, got an integer");
}

/* Base for the provider-level error classes; %s is spliced in. */
static void
provider_err(int tline, const char *inner, const char *at, const char *path,
             const char *reason)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"providers\": {\n"
             "  \"p\": {%s}\n"
             "}}",
             inner);
    expect_err_at(tline, text, at, 0, path, reason);
}
#define PROVIDER_ERR(inner, at, path, reason)                                \
    provider_err(__LINE__, (inner), (at), (path), (reason))

#define OAI "\"kind\": \"openai\", \"base_url\": \"http://h\", "

static void
test_errors_providers(void)
{
    PROVIDER_ERR("\"kind\": \"opena1\", \"models\": [\"gpt-4.1\"]",
                 "\"opena1\"", "providers.p.kind",
                 "unknown provider kind 'opena1' (did you mean 'openai'?)");
    PROVIDER_ERR("\"kind\": \"grpc\"", "\"grpc\"", "providers.p.kind",
                 "expected openai, anthropic, gemini or local");
    PROVIDER_ERR("\"models\": [\"gpt-4.1\"]", "{\"models", "providers.p.kind",
                 "missing required key");
    PROVIDER_ERR("\"kind\": \"openai\", \"base_url\": \"ftp://h\", "
                 "\"models\": [\"gpt-4.1\"]",
                 "\"ftp://h\"", "providers.p.base_url",
                 "expected an http:// or https:// URL");
    PROVIDER_ERR("\"kind\": \"openai\", \"base_url\": \"https://\", "
                 "\"models\": [\"gpt-4.1\"]",
                 "\"https://\"", "providers.p.base_url", "http");
    PROVIDER_ERR("\"kind\": \"openai\", \"models\": [\"gpt-4.1\"]",
                 "{\"kind", "providers.p.base_url", "missing required key");
    PROVIDER_ERR(OAI "\"timeout_ms\": -5, \"models\": [\"gpt-4.1\"]", "-5",
                 "providers.p.timeout_ms",
                 "must be between 1 and 86400000, got -5");
    PROVIDER_ERR(OAI "\"connect_timeout_ms\": 0, \"models\": [\"gpt-4.1\"]",
                 "0,", "providers.p.connect_timeout_ms", "got 0");
    PROVIDER_ERR(OAI "\"first_byte_timeout_ms\": 1.5, \"models\": "
                     "[\"gpt-4.1\"]",
                 "1.5", "providers.p.first_byte_timeout_ms",
                 "expected an integer");
    PROVIDER_ERR("\"kind\": \"local\", \"model_path\": \"m\", \"base_url\": "
                 "\"http://h\"",
                 "\"base_url", "providers.p.base_url",
                 "key 'base_url' is not valid for a local provider");
    PROVIDER_ERR(OAI "\"threads\": 2, \"models\": [\"gpt-4.1\"]",
                 "\"threads", "providers.p.threads",
                 "not valid for an openai provider");
    PROVIDER_ERR("\"kind\": \"local\", \"model_path\": \"m\", "
                 "\"parallel\": 0",
                 "0", "providers.p.parallel", "must be between 1 and 256");
    PROVIDER_ERR("\"kind\": \"local\"", "{\"kind", "providers.p.model_path",
                 "missing required key");
    PROVIDER_ERR(OAI "\"models\": {}", "{}", "providers.p.models",
                 "at least one model");
    PROVIDER_ERR(OAI "\"wibble\": 1, \"models\": [\"gpt-4.1\"]",
                 "\"wibble", "providers.p.wibble",
                 "unknown key 'wibble' (expected one of: kind, base_url");
    PROVIDER_ERR(OAI "\"models\": [\"gpt-4.1\", \"gpt-4.1\"]",
                 "\"gpt-4.1\"]", "providers.p.models[1]",
                 "duplicate model 'gpt-4.1'");
    PROVIDER_ERR(OAI "\"models\": [\"gpt-4.1\", 5]", "5]",
                 "providers.p.models[1]", "expected a model name");
    PROVIDER_ERR(OAI "\"models\": {\"gpt-4.1\": {\"inptu_per_mtok\": 1}}",
                 "\"inptu", "providers.p.models.gpt-4.1.inptu_per_mtok",
                 "did you mean 'input_per_mtok'?");
    PROVIDER_ERR(OAI "\"models\": {\"my-model\": {}}", "\"my-model",
                 "providers.p.models.my-model",
                 "no price for model 'my-model'");
    PROVIDER_ERR(OAI "\"models\": [\"my-model\"]", "\"my-model",
                 "providers.p.models[0]", "no price for model 'my-model'");
    PROVIDER_ERR(OAI "\"models\": {\"m\": {\"input_per_mtok\": 1}}",
                 "{\"input", "providers.p.models.m.output_per_mtok",
                 "missing required key");
    PROVIDER_ERR(OAI "\"models\": {\"m\": {\"input_per_mtok\": -1, "
                     "\"output_per_mtok\": 1}}",
                 "-1", "providers.p.models.m.input_per_mtok",
                 "must not be negative");
    PROVIDER_ERR(OAI "\"models\": {\"m\": []}", "[]", "providers.p.models.m",
                 "expected an object");
    PROVIDER_ERR(OAI "\"headers\": {\"Bad Header\": \"x\"}, \"models\": "
                     "[\"gpt-4.1\"]",
                 "\"Bad Header", "providers.p.headers.Bad Header",
                 "not a valid HTTP header name");
    PROVIDER_ERR(OAI "\"headers\": {\"content-length\": \"1\"}, "
                     "\"models\": [\"gpt-4.1\"]",
                 "\"content-length", "providers.p.headers.content-length",
                 "set by llmux itself");
    PROVIDER_ERR(OAI "\"api_key\": \"k\", \"headers\": {\"Authorization\": "
                     "\"Bearer x\"}, \"models\": [\"gpt-4.1\"]",
                 "\"Authorization", "providers.p.headers.Authorization",
                 "conflicts with api_key");
    PROVIDER_ERR(OAI "\"headers\": [], \"models\": [\"gpt-4.1\"]", "[]",
                 "providers.p.headers", "expected an object, got an array");

    /* A local model without a price is free; an unpriced name is fine. */
    struct cfg *c = load_ok("{\"providers\": {\"l\": {\"kind\": \"local\", "
                            "\"model_path\": \"m\", \"models\": "
                            "{\"tiny\": {}}}}}");
    if (c) {
        T_EQ_INT(c->providers[0].models[0].has_price, 1);
        T_EQ_INT(c->providers[0].models[0].input_pusd, 0);
    }
    cfg_free(c);
    /* Provider names may not carry '@'. */
    EXPECT_ERR("{\"providers\": {\"a@b\": {\"kind\": \"local\", "
               "\"model_path\": \"m\"}}}",
               "\"a@b", "providers.a@b", "must not contain '@'");
}

static void
test_errors_top(void)
{
    EXPECT_ERR("{\"listn\": \"x\", \"providers\": {}}", "\"listn",
               "listn", "unknown key 'listn' (did you mean 'listen'?)");
    EXPECT_ERR("[1, 2]", "[", "(root)", "expected an object, got an array");
    EXPECT_ERR("{\"workers\": 0}", "0", "workers",
               "must be between 1 and 256, got 0");
    EXPECT_ERR("{\"workers\": 257}", "257", "workers", "got 257");
    EXPECT_ERR("{\"require_keys\": \"yes\"}", "\"yes\"", "require_keys",
               "expected true or false, got a string");
    EXPECT_ERR("{\"listen\": \"localhost\"}", "\"localhost\"", "listen",
               "expected HOST:PORT");
    EXPECT_ERR("{\"listen\": \"127.0.0.1:70000\"}", "\"127", "listen",
               "port must be between 0 and 65535");
    EXPECT_ERR("{\"listen\": \"::1:80\"}", "\"::1", "listen",
               "expected HOST:PORT");
    EXPECT_ERR("{\"listen\": \":80\"}", "\":80", "listen",
               "expected HOST:PORT");
    EXPECT_ERR("{\"listen\": \"h:8x\"}", "\"h:8x", "listen",
               "expected HOST:PORT");
    EXPECT_ERR("{\"database\": \"\"}", "\"\"", "database",
               "must not be empty");
    EXPECT_ERR("{\"limits\": {\"max_body_bytes\": 0}}", "0", "limits."
               "max_body_bytes", "must be between 1 and");
    EXPECT_ERR("{\"limits\": {\"max_conections\": 5}}", "\"max_con",
               "limits.max_conections", "did you mean 'max_connections'?");
    EXPECT_ERR("{\"limits\": {\"header_timeout_ms\": 99}}", "99",
               "limits.header_timeout_ms", "must be between 100 and");
    EXPECT_ERR("{\"limits\": {\"idle_timeout_ms\": \"5\"}}", "\"5\"",
               "limits.idle_timeout_ms", "got a string");
    EXPECT_ERR("{\"limits\": {\"stream_buffer_bytes\": 100}}", "100",
               "limits.stream_buffer_bytes", "must be between 1024 and");
    EXPECT_ERR("{\"cors\": {\"origins\": \"*\"}}", "\"*\"", "cors.origins",
               "expected an array of origins");
    EXPECT_ERR("{\"cors\": {\"origins\": [\"https://a.example/x\"]}}",
               "\"https", "cors.origins[0]", "without a path");
    EXPECT_ERR("{\"cors\": {\"origins\": [\"*\", \"app.example\"]}}",
               "\"app", "cors.origins[1]", "scheme://host[:port]");
    EXPECT_ERR("{\"cors\": {\"origin\": []}}", "\"origin\"", "cors.origin",
               "did you mean 'origins'?");
    EXPECT_ERR("{\"tls\": {\"cert\": \"c.pem\"}}", "{\"cert", "tls.key",
               "missing required key");
    EXPECT_ERR("{\"tls\": true}", "true", "tls",
               "expected an object, got a boolean");
    EXPECT_ERR("{\"listen\": \"127.0.0.1:1\"}", "{", "providers",
               "missing required key");
    EXPECT_ERR("{\"providers\": {}}", "{}", "providers",
               "at least one provider");
    EXPECT_ERR("{\"providers\": []}", "[]", "providers",
               "expected an object, got an array");

    /* Syntax errors: jansson's own line and column. */
    char err[512];
    struct cfg *c = NULL;
    T_EQ_INT(cfg_load_string("{\"a\": 1,\n  \"b\": [1, 2,, 3]}", "s.json",
                             &c, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strncmp(err, "s.json:2:14: invalid JSON: ", 27) == 0);
    T_EQ_INT(cfg_load_string("", "s.json", &c, err, sizeof(err)), GX_EINVAL);
    T_CHECK(strncmp(err, "s.json:1:1: invalid JSON", 24) == 0);

    /* Duplicate keys: the second key's position, the first one named. */
    const char *dup = "{\"providers\": {\n"
                      "  \"p\": {\"kind\": \"local\", \"model_path\": \"m\"},\n"
                      "  \"p\": {\"kind\": \"local\", \"model_path\": \"n\"}}}";
    T_EQ_INT(cfg_load_string(dup, "d.json", &c, err, sizeof(err)), GX_EINVAL);
    T_EQ_STR(err, "d.json:3:3: providers.p: duplicate key 'p' (first at "
                  "line 2, column 3)");
    const char *dup2 = "{\"providers\": {\"p\": {\"kind\": \"local\", "
                       "\"model_path\": \"m\"}},\n"
                       " \"routes\": {\"r\": {\"targets\": [\"local@p\"]},\n"
                       "            \"r\": {\"targets\": [\"local@p\"]}}}";
    T_EQ_INT(cfg_load_string(dup2, "d.json", &c, err, sizeof(err)),
             GX_EINVAL);
    T_EQ_STR(err, "d.json:3:13: routes.r: duplicate key 'r' (first at "
                  "line 2, column 13)");
    /* A key with dots in it is named whole. */
    const char *dup3 = "{\"providers\": {\"p\": {\"kind\": \"openai\", "
                       "\"base_url\": \"http://h\", \"models\": {\n"
                       "  \"gpt-4.1\": {}, \"gpt-4.1\": {}}}}}";
    T_EQ_INT(cfg_load_string(dup3, "d.json", &c, err, sizeof(err)),
             GX_EINVAL);
    T_EQ_STR(err, "d.json:2:18: providers.p.models.gpt-4.1: duplicate key "
                  "'gpt-4.1' (first at line 2, column 3)");
    T_CHECK(c == NULL);
}

#define ROUTES_BASE                                                          \
    "{\"providers\": {\n"                                                    \
    "  \"relay\": {\"kind\": \"openai\", \"base_url\": \"http://h\",\n"      \
    "    \"models\": [\"gpt-4.1\", \"deepseek-v3.2\"]},\n"                   \
    "  \"local\": {\"kind\": \"local\", \"model_path\": \"m\"}},\n"          \
    " \"routes\": {\n"

static void
route_err(int tline, const char *route, const char *at, const char *path,
          const char *reason)
{
    char text[2048];
    snprintf(text, sizeof(text), ROUTES_BASE "  \"r\": %s\n}}", route);
    expect_err_at(tline, text, at, 0, path, reason);
}
#define ROUTE_ERR(route, at, path, reason)                                   \
    route_err(__LINE__, (route), (at), (path), (reason))

static void
test_errors_routes(void)
{
    ROUTE_ERR("{\"targets\": []}", "[]", "routes.r.targets",
              "empty route");
    ROUTE_ERR("{\"policy\": \"cost\"}", "{\"policy", "routes.r.targets",
              "missing required key");
    ROUTE_ERR("{\"targets\": \"gpt-4.1@relay\"}", "\"gpt-4.1@relay\"}",
              "routes.r.targets", "expected an array");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1@relay\", \"gpt-4.1@rely\"]}",
              "\"gpt-4.1@rely\"", "routes.r.targets[1]",
              "unknown provider 'rely' in target 'gpt-4.1@rely' (did you "
              "mean 'relay'?)");
    ROUTE_ERR("{\"targets\": [\"gpt-4.2@relay\"]}", "\"gpt-4.2@relay\"",
              "routes.r.targets[0]",
              "provider 'relay' has no model 'gpt-4.2' (did you mean "
              "'gpt-4.1'?)");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1\"]}", "\"gpt-4.1\"]",
              "routes.r.targets[0]",
              "'gpt-4.1' is not a target (expected MODEL@PROVIDER; did you "
              "mean 'gpt-4.1@relay'?)");
    ROUTE_ERR("{\"targets\": [\"@relay\"]}", "\"@relay\"",
              "routes.r.targets[0]", "is not a target");
    ROUTE_ERR("{\"targets\": [3]}", "3]", "routes.r.targets[0]",
              "expected a target");
    ROUTE_ERR("{\"targets\": [\"local@local\", \"gpt-4.1@relay\", "
              "\"local@local\"]}",
              "\"local@local\"]", "routes.r.targets[2]",
              "duplicate target 'local@local' (already targets[0])");
    ROUTE_ERR("{\"policy\": \"cheapest\", \"targets\": [\"local@local\"]}",
              "\"cheapest\"", "routes.r.policy",
              "unknown policy 'cheapest'");
    ROUTE_ERR("{\"policy\": \"latncy\", \"targets\": [\"local@local\"]}",
              "\"latncy\"", "routes.r.policy", "did you mean 'latency'?");
    ROUTE_ERR("{\"policy\": \"weighted\", \"targets\": [\"gpt-4.1@relay\", "
              "\"local@local\"], \"weights\": [1]}",
              "[1]", "routes.r.weights",
              "has 1 weights but targets has 2");
    ROUTE_ERR("{\"policy\": \"weighted\", \"targets\": [\"gpt-4.1@relay\", "
              "\"local@local\"], \"weights\": [1, -2]}",
              "-2", "routes.r.weights[1]", "must not be negative");
    ROUTE_ERR("{\"policy\": \"weighted\", \"targets\": [\"gpt-4.1@relay\", "
              "\"local@local\"], \"weights\": [0, 0]}",
              "[0, 0]", "routes.r.weights", "add up to more than 0");
    ROUTE_ERR("{\"policy\": \"weighted\", \"targets\": [\"gpt-4.1@relay\"], "
              "\"weights\": [\"1\"]}",
              "\"1\"", "routes.r.weights[0]", "expected a number");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1@relay\"], \"weights\": [1]}",
              "\"weights", "routes.r.weights", "only used with");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1@relay\"], \"fallback\": "
              "\"local@locl\"}",
              "\"local@locl\"", "routes.r.fallback",
              "unknown provider 'locl'");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1@relay\"], \"max_latency_ms\": -1}",
              "-1", "routes.r.max_latency_ms", "must be between 0 and");
    ROUTE_ERR("{\"targets\": [\"gpt-4.1@relay\"], \"fallbak\": 1}",
              "\"fallbak", "routes.r.fallbak", "did you mean 'fallback'?");
    ROUTE_ERR("[\"gpt-4.1@relay\"]", "[\"gpt-4.1@relay\"]\n", "routes.r",
              "expected an object");

    /* failover */
    const char *fo_base = "{\"providers\": {\"l\": {\"kind\": \"local\", "
                          "\"model_path\": \"m\"}},\n \"failover\": %s}";
    char text[1024];
    snprintf(text, sizeof(text), fo_base,
             "{\"retry_on_status\": [500, 600]}");
    EXPECT_ERR(text, "600", "failover.retry_on_status[1]",
               "must be between 100 and 599, got 600");
    snprintf(text, sizeof(text), fo_base, "{\"retry_on_status\": [99]}");
    EXPECT_ERR(text, "99", "failover.retry_on_status[0]", "got 99");
    snprintf(text, sizeof(text), fo_base, "{\"max_attempts\": 0}");
    EXPECT_ERR(text, "0}", "failover.max_attempts",
               "must be between 1 and 100, got 0");
    snprintf(text, sizeof(text), fo_base, "{\"backoff_ms\": -1}");
    EXPECT_ERR(text, "-1", "failover.backoff_ms", "must be between 0");
    snprintf(text, sizeof(text), fo_base, "{\"hedge_ms\": 1}");
    EXPECT_ERR(text, "\"hedge_ms", "failover.hedge_ms", "unknown key");
    snprintf(text, sizeof(text), fo_base, "{\"retry_on_status\": 500}");
    EXPECT_ERR(text, "500", "failover.retry_on_status", "expected an array");

    /* Valid: weighted without weights means equal weights; an empty
     * retry list is allowed. */
    snprintf(text, sizeof(text), ROUTES_BASE "%s}, \"failover\": "
             "{\"retry_on_status\": []}}",
             "  \"w\": {\"policy\": \"weighted\", \"targets\": "
             "[\"gpt-4.1@relay\", \"local@local\"]}\n");
    struct cfg *c = load_ok(text);
    if (c) {
        const struct cfg_route *w = cfg_route_find(c, "w");
        T_CHECK(w && w->weights && w->weights[0] == 1 && w->weights[1] == 1);
        T_EQ_INT(c->failover.n_retry_on_status, 0);
    }
    cfg_free(c);
}

static void
test_limits_and_cors(void)
{
    struct cfg *c = load_ok(
        "{\"limits\": {\"max_connections\": 8, \"header_timeout_ms\": 250, "
        "\"idle_timeout_ms\": 1500, \"stream_buffer_bytes\": 4096}, "
        "\"cors\": {\"origins\": "
        "[\"https://app.example\", \"http://127.0.0.1:3000\", \"*\"]}, "
        "\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:9/v1\", \"models\": {\"gpt-4.1\": {}}}}}");
    if (!c)
        return;
    T_EQ_INT(c->max_connections, 8);
    T_EQ_INT(c->header_timeout_ms, 250);
    T_EQ_INT(c->idle_timeout_ms, 1500);
    T_EQ_INT(c->stream_buffer_bytes, 4096);
    T_EQ_INT(c->n_cors_origins, 3);
    T_EQ_STR(c->cors_origins[0], "https://app.example");
    T_EQ_STR(c->cors_origins[1], "http://127.0.0.1:3000");
    T_EQ_STR(c->cors_origins[2], "*");
    cfg_free(c);
}

static void
test_resolve(void)
{
    const char *text =
        "{\"providers\": {\n"
        "  \"a\": {\"kind\": \"openai\", \"base_url\": \"http://a\",\n"
        "    \"models\": [\"gpt-4.1\", \"deepseek-v3.2\"]},\n"
        "  \"b\": {\"kind\": \"openai\", \"base_url\": \"http://b\",\n"
        "    \"models\": [\"claude-sonnet-4.5\", \"gpt-4.1\"]},\n"
        "  \"local\": {\"kind\": \"local\", \"model_path\": \"m\"}},\n"
        " \"routes\": {\n"
        "  \"auto\": {\"policy\": \"cost\", \"targets\": "
        "[\"deepseek-v3.2@a\", \"gpt-4.1@b\"], \"fallback\": "
        "\"local@local\"},\n"
        "  \"gpt-4.1\": {\"targets\": [\"gpt-4.1@b\"]},\n"
        "  \"loc\": {\"targets\": [\"local@local\"], \"fallback\": "
        "\"local@local\"}}}";
    struct cfg *c = load_ok(text);
    if (!c)
        return;
    struct cfg_target t[8];
    const struct cfg_route *r = (const struct cfg_route *)1;

    /* A route name: its targets, then the fallback. */
    T_EQ_INT(cfg_resolve(c, "auto", &r, t, 8), 3);
    T_CHECK(r == cfg_route_find(c, "auto"));
    T_EQ_INT(t[0].provider, 0);
    T_EQ_INT(t[0].model, 1);
    T_EQ_INT(t[1].provider, 1);
    T_EQ_INT(t[1].model, 1);
    T_EQ_INT(t[2].provider, 2);
    T_EQ_INT(t[2].model, 0);
    T_EQ_INT(cfg_resolve(c, "auto", &r, t, 2), 2); /* cap respected */
    /* A fallback that is already a target is not tried twice. */
    T_EQ_INT(cfg_resolve(c, "loc", &r, t, 8), 1);

    /* A target. */
    T_EQ_INT(cfg_resolve(c, "gpt-4.1@a", &r, t, 8), 1);
    T_CHECK(r == NULL);
    T_EQ_INT(t[0].provider, 0);
    T_EQ_INT(t[0].model, 0);
    T_EQ_INT(cfg_resolve(c, "gpt-4.1@nope", &r, t, 8), 0);
    T_EQ_INT(cfg_resolve(c, "claude-sonnet-4.5@a", &r, t, 8), 0);

    /* A bare model: every provider listing it, in config order... */
    T_EQ_INT(cfg_resolve(c, "claude-sonnet-4.5", &r, t, 8), 1);
    T_CHECK(r == NULL);
    T_EQ_INT(t[0].provider, 1);
    T_EQ_INT(t[0].model, 0);
    T_EQ_INT(cfg_resolve(c, "deepseek-v3.2", &r, t, 8), 1);
    T_EQ_INT(cfg_resolve(c, "local", &r, t, 8), 1);
    T_EQ_INT(t[0].provider, 2);
    /* ...but a route of the same name wins. */
    T_EQ_INT(cfg_resolve(c, "gpt-4.1", &r, t, 8), 1);
    T_CHECK(r == cfg_route_find(c, "gpt-4.1"));
    T_EQ_INT(t[0].provider, 1);

    T_EQ_INT(cfg_resolve(c, "nope", &r, t, 8), 0);
    T_CHECK(r == NULL);
    T_EQ_INT(cfg_resolve(c, "", NULL, t, 8), 0);
    cfg_free(c);

    /* Bare model in several providers, config order. */
    c = load_ok("{\"providers\": {\n"
                "  \"z\": {\"kind\": \"openai\", \"base_url\": \"http://z\", "
                "\"models\": [\"gpt-4.1\"]},\n"
                "  \"a\": {\"kind\": \"openai\", \"base_url\": \"http://a\", "
                "\"models\": [\"deepseek-v3.2\", \"gpt-4.1\"]}}}");
    if (c) {
        T_EQ_INT(cfg_resolve(c, "gpt-4.1", NULL, t, 8), 2);
        T_EQ_INT(t[0].provider, 0);
        T_EQ_INT(t[0].model, 0);
        T_EQ_INT(t[1].provider, 1);
        T_EQ_INT(t[1].model, 1);
        T_EQ_INT(cfg_resolve(c, "gpt-4.1", NULL, t, 1), 1);
    }
    cfg_free(c);
}

static const char *const env_names[] = {
    "OPENAI_API_KEY",  "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
    "DEEPSEEK_API_KEY", "LLMUX_RELAY_URL",  "LLMUX_RELAY_KEY",
    "LLMUX_MODEL",     "LLMUX_LISTEN",      "LLMUX_DATABASE",
    "LLMUX_ADMIN_KEY", NULL};

static void
clear_env(void)
{
    for (size_t k = 0; env_names[k]; k++)
        unsetenv(env_names[k]);
}

static void
test_defaults_env(void)
{
    char err[512];
    struct cfg *c = NULL;

    clear_env();
    T_EQ_INT(cfg_defaults(&c, err, sizeof(err)), GX_OK);
    if (c) {
        T_EQ_STR(c->path, "(defaults)");
        T_EQ_STR(c->listen_host, "127.0.0.1");
        T_EQ_INT(c->listen_port, 8080);
        T_EQ_STR(c->database, "llmux.db");
        T_EQ_INT(c->require_keys, 0);
        T_CHECK(c->admin_key == NULL);
        T_EQ_INT(c->n_providers, 0);
        T_EQ_INT(c->n_routes, 0);
        T_EQ_INT(c->failover.max_attempts, 3);
        T_CHECK(c->workers >= 1);
    }
    cfg_free(c);
    c = NULL;

    /* Only the local engine: route auto is local@local. */
    setenv("LLMUX_MODEL", "/m/tiny.gguf", 1);
    setenv("OPENAI_API_KEY", "", 1); /* empty counts as unset */
    T_EQ_INT(cfg_defaults(&c, err, sizeof(err)), GX_OK);
    if (c) {
        T_EQ_INT(c->n_providers, 1);
        T_EQ_STR(c->providers[0].name, "local");
        T_EQ_INT(c->providers[0].kind, CFG_KIND_LOCAL);
        T_EQ_STR(c->providers[0].model_path, "/m/tiny.gguf");
        T_EQ_STR(c->providers[0].models[0].name, "local");
        T_EQ_INT(c->providers[0].context, 4096);
        T_EQ_INT(c->n_routes, 1);
        T_EQ_INT(c->routes[0].n_targets, 1);
        T_EQ_INT(c->routes[0].has_fallback, 0);
    }
    cfg_free(c);
    c = NULL;

    /* Everything. */
    setenv("OPENAI_API_KEY", "sk-o", 1);
    setenv("ANTHROPIC_API_KEY", "sk-a", 1);
    setenv("GEMINI_API_KEY", "sk-g", 1);
    setenv("DEEPSEEK_API_KEY", "sk-d", 1);
    setenv("LLMUX_RELAY_URL", "https://relay.example/v1/", 1);
    setenv("LLMUX_RELAY_KEY", "sk-r", 1);
    setenv("LLMUX_LISTEN", "0.0.0.0:9999", 1);
    setenv("LLMUX_DATABASE", ":memory:", 1);
    setenv("LLMUX_ADMIN_KEY", "adm", 1);
    T_EQ_INT(cfg_defaults(&c, err, sizeof(err)), GX_OK);
    if (c) {
        T_EQ_STR(c->listen_host, "0.0.0.0");
        T_EQ_INT(c->listen_port, 9999);
        T_EQ_STR(c->database, ":memory:");
        T_EQ_STR(c->admin_key, "adm");
        T_EQ_INT(c->n_providers, 6);
        const struct cfg_provider *p;
        p = cfg_provider_find(c, "openai");
        T_CHECK(p && !strcmp(p->base_url, "https://api.openai.com/v1") &&
                !strcmp(p->api_key, "sk-o") && p->n_models == 2 &&
                !strcmp(p->models[0].name, "gpt-4.1") &&
                !strcmp(p->models[1].name, "gpt-4.1-mini") &&
                p->models[0].input_pusd == 2000000);
        p = cfg_provider_find(c, "anthropic");
        T_CHECK(p && !strcmp(p->base_url, "https://api.anthropic.com/v1") &&
                p->kind == CFG_KIND_OPENAI &&
                !strcmp(p->models[0].name, "claude-sonnet-4.5") &&
                !strcmp(p->models[1].name, "claude-haiku-4.5") &&
                p->models[0].output_pusd == 15000000);
        p = cfg_provider_find(c, "gemini");
        T_CHECK(p && !strcmp(p->base_url, "https://generativelanguage."
                                          "googleapis.com/v1beta/openai") &&
                !strcmp(p->models[0].name, "gemini-2.5-flash") &&
                !strcmp(p->models[1].name, "gemini-2.5-pro"));
        p = cfg_provider_find(c, "deepseek");
        T_CHECK(p && p->n_models == 1 &&
                !strcmp(p->models[0].name, "deepseek-v3.2") &&
                !strcmp(p->models[0].upstream, "deepseek-chat") &&
                p->models[0].input_pusd == 280000);
        p = cfg_provider_find(c, "relay");
        T_CHECK(p && !strcmp(p->base_url, "https://relay.example/v1") &&
                !strcmp(p->api_key, "sk-r") && p->n_models == 7);
        for (size_t m = 0; p && m < p->n_models; m++)
            T_EQ_INT(p->models[m].has_price, 1);
        T_EQ_STR(c->providers[5].name, "local");
        /* Bare model: the direct provider first, then the relay. */
        struct cfg_target t[16];
        T_EQ_INT(cfg_resolve(c, "gpt-4.1", NULL, t, 16), 2);
        T_EQ_STR(c->providers[t[0].provider].name, "openai");
        T_EQ_STR(c->providers[t[1].provider].name, "relay");
        const struct cfg_route *a = cfg_route_find(c, "auto");
        T_CHECK(a && a->policy == CFG_POLICY_COST && a->n_targets == 14 &&
                a->has_fallback && a->fallback.provider == 5);
        T_EQ_INT(cfg_resolve(c, "auto", NULL, t, 16), 15);
    }
    cfg_free(c);
    c = NULL;

    setenv("LLMUX_LISTEN", "nonsense", 1);
    T_EQ_INT(cfg_defaults(&c, err, sizeof(err)), GX_EINVAL);
    T_CHECK(strstr(err, "LLMUX_LISTEN") != NULL);
    T_CHECK(c == NULL);
    unsetenv("LLMUX_LISTEN");
    setenv("LLMUX_RELAY_URL", "relay.example", 1);
    T_EQ_INT(cfg_defaults(&c, err, sizeof(err)), GX_EINVAL);
    T_CHECK(strstr(err, "LLMUX_RELAY_URL") != NULL);
    clear_env();
}

static void
test_file_and_print(void)
{
    char dir[] = "/tmp/llmux-test-config-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char path[256], err[1024];
    snprintf(path, sizeof(path), "%s/c.json", dir);
    struct cfg *c = NULL;

    /* Missing file: GX_EIO, the path in the message. */
    T_EQ_INT(cfg_load_file(path, &c, err, sizeof(err)), GX_EIO);
    T_CHECK(strstr(err, path) != NULL);

    set_example_env();
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL);
    if (!f)
        return;
    fputs(example, f);
    fclose(f);
    T_EQ_INT(cfg_load_file(path, &c, err, sizeof(err)), GX_OK);
    if (c) {
        T_EQ_STR(c->path, path);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        cfg_print(c, m);
        fclose(m);
        T_CHECK(strstr(buf, "sk-relay-secret") == NULL);
        T_CHECK(strstr(buf, "admin-secret-1") == NULL);
        T_CHECK(strstr(buf, "api_key set") != NULL);
        T_CHECK(strstr(buf, "admin_key set") != NULL);
        T_CHECK(strstr(buf, "route auto: policy cost, targets "
                            "deepseek-v3.2@relay, gpt-4.1@relay; fallback "
                            "local@local; max_latency_ms 3000") != NULL);
        T_CHECK(strstr(buf, "model deepseek-v3.2@relay: upstream "
                            "deepseek-chat, USD per million tokens: input "
                            "0.28, cached input 0.28, output 0.42") != NULL);
        T_CHECK(strstr(buf, "route mix: policy weighted, targets "
                            "gpt-4.1@relay (weight 1), deepseek-v3.2@relay "
                            "(weight 3)") != NULL);
        free(buf);
    }
    cfg_free(c);
    c = NULL;

    /* An error from a file names the file. */
    f = fopen(path, "w");
    if (f) {
        fputs("{\n  \"workers\": -1\n}\n", f);
        fclose(f);
    }
    T_EQ_INT(cfg_load_file(path, &c, err, sizeof(err)), GX_EINVAL);
    char want[600];
    snprintf(want, sizeof(want), "%s:2:14: workers: must be between 1 and "
                                 "256, got -1",
             path);
    T_EQ_STR(err, want);
    unlink(path);
    rmdir(dir);
}

static void
test_listen_parse(void)
{
    char *h = NULL;
    int port = -1;
    T_EQ_INT(cfg_listen_parse("0.0.0.0:80", &h, &port), GX_OK);
    T_EQ_STR(h, "0.0.0.0");
    T_EQ_INT(port, 80);
    free(h);
    h = NULL;
    T_EQ_INT(cfg_listen_parse("[fe80::1]:65535", &h, &port), GX_OK);
    T_EQ_STR(h, "fe80::1");
    T_EQ_INT(port, 65535);
    free(h);
    h = NULL;
    T_EQ_INT(cfg_listen_parse("localhost:65536", &h, &port), GX_EINVAL);
    T_EQ_INT(cfg_listen_parse("localhost", &h, &port), GX_EINVAL);
    T_EQ_INT(cfg_listen_parse("[::1]8080", &h, &port), GX_EINVAL);
    T_EQ_INT(cfg_listen_parse("a b:1", &h, &port), GX_EINVAL);
    T_EQ_INT(cfg_listen_parse("h:-1", &h, &port), GX_EINVAL);
    T_EQ_INT(cfg_listen_parse(NULL, &h, &port), GX_EINVAL);
    T_CHECK(h == NULL);
}

/*
 * Robustness: thousands of random edits of the example must each load or
 * fail with "t.json:LINE:COL: " where LINE is inside the text, never
 * crash (run under ASan in make check).  Deterministic (fixed seed).
 */
static void
test_mutations(void)
{
    set_example_env();
    const char alphabet[] = "{}[]\",:0123456789.-eE \n\\$@tfnul\x01\xc3";
    uint32_t seed = 12345;
    size_t n = strlen(example);
    char *buf = malloc(n + 16);
    int bad = 0, ok_count = 0;
    for (int iter = 0; buf && iter < 4000; iter++) {
        memcpy(buf, example, n + 1);
        size_t len = n;
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % (len ? len : 1);
            char ch = alphabet[(seed >> 3) % (sizeof(alphabet) - 1)];
            switch ((seed >> 28) % 3) {
            case 0: /* replace */
                if (len)
                    buf[at] = ch;
                break;
            case 1: /* delete */
                if (len) {
                    memmove(buf + at, buf + at + 1, len - at);
                    len--;
                }
                break;
            default: /* insert */
                memmove(buf + at + 1, buf + at, len - at + 1);
                buf[at] = ch;
                len++;
                break;
            }
        }
        int lines = 1;
        for (size_t k = 0; k < len; k++)
            lines += buf[k] == '\n';
        char err[1024] = "";
        struct cfg *c = NULL;
        enum gx_status st = cfg_load_string(buf, "t.json", &c, err,
                                            sizeof(err));
        if (st == GX_OK) {
            ok_count++;
            cfg_free(c);
            continue;
        }
        int line = 0, col = 0, used = 0;
        if (st != GX_EINVAL || c != NULL ||
            sscanf(err, "t.json:%d:%d: %n", &line, &col, &used) != 2 ||
            used == 0 || line < 1 || line > lines || col < 1) {
            if (bad++ < 5)
                fprintf(stderr, "  mutation %d: st %d err '%s'\n", iter,
                        (int)st, err);
        }
    }
    free(buf);
    T_EQ_INT(bad, 0);
    T_CHECK(ok_count > 0); /* some edits (in string values) stay valid */

    /* Deep nesting stops at jansson's limit, not the stack. */
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 1);
    if (deep) {
        memset(deep, '[', depth);
        memset(deep + depth, ']', depth);
        deep[depth * 2] = '\0';
        char err[256];
        struct cfg *c = NULL;
        T_EQ_INT(cfg_load_string(deep, "t.json", &c, err, sizeof(err)),
                 GX_EINVAL);
        free(deep);
    }
}

/* "storage": the PostgreSQL block. */
static void
test_storage(void)
{
    setenv("T_PGPW", "p@ss w/rd", 1);
    struct cfg *c = load_ok(
        "{" "\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\": \"/m.gguf\", \"models\": {\"local\": {}}}}, " "\"storage\": {\"url\": \"postgres://u@db:5432/llmux\","
        " \"password\": \"${T_PGPW}\", \"on_unavailable\": \"spool\","
        " \"spool_file\": \"/tmp/s\", \"timeout_ms\": 2500}}");
    if (c) {
        T_EQ_STR(c->database,
                 "postgres://u@db:5432/llmux?password=p%40ss%20w%2Frd");
        T_EQ_INT(c->storage_spool, 1);
        T_EQ_STR(c->storage_spool_file, "/tmp/s");
        T_EQ_INT(c->storage_timeout_ms, 2500);
        char buf[512];
        FILE *f = fmemopen(buf, sizeof(buf), "w");
        cfg_print(c, f);
        fclose(f);
        buf[sizeof(buf) - 1] = '\0';
        T_CHECK(strstr(buf, "p%40ss") == NULL); /* never printed */
        T_CHECK(strstr(buf, "password=***") != NULL);
    }
    cfg_free(c);
    c = load_ok("{" "\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\": \"/m.gguf\", \"models\": {\"local\": {}}}}, " "\"database\": \"postgres://u:secret@db/x\"}");
    T_CHECK(c && c->storage_spool == 0);
    cfg_free(c);
    EXPECT_ERR("{" "\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\": \"/m.gguf\", \"models\": {\"local\": {}}}}, " "\"storage\": {\"url\": \"mysql://x\"}}", "\"mysql://x\"",
               "storage.url", "postgres://");
    EXPECT_ERR("{" "\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\": \"/m.gguf\", \"models\": {\"local\": {}}}}, " "\"storage\": {\"url\": \"postgres://x\","
               " \"on_unavailable\": \"retry\"}}",
               "\"retry\"", "storage.on_unavailable", "\"fail\" or");
    EXPECT_ERR("{" "\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\": \"/m.gguf\", \"models\": {\"local\": {}}}}, " "\"storage\": {\"uri\": \"postgres://x\"}}", "\"uri\"",
               "storage.uri", "unknown");
}

int
main(void)
{
    T_RUN(test_example);
    T_RUN(test_defaults_filled);
    T_RUN(test_interpolation);
    T_RUN(test_errors_positions);
    T_RUN(test_errors_providers);
    T_RUN(test_errors_top);
    T_RUN(test_errors_routes);
    T_RUN(test_limits_and_cors);
    T_RUN(test_resolve);
    T_RUN(test_defaults_env);
    T_RUN(test_file_and_print);
    T_RUN(test_listen_parse);
    T_RUN(test_mutations);
    T_RUN(test_storage);
    T_RUN(test_log_block);
    return T_END();
}
