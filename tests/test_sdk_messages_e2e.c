/*
 * The official @anthropic-ai/sdk (tests/clients/anthropic_sdk.mjs, run
 * with node) against the real llmux binary: messages.create,
 * messages.stream (text events, finalMessage), a tool use round trip
 * (tool_use, then tool_result), countTokens, a bad key
 * (AuthenticationError with Anthropic's error body) and an unknown model
 * (NotFoundError), each on four targets: an openai-format relay, the
 * anthropic kind (passthrough) and the gemini kind, all tests/fake_provider,
 * and the local engine (stories260K).  Afterwards every SDK request has its ledger row
 * with api 'messages' and the exact cost.
 *
 * Without node or tests/clients/node_modules (`make clients`) it says so
 * and skips; CI sets LLMUX_REQUIRE_CLIENTS, which makes that a failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-sdk-msgs-0123456789abcdef"

static struct e2e_proc fake, gw;
static char base[128];
static char *dbpath;

static long long
row(const char *rid, const char *expr)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT %s FROM usage WHERE request_id = '%s' AND api = "
             "'messages'",
             expr, rid);
    return e2e_db_int(dbpath, sql);
}

static void
test_sdk(void)
{
    char url[256], key[128] = "";
    snprintf(url, sizeof(url), "%s/admin/keys", base);
    const char *hd[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url, "{\"name\":\"sdk\"}", hd, 10000, &r), 0);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    snprintf(key, sizeof(key), "%s",
             json_string_value(json_object_get(j, "key"))
                 ? json_string_value(json_object_get(j, "key"))
                 : "");
    json_decref(j);
    e2e_resp_free(&r);
    T_CHECK(key[0] != '\0');
    char e_base[200], e_key[200];
    snprintf(e_base, sizeof(e_base), "LLMUX_BASE=%s", base);
    snprintf(e_key, sizeof(e_key), "LLMUX_KEY=%s", key);
    const char *env[] = {
        e_base, e_key, "TAG=sdk",
        "MODELS=gpt-4.1|fake:tool=get_weather;x ,"
        "claude-sonnet-4.5|fake:tool=get_weather;x ,"
        "gemini-2.5-flash|fake:tool=get_weather;x ,local",
        NULL};
    char *out = NULL;
    int rc = e2e_node("anthropic_sdk.mjs", env, 240, &out);
    if (rc == E2E_NO_CLIENTS) {
        printf("skip: no node or tests/clients/node_modules (make clients)\n");
        T_CHECK(!getenv("LLMUX_REQUIRE_CLIENTS"));
        return;
    }
    T_EQ_INT(rc, 0);
    if (rc != 0 || !out || !strstr(out, "all ok"))
        fprintf(stderr, "anthropic_sdk.mjs said:\n%s\n", out ? out : "");
    T_CHECK(out && strstr(out, "all ok") != NULL);
    T_CHECK(out && strstr(out, "ok bad_key") != NULL);
    /* count_tokens: the estimate on remote targets, exact on local. */
    T_CHECK(out && strstr(out, "ok count_tokens gpt-4.1 7\n") != NULL);
    T_CHECK(out && strstr(out, "ok count_tokens claude-sonnet-4.5 7\n") != NULL);
    const char *lc = out ? strstr(out, "ok count_tokens local ") : NULL;
    T_CHECK(lc && atoi(lc + 22) > 7); /* template and BOS tokens too */
    free(out);

    /* The ledger: every SDK request once, api 'messages', exact cost.
     * fake_provider: 9 prompt tokens, one completion token a word (4). */
    static const struct {
        const char *rid;
        long long cost_pusd;
    } want[] = {
        {"sdk-gpt-4.1-create", 9 * 2000000LL + 4 * 8000000LL},
        {"sdk-gpt-4.1-stream", 9 * 2000000LL + 4 * 8000000LL},
        {"sdk-gpt-4.1-tool1", 9 * 2000000LL + 5 * 8000000LL},
        {"sdk-gpt-4.1-tool2", 9 * 2000000LL + 4 * 8000000LL},
        {"sdk-claude-sonnet-4.5-create", 9 * 3000000LL + 4 * 15000000LL},
        {"sdk-claude-sonnet-4.5-stream", 9 * 3000000LL + 4 * 15000000LL},
        {"sdk-local-create", 0},
        {"sdk-local-stream", 0},
        {"sdk-local-tool1", 0},
        {"sdk-local-tool2", 0},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
        T_EQ_INT(row(want[i].rid, "COUNT(*)"), 1);
        T_EQ_INT(row(want[i].rid, "cost_pusd"), want[i].cost_pusd);
        T_EQ_INT(row(want[i].rid, "status"), 200);
        T_EQ_INT(row(want[i].rid, "unpriced"), 0);
    }
    /* gemini-2.5-flash (built-in prices 0.30 / 0.03 cached / 2.50 per
     * Mtok, reasoning billed as output): each row's cost is exactly its
     * own token counts priced. */
    static const char *const gem[] = {
        "sdk-gemini-2.5-flash-create", "sdk-gemini-2.5-flash-stream",
        "sdk-gemini-2.5-flash-tool1", "sdk-gemini-2.5-flash-tool2"};
    for (size_t i = 0; i < sizeof(gem) / sizeof(*gem); i++) {
        T_EQ_INT(row(gem[i], "COUNT(*)"), 1);
        T_EQ_INT(row(gem[i], "status"), 200);
        T_CHECK(row(gem[i], "prompt_tokens") > 0);
        T_EQ_INT(row(gem[i], "cost_pusd - (prompt_tokens - cached_tokens) * "
                             "300000 - cached_tokens * 30000 - "
                             "completion_tokens * 2500000"),
                 0);
    }
    T_EQ_INT(row("sdk-gpt-4.1-stream", "stream"), 1);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage WHERE request_id"
                                " = 'sdk-local-create' AND usage_source ="
                                " 'local'"),
             1);
    /* The passthrough rows come from the upstream's own usage. */
    T_EQ_INT(row("sdk-claude-sonnet-4.5-tool1", "COUNT(*)"), 1);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage WHERE api <>"
                                " 'messages'"),
             0);
}

int
main(void)
{
    char model[512];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    FILE *mf = fopen(model, "rb");
    if (!mf) {
        fprintf(stderr, "test data missing: %s\n", model);
        return 1;
    }
    fclose(mf);
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "fake provider did not start\n");
        return 1;
    }
    char *dir = e2e_temp_dir();
    char db[512];
    snprintf(db, sizeof(db), "%s/sdk.db", dir ? dir : "/tmp");
    dbpath = db;
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\"listen\": \"127.0.0.1:0\", \"workers\": 1, \"database\": \"%s\",\n"
        " \"require_keys\": true, \"admin_key\": \"" ADMIN "\",\n"
        " \"providers\": {\n"
        "  \"relay\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"relay-sdk-0123456789\",\n"
        "   \"models\": {\"gpt-4.1\": {}}},\n"
        "  \"claude\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"sk-ant-sdk-0123456789\",\n"
        "   \"models\": {\"claude-sonnet-4.5\": {\"upstream\": "
        "\"claude-sonnet-4-5\"}}},\n"
        "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"AIza-sdk-0123456789\",\n"
        "   \"models\": [\"gemini-2.5-flash\"]},\n"
        "  \"local\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
        "   \"threads\": 1, \"context\": 1024, \"parallel\": 2,\n"
        "   \"models\": {\"local\": {\"input_per_mtok\": 0, "
        "\"output_per_mtok\": 0}}}},\n"
        " \"routes\": {}}\n",
        db, fake.port, fake.port, fake.port, model);
    char *path = e2e_write_temp("sdk-msgs.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    if (!path ||
        e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000)) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_sdk);
    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(path);
    free(dir);
    return T_END();
}
