/*
 * chat.c: chat templates.  We do not run Jinja: the template text from
 * tokenizer.chat_template is only searched for the characteristic markers
 * of the formats we know, and the messages are rendered by hand-written
 * code per format.  A template we do not recognise (or none) renders as
 * ChatML, the most widely trained-on format, and the choice is visible
 * through le_chat_template_name.
 *
 * Conventions (as llama.cpp's built-in templates): the output never starts
 * with the BOS token, because the tokenizer adds it; special tokens appear
 * as text and are parsed with parse_special.  Formats without a system
 * role (mistral, gemma) put the system text in front of the first user
 * message, separated by a blank line.  Where the published template trims
 * message content (llama2, llama3, gemma), we trim it too.
 *
 * The formats (S system, U user, A assistant; "\n" newlines):
 *   chatml   <|im_start|>ROLE\nTEXT<|im_end|>\n ...   gen: <|im_start|>assistant\n
 *   llama2   [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U [/INST]
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> ...
 *            gen: <|start_header_id|>assistant<|end_header_id|>\n\n
 *   mistral  [INST] S\n\nU [/INST] A</s> [INST] U [/INST]   (v1: 7B v0.1,
 *            v0.2, Mixtral 8x7B; the text's own start needs no space:
 *            the tokenizer's dummy prefix gives it)
 *   mistral-v3         [INST] U[/INST] A</s>[INST] S\n\nU[/INST]
 *   mistral-v3-tekken  [INST]U[/INST]A</s>[INST]S\n\nU[/INST]
 *            (Mistral's v3 templates put the system text in front of the
 *            last user turn; the assistant's text is trimmed in v3)
 *   mistral-v7         [SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U[/INST] A</s>
 *   mistral-v7-tekken  [SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]U[/INST]A</s>
 *   magistral          as mistral-v7-tekken; the answer may reason in
 *            [THINK]...[/THINK] first (le_chat_reasoning 6), as the
 *            template's default system text asks
 *   magistral-2506     the same in <think>...</think> and a blank line
 *            (le_chat_reasoning 1, qwen3's)
 *            (all mistral ones: "tools", "tool" and "tool_calls" turns are
 *            their content as it is, e.g. [AVAILABLE_TOOLS]..,
 *            [TOOL_RESULTS]..[/TOOL_RESULTS], outside any [INST]; a
 *            "tool_calls" turn ends with </s> as an assistant's does)
 *   phi3     <|ROLE|>\nTEXT<|end|>\n ...               gen: <|assistant|>\n
 *   phi4     <|im_start|>ROLE<|im_sep|>TEXT<|im_end|> ...
 *            gen: <|im_start|>assistant<|im_sep|>
 *   granite  <|start_of_role|>ROLE<|end_of_role|>TEXT<|end_of_text|>\n ...
 *            gen: <|start_of_role|>assistant<|end_of_role|> (Granite 3.0's
 *            and 4.1's templates; 3.2 writes a dated default system text
 *            when the messages have none, which llmux does not)
 *   granite4 the same after Granite 4.0's default system turn when the
 *            messages start without one (4.1's template has none: granite)
 *   deepseek2  U: "User: U\n\n", A: "Assistant: A<｜end▁of▁sentence｜>",
 *            S: "S\n\n", each where it stands; gen: "Assistant:"
 *            (DeepSeek V2, V2-Lite, Coder-V2)
 *   granite3.3  the same after Granite 3.3's dated default system turn
 *            ("Knowledge Cutoff Date: April 2024. Today's Date: December
 *            05, 2026. You are Granite, developed by IBM. You are a helpful
 *            AI assistant.") when the messages start without one; with
 *            tools (le_chat_opts.tools) the turn's last sentence names the
 *            <|tool_call|> format and an available_tools turn follows it
 *            (granite too)
 *   gemma    <start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n
 *            gen: <start_of_turn>model\n
 *   zephyr   <|ROLE|>\nTEXT</s>\n ...                  gen: <|assistant|>\n
 *   deepseek3  S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜>   gen: <｜Assistant｜>
 *            (the system texts first, joined by a blank line; an
 *            assistant's reasoning up to its </think> is not sent back,
 *            as R1's template drops it)
 *   deepseek-r1  the same (R1's template, which speaks of </think>; the
 *            answer may open its reasoning)
 *   deepseek-r1-thinking  the same, gen: <｜Assistant｜><think>\n (R1 and
 *            its distills since their template opens the reasoning)
 *            (all deepseek ones, DeepSeek's tool format: U <｜User｜>..
 *            A{TEXT}<｜tool▁calls▁begin｜>..<｜tool▁calls▁end｜>
 *            <｜end▁of▁sentence｜>, the "tool_calls" turn as the caller
 *            wrote it, then <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>
 *            R<｜tool▁output▁end｜>, \n<｜tool▁output▁begin｜>R2.., and
 *            <｜tool▁outputs▁end｜> in place of the next <｜Assistant｜>;
 *            see render_deepseek3)
 *   deepseek3.1  S<｜User｜>U<｜Assistant｜></think>A<｜end▁of▁sentence｜>
 *            gen (after a user turn only): <｜Assistant｜></think>, or
 *            <｜Assistant｜><think> with le_chat_opts.reasoning > 0
 *            (DeepSeek V3.1; results <｜tool▁output▁begin｜>R
 *            <｜tool▁output▁end｜>, the answer after them with no header;
 *            see render_deepseek31)
 *   glm4.7   [gMASK]<sop><|system|>S<|user|>U<|assistant|></think>A
 *            gen: <|assistant|><think>, or <|assistant|></think> with
 *            le_chat_opts.reasoning < 0 (GLM-4.7-Flash; the answer's
 *            text stripped, its reasoning kept after the last user turn
 *            as <think>R</think>; results <|observation|><tool_response>
 *            R</tool_response>..; see render_glm47)
 *   qwen3    ChatML; an assistant's reasoning (up to its last </think>,
 *            the text after it without leading newlines) is dropped in
 *            the turns up to the last user query (a user turn that is not
 *            one <tool_response> block) and kept after it (a tool loop) as
 *            <think>\nR\n</think>\n\nTEXT, as Qwen3's template
 *   qwen3-thinking  the same, gen: <|im_start|>assistant\n<think>\n
 *   qwen2.5  ChatML, with Qwen2.5's default system turn ("You are Qwen,
 *            created by Alibaba Cloud. You are a helpful assistant.") when
 *            the messages have no system text, as its template
 *   harmony  <|start|>system<|message|>(identity, knowledge cutoff, date,
 *            "Reasoning: LEVEL", the valid channels)<|end|>, the first
 *            system text as <|start|>developer<|message|># Instructions
 *            \n\nS\n\n<|end|> (later ones as developer turns of their
 *            own), <|start|>user<|message|>U<|end|>, an assistant's text
 *            as <|start|>assistant<|channel|>final<|message|>A<|end|>
 *            (its reasoning is not sent back, as gpt-oss's template drops
 *            it), other roles <|start|>ROLE<|message|>T<|end|>, and
 *            "tool_calls" and "tool" turns as the caller wrote them (whole
 *            harmony messages); with le_chat_opts.tools, "\nCalls to these
 *            tools must go to the commentary channel: 'functions'." ends
 *            the system message and "# Tools\n\n" TOOLS the developer's
 *            gen: <|start|>assistant
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

static const char *const chat_names[] = {
    "chatml",     "llama2",          "llama3",     "mistral",
    "phi3",       "gemma",           "zephyr",     "mistral-v3",
    "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "deepseek3",
    "deepseek-r1", "deepseek-r1-thinking", "qwen3", "qwen3-thinking",
    "qwen2.5", "phi4", "granite", "harmony", "granite4", "granite3.3",
    "deepseek2", "deepseek3.1", "glm4.7", "magistral", "magistral-2506",
    "kimi"};

const char *
le_chat_template_name(enum le_chat_template t)
{
    if ((unsigned)t < sizeof(chat_names) / sizeof(chat_names[0]))
        return chat_names[t];
    return "chatml";
}

int
le_chat_template_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof(chat_names) / sizeof(chat_names[0]); i++)
        if (name && strcmp(name, chat_names[i]) == 0)
            return (int)i;
    return -1;
}

static int
has(const char *t, size_t len, const char *marker)
{
    size_t ml = strlen(marker);
    return ml <= len && memmem(t, len, marker, ml) != NULL;
}

/* Qwen2.5's default system text, which its template writes when the
 * messages start without one */
#define QWEN25_SYSTEM                                                        \
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
/* Granite 3.3's, when the messages have no system text: "Knowledge
 * Cutoff Date: April 2024. Today's Date: " DATE ". You are Granite,
 * developed by IBM." and one of these */
#define GRANITE33_DATED "Knowledge Cutoff Date: April 2024. Today's Date: "
#define GRANITE33_PLAIN " You are a helpful AI assistant."
#define GRANITE33_TOOLS                                                      \
    " You are a helpful assistant with access to the following tools. "     \
    "When a tool is required to answer the user's query, respond only "     \
    "with <|tool_call|> followed by a JSON list of tools used. If a tool "  \
    "does not exist in the provided list of tools, notify the user that "   \
    "you do not have the ability to fulfill the request."
/* Granite 4.0's, when the messages have no system text and no tools */
#define GRANITE4_SYSTEM                                                      \
    "You are a helpful assistant. Please ensure responses are "              \
    "professional, accurate, and safe."

enum le_chat_template
le_chat_detect(const char *t, size_t len)
{
    if (!t || !len)
        return LE_CHAT_CHATML;
    if (has(t, len, "<|start|>") && has(t, len, "<|channel|>"))
        return LE_CHAT_HARMONY;
    if (has(t, len, "<|im_user|>") && has(t, len, "<|im_middle|>"))
        return LE_CHAT_KIMI;
    /* the generation prompt as the template's string writes it, with the
     * reasoning opened */
    if (has(t, len, "<|im_start|>")) {
        if (has(t, len, "<|im_sep|>"))
            return LE_CHAT_PHI4;
        if (has(t, len, QWEN25_SYSTEM))
            return LE_CHAT_QWEN25;
        if (!has(t, len, "<think>") || !has(t, len, "last_query_index"))
            return LE_CHAT_CHATML;
        return has(t, len, "assistant\\n<think>\\n'") ? LE_CHAT_QWEN3_THINKING
                                                        : LE_CHAT_QWEN3;
    }
    if (has(t, len, "<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        has(t, len, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") &&
        (has(t, len, "Assistant\xef\xbd\x9c></think>'") ||
         has(t, len, "Assistant\xef\xbd\x9c><think></think>'")))
        return LE_CHAT_DEEPSEEK31; /* V3.1's (llama.cpp's copy: <think>) */
    if (has(t, len, "<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        has(t, len, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"))
        return has(t, len, "Assistant\xef\xbd\x9c><think>\\n'")
                   ? LE_CHAT_DEEPSEEK_R1_THINKING
               : has(t, len, "</think>") ? LE_CHAT_DEEPSEEK_R1
                                         : LE_CHAT_DEEPSEEK3;
    if (has(t, len, "<|start_header_id|>") && has(t, len, "<|end_header_id|>"))
        return LE_CHAT_LLAMA3;
    if (has(t, len, "[INST]")) {
        if (has(t, len, "<<SYS>>"))
            return LE_CHAT_LLAMA2;
        /* tekken writes the marker as a string of its own, '[INST]' +
         * content; the SentencePiece ones '[INST] ' + content */
        int tekken = has(t, len, "\"[INST]\"") || has(t, len, "'[INST]'");
        if (has(t, len, "[SYSTEM_PROMPT]") && tekken &&
            (has(t, len, "[THINK]") || has(t, len, "<think>"))) {
            /* Magistral's and Ministral 3 Reasoning's default system text
             * asks for [THINK] reasoning, Magistral Small 2506's for
             * <think> tags (not merely a template that writes a client's
             * thinking blocks back) */
            char *d = le_chat_default_eval(t, len, "2000-01-01");
            int brackets = d && strstr(d, "[THINK]") && strstr(d, "[/THINK]"),
                tags = d && strstr(d, "<think>") && strstr(d, "</think>");
            free(d);
            if (brackets || tags)
                return brackets ? LE_CHAT_MAGISTRAL : LE_CHAT_MAGISTRAL_2506;
        }
        if (has(t, len, "[SYSTEM_PROMPT]"))
            return tekken ? LE_CHAT_MISTRAL_V7_TEKKEN : LE_CHAT_MISTRAL_V7;
        if (tekken)
            return LE_CHAT_MISTRAL_V3_TEKKEN;
        /* v3: '[INST] ' + content + '[/INST]', tools listed */
        if (has(t, len, "[AVAILABLE_TOOLS]") && !has(t, len, " [/INST]"))
            return LE_CHAT_MISTRAL_V3;
        return LE_CHAT_MISTRAL;
    }
    /* DeepSeek V2's plain "User: " / "Assistant: " turns, by the
     * literal llama.cpp also tells it by */
    if (has(t, len, "'Assistant: ' + message['content'] + eos_token"))
        return LE_CHAT_DEEPSEEK2;
    if (has(t, len, "<|start_of_role|>"))
        return has(t, len, GRANITE4_SYSTEM)   ? LE_CHAT_GRANITE4
               : has(t, len, GRANITE33_DATED) ? LE_CHAT_GRANITE33
                                              : LE_CHAT_GRANITE;
    if (has(t, len, "[gMASK]<sop>") && has(t, len, "<|assistant|>"))
        return LE_CHAT_GLM47;
    if (has(t, len, "<|assistant|>") && has(t, len, "<|end|>"))
        return LE_CHAT_PHI3;
    if (has(t, len, "<start_of_turn>"))
        return LE_CHAT_GEMMA;
    if (has(t, len, "<|user|>"))
        return LE_CHAT_ZEPHYR;
    return LE_CHAT_CHATML; /* unknown: ChatML (see the file comment) */
}

enum le_chat_tools
le_chat_tools_detect(const char *t, size_t len)
{
    if (!t || !len)
        return LE_TOOLS_JSON;
    enum le_chat_template f = le_chat_detect(t, len);
    int chatml = f == LE_CHAT_CHATML || f == LE_CHAT_QWEN3 ||
                 f == LE_CHAT_QWEN3_THINKING || f == LE_CHAT_QWEN25;
    /* Qwen3-Coder's XML calls inside <tool_call> */
    if (chatml && has(t, len, "<tool_call>") && has(t, len, "<function=") &&
        has(t, len, "<parameter="))
        return LE_TOOLS_QWEN3_CODER;
    if (chatml && has(t, len, "<tool_call>"))
        return LE_TOOLS_HERMES;
    /* Meta's JSON call format (3.1, 3.2, 3.3); not a llama3-based
     * template of another format that also speaks of ipython, such as
     * functionary's <function=...> */
    if (f == LE_CHAT_LLAMA3 && has(t, len, "ipython") &&
        has(t, len, "dictionary of argument name"))
        return LE_TOOLS_LLAMA3;
    /* Mistral's v3 tokenizer format (7B v0.3, Nemo): a JSON list after
     * [TOOL_CALLS]; v11's (Small 3.1+) [TOOL_CALLS]NAME[ARGS]{...};
     * Small 3.2's with [CALL_ID]ID before [ARGS] */
    if (le_chat_is_mistral(f) && has(t, len, "[TOOL_CALLS]") &&
        has(t, len, "[AVAILABLE_TOOLS]"))
        return has(t, len, "[CALL_ID]") && has(t, len, "[ARGS]")
                   ? LE_TOOLS_MISTRAL_CALL_ID
               : has(t, len, "[ARGS]") ? LE_TOOLS_MISTRAL_V11
                                     : LE_TOOLS_MISTRAL;
    /* DeepSeek V3's and R1's (their distills' too): the type, the
     * separator, the name and a ```json fence (below); V3.1's
     * NAME<｜tool▁sep｜>ARGS without a fence */
    /* GLM-4.7-Flash's XML pairs */
    if (f == LE_CHAT_GLM47 && has(t, len, "<tool_call>") &&
        has(t, len, "<arg_key>") && has(t, len, "<arg_value>"))
        return LE_TOOLS_GLM;
    if (f == LE_CHAT_DEEPSEEK31 && has(t, len, LE_DS_CALLS_BEGIN) &&
        has(t, len, LE_DS_SEP))
        return LE_TOOLS_DEEPSEEK31;
    /* Kimi K2's sections of calls */
    if (f == LE_CHAT_KIMI && has(t, len, LE_KIMI_CALLS_BEGIN) &&
        has(t, len, LE_KIMI_ARGS_BEGIN))
        return LE_TOOLS_KIMI;
    if (f == LE_CHAT_HARMONY) /* the commentary channel's calls */
        return LE_TOOLS_HARMONY;
    /* Granite 4.x: hermes's calls in Granite's turns; 3.x: a JSON list
     * after <|tool_call|>, the functions in an available_tools turn */
    if ((f == LE_CHAT_GRANITE || f == LE_CHAT_GRANITE4) &&
        has(t, len, "<tool_call>"))
        return LE_TOOLS_GRANITE;
    if ((f == LE_CHAT_GRANITE || f == LE_CHAT_GRANITE33) &&
        has(t, len, "<|tool_call|>") && has(t, len, "available_tools"))
        return LE_TOOLS_GRANITE3;
    if ((f == LE_CHAT_DEEPSEEK3 || f == LE_CHAT_DEEPSEEK_R1 ||
         f == LE_CHAT_DEEPSEEK_R1_THINKING) &&
        has(t, len, LE_DS_CALLS_BEGIN) && has(t, len, LE_DS_SEP) &&
        has(t, len, "```json"))
        return LE_TOOLS_DEEPSEEK;
    return LE_TOOLS_JSON;
}

int
le_chat_tools_first(const char *t, size_t len)
{
    if (!t || !le_chat_is_mistral(le_chat_detect(t, len)))
        return 0;
    const char *tl = memmem(t, len, "[AVAILABLE_TOOLS]", 17),
               *loop = memmem(t, len, "for message in", 14);
    return tl && loop && tl < loop;
}

const char *const *
le_chat_tools_markers(enum le_chat_tools t)
{
    static const char *const none[] = {NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", NULL};
    static const char *const v11[] = {"[TOOL_CALLS]", "[ARGS]", NULL};
    static const char *const call_id[] = {"[TOOL_CALLS]", "[CALL_ID]",
                                          "[ARGS]", NULL};
    static const char *const deepseek[] = {
        LE_DS_CALLS_BEGIN, LE_DS_CALL_BEGIN, LE_DS_SEP, LE_DS_CALL_END,
        LE_DS_CALLS_END, NULL};
    /* <tool_call> is an ordinary added token in Qwen's vocabularies; a
     * vocabulary that has it as a control token still shows it */
    static const char *const hermes[] = {"<tool_call>", "</tool_call>",
                                         NULL};
    static const char *const granite3[] = {"<|tool_call|>", NULL};
    static const char *const glm[] = {"<tool_call>", "</tool_call>",
                                      "<arg_key>", "</arg_key>",
                                      "<arg_value>", "</arg_value>", NULL};
    static const char *const kimi[] = {
        LE_KIMI_CALLS_BEGIN, LE_KIMI_CALL_BEGIN, LE_KIMI_ARGS_BEGIN,
        LE_KIMI_CALL_END, LE_KIMI_CALLS_END, NULL};
    return t == LE_TOOLS_KIMI          ? kimi
           : t == LE_TOOLS_MISTRAL     ? mistral
           : t == LE_TOOLS_MISTRAL_V11 ? v11
           : t == LE_TOOLS_MISTRAL_CALL_ID ? call_id
           : t == LE_TOOLS_DEEPSEEK || t == LE_TOOLS_DEEPSEEK31 ? deepseek
           : t == LE_TOOLS_HERMES || t == LE_TOOLS_GRANITE ||
                   t == LE_TOOLS_QWEN3_CODER
               ? hermes
           : t == LE_TOOLS_GRANITE3 ? granite3
           : t == LE_TOOLS_GLM      ? glm
                                       : none;
}

int
le_chat_is_mistral(enum le_chat_template t)
{
    return t == LE_CHAT_MISTRAL || t == LE_CHAT_MISTRAL_V3 ||
           t == LE_CHAT_MISTRAL_V3_TEKKEN || t == LE_CHAT_MISTRAL_V7 ||
           t == LE_CHAT_MISTRAL_V7_TEKKEN || t == LE_CHAT_MAGISTRAL ||
           t == LE_CHAT_MAGISTRAL_2506;
}

const char *
le_chat_reasoning_off(enum le_chat_template t)
{
    int r = le_chat_reasoning(t);
    return r == 3   ? "<|channel|>final<|message|>"
           : r == 6 ? "[THINK][/THINK]"
           : r == 2 ? "\n</think>\n\n"
           : r == 1 ? "<think>\n\n</think>\n\n"
                    : "";
}

const char *
le_chat_default_system(enum le_chat_template t)
{
    return t == LE_CHAT_QWEN25     ? QWEN25_SYSTEM
           : t == LE_CHAT_GRANITE4 ? GRANITE4_SYSTEM
                                   : NULL;
}

int
le_chat_reasoning(enum le_chat_template t)
{
    switch (t) {
    case LE_CHAT_QWEN3:
    case LE_CHAT_DEEPSEEK_R1:
    case LE_CHAT_MAGISTRAL_2506:
        return 1;
    case LE_CHAT_QWEN3_THINKING:
    case LE_CHAT_DEEPSEEK_R1_THINKING:
        return 2;
    case LE_CHAT_HARMONY:
        return 3;
    case LE_CHAT_DEEPSEEK31:
        return 4;
    case LE_CHAT_GLM47:
        return 5;
    case LE_CHAT_MAGISTRAL:
        return 6;
    default:
        return 0;
    }
}

int
le_chat_is_tekken(enum le_chat_template t)
{
    return t == LE_CHAT_MISTRAL_V3_TEKKEN || t == LE_CHAT_MISTRAL_V7_TEKKEN ||
           t == LE_CHAT_MAGISTRAL || t == LE_CHAT_MAGISTRAL_2506;
}

const char *
le_chat_tools_name(enum le_chat_tools t)
{
    return t == LE_TOOLS_HERMES    ? "hermes"
           : t == LE_TOOLS_LLAMA3  ? "llama3"
           : t == LE_TOOLS_MISTRAL ? "mistral"
           : t == LE_TOOLS_MISTRAL_V11 ? "mistral-v11"
           : t == LE_TOOLS_MISTRAL_CALL_ID ? "mistral-call-id"
           : t == LE_TOOLS_DEEPSEEK    ? "deepseek"
           : t == LE_TOOLS_HARMONY     ? "harmony"
           : t == LE_TOOLS_GRANITE     ? "granite"
           : t == LE_TOOLS_GRANITE3    ? "granite3"
           : t == LE_TOOLS_DEEPSEEK31  ? "deepseek3.1"
           : t == LE_TOOLS_GLM         ? "glm"
           : t == LE_TOOLS_QWEN3_CODER ? "qwen3-coder"
           : t == LE_TOOLS_KIMI        ? "kimi"
                                   : "json";
}

/* A growing string; on allocation failure `bad` is set and appends stop. */
struct chat_buf {
    char *p;
    size_t len, cap;
    int bad;
};

static void
cb_add(struct chat_buf *b, const char *s, size_t n)
{
    if (b->bad)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->bad = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void
cb_str(struct chat_buf *b, const char *s)
{
    cb_add(b, s, strlen(s));
}

static int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

/* the text of [a, z) without the blanks Python's strip() drops at either
 * end, into b */
static void
cb_trim_range(struct chat_buf *b, const char *a, const char *z)
{
    while (a < z && is_space(*a))
        a++;
    while (z > a && is_space(z[-1]))
        z--;
    cb_add(b, a, (size_t)(z - a));
}

static void
cb_trim(struct chat_buf *b, const char *s)
{
    cb_trim_range(b, s, s + strlen(s));
}

static const char *
content_of(const struct le_chat_msg *m)
{
    return m->content ? m->content : "";
}

static const char *
role_of(const struct le_chat_msg *m)
{
    return m->role ? m->role : "user";
}

/* ChatML (sep "\n", end "<|im_end|>\n"), and Phi-4's variant: the same
 * markers, <|im_sep|> after the role and nothing between turns */
static void
render_chatml(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
              int gen, const char *sep, const char *end)
{
    for (size_t i = 0; i < n; i++) {
        cb_str(b, "<|im_start|>");
        cb_str(b, role_of(&msgs[i]));
        cb_str(b, sep);
        cb_str(b, content_of(&msgs[i]));
        cb_str(b, end);
    }
    if (gen) {
        cb_str(b, "<|im_start|>assistant");
        cb_str(b, sep);
    }
}

static void
render_llama2(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n)
{
    /* Meta's template: BOS [INST] ... [/INST] per user turn, " A </s>"
     * after it; the system text goes inside the first [INST].  The
     * generation prompt is implied by the trailing [/INST]. */
    int first = 1, in_turn = 0;
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        if (!strcmp(role, "assistant")) {
            if (in_turn) {
                cb_str(b, " [/INST]");
                in_turn = 0;
            }
            cb_str(b, " ");
            cb_trim(b, content_of(&msgs[i]));
            cb_str(b, " </s>");
            continue;
        }
        if (!in_turn) {
            cb_str(b, first ? "[INST] " : "<s>[INST] ");
            first = 0;
            in_turn = 1;
        }
        if (!strcmp(role, "system")) {
            cb_str(b, "<<SYS>>\n");
            cb_trim(b, content_of(&msgs[i]));
            cb_str(b, "\n<</SYS>>\n\n");
        } else {
            cb_trim(b, content_of(&msgs[i]));
            cb_str(b, " [/INST]");
            in_turn = 0;
        }
    }
    if (in_turn)
        cb_str(b, " [/INST]");
}

static void
render_llama3(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
              int gen)
{
    for (size_t i = 0; i < n; i++) {
        cb_str(b, "<|start_header_id|>");
        cb_str(b, role_of(&msgs[i]));
        cb_str(b, "<|end_header_id|>\n\n");
        cb_trim(b, content_of(&msgs[i]));
        cb_str(b, "<|eot_id|>");
    }
    if (gen)
        cb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* A turn the mistral renderers put inside [INST] (user, or a role they
 * do not know). */
static int
mistral_inst(const char *role)
{
    static const char *const other[] = {"system", "assistant", "tool",
                                        "tools", "tool_calls"};
    for (size_t k = 0; k < sizeof(other) / sizeof(other[0]); k++)
        if (!strcmp(role, other[k]))
            return 0;
    return 1;
}

static void
render_mistral(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
               enum le_chat_template t)
{
    int v3 = t == LE_CHAT_MISTRAL_V3, v7 = t == LE_CHAT_MISTRAL_V7 ||
                                           t == LE_CHAT_MISTRAL_V7_TEKKEN ||
                                           t == LE_CHAT_MAGISTRAL ||
                                           t == LE_CHAT_MAGISTRAL_2506;
    const char *sp = le_chat_is_tekken(t) ? "" : " ";
    /* the system text (several: joined by a blank line): in front of the
     * first user turn (mistral), the last (v3), or a [SYSTEM_PROMPT] turn
     * where it stands (v7) */
    size_t sys_at = n;
    for (size_t i = 0; i < n && t != LE_CHAT_MISTRAL && !v7; i++)
        if (mistral_inst(role_of(&msgs[i])))
            sys_at = i;
    struct chat_buf sb = {0};
    const char *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        if (!strcmp(role, "system") && v7) {
            cb_str(b, "[SYSTEM_PROMPT]");
            cb_str(b, sp);
            cb_str(b, content_of(&msgs[i]));
            cb_str(b, "[/SYSTEM_PROMPT]");
        } else if (!strcmp(role, "system")) {
            if (sys)
                cb_str(&sb, "\n\n");
            cb_str(&sb, content_of(&msgs[i]));
            sys = sb.p ? sb.p : "";
            b->bad |= sb.bad;
        } else if (!strcmp(role, "assistant")) {
            cb_str(b, sp);
            if (v3)
                cb_trim(b, content_of(&msgs[i]));
            else
                cb_str(b, content_of(&msgs[i]));
            cb_str(b, "</s>");
        } else if (!strcmp(role, "tool") || !strcmp(role, "tools")) {
            cb_str(b, content_of(&msgs[i]));
        } else if (!strcmp(role, "tool_calls")) {
            cb_str(b, content_of(&msgs[i]));
            cb_str(b, "</s>");
        } else {
            if (t == LE_CHAT_MISTRAL && b->len) /* "</s> [INST]" in v1 */
                cb_str(b, " ");
            cb_str(b, "[INST]");
            cb_str(b, sp);
            if (sys && (sys_at == n || sys_at == i)) {
                cb_str(b, sys);
                cb_str(b, "\n\n");
                sys = NULL;
                sb.len = 0;
            }
            cb_str(b, content_of(&msgs[i]));
            cb_str(b, t == LE_CHAT_MISTRAL ? " [/INST]" : "[/INST]");
        }
    }
    if (sys) { /* no user turn to carry it: an instruction of its own */
        if (t == LE_CHAT_MISTRAL && b->len)
            cb_str(b, " ");
        cb_str(b, "[INST]");
        cb_str(b, sp);
        cb_str(b, sys);
        cb_str(b, t == LE_CHAT_MISTRAL ? " [/INST]" : "[/INST]");
    }
    free(sb.p);
}

static void
render_tagged(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
              int gen, const char *end)
{
    for (size_t i = 0; i < n; i++) {
        cb_str(b, "<|");
        cb_str(b, role_of(&msgs[i]));
        cb_str(b, "|>\n");
        cb_str(b, content_of(&msgs[i]));
        cb_str(b, end);
        cb_str(b, "\n");
    }
    if (gen)
        cb_str(b, "<|assistant|>\n");
}

static void
render_gemma(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
             int gen)
{
    const char *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        if (!strcmp(role, "system")) {
            sys = content_of(&msgs[i]);
            continue;
        }
        int is_model = !strcmp(role, "assistant");
        cb_str(b, "<start_of_turn>");
        cb_str(b, is_model ? "model" : role);
        cb_str(b, "\n");
        if (sys && !is_model) {
            cb_trim(b, sys);
            cb_str(b, "\n\n");
            sys = NULL;
        }
        cb_trim(b, content_of(&msgs[i]));
        cb_str(b, "<end_of_turn>\n");
    }
    if (gen)
        cb_str(b, "<start_of_turn>model\n");
}

/* DeepSeek's turn markers */
#define DS_USER LE_DS_("User")
#define DS_ASST LE_DS_("Assistant")
#define DS_EOS LE_DS_("end" LE_DS__ "of" LE_DS__ "sentence")

/* DeepSeek's templates: every system text first, a blank line between
 * two */
static void
ds_system(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n)
{
    int first = 1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(role_of(&msgs[i]), "system")) {
            if (!first)
                cb_str(b, "\n\n");
            cb_str(b, content_of(&msgs[i]));
            first = 0;
        }
}

/* DeepSeek V3's and R1's templates (V3-0324's and R1-0528's, which
 * render the cases the first ones got wrong the way those would have):
 * "tool_calls" turns (the caller's text: the answer's text, then the
 * calls from LE_DS_CALLS_BEGIN to LE_DS_CALLS_END) and "tool" turns (one
 * result each; the first after a call turn opens LE_DS_OUTPUTS_BEGIN,
 * the later ones follow after "\n").  An answer after results starts
 * with LE_DS_OUTPUTS_END instead of <｜Assistant｜>, and a prompt that
 * ends with results ends with it, without a generation prompt: the model
 * answers right after the results, as it was trained (deepseek-r1-
 * thinking's "<think>\n" still follows, le_chat_apply: the template
 * writes no generation prompt there, but the reasoning split of every
 * other answer of that template starts inside the reasoning).  A user
 * turn after results does not close them (the template does not). */
static void
render_deepseek3(struct chat_buf *b, const struct le_chat_msg *msgs,
                 size_t n, int gen)
{
    int in_outputs = 0, outputs_first = 1;
    ds_system(b, msgs, n);
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]), *c = content_of(&msgs[i]);
        int calls = !strcmp(role, "tool_calls");
        if (!strcmp(role, "system"))
            continue;
        if (calls || !strcmp(role, "assistant")) {
            const char *think = calls ? NULL : strstr(c, "</think>");
            cb_str(b, in_outputs ? LE_DS_OUTPUTS_END : DS_ASST);
            cb_str(b, think ? think + strlen("</think>") : c);
            cb_str(b, DS_EOS);
            in_outputs = 0;
            outputs_first |= calls;
        } else if (!strcmp(role, "tool")) {
            cb_str(b, outputs_first ? LE_DS_OUTPUTS_BEGIN : "\n");
            cb_str(b, LE_DS_OUTPUT_BEGIN);
            cb_str(b, c);
            cb_str(b, LE_DS_OUTPUT_END);
            in_outputs = 1;
            outputs_first = 0;
        } else {
            cb_str(b, DS_USER);
            cb_str(b, c);
            in_outputs = 0;
        }
    }
    if (in_outputs)
        cb_str(b, LE_DS_OUTPUTS_END);
    else if (gen)
        cb_str(b, DS_ASST);
}

/* DeepSeek V3.1's template (its model card's non-thinking prefix, which
 * llama.cpp's copy writes "<think></think>"): after a user turn the
 * answer opens <｜Assistant｜></think> (a "tool_calls" turn too: the
 * caller's text, the answer's and its calls as the model writes them),
 * a result is <｜tool▁output▁begin｜>R<｜tool▁output▁end｜> with nothing
 * around it, and the answer after results follows them directly (the
 * text as it is, no <｜Assistant｜>): the generation prompt is written
 * only after a user turn, "<｜Assistant｜></think>", or
 * "<｜Assistant｜><think>" when thinking (le_chat_opts.reasoning > 0). */
static void
render_deepseek31(struct chat_buf *b, const struct le_chat_msg *msgs,
                  size_t n, int gen, int think)
{
    int last_user = 0, after_tool = 0;
    ds_system(b, msgs, n);
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]), *c = content_of(&msgs[i]);
        int calls = !strcmp(role, "tool_calls");
        if (!strcmp(role, "system"))
            continue;
        if (calls || !strcmp(role, "assistant")) {
            const char *end = calls || after_tool ? NULL
                                                  : strstr(c, "</think>");
            if (last_user) {
                cb_str(b, DS_ASST);
                cb_str(b, "</think>");
            }
            cb_str(b, end ? end + strlen("</think>") : c);
            cb_str(b, DS_EOS);
            last_user = after_tool = 0;
        } else if (!strcmp(role, "tool")) {
            cb_str(b, LE_DS_OUTPUT_BEGIN);
            cb_str(b, c);
            cb_str(b, LE_DS_OUTPUT_END);
            last_user = 0;
            after_tool = 1;
        } else {
            cb_str(b, DS_USER);
            cb_str(b, c);
            last_user = 1;
            after_tool = 0;
        }
    }
    if (gen && last_user) {
        cb_str(b, DS_ASST);
        cb_str(b, think ? "<think>" : "</think>");
    }
}

static int
starts_ends(const char *s, const char *a, const char *z)
{
    size_t n = strlen(s), na = strlen(a), nz = strlen(z);
    return n >= na + nz && !strncmp(s, a, na) && !strcmp(s + n - nz, z);
}

/* the last "</think>" of s, or NULL */
static const char *
last_think_end(const char *s)
{
    const char *r = NULL;
    for (const char *p = s; (p = strstr(p, "</think>")) != NULL; p++)
        r = p;
    return r;
}

static void
render_qwen3(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
             int gen, int opened)
{
    size_t lq = n ? n - 1 : 0; /* the last user query */
    for (size_t i = n; i-- > 0;)
        if (!strcmp(role_of(&msgs[i]), "user") &&
            !starts_ends(content_of(&msgs[i]), "<tool_response>",
                         "</tool_response>")) {
            lq = i;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]), *c = content_of(&msgs[i]);
        cb_str(b, "<|im_start|>");
        cb_str(b, role);
        cb_str(b, "\n");
        if (strcmp(role, "assistant")) {
            cb_str(b, c);
            cb_str(b, "<|im_end|>\n");
            continue;
        }
        const char *end = last_think_end(c), *text = c;
        const char *r0 = c, *r1 = c; /* the reasoning: [r0, r1) */
        if (end) {
            text = end + strlen("</think>");
            r1 = strstr(c, "</think>"); /* before the first one */
            for (const char *p = c; (p = strstr(p, "<think>")) && p < r1;
                 p++)
                r0 = p + strlen("<think>");
            while (r1 > r0 && r1[-1] == '\n')
                r1--;
            while (r0 < r1 && *r0 == '\n')
                r0++;
            while (*text == '\n')
                text++;
        }
        if (i > lq && (end || i == n - 1)) {
            cb_str(b, "<think>\n");
            cb_add(b, r0, (size_t)(r1 - r0));
            cb_str(b, "\n</think>\n\n");
        }
        cb_str(b, text);
        cb_str(b, "<|im_end|>\n");
    }
    if (gen)
        cb_str(b, opened ? "<|im_start|>assistant\n<think>\n"
                         : "<|im_start|>assistant\n");
}

const char *const *
le_chat_markers(enum le_chat_template t)
{
    static const char *const none[] = {NULL};
    static const char *const harmony[] = {
        "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
        "<|constrain|>", NULL};
    static const char *const magistral[] = {"[THINK]", "[/THINK]", NULL};
    return t == LE_CHAT_HARMONY     ? harmony
           : t == LE_CHAT_MAGISTRAL ? magistral
                                    : none;
}

/* The day o->date names ("YYYY-MM-DD"), else today in UTC (as the
 * templates' strftime_now), written by strftime's fmt into out. */
static void
chat_date(const struct le_chat_opts *o, const char *fmt, char *out,
          size_t size)
{
    struct tm tm = {0};
    int y, mo, d;
    if (o && o->date && sscanf(o->date, "%d-%d-%d", &y, &mo, &d) == 3 &&
        mo >= 1 && mo <= 12 && d >= 1 && d <= 31) {
        tm.tm_year = y - 1900;
        tm.tm_mon = mo - 1;
        tm.tm_mday = d;
    } else {
        time_t now = time(NULL);
        gmtime_r(&now, &tm);
    }
    if (!strftime(out, size, fmt, &tm) && size)
        out[0] = '\0';
}

/* Moonshot's turns (kimi): each message under its role's marker and
 * name; an assistant's calls ("tool_calls", written as the model writes
 * them) as an assistant's turn, results ("tool") and the tools' list
 * ("tools", the tool_declare turn) as system-marker turns */
static void
render_kimi(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
            int gen)
{
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        if (!strcmp(role, "user"))
            cb_str(b, "<|im_user|>user");
        else if (!strcmp(role, "assistant") || !strcmp(role, "tool_calls"))
            cb_str(b, "<|im_assistant|>assistant");
        else if (!strcmp(role, "tools"))
            cb_str(b, "<|im_system|>tool_declare");
        else {
            cb_str(b, "<|im_system|>");
            cb_str(b, role);
        }
        cb_str(b, "<|im_middle|>");
        cb_str(b, content_of(&msgs[i]));
        cb_str(b, "<|im_end|>");
    }
    if (gen)
        cb_str(b, "<|im_assistant|>assistant<|im_middle|>");
}

/* Granite 3.0 / 4.1 (granite): the turns as they are; 4.0 (granite4) its
 * default system turn first when the messages have none; 3.3
 * (granite3.3) its dated one, which names the tools' call format when
 * there are tools.  With tools (o->tools) the granite and granite3.3
 * templates list them in an available_tools turn after the system turn. */
static void
granite_turn(struct chat_buf *b, const char *role, const char *text)
{
    cb_str(b, "<|start_of_role|>");
    cb_str(b, role);
    cb_str(b, "<|end_of_role|>");
    cb_str(b, text);
    cb_str(b, "<|end_of_text|>\n");
}

static void
render_granite(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
               int gen, enum le_chat_template t,
               const struct le_chat_opts *o)
{
    const char *tools = o && t != LE_CHAT_GRANITE4 ? o->tools : NULL;
    size_t i = 0;
    if (n && !strcmp(role_of(&msgs[0]), "system")) {
        granite_turn(b, "system", content_of(&msgs[0]));
        i = 1;
    } else if (t == LE_CHAT_GRANITE4) {
        granite_turn(b, "system", GRANITE4_SYSTEM);
    } else if (t == LE_CHAT_GRANITE33) {
        char day[64];
        chat_date(o, "%B %d, %Y", day, sizeof(day));
        cb_str(b, "<|start_of_role|>system<|end_of_role|>" GRANITE33_DATED);
        cb_str(b, day);
        cb_str(b, ". You are Granite, developed by IBM.");
        cb_str(b, tools ? GRANITE33_TOOLS : GRANITE33_PLAIN);
        cb_str(b, "<|end_of_text|>\n");
    }
    if (tools)
        granite_turn(b, "available_tools", tools);
    for (; i < n; i++)
        granite_turn(b, role_of(&msgs[i]), content_of(&msgs[i]));
    if (gen)
        cb_str(b, "<|start_of_role|>assistant<|end_of_role|>");
}

/* DeepSeek V2's template: each turn where it stands, a system text as
 * it is, every role but assistant and system as a user's */
static void
render_deepseek2(struct chat_buf *b, const struct le_chat_msg *msgs,
                 size_t n, int gen)
{
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        if (!strcmp(role, "assistant")) {
            cb_str(b, "Assistant: ");
            cb_str(b, content_of(&msgs[i]));
            cb_str(b, DS_EOS);
            continue;
        }
        if (strcmp(role, "system"))
            cb_str(b, "User: ");
        cb_str(b, content_of(&msgs[i]));
        cb_str(b, "\n\n");
    }
    if (gen)
        cb_str(b, "Assistant:");
}

/* GLM-4.7-Flash's template: "[gMASK]<sop>", each turn its marker and its
 * text as it is, an answer's reasoning (before its first "</think>",
 * after the last "<think>" there) kept as <think>R</think> after the last
 * user turn and written "</think>" before it or when empty, its text
 * (after the last "</think>") stripped; a turn's results after one
 * <|observation|>, each <tool_response>R</tool_response>; gen:
 * <|assistant|> and "<think>" (think) or "</think>". */
static void
render_glm47(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
             int gen, int think)
{
    size_t last_user = (size_t)-1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(role_of(&msgs[i]), "user"))
            last_user = i;
    cb_str(b, "[gMASK]<sop>");
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]), *c = content_of(&msgs[i]);
        if (!strcmp(role, "assistant")) {
            const char *end = strstr(c, "</think>"), *text = c;
            cb_str(b, "<|assistant|>");
            if (end) {
                const char *r0 = c, *r1 = end;
                for (const char *p = c; (p = strstr(p, "<think>")) && p < end;
                     p++)
                    r0 = p + strlen("<think>");
                text = last_think_end(c) + strlen("</think>");
                while (r0 < r1 && *r0 == '\n') /* rstrip / lstrip('\n') */
                    r0++;
                while (r1 > r0 && r1[-1] == '\n')
                    r1--;
                if (r1 > r0 && (last_user == (size_t)-1 || i > last_user)) {
                    cb_str(b, "<think>");
                    cb_trim_range(b, r0, r1);
                    cb_str(b, "</think>");
                    end = NULL;
                }
            }
            if (end || text == c)
                cb_str(b, "</think>");
            cb_trim(b, text);
        } else if (!strcmp(role, "tool")) {
            if (!i || strcmp(role_of(&msgs[i - 1]), "tool"))
                cb_str(b, "<|observation|>");
            cb_str(b, "<tool_response>");
            cb_str(b, c);
            cb_str(b, "</tool_response>");
        } else {
            cb_str(b, !strcmp(role, "system") ? "<|system|>" : "<|user|>");
            cb_str(b, c);
        }
    }
    if (gen)
        cb_str(b, think ? "<|assistant|><think>" : "<|assistant|></think>");
}

static void
render_harmony(struct chat_buf *b, const struct le_chat_msg *msgs, size_t n,
               int gen, const struct le_chat_opts *o)
{
    char today[16];
    const char *date = o ? o->date : NULL;
    if (!date) {
        chat_date(o, "%Y-%m-%d", today, sizeof(today));
        date = today;
    }
    cb_str(b, "<|start|>system<|message|>You are ChatGPT, a large language "
              "model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
              "Current date: ");
    cb_str(b, date);
    cb_str(b, "\n\nReasoning: ");
    cb_str(b, o && o->reasoning_effort ? o->reasoning_effort : "medium");
    cb_str(b, "\n\n# Valid channels: analysis, commentary, final. Channel "
              "must be included for every message.");
    const char *tools = o ? o->tools : NULL;
    if (tools)
        cb_str(b, "\nCalls to these tools must go to the commentary "
                  "channel: 'functions'.");
    cb_str(b, "<|end|>");
    int dev0 = n && (!strcmp(role_of(&msgs[0]), "system") ||
                     !strcmp(role_of(&msgs[0]), "developer"));
    if (tools && !dev0) { /* the tools' developer message of their own */
        cb_str(b, "<|start|>developer<|message|># Tools\n\n");
        cb_str(b, tools);
        cb_str(b, "<|end|>");
    }
    for (size_t i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]), *c = content_of(&msgs[i]);
        if (!strcmp(role, "tool_calls") || !strcmp(role, "tool")) {
            cb_str(b, c); /* whole harmony messages, the caller's */
            continue;
        }
        if (!strcmp(role, "system") || !strcmp(role, "developer")) {
            cb_str(b, "<|start|>developer<|message|>");
            if (i == 0) {
                cb_str(b, "# Instructions\n\n");
                cb_str(b, c);
                cb_str(b, "\n\n");
                if (tools) {
                    cb_str(b, "# Tools\n\n");
                    cb_str(b, tools);
                }
            } else {
                cb_str(b, c);
            }
        } else if (!strcmp(role, "assistant")) {
            cb_str(b, "<|start|>assistant<|channel|>final<|message|>");
            const char *think = strstr(c, "</think>");
            cb_str(b, think ? think + strlen("</think>") : c);
        } else {
            cb_str(b, "<|start|>");
            cb_str(b, role);
            cb_str(b, "<|message|>");
            cb_str(b, c);
        }
        cb_str(b, "<|end|>");
    }
    if (gen)
        cb_str(b, "<|start|>assistant");
}

/* A Jinja string literal at *p (quote ' or "), its escapes read, into b;
 * *p past it.  0, or -1 when it does not close. */
static int
jinja_literal(struct chat_buf *b, const char **p, const char *end)
{
    char q = **p;
    const char *s = *p + 1;
    for (; s < end && *s != q; s++) {
        char c = *s;
        if (c == '\\' && s + 1 < end) {
            c = *++s;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        }
        cb_add(b, &c, 1);
    }
    if (s >= end)
        return -1;
    *p = s + 1;
    return 0;
}

/* Moonshot's default system text: written as is after its system
 * header, up to <|im_end|>, where the messages have none */
static char *
kimi_default(const char *t, size_t len)
{
    static const char head[] = "<|im_system|>system<|im_middle|>";
    const char *end = t + len;
    for (const char *p = t; (p = memmem(p, (size_t)(end - p), head,
                                        sizeof(head) - 1)) != NULL;) {
        p += sizeof(head) - 1;
        const char *e = memmem(p, (size_t)(end - p), "<|im_end|>", 10);
        /* a literal text, not the message's content ({{ ... }}) */
        if (e && e > p && !memchr(p, '{', (size_t)(e - p)) &&
            !memchr(p, '<', (size_t)(e - p)) && !memchr(p, 0, (size_t)(e - p)))
            return strndup(p, (size_t)(e - p));
    }
    return NULL;
}

char *
le_chat_default_eval(const char *t, size_t len, const char *date)
{
    static const char key[] = "set default_system_message = ",
                      tkey[] = "set today = strftime_now(";
    const char *end = t ? t + len : NULL;
    const char *p = t ? memmem(t, len, key, sizeof(key) - 1) : NULL;
    /* Moonshot's markers (le_chat_detect's test, not a call to it: it
     * reads a mistral template's default through this function) */
    if (!p && t && has(t, len, "<|im_user|>") && has(t, len, "<|im_middle|>"))
        return kimi_default(t, len);
    if (!p)
        return NULL;
    p += sizeof(key) - 1;
    /* today's format, as the template's strftime_now writes it */
    char fmt[32] = "";
    const char *tp = memmem(t, len, tkey, sizeof(tkey) - 1);
    if (tp) {
        tp += sizeof(tkey) - 1;
        struct chat_buf f = {0};
        if (tp < end && (*tp == '"' || *tp == '\'') &&
            jinja_literal(&f, &tp, end) == 0 && f.p && f.len < sizeof(fmt))
            snprintf(fmt, sizeof(fmt), "%s", f.p);
        free(f.p);
    }
    struct chat_buf b = {0};
    cb_add(&b, "", 0);
    for (;;) {
        while (p < end && *p == ' ')
            p++;
        if (p < end && (*p == '"' || *p == '\'')) {
            if (jinja_literal(&b, &p, end) != 0)
                break;
        } else if (p + 5 <= end && !memcmp(p, "today", 5) && fmt[0]) {
            struct le_chat_opts o = {NULL, date, NULL, 0};
            char day[64];
            chat_date(&o, fmt, day, sizeof(day));
            cb_str(&b, day);
            p += 5;
        } else {
            break; /* another name or form: not read */
        }
        while (p < end && *p == ' ')
            p++;
        if (p < end && *p == '+') {
            p++;
            continue;
        }
        /* a NUL would end the text early where it is used (fuzzing) */
        if (p + 1 < end && (!memcmp(p, "%}", 2) || !memcmp(p, "-%", 2)) &&
            b.len && !b.bad && !memchr(b.p, 0, b.len))
            return b.p;
        break;
    }
    free(b.p);
    return NULL;
}

enum le_status
le_chat_apply(enum le_chat_template t, const struct le_chat_msg *msgs,
              size_t n_msgs, int add_generation_prompt, char **out,
              size_t *out_len)
{
    return le_chat_apply_opts(t, msgs, n_msgs, add_generation_prompt, NULL,
                              out, out_len);
}

enum le_status
le_chat_apply_opts(enum le_chat_template t, const struct le_chat_msg *msgs,
                   size_t n_msgs, int add_generation_prompt,
                   const struct le_chat_opts *opts, char **out,
                   size_t *out_len)
{
    if (!out || (n_msgs && !msgs))
        return LE_EINVAL;
    struct chat_buf b = {0};
    cb_add(&b, "", 0);
    int gen = add_generation_prompt != 0;
    switch (t) {
    case LE_CHAT_LLAMA2:
        render_llama2(&b, msgs, n_msgs);
        break;
    case LE_CHAT_LLAMA3:
        render_llama3(&b, msgs, n_msgs, gen);
        break;
    case LE_CHAT_MISTRAL:
    case LE_CHAT_MISTRAL_V3:
    case LE_CHAT_MISTRAL_V3_TEKKEN:
    case LE_CHAT_MISTRAL_V7:
    case LE_CHAT_MISTRAL_V7_TEKKEN:
    case LE_CHAT_MAGISTRAL:
    case LE_CHAT_MAGISTRAL_2506:
        render_mistral(&b, msgs, n_msgs, t);
        break;
    case LE_CHAT_PHI3:
        render_tagged(&b, msgs, n_msgs, gen, "<|end|>");
        break;
    case LE_CHAT_GEMMA:
        render_gemma(&b, msgs, n_msgs, gen);
        break;
    case LE_CHAT_ZEPHYR:
        render_tagged(&b, msgs, n_msgs, gen, "</s>");
        break;
    case LE_CHAT_DEEPSEEK3:
    case LE_CHAT_DEEPSEEK_R1:
    case LE_CHAT_DEEPSEEK_R1_THINKING:
        render_deepseek3(&b, msgs, n_msgs, gen);
        if (gen && t == LE_CHAT_DEEPSEEK_R1_THINKING)
            cb_str(&b, "<think>\n");
        break;
    case LE_CHAT_QWEN3:
    case LE_CHAT_QWEN3_THINKING:
        render_qwen3(&b, msgs, n_msgs, gen, t == LE_CHAT_QWEN3_THINKING);
        break;
    case LE_CHAT_QWEN25:
        if (!n_msgs || strcmp(role_of(&msgs[0]), "system"))
            cb_str(&b, "<|im_start|>system\n" QWEN25_SYSTEM "<|im_end|>\n");
        render_chatml(&b, msgs, n_msgs, gen, "\n", "<|im_end|>\n");
        break;
    case LE_CHAT_DEEPSEEK2:
        render_deepseek2(&b, msgs, n_msgs, gen);
        break;
    case LE_CHAT_DEEPSEEK31:
        render_deepseek31(&b, msgs, n_msgs, gen,
                          opts && opts->reasoning > 0);
        break;
    case LE_CHAT_KIMI:
        render_kimi(&b, msgs, n_msgs, gen);
        break;
    case LE_CHAT_GLM47:
        render_glm47(&b, msgs, n_msgs, gen, !opts || opts->reasoning >= 0);
        break;
    case LE_CHAT_GRANITE4:
    case LE_CHAT_GRANITE33:
    case LE_CHAT_GRANITE:
        render_granite(&b, msgs, n_msgs, gen, t, opts);
        break;
    case LE_CHAT_PHI4:
        render_chatml(&b, msgs, n_msgs, gen, "<|im_sep|>", "<|im_end|>");
        break;
    case LE_CHAT_HARMONY:
        render_harmony(&b, msgs, n_msgs, gen, opts);
        break;
    case LE_CHAT_CHATML:
    default:
        render_chatml(&b, msgs, n_msgs, gen, "\n", "<|im_end|>\n");
        break;
    }
    if (b.bad) {
        free(b.p);
        return LE_ENOMEM;
    }
    *out = b.p;
    if (out_len)
        *out_len = b.len;
    return LE_OK;
}
