/*
 * local_engine: llmux's in-process llama engine (DESIGN.md section 9).
 * Depends on libc, libm and pthreads only; builds and tests alone.
 *
 * This header is the face other folders use (providers/local.c and the
 * CLI in gateway/main.c).  Internal structs live in le_int.h.
 *
 * Objects and threads
 *   le_model    the weights (mmap'd GGUF, read-only), the vocabulary, the
 *               chat template and ONE compute pool of `threads` workers.
 *               After le_model_open returns, every function taking a
 *               const struct le_model * may be called from any thread at
 *               any time.  le_model_free must run after every session of
 *               the model is freed, and on no other thread at the same time.
 *   le_session  one sequence: KV cache, scratch buffers, sampler state.  A
 *               session is used by one thread at a time (any thread; no
 *               thread-local state).  Several sessions of one model may
 *               decode at the same time from different threads: they share
 *               the model's compute pool, which runs one matrix product at
 *               a time (a mutex), so sessions interleave at the granularity
 *               of one matrix product.  One pool per model (not per
 *               session) keeps the CPU from being oversubscribed.
 *
 * Ownership: the caller of _open/_new owns the result and frees it with the
 * matching _free (which accepts NULL).  Strings passed in are borrowed for
 * the call only.  Errors: every fallible function returns an le_status and,
 * when err is not NULL, writes a sentence into err[0..errlen).
 */
#ifndef LLMUX_LOCAL_ENGINE_H
#define LLMUX_LOCAL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

enum le_status {
    LE_OK = 0,
    LE_ENOMEM,   /* allocation failed */
    LE_EINVAL,   /* bad argument or bad input data */
    LE_EIO,      /* file could not be opened / read / mapped */
    LE_EFORMAT,  /* the file is not a valid / supported GGUF model */
    LE_ECONTEXT, /* the context window is full */
    LE_ECANCELED, /* cancelled */
    LE_EBUSY     /* every sequence and queue place is taken: retry later */
};

/* A static English phrase for st ("context window full", ...). */
const char *le_status_str(enum le_status st);

/* ------------------------------------------------------------------ */
/* Model                                                                */

struct le_model;
struct le_session;

enum le_kv_type {
    LE_KV_F16 = 0, /* default */
    LE_KV_Q8_0 = 1, /* half the memory; needs head_dim % 32 == 0 */
    LE_KV_F32 = 2   /* twice the memory; for reference comparisons */
};

struct le_model_params {
    int n_threads;  /* compute pool size incl. the calling thread; <= 0: 1 */
    int n_ctx;      /* context window (tokens) of each session; <= 0: the
                       model's context_length, capped at 4096 */
    int use_mmap;   /* 1 (default): map the file; 0: read it into memory */
    int use_mlock;  /* 1: mlock the weights */
    int n_batch;    /* prompt tokens evaluated per forward pass; <= 0: 128 */
    enum le_kv_type kv_type;
};

/* Fills p with the defaults above (1 thread, model context, mmap). */
void le_model_params_default(struct le_model_params *p);

/*
 * Opens a GGUF model (architectures llama and qwen2), checks every tensor
 * shape against the hyperparameters and starts the compute pool.  A GGUF
 * file holding only a vocabulary (no weights) opens too when vocab_only is
 * set; then only the tokenizer functions work.  p may be NULL (defaults).
 */
enum le_status le_model_open(const char *path, const struct le_model_params *p,
                             struct le_model **out, char *err, size_t errlen);
enum le_status le_model_open_vocab(const char *path, struct le_model **out,
                                   char *err, size_t errlen);
void le_model_free(struct le_model *m);

int32_t le_model_n_ctx(const struct le_model *m);   /* per session */
int32_t le_model_n_vocab(const struct le_model *m);
int32_t le_model_n_embd(const struct le_model *m);
/* An embedding of ids[0..n) (tokenized by the caller): the final hidden
 * state of every token (after the output norm), mean-pooled and
 * L2-normalised into out[0..le_model_n_embd).  Runs on the calling thread
 * in a session of its own; safe beside other sessions and the scheduler
 * (the compute pool runs one product at a time).  LE_ECONTEXT when n
 * exceeds the model's context. */
enum le_status le_model_embed(struct le_model *m, const int32_t *ids,
                              size_t n, float *out, char *err,
                              size_t errlen);
int le_model_n_threads(const struct le_model *m);
/* A one-line description ("llama 5 layers, 64 embd, f32, 292800 params"). */
const char *le_model_desc(const struct le_model *m);

/* Tokenizes text[0..len) with the model's vocabulary.  add_special: BOS
 * (EOS) as the vocab says.  parse_special: special-token text such as
 * "<|im_start|>" becomes that token (use it for chat-template output).
 * Writes up to cap ids and returns the count needed (call again with more
 * room when > cap), or -1 on error. */
int64_t le_model_tokenize(const struct le_model *m, const char *text,
                          size_t len, int add_special, int parse_special,
                          int32_t *ids, size_t cap);
/* The text of one token (special tokens give "" unless special).  Returns
 * the length needed; writes min(that, cap) bytes, not NUL-terminated. */
size_t le_model_token_to_piece(const struct le_model *m, int32_t id,
                               int special, char *buf, size_t cap);
int32_t le_model_bos(const struct le_model *m); /* -1 if none */
int32_t le_model_eos(const struct le_model *m); /* -1 if none */
int le_model_is_eog(const struct le_model *m, int32_t id);

/* ------------------------------------------------------------------ */
/* Chat templates                                                       */

enum le_chat_template {
    LE_CHAT_CHATML = 0, /* also the fallback for unknown templates */
    LE_CHAT_LLAMA2,
    LE_CHAT_LLAMA3,
    LE_CHAT_MISTRAL,
    LE_CHAT_PHI3,
    LE_CHAT_GEMMA,
    LE_CHAT_ZEPHYR,
    /* Mistral's own templates (its cookbook's names): v3 (7B v0.3, Small
     * 2409), v3-tekken (Nemo), v7 with [SYSTEM_PROMPT] (Large 2411), v7
     * on tekken (Small 3); LE_CHAT_MISTRAL is the older one and the
     * fallback for other [INST] templates */
    LE_CHAT_MISTRAL_V3,
    LE_CHAT_MISTRAL_V3_TEKKEN,
    LE_CHAT_MISTRAL_V7,
    LE_CHAT_MISTRAL_V7_TEKKEN,
    LE_CHAT_DEEPSEEK3, /* DeepSeek V3 (no reasoning) */
    /* DeepSeek's template with R1's </think> rule (R1 and its distills):
     * the answer may open "<think>"; -thinking: the template opens it
     * ("<｜Assistant｜><think>\n", their updated templates) */
    LE_CHAT_DEEPSEEK_R1,
    LE_CHAT_DEEPSEEK_R1_THINKING,
    /* ChatML with Qwen3's reasoning rules (Qwen3 and Qwen3-Instruct-2507;
     * -thinking: Qwen3-Thinking-2507, whose template opens "<think>\n") */
    LE_CHAT_QWEN3,
    LE_CHAT_QWEN3_THINKING,
    /* ChatML with Qwen2.5's default system text when the messages have
     * none ("You are Qwen, created by Alibaba Cloud. ...") */
    LE_CHAT_QWEN25,
    /* Phi-4 (14B): <|im_start|>ROLE<|im_sep|>TEXT<|im_end|>, no newlines */
    LE_CHAT_PHI4,
    /* IBM Granite 3.x and 4.1: <|start_of_role|>ROLE<|end_of_role|>TEXT
     * <|end_of_text|>\n */
    LE_CHAT_GRANITE,
    /* OpenAI's harmony (gpt-oss): <|start|>ROLE<|message|>TEXT<|end|>
     * after its system message (date, reasoning level, channels); the
     * answer comes in channels, analysis (the reasoning) then final */
    LE_CHAT_HARMONY,
    /* Granite 4.0: granite with its default system turn ("You are a
     * helpful assistant. Please ensure ...") when the messages have none */
    LE_CHAT_GRANITE4,
    /* Granite 3.3: granite with its dated default system turn when the
     * messages have none, and the tools (le_chat_opts.tools) as an
     * available_tools turn after the system turn */
    LE_CHAT_GRANITE33,
    /* DeepSeek V2 / V2-Lite / Coder-V2 chat: "User: U\n\nAssistant: A"
     * + <｜end▁of▁sentence｜>, the system text as it is + "\n\n"; gen:
     * "Assistant:" */
    LE_CHAT_DEEPSEEK2,
    /* DeepSeek V3.1 (and V3.1-Terminus): deepseek3's turns with a
     * "</think>" after <｜Assistant｜> (no reasoning; "<think>" with
     * le_chat_opts.reasoning_effort), results without the outputs'
     * markers and answered without a new <｜Assistant｜> */
    LE_CHAT_DEEPSEEK31,
    /* GLM-4.7-Flash (and the "[gMASK]<sop>" GLM templates):
     * [gMASK]<sop><|system|>S<|user|>U<|assistant|></think>A, the
     * generation prompt <|assistant|><think> (reasoning on, by default) or
     * <|assistant|></think> (le_chat_opts.reasoning < 0) */
    LE_CHAT_GLM47,
    /* Mistral's reasoning models (Magistral Small 2507 / 2509, Ministral
     * 3 Reasoning): mistral-v7-tekken whose default system text asks for
     * the reasoning in [THINK]...[/THINK] before the answer */
    LE_CHAT_MAGISTRAL,
    /* Magistral Small 2506: mistral-v7-tekken whose default system text
     * asks for the reasoning in <think>...</think> and a blank line, as
     * qwen3's (le_chat_reasoning 1) */
    LE_CHAT_MAGISTRAL_2506,
    /* Moonshot's (Kimi K2, Moonlight): <|im_system|>system<|im_middle|>S
     * <|im_end|><|im_user|>user<|im_middle|>U<|im_end|><|im_assistant|>
     * assistant<|im_middle|>A<|im_end|>, the template's default system
     * text (le_chat_default_eval) when the messages have none; gen:
     * <|im_assistant|>assistant<|im_middle|> */
    LE_CHAT_KIMI
};
/* The system text template tmpl (len bytes) writes when the messages
 * have none, read from its `set default_system_message = ...` (Mistral's
 * templates: Small 3.x, Devstral, Magistral): string literals joined by
 * `+`, and `today` as the template's strftime_now format writes date
 * ("YYYY-MM-DD"; NULL: today in UTC); or Moonshot's (kimi), the text its
 * template writes as is between "<|im_system|>system<|im_middle|>" and
 * "<|im_end|>".  malloc'd (caller frees), or NULL when it defines none, an
 * empty one, or one of another form. */
char *le_chat_default_eval(const char *tmpl, size_t len, const char *date);
/* The same for model m's own template. */
char *le_model_default_system(const struct le_model *m, const char *date);
/* 1 for the mistral templates (any of the five, and magistral) */
int le_chat_is_mistral(enum le_chat_template t);
/* The system text the template writes when the messages have none
 * (qwen2.5's, granite4's), or NULL. */
const char *le_chat_default_system(enum le_chat_template t);
/* Where a reasoning model's answer starts (providers/local.c splits it
 * into reasoning_content and content at "</think>"): 0 no reasoning
 * format, 1 the model may open "<think>" itself (qwen3, deepseek-r1), 2
 * the prompt opened it (qwen3-thinking, deepseek-r1-thinking), 3 the
 * answer's channels (harmony: analysis is the reasoning), 4 off unless
 * asked for, then opened by the prompt (deepseek3.1: le_chat_opts'
 * reasoning > 0 makes its generation prompt end "<think>" instead of
 * "</think>"; the answer's "</think>" is followed by no blank line), 5
 * the same on unless turned off (glm4.7: reasoning < 0 closes it), 6
 * as 1 with Mistral's markers, "[THINK]" and "[/THINK]" (magistral). */
int le_chat_reasoning(enum le_chat_template t);
/* What closes the reasoning empty after the generation prompt, to answer
 * without it (Qwen3's template with thinking off: "<think>\n\n</think>\n\n";
 * "\n</think>\n\n" where the prompt opened it; harmony's final channel
 * opened: "<|channel|>final<|message|>"; magistral's "[THINK][/THINK]"),
 * or "" without a reasoning
 * format or when the template closes it itself (deepseek3.1, glm4.7:
 * le_chat_opts.reasoning). */
const char *le_chat_reasoning_off(enum le_chat_template t);
/* 1 for the tekken ones, which write no space after their markers
 * ("[INST]U[/INST]", "[TOOL_CALLS][") */
int le_chat_is_tekken(enum le_chat_template t);

struct le_chat_msg {
    const char *role;    /* "system", "user", "assistant" ("tool" etc. are
                            passed through where the format has roles;
                            mistral writes "tool" and "tools" turns'
                            content as is, between the [INST] turns; the
                            deepseek ones a "tool_calls" turn's content
                            (its text and calls, written by the caller)
                            as an answer and "tool" turns as outputs) */
    const char *content; /* NUL-terminated UTF-8 */
};

/* Template from the text of tokenizer.chat_template (NULL or unknown:
 * chatml). */
enum le_chat_template le_chat_detect(const char *tmpl, size_t len);
/* "chatml", "llama2", ... ; and the reverse (-1 if unknown). */
const char *le_chat_template_name(enum le_chat_template t);
int le_chat_template_from_name(const char *name);
/* The template detected for the model's tokenizer.chat_template. */
enum le_chat_template le_model_chat_template(const struct le_model *m);

/* The tool-call format a chat template was trained with, from markers in
 * its text (le_chat_tools_detect; the rendering is the caller's, e.g.
 * providers/local.c):
 *   JSON    none of its own (or not recognised): llmux's JSON wrapper
 *           {"name": N, "arguments": {...}} described in a system turn;
 *   HERMES  "<tool_call>" in a chatml template (Qwen2.5, Hermes 2 Pro):
 *           the functions inside <tools></tools> in the system turn, a
 *           call as <tool_call>\n{"name": N, "arguments": {...}}\n
 *           </tool_call>, results in user turns inside <tool_response>;
 *   LLAMA3  a llama3 template with "ipython" turns and Meta's "parameters":
 *           dictionary of argument name" call format (Llama 3.1-3.3): the functions in the first user turn,
 *           a call as {"name": N, "parameters": {...}}, results as
 *           ipython turns;
 *   MISTRAL a mistral template with [TOOL_CALLS] and [AVAILABLE_TOOLS]
 *           (Mistral 7B v0.3, Mistral Nemo): the functions as a JSON list
 *           inside [AVAILABLE_TOOLS]..[/AVAILABLE_TOOLS] before the last
 *           user turn, the calls as [TOOL_CALLS] [{"name": N,
 *           "arguments": {...}}, ...], results inside [TOOL_RESULTS]..
 *           [/TOOL_RESULTS].
 *   MISTRAL_V11 a mistral template with [TOOL_CALLS] and [ARGS] (Mistral
 *           Small 3.1 / 3.2, Magistral, Devstral: tokenizer v11): the
 *           functions as for MISTRAL, each call as [TOOL_CALLS]NAME[ARGS]
 *           {...} one after another, results [TOOL_RESULTS]..
 *           [/TOOL_RESULTS] without ids.
 *   DEEPSEEK a deepseek3 / deepseek-r1 template with DeepSeek V3's and
 *           R1's call markers and its ```json fence (the V3.1 template,
 *           NAME<｜tool▁sep｜>{...} without the fence, is not this one):
 *           the calls as LE_DS_CALLS_BEGIN, each call LE_DS_CALL_BEGIN
 *           function LE_DS_SEP NAME\n```json\n{...}\n``` LE_DS_CALL_END
 *           with "\n" between two, then LE_DS_CALLS_END; results as
 *           "tool" turns (le_chat_apply writes the outputs' markers).
 *           The template lists no functions: where they go is the
 *           caller's choice.
 *   HARMONY the harmony template (gpt-oss): the functions as a
 *           TypeScript-like namespace in the developer message
 *           (le_chat_opts.tools, written by the caller), a call as a
 *           commentary message to=functions.NAME with <|constrain|>json
 *           and the arguments, ending at <|call|>; the caller writes the
 *           call turns ("tool_calls") and the results ("tool") in full,
 *           as harmony messages, which le_chat_apply passes on as they
 *           are.
 *   GRANITE3 "<|tool_call|>" and "available_tools" in a granite template
 *           (Granite 3.x): the functions as a JSON list in an
 *           available_tools turn (le_chat_opts.tools, written by the
 *           caller), the calls as <|tool_call|>[{"name": N, "arguments":
 *           {...}}, ...], results as "tool" turns.
 *   GRANITE "<tool_call>" in a granite template (Granite 4.0, 4.1): the
 *           calls as HERMES's; the functions inside <tools></tools> in
 *           the system turn with Granite's own words around them, a
 *           turn's results in one user turn, each as
 *           "\n<tool_response>\nR\n</tool_response>".
 *   DEEPSEEK31 "<｜tool▁sep｜>" in a deepseek3.1 template (V3.1): each call
 *           LE_DS_CALL_BEGIN NAME LE_DS_SEP {...} LE_DS_CALL_END with
 *           nothing between two, inside LE_DS_CALLS_BEGIN ..
 *           LE_DS_CALLS_END; results as "tool" turns.
 *   GLM     "<arg_key>" in a glm4.7 template (GLM-4.7-Flash): each call
 *           <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>..
 *           </tool_call> (V a text parameter's text, else its JSON),
 *           nothing between two; results as "tool" turns.
 *   QWEN3_CODER "<function=" and "<parameter=" in a ChatML template
 *           (Qwen3-Coder): each call <tool_call>\n<function=NAME>\n then
 *           <parameter=K>\nV\n</parameter>\n each, </function>\n
 *           </tool_call> ("\n" between two; V a text parameter's text,
 *           else its JSON); results as user turns of <tool_response>
 *           blocks.
 *   MISTRAL_CALL_ID "[CALL_ID]" besides v11's markers (Mistral Small
 *           3.2's template): each call [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]
 *           {...} (ID 9 of [a-zA-Z0-9]), results [TOOL_RESULTS]ID
 *           [TOOL_CONTENT]R[/TOOL_RESULTS].
 *   KIMI    Kimi K2's (kimi template with <|tool_calls_section_begin|>):
 *           the tools' JSON list in a tool_declare turn first of all;
 *           calls <|tool_calls_section_begin|> then each
 *           <|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>
 *           {...}<|tool_call_end|> (N counting the conversation's calls
 *           from 0), <|tool_calls_section_end|>; results as tool turns
 *           "## Return of functions.NAME:N\nR", the calls' ids in order. */
enum le_chat_tools { LE_TOOLS_JSON = 0, LE_TOOLS_HERMES, LE_TOOLS_LLAMA3,
                     LE_TOOLS_MISTRAL, LE_TOOLS_MISTRAL_V11,
                     LE_TOOLS_DEEPSEEK, LE_TOOLS_HARMONY,
                     LE_TOOLS_GRANITE, LE_TOOLS_GRANITE3,
                     LE_TOOLS_DEEPSEEK31, LE_TOOLS_GLM,
                     LE_TOOLS_QWEN3_CODER, LE_TOOLS_MISTRAL_CALL_ID,
                     LE_TOOLS_KIMI };
enum le_chat_tools le_chat_tools_detect(const char *tmpl, size_t len);
const char *le_chat_tools_name(enum le_chat_tools t); /* "json", ... */
/* The marker texts a call of format t is written with that a vocabulary
 * may hold as control tokens (mistral's [TOOL_CALLS], DeepSeek's
 * LE_DS_* call markers): a NULL-terminated list, empty for formats
 * without any.  le_model_token_to_piece gives such a token's text even
 * without `special`, so that a grammar can take it. */
const char *const *le_chat_tools_markers(enum le_chat_tools t);

/* DeepSeek's markers (U+FF5C fullwidth bars, U+2581 for the blanks; in
 * DeepSeek's vocabularies each is one token) */
#define LE_DS_(s) "<\xef\xbd\x9c" s "\xef\xbd\x9c>"
#define LE_DS__ "\xe2\x96\x81"
#define LE_DS_CALLS_BEGIN LE_DS_("tool" LE_DS__ "calls" LE_DS__ "begin")
#define LE_DS_CALLS_END LE_DS_("tool" LE_DS__ "calls" LE_DS__ "end")
#define LE_DS_CALL_BEGIN LE_DS_("tool" LE_DS__ "call" LE_DS__ "begin")
#define LE_DS_CALL_END LE_DS_("tool" LE_DS__ "call" LE_DS__ "end")
#define LE_DS_SEP LE_DS_("tool" LE_DS__ "sep")
#define LE_DS_OUTPUTS_BEGIN LE_DS_("tool" LE_DS__ "outputs" LE_DS__ "begin")
#define LE_DS_OUTPUTS_END LE_DS_("tool" LE_DS__ "outputs" LE_DS__ "end")
#define LE_DS_OUTPUT_BEGIN LE_DS_("tool" LE_DS__ "output" LE_DS__ "begin")
#define LE_DS_OUTPUT_END LE_DS_("tool" LE_DS__ "output" LE_DS__ "end")
/* Kimi K2's call markers (one special token each in its vocabulary) */
#define LE_KIMI_CALLS_BEGIN "<|tool_calls_section_begin|>"
#define LE_KIMI_CALLS_END "<|tool_calls_section_end|>"
#define LE_KIMI_CALL_BEGIN "<|tool_call_begin|>"
#define LE_KIMI_ARGS_BEGIN "<|tool_call_argument_begin|>"
#define LE_KIMI_CALL_END "<|tool_call_end|>"
enum le_chat_tools le_model_chat_tools(const struct le_model *m);
/* 1 when a mistral template lists the tools ([AVAILABLE_TOOLS]) before
 * its loop over the messages, right after the first system text
 * (Ministral 3, unsloth's Devstral), 0 when it lists them where the loop
 * reaches the last user turn (7B v0.3, Nemo, Small 3.x) */
int le_chat_tools_first(const char *tmpl, size_t len);
int le_model_tools_first(const struct le_model *m);

/*
 * Renders messages into a prompt string (malloc'd, NUL-terminated, caller
 * frees) to be tokenized with add_special = 1 and parse_special = 1: the
 * text never starts with the BOS token (the tokenizer adds it).  With
 * add_generation_prompt the assistant turn's header ends the text.
 */
enum le_status le_chat_apply(enum le_chat_template t,
                             const struct le_chat_msg *msgs, size_t n_msgs,
                             int add_generation_prompt, char **out,
                             size_t *out_len);
/* What a template may take besides the messages (NULL fields: the
 * defaults).  harmony: reasoning_effort "low", "medium" (default) or
 * "high" in its system message, date ("YYYY-MM-DD", default today in
 * UTC, as the template's strftime_now), and tools.  granite3.3: the date
 * (written "December 05, 2026") and tools. */
struct le_chat_opts {
    const char *reasoning_effort;
    const char *date;
    /* harmony: the functions' namespace text ("## functions\n\n
     * namespace functions {...} // namespace functions") for the
     * developer message; granite and granite3.3: the tools' JSON list for
     * the available_tools turn; or NULL */
    const char *tools;
    /* the templates whose generation prompt opens or closes the
     * reasoning (deepseek3.1, glm4.7): > 0 opened ("<think>"), < 0
     * closed ("</think>"), 0 the template's default (deepseek3.1 closed,
     * glm4.7 opened) */
    int reasoning;
};
enum le_status le_chat_apply_opts(enum le_chat_template t,
                                  const struct le_chat_msg *msgs,
                                  size_t n_msgs, int add_generation_prompt,
                                  const struct le_chat_opts *opts,
                                  char **out, size_t *out_len);
/* Control tokens of template t's own markers that a vocabulary holds and
 * the answer's text must show (harmony's channel and message markers, so
 * that the caller can split the channels): a NULL-terminated list. */
const char *const *le_chat_markers(enum le_chat_template t);

/* ------------------------------------------------------------------ */
/* Sampling                                                             */

#define LE_SEED_RANDOM UINT64_MAX

/* ------------------------------------------------------------------ */
/* Grammars (grammar.c): constrained generation                         */

struct le_grammar;    /* compiled rules; immutable, any thread */
struct le_gstate;     /* a position in a grammar; one thread at a time */
struct le_token_trie; /* a model's token pieces as a prefix trie;
                         immutable, any thread */

/*
 * Parses grammar text (the dialect is drawn at the top of grammar.c:
 * `name ::= "lit" [a-z] other ( x | y )* z? w{0,8} %free`) and compiles it.
 * root names the start rule (NULL: "root").  On error: LE_EINVAL and a
 * sentence with the line in err.  The caller owns *out.
 */
enum le_status le_grammar_parse(const char *text, size_t len,
                                const char *root, struct le_grammar **out,
                                char *err, size_t errlen);
void le_grammar_free(struct le_grammar *g);

/* A state at the start of g (g is borrowed and must outlive it). */
enum le_status le_gstate_new(const struct le_grammar *g,
                             struct le_gstate **out);
void le_gstate_free(struct le_gstate *gs);
/* 1 if bytes[0..n) can follow the input so far (the state is unchanged). */
int le_gstate_accepts(struct le_gstate *gs, const char *bytes, size_t n);
/* Advances by bytes[0..n) and returns 1, or returns 0 and leaves the state
 * as it was when they cannot follow. */
int le_gstate_accept(struct le_gstate *gs, const char *bytes, size_t n);
/* 1 if the input so far is a complete sentence (EOS may come now). */
int le_gstate_complete(const struct le_gstate *gs);
/* 1 if complete and no byte can follow: generation ends here. */
int le_gstate_finished(const struct le_gstate *gs);
/* 1 if the grammar has reached %free: every byte is allowed from now on. */
int le_gstate_is_free(const struct le_gstate *gs);

/* The trie of m's token pieces (special tokens and EOG tokens have no
 * text and never match grammar bytes; EOG tokens are allowed where the
 * grammar is complete).  Build once per model and share it. */
enum le_status le_token_trie_new(const struct le_model *m,
                                 struct le_token_trie **out);
void le_token_trie_free(struct le_token_trie *t);

struct le_sampling {
    float temperature;       /* <= 0: greedy (argmax, ties to lowest id) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off (llama.cpp's divide/multiply rule) */
    float frequency_penalty; /* 0: off; subtracts count * f */
    float presence_penalty;  /* 0: off; subtracts p if seen */
    int penalty_last_n;      /* window of past tokens for penalties; 64 */
    uint64_t seed;           /* LE_SEED_RANDOM: from the clock */
    int max_tokens;          /* <= 0: until the context is full */
    const char *const *stop; /* stop strings (borrowed for the call) */
    size_t n_stop;
    int ignore_eos;          /* 1: EOS/EOG tokens do not stop */
    /* Constrained generation: every token is one the grammar allows; EOG
     * only where the grammar is complete; the generation stops
     * (LE_FINISH_STOP) when the grammar is finished (complete, nothing can
     * follow) or at an EOG token, and LE_FINISH_LENGTH at max_tokens
     * with the sentence unfinished.  Borrowed for the call.  NULL: free
     * text.  trie: the model's token trie (NULL: built for the call). */
    const struct le_grammar *grammar;
    const struct le_token_trie *trie;
    /* Alternatives reported beside each sampled token's log-probability
     * (0..LE_TOP_LOGPROBS_MAX) when the scheduler request has an
     * on_logprob callback; otherwise unused. */
    int top_logprobs;
    /* logit_bias: bias[i] is added to the logit of token bias_id[i]
     * before any other step (penalties, top-k/p, min-p, temperature,
     * greedy's argmax), and the grammar's mask still applies after it, so
     * a bias never lets a forbidden token through.  +100 / -100 force /
     * ban a token in practice.  The log-probabilities reported
     * (on_logprob) stay the model's own, unbiased.  Every id must be in
     * the vocabulary (le_sched_submit: LE_EINVAL) and every bias finite;
     * an id listed twice gets both.  Borrowed for the call (the sampler
     * copies them).  n_bias 0: off. */
    const int32_t *bias_id;
    const float *bias;
    size_t n_bias;
};

/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off
 * (repeat 1.0, last 64), seed random, max_tokens 256, no stops. */
void le_sampling_default(struct le_sampling *s);

/* ------------------------------------------------------------------ */
/* Sessions and generation                                              */

enum le_status le_session_new(struct le_model *m, struct le_session **out,
                              char *err, size_t errlen);
void le_session_free(struct le_session *s);

/*
 * Called once per generated token, on the generating thread.  id is the
 * token; text[0..len) is the text that became safe to emit with it: it may
 * be empty (held back because it could be the start of a stop string or an
 * incomplete UTF-8 sequence) or hold text of earlier tokens too.  A stop
 * string itself is never emitted.  The last call may have id -1: the held
 * back text flushed at the end.  Return nonzero to cancel the generation
 * (le_session_generate then returns LE_ECANCELED).
 */
typedef int (*le_token_cb)(void *ud, int32_t id, const char *text,
                           size_t len);

enum le_finish {
    LE_FINISH_NONE = 0,
    LE_FINISH_STOP,    /* EOS/EOG token or a stop string */
    LE_FINISH_LENGTH,  /* max_tokens reached, or the context filled up
                          while generating */
    LE_FINISH_CANCEL   /* the callback returned nonzero */
};

struct le_gen_result {
    int32_t prompt_tokens;     /* tokens of the prompt (all of them, also
                                  those reused from the KV cache) */
    int32_t completion_tokens; /* tokens sampled, not counting the EOG
                                  token that stopped the generation */
    int32_t cached_tokens;     /* prompt tokens reused from the cache */
    enum le_finish finish;
    double prompt_ms;          /* prefill wall time */
    double gen_ms;             /* generation wall time */
};

/*
 * Generates from prompt[0..n_prompt) (ids, BOS included when wanted; see
 * le_model_tokenize).  The KV cache keeps the previous prompt+output of this
 * session: a prompt sharing a prefix with it is evaluated from the first
 * differing token.  Fails with LE_ECONTEXT (and a sentence naming the
 * numbers in err) before evaluating anything when n_prompt + max_tokens
 * exceeds the context window (when max_tokens <= 0: when the prompt alone
 * does not leave room for one token); never truncates.  res (may be NULL)
 * is filled also on failure.  cb may be NULL.
 */
enum le_status le_session_generate(struct le_session *s,
                                   const int32_t *prompt, size_t n_prompt,
                                   const struct le_sampling *sp,
                                   le_token_cb cb, void *ud,
                                   struct le_gen_result *res, char *err,
                                   size_t errlen);

/*
 * Low level: evaluates ids[0..n) at positions n_past.. of the session (the
 * KV cache grows by n) and leaves the logits of the last one in
 * le_session_logits (n_vocab floats, valid until the next call).
 * LE_ECONTEXT when the window would overflow.
 */
enum le_status le_session_decode(struct le_session *s, const int32_t *ids,
                                 size_t n, char *err, size_t errlen);
const float *le_session_logits(const struct le_session *s);
int32_t le_session_n_past(const struct le_session *s);
void le_session_reset(struct le_session *s); /* empties the KV cache */

/* A flag another thread may set (non-zero) to stop this session's work:
 * checked between prompt batches of le_session_decode (so a long prefill
 * stops too) and before each generated token; the call then returns
 * LE_ECANCELED.  flag is borrowed until set back to NULL. */
void le_session_set_cancel(struct le_session *s, const _Atomic int *flag);

/* ------------------------------------------------------------------ */
/* Scheduler (sched.c): continuous batching for a server                */

/*
 * One scheduler per model serves many requests at once: its own thread
 * decodes every active sequence in ONE batched forward pass per step,
 * sequences join and leave between steps, a prompt is prefilled in chunks
 * interleaved with the other streams' tokens, and KV cells are reused
 * across requests sharing a prefix (eviction: LRU of idle sequences; see
 * the top of sched.c).  The scheduler owns its KV memory: (parallel +
 * cache_seqs) sequences of le_model_n_ctx cells, and one scratch.
 *
 * Threads: le_sched_submit, le_sched_wake and le_sched_get_stats may be
 * called from any thread at any time between _new and _free.  Callbacks
 * run on the scheduler's thread.  le_sched_free must not run inside a
 * callback; the model must outlive the scheduler.
 */
struct le_sched;

struct le_sched_params {
    int parallel;   /* sequences decoded together; <= 0: 1 (max 256) */
    int max_queue;  /* requests waiting for a sequence beyond those; 0 ok */
    int cache_seqs; /* idle sequences' KV kept beyond `parallel` for
                       prefix reuse (memory: n_ctx cells each) */
    int chunk;      /* prompt tokens evaluated per step (all prefilling
                       sequences together) while others generate; a step
                       nobody waits on takes up to max(chunk, n_batch);
                       <= 0: the model's n_batch */
};
/* parallel 4, max_queue 64, cache_seqs 2, chunk 32 */
void le_sched_params_default(struct le_sched_params *p);

/* A sampled token's log-probability (natural log) under the model: the
 * softmax of its raw logits, before temperature, penalties and grammar,
 * so the figure does not depend on how the token was picked.  text_end:
 * bytes of generated text up to the end of this token's, counted as the
 * token callback emits them (so its text has gone out once that many
 * bytes have; text cut by a stop string never does).  The n_top most
 * likely tokens, most likely first (ties: lower id first). */
#define LE_TOP_LOGPROBS_MAX 20
struct le_logprob {
    int32_t id;
    float logprob;
    size_t text_end;
    int n_top;
    int32_t top_id[LE_TOP_LOGPROBS_MAX];
    float top_logprob[LE_TOP_LOGPROBS_MAX];
};
/* Called on the scheduler thread for each sampled token (never for the
 * EOG token that ends a generation), before the token callback of the
 * same token. */
typedef void (*le_logprob_cb)(void *ud, const struct le_logprob *lp);

/* Called once per accepted request, on the scheduler thread: st LE_OK
 * (res->finish says how it ended), LE_ECANCELED (the cancel flag, the
 * token callback, or shutdown), or an error with a sentence in err.  After
 * it returns the scheduler touches nothing of the request again. */
typedef void (*le_done_cb)(void *ud, enum le_status st,
                           const struct le_gen_result *res, const char *err);

struct le_sched_req {
    const int32_t *prompt; /* ids (BOS included when wanted); copied */
    size_t n_prompt;
    /* Borrowed until on_done, with its stop strings and grammar; trie
     * should be the model's shared trie (else one is built per request). */
    const struct le_sampling *sp;
    le_token_cb on_token;  /* as le_session_generate's; may be NULL */
    le_done_cb on_done;
    void *ud;
    /* Borrowed until on_done; NULL: none.  cancel non-zero: the request
     * ends (on_done with LE_ECANCELED) at the next step.  paused non-zero:
     * the sequence leaves the batch, keeping its cells, until it is zero
     * again (backpressure from a slow client).  Call le_sched_wake after
     * changing either. */
    const _Atomic int *cancel;
    const _Atomic int *paused;
    /* NULL: none computed.  Else each sampled token's log-probability and
     * sp->top_logprobs alternatives (struct le_logprob), with ud. */
    le_logprob_cb on_logprob;
    /* NULL: none.  Else the prompt's own log-probabilities (a completion
     * API's echo): the prefill keeps the logits of every position it
     * evaluates (the rows of one step at a time, so the memory is bounded
     * by the chunk, not the prompt) and, for each prompt position i from
     * 1 to n_prompt - 1, in order and before any sampled token's
     * on_logprob, this is called with prompt[i]'s log-probability under
     * the logits at position i - 1 (id prompt[i], sp->top_logprobs
     * alternatives, text_end 0; lp borrowed for the call), with ud.
     * Such a request reuses no cached prefix cells (every position is
     * evaluated, none copied), leaves its cells for later requests as
     * any other does, and changes no other sequence's output. */
    le_logprob_cb on_prompt_logprob;
    /* Non-zero: score the prompt only (a completion API's max_tokens 0
     * with echo): the request ends right after its prefill (every
     * on_prompt_logprob call made) with on_done LE_OK, finish
     * LE_FINISH_LENGTH and completion_tokens 0; no token is sampled and
     * no decode step runs for it, so on_token and on_logprob are never
     * called.  sp->max_tokens is not read (there, <= 0 means "until the
     * context is full", so it cannot say "none"); the prompt may then
     * fill the whole context.  Its figures are those of the same request
     * without prompt_only (the same pieces, the same kernels). */
    int prompt_only;
};

enum le_status le_sched_new(struct le_model *m,
                            const struct le_sched_params *p,
                            struct le_sched **out, char *err, size_t errlen);
/* Stops the thread; every request not done gets on_done(LE_ECANCELED) on
 * the calling thread.  Accepts NULL. */
void le_sched_free(struct le_sched *s);

/*
 * Queues a request and returns at once.  LE_OK: on_done will be called
 * exactly once.  Otherwise no callback ever runs and err says why:
 * LE_EBUSY when parallel + max_queue requests are already running or
 * waiting (answer "busy" so the caller can go elsewhere), LE_ECONTEXT
 * when n_prompt + max_tokens exceed the context (prompt_only: when
 * n_prompt does), LE_EINVAL for an empty
 * prompt or an id (of the prompt or sp->bias_id) outside the vocabulary,
 * or a bias that is not finite.
 */
enum le_status le_sched_submit(struct le_sched *s,
                               const struct le_sched_req *r, char *err,
                               size_t errlen);
/* Wakes the scheduler after a cancel or paused flag changed. */
void le_sched_wake(struct le_sched *s);

struct le_sched_stats {
    int32_t queued;            /* waiting for a sequence */
    int32_t active;            /* holding a sequence (paused included) */
    int32_t paused;            /* of active: out of the batch (last step) */
    int32_t parallel, max_queue;
    uint64_t requests;         /* accepted, total */
    uint64_t prompt_tokens;    /* total, cached included */
    uint64_t cached_tokens;    /* prompt tokens reused from the cache */
    uint64_t generated_tokens; /* total */
    uint64_t steps;            /* forward passes */
};
void le_sched_get_stats(struct le_sched *s, struct le_sched_stats *out);

/*
 * CLI entry points for `llmux run`, `llmux bench` and `llmux tokenize`
 * (DESIGN.md section 4).  argv[0] is the subcommand name.  Return the
 * process exit code (0 ok, 1 bad input, 2 usage error); never exit().
 */
int le_cli_run(int argc, char **argv);
int le_cli_bench(int argc, char **argv);
int le_cli_tokenize(int argc, char **argv);

#endif
