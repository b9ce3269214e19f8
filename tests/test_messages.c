/*
 * The Anthropic Messages inbound translations (providers/messages.c), as
 * pure functions: every request block and field into the OpenAI chat
 * translation (held against the exact expected JSON), what is refused and
 * what is Anthropic-only; the answer of every block type and stop reason;
 * every stream event from OpenAI chunks; the passthrough of native events
 * (bytes kept, model replaced, message_stop held); the error shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../providers/providers.h"
#include "harness.h"

/* Parses a Messages body; on success checks that the OpenAI translation
 * equals want (JSON text; NULL: not checked). */
static enum pv_chat_err
parse(const char *body, int count_only, struct pv_chat *c, char *msg,
      size_t msglen, const char **param)
{
    return pv_msgs_parse(c, body, strlen(body), count_only, msg, msglen,
                         param);
}

static void
expect_translation(const char *body, const char *want)
{
    struct pv_chat c;
    char msg[512] = "";
    const char *param = NULL;
    enum pv_chat_err e = parse(body, 0, &c, msg, sizeof(msg), &param);
    T_EQ_INT(e, PV_CHAT_OK);
    if (e != PV_CHAT_OK) {
        fprintf(stderr, "  refused: %s\n", msg);
        return;
    }
    json_t *w = json_loads(want, 0, NULL);
    T_CHECK(w != NULL);
    int same = json_equal(c.body, w);
    T_CHECK(same);
    if (!same) {
        char *got = json_dumps(c.body, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(stderr, "  got  %s\n  want %s\n", got, want);
        free(got);
    }
    T_EQ_INT(c.api, PV_API_MESSAGES);
    T_CHECK(c.native != NULL);
    T_EQ_STR(c.native_only, "");
    json_decref(w);
    pv_chat_cleanup(&c);
}

static void
expect_refused(const char *body, const char *want_param, const char *in_msg)
{
    struct pv_chat c;
    char msg[512] = "";
    const char *param = NULL;
    enum pv_chat_err e = parse(body, 0, &c, msg, sizeof(msg), &param);
    T_CHECK(e != PV_CHAT_OK);
    if (want_param)
        T_EQ_STR(param, want_param);
    T_CHECK(strstr(msg, in_msg) != NULL);
    if (!strstr(msg, in_msg))
        fprintf(stderr, "  message: %s\n", msg);
    T_CHECK(c.body == NULL && c.native == NULL);
}

static void
expect_native_only(const char *body, const char *want)
{
    struct pv_chat c;
    char msg[512] = "";
    const char *param = NULL;
    T_EQ_INT(parse(body, 0, &c, msg, sizeof(msg), &param), PV_CHAT_OK);
    T_EQ_STR(c.native_only, want);
    pv_chat_cleanup(&c);
}

static void
test_request_blocks(void)
{
    /* text, system as a string, the caps and sampling fields */
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":100,\"system\":\"Be brief.\","
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
        "\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u1\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
        "{\"model\":\"m\",\"max_tokens\":100,\"temperature\":0.5,"
        "\"top_p\":0.9,\"top_k\":40,\"stop\":[\"END\"],\"user\":\"u1\","
        "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Hi\"}]}");
    /* system blocks (joined by a blank line, cache_control left out),
     * text and image blocks (base64 and url), stream */
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":5,\"stream\":true,\"system\":["
        "{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"text\",\"text\":\"B\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":["
        "{\"type\":\"text\",\"text\":\"look\"},"
        "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":"
        "\"image/png\",\"data\":\"AAAA\"}},"
        "{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":"
        "\"https://x.example/a.png\"}}]}]}",
        "{\"model\":\"m\",\"max_tokens\":5,\"stream\":true,\"messages\":["
        "{\"role\":\"system\",\"content\":\"A\\n\\nB\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/png;base64,AAAA\"}},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"https://x.example/a.png\"}}]}]}");
    /* tool_use in an assistant turn (with text and a thinking block that
     * stays out), tool_result (string, text blocks, is_error) before the
     * rest of the user turn, tools, tool_choice tool + no parallel */
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":50,"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"W\","
        "\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\","
        "\"disable_parallel_tool_use\":true},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":["
        "{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"sig\"},"
        "{\"type\":\"redacted_thinking\",\"data\":\"xx\"},"
        "{\"type\":\"text\",\"text\":\"Let me see.\"},"
        "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\","
        "\"input\":{\"city\":\"Paris\"}},"
        "{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"get_weather\","
        "\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":["
        "{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"sun\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"is_error\":true,"
        "\"content\":[{\"type\":\"text\",\"text\":\"no\"},{\"type\":\"text\","
        "\"text\":\"city\"}]},"
        "{\"type\":\"text\",\"text\":\"thanks\"}]}]}",
        "{\"model\":\"m\",\"max_tokens\":50,"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"description\":\"W\",\"parameters\":{\"type\":"
        "\"object\"}}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\"}},\"parallel_tool_calls\":false,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":\"Let me see.\",\"tool_calls\":["
        "{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
        "{\"id\":\"t2\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"sun\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t2\",\"content\":"
        "\"Error: no\\ncity\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"thanks\"}]}]}");
    /* an assistant turn of tool calls only: content null; tool_choice
     * auto / any / none */
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"any\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
        "\"id\":\"a\",\"name\":\"f\",\"input\":{\"k\":1}}]}]}",
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":\"required\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{\\\"k\\\":1}\"}}]}]}");
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"auto\"},"
        "\"thinking\":{\"type\":\"disabled\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":\"auto\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    expect_translation(
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"none\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":\"none\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");

    /* The facts every layer reads come from the translation. */
    struct pv_chat c;
    char msg[256];
    const char *param;
    T_EQ_INT(parse("{\"model\":\"m\",\"max_tokens\":77,\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"12345678\"}]}",
                   0, &c, msg, sizeof(msg), &param),
             PV_CHAT_OK);
    T_EQ_INT(c.max_tokens, 77);
    T_EQ_INT(c.completion_cap, 77);
    T_EQ_INT(c.est_prompt_tokens, 8 / 4 + 4);
    T_EQ_STR(c.model, "m");
    T_EQ_INT(c.stream, 0);
    pv_chat_cleanup(&c);
    /* count_tokens: max_tokens optional */
    T_EQ_INT(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                   "\"content\":\"hi\"}]}",
                   1, &c, msg, sizeof(msg), &param),
             PV_CHAT_OK);
    pv_chat_cleanup(&c);
}

static void
test_request_refused(void)
{
    expect_refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}]}",
                   "max_tokens", "'max_tokens' is required");
    expect_refused("{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"x\"}]}",
                   "max_tokens", "from 1 to");
    expect_refused("{\"max_tokens\":5,\"messages\":[]}", "model", "'model'");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}",
                   "messages", "non-empty");
    expect_refused("[1]", NULL, "JSON object");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"n\":2,\"messages\":"
                   "[{\"role\":\"user\",\"content\":\"x\"}]}",
                   NULL, "Unknown parameter 'n'");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"system\",\"content\":\"x\"}]}",
                   "messages", "\"user\" or \"assistant\"");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"audio\"}]}]}",
                   "messages", "unknown content block type 'audio'");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\","
                   "\"bogus\":1}]}]}",
                   "messages", "unknown field 'bogus'");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"image\",\"source\":{"
                   "\"type\":\"file\",\"file_id\":\"f\"}}]}]}",
                   "messages", "file sources are not supported");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"tool_result\","
                   "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\","
                   "\"source\":{\"type\":\"url\",\"url\":\"u\"}}]}]}]}",
                   "messages", "only a string or text blocks");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
                   "\"content\":\"r\"}]}]}",
                   "messages", "must come before");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\","
                   "\"name\":\"f\",\"input\":{}}]}]}",
                   "messages", "belongs to an assistant turn");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":"
                   "\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":"
                   "\"x\"}]}",
                   "tools", "input_schema");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{"
                   "\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}]}",
                   "tool_choice", "auto, any, none or tool");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"metadata\":{\"org\":"
                   "\"x\"},\"messages\":[{\"role\":\"user\",\"content\":"
                   "\"x\"}]}",
                   "metadata", "user_id");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"temperature\":\"hot\","
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   "temperature", "number");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":"
                   "\"END\",\"messages\":[{\"role\":\"user\",\"content\":"
                   "\"x\"}]}",
                   "stop_sequences", "array of strings");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":"
                   "\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":"
                   "\"x\"}]}",
                   "system", "text block");
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"model\":\"n\","
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   NULL, "duplicate");
    /* Only thinking blocks: nothing to send. */
    expect_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                   "\"assistant\",\"content\":[{\"type\":\"thinking\","
                   "\"thinking\":\"a\",\"signature\":\"s\"}]}]}",
                   "messages", "nothing that can be sent");
}

static void
test_request_native_only(void)
{
    expect_native_only(
        "{\"model\":\"m\",\"max_tokens\":5000,\"thinking\":{\"type\":"
        "\"enabled\",\"budget_tokens\":2048},\"messages\":[{\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "thinking");
    expect_native_only(
        "{\"model\":\"m\",\"max_tokens\":5,\"service_tier\":\"auto\","
        "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":"
        "\"web_search\"},{\"name\":\"f\",\"input_schema\":{\"type\":"
        "\"object\"}}],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"document\",\"source\":{\"type\":\"text\",\"media_type\":"
        "\"text/plain\",\"data\":\"d\"}},{\"type\":\"text\",\"text\":\"q\","
        "\"citations\":[{\"type\":\"char_location\"}]}]}]}",
        "messages[0].content[0] (type 'document'), messages[0].content[1]."
        "citations, tools[0] (type 'web_search_20250305'), service_tier");
    /* The native body is the client's, byte for byte in value. */
    struct pv_chat c;
    char msg[256];
    const char *param;
    const char *b = "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
                    "\"assistant\",\"content\":[{\"type\":\"thinking\","
                    "\"thinking\":\"t\",\"signature\":\"EqQBCkYIARgCKkD+/=\"}]},"
                    "{\"role\":\"user\",\"content\":\"x\"}]}";
    T_EQ_INT(parse(b, 0, &c, msg, sizeof(msg), &param), PV_CHAT_OK);
    json_t *w = json_loads(b, 0, NULL);
    T_CHECK(json_equal(c.native, w));
    json_decref(w);
    T_EQ_INT(pv_passthrough(&c, CFG_KIND_ANTHROPIC), 1);
    T_EQ_INT(pv_passthrough(&c, CFG_KIND_OPENAI), 0);
    T_EQ_INT(pv_passthrough(&c, CFG_KIND_LOCAL), 0);
    T_EQ_INT(pv_passthrough(&c, CFG_KIND_GEMINI), 0);
    pv_chat_cleanup(&c);
}

static json_t *
answer(const char *oa, const struct pv_usage *u)
{
    size_t n = 0;
    char *s = pv_msgs_answer(oa, strlen(oa), "claude-x", "req1", u, &n);
    json_t *j = s ? json_loadb(s, n, 0, NULL) : NULL;
    free(s);
    return j;
}

static void
test_answer(void)
{
    struct pv_usage u = {1, 7100, 300, 5000, 2000, 0};
    json_t *a = answer("{\"id\":\"x\",\"object\":\"chat.completion\","
                       "\"choices\":[{\"index\":0,\"message\":{\"role\":"
                       "\"assistant\",\"content\":\"Hello\","
                       "\"reasoning_content\":\"think\",\"tool_calls\":[{"
                       "\"id\":\"call_1\",\"type\":\"function\",\"function\":"
                       "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
                       "\"finish_reason\":\"tool_calls\"}]}",
                       &u);
    json_t *w = json_loads(
        "{\"id\":\"msg_req1\",\"type\":\"message\",\"role\":\"assistant\","
        "\"model\":\"claude-x\",\"content\":[{\"type\":\"thinking\","
        "\"thinking\":\"think\",\"signature\":\"\"},{\"type\":\"text\","
        "\"text\":\"Hello\"},{\"type\":\"tool_use\",\"id\":\"call_1\","
        "\"name\":\"f\",\"input\":{\"a\":1}}],\"stop_reason\":\"tool_use\","
        "\"stop_sequence\":null,\"usage\":{\"input_tokens\":100,"
        "\"output_tokens\":300,\"cache_creation_input_tokens\":2000,"
        "\"cache_read_input_tokens\":5000}}",
        0, NULL);
    T_CHECK(a && json_equal(a, w));
    json_decref(a);
    json_decref(w);
    static const char *const fin[][2] = {{"stop", "end_turn"},
                                         {"length", "max_tokens"},
                                         {"content_filter", "refusal"},
                                         {"tool_calls", "tool_use"}};
    for (int i = 0; i < 4; i++) {
        char oa[256];
        snprintf(oa, sizeof(oa),
                 "{\"choices\":[{\"message\":{\"role\":\"assistant\","
                 "\"content\":\"t\"},\"finish_reason\":\"%s\"}]}",
                 fin[i][0]);
        a = answer(oa, &u);
        T_EQ_STR(json_string_value(json_object_get(a, "stop_reason")),
                 fin[i][1]);
        json_decref(a);
    }
    /* Arguments that are not JSON are kept, not dropped. */
    a = answer("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":"
               "null,\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":"
               "\"f\",\"arguments\":\"{broken\"}}]},\"finish_reason\":"
               "\"tool_calls\"}]}",
               &u);
    const json_t *in = json_object_get(
        json_array_get(json_object_get(a, "content"), 0), "input");
    T_EQ_STR(json_string_value(json_object_get(in, "_arguments")), "{broken");
    json_decref(a);
    size_t n;
    T_CHECK(pv_msgs_answer("{}", 2, "m", "r", &u, &n) == NULL);
    /* Passthrough: only the model changes; signatures stay. */
    const char *up = "{\"id\":\"msg_1\",\"type\":\"message\",\"model\":"
                     "\"claude-sonnet-4-5\",\"content\":[{\"type\":"
                     "\"thinking\",\"thinking\":\"t\",\"signature\":"
                     "\"EqQBCkYIARgCKkD+/=\"}]}";
    char *p = pv_msgs_pass_answer(up, strlen(up), "claude-sonnet-4.5", &n);
    json_t *pj = json_loads(p, 0, NULL);
    json_t *uj = json_loads(up, 0, NULL);
    json_object_set_new(uj, "model", json_string("claude-sonnet-4.5"));
    T_CHECK(pj && json_equal(pj, uj));
    json_decref(pj);
    json_decref(uj);
    free(p);
}

/* The events of an SSE text: types in order (space separated) into
 * types, the data objects into *data. */
static void
events_of(const char *text, char *types, size_t tlen, json_t **data)
{
    *data = json_array();
    types[0] = '\0';
    const char *p = text;
    while (p && *p) {
        if (!strncmp(p, "event: ", 7)) {
            const char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p - 7) : strlen(p + 7);
            size_t n = strlen(types);
            snprintf(types + n, tlen - n, "%s%.*s", n ? " " : "", (int)l,
                     p + 7);
        } else if (!strncmp(p, "data: ", 6)) {
            const char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p - 6) : strlen(p + 6);
            json_t *d = json_loadb(p + 6, l, 0, NULL);
            T_CHECK(d != NULL); /* every data line is one JSON object */
            json_array_append_new(*data, d ? d : json_null());
        }
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
}

static void
chunk(struct pv_msgs_stream *s, const char *delta, const char *finish,
      struct gx_buf *out)
{
    char c[512];
    snprintf(c, sizeof(c),
             "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
             "\"delta\":%s,\"finish_reason\":%s}]}",
             delta, finish ? finish : "null");
    T_EQ_INT(pv_msgs_stream_chunk(s, c, strlen(c), out), 0);
}

static void
test_stream(void)
{
    struct pv_msgs_stream s;
    pv_msgs_stream_init(&s, "claude-x", "req9");
    struct gx_buf out;
    gx_buf_init(&out, 0);
    chunk(&s, "{\"role\":\"assistant\",\"content\":\"\"}", NULL, &out);
    T_EQ_INT(out.len, 0); /* nothing until there is content */
    chunk(&s, "{\"reasoning_content\":\"hm\"}", NULL, &out);
    chunk(&s, "{\"content\":\"Hel\"}", NULL, &out);
    chunk(&s, "{\"content\":\"lo\"}", NULL, &out);
    chunk(&s, "{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":"
              "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}",
          NULL, &out);
    chunk(&s, "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"{\\\"a\\\":\"}}]}",
          NULL, &out);
    chunk(&s, "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"1}\"}}]}",
          NULL, &out);
    chunk(&s, "{\"tool_calls\":[{\"index\":1,\"id\":\"c2\",\"function\":{"
              "\"name\":\"g\",\"arguments\":\"{}\"}}]}",
          NULL, &out);
    chunk(&s, "{}", "\"tool_calls\"", &out);
    /* The usage-only chunk and [DONE] say nothing. */
    const char *uc = "{\"choices\":[],\"usage\":{\"prompt_tokens\":3}}";
    T_EQ_INT(pv_msgs_stream_chunk(&s, uc, strlen(uc), &out), 0);
    T_EQ_INT(pv_msgs_stream_chunk(&s, "[DONE]", 6, &out), 0);
    struct pv_usage u = {1, 30, 12, 10, 5, 0};
    T_EQ_INT(pv_msgs_stream_end(&s, 0, &u, &out), 0);
    T_EQ_INT(gx_buf_append(&out, "", 1), GX_OK);
    char types[2048];
    json_t *d;
    events_of(out.data, types, sizeof(types), &d);
    T_EQ_STR(types,
             "message_start ping content_block_start content_block_delta "
             "content_block_stop content_block_start content_block_delta "
             "content_block_delta content_block_stop content_block_start "
             "content_block_delta content_block_delta content_block_stop "
             "content_block_start content_block_delta content_block_stop "
             "message_delta message_stop");
    T_EQ_INT(json_array_size(d), 18);
    /* each data's type is its event's */
    const json_t *m = json_object_get(json_array_get(d, 0), "message");
    T_EQ_STR(json_string_value(json_object_get(m, "model")), "claude-x");
    T_EQ_STR(json_string_value(json_object_get(m, "id")), "msg_req9");
    const json_t *b2 = json_array_get(d, 2);
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(b2, "content_block"), "type")),
             "thinking");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_array_get(d, 3), "delta"), "type")),
             "thinking_delta");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_array_get(d, 7), "delta"), "text")),
             "lo");
    const json_t *tb = json_object_get(json_array_get(d, 9), "content_block");
    T_EQ_STR(json_string_value(json_object_get(tb, "type")), "tool_use");
    T_EQ_STR(json_string_value(json_object_get(tb, "id")), "c1");
    T_EQ_STR(json_string_value(json_object_get(tb, "name")), "f");
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(d, 9), "index")),
             2);
    const json_t *jd = json_object_get(json_array_get(d, 11), "delta");
    T_EQ_STR(json_string_value(json_object_get(jd, "type")),
             "input_json_delta");
    T_EQ_STR(json_string_value(json_object_get(jd, "partial_json")), "1}");
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(d, 13), "index")),
             3);
    const json_t *md = json_array_get(d, 16);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(md, "delta"),
                                               "stop_reason")),
             "tool_use");
    const json_t *mu = json_object_get(md, "usage");
    T_EQ_INT(json_integer_value(json_object_get(mu, "input_tokens")), 15);
    T_EQ_INT(json_integer_value(json_object_get(mu, "output_tokens")), 12);
    T_EQ_INT(json_integer_value(json_object_get(mu, "cache_read_input_tokens")),
             10);
    T_EQ_INT(json_integer_value(
                 json_object_get(mu, "cache_creation_input_tokens")),
             5);
    json_decref(d);
    gx_buf_cleanup(&out);

    /* A stream with no content still makes a whole message. */
    pv_msgs_stream_init(&s, "m", "r");
    gx_buf_init(&out, 0);
    chunk(&s, "{}", "\"length\"", &out);
    T_EQ_INT(pv_msgs_stream_end(&s, 0, &u, &out), 0);
    gx_buf_append(&out, "", 1);
    events_of(out.data, types, sizeof(types), &d);
    T_EQ_STR(types, "message_start ping message_delta message_stop");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_array_get(d, 2), "delta"),
                 "stop_reason")),
             "max_tokens");
    json_decref(d);
    gx_buf_cleanup(&out);

    /* The error event. */
    gx_buf_init(&out, 0);
    T_EQ_INT(pv_msgs_stream_error(502, "upstream broke", &out), 0);
    gx_buf_append(&out, "", 1);
    events_of(out.data, types, sizeof(types), &d);
    T_EQ_STR(types, "error");
    const json_t *e = json_object_get(json_array_get(d, 0), "error");
    T_EQ_STR(json_string_value(json_object_get(e, "type")), "api_error");
    T_EQ_STR(json_string_value(json_object_get(e, "message")),
             "upstream broke");
    json_decref(d);
    gx_buf_cleanup(&out);
}

static void
test_stream_pass(void)
{
    struct pv_msgs_stream s;
    pv_msgs_stream_init(&s, "claude-sonnet-4.5", "r");
    struct gx_buf out;
    gx_buf_init(&out, 0);
    const char *ev[] = {
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":"
        "\"claude-sonnet-4-5\",\"content\":[]}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
        "\"type\":\"thinking\",\"thinking\":\"\"}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
        "\"signature_delta\",\"signature\":\"EqQBCkYIARgCKkD+/=\"}}",
        "{\"type\": \"ping\"}",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
        "\"usage\":{\"output_tokens\":4}}",
        "{\"type\":\"message_stop\"}",
        "[DONE]",
    };
    for (size_t i = 0; i < sizeof(ev) / sizeof(*ev); i++)
        T_EQ_INT(pv_msgs_stream_pass(&s, ev[i], strlen(ev[i]), &out), 0);
    gx_buf_append(&out, "", 1);
    /* Bytes kept: the signature_delta and the spaced ping verbatim. */
    T_CHECK(strstr(out.data, "event: content_block_delta\ndata: ") != NULL);
    T_CHECK(strstr(out.data, ev[2]) != NULL);
    T_CHECK(strstr(out.data, "event: ping\ndata: {\"type\": \"ping\"}\n\n") !=
            NULL);
    T_CHECK(strstr(out.data, "message_stop") == NULL); /* held */
    T_EQ_INT(s.pass_stop, 1);
    char types[512];
    json_t *d;
    events_of(out.data, types, sizeof(types), &d);
    T_EQ_STR(types, "message_start content_block_start content_block_delta "
                    "ping message_delta");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_array_get(d, 0), "message"), "model")),
             "claude-sonnet-4.5");
    json_decref(d);
    gx_buf_reset(&out);
    T_EQ_INT(pv_msgs_stream_end(&s, 1, NULL, &out), 0);
    gx_buf_append(&out, "", 1);
    T_EQ_STR(out.data, "event: message_stop\ndata: {\"type\":\"message_stop\"}"
                       "\n\n");
    pv_msgs_stream_cleanup(&s);
    /* message_start: only message.model changes, the rest byte for byte
     * (spacing, key order, the upstream's own escapes). */
    pv_msgs_stream_init(&s, "pass", "r");
    gx_buf_reset(&out);
    const char *st = "{\"type\": \"message_start\" , \"message\":{\"model\" "
                     ": \"claude\\u002d4\",\"id\":\"m\\/1\",\"n\":1.0}}";
    T_EQ_INT(pv_msgs_stream_pass(&s, st, strlen(st), &out), 0);
    gx_buf_append(&out, "", 1);
    T_EQ_STR(out.data, "event: message_start\ndata: {\"type\": \"message_start"
                       "\" , \"message\":{\"model\" : \"pass\",\"id\":"
                       "\"m\\/1\",\"n\":1.0}}\n\n");
    /* an error event passes as it came and marks the stream */
    gx_buf_reset(&out);
    const char *er = "{\"type\":\"error\",\"error\":{\"type\":"
                     "\"overloaded_error\",\"message\":\"Overloaded\"}}";
    T_EQ_INT(pv_msgs_stream_pass(&s, er, strlen(er), &out), 0);
    T_EQ_INT(s.pass_error, 1);
    pv_msgs_stream_cleanup(&s);
    gx_buf_cleanup(&out);
}

static void
test_errors(void)
{
    static const struct {
        int status;
        const char *code, *type;
    } m[] = {{400, NULL, "invalid_request_error"},
             {401, "invalid_api_key", "authentication_error"},
             {403, "model_not_allowed", "permission_error"},
             {404, "model_not_found", "not_found_error"},
             {413, NULL, "request_too_large"},
             {429, "rate_limit_exceeded", "rate_limit_error"},
             {429, "insufficient_quota", "billing_error"},
             {500, NULL, "api_error"},
             {502, NULL, "api_error"},
             {504, NULL, "timeout_error"},
             {529, NULL, "overloaded_error"}};
    for (size_t i = 0; i < sizeof(m) / sizeof(*m); i++)
        T_EQ_STR(pv_msgs_error_type(m[i].status, m[i].code), m[i].type);
    size_t n;
    char *e = pv_msgs_error(404, NULL, "no such model", &n);
    T_EQ_STR(e, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\","
                "\"message\":\"no such model\"}}");
    free(e);
    /* An OpenAI-shaped body (llmux's, a relay's) becomes Anthropic's. */
    const char *oa = "{\"error\":{\"message\":\"slow down\",\"type\":\"x\","
                     "\"param\":null,\"code\":\"rate_limit_exceeded\"}}";
    e = pv_msgs_error_from(oa, strlen(oa), 429, &n);
    T_EQ_STR(e, "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                "\"message\":\"slow down\"}}");
    free(e);
    /* Anthropic's own (a passthrough) is kept as it is. */
    const char *an = "{\"type\":\"error\",\"error\":{\"type\":"
                     "\"overloaded_error\",\"message\":\"Overloaded\"},"
                     "\"request_id\":\"req_1\"}";
    e = pv_msgs_error_from(an, strlen(an), 529, &n);
    json_t *a = json_loads(e, 0, NULL), *b = json_loads(an, 0, NULL);
    T_CHECK(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    free(e);
    e = pv_msgs_error_from("<html>", 6, 502, &n);
    T_CHECK(e && strstr(e, "\"api_error\"") != NULL);
    free(e);
}

int
main(void)
{
    T_RUN(test_request_blocks);
    T_RUN(test_request_refused);
    T_RUN(test_request_native_only);
    T_RUN(test_answer);
    T_RUN(test_stream);
    T_RUN(test_stream_pass);
    T_RUN(test_errors);
    return T_END();
}
