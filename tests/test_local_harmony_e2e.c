/*
 * End to end through the real llmux binary: a gpt-oss model on the local
 * engine (random weights written here: gpt-oss's layout with MXFP4
 * experts, a template with harmony's markers, and the markers as
 * user-defined tokens, so that /v1/completions, which does not parse
 * control tokens in its prompt, can be given the chat's prompt as text;
 * o200k_harmony has them as control tokens, which test_model holds to
 * the same text).
 *
 * - The chat prompt is harmony's (system message with today's date and
 *   the reasoning level, the system text as the developer's
 *   instructions): its token count equals /v1/completions' for the text
 *   written here from the format; reasoning_effort low / high name the
 *   level, none opens the final channel in the prompt, a bad value is
 *   refused.
 * - The answer: with logit_bias pushing the markers, the chat answer's
 *   reasoning_content and content are the raw text's channels (split here
 *   from the format's rule, not with providers/think.c: bodies after
 *   "<|channel|>analysis...<|message|>" the reasoning, other bodies the
 *   content, markers in neither), and the stream's deltas the same;
 *   "<|return|>" ends the answer (finish_reason stop) and "<|end|>" does
 *   not.
 * - Tools in harmony's own format: the functions as its TypeScript
 *   namespace in the developer message, the prompt's "<|channel|>" and a
 *   call as the commentary message to=functions.NAME (the prompt's token
 *   count against the text written here); tool_choice required, named and
 *   auto over many seeds (the random model calls only through the
 *   grammar): each call names a tool and its arguments parse and keep the
 *   schema's enum and maxLength; auto's text answers carry no marker (nor
 *   its tokens in logprobs), even cut inside it; the stream gives the
 *   same text or call in pieces; a conversation with a call and its result renders as the template's
 *   messages.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

static struct e2e_proc gw;
static char base[128];

static const char *tmpl =
    "{#- harmony #}{{- \"<|start|>system<|message|>\" }}{%- if "
    "add_generation_prompt -%}<|start|>assistant{%- endif -%}{{- "
    "\"<|start|>assistant<|channel|>final<|message|>\" + message.content + "
    "\"<|end|>\" }}";
/* the vocabulary's last seven ids, in this order */
static const char *const marks[] = {"<|start|>",    "<|channel|>",
                                    "<|message|>",  "<|end|>",
                                    "<|constrain|>", "<|return|>",
                                    "<|call|>",     NULL};
enum { NV = 600, ID_START = NV - 7, ID_CHANNEL, ID_MESSAGE, ID_END,
       ID_CONSTRAIN, ID_RETURN, ID_CALL };

static int
start(void)
{
    char *dir = e2e_temp_dir();
    char model[512], cfg[2048];
    snprintf(model, sizeof(model), "%s/oss.gguf", dir);
    struct gguf_w_llama lp = {0};
    lp.n_vocab = NV;
    lp.n_embd = 64;
    lp.n_layer = 2;
    lp.n_head = 4;
    lp.n_head_kv = 2;
    lp.head_dim = 16;
    lp.n_ff = 64;
    lp.n_ctx = 2048;
    lp.type = LE_TYPE_Q8_0;
    lp.exp_type = LE_TYPE_MXFP4;
    lp.exp_typed = 1;
    lp.n_expert = 4;
    lp.n_expert_used = 2;
    lp.n_swa = 8;
    lp.seed = 41;
    lp.chat_template = tmpl;
    lp.user_tokens = marks;
    lp.arch = "gpt-oss";
    if (gguf_w_llama_write(&lp, model) != 0)
        return -1;
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\n"
             "  \"oss\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"oss\": {}}}}}\n",
             dir, model);
    free(dir);
    char *path = e2e_write_temp("harmony.json", cfg);
    int rc = e2e_start_llmux(&gw, path, 30000);
    free(path);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", gw.port);
    return rc;
}

static json_t *
post(const char *path, const char *body, long *status, char **raw)
{
    return e2e_post(base, path, body, status, raw);
}

static void
today(char *d, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(d, n, "%Y-%m-%d", &tm);
}

/* harmony's prompt for a system text and a user turn, as a JSON string
 * body (escaped newlines) */
static void
prompt_json(char *out, size_t n, const char *date, const char *level,
            const char *sys, const char *user, const char *tail)
{
    char dev[512] = "";
    if (sys)
        snprintf(dev, sizeof(dev),
                 "<|start|>developer<|message|># Instructions\\n\\n%s\\n\\n"
                 "<|end|>",
                 sys);
    snprintf(out, n,
             "<|start|>system<|message|>You are ChatGPT, a large language "
             "model trained by OpenAI.\\nKnowledge cutoff: 2024-06\\n"
             "Current date: %s\\n\\nReasoning: %s\\n\\n# Valid channels: "
             "analysis, commentary, final. Channel must be included for "
             "every message.<|end|>%s<|start|>user<|message|>%s<|end|>"
             "<|start|>assistant%s",
             date, level, dev, user, tail);
}

static json_int_t
usage_of(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(json_object_get(o, "usage"), k));
}

/* The prompt's token count, chat against /v1/completions of the text
 * written here; same date before and after, or the check is skipped
 * (a midnight in between). */
static void
check_prompt(const char *effort, const char *level, const char *tail)
{
    char d0[16], d1[16], p[2048], body[4096], eff[64] = "";
    if (effort)
        snprintf(eff, sizeof(eff), ",\"reasoning_effort\":\"%s\"", effort);
    today(d0, sizeof(d0));
    snprintf(body, sizeof(body),
             "{\"model\":\"oss\",\"max_tokens\":1%s,\"messages\":["
             "{\"role\":\"system\",\"content\":\"Be brief.\"},"
             "{\"role\":\"user\",\"content\":\"Hi there\"}]}",
             eff);
    long st;
    json_t *chat = post("/chat/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    prompt_json(p, sizeof(p), d0, level, "Be brief.", "Hi there", tail);
    snprintf(body, sizeof(body),
             "{\"model\":\"oss\",\"max_tokens\":1,\"prompt\":\"%s\"}", p);
    json_t *raw = post("/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    today(d1, sizeof(d1));
    if (!strcmp(d0, d1)) {
        json_int_t a = usage_of(chat, "prompt_tokens"),
                   b = usage_of(raw, "prompt_tokens");
        if (a != b)
            fprintf(stderr, "effort %s: chat %lld prompt tokens, text %lld\n",
                    effort ? effort : "-", (long long)a, (long long)b);
        T_CHECK(a > 50);
        T_EQ_INT(a, b);
    }
    json_decref(chat);
    json_decref(raw);
}

static void
test_prompt(void)
{
    check_prompt(NULL, "medium", "");
    check_prompt("low", "low", "");
    check_prompt("high", "high", "");
    /* reasoning off: the final channel opened in the prompt */
    check_prompt("none", "medium", "<|channel|>final<|message|>");
    check_prompt("minimal", "medium", "<|channel|>final<|message|>");
    long st;
    json_t *o = post("/chat/completions",
                     "{\"model\":\"oss\",\"max_tokens\":1,"
                     "\"reasoning_effort\":\"huge\",\"messages\":[{\"role\":"
                     "\"user\",\"content\":\"Hi\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 400);
    char *d = o ? json_dumps(o, 0) : NULL;
    T_CHECK(d && strstr(d, "reasoning_effort") != NULL);
    free(d);
    json_decref(o);
}

/* harmony's rule, written from the format: messages of a header up to
 * "<|message|>" (within 64 bytes of its "<"), a body up to "<|end|>"; a
 * body is reasoning when its header names "<|channel|>analysis", else
 * content; where a header would be, text that does not open with "<" is
 * a content body, and 64 bytes without "<|message|>" are content too; a
 * header cut by the end is dropped when it opens with "<|". */
static void
ref_split(const char *t, size_t n, char *r, size_t *rl, char *c, size_t *cl)
{
    size_t i = 0;
    *rl = *cl = 0;
    while (i < n) {
        int analysis = 0;
        if (t[i] == '<') {
            const char *m = NULL;
            for (size_t k = i; k + 11 <= n && k + 11 <= i + 64; k++)
                if (!memcmp(t + k, "<|message|>", 11)) {
                    m = t + k;
                    break;
                }
            if (m) {
                for (const char *h = t + i; h + 19 <= m; h++)
                    analysis |= !memcmp(h, "<|channel|>analysis", 19);
                i = (size_t)(m - t) + 11;
            } else if (n - i < 64) { /* cut by the end */
                if (n - i < 2 || memcmp(t + i, "<|", 2)) {
                    memcpy(c + *cl, t + i, n - i);
                    *cl += n - i;
                }
                return;
            } else { /* not a header */
                memcpy(c + *cl, t + i, 64);
                *cl += 64;
                i += 64;
            }
        }
        size_t e = i;
        while (e < n && (n - e < 7 || memcmp(t + e, "<|end|>", 7)))
            e++;
        char *to = analysis ? r : c;
        size_t *tl = analysis ? rl : cl;
        memcpy(to + *tl, t + i, e - i);
        *tl += e - i;
        i = e < n ? e + 7 : n;
    }
}

static int
eq(const json_t *s, const char *want, size_t wl)
{
    if (!s || json_is_null(s))
        return wl == 0;
    return json_string_length(s) == wl &&
           (!wl || !memcmp(json_string_value(s), want, wl));
}

/* One seed: the markers pushed (and "analysis"'s first letters, so that
 * some headers name it), the chat answer and its stream against the raw
 * text of the same prompt, seed and bias. */
static int
check_seed(int seed, int bias_return)
{
    char bias[256], common[512], p[2048], body[4096], d[16];
    snprintf(bias, sizeof(bias),
             "{\"%d\":4,\"%d\":4,\"%d\":3,\"%d\":%d,\"%d\":-100}",
             ID_CHANNEL, ID_MESSAGE, ID_END, ID_RETURN, bias_return ? 3 : -100,
             ID_CALL);
    snprintf(common, sizeof(common),
             "\"model\":\"oss\",\"max_tokens\":48,\"temperature\":1,"
             "\"seed\":%d,\"logit_bias\":%s",
             seed, bias);
    today(d, sizeof(d));
    prompt_json(p, sizeof(p), d, "medium", NULL, "Q", "");
    snprintf(body, sizeof(body), "{%s,\"prompt\":\"%s\"}", common, p);
    long st;
    json_t *raw = post("/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *ch = json_array_get(json_object_get(raw, "choices"), 0);
    const char *t = json_string_value(json_object_get(ch, "text"));
    size_t tn = json_string_length(json_object_get(ch, "text"));
    char r[4096], c[4096];
    size_t rl, cl;
    ref_split(t ? t : "", t ? tn : 0, r, &rl, c, &cl);
    snprintf(body, sizeof(body),
             "{%s,\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
             common);
    json_t *o = post("/chat/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    const json_t *msg = json_object_get(c0, "message");
    int ok = eq(json_object_get(msg, "reasoning_content"), r, rl) &&
             eq(json_object_get(msg, "content"), c, cl);
    if (!ok)
        fprintf(stderr, "seed %d: raw '%.*s'\n reasoning '%s'\n content '%s'\n",
                seed, (int)tn, t ? t : "",
                json_string_value(json_object_get(msg, "reasoning_content")),
                json_string_value(json_object_get(msg, "content")));
    T_CHECK(ok);
    /* the same finish as the raw text's: "<|return|>" stops */
    T_EQ_STR(json_string_value(json_object_get(c0, "finish_reason")),
             json_string_value(json_object_get(ch, "finish_reason")));
    int stopped = !strcmp(json_string_value(json_object_get(ch,
                                                            "finish_reason"))
                              ? json_string_value(
                                    json_object_get(ch, "finish_reason"))
                              : "",
                          "stop");
    /* the stream's deltas: the same parts */
    snprintf(body, sizeof(body),
             "{%s,\"stream\":true,\"messages\":[{\"role\":\"user\","
             "\"content\":\"Q\"}]}",
             common);
    char *sse = NULL;
    post("/chat/completions", body, &st, &sse);
    T_EQ_INT(st, 200);
    json_t *evs = sse ? e2e_sse_objects(sse) : NULL;
    char rs[4096], cs[4096];
    size_t rn = 0, cn = 0, i;
    json_t *ev;
    json_array_foreach(evs, i, ev) {
        const json_t *dl = json_object_get(
            json_array_get(json_object_get(ev, "choices"), 0), "delta");
        const json_t *a = json_object_get(dl, "reasoning_content"),
                     *b = json_object_get(dl, "content");
        if (a && json_is_string(a) && rn + json_string_length(a) < 4096) {
            memcpy(rs + rn, json_string_value(a), json_string_length(a));
            rn += json_string_length(a);
        }
        if (b && json_is_string(b) && cn + json_string_length(b) < 4096) {
            memcpy(cs + cn, json_string_value(b), json_string_length(b));
            cn += json_string_length(b);
        }
    }
    T_CHECK(rn == rl && !memcmp(rs, r, rl));
    T_CHECK(cn == cl && !memcmp(cs, c, cl));
    json_decref(evs);
    free(sse);
    json_decref(o);
    json_decref(raw);
    return stopped;
}

static void
test_channels(void)
{
    int stops = 0;
    for (int s = 1; s <= 12; s++)
        stops += check_seed(s, 1);
    /* <|return|> pushed: some answers end there; never pushed, none do
     * before max_tokens (<|end|> alone does not end one) */
    fprintf(stderr, "  %d of 12 answers ended at <|return|>\n", stops);
    T_CHECK(stops > 0);
    int early = 0;
    for (int s = 1; s <= 6; s++)
        early += check_seed(100 + s, 0);
    T_EQ_INT(early, 0);
}

#define TOOLS                                                              \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"         \
    "\"get_weather\",\"description\":\"Weather of a city\","               \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"       \
    "{\"type\":\"string\",\"maxLength\":6,\"description\":\"The city\"},"  \
    "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"],"               \
    "\"default\":\"c\"}},\"required\":[\"city\"],"                        \
    "\"additionalProperties\":false}}},{\"type\":\"function\","             \
    "\"function\":{\"name\":\"now\",\"description\":\"The time\"}}]"
/* the namespace gpt-oss's template writes for TOOLS */
#define NAMESPACE                                                          \
    "## functions\\n\\nnamespace functions {\\n\\n// Weather of a city\\n"  \
    "type get_weather = (_: {\\n// The city\\ncity: string,\\nunit?: "      \
    "\\\"c\\\" | \\\"f\\\", // default: c,\\n}) => any;\\n\\n// The "     \
    "time\\ntype now = () => any;\\n\\n} // namespace functions"

/* The tools' prompt: harmony's system line, the developer's tools and
 * the opened channel, token for token with /v1/completions of the text;
 * and a conversation with a call and its result. */
static void
test_tools_prompt(void)
{
    char d0[16], d1[16], body[8192], p[4096];
    long st;
    for (int conv = 0; conv < 2; conv++) {
        today(d0, sizeof(d0));
        snprintf(body, sizeof(body),
                 "{\"model\":\"oss\",\"max_tokens\":1,\"tool_choice\":"
                 "\"required\",%s,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"Hi\"}%s]}",
                 TOOLS,
                 conv ? ",{\"role\":\"assistant\",\"content\":null,"
                        "\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                        "\"function\",\"function\":{\"name\":"
                        "\"get_weather\",\"arguments\":"
                        "\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
                        "{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                        "\"content\":\"-3 C\"}"
                      : "");
        json_t *chat = post("/chat/completions", body, &st, NULL);
        T_EQ_INT(st, 200);
        snprintf(p, sizeof(p),
                 "<|start|>system<|message|>You are ChatGPT, a large "
                 "language model trained by OpenAI.\\nKnowledge cutoff: "
                 "2024-06\\nCurrent date: %s\\n\\nReasoning: medium\\n\\n"
                 "# Valid channels: analysis, commentary, final. Channel "
                 "must be included for every message.\\nCalls to these "
                 "tools must go to the commentary channel: 'functions'."
                 "<|end|><|start|>developer<|message|># Tools\\n\\n"
                 NAMESPACE "<|end|><|start|>user<|message|>Hi<|end|>%s"
                 "<|start|>assistant<|channel|>",
                 d0,
                 conv ? "<|start|>assistant to=functions.get_weather"
                        "<|channel|>commentary json<|message|>{\\\"city\\\":"
                        "\\\"Oslo\\\"}<|call|><|start|>functions.get_weather"
                        " to=assistant<|channel|>commentary<|message|>"
                        "\\\"-3 C\\\"<|end|>"
                      : "");
        snprintf(body, sizeof(body),
                 "{\"model\":\"oss\",\"max_tokens\":1,\"prompt\":\"%s\"}",
                 p);
        json_t *raw = post("/completions", body, &st, NULL);
        T_EQ_INT(st, 200);
        today(d1, sizeof(d1));
        /* "<|call|>" ends an answer, so the vocabulary holds it as a
         * control token, which /v1/completions reads as text: the tokens
         * that text takes, less the one it is in the chat's prompt */
        json_int_t call_extra = 0;
        if (conv) {
            json_t *x1 = post("/completions",
                              "{\"model\":\"oss\",\"max_tokens\":1,"
                              "\"prompt\":\"}<|call|>\"}",
                              &st, NULL),
                   *x0 = post("/completions",
                              "{\"model\":\"oss\",\"max_tokens\":1,"
                              "\"prompt\":\"}\"}",
                              &st, NULL);
            call_extra = usage_of(x1, "prompt_tokens") -
                         usage_of(x0, "prompt_tokens") - 1;
            T_CHECK(call_extra > 0);
            json_decref(x1);
            json_decref(x0);
        }
        if (!strcmp(d0, d1)) {
            json_int_t a = usage_of(chat, "prompt_tokens"),
                       b = usage_of(raw, "prompt_tokens") - call_extra;
            if (a != b)
                fprintf(stderr, "tools conv %d: chat %lld, text %lld\n",
                        conv, (long long)a, (long long)b);
            T_EQ_INT(a, b);
        }
        json_decref(chat);
        json_decref(raw);
    }
    /* a result with no call before it: a 400 naming the message (the
     * template refuses it too) */
    json_t *o = post("/chat/completions",
                     "{\"model\":\"oss\",\"max_tokens\":1,\"messages\":["
                     "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":"
                     "\"tool\",\"tool_call_id\":\"x\",\"content\":\"1\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 400);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(o, "error"),
                                               "param")),
             "messages[1]");
    json_decref(o);
}

/* tool_choice mode over seeds: the calls and their arguments */
static void
test_tool_calls(void)
{
    static const char *const choice[] = {
        "\"required\"",
        "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}",
        "\"auto\""};
    for (int c = 0; c < 3; c++) {
        int calls = 0, texts = 0, complete = 0;
        for (int seed = 1; seed <= 12; seed++) {
            char body[4096];
            long st;
            /* auto: logprobs too, and some answers cut early (inside
             * the final channel's marker, which is never content) */
            snprintf(body, sizeof(body),
                     "{\"model\":\"oss\",\"max_tokens\":%d,\"seed\":%d,"
                     "\"temperature\":1,\"tool_choice\":%s,%s%s,"
                     "\"messages\":[{\"role\":\"user\",\"content\":"
                     "\"Weather?\"}]}",
                     c == 2 && seed % 3 == 0 ? 6 + seed / 3 : 300, seed,
                     choice[c], TOOLS, c == 2 ? ",\"logprobs\":true" : "");
            json_t *o = post("/chat/completions", body, &st, NULL);
            T_EQ_INT(st, 200);
            const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
            const json_t *msg = json_object_get(ch, "message");
            const char *fin =
                json_string_value(json_object_get(ch, "finish_reason"));
            /* the stream: the same text, or the same call in pieces */
            body[strlen(body) - 1] = '\0';
            strcat(body, ",\"stream\":true}");
            char *sse = NULL;
            post("/chat/completions", body, &st, &sse);
            json_t *evs = sse ? e2e_sse_objects(sse) : NULL;
            char scont[4096] = "", sname[64] = "", sargs[4096] = "";
            size_t ei;
            json_t *ev;
            json_array_foreach(evs, ei, ev) {
                const json_t *dl = json_object_get(
                    json_array_get(json_object_get(ev, "choices"), 0),
                    "delta");
                const char *t =
                    json_string_value(json_object_get(dl, "content"));
                const json_t *f0 = json_object_get(
                    json_array_get(json_object_get(dl, "tool_calls"), 0),
                    "function");
                const char *nm =
                    json_string_value(json_object_get(f0, "name"));
                const char *ar =
                    json_string_value(json_object_get(f0, "arguments"));
                if (t && strlen(scont) + strlen(t) < sizeof(scont))
                    strcat(scont, t);
                if (nm)
                    snprintf(sname, sizeof(sname), "%s", nm);
                if (ar && strlen(sargs) + strlen(ar) < sizeof(sargs))
                    strcat(sargs, ar);
            }
            const json_t *tc0 = json_object_get(
                json_array_get(json_object_get(msg, "tool_calls"), 0),
                "function");
            if (tc0) {
                T_EQ_STR(sname, json_string_value(json_object_get(tc0, "name")));
                T_EQ_STR(sargs,
                         json_string_value(json_object_get(tc0, "arguments")));
            } else {
                T_EQ_STR(scont,
                         json_string_value(json_object_get(msg, "content")));
            }
            json_decref(evs);
            free(sse);
            const json_t *tc = json_object_get(msg, "tool_calls");
            if (json_array_size(tc)) {
                calls++;
                const json_t *fn =
                    json_object_get(json_array_get(tc, 0), "function");
                const char *name =
                    json_string_value(json_object_get(fn, "name"));
                const char *args =
                    json_string_value(json_object_get(fn, "arguments"));
                T_CHECK(name && (!strcmp(name, "get_weather") ||
                                 (c != 1 && !strcmp(name, "now"))));
                json_t *a = args ? json_loads(args, 0, NULL) : NULL;
                int whole = fin && !strcmp(fin, "tool_calls");
                complete += whole;
                /* cut by max_tokens: a prefix of the arguments */
                T_CHECK(!whole || json_is_object(a));
                if (whole && name && !strcmp(name, "get_weather") && a) {
                    const char *city =
                        json_string_value(json_object_get(a, "city"));
                    const char *unit =
                        json_string_value(json_object_get(a, "unit"));
                    T_CHECK(city && strlen(city) <= 6 * 4);
                    T_CHECK(!json_object_get(a, "unit") ||
                            (unit && (!strcmp(unit, "c") ||
                                      !strcmp(unit, "f"))));
                }
                T_CHECK(whole || (fin && !strcmp(fin, "length")));
                json_decref(a);
            } else {
                texts++;
                const char *t = json_string_value(json_object_get(msg, "content"));
                T_CHECK(c == 2);
                /* the free text may hold markers; its start is not
                 * the final channel's */
                T_CHECK(t && strncmp(t, "final", 5) && strncmp(t, "<|", 2));
                /* the content's tokens: its text (up to a U+FFFD, which
                 * a byte token repaired alone shows differently) */
                char lt[4096] = "";
                size_t li;
                const json_t *le;
                json_array_foreach(json_object_get(json_object_get(ch,
                                                                   "logprobs"),
                                                   "content"),
                                   li, le) {
                    const char *tk =
                        json_string_value(json_object_get(le, "token"));
                    if (tk && strlen(lt) + strlen(tk) < sizeof(lt))
                        strcat(lt, tk);
                }
                const char *bad = t ? strstr(t, "\xef\xbf\xbd") : NULL;
                size_t k = t ? (bad ? (size_t)(bad - t) : strlen(t)) : 0;
                T_CHECK(t && strlen(lt) >= k && !strncmp(lt, t, k));
                if (t && !bad)
                    T_EQ_STR(lt, t);
            }
            json_decref(o);
        }
        fprintf(stderr, "  tool_choice %s: %d calls (%d complete), %d texts\n",
                choice[c], calls, complete, texts);
        if (c < 2) {
            T_EQ_INT(calls, 12);
            T_CHECK(complete > 0);
        }
    }
}

int
main(void)
{
    if (start() != 0) {
        fprintf(stderr, "could not start llmux\n");
        return 1;
    }
    T_RUN(test_prompt);
    T_RUN(test_channels);
    T_RUN(test_tools_prompt);
    T_RUN(test_tool_calls);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    return T_END();
}
