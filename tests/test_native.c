/*
 * test_native: the native kinds' translations, both ways, without HTTP:
 * OpenAI chat requests into Anthropic Messages and Gemini generateContent
 * bodies (every message and part type, tools, tool_choice, generation
 * settings, the max_tokens default, refusals naming the parameters), their
 * answers and stream events back into OpenAI shapes (text, tool calls,
 * thinking, finish reasons, usage with cache and reasoning counts), and
 * the error bodies; the stream content-type check the openai and native
 * kinds share.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../providers/providers.h"
#include "../providers/providers_int.h"

static json_t *
J(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fprintf(stderr, "  bad test JSON: %s: %s\n", e.text, text);
    return j;
}

/* 1 if a and b are equal JSON (jansson compares objects unordered). */
static int
same(const json_t *a, const char *want)
{
    json_t *w = J(want);
    int eq = w && json_equal(a, w);
    if (!eq) {
        char *s = a ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        char *t = w ? json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        fprintf(stderr, "  got  %s\n  want %s\n", s ? s : "(null)",
                t ? t : "(null)");
        free(s);
        free(t);
    }
    json_decref(w);
    return eq;
}

/* ---- requests ----------------------------------------------------------- */

static const char *conversation =
    "{\"model\":\"c\",\"max_tokens\":100,\"temperature\":0.5,\"top_p\":0.9,"
    "\"top_k\":40,\"stop\":\"END\",\"user\":\"u1\","
    "\"stream_options\":{\"include_usage\":true},"
    "\"messages\":["
    " {\"role\":\"system\",\"content\":\"Be brief.\"},"
    " {\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use "
    "tools.\"}]},"
    " {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather "
    "here?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":"
    "\"data:image/png;base64,iVBORw0=\"}}]},"
    " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
    "  {\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
    "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
    "  {\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":"
    "\"get_time\",\"arguments\":\"\"}}]},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18C\"},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":"
    "[{\"type\":\"text\",\"text\":\"noon\"}]},"
    " {\"role\":\"user\",\"content\":\"Thanks\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
    " {\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}],"
    "\"tool_choice\":\"required\",\"parallel_tool_calls\":false}";

static void
test_anth_request(void)
{
    json_t *oa = J(conversation), *out = NULL;
    char msg[512] = "";
    T_EQ_INT(pv_anth_request(oa, "claude-up", 1, &out, msg, sizeof(msg)),
             PV_X_OK);
    T_CHECK(same(out,
        "{\"model\":\"claude-up\",\"max_tokens\":100,"
        "\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},"
        "  {\"type\":\"text\",\"text\":\"Use tools.\"}],"
        "\"messages\":["
        " {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"Weather here?\"},{\"type\":\"image\",\"source\":{\"type\":"
        "\"base64\",\"media_type\":\"image/png\",\"data\":\"iVBORw0=\"}}]},"
        " {\"role\":\"assistant\",\"content\":["
        "  {\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"get_weather\","
        "\"input\":{\"city\":\"Paris\"}},"
        "  {\"type\":\"tool_use\",\"id\":\"call_2\",\"name\":\"get_time\","
        "\"input\":{}}]},"
        " {\"role\":\"user\",\"content\":["
        "  {\"type\":\"tool_result\",\"tool_use_id\":\"call_1\",\"content\":"
        "\"18C\"},"
        "  {\"type\":\"tool_result\",\"tool_use_id\":\"call_2\",\"content\":"
        "\"noon\"},"
        "  {\"type\":\"text\",\"text\":\"Thanks\"}]}],"
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
        "\"stop_sequences\":[\"END\"],"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\","
        "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":"
        "{\"type\":\"string\"}}}},"
        " {\"name\":\"get_time\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"metadata\":{\"user_id\":\"u1\"},\"stream\":true}"));
    json_decref(out);
    json_decref(oa);

    /* max_tokens is required upstream: the default when none is given,
     * the larger of the two when both are. */
    oa = J("{\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":"
           "\"hi\"}]}");
    T_EQ_INT(pv_anth_request(oa, "u", 0, &out, msg, sizeof(msg)), PV_X_OK);
    T_EQ_INT(json_integer_value(json_object_get(out, "max_tokens")),
             PV_ANTH_DEFAULT_MAX_TOKENS);
    T_CHECK(!json_object_get(out, "stream"));
    json_decref(out);
    json_decref(oa);
    oa = J("{\"model\":\"c\",\"max_tokens\":10,\"max_completion_tokens\":20,"
           "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
           "\"f\"}},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
           "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":"
           "\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":"
           "\"c\"}]}");
    T_EQ_INT(pv_anth_request(oa, "u", 0, &out, msg, sizeof(msg)), PV_X_OK);
    T_EQ_INT(json_integer_value(json_object_get(out, "max_tokens")), 20);
    T_CHECK(same(json_object_get(out, "tool_choice"),
                 "{\"type\":\"tool\",\"name\":\"f\"}"));
    /* Two assistant turns in a row become one. */
    T_EQ_INT(json_array_size(json_object_get(out, "messages")), 3);
    json_decref(out);
    json_decref(oa);

    /* Refusals name every parameter; nulls count as absent. */
    oa = J("{\"model\":\"c\",\"seed\":null,\"logprobs\":true,"
           "\"response_format\":{\"type\":\"json_object\"},\"n\":2,"
           "\"messages\":[{\"role\":\"user\",\"name\":\"bob\",\"content\":"
           "[{\"type\":\"input_audio\",\"input_audio\":{}}]}]}");
    out = (json_t *)1;
    T_EQ_INT(pv_anth_request(oa, "u", 0, &out, msg, sizeof(msg)),
             PV_X_REFUSE);
    T_CHECK(out == NULL);
    T_CHECK(strstr(msg, "anthropic") && strstr(msg, "logprobs") &&
            strstr(msg, "response_format") && strstr(msg, "n (only 1)") &&
            strstr(msg, "messages[0].name") &&
            strstr(msg, "messages[0].content[0]") && !strstr(msg, "seed"));
    json_decref(oa);
    /* Arguments that are not a JSON object cannot become tool_use input. */
    oa = J("{\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":"
           "\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\","
           "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
           "\"[1,\"}}]}]}");
    T_EQ_INT(pv_anth_request(oa, "u", 0, &out, msg, sizeof(msg)),
             PV_X_REFUSE);
    T_CHECK(strstr(msg, "messages[1].tool_calls[0]") != NULL);
    json_decref(oa);
}

static void
test_gem_request(void)
{
    json_t *oa = J(conversation), *out = NULL;
    char msg[512] = "";
    /* user and parallel_tool_calls false have no Gemini equivalent. */
    T_EQ_INT(pv_gem_request(oa, 1, &out, msg, sizeof(msg)), PV_X_REFUSE);
    T_CHECK(strstr(msg, "gemini") && strstr(msg, "user") &&
            strstr(msg, "parallel_tool_calls"));
    json_object_del(oa, "user");
    json_object_del(oa, "parallel_tool_calls");
    json_object_set_new(oa, "seed", json_integer(7));
    json_object_set_new(oa, "response_format",
                        J("{\"type\":\"json_schema\",\"json_schema\":{"
                          "\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}"));
    T_EQ_INT(pv_gem_request(oa, 1, &out, msg, sizeof(msg)), PV_X_OK);
    T_CHECK(same(out,
        "{\"systemInstruction\":{\"parts\":[{\"text\":\"Be brief.\"},"
        "  {\"text\":\"Use tools.\"}]},"
        "\"contents\":["
        " {\"role\":\"user\",\"parts\":[{\"text\":\"Weather here?\"},"
        "  {\"inlineData\":{\"mimeType\":\"image/png\",\"data\":"
        "\"iVBORw0=\"}}]},"
        " {\"role\":\"model\",\"parts\":["
        "  {\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":"
        "\"Paris\"}}},"
        "  {\"functionCall\":{\"name\":\"get_time\",\"args\":{}}}]},"
        " {\"role\":\"user\",\"parts\":["
        "  {\"functionResponse\":{\"name\":\"get_weather\",\"response\":"
        "{\"content\":\"18C\"}}},"
        "  {\"functionResponse\":{\"name\":\"get_time\",\"response\":"
        "{\"content\":\"noon\"}}},"
        "  {\"text\":\"Thanks\"}]}],"
        "\"generationConfig\":{\"maxOutputTokens\":100,\"temperature\":0.5,"
        "\"topP\":0.9,\"topK\":40,\"seed\":7,\"stopSequences\":[\"END\"],"
        "\"responseMimeType\":\"application/json\",\"responseJsonSchema\":"
        "{\"type\":\"object\"}},"
        "\"tools\":[{\"functionDeclarations\":["
        " {\"name\":\"get_weather\",\"description\":\"Weather\","
        "\"parametersJsonSchema\":{\"type\":\"object\",\"properties\":"
        "{\"city\":{\"type\":\"string\"}}}},"
        " {\"name\":\"get_time\"}]}],"
        "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\"}}}"));
    json_decref(out);
    json_decref(oa);

    /* A tool result must answer a call the history shows (its name is
     * what Gemini matches on); http image URLs are not fetched. */
    oa = J("{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":"
           "[{\"type\":\"image_url\",\"image_url\":{\"url\":"
           "\"https://x/y.png\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
           "\"nope\",\"content\":\"r\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_REFUSE);
    T_CHECK(strstr(msg, "messages[0].content[0].image_url") &&
            strstr(msg, "messages[1]"));
    json_decref(oa);
    oa = J("{\"model\":\"g\",\"tool_choice\":{\"type\":\"function\","
           "\"function\":{\"name\":\"f\"}},\"messages\":[{\"role\":\"user\","
           "\"content\":\"hi\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_OK);
    T_CHECK(same(json_object_get(out, "toolConfig"),
                 "{\"functionCallingConfig\":{\"mode\":\"ANY\","
                 "\"allowedFunctionNames\":[\"f\"]}}"));
    T_CHECK(!json_object_get(out, "generationConfig"));
    json_decref(out);
    json_decref(oa);
}

/* ---- answers ------------------------------------------------------------ */

static void
test_anth_answer(void)
{
    json_t *up = J(
        "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\","
        "\"model\":\"claude-sonnet-4-5\",\"content\":["
        " {\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
        " {\"type\":\"text\",\"text\":\"Let me look.\"},"
        " {\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
        "\"input\":{\"city\":\"Paris\"}}],"
        "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,"
        "\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":2000,"
        "\"cache_read_input_tokens\":5000,\"output_tokens\":300}}");
    struct pv_usage u;
    char why[160] = "";
    json_t *oa = pv_anth_answer(up, &u, why, sizeof(why));
    T_CHECK(oa != NULL);
    json_object_del(oa, "created");
    T_CHECK(same(oa,
        "{\"id\":\"msg_1\",\"object\":\"chat.completion\",\"model\":"
        "\"claude-sonnet-4-5\",\"choices\":[{\"index\":0,\"logprobs\":null,"
        "\"finish_reason\":\"tool_calls\",\"message\":{\"role\":\"assistant\","
        "\"content\":\"Let me look.\",\"reasoning_content\":\"hmm\","
        "\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}}],"
        "\"usage\":{\"prompt_tokens\":7100,\"completion_tokens\":300,"
        "\"total_tokens\":7400,\"prompt_tokens_details\":{\"cached_tokens\":"
        "5000,\"cache_write_tokens\":2000},\"completion_tokens_details\":"
        "{\"reasoning_tokens\":0}}}"));
    T_EQ_INT(u.have, 1);
    T_EQ_INT(u.prompt_tokens, 7100);
    T_EQ_INT(u.cached_tokens, 5000);
    T_EQ_INT(u.cache_write_tokens, 2000);
    T_EQ_INT(u.completion_tokens, 300);
    json_decref(oa);
    json_decref(up);

    static const char *const stops[][2] = {
        {"end_turn", "stop"},       {"stop_sequence", "stop"},
        {"max_tokens", "length"},   {"refusal", "content_filter"},
        {"pause_turn", "stop"},     {"model_context_window_exceeded", "length"}};
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text),
                 "{\"type\":\"message\",\"content\":[{\"type\":\"text\","
                 "\"text\":\"x\"}],\"stop_reason\":\"%s\"}",
                 stops[i][0]);
        up = J(text);
        oa = pv_anth_answer(up, &u, why, sizeof(why));
        T_EQ_STR(json_string_value(json_object_get(
                     json_array_get(json_object_get(oa, "choices"), 0),
                     "finish_reason")),
                 stops[i][1]);
        T_EQ_INT(u.have, 0); /* no usage object: none */
        json_decref(oa);
        json_decref(up);
    }
    up = J("{\"choices\":[]}");
    T_CHECK(pv_anth_answer(up, &u, why, sizeof(why)) == NULL);
    T_CHECK(strstr(why, "Messages") != NULL);
    json_decref(up);
}

static void
test_gem_answer(void)
{
    json_t *up = J(
        "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":["
        " {\"text\":\"plan\",\"thought\":true},{\"text\":\"Sure.\"},"
        " {\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":"
        "\"Paris\"}}}]},\"finishReason\":\"STOP\",\"index\":0}],"
        "\"usageMetadata\":{\"promptTokenCount\":1000,\"candidatesTokenCount\":"
        "50,\"cachedContentTokenCount\":600,\"thoughtsTokenCount\":200,"
        "\"totalTokenCount\":1250},\"modelVersion\":\"gemini-2.5-flash\","
        "\"responseId\":\"r1\"}");
    struct pv_usage u;
    char why[160] = "";
    json_t *oa = pv_gem_answer(up, &u, why, sizeof(why));
    T_CHECK(oa != NULL);
    json_object_del(oa, "created");
    T_CHECK(same(oa,
        "{\"id\":\"r1\",\"object\":\"chat.completion\",\"model\":"
        "\"gemini-2.5-flash\",\"choices\":[{\"index\":0,\"logprobs\":null,"
        "\"finish_reason\":\"tool_calls\",\"message\":{\"role\":\"assistant\","
        "\"content\":\"Sure.\",\"reasoning_content\":\"plan\","
        "\"tool_calls\":[{\"id\":\"call_0\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}}],"
        "\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":250,"
        "\"total_tokens\":1250,\"prompt_tokens_details\":{\"cached_tokens\":"
        "600},\"completion_tokens_details\":{\"reasoning_tokens\":200}}}"));
    T_EQ_INT(u.prompt_tokens, 1000);
    T_EQ_INT(u.cached_tokens, 600);
    T_EQ_INT(u.completion_tokens, 250);
    T_EQ_INT(u.reasoning_tokens, 200);
    json_decref(oa);
    json_decref(up);

    static const char *const fr[][2] = {{"MAX_TOKENS", "length"},
                                        {"SAFETY", "content_filter"},
                                        {"RECITATION", "content_filter"},
                                        {"OTHER", "stop"}};
    for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text),
                 "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":"
                 "\"x\"}]},\"finishReason\":\"%s\"}]}",
                 fr[i][0]);
        up = J(text);
        oa = pv_gem_answer(up, &u, why, sizeof(why));
        T_EQ_STR(json_string_value(json_object_get(
                     json_array_get(json_object_get(oa, "choices"), 0),
                     "finish_reason")),
                 fr[i][1]);
        json_decref(oa);
        json_decref(up);
    }
    /* A blocked prompt has no candidates. */
    up = J("{\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}");
    oa = pv_gem_answer(up, &u, why, sizeof(why));
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(oa, "choices"), 0),
                 "finish_reason")),
             "content_filter");
    json_decref(oa);
    json_decref(up);
    up = J("{\"id\":\"x\"}");
    T_CHECK(pv_gem_answer(up, &u, why, sizeof(why)) == NULL);
    json_decref(up);
}

/* ---- streams ------------------------------------------------------------ */

struct sink {
    json_t *chunks;
};

static int
sink_emit(void *ud, json_t *chunk)
{
    struct sink *s = ud;
    if (!chunk)
        return -1;
    return json_array_append_new(s->chunks, chunk);
}

/* The delta of chunk i (0 = the role chunk). */
static const json_t *
delta(const struct sink *s, size_t i)
{
    return json_object_get(
        json_array_get(json_object_get(json_array_get(s->chunks, i),
                                       "choices"),
                       0),
        "delta");
}

static const char *
finish(const struct sink *s, size_t i)
{
    return json_string_value(json_object_get(
        json_array_get(json_object_get(json_array_get(s->chunks, i),
                                       "choices"),
                       0),
        "finish_reason"));
}

static int
feed_anth(struct pv_xstream *xs, struct sink *sk, const char *type,
          const char *data, char *why, size_t len)
{
    json_t *ev = J(data);
    int r = pv_anth_event(xs, type, ev, sink_emit, sk, why, len);
    json_decref(ev);
    return r;
}

static void
test_anth_stream(void)
{
    struct pv_xstream xs;
    memset(&xs, 0, sizeof(xs));
    struct sink sk = {json_array()};
    char why[200] = "";
    T_EQ_INT(feed_anth(&xs, &sk, "message_start",
                       "{\"type\":\"message_start\",\"message\":{\"id\":"
                       "\"msg_9\",\"model\":\"claude-x\",\"usage\":{"
                       "\"input_tokens\":10,\"cache_creation_input_tokens\":"
                       "20,\"cache_read_input_tokens\":30,\"output_tokens\":"
                       "1}}}",
                       why, sizeof(why)),
             0);
    /* Nothing reaches the client before content (so an error here can
     * still fail over). */
    T_EQ_INT(json_array_size(sk.chunks), 0);
    T_EQ_INT(feed_anth(&xs, &sk, "ping", "{\"type\":\"ping\"}", why,
                       sizeof(why)),
             0);
    feed_anth(&xs, &sk, "content_block_start",
              "{\"type\":\"content_block_start\",\"index\":0,"
              "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{"
              "\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{"
              "\"type\":\"signature_delta\",\"signature\":\"s\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_start",
              "{\"type\":\"content_block_start\",\"index\":1,"
              "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{"
              "\"type\":\"text_delta\",\"text\":\"Hi\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_stop",
              "{\"type\":\"content_block_stop\",\"index\":1}", why,
              sizeof(why));
    feed_anth(&xs, &sk, "content_block_start",
              "{\"type\":\"content_block_start\",\"index\":2,"
              "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\","
              "\"name\":\"f\",\"input\":{}}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{"
              "\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}",
              why, sizeof(why));
    feed_anth(&xs, &sk, "content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{"
              "\"type\":\"input_json_delta\",\"partial_json\":\"1}\"}}",
              why, sizeof(why));
    T_EQ_INT(feed_anth(&xs, &sk, "message_delta",
                       "{\"type\":\"message_delta\",\"delta\":{"
                       "\"stop_reason\":\"tool_use\"},\"usage\":{"
                       "\"output_tokens\":42}}",
                       why, sizeof(why)),
             0);
    T_EQ_INT(feed_anth(&xs, &sk, "message_stop", "{\"type\":\"message_stop\"}",
                       why, sizeof(why)),
             PV_XS_DONE);
    /* role, reasoning, text, tool start, 2 x arguments, finish */
    T_EQ_INT(json_array_size(sk.chunks), 7);
    T_CHECK(same(delta(&sk, 0), "{\"role\":\"assistant\",\"content\":\"\"}"));
    T_CHECK(same(delta(&sk, 1), "{\"reasoning_content\":\"hmm\"}"));
    T_CHECK(same(delta(&sk, 2), "{\"content\":\"Hi\"}"));
    T_CHECK(same(delta(&sk, 3),
                 "{\"tool_calls\":[{\"index\":0,\"id\":\"toolu_1\",\"type\":"
                 "\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                 "\"\"}}]}"));
    T_CHECK(same(delta(&sk, 4), "{\"tool_calls\":[{\"index\":0,\"function\":"
                                "{\"arguments\":\"{\\\"a\\\":\"}}]}"));
    T_CHECK(same(delta(&sk, 5), "{\"tool_calls\":[{\"index\":0,\"function\":"
                                "{\"arguments\":\"1}\"}}]}"));
    T_EQ_STR(finish(&sk, 6), "tool_calls");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(sk.chunks, 2),
                                               "id")),
             "msg_9");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(sk.chunks, 2),
                                               "object")),
             "chat.completion.chunk");
    T_EQ_INT(xs.usage.prompt_tokens, 60);
    T_EQ_INT(xs.usage.cached_tokens, 30);
    T_EQ_INT(xs.usage.cache_write_tokens, 20);
    T_EQ_INT(xs.usage.completion_tokens, 42);
    json_t *uc = pv_x_usage_chunk(&xs);
    T_CHECK(same(json_object_get(uc, "usage"),
                 "{\"prompt_tokens\":60,\"completion_tokens\":42,"
                 "\"total_tokens\":102,\"prompt_tokens_details\":{"
                 "\"cached_tokens\":30,\"cache_write_tokens\":20},"
                 "\"completion_tokens_details\":{\"reasoning_tokens\":0}}"));
    T_EQ_INT(json_array_size(json_object_get(uc, "choices")), 0);
    json_decref(uc);
    json_decref(sk.chunks);

    /* An error event, a delta for a block that is not a tool, no type. */
    memset(&xs, 0, sizeof(xs));
    sk.chunks = json_array();
    T_EQ_INT(feed_anth(&xs, &sk, "error",
                       "{\"type\":\"error\",\"error\":{\"type\":"
                       "\"overloaded_error\",\"message\":\"Overloaded\"}}",
                       why, sizeof(why)),
             PV_XS_UPSTREAM_ERROR);
    T_EQ_STR(why, "overloaded_error: Overloaded");
    T_EQ_INT(feed_anth(&xs, &sk, "content_block_delta",
                       "{\"type\":\"content_block_delta\",\"index\":5,"
                       "\"delta\":{\"type\":\"input_json_delta\","
                       "\"partial_json\":\"x\"}}",
                       why, sizeof(why)),
             PV_XS_MALFORMED);
    T_EQ_INT(feed_anth(&xs, &sk, "", "{}", why, sizeof(why)),
             PV_XS_MALFORMED);
    T_EQ_INT(feed_anth(&xs, &sk, "content_block_delta",
                       "{\"type\":\"content_block_delta\",\"index\":99999,"
                       "\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}",
                       why, sizeof(why)),
             PV_XS_MALFORMED);
    /* Unknown event types are skipped, as the API asks clients to. */
    T_EQ_INT(feed_anth(&xs, &sk, "future_event", "{\"type\":\"future\"}", why,
                       sizeof(why)),
             0);
    json_decref(sk.chunks);
}

static int
feed_gem(struct pv_xstream *xs, struct sink *sk, const char *data, char *why,
         size_t len)
{
    json_t *ev = J(data);
    int r = pv_gem_event(xs, "", ev, sink_emit, sk, why, len);
    json_decref(ev);
    return r;
}

static void
test_gem_stream(void)
{
    struct pv_xstream xs;
    memset(&xs, 0, sizeof(xs));
    struct sink sk = {json_array()};
    char why[200] = "";
    T_EQ_INT(feed_gem(&xs, &sk,
                      "{\"candidates\":[{\"content\":{\"role\":\"model\","
                      "\"parts\":[{\"text\":\"think\",\"thought\":true}]}}],"
                      "\"responseId\":\"r7\",\"modelVersion\":\"gem\"}",
                      why, sizeof(why)),
             0);
    feed_gem(&xs, &sk,
             "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":"
             "[{\"text\":\"Hel\"}]}}],\"usageMetadata\":{\"promptTokenCount\":"
             "5,\"candidatesTokenCount\":1}}",
             why, sizeof(why));
    feed_gem(&xs, &sk,
             "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":"
             "[{\"text\":\"lo\"},{\"functionCall\":{\"name\":\"f\",\"args\":"
             "{\"q\":1}}}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{"
             "\"promptTokenCount\":5,\"candidatesTokenCount\":3,"
             "\"cachedContentTokenCount\":2,\"thoughtsTokenCount\":4}}",
             why, sizeof(why));
    T_CHECK(xs.complete);
    /* role, reasoning, Hel, lo, tool, finish */
    T_EQ_INT(json_array_size(sk.chunks), 6);
    T_CHECK(same(delta(&sk, 1), "{\"reasoning_content\":\"think\"}"));
    T_CHECK(same(delta(&sk, 2), "{\"content\":\"Hel\"}"));
    T_CHECK(same(delta(&sk, 3), "{\"content\":\"lo\"}"));
    T_CHECK(same(delta(&sk, 4),
                 "{\"tool_calls\":[{\"index\":0,\"id\":\"call_0\",\"type\":"
                 "\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                 "\"{\\\"q\\\":1}\"}}]}"));
    T_EQ_STR(finish(&sk, 5), "tool_calls");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(sk.chunks, 5),
                                               "id")),
             "r7");
    T_EQ_INT(xs.usage.prompt_tokens, 5);
    T_EQ_INT(xs.usage.cached_tokens, 2);
    T_EQ_INT(xs.usage.completion_tokens, 7);
    T_EQ_INT(xs.usage.reasoning_tokens, 4);
    json_decref(sk.chunks);

    memset(&xs, 0, sizeof(xs));
    sk.chunks = json_array();
    T_EQ_INT(feed_gem(&xs, &sk,
                      "{\"error\":{\"code\":503,\"message\":\"busy\","
                      "\"status\":\"UNAVAILABLE\"}}",
                      why, sizeof(why)),
             PV_XS_UPSTREAM_ERROR);
    T_EQ_STR(why, "UNAVAILABLE: busy");
    T_EQ_INT(feed_gem(&xs, &sk, "{\"x\":1}", why, sizeof(why)),
             PV_XS_MALFORMED);
    T_CHECK(!xs.complete);
    json_decref(sk.chunks);
}

/* reasoning_effort to Gemini 2.5's thinkingConfig: Google's own mapping
 * (low 1024, medium 8192, high 24576; none turns thinking off), thoughts
 * asked back unless off; anything else refused by name. */
static void
test_gem_reasoning(void)
{
    static const struct {
        const char *effort;
        int budget;
    } cases[] = {{"none", 0},     {"minimal", 1024}, {"low", 1024},
                 {"medium", 8192}, {"high", 24576}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char msg[512], body[256];
        json_t *out = NULL;
        snprintf(body, sizeof(body),
                 "{\"model\":\"g\",\"reasoning_effort\":\"%s\","
                 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 cases[k].effort);
        json_t *oa = J(body);
        T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_OK);
        const json_t *tc = json_object_get(
            json_object_get(out, "generationConfig"), "thinkingConfig");
        T_EQ_INT(json_integer_value(json_object_get(tc, "thinkingBudget")),
                 cases[k].budget);
        T_EQ_INT(json_is_true(json_object_get(tc, "includeThoughts")),
                 cases[k].budget > 0);
        json_decref(out);
        json_decref(oa);
    }
    char msg[512];
    json_t *out = NULL;
    json_t *oa = J("{\"model\":\"g\",\"reasoning_effort\":\"max\","
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_REFUSE);
    T_CHECK(strstr(msg, "reasoning_effort") != NULL);
    json_decref(oa);
    /* without it, no thinkingConfig: the model's default */
    oa = J("{\"model\":\"g\",\"messages\":[{\"role\":\"user\","
           "\"content\":\"x\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_OK);
    T_CHECK(json_object_get(json_object_get(out, "generationConfig"),
                            "thinkingConfig") == NULL);
    json_decref(out);
    json_decref(oa);
}

/* logprobs on gemini: logprobs / top_logprobs become responseLogprobs /
 * logprobs; logprobsResult becomes choices[0].logprobs.content (answer
 * and stream, a chunk's with its first delta). */
static void
test_gem_logprobs(void)
{
    char msg[512];
    json_t *out = NULL;
    json_t *oa = J("{\"model\":\"g\",\"logprobs\":true,\"top_logprobs\":3,"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_OK);
    const json_t *gc = json_object_get(out, "generationConfig");
    T_CHECK(json_is_true(json_object_get(gc, "responseLogprobs")));
    T_EQ_INT(json_integer_value(json_object_get(gc, "logprobs")), 3);
    json_decref(out);
    json_decref(oa);
    oa = J("{\"model\":\"g\",\"top_logprobs\":3,\"messages\":[{\"role\":"
           "\"user\",\"content\":\"x\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_REFUSE);
    T_CHECK(strstr(msg, "top_logprobs") != NULL);
    json_decref(oa);
    oa = J("{\"model\":\"g\",\"logprobs\":\"yes\",\"messages\":[{\"role\":"
           "\"user\",\"content\":\"x\"}]}");
    T_EQ_INT(pv_gem_request(oa, 0, &out, msg, sizeof(msg)), PV_X_REFUSE);
    T_CHECK(strstr(msg, "logprobs") != NULL);
    json_decref(oa);

    static const char *const lr =
        "\"logprobsResult\":{\"topCandidates\":[{\"candidates\":[{\"token\":"
        "\"Hi\",\"logProbability\":-0.5},{\"token\":\"Yo\","
        "\"logProbability\":-1.5}]},{\"candidates\":[{\"token\":\"!\"}]}],"
        "\"chosenCandidates\":[{\"token\":\"Hi\",\"tokenId\":7,"
        "\"logProbability\":-0.5},{\"token\":\"!\",\"tokenId\":8}]}";
    char up[1024];
    snprintf(up, sizeof(up),
             "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{"
             "\"text\":\"Hi!\"}]},\"finishReason\":\"STOP\",%s}]}",
             lr);
    json_t *u0 = J(up);
    struct pv_usage u;
    char why[128];
    json_t *ans = pv_gem_answer(u0, &u, why, sizeof(why));
    json_decref(u0);
    const json_t *lp = json_object_get(
        json_object_get(json_array_get(json_object_get(ans, "choices"), 0),
                        "logprobs"),
        "content");
    T_EQ_INT(json_array_size(lp), 2);
    T_CHECK(same(json_array_get(lp, 0),
                 "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],"
                 "\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,"
                 "\"bytes\":[72,105]},{\"token\":\"Yo\",\"logprob\":-1.5,"
                 "\"bytes\":[89,111]}]}"));
    /* a left-out logProbability is 0 (probability 1) */
    T_CHECK(json_number_value(json_object_get(json_array_get(lp, 1),
                                              "logprob")) == 0.0);
    json_decref(ans);
    /* without logprobsResult: null, as before */
    u0 = J("{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{"
           "\"text\":\"Hi\"}]},\"finishReason\":\"STOP\"}]}");
    ans = pv_gem_answer(u0, &u, why, sizeof(why));
    T_CHECK(json_is_null(json_object_get(
        json_array_get(json_object_get(ans, "choices"), 0), "logprobs")));
    json_decref(ans);
    json_decref(u0);

    struct pv_xstream xs;
    memset(&xs, 0, sizeof(xs));
    struct sink sk = {json_array()};
    snprintf(up, sizeof(up),
             "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{"
             "\"text\":\"Hi\"},{\"text\":\"!\"}]},\"finishReason\":\"STOP\","
             "%s}]}",
             lr);
    T_EQ_INT(feed_gem(&xs, &sk, up, why, sizeof(why)), 0);
    /* role, Hi (with the logprobs), !, finish */
    T_EQ_INT(json_array_size(sk.chunks), 4);
    const json_t *c1 = json_array_get(
        json_object_get(json_array_get(sk.chunks, 1), "choices"), 0);
    T_EQ_INT(json_array_size(json_object_get(json_object_get(c1, "logprobs"),
                                             "content")),
             2);
    const json_t *c2 = json_array_get(
        json_object_get(json_array_get(sk.chunks, 2), "choices"), 0);
    T_CHECK(json_is_null(json_object_get(c2, "logprobs")));
    json_decref(sk.chunks);
}

/* ---- errors ------------------------------------------------------------- */

/* The passthrough's readers: usage, end and errors from the bytes. */
static void
test_anth_pass_readers(void)
{
    const char *a =
        "{ \"content\":[{\"type\":\"future_block\",\"x\":1e2}],\n"
        "\"type\" : \"message\",\"usage\":{\"output_tokens\":30,"
        "\"input_tokens\":100,\"cache_creation_input_tokens\":2000,"
        "\"cache_read_input_tokens\":5000}}";
    struct pv_usage u;
    char why[200], t[32];
    T_EQ_INT(pv_anth_pass_answer(a, strlen(a), &u, why, sizeof(why)), 0);
    T_EQ_INT(u.prompt_tokens, 7100);
    T_EQ_INT(u.cached_tokens, 5000);
    T_EQ_INT(u.cache_write_tokens, 2000);
    T_EQ_INT(u.completion_tokens, 30);
    const char *na = "{\"type\":\"error\",\"content\":[]}";
    T_EQ_INT(pv_anth_pass_answer(na, strlen(na), &u, why, sizeof(why)), -1);
    T_EQ_INT(pv_anth_pass_answer("{\"type\":", 8, &u, why, sizeof(why)), -1);

    struct pv_xstream xs;
    memset(&xs, 0, sizeof(xs));
    const char *st = "{\"type\":\"message_start\",\"message\":{\"usage\":{"
                     "\"input_tokens\":9,\"cache_read_input_tokens\":4}}}";
    T_EQ_INT(pv_anth_pass_event(&xs, "", st, strlen(st), t, sizeof(t), why,
                                sizeof(why)),
             0);
    T_EQ_STR(t, "message_start");
    T_EQ_INT(xs.usage.prompt_tokens, 13);
    /* a data without "type": the SSE event's (found by fuzz_native: the
     * translation reads it so, and so must the passthrough) */
    const char *md = "{\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":"
                     "{\"output_tokens\":3}}";
    T_EQ_INT(pv_anth_pass_event(&xs, "message_delta", md, strlen(md), t,
                                sizeof(t), why, sizeof(why)),
             0);
    T_EQ_INT(xs.usage.completion_tokens, 3);
    T_EQ_INT(xs.usage.prompt_tokens, 13);
    const char *un = "{\"type\":\"future_event\",\"usage\":{\"x\":1}}";
    T_EQ_INT(pv_anth_pass_event(&xs, "", un, strlen(un), t, sizeof(t), why,
                                sizeof(why)),
             0);
    const char *er = "{\"type\":\"error\",\"error\":{\"type\":"
                     "\"overloaded_error\",\"message\":\"Overloaded\"}}";
    T_EQ_INT(pv_anth_pass_event(&xs, "", er, strlen(er), t, sizeof(t), why,
                                sizeof(why)),
             PV_XS_UPSTREAM_ERROR);
    T_EQ_STR(why, "overloaded_error: Overloaded");
    T_EQ_INT(pv_anth_pass_event(&xs, "", "{\"x\":1}", 7, t, sizeof(t), why,
                                sizeof(why)),
             PV_XS_MALFORMED);
    T_EQ_INT(pv_anth_pass_event(&xs, "", "{\"type\":\"message_stop\"}", 23, t,
                                sizeof(t), why, sizeof(why)),
             PV_XS_DONE);
    T_EQ_INT(xs.complete, 1);
}

static void
test_error_bodies(void)
{
    static const char anth[] =
        "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
        "\"message\":\"Overloaded\"},\"request_id\":\"req_1\"}";
    size_t n = 0;
    char *s = pv_x_error_body(anth, strlen(anth), 529, &n);
    json_t *j = J(s);
    T_CHECK(same(j, "{\"error\":{\"message\":\"Overloaded\",\"type\":"
                    "\"overloaded_error\",\"param\":null,\"code\":"
                    "\"overloaded_error\"}}"));
    T_EQ_INT(n, strlen(s));
    json_decref(j);
    free(s);
    static const char goog[] =
        "[{\"error\":{\"code\":429,\"message\":\"Quota exceeded\","
        "\"status\":\"RESOURCE_EXHAUSTED\"}}]";
    s = pv_x_error_body(goog, strlen(goog), 429, &n);
    j = J(s);
    T_CHECK(same(j, "{\"error\":{\"message\":\"Quota exceeded\",\"type\":"
                    "\"RESOURCE_EXHAUSTED\",\"param\":null,\"code\":"
                    "\"RESOURCE_EXHAUSTED\"}}"));
    json_decref(j);
    free(s);
    s = pv_x_error_body("Bad Gateway\n<html>", 18, 502, &n);
    j = J(s);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(j, "error"),
                                               "message")),
             "upstream status 502: Bad Gateway");
    json_decref(j);
    free(s);
    s = pv_x_error_body(NULL, 0, 401, &n);
    j = J(s);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(j, "error"),
                                               "type")),
             "invalid_request_error");
    json_decref(j);
    free(s);
}

static void
test_helpers(void)
{
    char mime[64];
    const char *data = NULL;
    T_EQ_INT(pv_x_data_url("data:image/jpeg;base64,/9j/", mime, sizeof(mime),
                           &data),
             0);
    T_EQ_STR(mime, "image/jpeg");
    T_EQ_STR(data, "/9j/");
    T_EQ_INT(pv_x_data_url("data:;base64,AA", mime, sizeof(mime), &data), -1);
    T_EQ_INT(pv_x_data_url("data:image/png,AA", mime, sizeof(mime), &data),
             -1);
    T_EQ_INT(pv_x_data_url("https://x", mime, sizeof(mime), &data), -1);
    /* a model's byte tokens: a NUL (which the Responses and Messages
     * adapters could not parse back) and a cut sequence both become
     * U+FFFD; valid text stays as it is */
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } rp[] = {{"a\0b", 3, "a\xEF\xBF\xBD" "b"},
              {"x\xC3", 2, "x\xEF\xBF\xBD"},
              {"\xC3\xA9t\xC3\xA9", 5, "\xC3\xA9t\xC3\xA9"}};
    for (size_t i = 0; i < sizeof(rp) / sizeof(rp[0]); i++) {
        struct gx_buf t;
        gx_buf_init(&t, 64);
        gx_buf_append(&t, rp[i].in, rp[i].n);
        pv_utf8_repair(&t);
        T_EQ_INT(t.len, strlen(rp[i].want));
        T_CHECK(t.data && !memcmp(t.data, rp[i].want, t.len));
        gx_buf_cleanup(&t);
    }
    char list[32] = "";
    for (int i = 0; i < 10; i++)
        pv_x_refuse_add(list, sizeof(list), "param%d", i);
    T_CHECK(strlen(list) < sizeof(list));
    T_CHECK(strncmp(list, "param0, param1", 14) == 0);

    /* The stream content-type check: checked once, case-insensitive,
     * parameters allowed; anything else fails the call naming it. */
    static const struct {
        const char *ct;
        int ok;
    } cts[] = {{"text/event-stream", 1},
               {"Text/Event-Stream; charset=utf-8", 1},
               {"application/json", 0},
               {"", 0},
               {"text/event", 0}};
    for (size_t i = 0; i < sizeof(cts) / sizeof(cts[0]); i++) {
        struct pv_call *c = calloc(1, sizeof(*c));
        if (!c)
            continue;
        snprintf(c->content_type, sizeof(c->content_type), "%s", cts[i].ct);
        int checked = 0;
        T_EQ_INT(pv_stream_ct_check(c, &checked), cts[i].ok ? 0 : -1);
        T_EQ_INT(checked, 1);
        T_EQ_INT(c->failed, !cts[i].ok);
        if (!cts[i].ok) {
            T_EQ_INT(c->res.outcome, PV_ERR_MALFORMED);
            T_CHECK(strstr(c->res.detail, "expected text/event-stream") !=
                    NULL);
            T_CHECK(strstr(c->res.detail, cts[i].ct) != NULL);
        }
        /* Once per call: later chunks are not checked again. */
        c->failed = 0;
        T_EQ_INT(pv_stream_ct_check(c, &checked), 0);
        T_EQ_INT(c->failed, 0);
        free(c);
    }
}

int
main(void)
{
    T_RUN(test_anth_request);
    T_RUN(test_gem_request);
    T_RUN(test_anth_answer);
    T_RUN(test_gem_answer);
    T_RUN(test_gem_logprobs);
    T_RUN(test_gem_reasoning);
    T_RUN(test_anth_stream);
    T_RUN(test_gem_stream);
    T_RUN(test_anth_pass_readers);
    T_RUN(test_error_bodies);
    T_RUN(test_helpers);
    return T_END();
}
