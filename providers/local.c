/*
 * local: the `local` provider kind, llmux's in-process llama engine behind
 * the same interface as the HTTP kinds.
 *
 * Instances.  Each local provider of a config is an instance (a pv_inst,
 * struct lp_engine), made by lp_inst_new when the config's registry is
 * built (registry.c: at start and at each reload, an unchanged provider
 * sharing the running instance): its model opened and its scheduler
 * started.  Every call holds a reference on its instance, so after a
 * reload changes or drops the provider the calls in flight finish on the
 * old one; the last reference stops it on a reaper thread (lp_inst_free).
 * Nothing here is process state: two instances never share a model.
 *
 * Threads.  Each instance's scheduler (local_engine/sched.c) is one
 * thread that decodes every active sequence in one batched forward pass
 * per step, with the prefix cache and bounded admission (`parallel` sequences, a
 * `queue` of waiting requests).  This file is the thin adapter: on the
 * worker it renders and tokenizes the request and submits it; on the
 * scheduler thread the token callback appends the new text to the job and
 * event_active()s the job's event on the owning worker's event_base, which
 * drains it into SSE chunks (or one body) on its own thread.  A full
 * scheduler answers busy at once: a 503 with Retry-After, delivered from
 * the loop, which the router treats as retryable (fail over).
 *
 * Sharing.  A job is shared by its worker and the scheduler: refs counts
 * them, mu guards text/done/cancelled and the event_active call, so once
 * the worker has set cancelled under mu the scheduler never touches the
 * event again; the stop flag ends the sequence at the next step.
 * n > 1 (stream or not, text, response_format or tools): one job per
 * choice, choice 0's job owning the prompt, stops and grammar and the
 * others borrowing them (a ref each); the scheduler lets them wait for
 * choice 0's prefill and copy its cells.  Each choice keeps its own output
 * state (struct lp_choice) and streams with its own index and
 * finish_reason; the usage sums their completion tokens.
 * Backpressure: pv_call_pause sets the job's paused flag and the sequence
 * leaves the batch (keeping its KV cells) until the client drains and
 * resume clears it, so a slow client costs one token of buffer, not 64 MiB.
 *
 * The request (lp_prepare, on the worker).  Every parameter is in
 * lp_params or refused; response_format and tools are compiled to one
 * grammar (json_schema.c writes the schema rules, this file the tool-call
 * wrapper) that the engine enforces token by token.  A refusal never
 * reaches the engine: the job is born done and its 400 is delivered from
 * the loop (never from inside lp_start), so the gateway passes it on as
 * the provider's own 4xx instead of failing over to a 502.  Tool-call
 * output is reshaped here: the grammar's wrapper {"name": ..., "arguments":
 * ...} becomes message.tool_calls, or tool_call deltas while streaming.
 *
 * /v1/completions (lp_prepare_text): the prompt in each of OpenAI's shapes
 * (text tokenized raw, or token ids as given), one job per prompt and
 * choice, the same scheduler, answered as text_completion; with echo each
 * choice's text starts with its prompt's and, with logprobs, its tokens
 * (figures from the scheduler's on_prompt_logprob, asked for by each
 * prompt's first job only: its other choices list the same figures and
 * copy its cells) come first; max_tokens 0 with echo scores the prompt
 * (le_sched_req.prompt_only: no token generated).
 * /v1/embeddings
 * (lp_prepare_embed): no scheduler; embed_thread runs le_model_embed per
 * input on a thread of its own (the model's pool serialises its products
 * with the scheduler's) and the job's event delivers the list.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/event.h>

#include "../local_engine/local_engine.h"
#include "providers_int.h"

#define LP_DEFAULT_MAX_TOKENS 512
#define LP_N_MAX 8 /* choices per request (n x prompts) */

struct lp_engine;

/* A /v1/completions prompt: text (tokenized raw, BOS added) or token ids
 * (sent as they are). */
struct lp_prompt {
    char *text;
    int32_t *ids;
    size_t n_ids;
};

struct lp_job {
    pthread_mutex_t mu;
    int refs;
    int cancelled;
    _Atomic int stop;   /* set with cancelled: the sequence ends */
    _Atomic int paused; /* backpressure: out of the batch while set */
    struct event *ev; /* on the worker's base */
    struct lp_engine *e;
    /* n > 1: choices 1.. are clones that borrow the prompt, stops and
     * grammar of choice 0's job (a ref on it) and differ by seed.  Several
     * prompts (/v1/completions): each prompt's first job has its own
     * prompt and borrows the stops of choice 0's job (its parent). */
    struct lp_job *parent;
    int n_choices; /* choice 0's job: the request's n (1 by default) */
    /* Input, owned. */
    char *prompt_text;
    /* the XML formats' calls: per tool, per listed parameter, whether its
     * value is written as text (true) or JSON (false); moved to the call */
    json_t *xml_keys;
    int32_t *ids; /* a token-id prompt, used instead of prompt_text */
    size_t n_ids;
    /* choice 0's job: the prompts after the first (lp_prepare_text), each
     * moved to its own job by lp_start */
    struct lp_prompt *more_prompts;
    size_t n_more_prompts;
    struct le_sampling sp;
    char **stops;
    size_t n_stops;
    int32_t *bias_id; /* logit_bias (sp points here; clones borrow it) */
    float *bias;
    struct le_grammar *grammar; /* response_format / tools; NULL: text */
    int raw; /* /v1/completions: the prompt as text, specials not parsed */
    /* /v1/completions max_tokens 0 (with echo): the prompt scored, no
     * token generated (le_sched_req.prompt_only) */
    int prompt_only;
    /* /v1/embeddings (embed_thread): the inputs (owned), then under mu
     * their n_inputs x n_embd vectors and the exact token count */
    char **inputs;
    size_t n_inputs;
    float *vecs;
    int n_embd;
    int64_t embed_tokens;
    /* A request refused before it reached the engine (done from the
     * start): the status, code and parameter for the error body. */
    int http_status;
    char err_code[48];
    char err_param[96];
    /* logprobs: true (chat): on_logprob records each sampled token's */
    int want_lp;
    int top_lp; /* top_logprobs: alternatives reported with each token */
    /* /v1/completions echo: the answer's text starts with echo_text (the
     * prompt's, as given or, for token ids, detokenized); with want_lp
     * the prompt's tokens (pids, kept by submit_job) come first in the
     * logprobs, their figures from on_prompt_logprob (plps[i] is
     * pids[i + 1]'s).  Set on the worker before submission. */
    int echo;
    char *echo_text;
    size_t echo_len;
    int32_t *pids;
    size_t n_pids;
    /* Output, under mu. */
    struct le_logprob *lps; /* want_lp: the sampled tokens', in order */
    size_t n_lps, cap_lps;
    struct le_logprob *plps; /* echo + want_lp, a prompt's first job
                                (prompt_job): the prompt's, in order */
    size_t n_plps, cap_plps;
    int lp_failed; /* out of memory recording one: the job is cancelled */
    struct gx_buf text;
    /* a reasoning model's chat answer: its tokens up to the end of the
     * reasoning (on_token follows the split) */
    struct pv_think tk;
    int64_t reasoning_tokens;
    int done;
    enum le_status st;
    struct le_gen_result res;
    char err[256];
};

/* What makes two local instances the same engine: a reload whose
 * provider has the same key shares the running instance. */
struct lp_key {
    char *model_path;
    dev_t dev;       /* the file as it was opened: a model replaced on */
    ino_t ino;       /* disk under the same path is a new instance */
    off_t size;
    struct timespec mtime;
    int threads, context, parallel, queue, prefix_cache, prefill_chunk;
};

/* One local provider's instance (a pv_inst): its model and scheduler.
 * Referenced by the registries of the configs that have it and by every
 * call on it (lp_call.e); jobs do not hold it (the call does while they
 * matter, and lp_inst_free waits for the scheduler and embed threads
 * before the model goes). */
struct lp_engine {
    struct pv_inst head; /* first: a struct pv_inst * is a lp_engine * */
    struct lp_key key;
    struct le_model *model;
    struct le_token_trie *trie; /* the model's pieces, for grammars */
    struct le_sched *sched;
    _Atomic int embedding; /* embed_thread()s running on the model */
    atomic_int abort;      /* set when freed: running work stops */
};

/* tool_choice, as the output is shaped (see the README): NONE text only;
 * AUTO text, or a call when the output starts with the call format's
 * first byte; REQUIRED and NAMED always a call. */
enum lp_tools { LP_TOOLS_NONE = 0, LP_TOOLS_AUTO, LP_TOOLS_REQUIRED,
                LP_TOOLS_NAMED };

/* The wrapper tool calls are generated in (the grammar forces it), in the
 * model's tool format (le_model_chat_tools): OPEN, then each call as
 * PREFIX NAME MID ARGUMENTS SUFFIX with SEP between two, then CLOSE.
 * `first` is the first byte: with tool_choice auto an output starting
 * with it is a call, and free text may not start with it. */
struct lp_callfmt {
    enum le_chat_tools kind;
    const char *prefix, *mid, *suffix;
    char first;
    /* several calls in one answer (parallel_tool_calls): at most
     * max_calls, with sep between them ('\n' as Qwen2.5's template writes
     * an assistant turn's calls, ", " in mistral's list).  1 for llama3
     * (Llama 3.1's ipython turn has one call) and for the JSON wrapper: no
     * model is trained on it, and one that is not (stories260K, measured)
     * goes on after its call where a trained one ends its turn, which the
     * grammar would turn into more calls, up to the cap. */
    int max_calls;
    const char *open, *sep, *close;
    /* mistral: what follows its markers ([AVAILABLE_TOOLS], [TOOL_CALLS],
     * [TOOL_RESULTS]) before the JSON: " ", or "" in the tekken
     * templates */
    const char *msp;
    /* what a text answer opens with, not part of its content (harmony's
     * "final<|message|>" after the prompt's "<|channel|>"); "" for the
     * others, whose text may be anything not starting with `first` */
    const char *text_open;
};
#define LP_MAX_CALLS 8
static const struct lp_callfmt lp_callfmts[] = {
    [LE_TOOLS_JSON] = {LE_TOOLS_JSON, "{\"name\": \"", "\", \"arguments\": ",
                       "}", '{', 1, "", "", "", "", ""},
    [LE_TOOLS_HERMES] = {LE_TOOLS_HERMES, "<tool_call>\n{\"name\": \"",
                         "\", \"arguments\": ", "}\n</tool_call>", '<',
                         LP_MAX_CALLS, "", "\n", "", "", ""},
    [LE_TOOLS_LLAMA3] = {LE_TOOLS_LLAMA3, "{\"name\": \"",
                         "\", \"parameters\": ", "}", '{', 1, "", "", "",
                         "", ""},
    /* [TOOL_CALLS] is one control token in Mistral's vocabularies; the
     * engine gives its text (le_model keep_tok), so the grammar can take
     * it as the model was trained to write it */
    [LE_TOOLS_MISTRAL] = {LE_TOOLS_MISTRAL, "{\"name\": \"",
                          "\", \"arguments\": ", "}", '[', LP_MAX_CALLS,
                          "[TOOL_CALLS] [", ", ", "]", " ", ""},
    /* v11 (Small 3.1+): each call [TOOL_CALLS]NAME[ARGS]{...}, one after
     * another with nothing between them; both markers are control tokens
     * the engine gives as text */
    [LE_TOOLS_MISTRAL_V11] = {LE_TOOLS_MISTRAL_V11, "[TOOL_CALLS]", "[ARGS]",
                              "", '[', LP_MAX_CALLS, "", "", "", "", ""},
    /* Small 3.2: [TOOL_CALLS]NAME[CALL_ID] then the model's 9-character
     * id and [ARGS] (call_head skips them), then the arguments */
    [LE_TOOLS_MISTRAL_CALL_ID] = {LE_TOOLS_MISTRAL_CALL_ID, "[TOOL_CALLS]",
                                  "[CALL_ID]", "", '[', LP_MAX_CALLS, "",
                                  "", "", "", ""},
    /* DeepSeek V3 / R1: the calls between their markers, each with its
     * type and name and the arguments in a ```json fence, "\n" between
     * two (as the templates write an answer's calls); the markers are
     * single tokens the engine gives as text */
    [LE_TOOLS_DEEPSEEK] = {LE_TOOLS_DEEPSEEK,
                           LE_DS_CALL_BEGIN "function" LE_DS_SEP,
                           "\n```json\n", "\n```" LE_DS_CALL_END, '<',
                           LP_MAX_CALLS, LE_DS_CALLS_BEGIN, "\n",
                           LE_DS_CALLS_END, "", ""},
    /* DeepSeek V3.1: each call between its markers, the name, the
     * separator and the arguments' JSON, nothing between two (its model
     * card: "chain them directly without separators or spaces") */
    [LE_TOOLS_DEEPSEEK31] = {LE_TOOLS_DEEPSEEK31, LE_DS_CALL_BEGIN,
                             LE_DS_SEP, LE_DS_CALL_END, '<', LP_MAX_CALLS,
                             LE_DS_CALLS_BEGIN, "", LE_DS_CALLS_END, "", ""},
    /* GLM-4.7-Flash: <tool_call>NAME, then its arguments as XML pairs
     * <arg_key>K</arg_key><arg_value>V</arg_value> (V a text parameter's
     * text, else its JSON), nothing between two calls; the arguments are
     * returned as the JSON object they stand for (pv_xml_args_json) */
    [LE_TOOLS_GLM] = {LE_TOOLS_GLM, "<tool_call>", "", "</tool_call>", '<',
                      LP_MAX_CALLS, "", "", "", "", ""},
    /* Qwen3-Coder: <tool_call>\n<function=NAME>\n, its arguments as
     * <parameter=K>\nV\n</parameter>\n each, </function>\n</tool_call>,
     * "\n" between two calls, as its template writes an answer's */
    [LE_TOOLS_QWEN3_CODER] = {LE_TOOLS_QWEN3_CODER,
                              "<tool_call>\n<function=", ">\n",
                              "</function>\n</tool_call>", '<',
                              LP_MAX_CALLS, "", "\n", "", "", ""},
    /* Kimi K2: the calls inside their section's markers, each
     * functions.NAME:N (N the model's count; call_head skips it and the
     * argument marker), nothing between two; the markers are single
     * tokens the engine gives as text */
    [LE_TOOLS_KIMI] = {LE_TOOLS_KIMI, LE_KIMI_CALL_BEGIN "functions.", ":",
                       LE_KIMI_CALL_END, '<', LP_MAX_CALLS,
                       LE_KIMI_CALLS_BEGIN, "", LE_KIMI_CALLS_END, "", ""},
    /* harmony (gpt-oss): after the prompt's "<|channel|>", a call is a
     * commentary message to the function with its arguments as JSON (one
     * a message: the model ends it with <|call|>), a text answer the
     * final channel's message */
    [LE_TOOLS_HARMONY] = {LE_TOOLS_HARMONY, "commentary to=functions.",
                          " <|constrain|>json<|message|>", "", 'c', 1, "",
                          "", "", "", "final<|message|>"},
    /* Granite 4.x: hermes's calls, "\n" between two as its template
     * writes an assistant turn's */
    [LE_TOOLS_GRANITE] = {LE_TOOLS_GRANITE, "<tool_call>\n{\"name\": \"",
                          "\", \"arguments\": ", "}\n</tool_call>", '<',
                          LP_MAX_CALLS, "", "\n", "", "", ""},
    /* Granite 3.x: a JSON list after <|tool_call|> (a control token in
     * its vocabulary, which the engine gives as text) */
    [LE_TOOLS_GRANITE3] = {LE_TOOLS_GRANITE3, "{\"name\": \"",
                           "\", \"arguments\": ", "}", '<', LP_MAX_CALLS,
                           "<|tool_call|>[", ", ", "]", "", ""},
};
/* the same in the tekken templates (Nemo, Small 3): no space after the
 * markers */
static const struct lp_callfmt lp_mistral_tekken = {
    LE_TOOLS_MISTRAL, "{\"name\": \"", "\", \"arguments\": ", "}", '[',
    LP_MAX_CALLS, "[TOOL_CALLS][", ", ", "]", "", ""};

/* The XML argument format of f's calls (tool_args.c), or NULL: JSON */
static const struct pv_xml_fmt *
xml_of(const struct lp_callfmt *f)
{
    return f->kind == LE_TOOLS_GLM           ? &pv_xml_glm
           : f->kind == LE_TOOLS_QWEN3_CODER ? &pv_xml_qwen3_coder
                                             : NULL;
}

static const struct lp_callfmt *
callfmt_of(const struct le_model *m)
{
    enum le_chat_tools k = le_model_chat_tools(m);
    if (k == LE_TOOLS_MISTRAL &&
        le_chat_is_tekken(le_model_chat_template(m)))
        return &lp_mistral_tekken;
    return &lp_callfmts[k];
}

/* mistral's formats (v3 and v11): the tools before the last user turn,
 * calls and results as turns of their own */
static int
is_mistral_fmt(const struct lp_callfmt *f)
{
    return f->kind == LE_TOOLS_MISTRAL || f->kind == LE_TOOLS_MISTRAL_V11 ||
           f->kind == LE_TOOLS_MISTRAL_CALL_ID;
}

/* A tool-call output read as it grows (call_head, pv_json_end,
 * call_next): the call at acc offset `head`, its arguments from
 * args_start (0: its head is not complete yet) to js.end (0: not yet
 * seen), their JSON value scanned up to js.scan. */
struct lp_calls {
    int n;               /* calls whose head is complete */
    size_t head, args_start;
    struct pv_jend js;   /* the arguments' JSON: js.end once closed */
    char name[128];      /* the current call's */
    /* mistral-call-id: the id the model wrote for each call, returned as
     * "call_" + it so that the next turn writes the answer back as it was
     * generated (mistral_id); "" when it repeats an earlier call's
     * (llmux's own id then) */
    char ids[LP_MAX_CALLS][10];
};

/* One choice's output on the worker (n > 1: one per choice). */
struct lp_choice {
    struct gx_buf acc;   /* non-stream text, or tool modes' output so far */
    int shape;           /* tool modes: 0 undecided, 1 text, 2 tool call */
    struct lp_calls cs;  /* stream, shape 2: the calls read so far */
    size_t args_sent;    /* stream: bytes of the text, or of the current
                            call's arguments, sent */
    int sent_role;       /* stream: its role delta went out */
    int ended;           /* stream: its finish_reason went out */
    char call_id[80];
    size_t raw_seen;     /* bytes of engine text taken (before repair) */
    size_t lp_next;      /* logprobs: the first entry not yet sent */
    size_t lp_open;      /* logprobs: bytes of the format's text_open
                            whose tokens were left out (not content) */
    int64_t lp_chars;    /* /v1/completions: characters of those before */
    int echoed;          /* stream, echo: the prompt's chunk went out */
    struct pv_think tk;  /* a reasoning answer's split (lc->think) */
    struct gx_buf racc;  /* non-stream: its reasoning */
    struct pv_xml_read xr; /* stream, XML formats: the current call's */
    struct gx_buf xjs;     /* arguments read so far, and their JSON */
};

/* The worker side of a call. */
struct lp_call {
    struct lp_engine *e; /* its instance (a reference) */
    struct lp_job *job;
    int n_more;                         /* n - 1 */
    struct lp_job *more[LP_N_MAX - 1];  /* choices 1..n-1 */
    struct lp_choice ch[LP_N_MAX];      /* choice k's output */
    enum lp_tools tools;
    const struct lp_callfmt *fmt; /* its model's tool-call format */
    int stream;
    int text_api; /* /v1/completions: text_completion objects */
    int embed;    /* /v1/embeddings (embed_thread) */
    int b64;      /* its encoding_format base64 */
    int client_include_usage;
    int think; /* le_chat_reasoning's mode for this answer, 0: none */
    json_t *xml_keys; /* XML formats: its job's (lp_job.xml_keys), owned */
    char id[96];
    char model[128];
    int64_t created;
    struct gx_buf body; /* non-stream: the answer (or error) body */
    struct event *timer; /* first-byte, then total timeout */
    int64_t deadline_us; /* total timeout, monotonic */
    int got_text;
};

static void
job_unref(struct lp_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&j->mu);
    free(j->prompt_text);
    json_decref(j->xml_keys);
    free(j->ids);
    for (size_t i = 0; i < j->n_more_prompts; i++) {
        free(j->more_prompts[i].text);
        free(j->more_prompts[i].ids);
    }
    free(j->more_prompts);
    for (size_t i = 0; i < j->n_inputs; i++)
        free(j->inputs[i]);
    free(j->inputs);
    free(j->vecs);
    le_grammar_free(j->grammar);
    for (size_t i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stops);
    gx_buf_cleanup(&j->text);
    free(j->lps);
    free(j->plps);
    free(j->echo_text);
    free(j->pids);
    free(j->bias_id);
    free(j->bias);
    struct lp_job *parent = j->parent;
    free(j);
    if (parent)
        job_unref(parent);
}

/* ---- engine threads ---------------------------------------------------- */

static int
on_token(void *ud, int32_t id, const char *text, size_t len)
{
    (void)id;
    struct lp_job *j = ud;
    if (atomic_load(&j->e->abort))
        return 1;
    pthread_mutex_lock(&j->mu);
    int stop = j->cancelled || j->lp_failed;
    if (!stop && j->tk.mode) {
        int before = j->tk.state;
        pv_think_feed(&j->tk, text, len, NULL, NULL, 0);
        /* the reasoning's tokens: inside it, or opening or ending it */
        int after = j->tk.state;
        if (before == 1 || before == 4 || after == 1 || after == 4 ||
            (before == 0 && after == 2))
            j->reasoning_tokens++;
    }
    if (!stop && len) {
        if (gx_buf_append(&j->text, text, len) == GX_OK)
            event_active(j->ev, EV_READ, 0);
        else
            stop = 1;
    }
    pthread_mutex_unlock(&j->mu);
    return stop;
}

/* Appends lp to one of j's lists (scheduler thread). */
static void
lp_push(struct lp_job *j, struct le_logprob **a, size_t *n, size_t *cap,
        const struct le_logprob *lp)
{
    pthread_mutex_lock(&j->mu);
    if (*n == *cap && !j->lp_failed) {
        size_t c = *cap ? 2 * *cap : 64;
        struct le_logprob *na = realloc(*a, c * sizeof(*na));
        if (na) {
            *a = na;
            *cap = c;
        } else {
            j->lp_failed = 1; /* on_token cancels the job */
        }
    }
    if (*n < *cap)
        (*a)[(*n)++] = *lp;
    pthread_mutex_unlock(&j->mu);
}

/* Each sampled token's log-probabilities (scheduler thread), before its
 * text reaches on_token. */
static void
on_logprob(void *ud, const struct le_logprob *lp)
{
    struct lp_job *j = ud;
    lp_push(j, &j->lps, &j->n_lps, &j->cap_lps, lp);
}

/* echo: each prompt token's (from the second), all before the first
 * sampled token's.  The last one wakes the worker: the prompt's other
 * choices (clones) may be waiting for these figures (prompt_lps_in). */
static void
on_prompt_logprob(void *ud, const struct le_logprob *lp)
{
    struct lp_job *j = ud;
    lp_push(j, &j->plps, &j->n_plps, &j->cap_plps, lp);
    pthread_mutex_lock(&j->mu);
    if (j->n_plps + 1 == j->n_pids && !j->cancelled)
        event_active(j->ev, EV_READ, 0);
    pthread_mutex_unlock(&j->mu);
}

/* The scheduler's end of a job (its thread): the result, then its ref. */
static void
on_done(void *ud, enum le_status st, const struct le_gen_result *res,
        const char *err)
{
    struct lp_job *j = ud;
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    j->st = st;
    j->res = *res;
    snprintf(j->err, sizeof(j->err), "%s", err ? err : "");
    if (!j->cancelled)
        event_active(j->ev, EV_READ, 0);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

/* The text of token id (special tokens: none) into buf[0..cap); its
 * length (0 when longer: no vocabulary's piece is that long). */
static size_t
piece_of(const struct le_model *m, int32_t id, char *buf, size_t cap)
{
    size_t n = le_model_token_to_piece(m, id, 0, buf, cap);
    return n > cap ? 0 : n;
}

/* 1 when m's tokenizer puts a space before a text (SentencePiece's
 * prefix: "a" becomes the piece " a"), whose first text token then
 * carries a space that is the tokenizer's, not the text's. */
static int
space_prefixed(const struct le_model *m)
{
    int32_t ids[4];
    char b[8];
    int64_t n = le_model_tokenize(m, "a", 1, 0, 0, ids, 4);
    return n == 1 && piece_of(m, ids[0], b, sizeof(b)) == 2 &&
           !memcmp(b, " a", 2);
}

/* The number of leading bytes of piece (the text of prompt token i) that
 * the echo leaves out: the prefix space of the prompt's first text token
 * (*seen_text: a token with text came before). */
static size_t
echo_skip(int prefixed, int *seen_text, const char *piece, size_t n)
{
    size_t skip = prefixed && !*seen_text && n && piece[0] == ' ';
    *seen_text |= n > 0;
    return skip;
}

/* echo (worker thread, before submission): j keeps the prompt's ids and
 * its text, src's as given (a text prompt) or its tokens' text (token
 * ids; each token's as its logprobs entry shows it, repaired to UTF-8).
 * 0, or -1 out of memory. */
static int
echo_prepare(const struct le_model *m, struct lp_job *j,
             const struct lp_job *src, const int32_t *ids, size_t n)
{
    if (!(j->pids = malloc((n ? n : 1) * sizeof(*j->pids))))
        return -1;
    memcpy(j->pids, ids, n * sizeof(*ids));
    j->n_pids = n;
    struct gx_buf t;
    gx_buf_init(&t, 64 * 1024 * 1024);
    if (src->prompt_text) {
        gx_buf_append(&t, src->prompt_text, strlen(src->prompt_text));
    } else {
        int prefixed = space_prefixed(m), seen = 0;
        for (size_t i = 0; i < n; i++) {
            char b[256];
            size_t pl = piece_of(m, ids[i], b, sizeof(b));
            size_t skip = echo_skip(prefixed, &seen, b, pl);
            gx_buf_append(&t, b + skip, pl - skip);
        }
        pv_utf8_repair(&t);
    }
    j->echo_len = t.len;
    j->echo_text = malloc(t.len + 1);
    if (j->echo_text) {
        memcpy(j->echo_text, t.data ? t.data : "", t.len);
        j->echo_text[t.len] = '\0';
    }
    gx_buf_cleanup(&t);
    return j->echo_text ? 0 : -1;
}

/* The job that owns j's prompt: j itself, or, for a clone (choices
 * 1.. of a prompt), the prompt's first job, which alone computes the
 * prompt's log-probabilities for all of them (echo + logprobs). */
static struct lp_job *
prompt_job(struct lp_job *j)
{
    while (!j->prompt_text && !j->ids && j->parent)
        j = j->parent;
    return j;
}

/* 1 once every prompt figure of j (a prompt job) is in, or it ended. */
static int
prompt_lps_in(struct lp_job *j)
{
    pthread_mutex_lock(&j->mu);
    int in = j->done || j->n_plps + 1 >= j->n_pids;
    pthread_mutex_unlock(&j->mu);
    return in;
}

/* Tokenizes the job's prompt and hands it to the scheduler (worker
 * thread).  LE_OK: the scheduler holds a ref and will call on_done.
 * Otherwise the job is the worker's alone and err says why. */
static enum le_status
submit_job(struct lp_engine *e, struct lp_job *j, char *err, size_t errlen)
{
    /* the prompt: the nearest job up the chain that has one; the stops
     * and grammar: the top's (choice 0) */
    const struct lp_job *src = prompt_job(j), *top = j;
    while (top->parent)
        top = top->parent;
    int64_t n = (int64_t)src->n_ids;
    int32_t *ids = NULL;
    if (src->ids) {
        ids = malloc(src->n_ids * sizeof(*ids));
        if (ids)
            memcpy(ids, src->ids, src->n_ids * sizeof(*ids));
    } else {
        size_t len = strlen(src->prompt_text);
        int special = !top->raw;
        n = le_model_tokenize(e->model, src->prompt_text, len, 1, special,
                              NULL, 0);
        if (n < 0) {
            snprintf(err, errlen, "the prompt could not be tokenized");
            return LE_EINVAL;
        }
        ids = malloc(((size_t)n + 1) * sizeof(*ids));
        if (ids)
            le_model_tokenize(e->model, src->prompt_text, len, 1, special,
                              ids, (size_t)n);
    }
    if (!ids) {
        snprintf(err, errlen, "out of memory tokenizing the prompt");
        return LE_ENOMEM;
    }
    /* Without max_tokens: what the context leaves, capped. */
    if (j->sp.max_tokens <= 0 && !j->prompt_only) {
        int room = le_model_n_ctx(e->model) - (int)n;
        j->sp.max_tokens = room < LP_DEFAULT_MAX_TOKENS
                               ? (room > 0 ? room : 1)
                               : LP_DEFAULT_MAX_TOKENS;
    }
    j->sp.stop = (const char *const *)top->stops;
    j->sp.n_stop = top->n_stops;
    j->sp.grammar = top->grammar;
    j->sp.trie = e->trie;
    if (j->echo && echo_prepare(e->model, j, src, ids, (size_t)n) != 0) {
        free(ids);
        snprintf(err, errlen, "out of memory echoing the prompt");
        return LE_ENOMEM;
    }
    /* echo + logprobs: the prompt's figures from its first job only;
     * its clones reuse them, and so its cells too (the scheduler lets
     * them wait for its prefill and copy its cells, which a request
     * asking for figures never does), so the prompt runs once */
    struct le_sched_req q = {ids,     (size_t)n, &j->sp, on_token,
                             on_done, j,         &j->stop, &j->paused,
                             j->want_lp ? on_logprob : NULL,
                             j->echo && j->want_lp && src == j
                                 ? on_prompt_logprob
                                 : NULL,
                             j->prompt_only};
    j->refs++; /* the scheduler's, if it takes the job */
    enum le_status st = le_sched_submit(e->sched, &q, err, errlen);
    if (st != LE_OK)
        j->refs--;
    free(ids);
    return st;
}

/* /v1/embeddings: one thread per request, beside the scheduler (the
 * model's pool runs one product at a time, so they interleave safely);
 * each input tokenized raw and embedded by le_model_embed. */
static void *
embed_thread(void *arg)
{
    struct lp_job *j = arg;
    struct lp_engine *e = j->e;
    int E = le_model_n_embd(e->model);
    float *vecs = malloc((size_t)E * (j->n_inputs ? j->n_inputs : 1) *
                         sizeof(*vecs));
    enum le_status st = vecs ? LE_OK : LE_ENOMEM;
    char err[256] = "";
    int64_t tokens = 0;
    for (size_t i = 0; st == LE_OK && i < j->n_inputs; i++) {
        if (atomic_load(&e->abort) || atomic_load(&j->stop)) {
            st = LE_ECANCELED;
            break;
        }
        size_t len = strlen(j->inputs[i]);
        int64_t n = le_model_tokenize(e->model, j->inputs[i], len, 1, 0,
                                      NULL, 0);
        int32_t *ids = n > 0 ? malloc((size_t)n * sizeof(*ids)) : NULL;
        if (!ids) {
            st = n > 0 ? LE_ENOMEM : LE_EINVAL;
            snprintf(err, sizeof(err), "input %zu could not be tokenized",
                     i);
            break;
        }
        le_model_tokenize(e->model, j->inputs[i], len, 1, 0, ids, (size_t)n);
        st = le_model_embed(e->model, ids, (size_t)n, vecs + i * (size_t)E,
                            err, sizeof(err));
        if (st == LE_ECONTEXT)
            snprintf(err, sizeof(err),
                     "input %zu has %lld tokens; the local model's context "
                     "is %d",
                     i, (long long)n, (int)le_model_n_ctx(e->model));
        tokens += n;
        free(ids);
    }
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    j->st = st;
    j->vecs = st == LE_OK ? vecs : NULL;
    j->n_embd = E;
    j->embed_tokens = tokens;
    j->res.prompt_tokens = (int)tokens;
    snprintf(j->err, sizeof(j->err), "%s", err);
    if (!j->cancelled)
        event_active(j->ev, EV_READ, 0);
    pthread_mutex_unlock(&j->mu);
    if (st != LE_OK)
        free(vecs);
    atomic_fetch_sub(&e->embedding, 1);
    job_unref(j);
    return NULL;
}

/* Starts embed_thread on j (LE_OK: it holds a ref). */
static enum le_status
submit_embed(struct lp_engine *e, struct lp_job *j, char *err, size_t errlen)
{
    j->e = e;
    j->refs++;
    atomic_fetch_add(&e->embedding, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, embed_thread, j) != 0) {
        j->refs--;
        atomic_fetch_sub(&e->embedding, 1);
        snprintf(err, errlen, "could not start the embedding thread");
        return LE_ENOMEM;
    }
    pthread_detach(t);
    return LE_OK;
}

/* ---- instances (pv_ops.inst_new / inst_free) ------------------------- */

static void
lp_key_cleanup(struct lp_key *k)
{
    free(k->model_path);
    k->model_path = NULL;
}

/* p's key, with the model file's identity from stat(2). */
static enum gx_status
lp_key_of(const struct cfg_provider *p, struct lp_key *k, char *err,
          size_t errlen)
{
    memset(k, 0, sizeof(*k));
    struct stat sb;
    if (!p->model_path || !p->model_path[0]) {
        gx_errf(err, errlen, "model_path is empty");
        return GX_EINVAL;
    }
    if (stat(p->model_path, &sb) != 0) {
        gx_errf(err, errlen, "model_path %s: %s", p->model_path,
                strerror(errno));
        return GX_EINVAL;
    }
    if (!(k->model_path = strdup(p->model_path))) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    k->dev = sb.st_dev;
    k->ino = sb.st_ino;
    k->size = sb.st_size;
    k->mtime = sb.st_mtim;
    k->threads = p->threads;
    k->context = p->context;
    k->parallel = p->parallel;
    k->queue = p->queue;
    k->prefix_cache = p->prefix_cache;
    k->prefill_chunk = p->prefill_chunk;
    return GX_OK;
}

static int
lp_key_same(const struct lp_key *a, const struct lp_key *b)
{
    return !strcmp(a->model_path, b->model_path) && a->dev == b->dev &&
           a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->threads == b->threads &&
           a->context == b->context && a->parallel == b->parallel &&
           a->queue == b->queue && a->prefix_cache == b->prefix_cache &&
           a->prefill_chunk == b->prefill_chunk;
}

/* Stops e's work and frees it: the scheduler (its in-flight jobs end as
 * cancelled: on_done drops their refs), then the embed threads (they see
 * abort), then the model.  On the reaper thread, or inline when no thread
 * could be started. */
static void
lp_engine_destroy(struct lp_engine *e)
{
    atomic_store(&e->abort, 1);
    le_sched_free(e->sched);
    while (atomic_load(&e->embedding) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    le_token_trie_free(e->trie);
    if (e->model)
        GX_LOG(GX_LOG_INFO, NULL, "provider %s: local engine stopped (%s)",
               e->head.name, le_model_desc(e->model));
    le_model_free(e->model);
    lp_key_cleanup(&e->key);
    free(e);
    pv_inst_gone();
}

static void *
lp_reaper(void *arg)
{
    lp_engine_destroy(arg);
    return NULL;
}

/* The last reference went (a worker, the main thread, any thread): the
 * scheduler's join waits for its current step, so it runs on a thread of
 * its own rather than stall an event loop. */
static void
lp_inst_free(struct pv_inst *inst)
{
    struct lp_engine *e = (struct lp_engine *)inst;
    pthread_attr_t a;
    pthread_t t;
    int started = 0;
    if (pthread_attr_init(&a) == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &a, lp_reaper, e) == 0;
        pthread_attr_destroy(&a);
    }
    if (!started)
        lp_engine_destroy(e);
}

/* Opens p's model and starts its scheduler, or shares prev when p would
 * make the same engine. */
static enum gx_status
lp_inst_new(const struct cfg_provider *p, struct pv_inst *prev,
            struct pv_inst **out, char *err, size_t errlen)
{
    struct lp_key key;
    enum gx_status st = lp_key_of(p, &key, err, errlen);
    if (st != GX_OK)
        return st;
    struct lp_engine *old = (struct lp_engine *)prev;
    if (old && lp_key_same(&old->key, &key)) {
        lp_key_cleanup(&key);
        pv_inst_ref(prev);
        *out = prev;
        return GX_OK;
    }
    struct lp_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        lp_key_cleanup(&key);
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    pv_inst_init(&e->head, &pv_local_ops, p->name);
    e->key = key;
    st = GX_EINVAL;
    struct le_model_params mp;
    le_model_params_default(&mp);
    mp.n_threads = p->threads > 0 ? p->threads : 1;
    mp.n_ctx = p->context;
    char lerr[512] = "";
    if (le_model_open(p->model_path, &mp, &e->model, lerr, sizeof(lerr)) !=
        LE_OK) {
        gx_errf(err, errlen, "%s", lerr);
        goto out;
    }
    if (le_token_trie_new(e->model, &e->trie) != LE_OK) {
        gx_errf(err, errlen, "out of memory");
        st = GX_ENOMEM;
        goto out;
    }
    struct le_sched_params sp;
    le_sched_params_default(&sp);
    sp.parallel = p->parallel > 0 ? p->parallel : 1;
    sp.max_queue = p->queue;
    sp.cache_seqs = p->prefix_cache;
    sp.chunk = p->prefill_chunk;
    if (le_sched_new(e->model, &sp, &e->sched, lerr, sizeof(lerr)) !=
        LE_OK) {
        gx_errf(err, errlen, "%s", lerr);
        goto out;
    }
    /* the formats found in its chat template: what a wrong prompt or a
     * tool call in the wrong wrapper would be traced back to */
    GX_LOG(GX_LOG_INFO, NULL,
           "provider %s: %s, chat template %s, tool calls %s, %d "
           "parallel%s",
           p->name, le_model_desc(e->model),
           le_chat_template_name(le_model_chat_template(e->model)),
           le_chat_tools_name(le_model_chat_tools(e->model)), sp.parallel,
           old ? " (replaces the running instance)" : "");
    *out = &e->head;
    return GX_OK;
out:
    lp_engine_destroy(e); /* nothing else holds it: at once */
    return st;
}

/* ---- worker side ----------------------------------------------------- */

static const char *
finish_reason(enum le_finish f)
{
    return f == LE_FINISH_LENGTH ? "length" : "stop";
}

/* One chunk: choice k's delta (taken; NULL for none), its logprobs
 * (taken; NULL: null) and finish_reason, or, with neither delta nor
 * finish, an empty choices list (the usage chunk). */
static void
emit_chunk(struct pv_call *call, struct lp_call *lc, int k, json_t *delta,
           json_t *lp, const char *finish, json_t *usage)
{
    json_t *choices = json_array();
    if (lc->text_api && (delta || finish)) {
        const json_t *t = json_object_get(delta, "content");
        json_array_append_new(
            choices, json_pack("{s:i,s:s%,s:o,s:o}", "index", k, "text",
                               t ? json_string_value(t) : "",
                               t ? json_string_length(t) : 0,
                               "finish_reason",
                               finish ? json_string(finish) : json_null(),
                               "logprobs", lp ? lp : json_null()));
        lp = NULL;
        json_decref(delta);
    } else if (delta || finish) {
        json_t *ch = json_pack("{s:i,s:o,s:o,s:o}", "index", k, "delta",
                               delta ? delta : json_object(), "finish_reason",
                               finish ? json_string(finish) : json_null(),
                               "logprobs", lp ? lp : json_null());
        lp = NULL;
        json_array_append_new(choices, ch);
    } else if (delta) {
        json_decref(delta);
    }
    json_decref(lp);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", lc->id, "object",
                          lc->text_api ? "text_completion"
                                       : "chat.completion.chunk",
                          "created",
                          (json_int_t)lc->created, "model", lc->model,
                          "choices", choices);
    if (usage)
        json_object_set_new(o, "usage", usage);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (t)
        pv_call_emit_event(call, t, strlen(t));
    free(t);
    json_decref(o);
}

/* think: a reasoning model's answer, rt of its tokens the reasoning's
 * (completion_tokens_details.reasoning_tokens, as OpenAI's) */
static json_t *
usage_json(const struct le_gen_result *r, int think, int64_t rt)
{
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens",
                          r->prompt_tokens, "completion_tokens",
                          r->completion_tokens, "total_tokens",
                          r->prompt_tokens + r->completion_tokens,
                          "prompt_tokens_details", "cached_tokens",
                          r->cached_tokens);
    if (u && think)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens",
                                      (json_int_t)rt));
    return u;
}

/*
 * Tool modes: what the output is.  The grammar makes a call always start
 * with the format's prefix, NAME and mid (the first after the format's
 * opening), then the arguments (one JSON value), then its suffix, and a
 * next call (parallel_tool_calls) follow after the format's separator.
 * So the name is known as soon as the mid has arrived, and the arguments
 * end where their JSON value closes (pv_json_end: no suffix can occur
 * inside, and nothing has to be held back).
 */
static void
shape_decide(const struct lp_call *lc, struct lp_choice *c)
{
    if (c->shape || !c->acc.len)
        return;
    c->shape =
        lc->tools == LP_TOOLS_AUTO && c->acc.data[0] != lc->fmt->first ? 1
                                                                       : 2;
}

/* Reads the next call of acc (format f) from cs->head: 1 with cs->name,
 * args_start set once its head is complete (cs->n counts it). */
static int
call_head(const struct lp_callfmt *f, struct lp_calls *cs, const char *acc,
          size_t len)
{
    size_t pl = strlen(f->prefix), h = cs->head;
    if (cs->n == 0) { /* the format's opening, before the first call */
        size_t ol = strlen(f->open);
        if (len < h + ol || memcmp(acc + h, f->open, ol))
            return 0;
        h += ol;
    }
    if (len < h + pl || memcmp(acc + h, f->prefix, pl))
        return 0;
    /* GLM's name ends at its arguments' (or closing) tag */
    const char *mid = f->kind == LE_TOOLS_GLM
                          ? memchr(acc + h + pl, '<', len - h - pl)
                          : memmem(acc + h + pl, len - h - pl, f->mid,
                                   strlen(f->mid));
    if (!mid)
        return 0;
    size_t nl = (size_t)(mid - acc) - h - pl;
    if (nl >= sizeof(cs->name))
        return 0;
    memcpy(cs->name, acc + h + pl, nl);
    cs->name[nl] = 0;
    size_t start = (size_t)(mid - acc) + strlen(f->mid);
    if (f->kind == LE_TOOLS_MISTRAL_CALL_ID) { /* the id, then [ARGS] */
        if (len < start + 15 || memcmp(acc + start + 9, "[ARGS]", 6))
            return 0; /* nothing set: the head is not complete yet */
        if (cs->n < LP_MAX_CALLS) {
            char *id = cs->ids[cs->n];
            memcpy(id, acc + start, 9);
            id[9] = 0;
            for (int i = 0; i < cs->n; i++)
                if (!strcmp(cs->ids[i], id))
                    id[0] = 0;
        }
        start += 15;
    }
    if (f->kind == LE_TOOLS_KIMI) { /* the call's number, then its marker */
        size_t al = strlen(LE_KIMI_ARGS_BEGIN);
        const char *a = memmem(acc + start, len - start, LE_KIMI_ARGS_BEGIN,
                               al);
        if (!a)
            return 0;
        start = (size_t)(a - acc) + al;
    }
    cs->args_start = start;
    memset(&cs->js, 0, sizeof(cs->js));
    cs->js.scan = cs->args_start;
    cs->n++;
    return 1;
}

/* After a call whose arguments have closed: 1 with cs->head at the next
 * call's prefix when acc goes on past this call's suffix with the
 * format's separator (not its closing). */
static int
call_next(const struct lp_callfmt *f, struct lp_calls *cs, const char *acc,
          size_t len)
{
    size_t sl = strlen(f->suffix), sepl = strlen(f->sep);
    const char *sx = len > cs->js.end
                         ? memmem(acc + cs->js.end, len - cs->js.end,
                                  f->suffix, sl)
                         : NULL;
    size_t next = sx ? (size_t)(sx - acc) + sl : len;
    if (!sepl && f->max_calls > 1) {
        /* calls one after another (v11): the next opens with the prefix */
        size_t pl = strlen(f->prefix);
        if (!sx || len < next + pl || memcmp(acc + next, f->prefix, pl))
            return 0;
    } else if (!sepl || len < next + sepl ||
               memcmp(acc + next, f->sep, sepl)) {
        return 0;
    }
    next += sepl;
    if (len <= next)
        return 0;
    cs->head = next;
    cs->args_start = 0;
    return 1;
}

/* Call i's id: "call_" + the one the model wrote (cs: mistral-call-id),
 * else choice's own (call_<request id>[_<choice>]) for the first, "-<i>"
 * after it for the later ones. */
static void
call_id_of(const struct lp_choice *c, const struct lp_calls *cs, int i,
           char *buf, size_t cap)
{
    if (i < LP_MAX_CALLS && cs->ids[i][0])
        snprintf(buf, cap, "call_%s", cs->ids[i]);
    else if (i == 0)
        snprintf(buf, cap, "%s", c->call_id);
    else
        snprintf(buf, cap, "%s-%d", c->call_id, i);
}

/* The logprobs of output that lists no content tokens (a tool call):
 * {"content": [], "refusal": null}, what an empty text answer has; NULL
 * when the request did not ask for logprobs. */
static json_t *
lp_none(const struct lp_job *j)
{
    return j->want_lp ? json_pack("{s:[],s:n}", "content", "refusal")
                      : NULL;
}

/* Choice k's delta of its call i (tool_calls index i): the head (name
 * given) or a piece of the arguments; with logprobs, lp_none (a call's
 * tokens are not content). */
static void
emit_tool_delta(struct pv_call *call, struct lp_call *lc, int k, int i,
                const struct lp_job *j, const char *name, const char *args,
                size_t args_len)
{
    json_t *fn = json_pack("{s:s%}", "arguments", args ? args : "", args_len);
    json_t *tc = json_pack("{s:i}", "index", i);
    if (name) {
        char id[96];
        call_id_of(&lc->ch[k], &lc->ch[k].cs, i, id, sizeof(id));
        json_object_set_new(fn, "name", json_string(name));
        json_object_set_new(tc, "id", json_string(id));
        json_object_set_new(tc, "type", json_string("function"));
    }
    json_object_set_new(tc, "function", fn);
    emit_chunk(call, lc, k, json_pack("{s:[o]}", "tool_calls", tc),
               lp_none(j), NULL, NULL);
}

static json_t *lp_content(const struct lp_call *lc, struct lp_job *j,
                          struct lp_choice *c);

/* Stream, tool mode: what of choice k's acc (of job j) can go out now
 * (final: the generation ended).  Text goes out with its tokens' logprobs
 * as without tools; each call as a head delta and then its arguments in
 * pieces as they arrive, none listing logprobs (lp_none). */
static void
stream_tool_output(struct pv_call *call, struct lp_call *lc, int k,
                   struct lp_job *j, int final)
{
    struct lp_choice *c = &lc->ch[k];
    struct lp_calls *cs = &c->cs;
    shape_decide(lc, c);
    if (c->shape == 1) {
        size_t to = strlen(lc->fmt->text_open); /* not content */
        if (c->args_sent < to)
            c->args_sent = c->acc.len < to ? c->acc.len : to;
        if (c->acc.len > c->args_sent)
            emit_chunk(call, lc, k,
                       json_pack("{s:s%}", "content",
                                 c->acc.data + c->args_sent,
                                 c->acc.len - c->args_sent),
                       lp_content(lc, j, c), NULL, NULL);
        c->args_sent = c->acc.len;
        return;
    }
    if (c->shape != 2)
        return;
    for (;;) {
        if (!cs->args_start) {
            if (call_head(lc->fmt, cs, c->acc.data, c->acc.len)) {
                emit_tool_delta(call, lc, k, cs->n - 1, j, cs->name, NULL,
                                0);
                c->args_sent = 0;
                memset(&c->xr, 0, sizeof(c->xr));
                gx_buf_reset(&c->xjs);
            } else {
                /* cut before the first call's name: as text (a later
                 * call's partial head is dropped) */
                if (final && cs->n == 0 && c->acc.len)
                    emit_chunk(call, lc, k,
                               json_pack("{s:s%}", "content", c->acc.data,
                                         c->acc.len),
                               lp_content(lc, j, c), NULL, NULL);
                return;
            }
        }
        if (xml_of(lc->fmt)) { /* its JSON, read on as it grows */
            struct gx_buf *js = &c->xjs;
            int closed = pv_xml_args_read(
                xml_of(lc->fmt), json_object_get(lc->xml_keys, cs->name),
                c->acc.data + cs->args_start, c->acc.len - cs->args_start,
                final, js, &c->xr);
            size_t end = js->len;
            if (closed)
                cs->js.end = cs->args_start + c->xr.end;
            else if (!final)
                end -= pv_utf8_partial(js->data, js->len);
            if (js->data && end > c->args_sent) {
                emit_tool_delta(call, lc, k, cs->n - 1, j, NULL,
                                js->data + c->args_sent, end - c->args_sent);
                c->args_sent = end;
            }
            if (!closed || !call_next(lc->fmt, cs, c->acc.data, c->acc.len))
                return;
            continue;
        }
        int closed = cs->js.end ||
                     pv_json_end(&cs->js, c->acc.data, c->acc.len, final);
        /* the arguments so far; acc is UTF-8 (job_take repairs it): the
         * cut moves back to a character's first byte, or the delta would
         * not be a JSON string (and the arguments would lose the split
         * character) */
        size_t end = closed ? cs->js.end : final ? c->acc.len : cs->js.scan;
        while (!closed && end > cs->args_start && end < c->acc.len &&
               ((unsigned char)c->acc.data[end] & 0xC0) == 0x80)
            end--;
        size_t from = cs->args_start + c->args_sent;
        if (end > from) {
            emit_tool_delta(call, lc, k, cs->n - 1, j, NULL,
                            c->acc.data + from, end - from);
            c->args_sent += end - from;
        }
        if (!closed || !call_next(lc->fmt, cs, c->acc.data, c->acc.len))
            return;
    }
}

/* The non-stream message object of choice c in a tool mode; *finish set. */
static json_t *
tool_message(const struct lp_call *lc, struct lp_choice *c, int complete,
             const char **finish)
{
    shape_decide(lc, c);
    struct lp_calls cs = {0};
    json_t *calls = json_array();
    while (c->shape == 2 && calls &&
           call_head(lc->fmt, &cs, c->acc.data, c->acc.len)) {
        int closed;
        size_t end;
        struct gx_buf js;
        gx_buf_init(&js, 0);
        if (xml_of(lc->fmt)) { /* its XML's JSON */
            size_t xe = 0;
            closed = pv_xml_args_json(xml_of(lc->fmt),
                                      json_object_get(lc->xml_keys, cs.name),
                                      c->acc.data + cs.args_start,
                                      c->acc.len - cs.args_start, 1, &js,
                                      &xe);
            cs.js.end = cs.args_start + xe;
        } else {
            closed = pv_json_end(&cs.js, c->acc.data, c->acc.len, 1);
            end = closed ? cs.js.end : c->acc.len;
            gx_buf_append(&js, c->acc.data + cs.args_start,
                          end - cs.args_start);
        }
        char id[96];
        call_id_of(c, &cs, cs.n - 1, id, sizeof(id));
        json_array_append_new(
            calls, json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", id, "type",
                             "function", "function", "name", cs.name,
                             "arguments", js.data ? js.data : "",
                             js.data ? js.len : 0));
        gx_buf_cleanup(&js);
        if (!closed || !call_next(lc->fmt, &cs, c->acc.data, c->acc.len))
            break;
    }
    if (json_array_size(calls)) {
        *finish = complete ? "tool_calls" : "length";
        return json_pack("{s:s,s:n,s:o}", "role", "assistant", "content",
                         "tool_calls", calls);
    }
    json_decref(calls);
    size_t to = strlen(lc->fmt->text_open); /* not content, even cut */
    if (c->shape != 1)
        to = 0;
    else if (c->acc.len < to)
        to = c->acc.len;
    return json_pack("{s:s,s:s%}", "role", "assistant", "content",
                     c->acc.data ? c->acc.data + to : "", c->acc.len - to);
}

/* The error answer of a failed or refused job. */
static void
job_error(struct pv_call *call, struct lp_call *lc, struct lp_job *j)
{
    /* LE_ECANCELED here was not our caller's cancel (that frees the call
     * first): the engine is shutting down or the answer passed its cap.
     * Either way the answer is incomplete: an error, never a 200. */
    if (j->st == LE_ECANCELED && !j->err[0])
        snprintf(j->err, sizeof(j->err),
                 "the local generation was stopped before it finished "
                 "(engine shutting down or answer too large)");
    int status = j->http_status;
    const char *code = j->err_code[0] ? j->err_code : "local_engine_error";
    if (!status && j->st == LE_ECONTEXT) {
        status = 400;
        code = "context_length_exceeded";
    }
    /* a 4xx is the caller's: PV_ERR_STATUS reaches the client as it is,
     * not retried elsewhere (another target would refuse it too), unless
     * it is this engine's own limit (a parameter or value it does not
     * implement, a context too short): then the next target is tried */
    call->res.outcome = status ? PV_ERR_STATUS : PV_ERR_INTERNAL;
    call->res.http_status = status ? status : 500;
    call->res.other_may_serve =
        status == 400 && (!strcmp(code, "unsupported_parameter") ||
                          !strcmp(code, "unsupported_value") ||
                          !strcmp(code, "context_length_exceeded"));
    if (j->st == LE_EBUSY)
        call->res.retry_after_s = 1;
    snprintf(call->res.detail, sizeof(call->res.detail), "%s", j->err);
    json_t *e = json_pack("{s:{s:s,s:s,s:o,s:s}}", "error", "message",
                          j->err[0] ? j->err : le_status_str(j->st), "type",
                          status && status < 500 ? "invalid_request_error"
                                                 : "server_error",
                          "param",
                          j->err_param[0] ? json_string(j->err_param)
                                          : json_null(),
                          "code", code);
    char *t = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    gx_buf_reset(&lc->body);
    if (t)
        gx_buf_append(&lc->body, t, strlen(t));
    free(t);
    call->res.body = lc->body.data;
    call->res.body_len = lc->body.len;
}

/* Takes the job's new text (repaired UTF-8; *raw: its bytes as the
 * engine gave them) and its state. */
static void
job_take(struct lp_job *j, struct gx_buf *text, size_t *raw, int *done)
{
    pthread_mutex_lock(&j->mu);
    *text = j->text;
    gx_buf_init(&j->text, 64 * 1024 * 1024);
    *done = j->done;
    pthread_mutex_unlock(&j->mu);
    *raw = text->len;
    pv_utf8_repair(text);
}

/* One token of a logprobs list (pv_x_lp_token) from its id. */
static json_t *
lp_token(const struct le_model *m, int32_t id, float lp)
{
    char piece[256];
    return pv_x_lp_token(piece, piece_of(m, id, piece, sizeof(piece)), lp);
}

/* The entries of j whose text has been taken (c->raw_seen) and not yet
 * listed, copied out under j's lock (the scheduler appends meanwhile);
 * *n of them, the caller frees.  Tokens whose text a stop string cut
 * never are. */
static struct le_logprob *
lp_take(struct lp_job *j, struct lp_choice *c, size_t *n)
{
    struct le_logprob *out = NULL;
    pthread_mutex_lock(&j->mu);
    size_t k = c->lp_next;
    while (k < j->n_lps && j->lps[k].text_end <= c->raw_seen)
        k++;
    *n = k - c->lp_next;
    if (*n && (out = malloc(*n * sizeof(*out))) != NULL) {
        memcpy(out, j->lps + c->lp_next, *n * sizeof(*out));
        c->lp_next = k;
    } else {
        *n = 0; /* out of memory: listed with the next text */
    }
    pthread_mutex_unlock(&j->mu);
    return out;
}

/* An empty /v1/completions logprobs object: tokens, token_logprobs,
 * top_logprobs (a token -> logprob object each) and text_offset
 * (characters of the answer's text before each token). */
static json_t *
lp_text_new(void)
{
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                     "top_logprobs", "text_offset");
}

/* Appends one token to o: its text piece[0..n) and its figures (e; NULL:
 * null, as the prompt's first token has none); strip: the echo's first
 * text token, whose alternatives lose a leading space as it did. */
static void
lp_text_add(const struct le_model *m, struct lp_choice *c, json_t *o,
            const char *piece, size_t n, const struct le_logprob *e,
            int strip)
{
    json_t *t = pv_x_lp_token(piece, n, e ? e->logprob : 0);
    json_array_append(json_object_get(o, "tokens"),
                      json_object_get(t, "token"));
    json_array_append(json_object_get(o, "token_logprobs"),
                      e ? json_object_get(t, "logprob") : json_null());
    json_array_append_new(json_object_get(o, "text_offset"),
                          json_integer(c->lp_chars));
    for (size_t i = 0; i < n; i++) /* not a continuation byte */
        c->lp_chars += ((unsigned char)piece[i] & 0xC0) != 0x80;
    json_t *d = e ? json_object() : json_null();
    for (int i = 0; e && i < e->n_top; i++) {
        char ap[256];
        size_t an = piece_of(m, e->top_id[i], ap, sizeof(ap));
        size_t as = strip && an && ap[0] == ' ';
        json_t *a = pv_x_lp_token(ap + as, an - as, e->top_logprob[i]);
        const char *key = json_string_value(json_object_get(a, "token"));
        if (key && !json_object_get(d, key)) /* the likelier of a text */
            json_object_set(d, key, json_object_get(a, "logprob"));
        json_decref(a);
    }
    json_array_append_new(json_object_get(o, "top_logprobs"), d);
    json_decref(t);
}

/* /v1/completions' logprobs object of sampled entries e[0..n) added to o
 * (NULL: a new one). */
static json_t *
lp_text_content(const struct le_model *m, struct lp_choice *c, json_t *o,
                const struct le_logprob *e, size_t n)
{
    if (!o)
        o = lp_text_new();
    for (size_t k = 0; k < n; k++) {
        char piece[256];
        size_t pl = piece_of(m, e[k].id, piece, sizeof(piece));
        lp_text_add(m, c, o, piece, pl, &e[k], 0);
    }
    return o;
}

/* echo with logprobs: the prompt's tokens as a new logprobs object, the
 * first token's figures null, token i's from plps[i - 1] (the logits at
 * position i - 1), the prefix space the echo leaves out left out of the
 * first text token too; the answer's own tokens then count their
 * text_offset from the end of the echoed text. */
static json_t *
lp_echo_content(const struct le_model *m, struct lp_job *j,
                struct lp_choice *c)
{
    json_t *o = lp_text_new();
    int prefixed = space_prefixed(m), seen = 0;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n_pids; i++) {
        char piece[256];
        size_t pl = piece_of(m, j->pids[i], piece, sizeof(piece));
        size_t skip = echo_skip(prefixed, &seen, piece, pl);
        lp_text_add(m, c, o, piece + skip, pl - skip,
                    i && i - 1 < j->n_plps ? &j->plps[i - 1] : NULL,
                    (int)skip);
    }
    pthread_mutex_unlock(&j->mu);
    c->lp_chars = 0;
    for (size_t i = 0; i < j->echo_len; i++)
        c->lp_chars += ((unsigned char)j->echo_text[i] & 0xC0) != 0x80;
    return o;
}

/* Choice c's logprobs object for the entries lp_take gives: chat's
 * {"content": [...], "refusal": null}, or /v1/completions' shape; NULL
 * when the request did not ask for logprobs. */
static json_t *
lp_content(const struct lp_call *lc, struct lp_job *j, struct lp_choice *c)
{
    if (!j->want_lp)
        return NULL;
    const struct le_model *m = lc->e->model;
    size_t n;
    struct le_logprob *e = lp_take(j, c, &n);
    json_t *r;
    if (lc->text_api) {
        r = lp_text_content(m, c, NULL, e, n);
    } else {
        json_t *arr = json_array();
        /* a text answer's opening marker (harmony's final<|message|>) is
         * not content: neither are its tokens */
        size_t to = c->shape == 1 ? strlen(lc->fmt->text_open) : 0, k0 = 0;
        for (; k0 < n && c->lp_open < to; k0++) {
            char buf[256];
            c->lp_open += piece_of(m, e[k0].id, buf, sizeof(buf));
        }
        for (size_t k = k0; k < n; k++) {
            json_t *o = lp_token(m, e[k].id, e[k].logprob), *top = json_array();
            for (int i = 0; i < e[k].n_top; i++)
                json_array_append_new(
                    top, lp_token(m, e[k].top_id[i], e[k].top_logprob[i]));
            json_object_set_new(o, "top_logprobs", top);
            json_array_append_new(arr, o);
        }
        r = json_pack("{s:o,s:n}", "content", arr, "refusal");
    }
    free(e);
    return r;
}

/* First bytes: the first-byte timer becomes the total one. */
static void
note_text(struct pv_call *call, struct lp_call *lc)
{
    if (call->res.ttfb_us < 0)
        call->res.ttfb_us = gx_mono_us() - call->t_start_us;
    if (lc->got_text)
        return;
    lc->got_text = 1;
    if (lc->timer) {
        int64_t left = lc->deadline_us - gx_mono_us();
        struct timeval tv = {0, 0};
        if (left > 0) {
            tv.tv_sec = left / 1000000;
            tv.tv_usec = left % 1000000;
        }
        evtimer_add(lc->timer, &tv);
    }
}

/* The non-stream answer: o (taken; NULL when it could not be built)
 * becomes the call's body. */
static void
answer_body(struct pv_call *call, struct lp_call *lc, json_t *o)
{
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    gx_buf_reset(&lc->body);
    if (t)
        gx_buf_append(&lc->body, t, strlen(t));
    free(t);
    if (!lc->body.len) {
        call->res.outcome = PV_ERR_INTERNAL;
        snprintf(call->res.detail, sizeof(call->res.detail),
                 "could not encode the local answer");
    }
    call->res.body = lc->body.data;
    call->res.body_len = lc->body.len;
}

static struct lp_job *
choice_job(const struct lp_call *lc, int k)
{
    return k ? lc->more[k - 1] : lc->job;
}

/* Stream: choice k's new text as deltas with its index, then, once its
 * job is done, its own finish_reason (once). */
static void
stream_choice(struct pv_call *call, struct lp_call *lc, int k,
              const struct gx_buf *text, int done)
{
    struct lp_choice *c = &lc->ch[k];
    struct lp_job *j = choice_job(lc, k);
    if (c->ended)
        return;
    if (!c->sent_role && !lc->text_api && (text->len || done)) {
        c->sent_role = 1;
        emit_chunk(call, lc, k,
                   json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                   NULL, NULL, NULL);
    }
    if (j->echo && !c->echoed && (text->len || done)) {
        /* The prompt first.  Its figures are its prompt job's: all in
         * for that job itself (the engine reports them before its first
         * sampled token's); a clone waits for its prefill, so they are
         * in too, unless that job was held back (paused) meanwhile or
         * the clone did not wait (the prefix cache held the whole
         * prompt, sched.c's defer) and the prompt takes that job more
         * than a step: then the clone's text waits in acc until they
         * are (test_local_apis_e2e's test_completion_echo_held). */
        struct lp_job *pj = prompt_job(j);
        if (j->want_lp && !prompt_lps_in(pj)) {
            if (text->len)
                gx_buf_append(&c->acc, text->data, text->len);
            return;
        }
        c->echoed = 1;
        emit_chunk(call, lc, k,
                   json_pack("{s:s%}", "content", j->echo_text, j->echo_len),
                   j->want_lp ? lp_echo_content(lc->e->model, pj, c) : NULL,
                   NULL, NULL);
        if (c->acc.len) { /* held back above: before the new text */
            gx_buf_append(&c->acc, text->data, text->len);
            emit_chunk(call, lc, k,
                       json_pack("{s:s%}", "content", c->acc.data,
                                 c->acc.len),
                       lp_content(lc, j, c), NULL, NULL);
            gx_buf_reset(&c->acc);
            text = &c->acc; /* now empty */
        }
    }
    struct gx_buf rs, cs;
    if (lc->think) { /* the reasoning as its own deltas, then content */
        gx_buf_init(&rs, 0);
        gx_buf_init(&cs, 64 * 1024 * 1024);
        pv_think_feed(&c->tk, text->data, text->len, &rs, &cs, done);
        if (rs.len)
            emit_chunk(call, lc, k,
                       json_pack("{s:s%}", "reasoning_content", rs.data,
                                 rs.len),
                       lp_content(lc, j, c), NULL, NULL);
        gx_buf_cleanup(&rs);
        text = &cs;
    }
    int complete = done && j->res.finish == LE_FINISH_STOP;
    if (lc->tools != LP_TOOLS_NONE) {
        if (text->len)
            gx_buf_append(&c->acc, text->data, text->len);
        stream_tool_output(call, lc, k, j, done);
    } else if (text->len) {
        emit_chunk(call, lc, k,
                   json_pack("{s:s%}", "content", text->data, text->len),
                   lp_content(lc, j, c), NULL, NULL);
    }
    if (lc->think)
        gx_buf_cleanup(&cs);
    if (!done)
        return;
    const char *finish = finish_reason(j->res.finish);
    if (lc->tools != LP_TOOLS_NONE && c->shape == 2 && c->cs.n && complete)
        finish = "tool_calls";
    emit_chunk(call, lc, k, NULL, NULL, finish, NULL);
    c->ended = 1;
}

/* Non-stream: choice k of the answer (its job is done). */
static json_t *
choice_json(struct lp_call *lc, int k)
{
    struct lp_choice *c = &lc->ch[k];
    struct lp_job *j = choice_job(lc, k);
    const char *finish = finish_reason(j->res.finish);
    const char *t = c->acc.data ? c->acc.data : "";
    if (lc->text_api) {
        json_t *lp = NULL;
        struct gx_buf et;
        gx_buf_init(&et, 128 * 1024 * 1024);
        if (j->echo) { /* the prompt's text and tokens first */
            gx_buf_append(&et, j->echo_text, j->echo_len);
            gx_buf_append(&et, t, c->acc.len);
            t = et.data ? et.data : "";
            if (j->want_lp) {
                lp = lp_echo_content(lc->e->model, prompt_job(j), c);
                size_t n;
                struct le_logprob *e = lp_take(j, c, &n);
                lp_text_content(lc->e->model, c, lp, e, n);
                free(e);
            }
        } else {
            lp = lp_content(lc, j, c);
        }
        json_t *r = json_pack("{s:i,s:s%,s:s,s:o}", "index", k, "text", t,
                              j->echo ? et.len : c->acc.len, "finish_reason",
                              finish, "logprobs", lp ? lp : json_null());
        gx_buf_cleanup(&et);
        return r;
    }
    json_t *msg =
        lc->tools != LP_TOOLS_NONE
            ? tool_message(lc, c, j->res.finish == LE_FINISH_STOP, &finish)
            : json_pack("{s:s,s:s%}", "role", "assistant", "content", t,
                        c->acc.len);
    if (msg && lc->think && c->racc.len)
        json_object_set_new(msg, "reasoning_content",
                            json_stringn(c->racc.data, c->racc.len));
    /* a text answer lists its tokens, with tools too; a call none */
    json_t *lp = json_object_get(msg, "tool_calls") ? lp_none(j)
                                                     : lp_content(lc, j, c);
    return json_pack("{s:i,s:o,s:s,s:o}", "index", k, "message", msg,
                     "finish_reason", finish, "logprobs",
                     lp ? lp : json_null());
}

/* The embeddings answer of a finished job (OpenAI's list shape; base64
 * is the little-endian float32 bytes). */
static json_t *
embed_answer(const struct lp_call *lc, const struct lp_job *j)
{
    static const char b64c[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    json_t *data = json_array();
    size_t E = (size_t)j->n_embd, nb = E * 4;
    char *enc = malloc((nb + 2) / 3 * 4 + 1);
    for (size_t i = 0; data && enc && i < j->n_inputs; i++) {
        const float *vec = j->vecs + i * E;
        json_t *emb;
        if (lc->b64) {
            const unsigned char *p = (const unsigned char *)vec;
            size_t o = 0;
            for (size_t k = 0; k < nb; k += 3) {
                unsigned w = (unsigned)p[k] << 16;
                if (k + 1 < nb)
                    w |= (unsigned)p[k + 1] << 8;
                if (k + 2 < nb)
                    w |= p[k + 2];
                enc[o++] = b64c[(w >> 18) & 63];
                enc[o++] = b64c[(w >> 12) & 63];
                enc[o++] = k + 1 < nb ? b64c[(w >> 6) & 63] : '=';
                enc[o++] = k + 2 < nb ? b64c[w & 63] : '=';
            }
            emb = json_stringn(enc, o);
        } else {
            emb = json_array();
            for (size_t k = 0; k < E; k++)
                json_array_append_new(emb, json_real(vec[k]));
        }
        json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object",
                                              "embedding", "index",
                                              (json_int_t)i, "embedding",
                                              emb));
    }
    free(enc);
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data",
                     data, "model", lc->model, "usage", "prompt_tokens",
                     (json_int_t)j->embed_tokens, "total_tokens",
                     (json_int_t)j->embed_tokens);
}

/*
 * A job of the call has news (any choice's event).  Every choice's new
 * text is taken; a failed job fails the call before anything more is
 * sent (so an engine error before any text reaches the client as its own
 * status, no role chunk first); a stream sends each choice's deltas and,
 * as each ends, its finish_reason; once every job is done the answer (or
 * the usage chunk and [DONE]) follows, completion tokens summed over the
 * choices.  (A job's st and res are the scheduler's until done, then
 * stay.)
 */
static void
on_job_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_call *call = arg;
    struct lp_call *lc = call->impl;
    struct gx_buf text[LP_N_MAX];
    int done[LP_N_MAX], all = 1;
    struct lp_job *failed = NULL;
    for (int k = 0; k <= lc->n_more; k++) {
        struct lp_job *j = choice_job(lc, k);
        size_t raw;
        job_take(j, &text[k], &raw, &done[k]);
        lc->ch[k].raw_seen += raw;
        if (text[k].len)
            note_text(call, lc);
        all &= done[k];
        if (done[k] && j->st != LE_OK && !failed)
            failed = j;
    }
    for (int k = 0; k <= lc->n_more; k++) {
        if (!failed && !call->cancelled && !call->finished) {
            if (lc->stream)
                stream_choice(call, lc, k, &text[k], done[k]);
            else if (lc->think)
                pv_think_feed(&lc->ch[k].tk, text[k].data, text[k].len,
                           &lc->ch[k].racc, &lc->ch[k].acc, done[k]);
            else if (text[k].len)
                gx_buf_append(&lc->ch[k].acc, text[k].data, text[k].len);
        }
        gx_buf_cleanup(&text[k]);
    }
    if (call->cancelled || call->finished || (!all && !failed))
        return;
    if (failed) {
        job_error(call, lc, failed);
        pv_call_complete(call);
        return;
    }
    struct lp_job *j = lc->job;
    call->res.outcome = PV_OK;
    call->res.http_status = 200;
    call->res.usage.have = 1;
    if (lc->embed) {
        call->res.usage.prompt_tokens = j->embed_tokens;
        answer_body(call, lc, embed_answer(lc, j));
        pv_call_complete(call);
        return;
    }
    struct le_gen_result u = j->res;
    int64_t rt = j->reasoning_tokens;
    for (int k = 1; k <= lc->n_more; k++) {
        const struct lp_job *jk = lc->more[k - 1];
        u.completion_tokens += jk->res.completion_tokens;
        rt += jk->reasoning_tokens;
        if (jk->prompt_text || jk->ids) { /* another prompt's */
            u.prompt_tokens += jk->res.prompt_tokens;
            u.cached_tokens += jk->res.cached_tokens;
        }
    }
    call->res.usage.prompt_tokens = u.prompt_tokens;
    call->res.usage.completion_tokens = u.completion_tokens;
    call->res.usage.cached_tokens = u.cached_tokens;
    if (rt > u.completion_tokens) /* a stop string cut the last tokens */
        rt = u.completion_tokens;
    call->res.usage.reasoning_tokens = rt;
    if (lc->stream) {
        if (lc->client_include_usage)
            emit_chunk(call, lc, 0, NULL, NULL, NULL,
                       usage_json(&u, lc->think, rt));
        pv_call_emit_event(call, "[DONE]", 6);
    } else {
        json_t *choices = json_array();
        for (int k = 0; k <= lc->n_more; k++)
            json_array_append_new(choices, choice_json(lc, k));
        answer_body(call, lc,
                    json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", lc->id,
                              "object",
                              lc->text_api ? "text_completion"
                                           : "chat.completion",
                              "created", (json_int_t)lc->created, "model",
                              lc->model, "choices", choices, "usage",
                              usage_json(&u, lc->think, rt)));
    }
    pv_call_complete(call);
}

/* The worker gives up on j: the scheduler ends its sequence at the next
 * step (a paused one too) and never touches j's event again. */
static void
job_stop(struct lp_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;
    atomic_store(&j->stop, 1);
    pthread_mutex_unlock(&j->mu);
    if (j->e)
        le_sched_wake(j->e->sched);
}

/* Frees the worker's side; the engine may still hold the job. */
static void
lp_release_jobs(struct pv_call *call)
{
    struct lp_call *lc = call->impl;
    if (lc && lc->timer) {
        event_free(lc->timer);
        lc->timer = NULL;
    }
    for (int k = 0; lc && k < LP_N_MAX; k++) {
        gx_buf_cleanup(&lc->ch[k].acc);
        gx_buf_cleanup(&lc->ch[k].racc);
        gx_buf_cleanup(&lc->ch[k].xjs);
    }
    if (lc) {
        json_decref(lc->xml_keys);
        lc->xml_keys = NULL;
    }
    if (!lc || !lc->job)
        return;
    for (int k = 0; k <= lc->n_more; k++) {
        struct lp_job *j = k ? lc->more[k - 1] : lc->job;
        if (!j)
            continue;
        job_stop(j);
        if (j->ev)
            event_free(j->ev);
        j->ev = NULL;
        job_unref(j);
        if (k)
            lc->more[k - 1] = NULL;
    }
    lc->job = NULL;
    gx_buf_cleanup(&lc->body);
}

/* The call's end: its jobs stopped, then its reference on the instance
 * dropped (the last one, after a reload dropped or changed the provider,
 * stops the old scheduler and frees its model). */
static void
lp_release(struct pv_call *call)
{
    lp_release_jobs(call);
    struct lp_call *lc = call->impl;
    if (lc && lc->e) {
        pv_inst_unref(&lc->e->head);
        lc->e = NULL;
    }
}

static const struct pv_http_hooks lp_hooks = {NULL, NULL, lp_release};

/* The provider's first_byte_timeout_ms (no text yet) or timeout_ms passed:
 * stop the generation at its next token and fail the call so the gateway
 * can fail over. */
static void
on_local_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_call *call = arg;
    struct lp_call *lc = call->impl;
    if (call->cancelled || call->finished || !lc->job)
        return;
    for (int k = 0; k <= lc->n_more; k++)
        job_stop(k ? lc->more[k - 1] : lc->job);
    call->res.outcome =
        lc->got_text ? PV_ERR_TIMEOUT : PV_ERR_FIRST_BYTE_TIMEOUT;
    snprintf(call->res.detail, sizeof(call->res.detail),
             "local engine: %s", lc->got_text ? "total timeout"
                                              : "first byte timeout");
    call->res.body = NULL;
    call->res.body_len = 0;
    pv_call_complete(call);
}

/* p's instance in r (borrowed), NULL when p is not a local provider of
 * r's config. */
static struct lp_engine *
engine_for(const struct pv_registry *r, const struct cfg_provider *p)
{
    struct pv_inst *i = pv_registry_get(r, p);
    return i && i->ops == &pv_local_ops ? (struct lp_engine *)i : NULL;
}

/* ---- the request: what is accepted, and how it becomes a job --------- */

/*
 * Every request parameter the local provider reads.  Anything else is
 * refused with 400 naming it (a JSON null counts as absent), because a
 * 200 that ignored it would be a silent lie.  user, metadata and store are
 * metadata with no effect on the answer and are accepted as such
 * (nothing is stored).
 */
static const char *const lp_params[] = {
    "model",      "messages",         "stream",
    "stream_options", "max_tokens",   "max_completion_tokens",
    "temperature", "top_p",           "top_k",
    "min_p",      "repeat_penalty",   "frequency_penalty",
    "presence_penalty", "seed",       "stop",
    "n",          "logprobs",         "top_logprobs",
    "response_format", "tools",       "tool_choice",
    "parallel_tool_calls", "user",    "metadata",
    "store",      "ignore_eos",       "logit_bias",
    "reasoning_effort", NULL};

/* Marks j refused: 400 with param and code; returns -1. */
static int
refuse(struct lp_job *j, const char *param, const char *code,
       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int
refuse(struct lp_job *j, const char *param, const char *code,
       const char *fmt, ...)
{
    if (j->http_status)
        return -1; /* the first reason wins */
    j->http_status = 400;
    j->st = LE_EINVAL;
    snprintf(j->err_param, sizeof(j->err_param), "%s", param);
    snprintf(j->err_code, sizeof(j->err_code), "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof(j->err), fmt, ap);
    va_end(ap);
    return -1;
}

static int
num_param(struct lp_job *j, const json_t *b, const char *k, double lo,
          double hi, float *out)
{
    const json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return refuse(j, k, "invalid_type", "'%s' must be a number", k);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return refuse(j, k, "invalid_value",
                      "'%s' must be between %g and %g", k, lo, hi);
    *out = (float)d;
    return 0;
}

/* /v1/completions: the same sampling and stop rules as chat, and echo;
 * suffix and best_of are read only to refuse what is not implemented. */
static const char *const lp_text_params[] = {
    "model",      "prompt",           "stream",
    "stream_options", "max_tokens",   "temperature",
    "top_p",      "top_k",            "min_p",
    "repeat_penalty", "frequency_penalty", "presence_penalty",
    "seed",       "stop",             "n",
    "logprobs",   "echo",             "suffix",
    "best_of",    "user",             "ignore_eos",
    "logit_bias", NULL};

static int
check_params(struct lp_job *j, const json_t *b, const char *const *params)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)b, k, v) {
        int known = 0;
        for (size_t i = 0; params[i] && !known; i++)
            known = !strcmp(k, params[i]);
        if (!known && !json_is_null(v))
            return refuse(j, k, "unsupported_parameter",
                          "the local engine does not support the parameter "
                          "'%s'",
                          k);
    }
    v = json_object_get(b, "n");
    j->n_choices = 1;
    if (v && !json_is_null(v) &&
        (!json_is_integer(v) || json_integer_value(v) < 1 ||
         json_integer_value(v) > LP_N_MAX))
        return refuse(j, "n", "unsupported_value",
                      "the local engine returns 1 to %d choices: 'n' must "
                      "be an integer in that range",
                      LP_N_MAX);
    if (json_is_integer(v))
        j->n_choices = (int)json_integer_value(v);
    v = json_object_get(b, "logprobs");
    if (params != lp_params) { /* /v1/completions: the alternatives */
        if (v && !json_is_null(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > LE_TOP_LOGPROBS_MAX)
                return refuse(j, "logprobs", "invalid_value",
                              "'logprobs' must be an integer from 0 to %d",
                              LE_TOP_LOGPROBS_MAX);
            j->want_lp = 1;
            j->top_lp = (int)json_integer_value(v);
        }
    } else {
        if (v && !json_is_null(v) && !json_is_boolean(v))
            return refuse(j, "logprobs", "invalid_type",
                          "'logprobs' must be a boolean");
        j->want_lp = json_is_true(v);
        v = json_object_get(b, "top_logprobs");
        if (v && !json_is_null(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > LE_TOP_LOGPROBS_MAX)
                return refuse(j, "top_logprobs", "invalid_value",
                              "'top_logprobs' must be an integer from 0 "
                              "to %d",
                              LE_TOP_LOGPROBS_MAX);
            if (!j->want_lp)
                return refuse(j, "top_logprobs", "invalid_value",
                              "'top_logprobs' needs 'logprobs': true");
            j->top_lp = (int)json_integer_value(v);
        }
    }
    static const char *const bools[] = {"parallel_tool_calls", "store"};
    for (size_t i = 0; i < 2; i++) {
        v = json_object_get(b, bools[i]);
        if (v && !json_is_null(v) && !json_is_boolean(v))
            return refuse(j, bools[i], "invalid_type",
                          "'%s' must be a boolean", bools[i]);
    }
    v = json_object_get(b, "user");
    if (v && !json_is_null(v) && !json_is_string(v))
        return refuse(j, "user", "invalid_type", "'user' must be a string");
    v = json_object_get(b, "metadata");
    if (v && !json_is_null(v) && !json_is_object(v))
        return refuse(j, "metadata", "invalid_type",
                      "'metadata' must be an object");
    v = json_object_get(b, "stream_options");
    const json_t *sv;
    json_object_foreach((json_t *)v, k, sv) {
        if (strcmp(k, "include_usage") != 0) {
            char p[96];
            snprintf(p, sizeof(p), "stream_options.%s", k);
            return refuse(j, p, "unsupported_parameter",
                          "the local engine does not support '%s'", p);
        }
        if (!json_is_boolean(sv) && !json_is_null(sv))
            return refuse(j, "stream_options.include_usage", "invalid_type",
                          "'stream_options.include_usage' must be a "
                          "boolean");
    }
    return 0;
}

/* min_tokens: the least max_tokens taken (1; /v1/completions 0, which
 * sets j->prompt_only). */
static int
read_sampling(struct lp_job *j, const json_t *b, int min_tokens)
{
    struct le_sampling *sp = &j->sp;
    le_sampling_default(sp);
    sp->temperature = 1.0f; /* OpenAI's default */
    sp->top_k = 0;
    sp->top_p = 1.0f;
    sp->min_p = 0.0f;
    sp->max_tokens = 0;
    if (num_param(j, b, "temperature", 0, 100, &sp->temperature) ||
        num_param(j, b, "top_p", 0, 1, &sp->top_p) ||
        num_param(j, b, "min_p", 0, 1, &sp->min_p) ||
        num_param(j, b, "repeat_penalty", 1e-3, 100, &sp->repeat_penalty) ||
        num_param(j, b, "frequency_penalty", -2, 2, &sp->frequency_penalty) ||
        num_param(j, b, "presence_penalty", -2, 2, &sp->presence_penalty))
        return -1;
    const json_t *v;
    if ((v = json_object_get(b, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 1000000)
            return refuse(j, "top_k", "invalid_value",
                          "'top_k' must be a non-negative integer");
        sp->top_k = (int)json_integer_value(v);
    }
    if ((v = json_object_get(b, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v))
            return refuse(j, "seed", "invalid_type",
                          "'seed' must be an integer");
        sp->seed = (uint64_t)json_integer_value(v);
    }
    const char *mk = "max_completion_tokens";
    v = json_object_get(b, mk);
    if (!v || json_is_null(v)) {
        mk = "max_tokens";
        v = json_object_get(b, mk);
    }
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < min_tokens ||
            json_integer_value(v) > 1000000)
            return refuse(j, mk, "invalid_value",
                          "'%s' must be an integer between %d and 1000000",
                          mk, min_tokens);
        sp->max_tokens = (int)json_integer_value(v);
        j->prompt_only = sp->max_tokens == 0;
    }
    /* llama-server's and vLLM's extension: generate to max_tokens (or a
     * stop string, or the grammar's end) whatever end-of-text the model
     * samples, as benchmarks and long-output tests want */
    if ((v = json_object_get(b, "ignore_eos")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return refuse(j, "ignore_eos", "invalid_type",
                          "'ignore_eos' must be a boolean");
        sp->ignore_eos = json_is_true(v);
    }
    v = json_object_get(b, "stop");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) && !json_is_array(v))
        return refuse(j, "stop", "invalid_type",
                      "'stop' must be a string or an array of strings");
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (n > 16)
        return refuse(j, "stop", "invalid_value", "at most 16 stop strings");
    j->stops = calloc(n ? n : 1, sizeof(char *));
    if (!j->stops)
        return -2;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s))
            return refuse(j, "stop", "invalid_type",
                          "'stop' must be a string or an array of strings");
        if (json_string_length(s) == 0)
            continue;
        char *d = strdup(json_string_value(s));
        if (!d) /* a NULL stop string would reach the engine */
            return -2;
        j->stops[j->n_stops++] = d;
    }
    return 0;
}

/*
 * logit_bias, OpenAI's shape: {"token id": bias, ...}, each key the
 * decimal id of a token of the model's vocabulary (digits only, no sign
 * or leading zero, so no two keys name one token), each bias a number
 * from -100 to 100, added to that token's logit before sampling (the
 * engine's le_sampling.bias).  0, -1 refused, -2 out of memory.
 */
static int
read_logit_bias(const struct lp_engine *e, struct lp_job *j, const json_t *b)
{
    const json_t *v = json_object_get(b, "logit_bias");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return refuse(j, "logit_bias", "invalid_type",
                      "'logit_bias' must be an object of token ids to "
                      "numbers from -100 to 100");
    size_t n = json_object_size(v);
    if (!n)
        return 0;
    j->bias_id = malloc(n * sizeof(*j->bias_id));
    j->bias = malloc(n * sizeof(*j->bias));
    if (!j->bias_id || !j->bias)
        return -2;
    int32_t vocab = le_model_n_vocab(e->model);
    const char *k;
    const json_t *x;
    size_t i = 0;
    json_object_foreach((json_t *)v, k, x) {
        size_t kl = strlen(k);
        long long id = -1;
        if (kl >= 1 && kl <= 10 && strspn(k, "0123456789") == kl &&
            (k[0] != '0' || kl == 1))
            id = strtoll(k, NULL, 10);
        if (id < 0 || id >= vocab)
            return refuse(j, "logit_bias", "invalid_value",
                          "'logit_bias' key \"%.40s%s\" is not a token id "
                          "of the local model (a decimal integer from 0 to "
                          "%d)",
                          k, kl > 40 ? "..." : "", (int)vocab - 1);
        double d = json_is_number(x) ? json_number_value(x) : NAN;
        if (!(d >= -100 && d <= 100))
            return refuse(j, "logit_bias", "invalid_value",
                          "'logit_bias' value of token %lld must be a "
                          "number from -100 to 100",
                          id);
        j->bias_id[i] = (int32_t)id;
        j->bias[i] = (float)d;
        i++;
    }
    j->sp.bias_id = j->bias_id;
    j->sp.bias = j->bias;
    j->sp.n_bias = i;
    return 0;
}

/* The parsed tools of a request (borrowed from the body). */
struct lp_tool {
    const char *name;
    const json_t *fn; /* the "function" object */
};

static int
read_tools(struct lp_job *j, const json_t *b, struct lp_tool **out,
           size_t *n_out, enum lp_tools *mode, int *named)
{
    *out = NULL;
    *n_out = 0;
    *mode = LP_TOOLS_NONE;
    *named = -1;
    const json_t *tools = json_object_get(b, "tools");
    const json_t *tc = json_object_get(b, "tool_choice");
    if (tc && json_is_null(tc))
        tc = NULL;
    if (!tools || json_is_null(tools)) {
        if (tc && !(json_is_string(tc) && !strcmp(json_string_value(tc),
                                                  "none")))
            return refuse(j, "tool_choice", "invalid_value",
                          "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!json_is_array(tools) || json_array_size(tools) == 0 ||
        json_array_size(tools) > 128)
        return refuse(j, "tools", "invalid_type",
                      "'tools' must be an array of 1 to 128 tools");
    size_t n = json_array_size(tools);
    struct lp_tool *t = calloc(n, sizeof(*t));
    if (!t)
        return -2;
    *out = t;
    for (size_t i = 0; i < n; i++) {
        const json_t *tool = json_array_get(tools, i);
        const json_t *fn = json_object_get(tool, "function");
        const char *type = json_string_value(json_object_get(tool, "type"));
        char p[64];
        snprintf(p, sizeof(p), "tools[%zu]", i);
        if (!type || strcmp(type, "function") || !json_is_object(fn))
            return refuse(j, p, "invalid_value",
                          "%s must be {\"type\": \"function\", "
                          "\"function\": {...}} (the local engine calls "
                          "functions only)",
                          p);
        const char *name = json_string_value(json_object_get(fn, "name"));
        size_t nl = name ? strlen(name) : 0;
        int ok = nl >= 1 && nl <= 64;
        for (size_t c = 0; ok && c < nl; c++)
            ok = (name[c] >= 'a' && name[c] <= 'z') ||
                 (name[c] >= 'A' && name[c] <= 'Z') ||
                 (name[c] >= '0' && name[c] <= '9') || name[c] == '_' ||
                 name[c] == '-';
        if (!ok)
            return refuse(j, p, "invalid_value",
                          "%s.function.name must be 1 to 64 of a-z, A-Z, "
                          "0-9, _ and -",
                          p);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(t[k].name, name))
                return refuse(j, p, "invalid_value",
                              "two tools are named '%s'", name);
        const char *key;
        const json_t *kv;
        json_object_foreach((json_t *)fn, key, kv) {
            if (strcmp(key, "name") && strcmp(key, "description") &&
                strcmp(key, "parameters") && strcmp(key, "strict"))
                return refuse(j, p, "unsupported_parameter",
                              "%s.function.%s is not supported by the local "
                              "engine",
                              p, key);
        }
        t[i].name = name;
        t[i].fn = fn;
        *n_out = i + 1;
    }
    *mode = LP_TOOLS_AUTO; /* OpenAI's default when tools are given */
    if (json_is_string(tc)) {
        const char *c = json_string_value(tc);
        if (!strcmp(c, "none"))
            *mode = LP_TOOLS_NONE;
        else if (!strcmp(c, "required"))
            *mode = LP_TOOLS_REQUIRED;
        else if (strcmp(c, "auto"))
            return refuse(j, "tool_choice", "invalid_value",
                          "'tool_choice' must be none, auto, required or "
                          "{\"type\": \"function\", \"function\": "
                          "{\"name\": ...}}");
    } else if (tc) {
        const char *name = json_string_value(
            json_object_get(json_object_get(tc, "function"), "name"));
        const char *type = json_string_value(json_object_get(tc, "type"));
        for (size_t i = 0; name && i < n; i++)
            if (!strcmp(t[i].name, name))
                *named = (int)i;
        if (!type || strcmp(type, "function") || *named < 0)
            return refuse(j, "tool_choice", "invalid_value",
                          "'tool_choice' must name one of the tools: "
                          "{\"type\": \"function\", \"function\": "
                          "{\"name\": ...}}");
        *mode = LP_TOOLS_NAMED;
    }
    return 0;
}

/* Grammar text for 1 to max_calls tool calls in format f, its opening,
 * separators and closing around them (and, for auto, free text not
 * starting with f's first byte); 0, or refuses. */
static int
tools_grammar(struct lp_job *j, struct pv_gram *pg, const struct lp_tool *t,
              size_t n, enum lp_tools mode, int named, int max_calls,
              const struct lp_callfmt *f)
{
    struct gx_buf root;
    gx_buf_init(&root, 0);
#define ROOT_HEAD "root ::="
    gx_buf_printf(&root, ROOT_HEAD);
    int rc = 0, alts = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        const json_t *params = json_object_get(t[i].fn, "parameters");
        json_t *empty = NULL;
        if (!params || json_is_null(params)) /* no parameters: {} */
            params = empty = json_pack("{s:s,s:b}", "type", "object",
                                       "additionalProperties", 0);
        char name[24], msg[256] = "", p[64];
        snprintf(p, sizeof(p), "tools[%zu].function.parameters", i);
        if (!params) {
            rc = -2;
        } else if (xml_of(f)
                       ? pv_gram_xml_args(pg, params, xml_of(f), name, msg,
                                          sizeof(msg)) != 0
                       : pv_gram_schema(pg, params, name, msg,
                                        sizeof(msg)) != 0) {
            rc = refuse(j, p, "unsupported_value", "%s: %s", p, msg);
        } else {
            char head[192];
            int hl = snprintf(head, sizeof(head), "%s%s%s", f->prefix,
                              t[i].name, f->mid);
            gx_buf_printf(&pg->text, "call-%zu ::=", i);
            pv_gram_literal(pg, head, (size_t)hl);
            if (f->kind == LE_TOOLS_MISTRAL_CALL_ID) { /* the call's id */
                gx_buf_printf(&pg->text, " [a-zA-Z0-9]{9}");
                pv_gram_literal(pg, "[ARGS]", 6);
            }
            if (f->kind == LE_TOOLS_KIMI) { /* the call's number */
                gx_buf_printf(&pg->text, " [0-9]{1,3}");
                pv_gram_literal(pg, LE_KIMI_ARGS_BEGIN,
                                strlen(LE_KIMI_ARGS_BEGIN));
            }
            gx_buf_printf(&pg->text, "%s", name);
            pv_gram_literal(pg, f->suffix, strlen(f->suffix));
            gx_buf_printf(&pg->text, "\n");
            gx_buf_printf(&root, "%s call-%zu", alts++ ? " |" : "", i);
        }
        json_decref(empty);
    }
    /* root ::= c-open calls (c-sep calls){0,N-1} c-close,
     * calls ::= (the calls); the pieces the format has */
    static const char *const piece_rule[] = {"c-open", "c-sep", "c-close"};
    const char *piece[] = {f->open, max_calls > 1 ? f->sep : "", f->close};
    for (int k = 0; k < 3; k++) {
        if (!*piece[k])
            continue;
        gx_buf_printf(&pg->text, "%s ::=", piece_rule[k]);
        pv_gram_literal(pg, piece[k], strlen(piece[k]));
        gx_buf_printf(&pg->text, "\n");
    }
    gx_buf_printf(&pg->text, "calls ::=%s\n", root.data + strlen(ROOT_HEAD));
    gx_buf_reset(&root);
    gx_buf_printf(&root, "root ::=%s calls", *f->open ? " c-open" : "");
    if (max_calls > 1 && *f->sep)
        gx_buf_printf(&root, " (c-sep calls){0,%d}", max_calls - 1);
    else if (max_calls > 1) /* each call opens with its prefix (v11) */
        gx_buf_printf(&root, " calls{0,%d}", max_calls - 1);
    if (*f->close)
        gx_buf_printf(&root, " c-close");
    if (mode == LP_TOOLS_AUTO && *f->text_open) {
        gx_buf_printf(&root, " | t-open %%free");
        gx_buf_printf(&pg->text, "t-open ::=");
        pv_gram_literal(pg, f->text_open, strlen(f->text_open));
        gx_buf_printf(&pg->text, "\n");
    } else if (mode == LP_TOOLS_AUTO) {
        gx_buf_printf(&root, " | [^%c] %%free", f->first);
    }
    gx_buf_printf(&root, "\n");
    if (rc == 0 && root.data)
        gx_buf_append(&pg->text, root.data, root.len);
    gx_buf_cleanup(&root);
#undef ROOT_HEAD
    return rc;
}

/* The XML formats (GLM's, Qwen3-Coder's): which listed parameters of
 * each tool are written as text (j->xml_keys, pv_xml_args_json); 0 or
 * -2 */
static int
xml_keys_of(struct lp_job *j, const struct lp_tool *t, size_t n)
{
    json_t *all = json_object();
    for (size_t i = 0; all && i < n; i++) {
        json_t *keys = json_object();
        const char *k;
        const json_t *ps;
        json_object_foreach(
            json_object_get(json_object_get(t[i].fn, "parameters"),
                            "properties"),
            k, ps) json_object_set_new(keys, k,
                                       json_boolean(pv_schema_is_text(ps)));
        if (!keys || json_object_set_new(all, t[i].name, keys) != 0) {
            json_decref(all);
            all = NULL;
        }
    }
    j->xml_keys = all;
    return all ? 0 : -2;
}

/* The grammar of response_format; 0 with *have = 0 for text. */
static int
format_grammar(struct lp_job *j, struct pv_gram *pg, const json_t *rf,
               int *have)
{
    *have = 0;
    if (!rf || json_is_null(rf))
        return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type)
        return refuse(j, "response_format", "invalid_type",
                      "'response_format' must be an object with a 'type'");
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object")) {
        *have = 1;
        gx_buf_printf(&pg->text, "root ::= j-object\n");
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return refuse(j, "response_format.type", "unsupported_value",
                      "response_format type '%s' is not supported by the "
                      "local engine (text, json_object, json_schema)",
                      type);
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js) ||
        !json_is_string(json_object_get(js, "name")))
        return refuse(j, "response_format.json_schema", "invalid_value",
                      "'response_format.json_schema' must be an object "
                      "with a 'name' and a 'schema'");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)js, k, v) {
        if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") &&
            strcmp(k, "description")) {
            char p[96];
            snprintf(p, sizeof(p), "response_format.json_schema.%s", k);
            return refuse(j, p, "unsupported_parameter",
                          "'%s' is not supported by the local engine", p);
        }
    }
    const json_t *schema = json_object_get(js, "schema");
    char name[24] = "j-value", msg[256] = "";
    if (schema && pv_gram_schema(pg, schema, name, msg, sizeof(msg)) != 0)
        return refuse(j, "response_format.json_schema.schema",
                      "unsupported_value",
                      "response_format.json_schema.schema: %s", msg);
    *have = 1;
    gx_buf_printf(&pg->text, "root ::= %s\n", name);
    return 0;
}

/* Text of one message's content; refuses non-text parts.  NULL on out of
 * memory or refusal (j says which). */
static char *
message_text(struct lp_job *j, const json_t *content, size_t idx)
{
    if (!content || json_is_null(content))
        return strdup("");
    if (json_is_string(content))
        return strdup(json_string_value(content));
    struct gx_buf b;
    gx_buf_init(&b, 0);
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            char p[64];
            snprintf(p, sizeof(p), "messages[%zu].content", idx);
            refuse(j, p, "unsupported_value",
                   "the local engine reads text content parts only "
                   "(found type '%s')",
                   type ? type : "?");
            gx_buf_cleanup(&b);
            return NULL;
        }
        gx_buf_append(&b, json_string_value(t), json_string_length(t));
    }
    if (!b.data)
        return strdup("");
    return b.data;
}


/* Mistral's turns of tool calls and results (render_message): an
 * assistant's calls as [TOOL_CALLS] [{"name", "arguments", "id"}, ...]
 * (without the turn's text, as the template drops it), a result as
 * [TOOL_RESULTS] {"content": C, "call_id": ID}[/TOOL_RESULTS], C the
 * result's JSON value when its text is one and the text as a JSON string
 * otherwise (as Mistral's own tokenizer library writes them); both are
 * written as they are between the [INST] turns (chat.c). */
static void
mistral_turn(struct gx_buf *b, const json_t *m, const char *text,
             int is_result, const char *sp, enum le_chat_tools kind)
{
    char mid[10];
    int v11 = kind == LE_TOOLS_MISTRAL_V11,
        call_id = kind == LE_TOOLS_MISTRAL_CALL_ID;
    if (v11 && is_result) { /* no ids in v11 */
        gx_buf_printf(b, "[TOOL_RESULTS]%s[/TOOL_RESULTS]", text);
        return;
    }
    if (call_id && is_result) { /* Small 3.2: the id, then the content */
        pv_mistral_id(json_string_value(json_object_get(m, "tool_call_id")),
                   mid);
        gx_buf_printf(b, "[TOOL_RESULTS]%s[TOOL_CONTENT]%s[/TOOL_RESULTS]",
                      mid, text);
        return;
    }
    if (is_result) {
        pv_mistral_id(json_string_value(json_object_get(m, "tool_call_id")),
                   mid);
        json_t *c = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                               NULL);
        json_t *o = json_pack("{s:o,s:s}", "content",
                              c ? c : json_string(text), "call_id", mid);
        char *d = o ? json_dumps(o, 0) : NULL;
        if (d)
            gx_buf_printf(b, "[TOOL_RESULTS]%s%s[/TOOL_RESULTS]", sp, d);
        free(d);
        json_decref(o);
        return;
    }
    size_t i;
    const json_t *c;
    /* v11: the assistant's text, then each call; Small 3.2: each call
     * with its id (its template drops the text); v3: the calls' list */
    if (!call_id)
        gx_buf_printf(b, v11 ? "%s" : "[TOOL_CALLS]%s[", v11 ? text : sp);
    json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (v11 || call_id) {
            pv_mistral_id(json_string_value(json_object_get(c, "id")), mid);
            gx_buf_printf(b, "[TOOL_CALLS]%s%s%s[ARGS]%s",
                          name ? name : "", call_id ? "[CALL_ID]" : "",
                          call_id ? mid : "", args && *args ? args : "{}");
            continue;
        }
        pv_mistral_id(json_string_value(json_object_get(c, "id")), mid);
        gx_buf_printf(b, "%s{\"name\": \"%s\", \"arguments\": %s, \"id\": "
                         "\"%s\"}",
                      i ? ", " : "", name ? name : "",
                      args && *args ? args : "{}", mid);
    }
    if (!v11 && !call_id)
        gx_buf_printf(b, "]");
}

/* DeepSeek's answer with calls (render_message): its text without the
 * reasoning (up to the first </think>, as chat.c drops it from other
 * answers), then the calls as the model writes them (lp_callfmts), to be
 * written as they are by chat.c's "tool_calls" turn. */
static void
deepseek_calls(struct gx_buf *b, const json_t *m, const char *text,
               const struct lp_callfmt *f)
{
    const char *think = strstr(text, "</think>");
    size_t i;
    const json_t *c;
    gx_buf_printf(b, "%s%s", think ? think + strlen("</think>") : text,
                  f->open);
    json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        gx_buf_printf(b, "%s%s%s%s%s%s", i ? f->sep : "", f->prefix,
                      name ? name : "", f->mid, args && *args ? args : "{}",
                      f->suffix);
    }
    gx_buf_printf(b, "%s", f->close);
}

/* s without the blanks at its end, and at its start too with lead (Python's
 * rstrip, strip); *n its length */
static const char *
trim_blanks(const char *s, size_t *n, int lead)
{
    size_t l = strlen(s);
    while (lead && l && strchr(" \t\n\r\v\f", *s))
        s++, l--;
    while (l && strchr(" \t\n\r\v\f", s[l - 1]))
        l--;
    *n = l;
    return s;
}

/* An answer with calls in an XML format (render_message), as the model
 * writes it: GLM's text without the blanks at its end (its template
 * strips it) and the calls after it; Qwen3-Coder's text stripped and a
 * blank line after it when there is any, "\n" between two calls.  A
 * string argument is written as its text and any other as JSON (", "
 * and ": "), as their templates; arguments that are not a JSON object
 * give the call no pairs. */
static void
xml_calls(struct gx_buf *b, const json_t *m, const char *text,
          const struct lp_callfmt *f)
{
    const struct pv_xml_fmt *x = xml_of(f);
    int qwen = f->kind == LE_TOOLS_QWEN3_CODER;
    size_t tl, i;
    text = trim_blanks(text, &tl, qwen);
    gx_buf_append(b, text, tl);
    if (qwen && tl)
        gx_buf_append(b, "\n\n", 2);
    const json_t *c;
    json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        gx_buf_printf(b, "%s%s%s%s", i ? f->sep : "", f->prefix,
                      name ? name : "", f->mid);
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            gx_buf_printf(b, "%s%s%s", x->key_open, k, x->key_mid);
            if (json_is_string(v)) {
                gx_buf_append(b, json_string_value(v), json_string_length(v));
            } else {
                char *d = json_dumps(v, JSON_ENCODE_ANY);
                if (d)
                    gx_buf_printf(b, "%s", d);
                free(d);
            }
            gx_buf_printf(b, "%s", x->close);
        }
        json_decref(a);
        gx_buf_printf(b, "%s", f->suffix);
    }
}

/* Kimi K2's turns of calls and results (render_message), as its
 * template writes them: an answer's text, then its calls' section, each
 * call numbered by the calls of the conversation before it
 * (functions.NAME:N); a result "## Return of ID\nR", ID the next call's
 * not yet answered in the order the calls came (the template's queue),
 * functions.NAME:N of its own (NAME the message's name, else "unknown")
 * past them. */
static int is_role(const json_t *m, const char *role);

static void
kimi_turn(struct gx_buf *b, const json_t *msgs, size_t idx, const char *text)
{
    const json_t *m = json_array_get(msgs, idx);
    size_t n_calls = 0, n_results = 0, i, k;
    const json_t *p, *c;
    /* the calls before this message and its results' place among them */
    char qid[160] = "";
    json_array_foreach(msgs, i, p) {
        if (i >= idx)
            break;
        if (is_role(p, "tool")) {
            n_results++;
            continue;
        }
        json_array_foreach(json_object_get(p, "tool_calls"), k, c) n_calls++;
    }
    if (is_role(m, "tool")) {
        size_t at = 0, want = n_results;
        json_array_foreach(msgs, i, p) {
            if (i >= idx || qid[0])
                break;
            json_array_foreach(json_object_get(p, "tool_calls"), k, c) {
                if (at++ != want)
                    continue;
                const char *nm = json_string_value(json_object_get(
                    json_object_get(c, "function"), "name"));
                snprintf(qid, sizeof(qid), "functions.%s:%zu", nm ? nm : "",
                         want);
                break;
            }
        }
        if (!qid[0]) {
            const char *nm = json_string_value(json_object_get(m, "name"));
            snprintf(qid, sizeof(qid), "functions.%s:%zu",
                     nm ? nm : "unknown", n_calls);
        }
        gx_buf_printf(b, "## Return of %s\n%s", qid, text);
        return;
    }
    gx_buf_printf(b, "%s" LE_KIMI_CALLS_BEGIN, text);
    json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        gx_buf_printf(b,
                      LE_KIMI_CALL_BEGIN "functions.%s:%zu" LE_KIMI_ARGS_BEGIN
                                         "%s" LE_KIMI_CALL_END,
                      name ? name : "", n_calls + i,
                      args && *args ? args : "{}");
    }
    gx_buf_printf(b, LE_KIMI_CALLS_END);
}

/* harmony's answer with calls (render_message): its text as an analysis
 * message (as gpt-oss's template writes the latest such answer's), then
 * each call as the commentary message the model writes, ended by
 * <|call|> (the template writes one call a turn; the others follow the
 * same way) */
static void
harmony_calls(struct gx_buf *b, const json_t *m, const char *text)
{
    size_t i;
    const json_t *c;
    if (*text)
        gx_buf_printf(b, "<|start|>assistant<|channel|>analysis<|message|>"
                         "%s<|end|>",
                      text);
    json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        gx_buf_printf(b, "<|start|>assistant to=functions.%s<|channel|>"
                         "commentary json<|message|>%s<|call|>",
                      name ? name : "", args && *args ? args : "{}");
    }
}

/* One message as the chat template sees it, in tool format f: tool
 * results become user turns naming the call (JSON), user turns inside
 * <tool_response> (HERMES), ipython turns (LLAMA3) or [TOOL_RESULTS]
 * (MISTRAL) or harmony's messages from the function; an assistant's tool
 * calls are written out in the wrapper the model is asked to produce. */
static char *
render_message(struct lp_job *j, const json_t *msgs, size_t idx,
               const char **role, const struct lp_callfmt *f)
{
    const json_t *m = json_array_get(msgs, idx);
    *role = json_string_value(json_object_get(m, "role"));
    if (!*role)
        *role = "user";
    char *text = message_text(j, json_object_get(m, "content"), idx);
    if (!text)
        return NULL;
    struct gx_buf b;
    gx_buf_init(&b, 0);
    int calls = json_is_array(json_object_get(m, "tool_calls"));
    if (!strcmp(*role, "developer")) {
        *role = "system";
    } else if (is_mistral_fmt(f) &&
               (!strcmp(*role, "tool") ||
                (!strcmp(*role, "assistant") && calls))) {
        int result = !strcmp(*role, "tool");
        mistral_turn(&b, m, text, result, f->msp, f->kind);
        if (!result) /* written as is, then </s> (chat.c) */
            *role = "tool_calls";
    } else if ((f->kind == LE_TOOLS_DEEPSEEK ||
                f->kind == LE_TOOLS_DEEPSEEK31) &&
               (!strcmp(*role, "tool") ||
                (!strcmp(*role, "assistant") && calls))) {
        if (!strcmp(*role, "assistant")) /* "tool": its text as it is */
            deepseek_calls(&b, m, text, f);
        *role = !strcmp(*role, "tool") ? "tool" : "tool_calls";
    } else if (f->kind == LE_TOOLS_GRANITE3 && !strcmp(*role, "tool")) {
        gx_buf_printf(&b, "%s", text); /* a "tool" turn, as the template */
    } else if (f->kind == LE_TOOLS_HARMONY &&
               !strcmp(*role, "assistant") && calls) {
        harmony_calls(&b, m, text);
        *role = "tool_calls";
    } else if (f->kind == LE_TOOLS_HARMONY && !strcmp(*role, "tool")) {
        const char *name = pv_tool_call_name(
            msgs, idx, json_string_value(json_object_get(m, "tool_call_id")),
            1);
        json_t *js = json_string(text);
        char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (name && q)
            gx_buf_printf(&b, "<|start|>functions.%s to=assistant<|channel|>"
                              "commentary<|message|>%s<|end|>",
                          name, q);
        free(q);
        if (!name) {
            char p[64];
            snprintf(p, sizeof(p), "messages[%zu]", idx);
            refuse(j, p, "invalid_value",
                   "a tool result without an earlier assistant message "
                   "with tool_calls");
            gx_buf_cleanup(&b);
            free(text);
            return NULL;
        }
    } else if (f->kind == LE_TOOLS_KIMI &&
               (!strcmp(*role, "tool") ||
                (!strcmp(*role, "assistant") && calls))) {
        kimi_turn(&b, msgs, idx, text);
        if (calls) /* an assistant's turn (chat.c) */
            *role = "tool_calls";
    } else if (xml_of(f) && !strcmp(*role, "assistant") && calls) {
        xml_calls(&b, m, text, f);
    } else if (f->kind == LE_TOOLS_GLM && !strcmp(*role, "tool")) {
        /* a "tool" turn (chat.c writes GLM's tags) */
    } else if (f->kind == LE_TOOLS_QWEN3_CODER && !strcmp(*role, "tool")) {
        /* one user turn for a turn's results (lp_prepare merges them) */
        gx_buf_printf(&b, "<tool_response>\n%s\n</tool_response>\n", text);
        *role = "user";
    } else if (!strcmp(*role, "tool") && f->kind == LE_TOOLS_LLAMA3) {
        *role = "ipython";
    } else if (!strcmp(*role, "tool") && (f->kind == LE_TOOLS_HERMES ||
                                          f->kind == LE_TOOLS_GRANITE)) {
        /* Granite's template opens each result with a newline, Qwen's
         * puts one between two (the merge in lp_build) */
        gx_buf_printf(&b, "%s<tool_response>\n%s\n</tool_response>",
                      f->kind == LE_TOOLS_GRANITE ? "\n" : "", text);
        *role = "user";
    } else if (!strcmp(*role, "tool")) {
        const char *id =
            json_string_value(json_object_get(m, "tool_call_id"));
        gx_buf_printf(&b, "Result of the function call%s%s:\n%s",
                      id ? " " : "", id ? id : "", text);
        *role = "user";
    } else if (!strcmp(*role, "assistant") && calls) {
        /* the text, then the calls as the model writes them: granite3's
         * list (its open, sep and close), else each on a line of its own
         * after the text or another call */
        int list = f->kind == LE_TOOLS_GRANITE3;
        gx_buf_printf(&b, "%s%s", text, list ? f->open : "");
        size_t i;
        const json_t *c;
        json_array_foreach(json_object_get(m, "tool_calls"), i, c) {
            const json_t *fn = json_object_get(c, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            const char *args =
                json_string_value(json_object_get(fn, "arguments"));
            gx_buf_printf(&b, "%s%s%s%s%s%s",
                          list ? (i ? f->sep : "") : b.len ? "\n" : "",
                          f->prefix, name ? name : "", f->mid,
                          args && *args ? args : "{}", f->suffix);
        }
        if (list)
            gx_buf_printf(&b, "%s", f->close);
    } else if (strcmp(*role, "system") && strcmp(*role, "user") &&
               strcmp(*role, "assistant")) {
        char p[64];
        snprintf(p, sizeof(p), "messages[%zu].role", idx);
        refuse(j, p, "invalid_value",
               "unknown role '%s' (system, developer, user, assistant, "
               "tool)",
               *role);
        free(text);
        return NULL;
    }
    if (!b.len) {
        gx_buf_cleanup(&b);
        return text;
    }
    free(text);
    return b.data;
}

static int
is_role(const json_t *m, const char *role)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

/* DeepSeek's tools text into b (returned): its templates list no
 * functions, so they go at the end of the system text (place_tools) in
 * the shape DeepSeek documents for V3.1 ("## Tools", a "### NAME"
 * section with the description and the parameters' schema a tool), then
 * the call format with its markers: V3 / R1's in llmux's words, V3.1's
 * as its model card writes them (its rules; every tool a description
 * line, the schema as Python's json.dumps writes it: ASCII). */
static char *
deepseek_tools(struct gx_buf *b, const struct lp_tool *t, size_t n,
               enum lp_tools mode, int named, const struct lp_callfmt *f)
{
    int v31 = f->kind == LE_TOOLS_DEEPSEEK31;
    gx_buf_printf(b, "## Tools\nYou have access to the following tools:\n");
    for (size_t i = 0; i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        const char *desc =
            json_string_value(json_object_get(t[i].fn, "description"));
        const json_t *params = json_object_get(t[i].fn, "parameters");
        char *d = params && !json_is_null(params)
                      ? json_dumps(params, v31 ? JSON_ENSURE_ASCII : 0)
                      : NULL;
        gx_buf_printf(b, "\n### %s\n", t[i].name);
        if (desc || v31)
            gx_buf_printf(b, "Description: %s\n\n", desc ? desc : "");
        gx_buf_printf(b, "Parameters: %s\n", d ? d : "{}");
        free(d);
    }
    if (v31)
        gx_buf_printf(b,
                      "\nIMPORTANT: ALWAYS adhere to this exact format for "
                      "tool use:\n%s%stool_call_name%stool_call_arguments%s"
                      "{additional_tool_calls}%s\n\nWhere:\n- "
                      "`tool_call_name` must be an exact match to one of the "
                      "available tools\n- `tool_call_arguments` must be "
                      "valid JSON that strictly follows the tool's "
                      "Parameters Schema\n- For multiple tool calls, chain "
                      "them directly without separators or spaces",
                      f->open, f->prefix, f->mid, f->suffix, f->close);
    else
        gx_buf_printf(b,
                      "\nTo call tools, answer with %s%sTOOL_NAME%s"
                      "ARGUMENTS%s%s: the arguments a JSON object; several "
                      "calls each from %s to %s, a new line between two.%s",
                      f->open, f->prefix, f->mid, f->suffix, f->close,
                      LE_DS_CALL_BEGIN, LE_DS_CALL_END,
                      mode == LP_TOOLS_AUTO
                          ? " Otherwise answer in plain text."
                          : "");
    return b->data;
}

/* GLM-4.7-Flash's tools text into b (returned), as its template writes
 * its system turn: the tools' objects a line each (JSON with ", " and
 * ": ", not ASCII-escaped) inside <tools></tools>, then the XML call
 * format */
static char *
glm_tools(struct gx_buf *b, const struct lp_tool *t, size_t n,
          enum lp_tools mode, int named)
{
    gx_buf_printf(b, "\n# Tools\n\nYou may call one or more functions to "
                     "assist with the user query.\n\nYou are provided with "
                     "function signatures within <tools></tools> XML tags:"
                     "\n<tools>\n");
    for (size_t i = 0; i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        json_t *tool = json_pack("{s:s,s:O}", "type", "function",
                                 "function", t[i].fn);
        char *d = tool ? json_dumps(tool, 0) : NULL;
        json_decref(tool);
        if (d)
            gx_buf_printf(b, "%s\n", d);
        free(d);
    }
    gx_buf_printf(b, "</tools>\n\nFor each function call, output the "
                     "function name and arguments within the following XML "
                     "format:\n<tool_call>{function-name}<arg_key>"
                     "{arg-key-1}</arg_key><arg_value>{arg-value-1}"
                     "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>"
                     "{arg-value-2}</arg_value>...</tool_call>");
    return b->data;
}

/* Python's repr() of v into b (strings in single quotes, True, False,
 * None), what Jinja's |string writes of a list or a scalar */
static void
py_repr(struct gx_buf *b, const json_t *v, int top)
{
    size_t i;
    const char *k;
    const json_t *x;
    if (json_is_string(v))
        gx_buf_printf(b, top ? "%s" : "'%s'", json_string_value(v));
    else if (json_is_true(v))
        gx_buf_printf(b, "True");
    else if (json_is_false(v))
        gx_buf_printf(b, "False");
    else if (json_is_null(v))
        gx_buf_printf(b, "None");
    else if (json_is_array(v)) {
        gx_buf_printf(b, "[");
        json_array_foreach(v, i, x) {
            gx_buf_printf(b, i ? ", " : "");
            py_repr(b, x, 0);
        }
        gx_buf_printf(b, "]");
    } else if (json_is_object(v)) {
        gx_buf_printf(b, "{");
        i = 0;
        json_object_foreach((json_t *)v, k, x) {
            gx_buf_printf(b, "%s'%s': ", i++ ? ", " : "", k);
            py_repr(b, x, 0);
        }
        gx_buf_printf(b, "}");
    } else {
        char *d = json_dumps(v, JSON_ENCODE_ANY);
        gx_buf_printf(b, "%s", d ? d : "");
        free(d);
    }
}

/* Qwen3-Coder's render_extra_keys: each member of o not in handled (a
 * NULL-terminated list) as "\n<K>V</K>", V an object's or a list's JSON,
 * else the value as Jinja's |string writes it */
static void
qc_extra(struct gx_buf *b, const json_t *o, const char *const *handled)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int skip = 0;
        for (size_t i = 0; handled[i] && !skip; i++)
            skip = !strcmp(k, handled[i]);
        if (skip)
            continue;
        gx_buf_printf(b, "\n<%s>", k);
        if (json_is_object(v) || json_is_array(v)) {
            char *d = json_dumps(v, 0);
            gx_buf_printf(b, "%s", d ? d : "");
            free(d);
        } else {
            py_repr(b, v, 1);
        }
        gx_buf_printf(b, "</%s>", k);
    }
}

/* the text of s without the blanks at either end (Jinja's trim) */
static void
qc_trimmed(struct gx_buf *b, const char *s)
{
    size_t n;
    s = trim_blanks(s, &n, 1);
    gx_buf_append(b, s, n);
}

/* Qwen3-Coder's tools text into b (returned), as its template writes it
 * after the system text: each function and each of its parameters in
 * XML (name, type, description, their other keys), then the call format
 * and its reminder */
static char *
qwen3_coder_tools(struct gx_buf *b, const struct lp_tool *t, size_t n,
                  enum lp_tools mode, int named)
{
    static const char *const fn_keys[] = {"type", "name", "description",
                                          "parameters", NULL};
    static const char *const par_keys[] = {"type", "properties", NULL};
    static const char *const p_keys[] = {"name", "type", "description",
                                         NULL};
    gx_buf_printf(b, "# Tools\n\nYou have access to the following tools:"
                     "\n\n<tools>");
    for (size_t i = 0; i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        const json_t *desc = json_object_get(t[i].fn, "description");
        const json_t *params = json_object_get(t[i].fn, "parameters");
        const json_t *props = json_object_get(params, "properties");
        gx_buf_printf(b, "\n<function>\n<name>%s</name>", t[i].name);
        if (json_is_string(desc)) {
            gx_buf_printf(b, "\n<description>");
            qc_trimmed(b, json_string_value(desc));
            gx_buf_printf(b, "</description>");
        }
        gx_buf_printf(b, "\n<parameters>");
        const char *k;
        const json_t *pf;
        json_object_foreach((json_t *)props, k, pf) {
            const json_t *ty = json_object_get(pf, "type");
            const json_t *pd = json_object_get(pf, "description");
            gx_buf_printf(b, "\n<parameter>\n<name>%s</name>", k);
            if (ty) {
                gx_buf_printf(b, "\n<type>");
                py_repr(b, ty, 1);
                gx_buf_printf(b, "</type>");
            }
            if (json_is_string(pd)) {
                gx_buf_printf(b, "\n<description>");
                qc_trimmed(b, json_string_value(pd));
                gx_buf_printf(b, "</description>");
            }
            qc_extra(b, pf, p_keys);
            gx_buf_printf(b, "\n</parameter>");
        }
        if (json_is_object(params))
            qc_extra(b, params, par_keys);
        gx_buf_printf(b, "\n</parameters>");
        qc_extra(b, t[i].fn, fn_keys);
        gx_buf_printf(b, "\n</function>");
    }
    gx_buf_printf(
        b, "\n</tools>\n\nIf you choose to call a tool ONLY reply in the "
           "following format with NO suffix:\n\n<tool_call>\n<function="
           "example_function_name>\n<parameter=example_parameter_1>\n"
           "value_1\n</parameter>\n<parameter=example_parameter_2>\n"
           "value_2\n</parameter>\n</function>\n</tool_call>\n\n"
           "<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
           "specified format: the tool calling block MUST begin with an "
           "opening <tool_call> tag and end with a closing </tool_call> "
           "tag.\n- Required parameters MUST be specified\n- You may "
           "provide optional reasoning for your function call in natural "
           "language BEFORE the function call, but NOT after\n- If there "
           "is no function call available, answer the question like normal "
           "with your current knowledge and do not tell the user about "
           "function calls\n</IMPORTANT>");
    return b->data;
}

/* 1 when the schema's required list (req) names k */
static int
ts_required(const json_t *req, const char *k)
{
    size_t i;
    const json_t *x;
    json_array_foreach(req, i, x) if (json_is_string(x) &&
                                      !strcmp(json_string_value(x), k))
        return 1;
    return 0;
}

/* A JSON Schema as gpt-oss's template writes a parameter's type in
 * TypeScript: string enums as "a" | "b", arrays of a scalar as T[],
 * objects with properties as {name?: type, ...}, a list of types joined
 * by " | ", nullable ones with " | null", anything else any. */
static void
ts_type(struct gx_buf *b, const json_t *sc, int depth)
{
    const json_t *ty = json_object_get(sc, "type");
    const char *t = json_string_value(ty);
    int nullable = json_is_true(json_object_get(sc, "nullable"));
    if (depth > 8) {
        gx_buf_printf(b, "any");
    } else if (t && !strcmp(t, "array")) {
        const json_t *it = json_object_get(sc, "items");
        const char *tt = json_string_value(json_object_get(it, "type"));
        if (!json_is_object(it)) {
            gx_buf_printf(b, "any[]");
        } else if (tt && (!strcmp(tt, "string") || !strcmp(tt, "boolean") ||
                          !strcmp(tt, "number") || !strcmp(tt, "integer"))) {
            gx_buf_printf(b, "%s[]", !strcmp(tt, "integer") ? "number" : tt);
        } else {
            struct gx_buf in;
            gx_buf_init(&in, 0);
            ts_type(&in, it, depth + 1);
            if (!in.data || in.len > 50)
                gx_buf_printf(b, "any[]");
            else
                gx_buf_printf(b, "%s[]", in.data);
            gx_buf_cleanup(&in);
        }
        if (nullable)
            gx_buf_printf(b, " | null");
    } else if (json_is_array(ty) && json_array_size(ty)) {
        size_t i;
        const json_t *v;
        json_array_foreach(ty, i, v)
            gx_buf_printf(b, "%s%s", i ? " | " : "",
                          json_string_value(v) ? json_string_value(v)
                                               : "any");
    } else if (t && !strcmp(t, "string")) {
        const json_t *en = json_object_get(sc, "enum");
        if (json_is_array(en) && json_array_size(en)) {
            size_t i;
            const json_t *v;
            json_array_foreach(en, i, v) {
                char *d = json_dumps(v, JSON_ENCODE_ANY);
                gx_buf_printf(b, "%s%s", i ? " | " : "", d ? d : "null");
                free(d);
            }
        } else {
            gx_buf_printf(b, "string%s", nullable ? " | null" : "");
        }
    } else if (t && (!strcmp(t, "number") || !strcmp(t, "integer"))) {
        gx_buf_printf(b, "number");
    } else if (t && !strcmp(t, "boolean")) {
        gx_buf_printf(b, "boolean");
    } else if (t && !strcmp(t, "object")) {
        const json_t *props = json_object_get(sc, "properties");
        if (!json_is_object(props) || !json_object_size(props)) {
            gx_buf_printf(b, "object");
            return;
        }
        const json_t *req = json_object_get(sc, "required");
        const char *k;
        const json_t *v;
        int first = 1;
        gx_buf_printf(b, "{\n");
        json_object_foreach((json_t *)props, k, v) {
            gx_buf_printf(b, "%s%s%s: ", first ? "" : ", ", k,
                          ts_required(req, k) ? "" : "?");
            ts_type(b, v, depth + 1);
            first = 0;
        }
        gx_buf_printf(b, "}");
    } else {
        gx_buf_printf(b, "any");
    }
}

/* Granite 3.x's tools (le_chat_opts.tools): the list of tool objects as
 * its template writes `available_tools | tojson(indent=4)`. */
static char *
granite3_tools(const struct lp_tool *t, size_t n, enum lp_tools mode,
               int named)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        if (json_array_append_new(list,
                                  json_pack("{s:s,s:O}", "type", "function",
                                            "function", t[i].fn)) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    char *d = list ? json_dumps(list, JSON_INDENT(4)) : NULL;
    json_decref(list);
    return d;
}

/* harmony's tools (le_chat_opts.tools): the functions namespace as
 * gpt-oss's template writes it, a comment with the description, then
 * type NAME = (_: {...}) => any; each parameter after its own
 * description comment, "?" when not required, its default noted. */
static char *
harmony_tools(const struct lp_tool *t, size_t n, enum lp_tools mode,
              int named)
{
    struct gx_buf b;
    gx_buf_init(&b, 0);
    gx_buf_printf(&b, "## functions\n\nnamespace functions {\n\n");
    for (size_t i = 0; i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        const char *desc =
            json_string_value(json_object_get(t[i].fn, "description"));
        const json_t *params = json_object_get(t[i].fn, "parameters");
        const json_t *props = json_object_get(params, "properties");
        const json_t *req = json_object_get(params, "required");
        gx_buf_printf(&b, "// %s\ntype %s = ", desc ? desc : "", t[i].name);
        if (!json_is_object(props) || !json_object_size(props)) {
            gx_buf_printf(&b, "() => any;\n\n");
            continue;
        }
        gx_buf_printf(&b, "(_: {\n");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)props, k, v) {
            const char *pd =
                json_string_value(json_object_get(v, "description"));
            if (pd)
                gx_buf_printf(&b, "// %s\n", pd);
            gx_buf_printf(&b, "%s%s: ", k, ts_required(req, k) ? "" : "?");
            ts_type(&b, v, 0);
            const json_t *dv = json_object_get(v, "default");
            if (dv) {
                char *d = json_is_string(dv) &&
                                  json_object_get(v, "enum")
                              ? strdup(json_string_value(dv))
                              : json_dumps(dv, JSON_ENCODE_ANY);
                gx_buf_printf(&b, ", // default: %s", d ? d : "");
                free(d);
            }
            gx_buf_printf(&b, ",\n");
        }
        gx_buf_printf(&b, "}) => any;\n\n");
    }
    gx_buf_printf(&b, "} // namespace functions");
    return b.data;
}

/* The text that tells the model about its tools, in its format f (where
 * it goes: place_tools). */
static char *
tools_prompt(const struct lp_tool *t, size_t n, enum lp_tools mode,
             int named, const struct lp_callfmt *f)
{
    struct gx_buf b;
    gx_buf_init(&b, 0);
    if (f->kind == LE_TOOLS_HERMES)
        gx_buf_printf(&b, "# Tools\n\nYou may call one or more functions to "
                          "assist with the user query.\n\nYou are provided "
                          "with function signatures within <tools></tools> "
                          "XML tags:\n<tools>");
    else if (f->kind == LE_TOOLS_LLAMA3)
        gx_buf_printf(&b, "Given the following functions, please respond "
                          "with a JSON for a function call with its proper "
                          "arguments that best answers the given prompt.\n\n"
                          "Respond in the format {\"name\": function name, "
                          "\"parameters\": dictionary of argument name and "
                          "its value}.Do not use variables.\n\n");
    else if (is_mistral_fmt(f))
        gx_buf_printf(&b, "[AVAILABLE_TOOLS]%s[", f->msp);
    else if (f->kind == LE_TOOLS_KIMI)
        gx_buf_printf(&b, "[");
    else if (f->kind == LE_TOOLS_GRANITE)
        gx_buf_printf(&b, "You are a helpful assistant with access to the "
                          "following tools. You may call one or more tools "
                          "to assist with the user query.\n\nYou are "
                          "provided with function signatures within "
                          "<tools></tools> XML tags:\n<tools>");
    else if (f->kind == LE_TOOLS_DEEPSEEK ||
             f->kind == LE_TOOLS_DEEPSEEK31)
        return deepseek_tools(&b, t, n, mode, named, f);
    else if (f->kind == LE_TOOLS_GLM)
        return glm_tools(&b, t, n, mode, named);
    else if (f->kind == LE_TOOLS_QWEN3_CODER)
        return qwen3_coder_tools(&b, t, n, mode, named);
    else
        gx_buf_printf(&b,
                      "You can call functions. To call one, reply with "
                      "only a JSON object {\"name\": <function name>, "
                      "\"arguments\": <an object of its parameters>}%s\n"
                      "Functions:\n",
                      mode == LP_TOOLS_AUTO ? "; otherwise reply in plain text."
                                            : ".");
    int listed = 0;
    for (size_t i = 0; i < n; i++) {
        if (mode == LP_TOOLS_NAMED && (int)i != named)
            continue;
        char *d = NULL;
        int list = is_mistral_fmt(f) || f->kind == LE_TOOLS_KIMI;
        if (list && listed++)
            gx_buf_printf(&b, ", ");
        if (f->kind == LE_TOOLS_JSON) {
            d = json_dumps(t[i].fn, JSON_COMPACT);
        } else { /* whole tool objects, as their templates list them */
            json_t *tool = json_pack("{s:s,s:O}", "type", "function",
                                     "function", t[i].fn);
            d = json_dumps(tool, f->kind == LE_TOOLS_LLAMA3 ? JSON_INDENT(4)
                                                            : 0);
            json_decref(tool);
        }
        if (d)
            gx_buf_printf(&b, f->kind == LE_TOOLS_JSON      ? "%s\n"
                              : f->kind == LE_TOOLS_HERMES ||
                                      f->kind == LE_TOOLS_GRANITE
                                  ? "\n%s"
                              : list                        ? "%s"
                                                            : "%s\n\n",
                          d);
        free(d);
    }
    if (is_mistral_fmt(f))
        gx_buf_printf(&b, "][/AVAILABLE_TOOLS]");
    else if (f->kind == LE_TOOLS_KIMI)
        gx_buf_printf(&b, "]");
    if (f->kind == LE_TOOLS_HERMES)
        gx_buf_printf(&b, "\n</tools>\n\nFor each function call, return a "
                          "json object with function name and arguments "
                          "within <tool_call></tool_call> XML tags:\n"
                          "<tool_call>\n{\"name\": <function-name>, "
                          "\"arguments\": <args-json-object>}\n</tool_call>");
    if (f->kind == LE_TOOLS_GRANITE)
        gx_buf_printf(&b, "\n</tools>\n\nFor each tool call, return a json "
                          "object with function name and arguments within "
                          "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                          "{\"name\": <function-name>, \"arguments\": "
                          "<args-json-object>}\n</tool_call>. If a tool does "
                          "not exist in the provided list of tools, notify "
                          "the user that you do not have the ability to "
                          "fulfill the request.");
    return b.data;
}

/* Puts the tools' text (tp, taken) into the k turns of cm / texts (room
 * for two more): MISTRAL as a "tools" turn of its own before the last
 * user turn (as Mistral's v3 template lists them; at the end when there
 * is none), or with first (le_model_tools_first: Ministral 3, Devstral)
 * after the first system turn, else first of all; GLM as a system turn of its own before every turn (as
 * GLM-4.7-Flash's template); JSON, HERMES, GRANITE and DEEPSEEK after the client's system
 * text (after a newline, a blank line in HERMES, GRANITE and DEEPSEEK),
 * in a system turn of its own when there is none; LLAMA3 before the first user
 * turn's text, with "Environment: ipython" and the date lines starting
 * the system turn (as Llama 3.2's template; the template's blank line
 * after them is trimmed away when the client sends no system text, as
 * this renderer trims every turn).  dflt: the template's default system
 * text (qwen2.5's), which a system turn of the tools' own starts with.
 * 0, or -2 out of memory (tp freed either way). */
static int
place_tools(const struct lp_callfmt *f, char *tp, struct le_chat_msg *cm,
            char **texts, size_t *k, const char *dflt, int first)
{
    if (!tp)
        return -2;
    int kimi = f->kind == LE_TOOLS_KIMI;
    if (is_mistral_fmt(f) || f->kind == LE_TOOLS_GLM || kimi) {
        /* GLM's: a system turn of their own before every turn; Kimi's
         * tool_declare turn too */
        size_t u = *k;
        while (u > 0 && strcmp(cm[u - 1].role, "user"))
            u--;
        u = f->kind == LE_TOOLS_GLM || kimi ? 0
            : first                  ? (*k && !strcmp(cm[0].role, "system"))
            : u                      ? u - 1
                                     : *k;
        memmove(cm + u + 1, cm + u, (*k - u) * sizeof(*cm));
        memmove(texts + u + 1, texts + u, (*k - u) * sizeof(*texts));
        (*k)++;
        texts[u] = tp;
        cm[u].role = f->kind == LE_TOOLS_GLM ? "system" : "tools";
        cm[u].content = tp;
        return 0;
    }
    int llama = f->kind == LE_TOOLS_LLAMA3;
    /* Llama 3.1+'s system turn with tools: the environment and its
     * template's date lines (its default date: a fixed one keeps the
     * prefix cache warm) */
    const char *sys_add = llama ? "Environment: ipython\nCutting Knowledge "
                                  "Date: December 2023\nToday Date: 26 Jul "
                                  "2024"
                                : tp;
    char *both = NULL;
    if (*k && !strcmp(cm[0].role, "system")) {
        int r = llama ? asprintf(&both, "%s\n\n%s", sys_add, texts[0])
                      : asprintf(&both, "%s%s%s", texts[0],
                                 f->kind == LE_TOOLS_HERMES ||
                                         f->kind == LE_TOOLS_DEEPSEEK ||
                                         f->kind == LE_TOOLS_DEEPSEEK31 ||
                                         f->kind == LE_TOOLS_GRANITE ||
                                         f->kind == LE_TOOLS_QWEN3_CODER
                                     ? "\n\n"
                                     : "\n",
                                 sys_add);
        if (r < 0) {
            free(tp);
            return -2;
        }
        free(texts[0]);
    } else if (dflt && !llama ? asprintf(&both, "%s\n\n%s", dflt, sys_add) < 0
                              : !(both = strdup(sys_add))) {
        free(tp);
        return -2;
    } else {
        memmove(cm + 1, cm, *k * sizeof(*cm));
        memmove(texts + 1, texts, *k * sizeof(*texts));
        (*k)++;
    }
    texts[0] = both;
    cm[0].role = "system";
    cm[0].content = both;
    if (!llama) {
        free(tp);
        return 0;
    }
    size_t u = 1;
    while (u < *k && strcmp(cm[u].role, "user"))
        u++;
    if (u == *k) { /* no user turn: the functions as one */
        texts[u] = tp;
        cm[u].role = "user";
        cm[u].content = tp;
        (*k)++;
        return 0;
    }
    char *cat = NULL;
    int r = asprintf(&cat, "%s%s", tp, texts[u]);
    free(tp);
    if (r < 0)
        return -2;
    free(texts[u]);
    texts[u] = cat;
    cm[u].content = cat;
    return 0;
}

/*
 * Everything the engine needs for the request, into j: the prompt, the
 * sampling settings and the grammar.  0 ok; -1 refused (j->http_status,
 * err, err_param set); -2 out of memory.
 */
/* One prompt of /v1/completions into *p: a string (not empty), or token
 * ids, each an id of the model's vocabulary.  at names it in an error
 * ("[2]": prompt[2]).  0, -1 refused, -2 out of memory. */
static int
lp_prompt_read(const struct lp_engine *e, struct lp_job *j, const json_t *v,
               const char *at, struct lp_prompt *p)
{
    char name[48];
    snprintf(name, sizeof(name), "prompt%s", at);
    if (json_is_string(v)) {
        if (!json_string_length(v))
            return refuse(j, "prompt", "invalid_value", "'%s' is empty",
                          name);
        if (memchr(json_string_value(v), 0, json_string_length(v)))
            return refuse(j, "prompt", "invalid_value",
                          "'%s' holds a NUL character", name);
        p->text = strdup(json_string_value(v));
        return p->text ? 0 : -2;
    }
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n == 0)
        return refuse(j, "prompt", "invalid_type",
                      "'%s' must be a string or a non-empty array of token "
                      "ids",
                      name);
    int32_t vocab = le_model_n_vocab(e->model);
    if (!(p->ids = malloc(n * sizeof(*p->ids))))
        return -2;
    p->n_ids = n;
    for (size_t k = 0; k < n; k++) {
        const json_t *t = json_array_get(v, k);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= vocab) {
            char tv[32];
            if (json_is_integer(t))
                snprintf(tv, sizeof(tv), "%lld",
                         (long long)json_integer_value(t));
            else
                snprintf(tv, sizeof(tv), "not an integer");
            free(p->ids);
            p->ids = NULL;
            return refuse(j, "prompt", "invalid_value",
                          "'%s[%zu]' is %s, not a token id of the local "
                          "model (0 to %d)",
                          name, k, tv, (int)vocab - 1);
        }
        p->ids[k] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* /v1/completions: prompt as OpenAI takes it: a string, an array of
 * strings, an array of token ids or an array of arrays of token ids; one
 * choice per prompt and n, in order (prompt i's choices at i x n ..).
 * Text is tokenized raw (no chat template, special-token text stays text,
 * BOS added); token ids go to the model as they are.  At most LP_N_MAX
 * choices in all; several prompts stream like n > 1 (each choice its
 * own index).  0, -1 refused, -2 out of memory. */
static int
lp_prepare_text(const struct lp_engine *e, const json_t *b,
                struct lp_job *j)
{
    int rc = check_params(j, b, lp_text_params);
    if (rc == 0)
        rc = read_sampling(j, b, 0);
    if (rc == 0)
        rc = read_logit_bias(e, j, b);
    if (rc == 0)
        j->sp.top_logprobs = j->top_lp;
    const json_t *v;
    if (rc == 0 && (v = json_object_get(b, "echo")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            rc = refuse(j, "echo", "invalid_type", "'echo' must be a boolean");
        j->echo = json_is_true(v);
    }
    /* max_tokens 0 scores the prompt (echo, usually with logprobs, as
     * evaluation harnesses send it); without echo the answer would be
     * empty */
    if (rc == 0 && j->prompt_only && !j->echo)
        rc = refuse(j, "max_tokens", "invalid_value",
                    "'max_tokens' 0 generates nothing, so without 'echo': "
                    "true nothing would be returned: send 'max_tokens' 1 "
                    "or more, or 'echo': true to score the prompt");
    if (rc == 0 && (v = json_object_get(b, "suffix")) && !json_is_null(v))
        rc = refuse(j, "suffix", "unsupported_parameter",
                    "the local engine does not support 'suffix' "
                    "(insertion)");
    if (rc == 0 && (v = json_object_get(b, "best_of")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        rc = refuse(j, "best_of", "unsupported_value",
                    "the local engine does not rank candidates: 'best_of' "
                    "must be 1");
    if (rc)
        return rc;
    v = json_object_get(b, "prompt");
    /* the shapes: "text", [1, 2, 3], ["text", ...], [[1, 2], ...] */
    int one = json_is_string(v) || (json_is_array(v) && json_array_size(v) &&
                                     json_is_integer(json_array_get(v, 0)));
    size_t n = one ? 1 : json_array_size(v);
    if (!one && (!json_is_array(v) || n == 0))
        return refuse(j, "prompt", "invalid_type",
                      "'prompt' must be a string, an array of strings, an "
                      "array of token ids or an array of arrays of token "
                      "ids");
    if (n * (size_t)j->n_choices > LP_N_MAX)
        return refuse(j, "prompt", "unsupported_value",
                      "the local engine returns at most %d choices per "
                      "request: %zu prompts x n %d is more",
                      LP_N_MAX, n, j->n_choices);
    if (n > 1 && !(j->more_prompts = calloc(n - 1, sizeof(struct lp_prompt))))
        return -2;
    for (size_t i = 0; i < n; i++) {
        struct lp_prompt p = {0};
        char at[32] = "";
        if (!one)
            snprintf(at, sizeof(at), "[%zu]", i);
        rc = lp_prompt_read(e, j, one ? v : json_array_get(v, i), at, &p);
        if (rc)
            return rc;
        if (i == 0) {
            j->prompt_text = p.text;
            j->ids = p.ids;
            j->n_ids = p.n_ids;
        } else {
            j->more_prompts[j->n_more_prompts++] = p;
        }
    }
    j->raw = 1;
    return 0;
}

static const char *const lp_embed_params[] = {
    "model", "input", "encoding_format", "dimensions", "user", NULL};

/* /v1/embeddings: input a string or an array of strings (each embedded
 * on its own); encoding_format float or base64 (lc->b64); dimensions only
 * the model's own.  0, -1 refused, -2 out of memory. */
static int
lp_prepare_embed(struct lp_engine *e, const json_t *b, struct lp_job *j,
                 int *b64)
{
    int rc = check_params(j, b, lp_embed_params);
    if (rc)
        return rc;
    const json_t *v = json_object_get(b, "encoding_format");
    const char *f = json_string_value(v);
    if (v && !json_is_null(v) &&
        (!f || (strcmp(f, "float") && strcmp(f, "base64"))))
        return refuse(j, "encoding_format", "invalid_value",
                      "'encoding_format' must be \"float\" or \"base64\"");
    *b64 = f && !strcmp(f, "base64");
    int E = le_model_n_embd(e->model);
    v = json_object_get(b, "dimensions");
    if (v && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == E))
        return refuse(j, "dimensions", "unsupported_value",
                      "the local model's embeddings have %d dimensions and "
                      "cannot be shortened: 'dimensions' must be %d or "
                      "absent",
                      E, E);
    v = json_object_get(b, "input");
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    j->inputs = calloc(n, sizeof(char *));
    if (!j->inputs)
        return -2;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(x) || json_string_length(x) == 0)
            return refuse(j, "input", "unsupported_value",
                          "the local engine embeds text: 'input' must be a "
                          "non-empty string or an array of non-empty "
                          "strings, not token ids");
        if (!(j->inputs[i] = strdup(json_string_value(x))))
            return -2;
        j->n_inputs++;
    }
    return 0;
}

/* reasoning_effort: with a reasoning template (rmode, le_chat_reasoning)
 * "none" and "minimal" turn the reasoning off, "low", "medium" and "high"
 * leave it on (qwen3's and deepseek's have no finer control: the model
 * decides how long it reasons; harmony's system message names the level,
 * *level), absent means on; without one it is refused. */
static int
read_effort(struct lp_job *j, const json_t *b, int rmode, int *think,
            const char **level)
{
    const json_t *v = json_object_get(b, "reasoning_effort");
    *think = rmode != 0 && rmode != 4; /* deepseek3.1: off unless asked */
    *level = NULL;
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (!s)
        return refuse(j, "reasoning_effort", "invalid_type",
                      "'reasoning_effort' must be a string");
    if (!rmode)
        return refuse(j, "reasoning_effort", "unsupported_parameter",
                      "this model's chat template has no reasoning "
                      "(reasoning_effort needs a qwen3, deepseek-r1, "
                      "deepseek3.1, glm4.7, magistral, magistral-2506 or "
                      "harmony template)");
    if (!strcmp(s, "none") || !strcmp(s, "minimal"))
        *think = 0;
    else if (strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
        return refuse(j, "reasoning_effort", "invalid_value",
                      "reasoning_effort must be none, minimal, low, medium "
                      "or high");
    else
        *level = s;
    *think = *level != NULL;
    return 0;
}

/* 1 when the last message that is not a system text is a user's: where
 * DeepSeek V3.1's template writes a generation prompt (after results the
 * answer follows them, with no reasoning) */
static int
ends_with_user(const json_t *msgs)
{
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        const json_t *m = json_array_get(msgs, i);
        if (is_role(m, "system") || is_role(m, "developer"))
            continue;
        return is_role(m, "user");
    }
    return 0;
}

/* A constrained answer of a reasoning model: its grammar (root renamed
 * "answ") after the reasoning: "<think>" (mode 1: optional) then any
 * text without "</think>" (the states of its matcher, think-1 .. 7 after
 * that many of its bytes), "</think>", the template's blank line, the
 * answer; magistral's (mode 6) the same with "[THINK]" and "[/THINK]",
 * the answer right after it.  0, or -2 out of memory. */
static int
think_grammar(struct pv_gram *pg, int rmode)
{
    struct gx_buf *t = &pg->text;
    char *at = NULL;
    if (t->len >= 8 && !memcmp(t->data, "root ::=", 8))
        at = t->data;
    else if (t->data && (at = strstr(t->data, "\nroot ::=")) != NULL)
        at++;
    if (!at)
        return -2; /* out of memory: our grammars always have a root */
    memcpy(at, "answ", 4); /* the root rule becomes "answ" */
    /* both closes are 8 bytes whose first occurs nowhere else in them */
    const char *close = rmode == 6 ? "[/THINK]" : "</think>";
    char c0 = close[0];
    gx_buf_printf(t, "think-0 ::= [^%c] think-0 | \"%c\" think-1\n", c0,
                  c0);
    for (int k = 1; k < 8; k++) {
        char c = close[k];
        gx_buf_printf(t, "think-%d ::= \"%c\" think-1 | \"%c\" ", k, c0, c);
        if (k < 7)
            gx_buf_printf(t, "think-%d", k + 1);
        else
            gx_buf_printf(t, rmode >= 4 ? "answ" : "\"\\n\\n\" answ");
        gx_buf_printf(t, " | [^%c%c] think-0\n", c, c0);
    }
    gx_buf_printf(t, rmode == 2 || rmode == 4 || rmode == 5
                         ? "root ::= think-0\n"
                     : rmode == 6 ? "root ::= \"[THINK]\" think-0 | answ\n"
                                  : "root ::= \"<think>\" think-0 | answ\n");
    return t->data ? 0 : -2;
}

static int
lp_prepare(struct lp_engine *e, const json_t *b, struct lp_job *j,
           enum lp_tools *tools_mode)
{
    struct lp_tool *tools = NULL;
    size_t n_tools = 0;
    int named = -1, rc;
    enum lp_tools mode = LP_TOOLS_NONE;
    const json_t *msgs = json_object_get(b, "messages");
    size_t n = json_array_size(msgs);
    /* room for a system turn and a user turn of the tools (place_tools)
     * and the template's default system turn */
    struct le_chat_msg *cm = calloc(n + 3, sizeof(*cm));
    char **texts = calloc(n + 3, sizeof(char *));
    const struct lp_callfmt *cf = callfmt_of(e->model);
    struct pv_gram pg;
    pv_gram_init(&pg);
    rc = !cm || !texts ? -2 : 0;
    if (rc == 0)
        rc = check_params(j, b, lp_params);
    if (rc == 0)
        rc = read_sampling(j, b, 1);
    if (rc == 0)
        rc = read_logit_bias(e, j, b);
    if (rc == 0)
        j->sp.top_logprobs = j->top_lp;
    if (rc == 0)
        rc = read_tools(j, b, &tools, &n_tools, &mode, &named);
    /* several calls an answer unless parallel_tool_calls is false, a
     * function is named, or the format has one a turn */
    int max_calls = mode == LP_TOOLS_NAMED ||
                            json_is_false(json_object_get(
                                b, "parallel_tool_calls"))
                        ? 1
                        : cf->max_calls;
    int have_format = 0;
    if (rc == 0)
        rc = format_grammar(j, &pg, json_object_get(b, "response_format"),
                            &have_format);
    if (rc == 0 && have_format && mode != LP_TOOLS_NONE)
        rc = refuse(j, "response_format", "unsupported_value",
                    "the local engine cannot combine response_format with "
                    "tool calls (use tool_choice none, or no tools)");
    if (rc == 0 && mode != LP_TOOLS_NONE)
        rc = tools_grammar(j, &pg, tools, n_tools, mode, named, max_calls,
                           cf);
    if (rc == 0 && mode != LP_TOOLS_NONE && xml_of(cf))
        rc = xml_keys_of(j, tools, n_tools);
    int constrained = have_format || mode != LP_TOOLS_NONE;
    enum le_chat_template tmpl = le_model_chat_template(e->model);
    int rmode = le_chat_reasoning(tmpl), think = 0;
    const char *level = NULL;
    if (rc == 0)
        rc = read_effort(j, b, rmode, &think, &level);
    if (rc == 0 && rmode == 4 && !ends_with_user(msgs))
        think = 0, level = NULL;
    /* harmony: a constrained answer is the final channel's, opened in the
     * prompt (no analysis first; README) */
    if (rc == 0 && rmode == 3 && constrained)
        think = 0;
    if (rc == 0 && think && constrained)
        rc = think_grammar(&pg, rmode);
    if (rc == 0 && constrained && j->n_stops)
        rc = refuse(j, "stop", "unsupported_value",
                    "the local engine cannot combine stop strings with "
                    "response_format or tool calls (a stop string could "
                    "cut the JSON)");
    if (rc == 0 && constrained) {
        char gerr[256] = "";
        if (!pg.text.data) {
            rc = -2;
        } else if (le_grammar_parse(pg.text.data, pg.text.len, NULL,
                                    &j->grammar, gerr,
                                    sizeof(gerr)) != LE_OK) {
            /* our compiler writes valid grammars: what fails here is a
             * size bound, which the request's schema passed */
            rc = refuse(j, have_format ? "response_format" : "tools",
                        "unsupported_value",
                        "the schema is too large for the local engine (%s)",
                        gerr);
        }
    }
    /* the messages, then the tools described where the format has them */
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < n; i++, k++) {
        texts[k] = render_message(j, msgs, i, &cm[k].role, cf);
        if (!texts[k])
            rc = j->http_status ? -1 : -2;
        cm[k].content = texts[k];
        if (rc == 0 && k &&
            (cf->kind == LE_TOOLS_HERMES || cf->kind == LE_TOOLS_GRANITE ||
             cf->kind == LE_TOOLS_QWEN3_CODER) &&
            is_role(json_array_get(msgs, i), "tool") &&
            is_role(json_array_get(msgs, i - 1), "tool")) {
            /* results of one turn's calls: one user turn, as Qwen2.5's,
             * Granite's and Qwen3-Coder's templates write them */
            char *both = NULL;
            if (asprintf(&both, "%s%s%s", texts[k - 1],
                         cf->kind == LE_TOOLS_HERMES ? "\n" : "",
                         texts[k]) < 0) {
                rc = -2;
                break;
            }
            free(texts[k - 1]);
            free(texts[k]);
            texts[k] = NULL;
            texts[k - 1] = both;
            cm[k - 1].content = both;
            k--;
        }
    }
    /* Mistral's templates that define a default system text write it
     * when the messages start without one (today's date in it), and
     * Moonshot's (kimi) the one their template writes then; one that
     * asks for reasoning only where llmux splits it off (magistral's
     * [THINK], magistral-2506's <think>), not where the template is not
     * read as a reasoning one (its content would carry the reasoning) */
    if (rc == 0 && (le_chat_is_mistral(tmpl) || tmpl == LE_CHAT_KIMI) &&
        (k == 0 || strcmp(cm[0].role, "system"))) {
        char *def = le_model_default_system(e->model, NULL);
        if (def && !le_chat_reasoning(tmpl) &&
            (strstr(def, "[THINK]") || strstr(def, "<think>"))) {
            free(def);
            def = NULL;
        }
        if (def) {
            memmove(cm + 1, cm, k * sizeof(*cm));
            memmove(texts + 1, texts, k * sizeof(*texts));
            texts[0] = def;
            cm[0].role = "system";
            cm[0].content = def;
            k++;
        }
    }
    /* harmony's and Granite 3's go to the template (the developer
     * message, the available_tools turn) */
    char *htools = NULL;
    if (rc == 0 && mode != LP_TOOLS_NONE &&
        (cf->kind == LE_TOOLS_HARMONY || cf->kind == LE_TOOLS_GRANITE3) &&
        !(htools = cf->kind == LE_TOOLS_HARMONY
                       ? harmony_tools(tools, n_tools, mode, named)
                       : granite3_tools(tools, n_tools, mode, named)))
        rc = -2;
    else if (rc == 0 && mode != LP_TOOLS_NONE && !htools)
        rc = place_tools(cf, tools_prompt(tools, n_tools, mode, named, cf),
                         cm, texts, &k,
                         /* Granite's tools take the default's place;
                          * V3.1's model card writes them after the system
                          * text and a blank line, an empty one too */
                         cf->kind == LE_TOOLS_GRANITE     ? NULL
                         : cf->kind == LE_TOOLS_DEEPSEEK31 ? ""
                         : cf->kind == LE_TOOLS_QWEN3_CODER
                             ? "You are Qwen, a helpful AI assistant that "
                               "can interact with a computer to solve tasks."
                             : le_chat_default_system(tmpl),
                         le_model_tools_first(e->model));
    if (rc == 0) {
        size_t plen = 0;
        /* deepseek3.1 and glm4.7: their prompt opens or closes it */
        struct le_chat_opts co = {level, NULL, htools,
                                  rmode != 4 && rmode != 5 ? 0
                                  : think                  ? 1
                                                           : -1};
        if (le_chat_apply_opts(tmpl, cm, k, 1, &co, &j->prompt_text,
                               &plen) != LE_OK)
            rc = refuse(j, "messages", "invalid_value",
                        "the messages could not be rendered with the "
                        "model's chat template");
    }
    /* A reasoning model: its answer is split into reasoning_content and
     * content (a constrained one's grammar lets the reasoning come
     * first: think_grammar); with the reasoning off, it is closed empty
     * in the prompt, as Qwen3's template does with thinking off */
    free(htools);
    if (rc == 0 && rmode && !think) {
        /* harmony's tool calls: the channel is the grammar's (the
         * commentary's call or the final answer) */
        const char *off = rmode == 3 && mode != LP_TOOLS_NONE
                              ? "<|channel|>"
                              : le_chat_reasoning_off(tmpl);
        char *p = NULL;
        if (asprintf(&p, "%s%s", j->prompt_text, off) < 0) {
            rc = -2;
        } else {
            free(j->prompt_text);
            j->prompt_text = p;
        }
    } else if (rc == 0) {
        pv_think_init(&j->tk, rmode);
    }
    for (size_t i = 0; texts && i < n + 3; i++)
        free(texts[i]);
    free(texts);
    free(cm);
    free(tools);
    pv_gram_cleanup(&pg);
    *tools_mode = mode;
    return rc;
}

int
pv_local_count_tokens(const struct pv_registry *r,
                      const struct cfg_provider *p, const json_t *body,
                      int64_t *n, char *err, size_t errlen)
{
    struct lp_engine *e = engine_for(r, p);
    if (!e || !e->model) {
        gx_errf(err, errlen, "no local model for this provider");
        return -1;
    }
    struct lp_job *j = calloc(1, sizeof(*j));
    if (!j) {
        gx_errf(err, errlen, "out of memory");
        return -1;
    }
    enum lp_tools mode;
    int rc = lp_prepare(e, body, j, &mode);
    if (rc == 0) {
        /* The prompt a generation would see, tokenized as run_job does. */
        int64_t k = le_model_tokenize(e->model, j->prompt_text,
                                      strlen(j->prompt_text), 1, 1, NULL, 0);
        if (k < 0) {
            gx_errf(err, errlen, "the prompt could not be tokenized");
            rc = -1;
        } else {
            *n = k;
        }
    } else {
        gx_errf(err, errlen, "%s", j->err[0] ? j->err : "out of memory");
        rc = -1;
    }
    free(j->prompt_text);
    json_decref(j->xml_keys);
    le_grammar_free(j->grammar);
    for (size_t i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stops);
    free(j->bias_id);
    free(j->bias);
    free(j);
    return rc;
}

static enum gx_status
lp_start(struct pv_loop *loop, const struct pv_request *req,
         const struct pv_callbacks *cb, struct pv_call **out, char *err,
         size_t errlen)
{
    struct lp_engine *e = engine_for(req->registry, req->provider);
    if (!e || !e->model) {
        gx_errf(err, errlen, "local engine for provider %s is not running",
                req->provider->name);
        return GX_EINVAL;
    }
    struct lp_job *j = calloc(1, sizeof(*j));
    if (!j) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    gx_buf_init(&j->text, 64 * 1024 * 1024);
    enum lp_tools mode = LP_TOOLS_NONE;
    enum pv_api api = req->chat ? req->chat->api : PV_API_CHAT;
    int text_api = api == PV_API_COMPLETIONS, b64 = 0;
    int rc = text_api ? lp_prepare_text(e, req->body, j)
             : api == PV_API_EMBEDDINGS
                 ? lp_prepare_embed(e, req->body, j, &b64)
                 : lp_prepare(e, req->body, j, &mode);
    if (rc == -2) {
        job_unref(j);
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    if (rc == -1)
        j->done = 1; /* refused: answered from the loop, never queued */
    struct pv_call *call =
        pv_call_alloc(loop, &pv_local_ops, req, cb, sizeof(struct lp_call));
    if (!call) {
        job_unref(j);
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    call->hooks = &lp_hooks;
    struct lp_call *lc = call->impl;
    lc->e = e; /* the call's reference: the instance outlives a reload */
    pv_inst_ref(&e->head);
    lc->job = j;
    lc->tools = mode;
    lc->think = j->tk.mode;
    lc->xml_keys = j->xml_keys;
    j->xml_keys = NULL;
    lc->fmt = callfmt_of(e->model);
    lc->stream = req->stream;
    lc->text_api = text_api;
    lc->embed = api == PV_API_EMBEDDINGS;
    lc->b64 = b64;
    lc->client_include_usage = req->client_include_usage;
    lc->created = (int64_t)time(NULL);
    snprintf(lc->id, sizeof(lc->id), "%s-%s",
             text_api ? "cmpl" : "chatcmpl", req->request_id ? req->request_id : "local");
    for (int k = 0; k < LP_N_MAX; k++) {
        /* choice 0's call id as with n = 1; the others' told apart */
        struct lp_choice *c = &lc->ch[k];
        int l = snprintf(c->call_id, sizeof(c->call_id), "call_%s",
                         req->request_id ? req->request_id : "local");
        if (k && l > 0 && (size_t)l < sizeof(c->call_id))
            snprintf(c->call_id + l, sizeof(c->call_id) - (size_t)l, "_%d",
                     k);
        gx_buf_init(&c->acc, 64 * 1024 * 1024);
        gx_buf_init(&c->xjs, 64 * 1024 * 1024);
        gx_buf_init(&c->racc, 64 * 1024 * 1024);
        pv_think_init(&c->tk, lc->think);
    }
    snprintf(lc->model, sizeof(lc->model), "%s", req->model->name);
    gx_buf_init(&lc->body, 64 * 1024 * 1024);
    j->ev = event_new(loop->base, -1, 0, on_job_event, call);
    if (!j->ev) {
        pv_http_cancel(call); /* lp_release drops the job */
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    if (j->done) {
        /* The answer (a 400) is delivered from the loop, after we return,
         * as the callbacks' contract wants. */
        event_active(j->ev, EV_READ, 0);
        *out = call;
        return GX_OK;
    }
    const struct cfg_provider *pc = req->provider;
    int fb = pc->first_byte_timeout_ms, total = pc->timeout_ms;
    if (total > 0 || fb > 0) {
        lc->timer = evtimer_new(loop->base, on_local_timeout, call);
        if (!lc->timer) {
            pv_http_cancel(call);
            gx_errf(err, errlen, "out of memory");
            return GX_ENOMEM;
        }
        lc->deadline_us = call->t_start_us +
                          (int64_t)(total > 0 ? total : 86400000) * 1000;
        int first = fb > 0 && (total <= 0 || fb < total) ? fb : total;
        struct timeval tv = {first / 1000, (first % 1000) * 1000};
        evtimer_add(lc->timer, &tv);
    }
    /* n > 1: clones of the job, made before anything is submitted so a
     * failure leaves nothing running.  Several prompts: choice k is
     * prompt k / n's choice k % n; each prompt's first job takes its
     * prompt over from j, the others clone it. */
    int n_jobs = j->n_choices * (int)(1 + j->n_more_prompts);
    for (int k = 1; k < n_jobs; k++) {
        struct lp_job *c = calloc(1, sizeof(*c));
        if (!c) {
            pv_http_cancel(call);
            gx_errf(err, errlen, "out of memory");
            return GX_ENOMEM;
        }
        int ci = k % j->n_choices; /* choice of its prompt */
        struct lp_job *up = ci ? (k - ci ? lc->more[k - ci - 1] : j) : j;
        pthread_mutex_init(&c->mu, NULL);
        c->refs = 1;
        gx_buf_init(&c->text, 64 * 1024 * 1024);
        c->sp = j->sp;
        c->prompt_only = j->prompt_only;
        c->want_lp = j->want_lp;
        c->echo = j->echo;
        pv_think_init(&c->tk, j->tk.mode);
        if (c->sp.seed != LE_SEED_RANDOM)
            c->sp.seed += (uint64_t)ci; /* choices differ when sampled */
        if (!ci) {
            struct lp_prompt *pp = &j->more_prompts[k / j->n_choices - 1];
            c->prompt_text = pp->text;
            c->ids = pp->ids;
            c->n_ids = pp->n_ids;
            pp->text = NULL;
            pp->ids = NULL;
        }
        pthread_mutex_lock(&up->mu);
        up->refs++;
        pthread_mutex_unlock(&up->mu);
        c->parent = up;
        lc->more[lc->n_more++] = c;
        c->ev = event_new(loop->base, -1, 0, on_job_event, call);
        if (!c->ev) {
            pv_http_cancel(call);
            gx_errf(err, errlen, "out of memory");
            return GX_ENOMEM;
        }
    }
    /* Choice 0 first: the clones share its whole prompt, so the scheduler
     * lets them wait for its prefill and copy the cells (sched.c). */
    for (int k = 0; k <= lc->n_more; k++) {
        struct lp_job *q = k ? lc->more[k - 1] : j;
        q->e = e;
        char serr[256] = "";
        enum le_status st = lc->embed
                                ? submit_embed(e, q, serr, sizeof(serr))
                                : submit_job(e, q, serr, sizeof(serr));
        if (st == LE_OK)
            continue;
        /* Refused by the engine itself (busy, context): answered from the
         * loop like a refusal, so a busy engine's 503 (retryable, with
         * Retry-After) lets the router fail over.  Choices already
         * submitted are stopped when the call is freed. */
        q->done = 1;
        q->st = st;
        snprintf(q->err, sizeof(q->err), "%s", serr);
        if (st == LE_EBUSY) {
            q->http_status = 503;
            snprintf(q->err_code, sizeof(q->err_code), "server_busy");
            GX_LOG(GX_LOG_INFO, req->request_id, "provider %s: %s",
                   pc->name, serr);
        }
        event_active(q->ev, EV_READ, 0);
        break;
    }
    *out = call;
    return GX_OK;
}

static void
lp_cancel(struct pv_call *call)
{
    /* The head goes through the common path; lp_release (free_impl) tells
     * the engine thread to stop at its next token. */
    pv_http_cancel(call);
}

/* Backpressure: the sequence leaves the batch while the client is slow
 * (at most the token in flight arrives meanwhile). */
static void
lp_pause(struct pv_call *call)
{
    struct lp_call *lc = call->impl;
    for (int k = 0; lc && lc->job && k <= lc->n_more; k++)
        atomic_store(&(k ? lc->more[k - 1] : lc->job)->paused, 1);
}

static void
lp_resume(struct pv_call *call)
{
    struct lp_call *lc = call->impl;
    if (!lc || !lc->job)
        return;
    for (int k = 0; k <= lc->n_more; k++)
        atomic_store(&(k ? lc->more[k - 1] : lc->job)->paused, 0);
    if (lc->job->e)
        le_sched_wake(lc->job->e->sched);
}

void
pv_local_stats(const struct pv_registry *r, size_t i,
               struct pv_local_stat *out)
{
    memset(out, 0, sizeof(*out));
    const struct cfg_provider *p = NULL;
    struct lp_engine *e =
        (struct lp_engine *)pv_registry_nth(r, &pv_local_ops, i, &p);
    if (!e)
        return;
    struct le_sched_stats st;
    le_sched_get_stats(e->sched, &st);
    out->provider = p->name;
    out->model = p->n_models ? p->models[0].name : p->name;
    out->queued = st.queued;
    out->active = st.active;
    out->paused = st.paused;
    out->generated_tokens = st.generated_tokens;
    out->cached_tokens = st.cached_tokens;
    out->prompt_tokens = st.prompt_tokens;
}

size_t
pv_local_count(const struct pv_registry *r)
{
    return pv_registry_count(r, &pv_local_ops);
}

const struct pv_ops pv_local_ops = {"local",   lp_start,    lp_cancel,
                                    lp_pause,  lp_resume,   lp_inst_new,
                                    lp_inst_free};
