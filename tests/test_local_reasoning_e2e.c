/*
 * End to end through the real llmux binary: a reasoning model on the local
 * engine (random-weight qwen3 models written here, q wider than the
 * embedding, "<think>" and "</think>" user-defined tokens as in Qwen3's
 * vocabulary, Qwen3's templates).  The chat answer's reasoning_content
 * and content are checked against the raw text /v1/completions gives for
 * the same rendered prompt, seed and logit_bias (the same tokens): split
 * at the first "</think>", blanks around the markers dropped, the
 * reasoning's tokens counted in completion_tokens_details.reasoning_tokens;
 * the stream's deltas give the same parts; an answer that opens no
 * reasoning is all content; a constrained answer (json_object) reasons
 * first and then gives JSON; reasoning_effort none / minimal closes the
 * reasoning empty in the prompt (none in the answer), a bad value is
 * refused.  DeepSeek R1 (a random llama with R1's template and its tool
 * markers): a call after the reasoning, and the answer after a call's
 * result against the raw text of the prompt DeepSeek's template writes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

static struct e2e_proc gw;
static char base[128];

/* Qwen3-Thinking-2507's markers (the generation prompt opens the
 * reasoning), and the hybrid Qwen3's */
static const char *q3t_tmpl =
    "{%- set ns = namespace(multi_step_tool=true, last_query_index="
    "messages|length - 1) %}{{- '<|im_start|>' + message.role + '\\n' + "
    "content }}{%- if '</think>' in content %}...{%- endif %}{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- endif %} <tool_call>";
static const char *q3_tmpl =
    "{%- set ns = namespace(multi_step_tool=true, last_query_index="
    "messages|length - 1) %}{{- '<|im_start|>' + message.role + '\\n' + "
    "content }}{%- if '</think>' in content %}...{%- endif %}{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
    "enable_thinking is defined and enable_thinking is false %}{{- "
    "'<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
static const char *const think_toks[] = {"<think>", "</think>", NULL};
/* Qwen2.5's: ChatML, its default system text, <tool_call> */
static const char *q25_tmpl =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]"
    "['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- "
    "'You are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.' }}{%- endif %}... '<tool_call>\\n{\"name\": ' "
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + '\\n' }}";
/* DeepSeek R1's (its distills' template, which opens the reasoning),
 * with its tool markers; they are user-defined tokens, as in DeepSeek's
 * vocabularies, before "<think>" and "</think>" (ds_toks) */
static const char *dsr_tmpl =
    "{{'<｜User｜>' + message['content']}}{%- if message['role'] == "
    "'assistant' and message['tool_calls'] -%}{{'<｜Assistant｜>"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
    "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
    "'\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- set content = content.split('</think>')"
    "[-1] -%}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}"
    "{%- if add_generation_prompt and not ns.is_tool -%}"
    "{{'<｜Assistant｜><think>\\n'}}";
/* GLM-4.7-Flash's (its lines that tell it), its markers user-defined
 * tokens, "</think>" the last */
static const char *glm_tmpl =
    "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n...{%- elif "
    "m.role == 'assistant' -%}\n<|assistant|>\n...'<tool_call>' + tc.name"
    "...<arg_key>{{ k }}</arg_key><arg_value>...{%- if "
    "add_generation_prompt -%}\n    <|assistant|>{{- '</think>' if "
    "(enable_thinking is defined and not enable_thinking) else '<think>' "
    "-}}";
static const char *const glm_toks[] = {
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<think>", "</think>",
    NULL};
static const char *const ds_toks[] = {
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<think>", "</think>",
    NULL};
#define END_THINK_ID 499 /* the vocabulary's last id */
/* DeepSeek V3.1's (its original's lines): "</think>" after
 * <｜Assistant｜> unless thinking, its call format, the same tokens */
static const char *ds31_tmpl =
    "{{'<｜User｜>' + message['content']}}{%- if ns.is_last_user -%}"
    "{{'<｜Assistant｜></think>'}}{%- endif -%}{{'<｜tool▁calls▁begin｜>"
    "<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + "
    "tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}{{'"
    "<｜tool▁output▁begin｜>' + message['content'] + "
    "'<｜tool▁output▁end｜>'}}{%- if not thinking -%}{{'</think>'}}{%- "
    "else -%}{{'<think>'}}";

/* Ministral 3 Reasoning's (its lines that tell it: a default system
 * text asking for [THINK] reasoning, the tools listed before the
 * messages' loop), Mistral's markers user-defined tokens, so that
 * /v1/completions reads them in its raw text too ("[/THINK]" the last,
 * END_THINK_ID, "[THINK]" before it; test_local_structured_e2e has them
 * as the control tokens they are in Mistral's tekken vocabulary) */
static const char *magi_tmpl =
    "{%- set default_system_message = 'Think first:[THINK]a draft[/THINK]"
    "then answer.' %}{{- '[SYSTEM_PROMPT]' + system_message + "
    "'[/SYSTEM_PROMPT]' }}{%- set tools_definition = '[AVAILABLE_TOOLS]' + "
    "(tools| tojson) + '[/AVAILABLE_TOOLS]' %}{%- for message in "
    "loop_messages %}{{- '[INST]' + message['content'] + '[/INST]' }}..."
    "{{- '[TOOL_CALLS]' }}{{- name + '[ARGS]' + arguments }}...{{- "
    "'[TOOL_RESULTS]' + message['content']|string + '[/TOOL_RESULTS]' }}";
static const char *const magi_toks[] = {
    "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CALLS]", "[ARGS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[THINK]", "[/THINK]", NULL};
#define OPEN_THINK_ID 498 /* magi's "[THINK]" */
/* Magistral Small 2506's (magistral-2506): its default asks for the
 * reasoning in <think> tags, "<think>" and "</think>" the last ids */
static const char *m2506_tmpl =
    "{%- set default_system_message = 'Think first:<think>a draft</think>"
    "then answer.' %}{{- '[SYSTEM_PROMPT]' + system_message + "
    "'[/SYSTEM_PROMPT]' }}{%- for message in loop_messages %}{{- '[INST]' "
    "+ message['content'] + '[/INST]' }}";
static const char *const m2506_toks[] = {
    "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "<think>",
    "</think>", NULL};

static int
write_model(const char *path, const char *tmpl, const char *const *utoks,
            uint64_t seed)
{
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 500;
    lp.n_embd = 64;
    lp.n_layer = 1;
    lp.n_head = 4;
    lp.n_head_kv = 2;
    lp.head_dim = 32;
    lp.n_ff = 96;
    lp.n_ctx = 1024;
    lp.type = LE_TYPE_Q8_0;
    lp.seed = seed;
    lp.chat_template = tmpl;
    lp.user_tokens = utoks;
    lp.arch = "qwen3";
    return gguf_w_llama_write(&lp, path);
}

static int
start(void)
{
    char *dir = e2e_temp_dir();
    char q3t[512], q3[512], q25[512], dsr[512], ds31[512], glm[512],
        magi[512], m2506[512], cfg[6144];
    snprintf(q3t, sizeof(q3t), "%s/q3t.gguf", dir);
    snprintf(dsr, sizeof(dsr), "%s/dsr.gguf", dir);
    snprintf(q3, sizeof(q3), "%s/q3.gguf", dir);
    snprintf(q25, sizeof(q25), "%s/q25.gguf", dir);
    snprintf(ds31, sizeof(ds31), "%s/ds31.gguf", dir);
    snprintf(glm, sizeof(glm), "%s/glm.gguf", dir);
    snprintf(magi, sizeof(magi), "%s/magi.gguf", dir);
    snprintf(m2506, sizeof(m2506), "%s/m2506.gguf", dir);
    if (write_model(q3t, q3t_tmpl, think_toks, 91) != 0 ||
        write_model(q3, q3_tmpl, think_toks, 92) ||
        write_model(q25, q25_tmpl, think_toks, 93) ||
        write_model(dsr, dsr_tmpl, ds_toks, 94) ||
        write_model(ds31, ds31_tmpl, ds_toks, 95) ||
        write_model(glm, glm_tmpl, glm_toks, 96) ||
        write_model(magi, magi_tmpl, magi_toks, 97) ||
        write_model(m2506, m2506_tmpl, m2506_toks, 98))
        return -1;
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\n"
             "  \"q3t\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 1,\n"
             "   \"models\": {\"q3t\": {}}},\n"
             "  \"q3\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 1,\n"
             "   \"models\": {\"q3\": {}}},\n"
             "  \"q25\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 1,\n"
             "   \"models\": {\"q25\": {}}},\n"
             "  \"dsr\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"dsr\": {}}},\n"
             "  \"ds31\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"ds31\": {}}},\n"
             "  \"glm\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"glm\": {}}},\n"
             "  \"magi\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"magi\": {}}},\n"
             "  \"m2506\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"m2506\": {}}}}}\n",
             dir, q3t, q3, q25, dsr, ds31, glm, magi, m2506);
    free(dir);
    char *path = e2e_write_temp("reasoning.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", gw.port);
    return rc;
}

/* POST base + path; the body as text in *raw (NULL: not kept) and as
 * JSON (NULL for a stream) */
static json_t *
post(const char *path, const char *body, long *status, char **raw)
{
    return e2e_post(base, path, body, status, raw);
}

static int
is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The split the answer should get, from the raw text t[0, n) (the
 * reference, written here from the rule, not with providers/think.c):
 * mode 2 starts in the reasoning, mode 1 when t opens with blanks and
 * "<think>", mode 6 the same with "[THINK]" ... "[/THINK]"; *rend: bytes
 * of t up to the end of "</think>" (n if none) */
struct split {
    const char *r, *c;
    size_t rl, cl, rend;
};

static void
ref_split(int mode, const char *t, size_t n, struct split *s)
{
    size_t i = 0;
    memset(s, 0, sizeof(*s));
    s->c = t;
    s->cl = n;
    /* magistral's (mode 6) markers, as long as the others */
    const char *open = mode == 6 ? "[THINK]" : "<think>",
               *close = mode == 6 ? "[/THINK]" : "</think>";
    if (mode == 0) /* no reasoning: all content */
        return;
    if (mode == 1 || mode == 6) {
        while (i < n && is_blank(t[i]))
            i++;
        if (n - i < 7 || memcmp(t + i, open, 7))
            return;
        i += 7;
    }
    while (i < n && is_blank(t[i]))
        i++;
    s->r = t + i;
    size_t e = i;
    while (e + 8 <= n && memcmp(t + e, close, 8))
        e++;
    if (e + 8 > n) { /* no end: all reasoning */
        s->rl = n - i;
        s->c = t + n;
        s->cl = 0;
        s->rend = n;
        return;
    }
    s->rl = e - i;
    s->rend = e + 8;
    size_t c = e + 8;
    while (c < n && is_blank(t[c]))
        c++;
    s->c = t + c;
    s->cl = n - c;
}

static int
eq(const json_t *str, const char *want, size_t wl)
{
    if (!str) /* absent: only an empty part */
        return wl == 0;
    return json_string_length(str) == wl &&
           (!wl || !memcmp(json_string_value(str), want, wl));
}

static json_int_t
reasoning_tokens(const json_t *o)
{
    return json_integer_value(json_object_get(
        json_object_get(json_object_get(o, "usage"),
                        "completion_tokens_details"),
        "reasoning_tokens"));
}

/* The bytes of the raw text `at` (n left) that a logprobs token stands
 * for: its string's, but a U+FFFD shown for a byte of a character cut
 * in pieces (a byte token, as the random models write the markers'
 * fullwidth bars) is that one byte, unless the text has the U+FFFD too
 * (a byte that made no character, repaired in the text as in the
 * token).  Counted as 3, the reasoning's tokens came out short. */
static size_t
token_bytes(const json_t *tok, const char *at, size_t n)
{
    const char *t = json_string_value(tok);
    size_t tl = json_string_length(tok), b = 0;
    for (size_t i = 0; t && i < tl; i++, b++) {
        int rep = i + 3 <= tl && !memcmp(t + i, "\xef\xbf\xbd", 3);
        if (rep && !(b + 3 <= n && !memcmp(at + b, "\xef\xbf\xbd", 3)))
            i += 2; /* one byte of the text */
        else if (rep)
            i += 2, b += 2;
    }
    return b;
}

/* One seed of model (mode) with bias on the close of its reasoning
 * (END_THINK_ID) and obias on magi's "[THINK]": the chat answer to
 * msgs (NULL: one user turn "Q"; and its stream) with the chat body's
 * members extra (NULL: none) against /v1/completions' raw text of
 * prompt (what msgs render to); 1 when the raw text closed the
 * reasoning. */
static int
check_seed_ob(const char *model, int mode, const char *prompt, int seed,
              int bias, int obias, const char *msgs, const char *extra)
{
    char common[256], chat[512], body[2048];
    if (!msgs)
        msgs = "[{\"role\":\"user\",\"content\":\"Q\"}]";
    snprintf(common, sizeof(common),
             "\"model\":\"%s\",\"max_tokens\":40,\"temperature\":1,"
             "\"seed\":%d,\"logit_bias\":{\"%d\":%d,\"%d\":%d}",
             model, seed, END_THINK_ID, bias, OPEN_THINK_ID, obias);
    snprintf(chat, sizeof(chat), "%s%s%s", common, extra ? "," : "",
             extra ? extra : "");
    snprintf(body, sizeof(body),
             "{%s,\"logprobs\":1,\"prompt\":\"%s\"}", common, prompt);
    long st;
    json_t *raw = post("/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *rc = json_array_get(json_object_get(raw, "choices"), 0);
    const json_t *tj = json_object_get(rc, "text");
    const char *t = json_string_value(tj);
    size_t tn = json_string_length(tj);
    struct split want;
    ref_split(mode, t ? t : "", t ? tn : 0, &want);
    /* tokens up to the end of "</think>": the reasoning's */
    const json_t *toks =
        json_object_get(json_object_get(rc, "logprobs"), "tokens");
    json_int_t rt_want = 0;
    size_t at = 0;
    for (size_t k = 0; want.rl + want.rend && k < json_array_size(toks) &&
                       at < want.rend;
         k++, rt_want++)
        at += token_bytes(json_array_get(toks, k), t + at, tn - at);
    snprintf(body, sizeof(body), "{%s,\"messages\":%s}", chat, msgs);
    json_t *o = post("/chat/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *msg = json_object_get(
        json_array_get(json_object_get(o, "choices"), 0), "message");
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(o, "usage"),
                                                "prompt_tokens")),
             json_integer_value(json_object_get(
                 json_object_get(raw, "usage"), "prompt_tokens")));
    int ok = eq(json_object_get(msg, "reasoning_content"), want.r, want.rl) &&
             eq(json_object_get(msg, "content"), want.c, want.cl);
    if (!ok)
        fprintf(stderr, "%s seed %d: raw '%.*s' reasoning '%s' content '%s'\n",
                model, seed, (int)tn, t ? t : "",
                json_string_value(json_object_get(msg, "reasoning_content")),
                json_string_value(json_object_get(msg, "content")));
    T_CHECK(ok);
    T_EQ_INT(reasoning_tokens(o), rt_want);
    /* the stream: the same parts as deltas, the same count */
    snprintf(body, sizeof(body),
             "{%s,\"stream\":true,\"stream_options\":{\"include_usage\":"
             "true},\"messages\":%s}",
             chat, msgs);
    char *sse = NULL;
    post("/chat/completions", body, &st, &sse);
    T_EQ_INT(st, 200);
    json_t *evs = sse ? e2e_sse_objects(sse) : NULL;
    char *rs = calloc(1, 4096), *cs = calloc(1, 4096);
    size_t rn = rs ? e2e_sse_deltas(evs, "reasoning_content", rs, 4096) : 0,
           cn = cs ? e2e_sse_deltas(evs, "content", cs, 4096) : 0, i;
    json_int_t srt = -1;
    json_t *ev;
    json_array_foreach(evs, i, ev) {
        if (json_object_get(ev, "usage"))
            srt = reasoning_tokens(ev);
    }
    T_CHECK(rn == want.rl && (!rn || !memcmp(rs, want.r, rn)));
    T_CHECK(cn == want.cl && (!cn || !memcmp(cs, want.c, cn)));
    T_EQ_INT(srt, rt_want);
    free(rs);
    free(cs);
    json_decref(evs);
    free(sse);
    int closed = want.rend < tn ||
                 (want.rend == tn && want.rl + 8 <= tn &&
                  !memcmp(t + tn - 8, mode == 6 ? "[/THINK]" : "</think>", 8));
    json_decref(o);
    json_decref(raw);
    return closed;
}

/* check_seed_ob without a bias on "[THINK]" */
static int
check_seed(const char *model, int mode, const char *prompt, int seed,
           int bias, const char *msgs, const char *extra)
{
    return check_seed_ob(model, mode, prompt, seed, bias, 0, msgs, extra);
}

#define Q3T_PROMPT                                                          \
    "<|im_start|>user\\nQ<|im_end|>\\n<|im_start|>assistant\\n<think>\\n"
#define Q3_PROMPT "<|im_start|>user\\nQ<|im_end|>\\n<|im_start|>assistant\\n"

static void
test_thinking_split(void)
{
    int closed = 0;
    for (int seed = 0; seed < 8; seed++)
        closed += check_seed("q3t", 2, Q3T_PROMPT, seed, 3, NULL, NULL);
    fprintf(stderr, "q3t: %d of 8 answers closed their reasoning\n", closed);
    T_CHECK(closed >= 2); /* the split was exercised, not only its lack */
    T_CHECK(closed <= 7); /* and an answer that never closes it */
}

static void
test_hybrid_no_reasoning(void)
{
    /* the model may open "<think>"; these answers do not: all content */
    for (int seed = 0; seed < 4; seed++)
        check_seed("q3", 1, Q3_PROMPT, seed, 0, NULL, NULL);
}

/* json_object on the thinking model: the grammar lets the reasoning come
 * first, then "</think>", a blank line and the JSON, which parses
 * whenever the grammar ended the answer */
static void
test_constrained_thinking(void)
{
    int stopped = 0, closed = 0;
    for (int seed = 0; seed < 6; seed++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"q3t\",\"max_tokens\":80,\"seed\":%d,"
                 "\"temperature\":1,\"logit_bias\":{\"%d\":4},"
                 "\"response_format\":{\"type\":\"json_object\"},"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
                 seed, END_THINK_ID);
        long st;
        json_t *o = post("/chat/completions", body, &st, NULL);
        T_EQ_INT(st, 200);
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        const json_t *msg = json_object_get(ch, "message");
        const char *c = json_string_value(json_object_get(msg, "content"));
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        /* the reasoning may be empty (then absent), its </think> counts */
        const json_t *rc = json_object_get(msg, "reasoning_content");
        T_CHECK(!rc || json_is_string(rc));
        T_CHECK(reasoning_tokens(o) > 0);
        if (c && *c) { /* past the reasoning: JSON from its first byte */
            closed++;
            T_EQ_INT(c[0], '{');
        }
        if (fr && !strcmp(fr, "stop")) {
            stopped++;
            json_t *v = c ? json_loads(c, 0, NULL) : NULL;
            T_CHECK(json_is_object(v));
            json_decref(v);
        }
        json_decref(o);
    }
    fprintf(stderr, "q3t json_object: %d of 6 closed the reasoning, %d "
                    "ended by the grammar\n",
            closed, stopped);
    T_CHECK(closed >= 1);
}

/* tools on the thinking models (hermes, as Qwen3's; DeepSeek R1's own
 * format): the reasoning, then the call; the stream gives the same
 * reasoning and call */
static void
tools_thinking(const char *model, const char *extra, int obias)
{
    static const char tools[] =
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\","
        "\"parameters\":{\"type\":\"object\",\"additionalProperties\":false,"
        "\"required\":[\"u\"],\"properties\":{\"u\":{\"enum\":[\"c\",\"k\"]}}"
        "}}}],\"tool_choice\":\"required\",\"parallel_tool_calls\":false";
    int calls = 0;
    for (int seed = 0; seed < 6; seed++) {
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":80,\"seed\":%d,"
                 "\"temperature\":1,\"logit_bias\":{\"%d\":4,\"%d\":%d},"
                 "%s,%s\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
                 model, seed, END_THINK_ID, OPEN_THINK_ID, obias, tools,
                 extra);
        long st;
        json_t *o = post("/chat/completions", body, &st, NULL);
        T_EQ_INT(st, 200);
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        const json_t *msg = json_object_get(ch, "message");
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        const json_t *tc = json_array_get(json_object_get(msg, "tool_calls"),
                                          0);
        const char *args = json_string_value(
            json_object_get(json_object_get(tc, "function"), "arguments"));
        if (fr && !strcmp(fr, "tool_calls")) {
            calls++;
            json_t *a = args ? json_loads(args, 0, NULL) : NULL;
            const char *u = json_string_value(json_object_get(a, "u"));
            T_CHECK(u && (!strcmp(u, "c") || !strcmp(u, "k")));
            json_decref(a);
        }
        /* the stream: the same reasoning and the same call */
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":80,\"seed\":%d,"
                 "\"temperature\":1,\"logit_bias\":{\"%d\":4,\"%d\":%d},"
                 "%s,%s\"stream\":true,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"Q\"}]}",
                 model, seed, END_THINK_ID, OPEN_THINK_ID, obias, tools,
                 extra);
        char *sse = NULL;
        post("/chat/completions", body, &st, &sse);
        json_t *evs = sse ? e2e_sse_objects(sse) : NULL;
        char rs[4096], as[4096];
        size_t rn = 0, an = 0, i;
        json_t *ev;
        json_array_foreach(evs, i, ev) {
            const json_t *d = json_object_get(
                json_array_get(json_object_get(ev, "choices"), 0), "delta");
            const json_t *r = json_object_get(d, "reasoning_content");
            const json_t *a = json_object_get(
                json_object_get(
                    json_array_get(json_object_get(d, "tool_calls"), 0),
                    "function"),
                "arguments");
            if (r && rn + json_string_length(r) < sizeof(rs)) {
                memcpy(rs + rn, json_string_value(r), json_string_length(r));
                rn += json_string_length(r);
            }
            if (a && an + json_string_length(a) < sizeof(as)) {
                memcpy(as + an, json_string_value(a), json_string_length(a));
                an += json_string_length(a);
            }
        }
        const json_t *rc = json_object_get(msg, "reasoning_content");
        T_CHECK(eq(rc, rs, rn));
        T_CHECK(args ? an == strlen(args) && !memcmp(as, args, an) : !an);
        json_decref(evs);
        free(sse);
        json_decref(o);
    }
    fprintf(stderr, "%s tools: %d of 6 reasoned and then called\n", model,
            calls);
    T_CHECK(calls >= 1);
}

static void
test_tools_thinking(void)
{
    tools_thinking("q3t", "", 0);
    tools_thinking("dsr", "", 0);
    /* V3.1 asked to reason: the grammar lets it, then its own call */
    tools_thinking("ds31", "\"reasoning_effort\":\"high\",", 0);
    tools_thinking("glm", "", 0); /* its XML calls after the reasoning */
    /* Mistral's [TOOL_CALLS]NAME[ARGS]{...} after [THINK]...[/THINK] */
    tools_thinking("magi", "", 6);
}

/* DeepSeek R1 after a call and its result: the prompt ends with the
 * outputs block, closed, then the reasoning opened (no <｜Assistant｜>,
 * as the template); checked by generating from exactly that text (the
 * markers are user-defined tokens, matched in raw text too): the same
 * reasoning and answer */
static void
test_ds_result_turn(void)
{
    static const char msgs[] =
        "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\","
        "\"content\":\"<think>\\nx\\n</think>\\n\\n\",\"tool_calls\":[{"
        "\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get\",\"arguments\":\"{\\\"u\\\": \\\"c\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]";
    static const char prompt[] =
        "<｜User｜>Q<｜Assistant｜>\\n\\n<｜tool▁calls▁begin｜>"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get\\n```json\\n"
        "{\\\"u\\\": \\\"c\\\"}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>5"
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜><think>\\n";
    int closed = 0;
    for (int seed = 0; seed < 4; seed++)
        closed += check_seed("dsr", 2, prompt, seed, 3, msgs, NULL);
    fprintf(stderr, "dsr after a result: %d of 4 closed their reasoning\n",
            closed);
}

/* DeepSeek V3.1: no reasoning unless asked (the prompt closes it with
 * "</think>", and a "</think>" the answer writes is content); with
 * reasoning_effort the prompt opens "<think>" and the answer splits at
 * its "</think>"; after a result the template writes no generation
 * prompt: the answer follows the results and is all content, with
 * reasoning_effort too.  Each against the raw text of that prompt. */
static void
test_ds31(void)
{
#define DS31_Q "<｜User｜>Q<｜Assistant｜>"
    static const char high[] = "\"reasoning_effort\":\"high\"";
    for (int seed = 0; seed < 4; seed++)
        check_seed("ds31", 0, DS31_Q "</think>", seed, 3, NULL, NULL);
    for (int seed = 0; seed < 2; seed++)
        check_seed("ds31", 0, DS31_Q "</think>", seed, 3, NULL,
                   "\"reasoning_effort\":\"none\"");
    int closed = 0;
    for (int seed = 0; seed < 8; seed++)
        closed += check_seed("ds31", 2, DS31_Q "<think>", seed, 3, NULL, high);
    fprintf(stderr, "ds31 reasoning: %d of 8 closed their reasoning\n",
            closed);
    T_CHECK(closed >= 2);
    static const char msgs[] =
        "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"get\",\"arguments\":"
        "\"{\\\"u\\\": \\\"c\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]";
    static const char prompt[] =
        DS31_Q "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get"
        "<｜tool▁sep｜>{\\\"u\\\": \\\"c\\\"}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>5"
        "<｜tool▁output▁end｜>";
    for (int seed = 0; seed < 3; seed++)
        check_seed("ds31", 0, prompt, seed, 3, msgs, high);
#undef DS31_Q
}

/* GLM-4.7-Flash: reasoning on unless turned off, the prompt opening it
 * ("<think>") or closing it ("</think>"); the answer's "</think>" needs no
 * blank line after it */
static void
test_glm47(void)
{
#define GLM_Q "[gMASK]<sop><|user|>Q<|assistant|>"
    int closed = 0;
    for (int seed = 0; seed < 8; seed++)
        closed += check_seed("glm", 2, GLM_Q "<think>", seed, 3, NULL, NULL);
    fprintf(stderr, "glm reasoning: %d of 8 closed their reasoning\n",
            closed);
    T_CHECK(closed >= 2);
    for (int seed = 0; seed < 3; seed++)
        check_seed("glm", 0, GLM_Q "</think>", seed, 3, NULL,
                   "\"reasoning_effort\":\"none\"");
    for (int seed = 0; seed < 2; seed++)
        check_seed("glm", 2, GLM_Q "<think>", seed, 3, NULL,
                   "\"reasoning_effort\":\"low\"");
#undef GLM_Q
}

/* Magistral / Ministral 3 Reasoning: the default system text (which
 * asks for [THINK] reasoning) written when the messages have none; the
 * answer may open "[THINK]" (control tokens, their text shown) and
 * splits at "[/THINK]", the answer right after it; one that opens none
 * is all content; reasoning_effort none closes it empty in the prompt.
 * Each against the raw text of that prompt. */
static void
test_magistral(void)
{
#define MAGI_SYS                                                           \
    "[SYSTEM_PROMPT]Think first:[THINK]a draft[/THINK]then answer."        \
    "[/SYSTEM_PROMPT]"
    int closed = 0;
    for (int seed = 0; seed < 8; seed++)
        closed += check_seed_ob("magi", 6, MAGI_SYS "[INST]Q[/INST]", seed, 3,
                                6, NULL, NULL);
    fprintf(stderr, "magi reasoning: %d of 8 closed their reasoning\n",
            closed);
    T_CHECK(closed >= 2);
    for (int seed = 0; seed < 3; seed++) /* rarely opened: content */
        check_seed_ob("magi", 6, MAGI_SYS "[INST]Q[/INST]", seed, 3, 0, NULL,
                      NULL);
    for (int seed = 0; seed < 3; seed++)
        check_seed_ob("magi", 0, MAGI_SYS "[INST]Q[/INST][THINK][/THINK]",
                      seed, 3, 6, NULL, "\"reasoning_effort\":\"none\"");
    /* the client's system text in the default's place */
    for (int seed = 0; seed < 2; seed++)
        check_seed_ob("magi", 6, "[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]Q"
                      "[/INST]", seed, 3, 6,
                      "[{\"role\":\"system\",\"content\":\"S\"},"
                      "{\"role\":\"user\",\"content\":\"Q\"}]",
                      "\"reasoning_effort\":\"high\"");
#undef MAGI_SYS
    /* Magistral Small 2506: its default written, the answer's <think>
     * (optional, as qwen3's) split off, none closing it in the prompt */
#define M2506_Q                                                            \
    "[SYSTEM_PROMPT]Think first:<think>a draft</think>then answer."        \
    "[/SYSTEM_PROMPT][INST]Q[/INST]"
    closed = 0;
    for (int seed = 0; seed < 6; seed++)
        closed += check_seed_ob("m2506", 1, M2506_Q, seed, 3, 6, NULL, NULL);
    fprintf(stderr, "m2506 reasoning: %d of 6 closed their reasoning\n",
            closed);
    T_CHECK(closed >= 2);
    for (int seed = 0; seed < 2; seed++)
        check_seed_ob("m2506", 0, M2506_Q "<think>\\n\\n</think>\\n\\n",
                      seed, 3, 6, NULL, "\"reasoning_effort\":\"none\"");
#undef M2506_Q
}

/* reasoning_effort none: the reasoning closed empty in the prompt, none in
 * the answer; other values keep it; a bad one is refused */
static void
test_effort(void)
{
    long st;
    json_t *o = post("/chat/completions",
                     "{\"model\":\"q3t\",\"max_tokens\":60,\"seed\":1,"
                     "\"reasoning_effort\":\"none\","
                     "\"response_format\":{\"type\":\"json_object\"},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    const json_t *msg = json_object_get(ch, "message");
    T_CHECK(json_object_get(msg, "reasoning_content") == NULL);
    const char *c = json_string_value(json_object_get(msg, "content"));
    T_CHECK(c && c[0] == '{'); /* JSON from the first token */
    json_t *p = post("/completions",
                     "{\"model\":\"q3t\",\"max_tokens\":1,\"prompt\":\""
                     Q3T_PROMPT "\\n</think>\\n\\n\"}",
                     &st, NULL);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_integer_value(json_object_get(json_object_get(o, "usage"),
                                                "prompt_tokens")),
             json_integer_value(json_object_get(json_object_get(p, "usage"),
                                                "prompt_tokens")));
    T_EQ_INT(reasoning_tokens(o), 0);
    json_decref(p);
    json_decref(o);
    /* minimal on the hybrid model, unconstrained: all content */
    o = post("/chat/completions",
             "{\"model\":\"q3\",\"max_tokens\":20,\"seed\":2,"
             "\"reasoning_effort\":\"minimal\",\"logit_bias\":{\"498\":5},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
             &st, NULL);
    T_EQ_INT(st, 200);
    msg = json_object_get(
        json_array_get(json_object_get(o, "choices"), 0), "message");
    T_CHECK(json_object_get(msg, "reasoning_content") == NULL);
    T_EQ_INT(reasoning_tokens(o), 0);
    json_decref(o);
    /* high: the thinking model reasons as without it */
    o = post("/chat/completions",
             "{\"model\":\"q3t\",\"max_tokens\":8,\"seed\":2,"
             "\"reasoning_effort\":\"high\","
             "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
             &st, NULL);
    T_EQ_INT(st, 200);
    T_EQ_INT(reasoning_tokens(o), 8);
    json_decref(o);
    o = post("/chat/completions",
             "{\"model\":\"q3t\",\"max_tokens\":8,\"reasoning_effort\":"
             "\"extreme\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"Q\"}]}",
             &st, NULL);
    T_EQ_INT(st, 400);
    const json_t *e = json_object_get(o, "error");
    T_EQ_STR(json_string_value(json_object_get(e, "param")),
             "reasoning_effort");
    json_decref(o);
}

/* The chat body's prompt_tokens equal /v1/completions' for the text the
 * template writes (no special tokens in this vocabulary: the same bytes) */
static void
expect_prompt(const char *model, const char *chat_extra, const char *want)
{
    char body[4096];
    snprintf(body, sizeof(body), "{\"model\":\"%s\",\"max_tokens\":1,%s}",
             model, chat_extra);
    long st;
    json_t *o = post("/chat/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    json_t *js = json_string(want);
    char *w = json_dumps(js, JSON_ENCODE_ANY);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":1,\"prompt\":%s}", model, w);
    free(w);
    json_decref(js);
    json_t *p = post("/completions", body, &st, NULL);
    T_EQ_INT(st, 200);
    json_int_t a = json_integer_value(
                   json_object_get(json_object_get(o, "usage"),
                                   "prompt_tokens")),
               b = json_integer_value(json_object_get(
                   json_object_get(p, "usage"), "prompt_tokens"));
    if (a != b)
        fprintf(stderr, "%s %s: prompt_tokens %lld, the expected text %lld\n",
                model, chat_extra, (long long)a, (long long)b);
    T_EQ_INT(a, b);
    T_CHECK(b > 20);
    json_decref(p);
    json_decref(o);
}

#define QWEN_SYS "You are Qwen, created by Alibaba Cloud. You are a helpful " \
                 "assistant."

/* Qwen2.5: its default system turn when the messages have none, alone or
 * starting the tools' system turn; none when they have one */
static void
test_qwen25_default_system(void)
{
    expect_prompt("q25",
                  "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]",
                  "<|im_start|>system\n" QWEN_SYS "<|im_end|>\n"
                  "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
    expect_prompt("q25",
                  "\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                  "{\"role\":\"user\",\"content\":\"Q\"}]",
                  "<|im_start|>system\nS<|im_end|>\n"
                  "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
    expect_prompt(
        "q25",
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{\"type\":\"object\"}}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]",
        "<|im_start|>system\n" QWEN_SYS "\n\n# Tools\n\nYou may call one or "
        "more functions to assist with the user query.\n\nYou are provided "
        "with function signatures within <tools></tools> XML tags:\n<tools>"
        "\n{\"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"parameters\": {\"type\": \"object\"}}}\n</tools>\n\nFor each "
        "function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n");
}

int
main(void)
{
    if (start() != 0) {
        fprintf(stderr, "could not start llmux\n");
        return 1;
    }
    T_RUN(test_thinking_split);
    T_RUN(test_hybrid_no_reasoning);
    T_RUN(test_constrained_thinking);
    T_RUN(test_tools_thinking);
    T_RUN(test_ds_result_turn);
    T_RUN(test_ds31);
    T_RUN(test_glm47);
    T_RUN(test_magistral);
    T_RUN(test_effort);
    T_RUN(test_qwen25_default_system);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    return T_END();
}
