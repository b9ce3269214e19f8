/*
 * The official openai npm SDK (tests/clients, installed by make clients)
 * against the real llmux binary, in front of tests/fake_provider (OpenAI
 * format, Anthropic and Gemini native modes) and the local engine
 * (stories260K), with keys required.  tests/clients/openai_sdk.mjs makes
 * the calls and checks what the SDK returns: chat.completions.create (non
 * stream; stream with include_usage), typed errors with request ids (401
 * AuthenticationError, 404 NotFoundError, 400 BadRequestError),
 * responses.create on every provider kind, with a function tool and its
 * function_call_output round trip, responses.stream (function tool and
 * text), a parameter the local engine does not implement failed over to
 * the next target (and its 400 alone), embeddings.create (base64, the SDK's default, and float),
 * completions.create (and a stream), models.retrieve and models.list;
 * completions and embeddings served by the local engine.
 * This side checks the ledger saw the SDK's requests under its key, and
 * that a key's allowlist comes before every other answer on the new APIs
 * (403, and 404 on GET /v1/models/{id}).
 *
 * Without node or the installed clients it skips, and fails when
 * LLMUX_REQUIRE_CLIENTS is set (CI).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-sdk-openai-0123456789abcdef"

static struct e2e_proc fake, gw;

int
main(void)
{
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "fake provider did not start\n");
        return 1;
    }
    char model[1024], cfg[4096], db[512];
    char *dir = e2e_temp_dir();
    snprintf(db, sizeof(db), "%s/sdk.db", dir ? dir : "/tmp");
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    int p = fake.port;
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s\", \"require_keys\": true,\n"
             " \"admin_key\": \"" ADMIN "\",\n"
             " \"providers\": {\n"
             "  \"oa\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", \"api_key\": \"sk-sdk\",\n"
             "   \"models\": {\"gpt-4.1\": {}, \"text-embedding-3-small\": "
             "{\"input_per_mtok\": 0.02, \"output_per_mtok\": 0},\n"
             "    \"instruct\": {\"input_per_mtok\": 1.5, "
             "\"output_per_mtok\": 2}}},\n"
             "  \"anth\": {\"kind\": \"anthropic\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"sk-ant-sdk\",\n"
             "   \"models\": [\"claude-sonnet-4.5\"]},\n"
             "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
             "\"http://127.0.0.1:%d\", \"api_key\": \"AIza-sdk\",\n"
             "   \"models\": [\"gemini-2.5-flash\"]},\n"
             "  \"local\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 1}},\n"
             " \"routes\": {\"fo\": {\"policy\": \"priority\", \"targets\": "
             "[\"gpt-4.1@oa\"]},\n"
             "  \"lfirst\": {\"policy\": \"priority\", \"targets\": "
             "[\"local@local\", \"gpt-4.1@oa\"]}}}\n",
             db, p, p, p, model);
    char *path = e2e_write_temp("sdk_openai.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    if (!path || e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000)) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/admin/keys", gw.port);
    const char *hdrs[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    char key[256] = "";
    long long key_id = -1;
    if (e2e_http("POST", url, "{\"name\":\"sdk\"}", hdrs, 10000, &r) == 0) {
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        const char *k = json_string_value(json_object_get(o, "key"));
        snprintf(key, sizeof(key), "%s", k ? k : "");
        key_id = json_integer_value(json_object_get(o, "id"));
        json_decref(o);
    }
    e2e_resp_free(&r);
    T_CHECK(key[0] != '\0');

    char env_url[300], env_key[300];
    snprintf(env_url, sizeof(env_url), "LLMUX_URL=http://127.0.0.1:%d/v1",
             gw.port);
    snprintf(env_key, sizeof(env_key), "LLMUX_KEY=%s", key);
    const char *env[] = {env_url, env_key, NULL};
    char *out = NULL;
    int rc = e2e_node("openai_sdk.mjs", env, 240, &out);
    if (rc == E2E_NO_CLIENTS) {
        printf("skip: node or tests/clients not installed (make clients)\n");
        T_CHECK(!getenv("LLMUX_REQUIRE_CLIENTS"));
    } else {
        if (rc != 0 || !out || !strstr(out, "all checks passed"))
            fprintf(stderr, "%s\n", out ? out : "(no output)");
        T_EQ_INT(rc, 0);
        T_CHECK(out && strstr(out, "all checks passed"));
        /* the SDK's successful calls, each a row under its key */
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM usage WHERE key_id = %lld AND "
                 "status = 200",
                 key_id);
        T_CHECK(e2e_db_int(db, sql) >= 20);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM usage WHERE key_id = %lld AND "
                 "status = 404",
                 key_id);
        T_EQ_INT(e2e_db_int(db, sql), 0); /* unknown models: no row */
        /* the local engine's refusal went on to the fake, streamed and
         * not, and alone reached the SDK as a BadRequestError */
        T_CHECK(out && strstr(out, "ok   refusal: two attempts"));
        T_CHECK(out && strstr(out, "ok   refusal stream: two attempts"));
        T_CHECK(out &&
                strstr(out, "ok   refusal alone: BadRequestError naming"));
        /* the local kind served completions (2) and embeddings (2) */
        T_CHECK(out && strstr(out, "ok   local embeddings: base64 decodes"));
        T_CHECK(out && strstr(out, "ok   local completions stream"));
        T_EQ_INT(e2e_db_int(db, "SELECT COUNT(*) FROM usage WHERE "
                                "provider = 'local' AND status = 200 AND "
                                "api IN ('completions', 'embeddings') AND "
                                "prompt_tokens > 0"),
                 4);
    }
    free(out);

    /* A key allowed only gpt-4.1: another model is a 403 on every API (not
     * the 400 that would tell it the model's provider kinds) and a 404 on
     * GET /v1/models/{id}; its own model works on the new APIs too. */
    char rkey[256] = "";
    if (e2e_http("POST", url, "{\"name\":\"narrow\",\"models\":[\"gpt-4.1\"]}",
                 hdrs, 10000, &r) == 0) {
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        const char *k = json_string_value(json_object_get(o, "key"));
        snprintf(rkey, sizeof(rkey), "Authorization: Bearer %s", k ? k : "");
        json_decref(o);
    }
    e2e_resp_free(&r);
    const char *kh[] = {rkey, NULL};
    char u2[256];
    snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/v1/embeddings", gw.port);
    T_EQ_INT(e2e_http("POST", u2,
                      "{\"model\":\"claude-sonnet-4.5\",\"input\":\"x\"}", kh,
                      10000, &r),
             0);
    T_EQ_INT(r.status, 403);
    e2e_resp_free(&r);
    snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/v1/responses", gw.port);
    T_EQ_INT(e2e_http("POST", u2,
                      "{\"model\":\"gemini-2.5-flash\",\"input\":\"x\"}", kh,
                      10000, &r),
             0);
    T_EQ_INT(r.status, 403);
    e2e_resp_free(&r);
    T_EQ_INT(e2e_http("POST", u2, "{\"model\":\"gpt-4.1\",\"input\":\"x\"}",
                      kh, 10000, &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/v1/models/claude-sonnet-4.5",
             gw.port);
    T_EQ_INT(e2e_http("GET", u2, NULL, kh, 10000, &r), 0);
    T_EQ_INT(r.status, 404);
    e2e_resp_free(&r);
    snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/v1/models/gpt-4.1", gw.port);
    T_EQ_INT(e2e_http("GET", u2, NULL, kh, 10000, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    T_EQ_INT(e2e_http("GET", u2, NULL, NULL, 10000, &r), 0);
    T_EQ_INT(r.status, 401); /* keys required */
    e2e_resp_free(&r);

    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(path);
    free(dir);
    return T_END();
}
