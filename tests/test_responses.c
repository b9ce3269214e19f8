/*
 * The Responses API adapter (gateway/responses.c) without sockets: the
 * parser into the neutral chat request (every input item type, tools,
 * tool_choice, text.format, caps, stream, and every refusal naming its
 * parameter), the non-stream writer (message and function_call items,
 * statuses, usage) and the stream writer (every event type, in order, with
 * consecutive sequence numbers); also the embeddings / completions parsers
 * (gateway/embeddings.c) and the plan narrowed to the provider kinds an
 * API has (router/capable.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gateway/gw_int.h"
#include "harness.h"
#include "lib/resp_events.h"

static struct pv_chat chat;
static json_t *echo;
static char msg[512];
static const char *param;

static enum pv_chat_err
parse(const char *body)
{
    pv_chat_cleanup(&chat);
    json_decref(echo);
    echo = NULL;
    msg[0] = '\0';
    return gw_resp_parse(&chat, body, strlen(body), &echo, msg, sizeof(msg),
                         &param);
}

/* messages[i] of the translated chat body. */
static json_t *
cmsg(size_t i)
{
    return json_array_get(json_object_get(chat.body, "messages"), i);
}

static const char *
str_at(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static void
test_parse_string_input(void)
{
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"Hi there\","
                   "\"instructions\":\"Be brief\"}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.api, PV_API_RESPONSES);
    T_EQ_STR(chat.model, "m");
    T_EQ_INT(chat.stream, 0);
    T_EQ_INT(json_array_size(json_object_get(chat.body, "messages")), 2);
    T_EQ_STR(str_at(cmsg(0), "role"), "system");
    T_EQ_STR(str_at(cmsg(0), "content"), "Be brief");
    T_EQ_STR(str_at(cmsg(1), "role"), "user");
    T_EQ_STR(str_at(cmsg(1), "content"), "Hi there");
    /* the estimate is the chat one: (8 + 8) / 4 + 4 x 2 */
    T_EQ_INT(chat.est_prompt_tokens, 16 / 4 + 8);
    T_EQ_INT(chat.completion_cap, PV_DEFAULT_COMPLETION_TOKENS);
    T_EQ_STR(str_at(echo, "instructions"), "Be brief");
    T_EQ_STR(str_at(echo, "tool_choice"), "auto");
    T_CHECK(json_is_true(json_object_get(echo, "parallel_tool_calls")));
}

static void
test_parse_items(void)
{
    T_EQ_INT(
        parse("{\"model\":\"m\",\"input\":["
              "{\"type\":\"message\",\"role\":\"developer\",\"content\":"
              "\"rules\"},"
              "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
              "\"text\":\"look\"},{\"type\":\"input_image\",\"image_url\":"
              "\"data:image/png;base64,AAAA\",\"detail\":\"low\"}]},"
              "{\"type\":\"message\",\"role\":\"assistant\",\"content\":["
              "{\"type\":\"output_text\",\"text\":\"Let me \"},"
              "{\"type\":\"output_text\",\"text\":\"check.\"}]},"
              "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
              "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
              "\"get\",\"arguments\":\"{\\\"a\\\":1}\"},"
              "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":"
              "\"put\",\"arguments\":\"{}\"},"
              "{\"type\":\"function_call_output\",\"call_id\":\"c1\","
              "\"output\":\"one\"},"
              "{\"type\":\"function_call_output\",\"call_id\":\"c2\","
              "\"output\":[{\"type\":\"input_text\",\"text\":\"two\"}]}]}"),
        PV_CHAT_OK);
    T_EQ_INT(json_array_size(json_object_get(chat.body, "messages")), 5);
    T_EQ_STR(str_at(cmsg(0), "role"), "system"); /* developer */
    T_EQ_STR(str_at(cmsg(0), "content"), "rules");
    json_t *parts = json_object_get(cmsg(1), "content");
    T_EQ_INT(json_array_size(parts), 2);
    T_EQ_STR(str_at(json_array_get(parts, 0), "type"), "text");
    T_EQ_STR(str_at(json_array_get(parts, 0), "text"), "look");
    T_EQ_STR(str_at(json_array_get(parts, 1), "type"), "image_url");
    json_t *iu = json_object_get(json_array_get(parts, 1), "image_url");
    T_EQ_STR(str_at(iu, "url"), "data:image/png;base64,AAAA");
    T_EQ_STR(str_at(iu, "detail"), "low");
    /* the assistant's text and both calls in one message; reasoning gone */
    T_EQ_STR(str_at(cmsg(2), "role"), "assistant");
    T_EQ_STR(str_at(cmsg(2), "content"), "Let me check.");
    json_t *calls = json_object_get(cmsg(2), "tool_calls");
    T_EQ_INT(json_array_size(calls), 2);
    T_EQ_STR(str_at(json_array_get(calls, 0), "id"), "c1");
    T_EQ_STR(str_at(json_array_get(calls, 0), "type"), "function");
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    T_EQ_STR(str_at(fn, "name"), "get");
    T_EQ_STR(str_at(fn, "arguments"), "{\"a\":1}");
    T_EQ_STR(str_at(cmsg(3), "role"), "tool");
    T_EQ_STR(str_at(cmsg(3), "tool_call_id"), "c1");
    T_EQ_STR(str_at(cmsg(3), "content"), "one");
    T_EQ_STR(str_at(cmsg(4), "tool_call_id"), "c2");
    T_EQ_STR(str_at(cmsg(4), "content"), "two");

    /* a call with no assistant text before it opens its own message */
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":[{\"role\":\"user\","
                   "\"content\":\"q\"},{\"type\":\"function_call\","
                   "\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"}]}"),
             PV_CHAT_OK);
    T_EQ_STR(str_at(cmsg(1), "role"), "assistant");
    T_CHECK(json_is_null(json_object_get(cmsg(1), "content")));
    T_EQ_INT(json_array_size(json_object_get(cmsg(1), "tool_calls")), 1);
}

static void
test_parse_options(void)
{
    T_EQ_INT(
        parse("{\"model\":\"m\",\"input\":\"x\",\"stream\":true,"
              "\"max_output_tokens\":77,\"temperature\":0.5,\"top_p\":0.9,"
              "\"parallel_tool_calls\":false,\"user\":\"u1\",\"store\":false,"
              "\"metadata\":{\"k\":\"v\"},\"include\":[],\"truncation\":"
              "\"disabled\",\"previous_response_id\":null,"
              "\"tools\":[{\"type\":\"function\",\"name\":\"f\","
              "\"description\":\"d\",\"parameters\":{\"type\":\"object\"},"
              "\"strict\":true}],"
              "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
              "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\","
              "\"schema\":{\"type\":\"object\"},\"strict\":true}}}"),
        PV_CHAT_OK);
    T_EQ_INT(chat.stream, 1);
    T_EQ_INT(chat.include_usage, 1); /* the final event carries usage */
    T_EQ_INT(chat.max_tokens, 77);
    T_EQ_INT(chat.completion_cap, 77);
    json_t *b = chat.body;
    T_EQ_INT(json_integer_value(json_object_get(b, "max_tokens")), 77);
    T_CHECK(json_real_value(json_object_get(b, "temperature")) == 0.5);
    T_CHECK(json_is_false(json_object_get(b, "parallel_tool_calls")));
    T_EQ_STR(str_at(b, "user"), "u1");
    T_CHECK(!json_object_get(b, "metadata")); /* echoed only */
    T_CHECK(!json_object_get(b, "store"));
    json_t *t0 = json_array_get(json_object_get(b, "tools"), 0);
    T_EQ_STR(str_at(t0, "type"), "function");
    json_t *fn = json_object_get(t0, "function");
    T_EQ_STR(str_at(fn, "name"), "f");
    T_EQ_STR(str_at(fn, "description"), "d");
    T_CHECK(json_is_true(json_object_get(fn, "strict")));
    T_CHECK(json_is_object(json_object_get(fn, "parameters")));
    json_t *tc = json_object_get(b, "tool_choice");
    T_EQ_STR(str_at(json_object_get(tc, "function"), "name"), "f");
    json_t *rf = json_object_get(b, "response_format");
    T_EQ_STR(str_at(rf, "type"), "json_schema");
    T_EQ_STR(str_at(json_object_get(rf, "json_schema"), "name"), "s");
    T_CHECK(json_is_true(
        json_object_get(json_object_get(rf, "json_schema"), "strict")));
    T_EQ_STR(str_at(json_object_get(echo, "metadata"), "k"), "v");
    T_EQ_STR(str_at(json_object_get(json_object_get(echo, "text"), "format"),
                    "type"),
             "json_schema");

    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":"
                   "\"required\",\"text\":{\"format\":{\"type\":"
                   "\"json_object\"}}}"),
             PV_CHAT_OK);
    T_EQ_STR(str_at(chat.body, "tool_choice"), "required");
    T_EQ_STR(str_at(json_object_get(chat.body, "response_format"), "type"),
             "json_object");
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":"
                   "{\"type\":\"text\"}}}"),
             PV_CHAT_OK);
    T_CHECK(!json_object_get(chat.body, "response_format"));
    T_CHECK(!json_object_get(chat.body, "stream_options"));
    T_CHECK(!json_object_get(chat.body, "reasoning_effort"));
    T_CHECK(json_is_null(
        json_object_get(json_object_get(echo, "reasoning"), "effort")));
    /* reasoning.effort -> reasoning_effort, echoed with summary */
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{"
                   "\"effort\":\"low\",\"summary\":\"auto\"}}"),
             PV_CHAT_OK);
    T_EQ_STR(str_at(chat.body, "reasoning_effort"), "low");
    T_EQ_STR(str_at(json_object_get(echo, "reasoning"), "effort"), "low");
    T_EQ_STR(str_at(json_object_get(echo, "reasoning"), "summary"), "auto");
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{"
                   "\"summary\":null}}"),
             PV_CHAT_OK);
    T_CHECK(!json_object_get(chat.body, "reasoning_effort"));
}

/* body is refused with a 400 naming want_param (NULL: the body). */
static void
refused(const char *body, const char *want_param, const char *want_words)
{
    enum pv_chat_err e = parse(body);
    T_EQ_INT(e, PV_CHAT_INVALID);
    if (want_param)
        T_EQ_STR(param ? param : "(null)", want_param);
    else
        T_CHECK(param == NULL);
    if (want_words && !strstr(msg, want_words)) {
        fprintf(stderr, "message: %s\n", msg);
        T_CHECK(strstr(msg, want_words) != NULL);
    }
    T_CHECK(chat.body == NULL);
    T_CHECK(echo == NULL);
}

static void
test_parse_refusals(void)
{
    refused("{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":"
            "\"resp_1\"}",
            "previous_response_id", "stateless");
    refused("{\"model\":\"m\",\"input\":\"x\",\"store\":true}", "store",
            "stateless");
    refused("{\"model\":\"m\",\"input\":\"x\",\"conversation\":\"c\"}",
            "conversation", "stateless");
    refused("{\"model\":\"m\",\"input\":\"x\",\"background\":true}",
            "background", "background");
    refused("{\"model\":\"m\",\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}",
            "prompt", "stored prompt");
    refused("{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\","
            "\"id\":\"msg_1\"}]}",
            "input", "item_reference");
    refused("{\"model\":\"m\",\"input\":[{\"type\":\"web_search_call\"}]}",
            "input", "web_search_call");
    refused("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":"
            "\"max\"}}",
            "reasoning.effort", "none, minimal, low, medium or high");
    refused("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":"
            "\"low\",\"summary\":\"detailed\"}}",
            "reasoning.summary", "not a summary");
    refused("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{"
            "\"generate_summary\":\"auto\"}}",
            "reasoning", "reasoning.generate_summary");
    refused("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":\"low\"}",
            "reasoning", "must be an object");
    refused("{\"model\":\"m\",\"input\":\"x\",\"service_tier\":\"flex\"}",
            "service_tier", "Unsupported parameter");
    refused("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":"
            "\"web_search\"}]}",
            "tools", "function tools only");
    refused("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":"
            "\"function\",\"name\":\"f\",\"extra\":1}]}",
            "tools", "tools[0].extra");
    refused("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":{\"type\":"
            "\"file_search\"}}",
            "tool_choice", NULL);
    refused("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"verbosity\":"
            "\"low\"}}",
            "text", "text.verbosity");
    refused("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{"
            "\"type\":\"json_schema\"}}}",
            "text.format", "schema");
    refused("{\"model\":\"m\",\"input\":\"x\",\"include\":["
            "\"file_search_call.results\"]}",
            "include", NULL);
    refused("{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}",
            "truncation", NULL);
    refused("{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}",
            "max_output_tokens", NULL);
    refused("{\"model\":\"m\",\"input\":\"x\",\"temperature\":\"hot\"}",
            "temperature", NULL);
    refused("{\"model\":\"m\",\"input\":\"x\",\"metadata\":{\"k\":1}}",
            "metadata", NULL);
    refused("{\"model\":\"m\"}", "input", "Missing");
    refused("{\"input\":\"x\"}", "model", "Missing");
    refused("{\"model\":\"\",\"input\":\"x\"}", "model", NULL);
    refused("{\"model\":\"m\",\"input\":[]}", "input", "no message");
    refused("{\"model\":\"m\",\"input\":42}", "input", NULL);
    refused("{\"model\":\"m\",\"input\":[{\"role\":\"robot\",\"content\":"
            "\"x\"}]}",
            "input", "role");
    refused("{\"model\":\"m\",\"input\":[{\"type\":\"function_call\","
            "\"name\":\"f\"}]}",
            "input", "call_id");
    refused("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":["
            "{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}",
            "input", "input_file");
    refused("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":["
            "{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
            "input", "image_url");
    refused("[1]", NULL, "JSON object");
    T_EQ_INT(parse("{\"model\":"), PV_CHAT_BAD_JSON);
    T_EQ_INT(parse("{\"model\":\"a\",\"model\":\"b\",\"input\":\"x\"}"),
             PV_CHAT_BAD_JSON);
}

static const struct pv_usage U = {1, 30, 12, 10, 0, 4};

static struct gw_api_ctx
ctx(void)
{
    struct gw_api_ctx x = {"req1", &chat, echo, &U, 1700000000, 0, 0};
    return x;
}

static void
test_body_writer(void)
{
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"instructions\":\"i\","
                   "\"metadata\":{\"a\":\"b\"}}"),
             PV_CHAT_OK);
    struct gw_api_ctx x = ctx();
    const char *up =
        "{\"id\":\"c\",\"model\":\"up-model\",\"choices\":[{\"index\":0,"
        "\"message\":{\"role\":\"assistant\",\"content\":\"Hello\","
        "\"tool_calls\":[{\"id\":\"call_9\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":1}\"}}]},"
        "\"finish_reason\":\"tool_calls\"}]}";
    size_t n = 0;
    char why[128];
    char *s = gw_resp_body(&x, up, strlen(up), &n, why, sizeof(why));
    T_CHECK(s != NULL);
    json_t *o = s ? json_loadb(s, n, 0, NULL) : NULL;
    T_EQ_STR(str_at(o, "id"), "resp_req1");
    T_EQ_STR(str_at(o, "object"), "response");
    T_EQ_STR(str_at(o, "status"), "completed");
    T_EQ_STR(str_at(o, "model"), "up-model");
    T_EQ_INT(json_integer_value(json_object_get(o, "created_at")),
             1700000000);
    T_EQ_STR(str_at(o, "instructions"), "i");
    T_EQ_STR(str_at(json_object_get(o, "metadata"), "a"), "b");
    T_CHECK(json_is_false(json_object_get(o, "store")));
    json_t *out = json_object_get(o, "output");
    T_EQ_INT(json_array_size(out), 2);
    json_t *m = json_array_get(out, 0);
    T_EQ_STR(str_at(m, "type"), "message");
    T_EQ_STR(str_at(m, "role"), "assistant");
    T_EQ_STR(str_at(m, "status"), "completed");
    json_t *p = json_array_get(json_object_get(m, "content"), 0);
    T_EQ_STR(str_at(p, "type"), "output_text");
    T_EQ_STR(str_at(p, "text"), "Hello");
    T_CHECK(json_is_array(json_object_get(p, "annotations")));
    json_t *fc = json_array_get(out, 1);
    T_EQ_STR(str_at(fc, "type"), "function_call");
    T_EQ_STR(str_at(fc, "call_id"), "call_9");
    T_EQ_STR(str_at(fc, "name"), "f");
    T_EQ_STR(str_at(fc, "arguments"), "{\"q\":1}");
    T_CHECK(strncmp(str_at(fc, "id"), "fc_", 3) == 0);
    json_t *u = json_object_get(o, "usage");
    T_EQ_INT(json_integer_value(json_object_get(u, "input_tokens")), 30);
    T_EQ_INT(json_integer_value(json_object_get(u, "output_tokens")), 12);
    T_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 42);
    T_EQ_INT(json_integer_value(json_object_get(
                 json_object_get(u, "input_tokens_details"), "cached_tokens")),
             10);
    T_EQ_INT(json_integer_value(
                 json_object_get(json_object_get(u, "output_tokens_details"),
                                 "reasoning_tokens")),
             4);
    json_decref(o);
    free(s);

    /* length -> incomplete (max_output_tokens) */
    const char *cut = "{\"choices\":[{\"message\":{\"content\":\"Hel\"},"
                      "\"finish_reason\":\"length\"}]}";
    s = gw_resp_body(&x, cut, strlen(cut), &n, why, sizeof(why));
    o = s ? json_loads(s, 0, NULL) : NULL;
    T_EQ_STR(str_at(o, "status"), "incomplete");
    T_EQ_STR(str_at(json_object_get(o, "incomplete_details"), "reason"),
             "max_output_tokens");
    T_EQ_STR(str_at(o, "model"), "m"); /* none upstream: the client's */
    json_decref(o);
    free(s);
    const char *filt = "{\"choices\":[{\"message\":{\"content\":null},"
                       "\"finish_reason\":\"content_filter\"}]}";
    s = gw_resp_body(&x, filt, strlen(filt), &n, why, sizeof(why));
    o = s ? json_loads(s, 0, NULL) : NULL;
    T_EQ_STR(str_at(json_object_get(o, "incomplete_details"), "reason"),
             "content_filter");
    T_EQ_INT(json_array_size(json_object_get(o, "output")), 0);
    json_decref(o);
    free(s);
    s = gw_resp_body(&x, "{\"data\":[]}", 11, &n, why, sizeof(why));
    T_CHECK(s == NULL);
    T_CHECK(strstr(why, "choices") != NULL);
    s = gw_resp_body(&x, "not json", 8, &n, why, sizeof(why));
    T_CHECK(s == NULL);
}

static int
feed(struct gw_resp_stream *s, const char *chunk, struct gx_buf *out)
{
    return gw_resp_stream_chunk(s, chunk, strlen(chunk), out);
}

static void
test_stream_writer(void)
{
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"stream\":true}"),
             PV_CHAT_OK);
    struct gw_api_ctx x = ctx();
    struct gw_resp_stream *s = gw_resp_stream_new(&x);
    T_CHECK(s != NULL);
    if (!s)
        return;
    struct gx_buf out;
    gx_buf_init(&out, 0);
    T_EQ_INT(feed(s, "{\"model\":\"up\",\"choices\":[{\"delta\":{\"role\":"
                     "\"assistant\",\"content\":\"\"}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":"
                     "0,\"id\":\"call_1\",\"type\":\"function\",\"function\":"
                     "{\"name\":\"f\",\"arguments\":\"\"}}]}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":"
                     "0,\"function\":{\"arguments\":\"{\\\"a\\\"\"}}]}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":"
                     "0,\"function\":{\"arguments\":\":1}\"}}]}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{},\"finish_reason\":"
                     "\"tool_calls\"}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[],\"usage\":{\"prompt_tokens\":30}}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "[1,2]", &out), GX_EPROTO);
    T_EQ_INT(gw_resp_stream_end(s, &U, NULL, &out), GX_OK);
    json_t *ev = resp_events_parse(out.data);
    static const char *const want[] = {
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed"};
    size_t nw = sizeof(want) / sizeof(want[0]);
    T_EQ_INT(json_array_size(ev), nw);
    T_EQ_INT(resp_events_bad(ev), -1);
    for (size_t i = 0; i < nw && i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        json_t *d = json_object_get(e, "data");
        T_EQ_STR(str_at(e, "event"), want[i]);
        T_EQ_STR(str_at(d, "type"), want[i]); /* type repeats the event */
        T_EQ_INT(json_integer_value(json_object_get(d, "sequence_number")),
                 i);
    }
    json_t *d;
    d = json_object_get(json_array_get(ev, 0), "data");
    T_EQ_STR(str_at(json_object_get(d, "response"), "status"), "in_progress");
    T_EQ_STR(str_at(json_object_get(d, "response"), "model"), "up");
    d = json_object_get(json_array_get(ev, 2), "data");
    T_EQ_INT(json_integer_value(json_object_get(d, "output_index")), 0);
    T_EQ_STR(str_at(json_object_get(d, "item"), "type"), "message");
    T_EQ_STR(str_at(json_object_get(d, "item"), "status"), "in_progress");
    const char *msg_id = str_at(json_object_get(d, "item"), "id");
    d = json_object_get(json_array_get(ev, 4), "data");
    T_EQ_STR(str_at(d, "delta"), "Hel");
    T_EQ_STR(str_at(d, "item_id"), msg_id);
    T_EQ_INT(json_integer_value(json_object_get(d, "content_index")), 0);
    d = json_object_get(json_array_get(ev, 6), "data");
    T_EQ_STR(str_at(d, "text"), "Hello");
    d = json_object_get(json_array_get(ev, 7), "data");
    T_EQ_STR(str_at(json_object_get(d, "part"), "text"), "Hello");
    d = json_object_get(json_array_get(ev, 9), "data");
    T_EQ_INT(json_integer_value(json_object_get(d, "output_index")), 1);
    T_EQ_STR(str_at(json_object_get(d, "item"), "type"), "function_call");
    T_EQ_STR(str_at(json_object_get(d, "item"), "call_id"), "call_1");
    T_EQ_STR(str_at(json_object_get(d, "item"), "name"), "f");
    d = json_object_get(json_array_get(ev, 11), "data");
    T_EQ_STR(str_at(d, "delta"), ":1}");
    d = json_object_get(json_array_get(ev, 12), "data");
    T_EQ_STR(str_at(d, "arguments"), "{\"a\":1}");
    d = json_object_get(json_array_get(ev, 13), "data");
    T_EQ_STR(str_at(json_object_get(d, "item"), "status"), "completed");
    T_EQ_STR(str_at(json_object_get(d, "item"), "arguments"), "{\"a\":1}");
    d = json_object_get(json_object_get(json_array_get(ev, 14), "data"),
                        "response");
    T_EQ_STR(str_at(d, "status"), "completed");
    json_t *out_items = json_object_get(d, "output");
    T_EQ_INT(json_array_size(out_items), 2);
    T_EQ_STR(str_at(json_array_get(json_object_get(json_array_get(out_items,
                                                                  0),
                                                   "content"),
                                   0),
                    "text"),
             "Hello");
    T_EQ_STR(str_at(json_array_get(out_items, 1), "arguments"), "{\"a\":1}");
    T_EQ_INT(json_integer_value(
                 json_object_get(json_object_get(d, "usage"), "input_tokens")),
             30);
    json_decref(ev);
    gw_resp_stream_free(s);

    /* cut by the length cap -> response.incomplete */
    s = gw_resp_stream_new(&x);
    gx_buf_reset(&out);
    feed(s, "{\"choices\":[{\"delta\":{\"content\":\"ab\"},\"finish_reason\":"
            "\"length\"}]}",
         &out);
    T_EQ_INT(gw_resp_stream_end(s, &U, NULL, &out), GX_OK);
    ev = resp_events_parse(out.data);
    size_t ne = json_array_size(ev);
    T_EQ_STR(str_at(json_array_get(ev, ne - 1), "event"),
             "response.incomplete");
    d = json_object_get(json_object_get(json_array_get(ev, ne - 1), "data"),
                        "response");
    T_EQ_STR(str_at(json_object_get(d, "incomplete_details"), "reason"),
             "max_output_tokens");
    json_decref(ev);
    gw_resp_stream_free(s);

    /* broken after the first byte: open items closed, error, failed */
    s = gw_resp_stream_new(&x);
    gx_buf_reset(&out);
    feed(s, "{\"choices\":[{\"delta\":{\"content\":\"ab\"}}]}", &out);
    T_EQ_INT(gw_resp_stream_end(s, &U, "upstream went away", &out), GX_OK);
    ev = resp_events_parse(out.data);
    ne = json_array_size(ev);
    T_CHECK(ne >= 4);
    T_EQ_STR(str_at(json_array_get(ev, ne - 3), "event"),
             "response.output_item.done");
    T_EQ_STR(str_at(json_array_get(ev, ne - 2), "event"), "error");
    d = json_object_get(json_array_get(ev, ne - 2), "data");
    T_EQ_STR(str_at(d, "message"), "upstream went away");
    T_CHECK(!json_object_get(d, "error")); /* the SDK would throw at once */
    T_EQ_STR(str_at(json_array_get(ev, ne - 1), "event"), "response.failed");
    d = json_object_get(json_object_get(json_array_get(ev, ne - 1), "data"),
                        "response");
    T_EQ_STR(str_at(d, "status"), "failed");
    T_EQ_STR(str_at(json_object_get(d, "error"), "message"),
             "upstream went away");
    json_decref(ev);
    gw_resp_stream_free(s);

    /* the cap on kept text */
    x.max_bytes = 4;
    s = gw_resp_stream_new(&x);
    gx_buf_reset(&out);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"content\":\"abc\"}}]}",
                  &out),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"content\":\"def\"}}]}",
                  &out),
             GX_ETOOBIG);
    gw_resp_stream_free(s);
    gw_resp_stream_free(NULL);
    gx_buf_cleanup(&out);
}

/* reasoning_content -> a reasoning item before the message. */
/* The events a stream writes for chunks[0..n) and its end (usage U). */
static json_t *
stream_of(const struct gw_api_ctx *x, const char *const *chunks, size_t n)
{
    struct gw_resp_stream *s = gw_resp_stream_new(x);
    struct gx_buf out;
    gx_buf_init(&out, 0);
    for (size_t i = 0; s && i < n; i++)
        T_EQ_INT(feed(s, chunks[i], &out), GX_OK);
    T_CHECK(s && gw_resp_stream_end(s, &U, NULL, &out) == GX_OK);
    gx_buf_append(&out, "", 1);
    json_t *ev = resp_events_parse(out.data ? out.data : "");
    gx_buf_cleanup(&out);
    gw_resp_stream_free(s);
    return ev;
}

/* logprobs: include's one served value and top_logprobs become chat's
 * logprobs / top_logprobs; the answer's and the chunks' logprobs.content
 * entries become output_text.logprobs (each delta its own, the done
 * event, the part and the item all of them). */
static void
test_logprobs(void)
{
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"include\":["
                   "\"message.output_text.logprobs\"],\"top_logprobs\":2}"),
             PV_CHAT_OK);
    T_CHECK(json_is_true(json_object_get(chat.body, "logprobs")));
    T_EQ_INT(json_integer_value(json_object_get(chat.body, "top_logprobs")),
             2);
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"top_logprobs\":0}"),
             PV_CHAT_OK);
    T_CHECK(json_is_true(json_object_get(chat.body, "logprobs")));
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\"}"), PV_CHAT_OK);
    T_CHECK(json_object_get(chat.body, "logprobs") == NULL);
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"top_logprobs\":21}"),
             PV_CHAT_INVALID);
    T_EQ_STR(param ? param : "", "top_logprobs");
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"include\":["
                   "\"message.output_text.logprobs\",\"x\"]}"),
             PV_CHAT_INVALID);
    T_EQ_STR(param ? param : "", "include");
    /* the answer */
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\",\"include\":["
                   "\"message.output_text.logprobs\"]}"),
             PV_CHAT_OK);
    struct gw_api_ctx x = ctx();
    const char *up =
        "{\"model\":\"u\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
        "\"assistant\",\"content\":\"Hi!\"},\"finish_reason\":\"stop\","
        "\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5,"
        "\"bytes\":[72,105],\"top_logprobs\":[]},{\"token\":\"!\","
        "\"logprob\":-1.5,\"bytes\":[33],\"top_logprobs\":[]}],"
        "\"refusal\":null}}]}";
    size_t n = 0;
    char why[128];
    char *b = gw_resp_body(&x, up, strlen(up), &n, why, sizeof(why));
    json_t *o = b ? json_loads(b, 0, NULL) : NULL;
    free(b);
    const json_t *part = json_array_get(
        json_object_get(json_array_get(json_object_get(o, "output"), 0),
                        "content"),
        0);
    const json_t *lp = json_object_get(part, "logprobs");
    T_EQ_INT(json_array_size(lp), 2);
    T_EQ_STR(str_at(json_array_get((json_t *)lp, 1), "token"), "!");
    json_decref(o);
    /* the stream */
    static const char *const chunks[] = {
        "{\"model\":\"u\",\"choices\":[{\"delta\":{\"content\":\"Hi\"},"
        "\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5,"
        "\"bytes\":[72,105],\"top_logprobs\":[]}]}}]}",
        "{\"choices\":[{\"delta\":{\"content\":\"!\"},\"logprobs\":{"
        "\"content\":[{\"token\":\"!\",\"logprob\":-1.5,\"bytes\":[33],"
        "\"top_logprobs\":[]}]}}]}",
        "{\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}"};
    json_t *ev = stream_of(&x, chunks, 3);
    size_t i, deltas = 0;
    const json_t *e;
    json_array_foreach(ev, i, e) {
        const char *t = str_at((json_t *)e, "event");
        const json_t *d = json_object_get(e, "data");
        if (!strcmp(t, "response.output_text.delta")) {
            T_EQ_INT(json_array_size(json_object_get(d, "logprobs")), 1);
            deltas++;
        } else if (!strcmp(t, "response.output_text.done")) {
            T_EQ_INT(json_array_size(json_object_get(d, "logprobs")), 2);
        } else if (!strcmp(t, "response.content_part.done")) {
            T_EQ_INT(json_array_size(json_object_get(
                         json_object_get(d, "part"), "logprobs")),
                     2);
        } else if (!strcmp(t, "response.completed")) {
            const json_t *p0 = json_array_get(
                json_object_get(
                    json_array_get(json_object_get(json_object_get(d,
                                                                   "response"),
                                                   "output"),
                                   0),
                    "content"),
                0);
            T_EQ_INT(json_array_size(json_object_get(p0, "logprobs")), 2);
        }
    }
    T_EQ_INT(deltas, 2);
    json_decref(ev);
}

static void
test_reasoning(void)
{
    T_EQ_INT(parse("{\"model\":\"m\",\"input\":\"x\"}"), PV_CHAT_OK);
    struct gw_api_ctx x = ctx();
    const char *up = "{\"choices\":[{\"message\":{\"content\":\"Yes\","
                     "\"reasoning_content\":\"Think.\"},\"finish_reason\":"
                     "\"stop\"}]}";
    size_t n = 0;
    char why[128];
    char *b = gw_resp_body(&x, up, strlen(up), &n, why, sizeof(why));
    json_t *o = b ? json_loads(b, 0, NULL) : NULL;
    json_t *out = json_object_get(o, "output");
    T_EQ_INT(json_array_size(out), 2);
    json_t *rs = json_array_get(out, 0);
    T_EQ_STR(str_at(rs, "type"), "reasoning");
    T_CHECK(json_is_array(json_object_get(rs, "summary")));
    json_t *rp = json_array_get(json_object_get(rs, "content"), 0);
    T_EQ_STR(str_at(rp, "type"), "reasoning_text");
    T_EQ_STR(str_at(rp, "text"), "Think.");
    T_EQ_STR(str_at(json_array_get(out, 1), "type"), "message");
    json_decref(o);
    free(b);

    struct gw_resp_stream *s = gw_resp_stream_new(&x);
    struct gx_buf buf;
    gx_buf_init(&buf, 0);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"reasoning_content\":"
                     "\"Thi\"}}]}",
                  &buf),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"reasoning_content\":"
                     "\"nk.\"}}]}",
                  &buf),
             GX_OK);
    T_EQ_INT(feed(s, "{\"choices\":[{\"delta\":{\"content\":\"Yes\"},"
                     "\"finish_reason\":\"stop\"}]}",
                  &buf),
             GX_OK);
    T_EQ_INT(gw_resp_stream_end(s, &U, NULL, &buf), GX_OK);
    json_t *ev = resp_events_parse(buf.data);
    static const char *const want[] = {
        "response.created",           "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done",  "response.content_part.done",
        "response.output_item.done",  "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.done",  "response.content_part.done",
        "response.output_item.done",  "response.completed"};
    size_t nw = sizeof(want) / sizeof(want[0]);
    T_EQ_INT(json_array_size(ev), nw);
    T_EQ_INT(resp_events_bad(ev), -1);
    for (size_t i = 0; i < nw && i < json_array_size(ev); i++)
        T_EQ_STR(str_at(json_array_get(ev, i), "event"), want[i]);
    json_t *d = json_object_get(json_array_get(ev, 2), "data");
    T_EQ_STR(str_at(json_object_get(d, "item"), "type"), "reasoning");
    d = json_object_get(json_array_get(ev, 3), "data");
    T_EQ_STR(str_at(json_object_get(d, "part"), "type"), "reasoning_text");
    d = json_object_get(json_array_get(ev, 6), "data");
    T_EQ_STR(str_at(d, "text"), "Think.");
    d = json_object_get(json_object_get(json_array_get(ev, nw - 1), "data"),
                        "response");
    out = json_object_get(d, "output");
    T_EQ_STR(str_at(json_array_get(json_object_get(json_array_get(out, 0),
                                                   "content"),
                                   0),
                    "text"),
             "Think.");
    T_EQ_STR(str_at(json_array_get(json_object_get(json_array_get(out, 1),
                                                   "content"),
                                   0),
                    "text"),
             "Yes");
    json_decref(ev);
    gx_buf_cleanup(&buf);
    gw_resp_stream_free(s);
}

static enum pv_chat_err
aux(int completions, const char *body)
{
    pv_chat_cleanup(&chat);
    json_t *e = NULL;
    enum pv_chat_err r =
        completions
            ? gw_completions_parse(&chat, body, strlen(body), &e, msg,
                                   sizeof(msg), &param)
            : gw_embeddings_parse(&chat, body, strlen(body), &e, msg,
                                  sizeof(msg), &param);
    T_CHECK(e == NULL);
    return r;
}

static void
test_embeddings_completions(void)
{
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":\"abcdefgh\","
                    "\"encoding_format\":\"base64\",\"dimensions\":8}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.api, PV_API_EMBEDDINGS);
    T_EQ_INT(chat.completion_cap, 0);
    T_EQ_INT(chat.est_prompt_tokens, 8 / 4 + 1);
    T_EQ_INT(chat.stream, 0);
    /* passed on as sent: the client's bytes, no tree until one is asked
     * for (the model's span is where the openai kind splices) */
    T_CHECK(chat.body == NULL && chat.text != NULL);
    T_CHECK(!strncmp(chat.text + chat.model_at, "\"e\"", chat.model_len));
    T_EQ_STR(str_at(pv_chat_body(&chat), "encoding_format"), "base64");
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[\"ab\",\"cd\"]}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.est_prompt_tokens, 4 / 4 + 2);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[[1,2,3],[4]]}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.est_prompt_tokens, 4 + 2);
    T_CHECK(chat.max_prompt_tokens >= 4);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[1,2,3]}"), PV_CHAT_OK);
    T_EQ_INT(chat.est_prompt_tokens, 3 + 1);
    T_EQ_INT(aux(0, "{\"model\":\"e\"}"), PV_CHAT_INVALID);
    T_EQ_STR(param, "input");
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":\"\"}"), PV_CHAT_INVALID);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[]}"), PV_CHAT_INVALID);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[{\"a\":1}]}"),
             PV_CHAT_INVALID);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":[[1,\"x\"]]}"),
             PV_CHAT_INVALID);
    T_EQ_INT(aux(0, "{\"model\":\"e\",\"input\":\"x\",\"stream\":true}"),
             PV_CHAT_INVALID);
    T_EQ_STR(param, "stream");
    T_EQ_INT(aux(0, "{\"input\":\"x\"}"), PV_CHAT_INVALID);
    T_EQ_STR(param, "model");
    T_EQ_INT(aux(0, "nope"), PV_CHAT_BAD_JSON);

    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"Once\",\"max_tokens\":7,"
                    "\"n\":2,\"stream\":true,\"stream_options\":{"
                    "\"include_usage\":true},\"suffix\":\"x\"}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.api, PV_API_COMPLETIONS);
    T_EQ_INT(chat.stream, 1);
    T_EQ_INT(chat.include_usage, 1);
    T_EQ_INT(chat.completion_cap, 14);
    T_EQ_STR(str_at(pv_chat_body(&chat), "suffix"), "x");
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"Once\",\"best_of\":3}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, 3 * PV_DEFAULT_COMPLETION_TOKENS);
    /* each prompt gets its own n choices: the reservation counts them */
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":[\"a\",[1,2],\"b\"],"
                    "\"n\":2,\"max_tokens\":5}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, 3 * 2 * 5);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":[1,2,3],"
                    "\"max_tokens\":5}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, 5); /* one prompt of token ids */
    /* max_tokens 0 (echo: scoring the prompt) is the target's to judge;
     * below 0 never is.  It generates nothing, so nothing is reserved
     * for completion (an absent cap still reserves the default) */
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"x\",\"max_tokens\":0,"
                    "\"echo\":true}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, 0);
    T_EQ_INT(chat.max_tokens, 0);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":[\"x\",\"y\"],"
                    "\"max_tokens\":0,\"echo\":true,\"n\":3}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, 0);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"x\",\"echo\":true,"
                    "\"max_tokens\":null}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, PV_DEFAULT_COMPLETION_TOKENS);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"x\",\"echo\":true}"),
             PV_CHAT_OK);
    T_EQ_INT(chat.completion_cap, PV_DEFAULT_COMPLETION_TOKENS);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"x\",\"max_tokens\":-1}"),
             PV_CHAT_INVALID);
    T_EQ_STR(param, "max_tokens");
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"prompt\":\"x\",\"stream\":1}"),
             PV_CHAT_INVALID);
    T_EQ_INT(aux(1, "{\"model\":\"c\",\"input\":\"x\"}"), PV_CHAT_INVALID);
    T_EQ_STR(param, "prompt");
    pv_chat_cleanup(&chat);
}

/* The plan keeps only the targets whose kind serves the API, in order. */
static void
test_plan_keep_kinds(void)
{
    static const char text[] =
        "{\"listen\":\"127.0.0.1:0\",\"providers\":{"
        "\"a\":{\"kind\":\"anthropic\",\"base_url\":\"http://x\","
        "\"api_key\":\"k\",\"models\":[\"claude-sonnet-4.5\"]},"
        "\"o1\":{\"kind\":\"openai\",\"base_url\":\"http://x\","
        "\"models\":[\"gpt-4.1\"]},"
        "\"g\":{\"kind\":\"gemini\",\"base_url\":\"http://x\","
        "\"api_key\":\"k\",\"models\":[\"gemini-2.5-flash\"]},"
        "\"o2\":{\"kind\":\"openai\",\"base_url\":\"http://y\","
        "\"models\":[\"gpt-4.1\"]}},"
        "\"routes\":{\"mix\":{\"policy\":\"priority\",\"targets\":["
        "\"claude-sonnet-4.5@a\",\"gpt-4.1@o2\",\"gemini-2.5-flash@g\","
        "\"gpt-4.1@o1\"]},\"native\":{\"policy\":\"priority\","
        "\"targets\":[\"claude-sonnet-4.5@a\",\"gemini-2.5-flash@g\"]}}}";
    struct cfg *c = NULL;
    char err[256];
    T_EQ_INT(cfg_load_string(text, "t.json", &c, err, sizeof(err)), GX_OK);
    if (!c)
        return;
    struct rt_router *rt = rt_router_new(c);
    struct rt_plan plan;
    T_EQ_INT(rt_plan_route(rt, "mix", 10, 10, &plan), 4);
    T_EQ_INT(rt_plan_keep_kinds(&plan, c, 1u << CFG_KIND_OPENAI), 2);
    T_EQ_INT(plan.n, 2);
    T_EQ_STR(c->providers[plan.targets[0].provider].name, "o2");
    T_EQ_STR(c->providers[plan.targets[1].provider].name, "o1");
    T_EQ_INT(rt_plan_route(rt, "native", 10, 10, &plan), 2);
    T_EQ_INT(rt_plan_keep_kinds(&plan, c, 1u << CFG_KIND_OPENAI), 2);
    T_EQ_INT(plan.n + plan.n_skipped, 0);
    T_EQ_INT(rt_plan_route(rt, "native", 10, 10, &plan), 2);
    T_EQ_INT(rt_plan_keep_kinds(&plan, c, GW_KINDS_ALL), 0);
    T_EQ_INT(plan.n, 2);
    rt_router_free(rt);
    cfg_free(c);
}

int
main(void)
{
    T_RUN(test_parse_string_input);
    T_RUN(test_parse_items);
    T_RUN(test_parse_options);
    T_RUN(test_parse_refusals);
    T_RUN(test_body_writer);
    T_RUN(test_stream_writer);
    T_RUN(test_logprobs);
    T_RUN(test_reasoning);
    T_RUN(test_embeddings_completions);
    T_RUN(test_plan_keep_kinds);
    pv_chat_cleanup(&chat);
    json_decref(echo);
    return T_END();
}
