/*
 * End to end: the local kind serving the legacy POST /v1/completions with
 * the real stories260K model through the real binary: a non-stream
 * text_completion with exact usage (and greedy determinism), a stream of
 * text_completion chunks ending data: [DONE] whose text equals the
 * non-stream answer, the ledger row (api 'completions', the same token
 * counts), and the refusals of what the engine does not implement.
 * prompt in every shape OpenAI takes (token ids, several strings, several
 * token arrays, with n, streamed or not), checked against the
 * single-prompt answers.  logit_bias: banned tokens never come back,
 * a forced one fills the answer, bad keys and values are 400s.  echo:
 * the prompt's text and tokens first (their figures the model's), as
 * text, token ids, several prompts and n, streamed or not; with n > 1
 * the prompt computed once (the prefix-cache counter) and every choice
 * the same figures, also when a choice's text comes before its prompt's
 * figures (held back, still streamed after its echo); echo with
 * max_tokens 0 scores the prompt alone.
 * POST /v1/embeddings on the same model: float and base64 answers decode
 * to the same unit-norm vector of n_embd floats, two calls give the same
 * vector and another input a different one, exact prompt_tokens (equal
 * to the raw completion prompt's count of the same text), ledger rows of
 * api 'embeddings', and refusals (dimensions, token ids,
 * encoding_format).  GET /v1/usage?group_by=api: one group per API,
 * its requests the ledger's count.
 */
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "../local_engine/local_engine.h"
#include "harness.h"
#include "lib/e2e.h"

static struct e2e_proc gw;
static char base[128], db[1024];

static int
start(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 2}}}\n",
             dir, model);
    snprintf(db, sizeof(db), "%s/ledger.db", dir);
    free(dir);
    char *path = e2e_write_temp("local.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", gw.port);
    return rc;
}

static json_t *
post(const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", base, path);
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 60000, &r) == 0) {
        *status = r.status;
        o = json_loads(r.body, 0, NULL);
    }
    e2e_resp_free(&r);
    return o;
}

static char *nonstream_text;

static void
test_completion(void)
{
    long st;
    const char *body = "{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":16,\"prompt\":\"Once upon a time\"}";
    json_t *a = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(json_string_value(json_object_get(a, "object")),
             "text_completion");
    const json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    const char *text = json_string_value(json_object_get(ch, "text"));
    T_CHECK(text && strlen(text) > 0);
    T_CHECK(json_is_null(json_object_get(ch, "logprobs")));
    T_CHECK(json_is_string(json_object_get(ch, "finish_reason")));
    const json_t *u = json_object_get(a, "usage");
    /* "Once upon a time": BOS + 4 pieces or more, raw (no template) */
    long long pt = json_integer_value(json_object_get(u, "prompt_tokens"));
    long long ct = json_integer_value(json_object_get(u, "completion_tokens"));
    T_CHECK(pt >= 4 && pt < 16);
    T_CHECK(ct >= 1 && ct <= 16);
    json_t *b = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(text, json_string_value(json_object_get(
                       json_array_get(json_object_get(b, "choices"), 0),
                       "text")));
    free(nonstream_text);
    nonstream_text = text ? strdup(text) : NULL;
    /* the ledger: two rows of api 'completions' with these counts */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE api='completions' AND "
             "prompt_tokens=%lld AND completion_tokens=%lld AND "
             "cost_pusd=0",
             pt, ct);
    T_EQ_INT(e2e_db_int(db, sql), 2);
    json_decref(a);
    json_decref(b);
}

/* A streamed completion: text[i] the concatenated text of index i,
 * finish[i] how many chunks gave it a finish_reason, pt / ct the usage
 * chunk's counts (-1 if none), chunks and usages counted. */
#define MAX_IDX 8
struct sse_choices {
    char text[MAX_IDX][1024];
    int finish[MAX_IDX];
    int chunks, usages;
    long long pt, ct;
};

/* POSTs body to /completions and reads its stream into *out; returns the
 * number of indices seen, -1 on a bad stream (not 200, a chunk that is
 * not text_completion or a choice without text, an index out of range,
 * no [DONE] last). */
static int
stream_choices(const char *body, struct sse_choices *out)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/completions", base);
    struct e2e_resp r;
    memset(out, 0, sizeof(*out));
    out->pt = out->ct = -1;
    if (e2e_http("POST", url, body, NULL, 60000, &r) != 0 || r.status != 200) {
        e2e_resp_free(&r);
        return -1;
    }
    int seen[MAX_IDX] = {0}, bad = 0, done = 0;
    const char *p = r.body;
    while (p && (p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            done = e[2] == '\0'; /* the last event */
            break;
        }
        json_t *o = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
        const char *obj = json_string_value(json_object_get(o, "object"));
        bad += !obj || strcmp(obj, "text_completion");
        const json_t *u = json_object_get(o, "usage");
        if (json_is_object(u)) {
            out->usages++;
            out->pt = json_integer_value(json_object_get(u, "prompt_tokens"));
            out->ct =
                json_integer_value(json_object_get(u, "completion_tokens"));
        }
        size_t k;
        const json_t *ch;
        json_array_foreach(json_object_get(o, "choices"), k, ch) {
            json_int_t i = json_integer_value(json_object_get(ch, "index"));
            const char *t = json_string_value(json_object_get(ch, "text"));
            if (i < 0 || i >= MAX_IDX || !t) {
                bad++;
                continue;
            }
            seen[i] = 1;
            strncat(out->text[i], t, sizeof(out->text[i]) - 1 -
                                         strlen(out->text[i]));
            out->finish[i] +=
                json_is_string(json_object_get(ch, "finish_reason"));
        }
        out->chunks++;
        json_decref(o);
        p = e + 2;
    }
    e2e_resp_free(&r);
    int n = 0;
    for (int i = 0; i < MAX_IDX; i++)
        n += seen[i];
    return bad || !done ? -1 : n;
}

static void
test_completion_stream(void)
{
    const char *body = "{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":16,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},"
                       "\"prompt\":\"Once upon a time\"}";
    static struct sse_choices sc;
    T_EQ_INT(stream_choices(body, &sc), 1);
    T_CHECK(sc.chunks >= 3);
    T_EQ_INT(sc.finish[0], 1);
    T_EQ_INT(sc.usages, 1);
    if (nonstream_text)
        T_EQ_STR(sc.text[0], nonstream_text);
}

static void
refused(const char *path, const char *body, const char *param)
{
    long st;
    json_t *o = post(path, body, &st);
    T_EQ_INT(st, 400);
    const char *got =
        json_string_value(json_object_get(json_object_get(o, "error"),
                                          "param"));
    T_EQ_STR(got ? got : "(none)", param);
    json_decref(o);
}

static void
test_completion_refusals(void)
{
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"echo\":1}", "echo");
    /* max_tokens 0 without echo would answer nothing; chat keeps 1.. */
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"logprobs\":1,"
            "\"max_tokens\":0}",
            "max_tokens");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"echo\":true,"
            "\"max_tokens\":-1}",
            "max_tokens");
    refused("/chat/completions",
            "{\"model\":\"local\",\"max_tokens\":0,\"messages\":[{"
            "\"role\":\"user\",\"content\":\"a\"}]}",
            "max_tokens");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"suffix\":\"b\"}",
            "suffix");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"best_of\":2}",
            "best_of");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"logprobs\":true}",
            "logprobs");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"logprobs\":21}",
            "logprobs");
}

/* /v1/completions' logprobs (an integer: the alternatives): tokens that
 * spell the text, their log-probabilities (greedy: each its own likeliest
 * alternative), text_offset counting characters from 0; the stream's
 * chunks list the same tokens. */
static void
check_text_lp(const json_t *lp, int top, char *joined, size_t cap)
{
    const json_t *toks = json_object_get(lp, "tokens"),
                 *lps = json_object_get(lp, "token_logprobs"),
                 *tops = json_object_get(lp, "top_logprobs"),
                 *offs = json_object_get(lp, "text_offset");
    size_t n = json_array_size(toks), o = strlen(joined);
    T_CHECK(n > 0);
    T_EQ_INT(json_array_size(lps), n);
    T_EQ_INT(json_array_size(tops), n);
    T_EQ_INT(json_array_size(offs), n);
    for (size_t i = 0; i < n; i++) {
        const char *t = json_string_value(json_array_get(toks, i));
        double v = json_number_value(json_array_get(lps, i));
        T_CHECK(t && v <= 0.0);
        T_EQ_INT(json_integer_value(json_array_get(offs, i)), (long)o);
        const json_t *d = json_array_get(tops, i);
        T_CHECK(json_object_size(d) >= 1 && (int)json_object_size(d) <= top);
        /* greedy: the chosen token is the likeliest alternative */
        T_CHECK(json_number_value(json_object_get(d, t ? t : "")) == v);
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)d, k, x)
            T_CHECK(json_number_value(x) <= v);
        snprintf(joined + o, cap - o, "%s", t ? t : "");
        o = strlen(joined); /* ASCII text: characters are bytes */
    }
}

static void
test_completion_logprobs(void)
{
    long st;
    const char *body = "{\"model\":\"local\",\"temperature\":0,\"logprobs\":2,"
                       "\"max_tokens\":12,\"prompt\":\"Once upon a time\"}";
    json_t *a = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    const json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    const char *text = json_string_value(json_object_get(ch, "text"));
    char joined[2048] = "";
    check_text_lp(json_object_get(ch, "logprobs"), 2, joined, sizeof(joined));
    T_EQ_STR(joined, text ? text : "(none)");
    T_EQ_INT(json_array_size(json_object_get(json_object_get(ch, "logprobs"),
                                             "tokens")),
             json_integer_value(json_object_get(json_object_get(a, "usage"),
                                                "completion_tokens")));
    /* streamed: the chunks' lists, joined, are the same tokens */
    char url[256];
    snprintf(url, sizeof(url), "%s/completions", base);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"local\",\"temperature\":0,\"logprobs\":2,"
                      "\"stream\":true,\"max_tokens\":12,\"prompt\":\"Once "
                      "upon a time\"}",
                      NULL, 60000, &r),
             0);
    T_EQ_INT(r.status, 200);
    char sj[2048] = "";
    size_t i;
    json_t *evs = e2e_sse_objects(r.body), *ev;
    json_array_foreach(evs, i, ev) {
        const json_t *lp = json_object_get(
            json_array_get(json_object_get(ev, "choices"), 0), "logprobs");
        if (json_is_object(lp))
            check_text_lp(lp, 2, sj, sizeof(sj));
    }
    json_decref(evs);
    T_EQ_STR(sj, joined);
    e2e_resp_free(&r);
    json_decref(a);
}

/* The model's token ids for text (BOS first), from `llmux tokenize`, as
 * "1,403,..." into buf; 0 on success. */
static int
token_ids(const char *text, char *buf, size_t len)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s/models/"
             "stories260K.gguf' '%s'",
             e2e_env("LLMUX_BIN", "build/release/llmux"),
             e2e_env("LLMUX_TEST_DATA", "../shared/data"), text);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[1024] = "";
    int ok = fgets(line, sizeof(line), f) != NULL;
    ok &= pclose(f) == 0;
    size_t o = 0;
    for (char *t = strtok(line, " \n"); ok && t; t = strtok(NULL, " \n"))
        o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s",
                              o ? "," : "", t);
    return ok && o > 0 && o < len ? 0 : -1;
}

/* choices[i].text of a text_completion, "" when missing. */
static const char *
choice_text(const json_t *o, size_t i)
{
    const char *t = json_string_value(json_object_get(
        json_array_get(json_object_get(o, "choices"), i), "text"));
    return t ? t : "";
}

static long long
usage_of(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(json_object_get(o, "usage"), k));
}

/* ---- echo -------------------------------------------------------------- */

/* choices[i].logprobs' list k ("tokens", ...) of a text_completion. */
static const json_t *
lp_list(const json_t *o, size_t i, const char *k)
{
    return json_object_get(
        json_object_get(json_array_get(json_object_get(o, "choices"), i),
                        "logprobs"),
        k);
}

/* A greedy 8-token completion of prompt (JSON text) with the fields in
 * extra (",\"k\":v..." or ""). */
static json_t *
post_fmt(const char *prompt, const char *extra, long *st)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":8,"
             "\"prompt\":%s%s}",
             prompt, extra);
    return post("/completions", body, st);
}

/* A streamed completion's events (caller frees), NULL when not a 200. */
static json_t *
stream_events(const char *prompt, const char *extra)
{
    char url[256], body[2048];
    snprintf(url, sizeof(url), "%s/completions", base);
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":8,"
             "\"stream\":true,\"prompt\":%s%s}",
             prompt, extra);
    struct e2e_resp r;
    json_t *evs = NULL;
    if (e2e_http("POST", url, body, NULL, 60000, &r) == 0 && r.status == 200)
        evs = e2e_sse_objects(r.body);
    e2e_resp_free(&r);
    return evs;
}

/*
 * echo on /v1/completions: the text is the prompt's then the completion's
 * (usage unchanged: the prompt counted once); with logprobs the prompt's
 * tokens come first (BOS "" with null figures, then each token's
 * log-probability under the logits before it, the prefix space of the
 * first word left out as the echoed text does), then the completion's own
 * entries as without echo, text_offset counting through both; each
 * prompt figure equals the raw log-probability of that token forced as
 * the first completion token of the shorter prompt (logit_bias +100:
 * logprobs stay the model's); streamed, each choice's first chunk is its
 * prompt with its tokens; token-id prompts echo their detokenized text;
 * several prompts and n each echo their own (n > 1: the prompt computed
 * once, every choice the same figures); echo with max_tokens 0 scores
 * the prompt alone.
 */
static void
test_completion_echo(void)
{
    static const char *const A = "Once upon a time";
    char ia[256], prompt[512];
    T_EQ_INT(token_ids(A, ia, sizeof(ia)), 0);
    snprintf(prompt, sizeof(prompt), "\"%s\"", A);
    long st;
    json_t *plain = post_fmt(prompt, ",\"logprobs\":2", &st);
    T_EQ_INT(st, 200);
    json_t *e = post_fmt(prompt, ",\"echo\":true", &st);
    T_EQ_INT(st, 200);
    char want[2048];
    snprintf(want, sizeof(want), "%s%s", A, choice_text(plain, 0));
    T_EQ_STR(choice_text(e, 0), want);
    T_CHECK(json_is_null(json_object_get(
        json_array_get(json_object_get(e, "choices"), 0), "logprobs")));
    T_EQ_INT(usage_of(e, "prompt_tokens"), usage_of(plain, "prompt_tokens"));
    T_EQ_INT(usage_of(e, "completion_tokens"),
             usage_of(plain, "completion_tokens"));
    json_decref(e);

    /* with logprobs */
    e = post_fmt(prompt, ",\"echo\":true,\"logprobs\":2", &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(choice_text(e, 0), want);
    long long np = usage_of(e, "prompt_tokens"),
              nc = usage_of(e, "completion_tokens");
    const json_t *toks = lp_list(e, 0, "tokens"),
                 *lps = lp_list(e, 0, "token_logprobs"),
                 *tops = lp_list(e, 0, "top_logprobs"),
                 *offs = lp_list(e, 0, "text_offset");
    T_EQ_INT(json_array_size(toks), np + nc);
    T_EQ_INT(json_array_size(lps), np + nc);
    T_EQ_INT(json_array_size(tops), np + nc);
    T_EQ_INT(json_array_size(offs), np + nc);
    T_EQ_STR(json_string_value(json_array_get(toks, 0)), "");
    T_CHECK(json_is_null(json_array_get(lps, 0)));
    T_CHECK(json_is_null(json_array_get(tops, 0)));
    char joined[2048] = "";
    size_t i;
    const json_t *t;
    json_array_foreach(toks, i, t) {
        /* ASCII: characters are bytes */
        T_EQ_INT(json_integer_value(json_array_get(offs, i)),
                 (long)strlen(joined));
        strncat(joined, json_string_value(t) ? json_string_value(t) : "?",
                sizeof(joined) - strlen(joined) - 1);
        if (i == 0)
            continue;
        const json_t *d = json_array_get(tops, i);
        T_CHECK(json_number_value(json_array_get(lps, i)) <= 0.0);
        T_CHECK(json_is_object(d) && json_object_size(d) >= 1 &&
                json_object_size(d) <= 2);
    }
    T_EQ_STR(joined, want);
    T_EQ_STR(json_string_value(json_array_get(toks, 1)), "Once");
    /* the completion's part is the plain answer's, offsets shifted */
    const json_t *ptoks = lp_list(plain, 0, "tokens");
    for (i = 0; i < json_array_size(ptoks); i++) {
        size_t k = (size_t)np + i;
        T_CHECK(json_equal(json_array_get(ptoks, i), json_array_get(toks, k)));
        T_CHECK(json_equal(json_array_get(lp_list(plain, 0, "token_logprobs"),
                                          i),
                           json_array_get(lps, k)));
        T_CHECK(json_equal(json_array_get(lp_list(plain, 0, "top_logprobs"), i),
                           json_array_get(tops, k)));
        T_EQ_INT(json_integer_value(
                     json_array_get(lp_list(plain, 0, "text_offset"), i)) +
                     (long)strlen(A),
                 json_integer_value(json_array_get(offs, k)));
    }
    /* each prompt figure: the token forced (logit_bias) after the shorter
     * prompt reports the same raw log-probability */
    int32_t pid[32];
    int np_ids = 0;
    for (char *q = ia; *q && np_ids < 32;) {
        pid[np_ids++] = (int32_t)strtol(q, &q, 10);
        if (*q == ',')
            q++;
    }
    T_EQ_INT(np_ids, np);
    for (int k = 1; k < np_ids; k++) {
        char pre[256] = "[", extra[128];
        for (int q = 0; q < k; q++)
            snprintf(pre + strlen(pre), sizeof(pre) - strlen(pre), "%s%d",
                     q ? "," : "", (int)pid[q]);
        strcat(pre, "]");
        snprintf(extra, sizeof(extra),
                 ",\"logprobs\":0,\"logit_bias\":{\"%d\":100}",
                 (int)pid[k]);
        json_t *f = post_fmt(pre, extra, &st);
        T_EQ_INT(st, 200);
        T_NEAR(json_number_value(
                   json_array_get(lp_list(f, 0, "token_logprobs"), 0)),
               json_number_value(json_array_get(lps, (size_t)k)), 1e-5);
        json_decref(f);
    }

    /* streamed: the first chunk is the prompt with its tokens */
    json_t *evs = stream_events(prompt, ",\"echo\":true,\"logprobs\":2");
    T_CHECK(json_array_size(evs) >= 3);
    char stext[2048] = "";
    json_t *stoks = json_array(), *ev;
    json_array_foreach(evs, i, ev) {
        const json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        const char *x = json_string_value(json_object_get(ch, "text"));
        if (i == 0)
            T_EQ_STR(x ? x : "(none)", A);
        strncat(stext, x ? x : "", sizeof(stext) - strlen(stext) - 1);
        json_array_extend(stoks, json_object_get(json_object_get(ch,
                                                                 "logprobs"),
                                                 "tokens"));
        if (i == 0)
            T_EQ_INT(json_array_size(stoks), np);
    }
    T_EQ_STR(stext, want);
    T_CHECK(json_equal(stoks, toks));
    json_decref(stoks);
    json_decref(evs);

    /* token ids: the same answer as the text */
    char ids[300];
    snprintf(ids, sizeof(ids), "[%s]", ia);
    json_t *e2 = post_fmt(ids, ",\"echo\":true,\"logprobs\":2", &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(choice_text(e2, 0), want);
    T_CHECK(json_equal(json_object_get(json_array_get(json_object_get(e2,
                                                                      "choices"),
                                                      0),
                                       "logprobs"),
                       json_object_get(json_array_get(json_object_get(e,
                                                                      "choices"),
                                                      0),
                                       "logprobs")));
    json_decref(e2);
    json_decref(e);
    json_decref(plain);

    /* several prompts and n = 2, streamed and not: each its own prompt */
    static const char *const P2 = "[\"Once upon a time\",\"The dog\"]";
    e = post_fmt(P2, ",\"echo\":true,\"n\":2,\"logprobs\":1", &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(e, "choices")), 4);
    for (size_t k = 0; k < 4; k++) {
        const char *pk = k < 2 ? A : "The dog", *x = choice_text(e, k);
        T_CHECK(!strncmp(x, pk, strlen(pk)) && strlen(x) > strlen(pk));
        T_EQ_STR(json_string_value(json_array_get(lp_list(e, k, "tokens"),
                                                  0)),
                 "");
    }
    evs = stream_events(P2, ",\"echo\":true,\"n\":2");
    int first[4] = {0, 0, 0, 0};
    char texts[4][1024] = {"", "", "", ""};
    json_array_foreach(evs, i, ev) {
        const json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_int_t k = json_integer_value(json_object_get(ch, "index"));
        const char *x = json_string_value(json_object_get(ch, "text"));
        if (!ch || k < 0 || k > 3 || !x)
            continue;
        if (!first[k]++)
            T_EQ_STR(x, k < 2 ? A : "The dog");
        strncat(texts[k], x, sizeof(texts[k]) - strlen(texts[k]) - 1);
    }
    for (int k = 0; k < 4; k++)
        T_EQ_STR(texts[k], choice_text(e, (size_t)k));
    json_decref(evs);
    json_decref(e);
}

/* ---- scoring a prompt: echo with max_tokens 0 -------------------------- */

/* An echo completion of prompt (JSON text) with max_tokens mt and the
 * fields in extra; stream: its events (NULL when not a 200), else the
 * answer. */
static json_t *
echo_mt(const char *prompt, int mt, const char *extra, int stream, long *st)
{
    char body[4096];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"max_tokens\":%d,\"echo\":true,"
             "\"prompt\":%s%s%s}",
             mt, prompt, stream ? ",\"stream\":true,\"stream_options\":{"
                                  "\"include_usage\":true}"
                                : "",
             extra);
    if (!stream)
        return post("/completions", body, st);
    char url[256];
    snprintf(url, sizeof(url), "%s/completions", base);
    struct e2e_resp r;
    json_t *evs = NULL;
    *st = -1;
    if (e2e_http("POST", url, body, NULL, 60000, &r) == 0) {
        *st = r.status;
        if (r.status == 200)
            evs = e2e_sse_objects(r.body);
    }
    e2e_resp_free(&r);
    return evs;
}

/* Scoring a prompt: echo with max_tokens 0. */
static json_t *
score(const char *prompt, const char *extra, int stream, long *st)
{
    return echo_mt(prompt, 0, extra, stream, st);
}

/* The four lists of a text_completion choice's logprobs. */
static const char *const lp_keys[4] = {"tokens", "token_logprobs",
                                       "top_logprobs", "text_offset"};

/* 1 when list k of choice i of a equals the first n entries of list k of
 * choice j of b (text_offset too: the prompt's come first). */
static int
lp_prefix_equal(const json_t *a, size_t i, const json_t *b, size_t j,
                size_t n)
{
    int eq = 1;
    for (int k = 0; k < 4; k++) {
        const json_t *la = lp_list(a, i, lp_keys[k]),
                     *lb = lp_list(b, j, lp_keys[k]);
        eq &= json_array_size(la) == n && json_array_size(lb) >= n;
        for (size_t q = 0; eq && q < n; q++)
            eq &= json_equal(json_array_get(la, q), json_array_get(lb, q));
    }
    return eq;
}

/*
 * echo + max_tokens 0 + logprobs (what evaluation harnesses send to score
 * a prompt): the text is the prompt, the logprobs the prompt's alone
 * (first null), equal to the prompt part of the same request with
 * max_tokens 8, finish_reason "length", usage completion_tokens 0 (the
 * ledger row too); streamed: the same text and tokens, one
 * finish_reason "length", the usage chunk's completion_tokens 0; several
 * prompts and n each score their own prompt; without logprobs the text
 * alone.
 */
static void
test_completion_score(void)
{
    static const char *const A = "Once upon a time";
    char prompt[512];
    snprintf(prompt, sizeof(prompt), "\"%s\"", A);
    long st;
    json_t *full = post_fmt(prompt, ",\"echo\":true,\"logprobs\":2", &st);
    T_EQ_INT(st, 200);
    long long np = usage_of(full, "prompt_tokens");
    T_CHECK(np >= 4);
    json_t *s = score(prompt, ",\"logprobs\":2", 0, &st);
    T_EQ_INT(st, 200);
    const json_t *ch = json_array_get(json_object_get(s, "choices"), 0);
    T_EQ_STR(choice_text(s, 0), A);
    T_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")),
             "length");
    T_EQ_INT(usage_of(s, "completion_tokens"), 0);
    T_EQ_INT(usage_of(s, "prompt_tokens"), np);
    T_CHECK(json_is_null(json_array_get(lp_list(s, 0, "token_logprobs"), 0)));
    T_CHECK(lp_prefix_equal(s, 0, full, 0, (size_t)np));
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE api='completions' AND "
             "prompt_tokens=%lld AND completion_tokens=0 AND status=200",
             np);
    T_EQ_INT(e2e_db_int(db, sql), 1);

    /* streamed */
    json_t *evs = score(prompt, ",\"logprobs\":2", 1, &st);
    T_EQ_INT(st, 200);
    char stext[1024] = "";
    int finishes = 0, usages = 0;
    json_t *stoks = json_array(), *ev;
    size_t i;
    json_array_foreach(evs, i, ev) {
        const json_t *u = json_object_get(ev, "usage");
        if (json_is_object(u)) {
            usages++;
            T_EQ_INT(json_integer_value(json_object_get(
                         u, "completion_tokens")),
                     0);
        }
        const json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        if (!c)
            continue;
        const char *x = json_string_value(json_object_get(c, "text"));
        const char *f =
            json_string_value(json_object_get(c, "finish_reason"));
        strncat(stext, x ? x : "", sizeof(stext) - strlen(stext) - 1);
        if (f) {
            finishes++;
            T_EQ_STR(f, "length");
        }
        json_array_extend(stoks,
                          json_object_get(json_object_get(c, "logprobs"),
                                          "tokens"));
    }
    T_EQ_STR(stext, A);
    T_EQ_INT(finishes, 1);
    T_EQ_INT(usages, 1);
    T_CHECK(json_equal(stoks, lp_list(s, 0, "tokens")));
    json_decref(stoks);
    json_decref(evs);

    /* several prompts and n = 2: each choice its own prompt's figures */
    static const char *const P2 = "[\"Once upon a time\",\"The dog\"]";
    json_t *s2 = score(P2, ",\"n\":2,\"logprobs\":1", 0, &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(s2, "choices")), 4);
    json_t *d = score("\"The dog\"", ",\"logprobs\":1", 0, &st);
    json_t *a1 = score(prompt, ",\"logprobs\":1", 0, &st);
    for (size_t k = 0; k < 4; k++) {
        const json_t *one = k < 2 ? a1 : d;
        T_EQ_STR(choice_text(s2, k), choice_text(one, 0));
        T_EQ_STR(json_string_value(json_object_get(
                     json_array_get(json_object_get(s2, "choices"), k),
                     "finish_reason")),
                 "length");
        T_CHECK(lp_prefix_equal(s2, k, one, 0,
                                json_array_size(lp_list(one, 0, "tokens"))));
    }
    T_EQ_INT(usage_of(s2, "completion_tokens"), 0);
    T_EQ_INT(usage_of(s2, "prompt_tokens"),
             usage_of(a1, "prompt_tokens") + usage_of(d, "prompt_tokens"));
    evs = score(P2, ",\"n\":2,\"logprobs\":1", 1, &st);
    T_EQ_INT(st, 200);
    char texts[4][256] = {"", "", "", ""};
    int fin[4] = {0, 0, 0, 0};
    json_array_foreach(evs, i, ev) {
        const json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        json_int_t k = json_integer_value(json_object_get(c, "index"));
        const char *x = json_string_value(json_object_get(c, "text"));
        if (!c || k < 0 || k > 3 || !x)
            continue;
        strncat(texts[k], x, sizeof(texts[k]) - strlen(texts[k]) - 1);
        fin[k] += json_is_string(json_object_get(c, "finish_reason"));
    }
    for (int k = 0; k < 4; k++) {
        T_EQ_STR(texts[k], choice_text(s2, (size_t)k));
        T_EQ_INT(fin[k], 1);
    }
    json_decref(evs);

    /* no logprobs: the prompt's text alone */
    json_t *t = score(prompt, "", 0, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(choice_text(t, 0), A);
    T_CHECK(json_is_null(json_object_get(
        json_array_get(json_object_get(t, "choices"), 0), "logprobs")));
    T_EQ_INT(usage_of(t, "completion_tokens"), 0);
    json_decref(t);
    json_decref(a1);
    json_decref(d);
    json_decref(s2);
    json_decref(s);
    json_decref(full);
}

/* The local engine's prefix-cache counter from GET /metrics (prompt
 * tokens reused from cells), -1 when missing. */
static long long
cached_total(void)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", gw.port);
    struct e2e_resp r;
    long long v = -1;
    if (e2e_http("GET", url, NULL, NULL, 30000, &r) == 0 && r.status == 200) {
        const char *p =
            strstr(r.body, "\nllmux_local_prefix_cache_tokens_total{");
        const char *e = p ? strchr(p + 1, '}') : NULL;
        if (e)
            v = strtoll(e + 1, NULL, 10);
    }
    e2e_resp_free(&r);
    return v;
}

/*
 * n > 1 with echo + logprobs: the prompt's figures are computed once per
 * prompt (by its first choice) and every choice lists the same ones: the
 * later choices reuse the first's cells (the prefix-cache counter grows
 * by (n - 1) x (prompt tokens - 1) per prompt: each evaluates only the
 * last prompt token again), with max_tokens 0 and 8, streamed or not,
 * one prompt or two.
 */
static void
test_completion_echo_n(void)
{
    static const char *const P2 = "[\"Once upon a time\",\"The dog\"]";
    long st;
    json_t *one = score("\"Once upon a time\"", ",\"logprobs\":2", 0, &st),
           *two = score("\"The dog\"", ",\"logprobs\":2", 0, &st);
    long long np1 = usage_of(one, "prompt_tokens"),
              np2 = usage_of(two, "prompt_tokens");
    T_CHECK(np1 >= 4 && np2 >= 3);
    for (int stream = 0; stream < 2; stream++) {
        for (int mt = 0; mt < 2; mt++) {
            char extra[128];
            snprintf(extra, sizeof(extra),
                     ",\"n\":3,\"logprobs\":2,\"temperature\":0");
            long long c0 = cached_total();
            json_t *o = echo_mt(P2, mt ? 8 : 0, extra, stream, &st);
            T_EQ_INT(st, 200);
            long long c1 = cached_total();
            T_CHECK(c0 >= 0);
            if (c1 - c0 != 2 * (np1 - 1) + 2 * (np2 - 1))
                fprintf(stderr, "n 3 echo (stream %d, max_tokens %d): %lld "
                                "cached tokens, want %lld\n",
                        stream, mt ? 8 : 0, c1 - c0,
                        2 * (np1 - 1) + 2 * (np2 - 1));
            T_EQ_INT(c1 - c0, 2 * (np1 - 1) + 2 * (np2 - 1));
            /* every choice: its prompt's figures, the same list */
            json_t *lists[6];
            for (int k = 0; k < 6; k++)
                lists[k] = json_array();
            size_t i;
            const json_t *ev;
            if (stream) {
                json_array_foreach(o, i, ev) {
                    const json_t *c =
                        json_array_get(json_object_get(ev, "choices"), 0);
                    json_int_t k =
                        json_integer_value(json_object_get(c, "index"));
                    if (c && k >= 0 && k < 6)
                        json_array_extend(
                            lists[k],
                            json_object_get(json_object_get(c, "logprobs"),
                                            "token_logprobs"));
                }
            } else {
                T_EQ_INT(json_array_size(json_object_get(o, "choices")), 6);
                for (int k = 0; k < 6; k++)
                    json_array_extend(lists[k],
                                      (json_t *)lp_list(o, (size_t)k,
                                                        "token_logprobs"));
            }
            for (int k = 0; k < 6; k++) {
                const json_t *ref = lp_list(k < 3 ? one : two, 0,
                                            "token_logprobs");
                size_t n = json_array_size(ref);
                int eq = json_array_size(lists[k]) >= n;
                for (size_t q = 0; eq && q < n; q++)
                    eq = json_equal(json_array_get(lists[k], q),
                                    json_array_get(ref, q));
                if (!eq)
                    fprintf(stderr, "n 3 echo (stream %d): choice %d's "
                                    "prompt figures differ\n",
                            stream, k);
                T_CHECK(eq);
                json_decref(lists[k]);
            }
            json_decref(o);
        }
    }
    json_decref(one);
    json_decref(two);
}

/* ---- echo, n > 1: a clone's text before its prompt's figures ---------- */

/* sentence, count times with a space between, as a JSON string. */
static void
repeat_prompt(char *buf, size_t cap, const char *sentence, int count)
{
    size_t o = (size_t)snprintf(buf, cap, "\"");
    for (int i = 0; i < count && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? " " : "",
                              sentence);
    if (o < cap)
        snprintf(buf + o, cap - o, "\"");
}

/*
 * A streamed echo + logprobs request with n 3 on two prompts that the
 * prefix cache already holds whole (each scored alone first) and that are
 * longer than a step's prompt budget (128 tokens while nothing generates,
 * a few rows a step beside generating sequences, sched.c).  A clone does
 * not wait for its prompt's first job then (the cells are there): its
 * first tokens come steps before that job's last prompt figure, so its
 * text is held back until the figures are in (providers/local.c,
 * stream_choice).  Still, for each index: the first chunk is its prompt,
 * with every one of its prompt's figures (those of the prompt scored
 * alone) and nothing more, then its own tokens, its finish_reason last;
 * the chunks of each index joined are the non-stream answer's choice (its
 * text and all four lists).
 */
static void
test_completion_echo_held(void)
{
    char p[2][1536], both[3200];
    repeat_prompt(p[0], sizeof(p[0]),
                  "The cat sat in the sun and the dog ran to the park.", 19);
    repeat_prompt(p[1], sizeof(p[1]),
                  "Lily had a red ball. She liked to play with it every day.",
                  19);
    snprintf(both, sizeof(both), "[%s,%s]", p[0], p[1]);
    long st;
    json_t *ref[2];
    for (int i = 0; i < 2; i++) {
        ref[i] = score(p[i], ",\"logprobs\":2", 0, &st);
        T_EQ_INT(st, 200);
        /* past two steps' budget, within the context (512) with 8 more */
        long long np = usage_of(ref[i], "prompt_tokens");
        if (np <= 300 || np > 500)
            fprintf(stderr, "prompt %d: %lld tokens, want 301..500\n", i, np);
        T_CHECK(np > 300 && np <= 500);
    }
    const char *extra = ",\"n\":3,\"logprobs\":2,\"temperature\":0";
    json_t *full = echo_mt(both, 8, extra, 0, &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(full, "choices")), 6);
    json_t *evs = echo_mt(both, 8, extra, 1, &st);
    T_EQ_INT(st, 200);
    /* the stream joined per index, as a text_completion's choices */
    json_t *joined = json_pack("{s:[]}", "choices");
    json_t *jch = json_object_get(joined, "choices");
    for (int k = 0; k < 6; k++)
        json_array_append_new(jch,
                              json_pack("{s:{s:[],s:[],s:[],s:[]}}",
                                        "logprobs", lp_keys[0], lp_keys[1],
                                        lp_keys[2], lp_keys[3]));
    static char text[6][2048];
    memset(text, 0, sizeof(text));
    int firsts[6] = {0}, finished[6] = {0}, after_finish = 0, bad = 0;
    size_t i, q;
    const json_t *ev, *c;
    json_array_foreach(evs, i, ev) {
        json_array_foreach(json_object_get(ev, "choices"), q, c) {
            json_int_t k = json_integer_value(json_object_get(c, "index"));
            const char *t = json_string_value(json_object_get(c, "text"));
            const json_t *lp = json_object_get(c, "logprobs");
            json_t *jc = json_array_get(jch, (size_t)k);
            if (!jc || !t) {
                bad++;
                continue;
            }
            after_finish += finished[k] > 0;
            if (!firsts[k]++) {
                /* the echo: the prompt's text and all its figures alone */
                json_t *pt = json_loads(p[k / 3], JSON_DECODE_ANY, NULL);
                T_EQ_STR(t, json_string_value(pt));
                json_decref(pt);
                T_EQ_INT(json_array_size(json_object_get(lp, "tokens")),
                         usage_of(ref[k / 3], "prompt_tokens"));
            }
            strncat(text[k], t, sizeof(text[k]) - 1 - strlen(text[k]));
            for (int l = 0; l < 4; l++)
                json_array_extend(
                    json_object_get(json_object_get(jc, "logprobs"),
                                    lp_keys[l]),
                    json_object_get(lp, lp_keys[l]));
            finished[k] += json_is_string(json_object_get(c, "finish_reason"));
        }
    }
    T_EQ_INT(bad, 0);
    T_EQ_INT(after_finish, 0);
    for (int k = 0; k < 6; k++) {
        T_CHECK(firsts[k] >= 2); /* the echo, then the tokens */
        T_EQ_INT(finished[k], 1);
        T_EQ_STR(text[k], choice_text(full, (size_t)k));
        /* every list whole and the same as the answer's */
        size_t n = json_array_size(lp_list(full, (size_t)k, "tokens"));
        T_CHECK(n > (size_t)usage_of(ref[k / 3], "prompt_tokens"));
        T_CHECK(lp_prefix_equal(joined, (size_t)k, full, (size_t)k, n));
        /* the prompt's figures: those of the prompt scored alone */
        T_CHECK(lp_prefix_equal(ref[k / 3], 0, joined, (size_t)k,
                                (size_t)usage_of(ref[k / 3],
                                                 "prompt_tokens")));
    }
    json_decref(joined);
    json_decref(evs);
    json_decref(full);
    json_decref(ref[0]);
    json_decref(ref[1]);
}

/* ---- logit_bias -------------------------------------------------------- */

static struct le_model *vocab; /* stories260K's vocabulary, for the ids */

/* The ids whose piece is text[0..len) into ids[0..cap) (byte tokens and
 * merged ones may share a text); their count. */
static size_t
piece_ids(const char *text, int32_t *ids, size_t cap)
{
    size_t k = 0, len = strlen(text);
    for (int32_t id = 0; vocab && id < le_model_n_vocab(vocab); id++) {
        char b[64];
        size_t n = le_model_token_to_piece(vocab, id, 0, b, sizeof(b));
        if (n && n == len && n < sizeof(b) && !memcmp(b, text, n) && k < cap)
            ids[k++] = id;
    }
    return k;
}

/* choices[0].logprobs.tokens of a text_completion (borrowed). */
static const json_t *
choice_tokens(const json_t *o)
{
    return json_object_get(
        json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                        "logprobs"),
        "tokens");
}

/* A 400 naming logit_bias whose message holds needle. */
static void
bias_refused(const char *bias, const char *needle)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"max_tokens\":2,\"prompt\":\"a\","
             "\"logit_bias\":%s}",
             bias);
    long st;
    json_t *o = post("/completions", body, &st);
    const json_t *e = json_object_get(o, "error");
    const char *param = json_string_value(json_object_get(e, "param"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    T_EQ_INT(st, 400);
    T_EQ_STR(param ? param : "(none)", "logit_bias");
    if (!msg || !strstr(msg, needle)) {
        fprintf(stderr, "logit_bias %s: message %s lacks %s\n", bias,
                msg ? msg : "(none)", needle);
        T_CHECK(0);
    }
    json_decref(o);
}

/*
 * logit_bias on /v1/completions with the real model: -100 on every token
 * of the greedy answer bans them (none of its ids comes back), +100 on
 * one token fills the answer with it (sampled too, streamed too), the
 * logprobs stay the model's (a forced token's own figure is the
 * unbiased one, below 0), and every bad key or value is a 400 naming
 * logit_bias with the key in the message (chat too).
 */
static void
test_logit_bias(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char err[256];
    T_EQ_INT(le_model_open_vocab(path, &vocab, err, sizeof(err)), LE_OK);
    if (!vocab)
        return;
    long st;
    json_t *a = post("/completions",
                     "{\"model\":\"local\",\"temperature\":0,\"logprobs\":0,"
                     "\"max_tokens\":12,\"prompt\":\"Once upon a time\"}",
                     &st);
    T_EQ_INT(st, 200);
    /* -100 on every id of every token text of the greedy answer */
    const json_t *toks = choice_tokens(a);
    T_CHECK(json_array_size(toks) >= 4);
    char bias[4096] = "{", body[8192];
    size_t o = 1, nb = 0, i;
    const json_t *t;
    json_array_foreach(toks, i, t) {
        int32_t ids[8];
        size_t k = piece_ids(json_string_value(t), ids, 8);
        T_CHECK(k >= 1);
        for (size_t q = 0; q < k && o + 16 < sizeof(bias); q++, nb++)
            o += (size_t)snprintf(bias + o, sizeof(bias) - o, "%s\"%d\":-100",
                                  nb ? "," : "", (int)ids[q]);
    }
    snprintf(bias + o, sizeof(bias) - o, "}");
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"logprobs\":0,"
             "\"max_tokens\":12,\"prompt\":\"Once upon a time\","
             "\"logit_bias\":%s}",
             bias);
    json_t *b = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    const json_t *got = choice_tokens(b), *u;
    T_CHECK(json_array_size(got) >= 1);
    size_t j, seen = 0;
    json_array_foreach(got, i, u) json_array_foreach(toks, j, t)
        seen += json_equal(u, t);
    T_EQ_INT(seen, 0);
    T_CHECK(strcmp(choice_text(a, 0), choice_text(b, 0)) != 0);
    json_decref(a);
    json_decref(b);
    /* +100 on " time": the answer is that token, sampled or streamed */
    int32_t dog = -1;
    T_EQ_INT(piece_ids(" time", &dog, 1), 1);
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":1,\"seed\":3,"
             "\"logprobs\":1,\"max_tokens\":6,\"prompt\":\"Once upon a "
             "time\",\"logit_bias\":{\"%d\":100}}",
             (int)dog);
    a = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(choice_text(a, 0), " time time time time time time");
    T_EQ_INT(usage_of(a, "completion_tokens"), 6);
    const json_t *lps = json_object_get(
        json_object_get(json_array_get(json_object_get(a, "choices"), 0),
                        "logprobs"),
        "token_logprobs");
    T_EQ_INT(json_array_size(lps), 6);
    T_CHECK(json_number_value(json_array_get(lps, 0)) < -0.01);
    json_decref(a);
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"stream\":true,"
             "\"max_tokens\":4,\"prompt\":\"Once upon a time\","
             "\"logit_bias\":{\"%d\":100}}",
             (int)dog);
    static struct sse_choices sc;
    T_EQ_INT(stream_choices(body, &sc), 1);
    T_EQ_STR(sc.text[0], " time time time time");
    /* refusals, each naming the key or the token */
    /* refusals, each naming the key or the token (chat: the structured
     * test) */
    bias_refused("[1]", "object");
    bias_refused("{\"abc\":1}", "\"abc\"");
    bias_refused("{\"-1\":1}", "\"-1\"");
    bias_refused("{\"512\":1}", "\"512\"");
    bias_refused("{\"07\":1}", "\"07\"");
    bias_refused("{\" 7\":1}", "\" 7\"");
    bias_refused("{\"7\":101}", "token 7");
    bias_refused("{\"7\":-100.5}", "token 7");
    bias_refused("{\"7\":\"x\"}", "token 7");
    bias_refused("{\"8\":1,\"7\":null}", "token 7");
    /* accepted: empty, null, the bounds */
    a = post("/completions",
             "{\"model\":\"local\",\"max_tokens\":2,\"prompt\":\"a\","
             "\"logit_bias\":{}}",
             &st);
    T_EQ_INT(st, 200);
    json_decref(a);
    a = post("/completions",
             "{\"model\":\"local\",\"max_tokens\":2,\"prompt\":\"a\","
             "\"logit_bias\":{\"0\":-100,\"511\":100.0}}",
             &st);
    T_EQ_INT(st, 200);
    json_decref(a);
    le_model_free(vocab);
    vocab = NULL;
    /* stories260K's token 3 is the byte 0x00: forced, the answer carries
     * U+FFFD, not \u0000, which jansson (and so the Responses and
     * Messages adapters, which parse the answer again) refuses; before
     * the repair, about 1 in 20 Responses calls of a byte-vocabulary
     * model answered 502 */
    json_t *z = post("/completions",
                     "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":2,"
                     "\"prompt\":\"Hi\",\"logit_bias\":{\"3\":100}}",
                     &st);
    T_EQ_INT(st, 200);
    T_CHECK(z != NULL); /* parsed without JSON_ALLOW_NUL */
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(z, "choices"), 0), "text")),
             "\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(z);
}

/*
 * prompt as OpenAI takes it: token ids (the same answer as the text they
 * tokenize to), an array of strings and an array of token arrays (one
 * choice per prompt, in order, usage summed), with n (prompt i's choices
 * at i x n ..), streamed (every index, each finish_reason once, the
 * non-stream texts and usage), and the refusals: an id outside the
 * vocabulary names prompt and the index, too many choices.
 */
static void
test_completion_prompts(void)
{
    static const char *const A = "Once upon a time",
                             *const B = "The dog ran to the park";
    char ia[256], ib[256], body[2048];
    T_EQ_INT(token_ids(A, ia, sizeof(ia)), 0);
    T_EQ_INT(token_ids(B, ib, sizeof(ib)), 0);
    long st;
    /* the answers to A and B alone (greedy, 16 tokens) */
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":16,"
             "\"prompt\":\"%s\"}", B);
    json_t *b1 = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":16,"
             "\"prompt\":\"%s\"}", A);
    json_t *a1 = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    long long pa = usage_of(a1, "prompt_tokens"),
              pb = usage_of(b1, "prompt_tokens");
    long long ca = usage_of(a1, "completion_tokens"),
              cb = usage_of(b1, "completion_tokens");
    T_CHECK(pa > 1 && pb > pa);
    T_CHECK(strcmp(choice_text(a1, 0), choice_text(b1, 0))); /* tell apart */
    if (nonstream_text)
        T_EQ_STR(choice_text(a1, 0), nonstream_text);

    /* token ids: the tokens A tokenizes to, BOS included, as they are */
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":16,"
             "\"prompt\":[%s]}", ia);
    json_t *o = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(o, "choices")), 1);
    T_EQ_STR(choice_text(o, 0), choice_text(a1, 0));
    T_EQ_INT(usage_of(o, "prompt_tokens"), pa);
    json_decref(o);

    /* two prompts as strings, then as token arrays: choice i is prompt
     * i's, usage the sum */
    const char *forms[2][2] = {{"\"Once upon a time\"",
                                "\"The dog ran to the park\""},
                               {NULL, NULL}};
    char ta[300], tb[300];
    snprintf(ta, sizeof(ta), "[%s]", ia);
    snprintf(tb, sizeof(tb), "[%s]", ib);
    forms[1][0] = ta;
    forms[1][1] = tb;
    for (int f = 0; f < 2; f++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"local\",\"temperature\":0,"
                 "\"max_tokens\":16,\"prompt\":[%s,%s]}",
                 forms[f][0], forms[f][1]);
        o = post("/completions", body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = json_object_get(o, "choices");
        T_EQ_INT(json_array_size(ch), 2);
        for (size_t i = 0; i < 2; i++)
            T_EQ_INT(json_integer_value(json_object_get(
                         json_array_get(ch, i), "index")),
                     (long long)i);
        T_EQ_STR(choice_text(o, 0), choice_text(a1, 0));
        T_EQ_STR(choice_text(o, 1), choice_text(b1, 0));
        T_EQ_INT(usage_of(o, "prompt_tokens"), pa + pb);
        T_EQ_INT(usage_of(o, "completion_tokens"), ca + cb);
        json_decref(o);
    }

    /* n 2 over two prompts: A, A, B, B */
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":16,"
             "\"n\":2,\"prompt\":[\"%s\",[%s]]}", A, ib);
    o = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(o, "choices")), 4);
    for (size_t i = 0; i < 4; i++) {
        T_EQ_INT(json_integer_value(json_object_get(
                     json_array_get(json_object_get(o, "choices"), i),
                     "index")),
                 (long long)i);
        T_EQ_STR(choice_text(o, i), choice_text(i < 2 ? a1 : b1, 0));
    }
    T_EQ_INT(usage_of(o, "prompt_tokens"), pa + pb);
    T_EQ_INT(usage_of(o, "completion_tokens"), 2 * (ca + cb));
    /* the ledger row has the summed counts */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE api='completions' AND "
             "prompt_tokens=%lld AND completion_tokens=%lld",
             pa + pb, 2 * (ca + cb));
    T_EQ_INT(e2e_db_int(db, sql), 1);
    json_decref(o);

    /* the same streamed, and two prompts with n 1: each choice its own
     * index, its finish_reason once, its text the non-stream answer */
    static struct sse_choices sc;
    for (int nn = 2; nn >= 1; nn--) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":16,"
                 "\"n\":%d,\"stream\":true,\"stream_options\":"
                 "{\"include_usage\":true},\"prompt\":[\"%s\",[%s]]}",
                 nn, A, ib);
        int got = stream_choices(body, &sc);
        T_EQ_INT(got, 2 * nn);
        for (int i = 0; i < 2 * nn && got == 2 * nn; i++) {
            T_EQ_INT(sc.finish[i], 1);
            T_EQ_STR(sc.text[i], choice_text(i < nn ? a1 : b1, 0));
        }
        T_EQ_INT(sc.usages, 1);
        T_EQ_INT(sc.pt, pa + pb);
        T_EQ_INT(sc.ct, nn * (ca + cb));
    }

    /* refusals: 400 naming prompt, nothing generated */
    o = post("/completions",
             "{\"model\":\"local\",\"prompt\":[1,99999,5]}", &st);
    T_EQ_INT(st, 400);
    const json_t *e = json_object_get(o, "error");
    T_EQ_STR(json_string_value(json_object_get(e, "param")), "prompt");
    const char *m = json_string_value(json_object_get(e, "message"));
    T_CHECK(m && strstr(m, "prompt[1]") && strstr(m, "99999"));
    json_decref(o);
    o = post("/completions",
             "{\"model\":\"local\",\"prompt\":[\"a\",[3,-1]]}", &st);
    T_EQ_INT(st, 400);
    m = json_string_value(
        json_object_get(json_object_get(o, "error"), "message"));
    T_CHECK(m && strstr(m, "prompt[1][1]") && strstr(m, "-1"));
    json_decref(o);
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":[\"a\",7]}", "prompt");
    refused("/completions",
            "{\"model\":\"local\",\"n\":3,"
            "\"prompt\":[\"a\",\"b\",\"c\"]}",
            "prompt"); /* 9 choices */
    refused("/completions",
            "{\"model\":\"local\",\"stream\":true,\"n\":3,"
            "\"prompt\":[\"a\",\"b\",\"c\"]}",
            "prompt"); /* 9 choices, streamed too */
    json_decref(a1);
    json_decref(b1);
}

/* The vector of data[i] (float array or base64 of float32 LE); n floats
 * into v (at most cap); -1 when malformed. */
static int
vector_of(const json_t *o, size_t i, float *v, size_t cap)
{
    const json_t *e = json_object_get(
        json_array_get(json_object_get(o, "data"), i), "embedding");
    if (json_is_array(e)) {
        if (json_array_size(e) > cap)
            return -1;
        for (size_t k = 0; k < json_array_size(e); k++) {
            const json_t *x = json_array_get(e, k);
            if (!json_is_number(x))
                return -1;
            v[k] = (float)json_number_value(x);
        }
        return (int)json_array_size(e);
    }
    const char *s = json_string_value(e);
    if (!s)
        return -1;
    static const char a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char buf[65536];
    size_t nb = 0, len = strlen(s);
    if (len % 4)
        return -1;
    for (size_t k = 0; k < len; k += 4) {
        unsigned w = 0;
        int pad = 0;
        for (int q = 0; q < 4; q++) {
            const char *c = s[k + q] == '=' ? NULL : strchr(a, s[k + q]);
            if (s[k + q] == '=')
                pad++;
            else if (!c || !s[k + q])
                return -1;
            w = w << 6 | (c ? (unsigned)(c - a) : 0);
        }
        if (nb + 3 > sizeof(buf))
            return -1;
        buf[nb++] = (unsigned char)(w >> 16);
        if (pad < 2)
            buf[nb++] = (unsigned char)(w >> 8);
        if (pad < 1)
            buf[nb++] = (unsigned char)w;
    }
    if (nb % 4 || nb / 4 > cap)
        return -1;
    memcpy(v, buf, nb);
    return (int)(nb / 4);
}

static long long completion_prompt_tokens(const char *prompt);

static void
test_embeddings(void)
{
    long st;
    float f[4096], g[4096], h[4096], x[4096];
    json_t *a = post("/embeddings",
                     "{\"model\":\"local\",\"input\":\"Once upon a time\"}",
                     &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(json_string_value(json_object_get(a, "object")), "list");
    int n = vector_of(a, 0, f, 4096);
    T_CHECK(n > 8);
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)f[i] * f[i];
    T_CHECK(fabs(ss - 1.0) < 1e-4);
    long long pt = json_integer_value(
        json_object_get(json_object_get(a, "usage"), "prompt_tokens"));
    T_EQ_INT(pt, completion_prompt_tokens("Once upon a time"));
    json_t *b = post("/embeddings",
                     "{\"model\":\"local\",\"input\":[\"Once upon a time\"],"
                     "\"encoding_format\":\"base64\"}",
                     &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(vector_of(b, 0, g, 4096), n);
    /* base64 is the float32 itself; JSON floats print exactly enough to
     * round-trip a float */
    T_CHECK(memcmp(f, g, (size_t)n * sizeof(float)) == 0);
    json_t *c = post("/embeddings",
                     "{\"model\":\"local\",\"input\":[\"Once upon a time\","
                     "\"The dog ran to the park\"]}",
                     &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(vector_of(c, 0, h, 4096), n);
    T_EQ_INT(vector_of(c, 1, x, 4096), n);
    T_CHECK(memcmp(f, h, (size_t)n * sizeof(float)) == 0); /* deterministic */
    double dot = 0, sx = 0;
    for (int i = 0; i < n; i++) {
        dot += (double)f[i] * x[i];
        sx += (double)x[i] * x[i];
    }
    T_CHECK(fabs(sx - 1.0) < 1e-4);
    T_CHECK(dot < 0.9999); /* another input, another vector */
    long long pt2 = json_integer_value(
        json_object_get(json_object_get(c, "usage"), "prompt_tokens"));
    T_EQ_INT(pt2, pt + completion_prompt_tokens("The dog ran to the park"));
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE api='embeddings' AND "
             "completion_tokens=0 AND cost_pusd=0 AND prompt_tokens IN "
             "(%lld,%lld)",
             pt, pt2);
    T_EQ_INT(e2e_db_int(db, sql), 3);
    /* dimensions equal to n_embd is accepted */
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"input\":\"a\",\"dimensions\":%d}", n);
    json_t *d = post("/embeddings", body, &st);
    T_EQ_INT(st, 200);
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"input\":\"a\",\"dimensions\":%d}",
             n - 1);
    refused("/embeddings", body, "dimensions");
    refused("/embeddings", "{\"model\":\"local\",\"input\":[1,2,3]}",
            "input");
    refused("/embeddings",
            "{\"model\":\"local\",\"input\":\"a\",\"encoding_format\":"
            "\"int8\"}",
            "encoding_format");
    refused("/embeddings",
            "{\"model\":\"local\",\"input\":\"a\",\"pooling\":\"cls\"}",
            "pooling");
    /* longer than the context (512): 400 context_length_exceeded */
    char *big = malloc(8192);
    int o = snprintf(big, 8192, "{\"model\":\"local\",\"input\":\"");
    for (int i = 0; i < 700; i++)
        o += snprintf(big + o, 8192 - (size_t)o, "dog ");
    snprintf(big + o, 8192 - (size_t)o, "\"}");
    json_t *l = post("/embeddings", big, &st);
    T_EQ_INT(st, 400);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(l, "error"),
                                               "code")),
             "context_length_exceeded");
    json_decref(l);
    free(big);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
}

/* prompt_tokens of a raw completion of prompt (max_tokens 1). */
static long long
completion_prompt_tokens(const char *prompt)
{
    long st;
    char body[512];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"max_tokens\":1,\"prompt\":\"%s\"}",
             prompt);
    json_t *o = post("/completions", body, &st);
    long long n = json_integer_value(
        json_object_get(json_object_get(o, "usage"), "prompt_tokens"));
    json_decref(o);
    return st == 200 ? n : -1;
}

/* The rows so far, grouped by api over HTTP: completions and embeddings
 * (no chat), each as many requests as the ledger has. */
static void
test_usage_by_api(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/usage?since=1h&group_by=api", base);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 20000, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *data = json_object_get(o, "data");
    T_EQ_INT(json_array_size(data), 2);
    size_t i;
    const json_t *g;
    json_array_foreach(data, i, g) {
        const char *api = json_string_value(json_object_get(g, "group"));
        T_CHECK(api && (!strcmp(api, "completions") ||
                        !strcmp(api, "embeddings")));
        char sql[128];
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM usage WHERE api='%s'", api ? api : "");
        T_EQ_INT(json_integer_value(json_object_get(g, "requests")),
                 e2e_db_int(db, sql));
    }
    json_decref(o);
    e2e_resp_free(&r);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_completion);
    T_RUN(test_completion_stream);
    T_RUN(test_completion_refusals);
    T_RUN(test_completion_logprobs);
    T_RUN(test_completion_prompts);
    T_RUN(test_logit_bias);
    T_RUN(test_completion_echo);
    T_RUN(test_completion_score);
    T_RUN(test_completion_echo_n);
    T_RUN(test_completion_echo_held);
    T_RUN(test_embeddings);
    T_RUN(test_usage_by_api);
    free(nonstream_text);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
