/*
 * End to end through the real llmux binary and the local engine (the real
 * stories260K model and a random-weight model written here): structured
 * output (response_format json_schema / json_object) that always parses
 * and validates when the grammar ended it, tool calls (required, named,
 * auto, none) as OpenAI tool_calls and as streamed tool_call deltas, in
 * llmux's JSON wrapper and in the templates' own formats (Hermes/Qwen2.5
 * <tool_call>, Llama 3.1+ ipython, Mistral's, DeepSeek V3's markers: the
 * exact prompt checked through its token count), tool turns in the
 * conversation, logprobs with tools (a call lists no
 * tokens, text its own), logit_bias (forced tokens, the grammar still
 * winning), and every unsupported parameter refused with 400 naming it
 * (stream or not), never a 200 that ignores it or a 502.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"
#include "lib/json_check.h"

static struct e2e_proc gw;
static char url[256];
static char rand_model[256];
/* random-weight models whose chat templates have a tool format of their
 * own (le_chat_tools_detect): Qwen2.5-style chatml + <tool_call>, and
 * Llama 3.2-style ipython turns with {"name", "parameters"} calls */
static char herm_model[256], l3_model[256], mis_model[256], nemo_model[256],
    ds_model[256], m11_model[256], dst_model[256], gran_model[256],
    d31_model[256], glm_model[256], glmx_model[256], q3c_model[256],
    m32_model[256], mag_model[256], kimi_model[256], moon_model[256],
    g33_model[256];
/* DeepSeek R1-style (no tool format of its own here: the JSON wrapper) */
static const char *ds_tmpl =
    "{{bos_token}}{{ns.system_prompt}}{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + "
    "message['content']}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>' + "
    "content + '<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence"
    "\xef\xbd\x9c>'}}";
static const char *herm_tmpl =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"# Tools ...<tools>\" "
    "}}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- "
    "'<tool_call>\\n{\"name\": ' }}{%- endif %}{{- '<|im_start|>' + "
    "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}";
static const char *l3_tmpl =
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{%- if "
    "tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}{{- "
    "'Respond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.' }}{{- "
    "\"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}{{- "
    "'<|eot_id|>' }}";

/* Mistral 7B v0.3-style: [AVAILABLE_TOOLS] before the last user turn,
 * [TOOL_CALLS] [{...}] calls, [TOOL_RESULTS]; its markers are control
 * tokens of the vocabulary (mis_controls), as in Mistral's */
static const char *mis_tmpl =
    "{{- bos_token }}{%- for message in loop_messages %}{%- if "
    "message['role'] == 'user' %}{%- if tools is not none and (message == "
    "user_messages[-1]) %}{{- '[AVAILABLE_TOOLS] [' }}...{{- "
    "'[/AVAILABLE_TOOLS]' }}{%- endif %}{{- '[INST] ' + message['content'] "
    "+ '[/INST]' }}{%- elif message.tool_calls is defined %}{{- "
    "'[TOOL_CALLS] [' }}...{{- '[TOOL_RESULTS] {\"content\": ' }}";
/* Mistral Nemo-style (tekken): no space after the markers */
static const char *nemo_tmpl =
    "{%- if tools is not none and (message == user_messages[-1]) %}{{- "
    "\"[AVAILABLE_TOOLS][\" }}...{{- \"[INST]\" + message[\"content\"] + "
    "\"[/INST]\" }}...{{- \"[TOOL_CALLS][\" }}...{{- '[TOOL_RESULTS]{' }}";
static const char *const mis_controls[] = {
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", NULL};
/* Mistral Small 3.2-style (tekken v7, tokenizer v11): [SYSTEM_PROMPT],
 * each call [TOOL_CALLS]NAME[ARGS]{...}, [ARGS] a control token too */
static const char *m11_tmpl =
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}...{%- "
    "if tools is not none and (message == user_messages[-1]) %}{{- "
    "'[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{%- endif "
    "%}{{- '[INST]' + message['content'] + '[/INST]' }}...{{- "
    "'[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}...{{- "
    "'[TOOL_RESULTS]' + message.content|string + '[/TOOL_RESULTS]' }}";
static const char *const m11_controls[] = {
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", NULL};

/* Mistral Small 3.2's: v11's markers and [CALL_ID] (format
 * mistral-call-id) */
static const char *m32_tmpl =
    "{%- set today = strftime_now(\"%Y-%m-%d\") %}{%- set "
    "default_system_message = \"You are Mistral Small 3. The current date "
    "is \" + today + \".\\n\\nUse the tools.\" %}"
    "{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}...{{- "
    "'[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{{- "
    "'[INST]' }}...{{- '[TOOL_CALLS]' + tool_call.function.name }}...{{- "
    "'[CALL_ID]' + tool_call.id }}{{- '[ARGS]' + tool_call['function']"
    "['arguments']|tojson }}...{{- '[TOOL_RESULTS]' + message.tool_call_id "
    "+ '[TOOL_CONTENT]' + content|string + '[/TOOL_RESULTS]' }}";
/* Ministral 3 Reasoning's (magistral): its default asks for reasoning in
 * [THINK], the tools are listed before the messages' loop (after the
 * first system text), v11's calls, results without ids; [THINK] and
 * [/THINK] control tokens (mag_controls) */
static const char *mag_tmpl =
    "{%- set default_system_message = 'First draft your thinking process "
    "[THINK]like this[/THINK], then answer.' %}{{- bos_token }}{%- if "
    "messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' -}}...{%- set "
    "tools_definition = '[AVAILABLE_TOOLS]' + (tools| tojson) + "
    "'[/AVAILABLE_TOOLS]' %}{%- for message in loop_messages %}{{- '[INST]' "
    "+ message['content'] + '[/INST]' }}...{{- '[THINK]' + "
    "block['thinking'] + '[/THINK]' }}...{{- '[TOOL_CALLS]' }}...{{- name + "
    "'[ARGS]' + arguments }}...{{- '[TOOL_RESULTS]' + "
    "message['content']|string + '[/TOOL_RESULTS]' }}";
static const char *const mag_controls[] = {
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[THINK]", "[/THINK]",
    NULL};
static const char *const m32_controls[] = {
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]",
    "[TOOL_CONTENT]", NULL};

/* Kimi K2 Instruct's (kimi: its turns' markers, its default system text,
 * the tools declared first of all, each call functions.NAME:N between
 * its markers), the markers control tokens; Moonlight's (the same turns,
 * no calls of its own: the JSON wrapper) */
static const char *kimi_tmpl =
    "{%- if tools -%}\n  <|im_system|>tool_declare<|im_middle|>{{ tools | "
    "tojson }}<|im_end|>\n{%- endif -%}\n{% for message in messages %}\n  "
    "{%- if loop.first and messages[0]['role'] != 'system' -%}\n  "
    "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created "
    "by Moonshot AI.<|im_end|>\n  {% endif %}...<|im_user|>{{role_name}}"
    "<|im_middle|>...<|im_assistant|>{{role_name}}<|im_middle|>..."
    "<|tool_calls_section_begin|>...<|tool_call_begin|>{{ formatted_id }}"
    "<|tool_call_argument_begin|>...<|tool_call_end|>..."
    "<|tool_calls_section_end|>...## Return of {{ tool_call_id }}";
static const char *moon_tmpl =
    "{%- if loop.first and messages[0]['role'] != 'system' -%}<|im_system|>"
    "system<|im_middle|>You are a helpful assistant provided by Moonshot-AI."
    "<|im_end|>{%- endif -%}{%- if message['role'] == 'user' -%}<|im_user|>"
    "{%- endif -%}{{ message['role'] }}<|im_middle|>{{message['content']}}"
    "<|im_end|>";
static const char *const kimi_controls[] = {
    "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
    "<|im_end|>", "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", NULL};

/* DeepSeek V3-0324-style with its tool markers (format deepseek), the
 * markers control tokens of the vocabulary (dst_controls): in DeepSeek's
 * own vocabularies they are single tokens (user-defined there; the
 * reasoning test has them so), here the engine must give their text */
static const char *dst_tmpl =
    "{{'<｜User｜>' + message['content'] + '<｜Assistant｜>'}}{%- if "
    "message['role'] == 'assistant' and message['tool_calls'] is defined "
    "%}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
    "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
    "'\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
    "message['content'] + '<｜tool▁output▁end｜>'}}";
static const char *const dst_controls[] = {
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", NULL};

/* DeepSeek V3.1's (its original's lines): the name, the separator and
 * the arguments without a fence (format deepseek3.1), the same control
 * tokens */
static const char *d31_tmpl =
    "{{'<｜User｜>' + message['content']}}{%- if ns.is_last_user -%}"
    "{{'<｜Assistant｜></think>'}}{%- endif -%}{{'<｜tool▁calls▁begin｜>"
    "<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + "
    "tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}{{'"
    "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{{'<｜tool▁output▁begin｜>' "
    "+ message['content'] + '<｜tool▁output▁end｜>'}}";

/* GLM-4.7-Flash's (its lines that tell it): calls as XML pairs (format
 * glm), its markers control tokens */
static const char *glm_tmpl =
    "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n...<tool_call>"
    "{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
    "</arg_value>...</tool_call>{%- endif -%}...<|assistant|>\n...";
/* Qwen3-Coder's (its lines that tell it): ChatML, XML calls inside
 * <tool_call> (format qwen3-coder); no control tokens, the tags spelled
 * out */
static const char *q3c_tmpl =
    "{{- \"<|im_start|>system\\nYou are Qwen, a helpful AI assistant that "
    "can interact with a computer to solve tasks.\" }}...{{- "
    "'\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}...{{- "
    "'<parameter=' + args_name + '>\\n' }}";

/* the same without the tool markers: the tags spelled out in pieces */
static const char *const glmx_controls[] = {
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", NULL};
static const char *const glm_controls[] = {
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", NULL};

/* Granite 4.0-style: its default system text, hermes's calls in
 * Granite's turns (format granite); the markers control tokens, as
 * <tool_call> may be in a vocabulary (the engine must give its text) */
static const char *gran_tmpl =
    "{%- set tools_system_message_prefix = 'You are a helpful assistant "
    "with access to the following tools. ...<tools>' %}{%- set "
    "g4_default_system_message = 'You are a helpful assistant. Please "
    "ensure responses are professional, accurate, and safe.' %}{{- "
    "'<|start_of_role|>system<|end_of_role|>' + ns.system_message + "
    "'<|end_of_text|>\\n' }}{{- '<tool_call>\\n{\"name\": \"' }}{{- "
    "'\\n<tool_response>\\n' }}";
static const char *const gran_controls[] = {
    "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>",
    "<tool_call>", "</tool_call>", NULL};

/* Granite 3.3-style: its dated default system text, the tools in an
 * available_tools turn, calls as a JSON list after the control token
 * <|tool_call|> (format granite3) */
static const char *g33_tmpl =
    "{%- set system_message = \"Knowledge Cutoff Date: April 2024. Today's "
    "Date: \" + strftime_now('%B %d, %Y') + \". You are Granite, developed "
    "by IBM.\" %}{%- set system_message = system_message + \" ... respond "
    "only with <|tool_call|> followed by a JSON list of tools used.\" %}{{- "
    "'<|start_of_role|>available_tools<|end_of_role|>' }}{{- "
    "available_tools | tojson(indent=4) }}";
static const char *const g33_controls[] = {
    "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>",
    "<|tool_call|>", NULL};

/* A random model (500 tokens, 32 wide, one layer, q8_0) with
 * tokenizer.chat_template tmpl (NULL: none) and the control tokens
 * controls (NULL: none); 0 or -1. */
static int
write_tmpl_model(const char *path, const char *tmpl,
                 const char *const *controls, uint64_t seed)
{
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 500;
    lp.n_embd = 32;
    lp.n_layer = 1;
    lp.n_head = 2;
    lp.n_head_kv = 2;
    lp.n_ff = 64;
    lp.n_ctx = 2048;
    lp.type = LE_TYPE_Q8_0;
    lp.seed = seed;
    lp.chat_template = tmpl;
    lp.controls = controls;
    return gguf_w_llama_write(&lp, path);
}

static int
start(void)
{
    char model[1024], cfg[12288];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(rand_model, sizeof(rand_model), "%s/random.gguf", dir);
    if (write_tmpl_model(rand_model, NULL, NULL, 4242) != 0)
        return -1;
    snprintf(herm_model, sizeof(herm_model), "%s/herm.gguf", dir);
    snprintf(l3_model, sizeof(l3_model), "%s/l3.gguf", dir);
    snprintf(mis_model, sizeof(mis_model), "%s/mis.gguf", dir);
    snprintf(nemo_model, sizeof(nemo_model), "%s/nemo.gguf", dir);
    snprintf(ds_model, sizeof(ds_model), "%s/ds.gguf", dir);
    snprintf(m11_model, sizeof(m11_model), "%s/m11.gguf", dir);
    snprintf(dst_model, sizeof(dst_model), "%s/dst.gguf", dir);
    snprintf(gran_model, sizeof(gran_model), "%s/gran.gguf", dir);
    snprintf(g33_model, sizeof(g33_model), "%s/g33.gguf", dir);
    snprintf(d31_model, sizeof(d31_model), "%s/d31.gguf", dir);
    snprintf(glm_model, sizeof(glm_model), "%s/glm.gguf", dir);
    snprintf(glmx_model, sizeof(glmx_model), "%s/glmx.gguf", dir);
    snprintf(q3c_model, sizeof(q3c_model), "%s/q3c.gguf", dir);
    snprintf(m32_model, sizeof(m32_model), "%s/m32.gguf", dir);
    snprintf(mag_model, sizeof(mag_model), "%s/mag.gguf", dir);
    snprintf(kimi_model, sizeof(kimi_model), "%s/kimi.gguf", dir);
    snprintf(moon_model, sizeof(moon_model), "%s/moon.gguf", dir);
    if (write_tmpl_model(herm_model, herm_tmpl, NULL, 77) != 0 ||
        write_tmpl_model(l3_model, l3_tmpl, NULL, 78) != 0 ||
        write_tmpl_model(mis_model, mis_tmpl, mis_controls, 79) != 0 ||
        write_tmpl_model(nemo_model, nemo_tmpl, mis_controls, 80) != 0 ||
        write_tmpl_model(ds_model, ds_tmpl, NULL, 81) != 0 ||
        write_tmpl_model(m11_model, m11_tmpl, m11_controls, 82) != 0 ||
        write_tmpl_model(dst_model, dst_tmpl, dst_controls, 83) != 0 ||
        write_tmpl_model(gran_model, gran_tmpl, gran_controls, 84) != 0 ||
        write_tmpl_model(g33_model, g33_tmpl, g33_controls, 85) != 0 ||
        write_tmpl_model(d31_model, d31_tmpl, dst_controls, 86) != 0 ||
        write_tmpl_model(glm_model, glm_tmpl, glm_controls, 87) != 0 ||
        write_tmpl_model(glmx_model, glm_tmpl, glmx_controls, 88) != 0 ||
        write_tmpl_model(q3c_model, q3c_tmpl, NULL, 89) != 0 ||
        write_tmpl_model(m32_model, m32_tmpl, m32_controls, 90) != 0 ||
        write_tmpl_model(mag_model, mag_tmpl, mag_controls, 91) != 0 ||
        write_tmpl_model(kimi_model, kimi_tmpl, kimi_controls, 92) != 0 ||
        write_tmpl_model(moon_model, moon_tmpl, kimi_controls, 93) != 0)
        return -1;
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 2},\n"
             "  \"rand\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"rand\": {}}},\n"
             "  \"herm\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"herm\": {}}},\n"
             "  \"l3\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"l3\": {}}},\n"
             "  \"mis\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"mis\": {}}},\n"
             "  \"nemo\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"nemo\": {}}},\n"
             "  \"ds\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"ds\": {}}},\n"
             "  \"m11\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"m11\": {}}},\n"
             "  \"dst\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"dst\": {}}},\n"
             "  \"gran\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"gran\": {}}},\n"
             "  \"g33\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"g33\": {}}},\n"
             "  \"d31\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"d31\": {}}},\n"
             "  \"glm\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"glm\": {}}},\n"
             "  \"glmx\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"glmx\": {}}},\n"
             "  \"q3c\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"q3c\": {}}},\n"
             "  \"m32\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"m32\": {}}},\n"
             "  \"mag\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"mag\": {}}},\n"
             "  \"kimi\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"kimi\": {}}},\n"
             "  \"moon\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"models\": {\"moon\": {}}}}}\n",
             dir, model, rand_model, herm_model, l3_model, mis_model,
             nemo_model, ds_model, m11_model, dst_model, gran_model,
             g33_model, d31_model, glm_model, glmx_model, q3c_model,
             m32_model, mag_model, kimi_model, moon_model);
    free(dir);
    char *path = e2e_write_temp("structured.json", cfg);
    setenv("LLMUX_LOG", "info", 1); /* the providers' lines at start */
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    return rc;
}

static json_t *
post(const char *body, long *status)
{
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 120000, &r) == 0) {
        *status = r.status;
        /* a random model's text may hold U+0000 (valid JSON) */
        o = json_loads(r.body, JSON_ALLOW_NUL, NULL);
        if (!o)
            fprintf(stderr, "not JSON (%ld): %s\n", r.status, r.body);
    }
    e2e_resp_free(&r);
    return o;
}

static const json_t *
choice0(const json_t *o)
{
    return json_array_get(json_object_get(o, "choices"), 0);
}

/* A chat choice's message.content (NULL when not a string). */
static const char *
msg_content(const json_t *ch)
{
    return json_string_value(
        json_object_get(json_object_get(ch, "message"), "content"));
}

/* A JSON string's bytes without its NULs (a random model may sample the
 * <0x00> byte token: "\u0000" in the JSON), into out (NUL-ended). */
static const char *
no_nul(const json_t *str, char *out, size_t cap)
{
    const char *v = json_string_value(str);
    size_t n = json_string_length(str), o = 0;
    for (size_t i = 0; v && i < n && o + 1 < cap; i++)
        if (v[i])
            out[o++] = v[i];
    out[o] = '\0';
    return v ? out : NULL;
}

/* ---- refusals ------------------------------------------------------------ */

static void
expect_refusal(const char *extra, const char *param, int stream)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",%s\"max_tokens\":4,%s"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             stream ? "\"stream\":true," : "", extra);
    long st;
    json_t *o = post(body, &st);
    const json_t *e = json_object_get(o, "error");
    const char *p = json_string_value(json_object_get(e, "param"));
    if (st != 400 || !p || strcmp(p, param)) {
        fprintf(stderr, "refusal of %s: status %ld param %s\n", extra, st,
                p ? p : "(none)");
        T_CHECK(0);
    } else {
        T_CHECK(1);
    }
    T_EQ_STR(json_string_value(json_object_get(e, "type")),
             "invalid_request_error");
    T_CHECK(json_is_string(json_object_get(e, "message")));
    json_decref(o);
}

static void
test_refusals(void)
{
    static const char *const tool =
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],";
    struct {
        const char *extra, *param;
    } cases[] = {
        {"\"n\":9,", "n"},
        {"\"ignore_eos\":1,", "ignore_eos"},
        {"\"logprobs\":\"yes\",", "logprobs"},
        {"\"top_logprobs\":2,", "top_logprobs"},
        {"\"logprobs\":true,\"top_logprobs\":21,", "top_logprobs"},
        {"\"logit_bias\":{\"x\":1},", "logit_bias"},
        {"\"logit_bias\":{\"5\":-101},", "logit_bias"},
        {"\"logit_bias\":{\"100000\":1},", "logit_bias"},
        {"\"logit_bias\":[5],", "logit_bias"},
        {"\"service_tier\":\"flex\",", "service_tier"},
        {"\"frobnicate\":1,", "frobnicate"},
        {"\"temperature\":\"hot\",", "temperature"},
        {"\"top_k\":-1,", "top_k"},
        {"\"stream_options\":{\"include_usage\":true,\"x\":1},",
         "stream_options.x"},
        {"\"response_format\":{\"type\":\"yaml\"},", "response_format.type"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
         "\"name\":\"a\",\"schema\":{\"type\":\"string\",\"pattern\":\"a+\"}}"
         "},",
         "response_format.json_schema.schema"},
        {"\"response_format\":{\"type\":\"json_object\"},\"stop\":\"x\",",
         "stop"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"bad name\"}}],",
         "tools[0]"},
        {"\"tools\":[{\"type\":\"retrieval\"}],", "tools[0]"},
        {"\"tool_choice\":\"required\",", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
         "\"g\"}},",
         "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
         "\"parameters\":{\"type\":\"object\",\"properties\":{\"d\":{"
         "\"type\":\"string\",\"format\":\"date\"}}}}}],",
         "tools[0].function.parameters"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_refusal(cases[i].extra, cases[i].param, 0);
        if (i % 3 == 0)
            expect_refusal(cases[i].extra, cases[i].param, 1);
    }
    /* tools with response_format, and a non-text content part */
    char both[512];
    snprintf(both, sizeof(both),
             "%s\"response_format\":{\"type\":\"json_object\"},", tool);
    expect_refusal(both, "response_format", 0);
    long st;
    json_t *o = post("{\"model\":\"local\",\"messages\":[{\"role\":\"user\","
                     "\"content\":[{\"type\":\"image_url\",\"image_url\":{"
                     "\"url\":\"http://x/y.png\"}}]}]}",
                     &st);
    T_EQ_INT(st, 400);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(o, "error"),
                                               "param")),
             "messages[0].content");
    json_decref(o);
    /* harmless metadata and explicit defaults are accepted */
    o = post("{\"model\":\"local\",\"max_tokens\":3,\"n\":1,\"logprobs\":"
             "false,\"user\":\"u1\",\"metadata\":{\"a\":\"b\"},\"store\":"
             "false,\"top_logprobs\":null,\"messages\":[{\"role\":"
             "\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\","
             "\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}]}",
             &st);
    T_EQ_INT(st, 200);
    json_decref(o);
}

/* ---- structured output ------------------------------------------------- */

static const char *schema =
    "{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"city\",\"unit\",\"days\"],\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"array\",\"maxItems\":3,\"items\":{"
    "\"type\":\"integer\"}},\"ok\":{\"type\":\"boolean\"}}}";

static void
structured_many(const char *model, int seeds, int *stopped)
{
    json_t *sch = json_loads(schema, 0, NULL);
    for (int seed = 0; seed < seeds; seed++) {
        char body[2048];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"temperature\":1.0,"
                 "\"max_tokens\":200,\"response_format\":{\"type\":"
                 "\"json_schema\",\"json_schema\":{\"name\":\"weather\","
                 "\"strict\":true,\"schema\":%s}},\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"The weather in Paris\"}]}",
                 model, seed, schema);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const char *fr = json_string_value(json_object_get(ch,
                                                           "finish_reason"));
        const char *content = msg_content(ch);
        T_CHECK(fr && content);
        if (fr && content && !strcmp(fr, "stop")) {
            (*stopped)++;
            json_t *v = json_loads(content, 0, NULL);
            if (!v || !json_check_schema(v, sch)) {
                fprintf(stderr, "%s seed %d: invalid: %s\n", model, seed,
                        content);
                T_CHECK(0);
            }
            json_decref(v);
        } else {
            T_EQ_STR(fr, "length");
        }
        json_decref(o);
    }
    json_decref(sch);
}

static void
test_json_schema(void)
{
    int stopped = 0;
    structured_many("local", 8, &stopped);
    structured_many("rand", 8, &stopped);
    fprintf(stderr, "  json_schema: %d of 16 ended by the grammar\n",
            stopped);
    T_CHECK(stopped >= 8);
    /* json_object: any object */
    for (int seed = 0; seed < 4; seed++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":100,"
                 "\"response_format\":{\"type\":\"json_object\"},"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}]}",
                 seed % 2 ? "rand" : "local", seed);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const char *content = msg_content(ch);
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        if (fr && !strcmp(fr, "stop")) {
            json_t *v = content ? json_loads(content, 0, NULL) : NULL;
            T_CHECK(json_is_object(v));
            json_decref(v);
        }
        json_decref(o);
    }
}

/* ---- tool calls ----------------------------------------------------------- */

static const char *tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather of a city\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":"
    "10},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\","
    "\"unit\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"zone\":{"
    "\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"zone\"]}}}]";

/* Checks one tool call object; returns 1 if it is valid for tools. */
static int
valid_call(const json_t *tc, const char *want_name)
{
    json_t *ts = json_loads(tools, 0, NULL);
    const json_t *fn = json_object_get(tc, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    const char *id = json_string_value(json_object_get(tc, "id"));
    int ok = name && args && id && !strncmp(id, "call_", 5) &&
             !strcmp(json_string_value(json_object_get(tc, "type")),
                     "function") &&
             (!want_name || !strcmp(name, want_name));
    const json_t *params = NULL;
    for (size_t i = 0; ok && i < json_array_size(ts); i++) {
        const json_t *f = json_object_get(json_array_get(ts, i), "function");
        if (!strcmp(json_string_value(json_object_get(f, "name")), name))
            params = json_object_get(f, "parameters");
    }
    json_t *a = ok ? json_loads(args, 0, NULL) : NULL;
    ok = ok && params && a && json_check_schema(a, params);
    if (!ok)
        fprintf(stderr, "invalid call: %s(%s)\n", name ? name : "?",
                args ? args : "?");
    json_decref(a);
    json_decref(ts);
    return ok;
}

/* Checks a message's tool_calls: 1 to 8 calls (exactly 1 with
 * want_name or one_only), each valid, their ids told apart; returns the
 * count (0 when any check failed). */
static size_t
calls_valid(const json_t *tcs, const char *want_name, int one_only)
{
    size_t n = json_array_size(tcs);
    int ok = n >= 1 && n <= ((want_name || one_only) ? 1 : 8);
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *tc = json_array_get(tcs, i);
        ok = valid_call(tc, want_name);
        const char *id = json_string_value(json_object_get(tc, "id"));
        for (size_t k = 0; ok && k < i; k++)
            ok = strcmp(id, json_string_value(json_object_get(
                                json_array_get(tcs, k), "id"))) != 0;
    }
    if (!ok)
        fprintf(stderr, "bad tool_calls (%zu)\n", n);
    T_CHECK(ok);
    return ok ? n : 0;
}

static void
test_tool_calls(void)
{
    int calls = 0, multi = 0;
    for (int seed = 0; seed < 12; seed++) {
        const char *model = seed % 2 ? "rand" : "local";
        const char *choice =
            seed % 3 == 0 ? "\"required\""
                          : "{\"type\":\"function\",\"function\":{\"name\":"
                            "\"get_time\"}}";
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":400,"
                 "\"tools\":%s,\"tool_choice\":%s,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"What is the weather?\"}]}",
                 model, seed, tools, choice);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const json_t *msg = json_object_get(ch, "message");
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        if (fr && !strcmp(fr, "tool_calls")) {
            calls++;
            const json_t *tcs = json_object_get(msg, "tool_calls");
            T_CHECK(json_is_null(json_object_get(msg, "content")));
            multi += calls_valid(tcs, seed % 3 == 0 ? NULL : "get_time",
                                 0) > 1;
        } else {
            T_EQ_STR(fr, "length");
        }
        json_decref(o);
    }
    fprintf(stderr, "  tool calls: %d of 12 complete, %d with several\n",
            calls, multi);
    T_CHECK(calls >= 6);
}

/* A streamed answer of one choice: its tool calls rebuilt from their
 * deltas (calls: type, id, function name and arguments; heads: the deltas
 * with an id, which must come with indexes 0, 1, ... and each call's
 * argument deltas after its head and before the next one's: order_ok),
 * the non-empty content deltas, the finish_reason and whether [DONE]
 * came. */
#define CS_MAX 16
struct call_stream {
    json_t *calls;
    char args[CS_MAX][4096];
    int heads, content, done, order_ok;
    char fin[32];
};

static void
call_stream_read(const char *sse, struct call_stream *o)
{
    memset(o, 0, sizeof(*o));
    o->calls = json_array();
    o->order_ok = 1;
    const char *p = sse;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            o->done = 1;
            p = e;
            continue;
        }
        json_t *ev = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
        T_CHECK(ev != NULL);
        const json_t *ch = choice0(ev);
        const json_t *d = json_object_get(ch, "delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        o->content += c && *c;
        size_t i;
        const json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
            int idx = (int)json_integer_value(json_object_get(tc, "index"));
            const json_t *fn = json_object_get(tc, "function");
            if (json_object_get(tc, "id")) {
                o->order_ok &= idx == o->heads && idx < CS_MAX;
                o->heads++;
                json_array_append_new(
                    o->calls,
                    json_pack("{s:O,s:s,s:{s:O}}", "id",
                              json_object_get(tc, "id"), "type", "function",
                              "function", "name", json_object_get(fn, "name")));
            } else {
                o->order_ok &= idx == o->heads - 1;
            }
            const char *a = json_string_value(json_object_get(fn, "arguments"));
            if (a && idx >= 0 && idx < CS_MAX &&
                strlen(o->args[idx]) + strlen(a) < sizeof(o->args[idx]))
                strcat(o->args[idx], a);
        }
        const char *finish =
            json_string_value(json_object_get(ch, "finish_reason"));
        if (finish)
            snprintf(o->fin, sizeof(o->fin), "%s", finish);
        json_decref(ev);
        p = e;
    }
    size_t i;
    json_t *call;
    json_array_foreach(o->calls, i, call)
        json_object_set_new(json_object_get(call, "function"), "arguments",
                            json_string(i < CS_MAX ? o->args[i] : ""));
    T_CHECK(o->order_ok);
}

/* The streamed calls equal the non-stream message's tool_calls (names
 * and arguments byte for byte; ids differ with the request). */
static void
calls_same(const struct call_stream *cs, const json_t *tcs)
{
    T_EQ_INT(json_array_size(cs->calls), json_array_size(tcs));
    for (size_t i = 0; i < json_array_size(tcs); i++) {
        const json_t *a =
            json_object_get(json_array_get(cs->calls, i), "function");
        const json_t *b = json_object_get(json_array_get(tcs, i), "function");
        T_EQ_STR(json_string_value(json_object_get(a, "name")),
                 json_string_value(json_object_get(b, "name")));
        T_EQ_STR(json_string_value(json_object_get(a, "arguments")),
                 json_string_value(json_object_get(b, "arguments")));
    }
}

/* Small 3.2's calls (mistral-call-id) come back with the id the model
 * wrote, "call_" and 9 of [a-zA-Z0-9] (the one a repeat of an earlier
 * call's id gets is llmux's own), the same streamed as not: how many of
 * tcs's have one. */
static int
m32_ids(const struct call_stream *cs, const json_t *tcs)
{
    int n = 0;
    for (size_t i = 0; i < json_array_size(tcs); i++) {
        const char *a = json_string_value(
                       json_object_get(json_array_get(tcs, i), "id")),
                   *b = json_string_value(
                       json_object_get(json_array_get(cs->calls, i), "id"));
        T_CHECK(a && b && !strcmp(a, b));
        n += a && strlen(a) == 14 && !strncmp(a, "call_", 5) &&
             strspn(a + 5, "0123456789abcdefghijklmnopqrstuvwxyz"
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 9;
    }
    return n;
}

/* POSTs a streamed request (200 expected) and reads its answer into cs. */
static void
call_stream_post(const char *body, struct call_stream *cs)
{
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url, body, NULL, 120000, &r), 0);
    T_EQ_INT(r.status, 200);
    call_stream_read(r.body ? r.body : "", cs);
    e2e_resp_free(&r);
}

static void
test_tool_stream(void)
{
    int complete = 0;
    for (int seed = 0; seed < 6; seed++) {
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"stream\":true,\"seed\":%d,"
                 "\"max_tokens\":400,\"stream_options\":{\"include_usage\":"
                 "true},\"tools\":%s,\"tool_choice\":\"required\","
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}"
                 "]}",
                 seed % 2 ? "rand" : "local", seed, tools);
        struct call_stream cs;
        call_stream_post(body, &cs);
        T_CHECK(cs.done);
        T_EQ_INT(cs.content, 0);
        if (!strcmp(cs.fin, "tool_calls")) {
            complete++;
            T_CHECK(calls_valid(cs.calls, NULL, 0) == (size_t)cs.heads);
        } else {
            T_EQ_STR(cs.fin, "length");
        }
        json_decref(cs.calls);
    }
    fprintf(stderr, "  streamed tool calls: %d of 6 complete\n", complete);
    T_CHECK(complete >= 3);
}

/* ---- the templates' own tool formats (herm, l3) ---------------------- */

/* The prompt a chat body renders to, checked through its usage: the
 * request's prompt_tokens equal the count of want (what the format's
 * published template writes) tokenized by the model's vocabulary. */
/* today in UTC, as strftime's fmt writes it (the templates' dates) */
static void
utc_today(const char *fmt, char *out, size_t size)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, size, fmt, &tm);
}

static void
expect_prompt(const char *model, const char *path, const char *msgs,
              const char *tool_list, const char *want)
{
    char body[8192];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":1,%s%s%s"
             "\"messages\":%s}",
             model, tool_list ? "\"tools\":" : "", tool_list ? tool_list : "",
             tool_list ? "," : "", msgs);
    long st;
    json_t *o = post(body, &st);
    T_EQ_INT(st, 200);
    json_int_t got = json_integer_value(
        json_object_get(json_object_get(o, "usage"), "prompt_tokens"));
    struct le_model *m = NULL;
    char err[256];
    T_EQ_INT(le_model_open_vocab(path, &m, err, sizeof(err)), LE_OK);
    int64_t n = m ? le_model_tokenize(m, want, strlen(want), 1, 1, NULL, 0)
                  : -1;
    if (got != n)
        fprintf(stderr, "%s: prompt_tokens %lld, the expected text %lld\n",
                model, (long long)got, (long long)n);
    T_EQ_INT(got, n);
    T_CHECK(n > 100);
    le_model_free(m);
    json_decref(o);
}

/* 1 when model's prompt for a second turn reuses all of the first
 * turn's prompt from the prefix cache (cached_tokens), 0 when less, -1
 * on an error */
static int
next_turn_cached(const char *model, const char *tool_list)
{
    static const char one[] =
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\","
        "\"content\":\"Time?\"}]";
    static const char two[] =
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\","
        "\"content\":\"Time?\"},{\"role\":\"assistant\",\"content\":"
        "\"Noon.\"},{\"role\":\"user\",\"content\":\"Thanks\"}]";
    json_int_t n[2] = {-1, -1}, cached = -1;
    for (int i = 0; i < 2; i++) {
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":1,\"tools\":%s,"
                 "\"messages\":%s}",
                 model, tool_list, i ? two : one);
        long st;
        json_t *o = post(body, &st);
        const json_t *u = json_object_get(o, "usage");
        n[i] = json_integer_value(json_object_get(u, "prompt_tokens"));
        if (i)
            cached = json_integer_value(json_object_get(
                json_object_get(u, "prompt_tokens_details"),
                "cached_tokens"));
        json_decref(o);
        if (st != 200)
            return -1;
    }
    fprintf(stderr, "  %s: turn 1 %lld prompt tokens, turn 2 %lld of which "
                    "%lld cached\n",
            model, (long long)n[0], (long long)n[1], (long long)cached);
    return cached >= n[0] - 1 && cached < n[1] ? 1 : 0;
}

/* The end of the hermes system turn listing get_time (as Qwen2.5's
 * template writes it) */
#define HERM_TOOLS                                                         \
    "# Tools\n\nYou may call one or more functions to assist with the "    \
    "user query.\n\nYou are provided with function signatures within "     \
    "<tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", "         \
    "\"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": "    \
    "\"object\", \"properties\": {\"zone\": {\"type\": \"string\"}}}}}\n"   \
    "</tools>\n\nFor each function call, return a json object with "       \
    "function name and arguments within <tool_call></tool_call> XML "      \
    "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "       \
    "<args-json-object>}\n</tool_call><|im_end|>\n"

/* Granite 4's system text listing get_time, as its template writes it */
#define GRAN_TOOLS                                                         \
    "You are a helpful assistant with access to the following tools. You " \
    "may call one or more tools to assist with the user query.\n\nYou "    \
    "are provided with function signatures within <tools></tools> XML "    \
    "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "  \
    "\"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": " \
    "{\"zone\": {\"type\": \"string\"}}}}}\n</tools>\n\nFor each tool "     \
    "call, return a json object with function name and arguments within " \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "          \
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>. "  \
    "If a tool does not exist in the provided list of tools, notify the "  \
    "user that you do not have the ability to fulfill the request."        \
    "<|end_of_text|>\n"

static void
test_native_prompts(void)
{
    /* the startup log names what was found in each template */
    T_EQ_INT(e2e_log_count(&gw, "chat template chatml, tool calls hermes,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template mistral-v3, tool calls "
                                "mistral,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template mistral-v3-tekken, tool "
                                "calls mistral,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template llama3, tool calls llama3,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template mistral-v7-tekken, tool "
                                "calls mistral-v11,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template magistral, tool calls "
                                "mistral-v11,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template kimi, tool calls kimi,"), 1);
    T_EQ_INT(e2e_log_count(&gw, "chat template kimi, tool calls json,"), 1);
    T_EQ_INT(e2e_log_count(&gw, "chat template deepseek3, tool calls json,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template deepseek3, tool calls "
                                "deepseek,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template chatml, tool calls json,"),
             2); /* stories260K and rand: no template */
    T_EQ_INT(e2e_log_count(&gw, "chat template granite4, tool calls "
                                "granite,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template granite3.3, tool calls "
                                "granite3,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template deepseek3.1, tool calls "
                                "deepseek3.1,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template glm4.7, tool calls glm,"), 2);
    T_EQ_INT(e2e_log_count(&gw, "chat template chatml, tool calls "
                                "qwen3-coder,"),
             1);
    T_EQ_INT(e2e_log_count(&gw, "chat template mistral-v7-tekken, tool "
                                "calls mistral-call-id,"),
             1);
    const char *tool_list =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"zone\":{"
        "\"type\":\"string\"}}}}}]";
    const char *msgs =
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{\\\"zone\\\": \\\"utc\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":"
        "\"12:00\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]";
    /* two calls in one turn, then their results */
    const char *two_calls =
        "[{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":\"Both.\",\"tool_calls\":["
        "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{}\"}},"
        "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{\\\"zone\\\": \\\"cet\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"11:00\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"12:00\"}]";
    expect_prompt(
        "herm", herm_model, msgs, tool_list,
        "<|im_start|>system\nBe brief.\n\n"
        HERM_TOOLS
        "<|im_start|>user\nTime?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_time\", "
        "\"arguments\": {\"zone\": \"utc\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>"
        "<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n");
    expect_prompt(
        "l3", l3_model, msgs, tool_list,
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython"
        "\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024"
        "\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following "
        "functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\nRespond in "
        "the format {\"name\": function name, \"parameters\": dictionary of "
        "argument name and its value}.Do not use variables.\n\n"
        "{\n    \"type\": \"function\",\n    \"function\": {\n        "
        "\"name\": \"get_time\",\n        \"parameters\": {\n            "
        "\"type\": \"object\",\n            \"properties\": {\n            "
        "    \"zone\": {\n                    \"type\": \"string\"\n      "
        "          }\n            }\n        }\n    }\n}\n\nTime?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
        "\"get_time\", \"parameters\": {\"zone\": \"utc\"}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n12:00<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* mistral (v3): the tools before the last user turn, the system text
     * in it, call ids as 9 characters [a-zA-Z0-9] (call_1 -> 9Gd2dIMCT,
     * its result the same) */
#define MIS_TOOLS                                                          \
    "[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": " \
    "\"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": " \
    "{\"zone\": {\"type\": \"string\"}}}}}][/AVAILABLE_TOOLS]"
    expect_prompt(
        "mis", mis_model, msgs, tool_list,
        "[INST] Time?[/INST][TOOL_CALLS] [{\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"utc\"}, \"id\": "
        "\"9Gd2dIMCT\"}]</s>[TOOL_RESULTS] {\"content\": \"12:00\", "
        "\"call_id\": \"9Gd2dIMCT\"}[/TOOL_RESULTS]" MIS_TOOLS
        "[INST] Be brief.\n\nThanks[/INST]");
    /* Nemo's (tekken): the same without the spaces */
    expect_prompt(
        "nemo", nemo_model, msgs, tool_list,
        "[INST]Time?[/INST][TOOL_CALLS][{\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"utc\"}, \"id\": "
        "\"9Gd2dIMCT\"}]</s>[TOOL_RESULTS]{\"content\": \"12:00\", "
        "\"call_id\": \"9Gd2dIMCT\"}[/TOOL_RESULTS][AVAILABLE_TOOLS][{"
        "\"type\": \"function\", \"function\": {\"name\": \"get_time\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"zone\": "
        "{\"type\": \"string\"}}}}}][/AVAILABLE_TOOLS][INST]Be brief.\n\n"
        "Thanks[/INST]");
    /* v11 (Small 3.2): the system turn first, each call
     * [TOOL_CALLS]NAME[ARGS]{...}, the result without an id */
    expect_prompt(
        "m11", m11_model, msgs, tool_list,
        "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Time?[/INST]"
        "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"utc\"}</s>"
        "[TOOL_RESULTS]12:00[/TOOL_RESULTS][AVAILABLE_TOOLS][{\"type\": "
        "\"function\", \"function\": {\"name\": \"get_time\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": "
        "{\"zone\": {\"type\": \"string\"}}}}}][/AVAILABLE_TOOLS]"
        "[INST]Thanks[/INST]");
    expect_prompt(
        "m11", m11_model, two_calls, tool_list,
        "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": "
        "{\"name\": \"get_time\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"zone\": {\"type\": "
        "\"string\"}}}}}][/AVAILABLE_TOOLS][INST]Time?[/INST]Both."
        "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_time[ARGS]{\"zone\": "
        "\"cet\"}</s>[TOOL_RESULTS]11:00[/TOOL_RESULTS]"
        "[TOOL_RESULTS]12:00[/TOOL_RESULTS]");
    /* two calls, then their results; the only user turn after the tools */
    expect_prompt(
        "mis", mis_model,
        two_calls,
        tool_list,
        MIS_TOOLS "[INST] Time?[/INST][TOOL_CALLS] [{\"name\": \"get_time\", "
        "\"arguments\": {}, \"id\": \"7pPNQO8GX\"}, {\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"cet\"}, \"id\": "
        "\"wCBTlKcFX\"}]</s>[TOOL_RESULTS] {\"content\": \"11:00\", "
        "\"call_id\": \"7pPNQO8GX\"}[/TOOL_RESULTS][TOOL_RESULTS] "
        "{\"content\": \"12:00\", \"call_id\": \"wCBTlKcFX\"}"
        "[/TOOL_RESULTS]");
    /* deepseek3: the system texts first (the JSON wrapper's after the
     * client's), an earlier answer without its reasoning */
    expect_prompt(
        "ds", ds_model,
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":\"<think>\\nclock\\n</think>"
        "\\n\\nNoon.\"},{\"role\":\"user\",\"content\":\"Thanks\"}]",
        tool_list,
        "Be brief.\nYou can call functions. To call one, reply with only a "
        "JSON object {\"name\": <function name>, \"arguments\": <an object "
        "of its parameters>}; otherwise reply in plain text.\nFunctions:\n"
        "{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"zone\":{\"type\":\"string\"}}}}\n"
        "<\xef\xbd\x9cUser\xef\xbd\x9c>Time?<\xef\xbd\x9c" "Assistant"
        "\xef\xbd\x9c>\n\nNoon.<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81"
        "sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>Thanks<\xef\xbd"
        "\x9c" "Assistant\xef\xbd\x9c>");
    /* deepseek: the tools at the end of the system text, the calls in
     * DeepSeek's markers, the results in one outputs block (a user turn
     * after them does not close it, as the template) */
#define DS_CALL(n, a)                                                      \
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" n "\n```json\n" a          \
    "\n```<｜tool▁call▁end｜>"
#define DS_TOOLS                                                           \
    "## Tools\nYou have access to the following tools:\n\n### get_time\n" \
    "Parameters: {\"type\": \"object\", \"properties\": {\"zone\": "       \
    "{\"type\": \"string\"}}}\n\nTo call tools, answer with "               \
    "<｜tool▁calls▁begin｜>" DS_CALL("TOOL_NAME", "ARGUMENTS")              \
    "<｜tool▁calls▁end｜>: the arguments a JSON object; several calls "    \
    "each from <｜tool▁call▁begin｜> to <｜tool▁call▁end｜>, a new line "    \
    "between two. Otherwise answer in plain text."
    expect_prompt(
        "dst", dst_model, msgs, tool_list,
        "Be brief.\n\n" DS_TOOLS "<｜User｜>Time?<｜Assistant｜>"
        "<｜tool▁calls▁begin｜>" DS_CALL("get_time", "{\"zone\": \"utc\"}")
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>"
        "<｜tool▁output▁begin｜>12:00<｜tool▁output▁end｜><｜User｜>Thanks"
        "<｜Assistant｜>");
    expect_prompt(
        "dst", dst_model, two_calls, tool_list,
        DS_TOOLS "<｜User｜>Time?<｜Assistant｜>Both.<｜tool▁calls▁begin｜>"
        DS_CALL("get_time", "{}") "\n" DS_CALL("get_time",
                                               "{\"zone\": \"cet\"}")
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>"
        "<｜tool▁output▁begin｜>11:00<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>12:00<｜tool▁output▁end｜>"
        "<｜tool▁outputs▁end｜>");
    /* an earlier answer's reasoning is not sent back with its calls */
    expect_prompt(
        "dst", dst_model,
        "[{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":\"<think>\\nclock\\n"
        "</think>\\n\\nOne.\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":"
        "\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
        "\"content\":\"11:00\"}]",
        tool_list,
        DS_TOOLS "<｜User｜>Time?<｜Assistant｜>\n\nOne.<｜tool▁calls▁begin｜>"
        DS_CALL("get_time", "{}") "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>11:00"
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
#undef DS_TOOLS
#undef DS_CALL
    /* deepseek3.1: the tools as V3.1's model card writes them, after the
     * system text and a blank line (an empty one too), each call's name,
     * separator and arguments, nothing between two calls or around the
     * results, no generation prompt after results */
#define D31_CALL(n, a)                                                     \
    "<｜tool▁call▁begin｜>" n "<｜tool▁sep｜>" a "<｜tool▁call▁end｜>"
#define D31_TOOLS                                                          \
    "## Tools\nYou have access to the following tools:\n\n### get_time\n" \
    "Description: \n\nParameters: {\"type\": \"object\", \"properties\": " \
    "{\"zone\": {\"type\": \"string\"}}}\n\nIMPORTANT: ALWAYS adhere to "  \
    "this exact format for tool use:\n<｜tool▁calls▁begin｜>"               \
    D31_CALL("tool_call_name", "tool_call_arguments")                      \
    "{additional_tool_calls}<｜tool▁calls▁end｜>\n\nWhere:\n- "             \
    "`tool_call_name` must be an exact match to one of the available "     \
    "tools\n- `tool_call_arguments` must be valid JSON that strictly "     \
    "follows the tool's Parameters Schema\n- For multiple tool calls, "    \
    "chain them directly without separators or spaces"
    expect_prompt(
        "d31", d31_model, msgs, tool_list,
        "Be brief.\n\n" D31_TOOLS "<｜User｜>Time?<｜Assistant｜></think>"
        "<｜tool▁calls▁begin｜>" D31_CALL("get_time", "{\"zone\": \"utc\"}")
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>"
        "12:00<｜tool▁output▁end｜><｜User｜>Thanks<｜Assistant｜></think>");
    expect_prompt(
        "d31", d31_model, two_calls, tool_list,
        "\n\n" D31_TOOLS "<｜User｜>Time?<｜Assistant｜></think>Both."
        "<｜tool▁calls▁begin｜>" D31_CALL("get_time", "{}")
        D31_CALL("get_time", "{\"zone\": \"cet\"}")
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>"
        "11:00<｜tool▁output▁end｜><｜tool▁output▁begin｜>12:00"
        "<｜tool▁output▁end｜>");
#undef D31_TOOLS
#undef D31_CALL
    /* glm: the tools in a system turn of their own first, the calls as
     * XML pairs, a turn's results after one <|observation|>; the texts
     * jinja2 renders of GLM-4.7-Flash's template for these messages */
#define GLM_TOOLS                                                          \
    "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more "        \
    "functions to assist with the user query.\n\nYou are provided with "  \
    "function signatures within <tools></tools> XML tags:\n<tools>\n"     \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", "     \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"zone\": " \
    "{\"type\": \"string\"}}}}}\n</tools>\n\nFor each function call, "     \
    "output the function name and arguments within the following XML "   \
    "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key>"   \
    "<arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key>"  \
    "<arg_value>{arg-value-2}</arg_value>...</tool_call>"
    expect_prompt(
        "glm", glm_model, msgs, tool_list,
        GLM_TOOLS "<|system|>Be brief.<|user|>Time?<|assistant|></think>"
        "<tool_call>get_time<arg_key>zone</arg_key><arg_value>utc"
        "</arg_value></tool_call><|observation|><tool_response>12:00"
        "</tool_response><|user|>Thanks<|assistant|><think>");
    expect_prompt(
        "glm", glm_model, two_calls, tool_list,
        GLM_TOOLS "<|user|>Time?<|assistant|></think>Both.<tool_call>"
        "get_time</tool_call><tool_call>get_time<arg_key>zone</arg_key>"
        "<arg_value>cet</arg_value></tool_call><|observation|>"
        "<tool_response>11:00</tool_response><tool_response>12:00"
        "</tool_response><|assistant|><think>");
#undef GLM_TOOLS
    /* qwen3-coder: the functions in XML after the client's system text
     * (or its default one), calls as <function=..> and <parameter=..>
     * blocks, a turn's results in one user turn; the texts jinja2
     * renders of Qwen3-Coder's template for these messages */
#define Q3C_RULES                                                          \
    "\n</tools>\n\nIf you choose to call a tool ONLY reply in the "        \
    "following format with NO suffix:\n\n<tool_call>\n<function="          \
    "example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"  \
    "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>" \
    "\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function "  \
    "calls MUST follow the specified format: the tool calling block MUST " \
    "begin with an opening <tool_call> tag and end with a closing "        \
    "</tool_call> tag.\n- Required parameters MUST be specified\n- You "   \
    "may provide optional reasoning for your function call in natural "    \
    "language BEFORE the function call, but NOT after\n- If there is no "  \
    "function call available, answer the question like normal with your " \
    "current knowledge and do not tell the user about function calls\n"   \
    "</IMPORTANT><|im_end|>\n"
#define Q3C_TOOLS                                                          \
    "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>\n"  \
    "<function>\n<name>get_time</name>\n<parameters>\n<parameter>\n<name>"  \
    "zone</name>\n<type>string</type>\n</parameter>\n</parameters>\n"      \
    "</function>" Q3C_RULES
#define Q3C_SYS                                                            \
    "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can "   \
    "interact with a computer to solve tasks."
    expect_prompt(
        "q3c", q3c_model, msgs, tool_list,
        "<|im_start|>system\nBe brief." Q3C_TOOLS
        "<|im_start|>user\nTime?<|im_end|>\n<|im_start|>assistant\n"
        "<tool_call>\n<function=get_time>\n<parameter=zone>\nutc\n"
        "</parameter>\n</function>\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>\n"
        "<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n");
    expect_prompt(
        "q3c", q3c_model, two_calls, tool_list,
        Q3C_SYS Q3C_TOOLS "<|im_start|>user\nTime?<|im_end|>\n"
        "<|im_start|>assistant\nBoth.\n\n<tool_call>\n<function=get_time>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
        "<parameter=zone>\ncet\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n11:00\n"
        "</tool_response>\n<tool_response>\n12:00\n</tool_response>\n"
        "<|im_end|>\n<|im_start|>assistant\n");
    /* a richer function: its description trimmed, a list type and the
     * parameters' other keys as the template's |string and tojson write
     * them */
    expect_prompt(
        "q3c", q3c_model, "[{\"role\":\"user\",\"content\":\"Q\"}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"plan\","
        "\"description\":\" Plan it. \",\"strict\":true,\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"title\":{\"type\":["
        "\"string\",\"null\"],\"description\":\"T\",\"maxLength\":5},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]}},"
        "\"on\":{\"type\":\"boolean\",\"default\":false}},\"required\":"
        "[\"title\"],\"additionalProperties\":false}}}]",
        Q3C_SYS "\n\n# Tools\n\nYou have access to the following tools:"
        "\n\n<tools>\n<function>\n<name>plan</name>\n<description>Plan it."
        "</description>\n<parameters>\n<parameter>\n<name>title</name>\n"
        "<type>['string', 'null']</type>\n<description>T</description>\n"
        "<maxLength>5</maxLength>\n</parameter>\n<parameter>\n<name>tags"
        "</name>\n<type>array</type>\n<items>{\"enum\": [\"a\", \"b\"]}"
        "</items>\n</parameter>\n<parameter>\n<name>on</name>\n<type>"
        "boolean</type>\n<default>False</default>\n</parameter>\n<required>"
        "[\"title\"]</required>\n<additionalProperties>False"
        "</additionalProperties>\n</parameters>\n<strict>True</strict>\n"
        "</function>" Q3C_RULES "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n");
#undef Q3C_SYS
#undef Q3C_TOOLS
#undef Q3C_RULES
    /* mistral-call-id (Small 3.2): each call with the id its results
     * carry, the results' content after [TOOL_CONTENT], the turn's text
     * not written (as its template; the texts jinja2 renders of it, the
     * roles alternating as it requires) */
    /* a call, its result, a reply and a new turn; two calls and their
     * results (after the list's opening and any system text) */
    static const char m_reply[] =
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{\\\"zone\\\": \\\"utc\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":"
        "\"12:00\"},{\"role\":\"assistant\",\"content\":\"Noon.\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]";
#define M_TWO_CALLS                                                        \
    "{\"role\":\"user\",\"content\":\"Time?\"},"                             \
    "{\"role\":\"assistant\",\"content\":\"Both.\",\"tool_calls\":["          \
    "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"          \
    "\"get_time\",\"arguments\":\"{}\"}},"                                  \
    "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":"          \
    "\"get_time\",\"arguments\":\"{\\\"zone\\\": \\\"cet\\\"}\"}}]},"       \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"11:00\"},"     \
    "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"12:00\"}]"
#define M32_TOOLS                                                          \
    "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": " \
    "\"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": " \
    "{\"zone\": {\"type\": \"string\"}}}}}][/AVAILABLE_TOOLS]"
    expect_prompt(
        "m32", m32_model,
        m_reply,
        tool_list,
        "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Time?[/INST]"
        "[TOOL_CALLS]get_time[CALL_ID]9Gd2dIMCT[ARGS]{\"zone\": \"utc\"}</s>"
        "[TOOL_RESULTS]9Gd2dIMCT[TOOL_CONTENT]12:00[/TOOL_RESULTS]Noon.</s>"
        M32_TOOLS "[INST]Thanks[/INST]");
    expect_prompt(
        "m32", m32_model,
        "[{\"role\":\"system\",\"content\":\"S\"}," M_TWO_CALLS,
        tool_list,
        "[SYSTEM_PROMPT]S[/SYSTEM_PROMPT]" M32_TOOLS "[INST]Time?[/INST]"
        "[TOOL_CALLS]get_time[CALL_ID]7pPNQO8GX[ARGS]{}[TOOL_CALLS]get_time"
        "[CALL_ID]wCBTlKcFX[ARGS]{\"zone\": \"cet\"}</s>[TOOL_RESULTS]"
        "7pPNQO8GX[TOOL_CONTENT]11:00[/TOOL_RESULTS][TOOL_RESULTS]wCBTlKcFX"
        "[TOOL_CONTENT]12:00[/TOOL_RESULTS]");
    {
        /* no system text: the template's default, dated */
        char want[2048], day[32];
        utc_today("%Y-%m-%d", day, sizeof(day));
        snprintf(want, sizeof(want),
                 "[SYSTEM_PROMPT]You are Mistral Small 3. The current date "
                 "is %s.\n\nUse the tools.[/SYSTEM_PROMPT]" M32_TOOLS
                 "[INST]Time?[/INST]",
                 day);
        expect_prompt("m32", m32_model,
                      "[{\"role\":\"user\",\"content\":\"Time?\"}]",
                      tool_list, want);
    }
    /* magistral (Ministral 3 Reasoning): the default, which asks for
     * [THINK] reasoning, written (llmux splits it off); the tools after
     * the first system text; v11's calls, results without ids (the texts
     * jinja2 renders of its template for the same messages) */
#define MAG_SYS                                                            \
    "[SYSTEM_PROMPT]First draft your thinking process [THINK]like this"   \
    "[/THINK], then answer.[/SYSTEM_PROMPT]"
    expect_prompt("mag", mag_model,
                  "[{\"role\":\"user\",\"content\":\"Time?\"}]", tool_list,
                  MAG_SYS M32_TOOLS "[INST]Time?[/INST]");
    expect_prompt(
        "mag", mag_model,
        m_reply,
        tool_list,
        "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT]" M32_TOOLS
        "[INST]Time?[/INST][TOOL_CALLS]get_time[ARGS]{\"zone\": \"utc\"}</s>"
        "[TOOL_RESULTS]12:00[/TOOL_RESULTS]Noon.</s>[INST]Thanks[/INST]");
    expect_prompt(
        "mag", mag_model,
        "[" M_TWO_CALLS,
        tool_list,
        MAG_SYS M32_TOOLS "[INST]Time?[/INST]Both.[TOOL_CALLS]get_time[ARGS]{}"
        "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"cet\"}</s>[TOOL_RESULTS]"
        "11:00[/TOOL_RESULTS][TOOL_RESULTS]12:00[/TOOL_RESULTS]");
#undef MAG_SYS
#undef M32_TOOLS
#undef M_TWO_CALLS
    /* where the tools stand, seen in the prefix cache: after the first
     * system text (mag) the next turn's prompt starts with all of this
     * one's, before the last user turn (m32) it does not */
    T_CHECK(next_turn_cached("mag", tool_list) == 1);
    T_CHECK(next_turn_cached("m32", tool_list) == 0);
    /* kimi (Kimi K2 Instruct): the tools declared first, calls numbered
     * across the conversation, results named by the calls' ids in order
     * (jinja2's rendering of llama.cpp's Kimi-K2-Instruct.jinja for the
     * same messages, content "" for null) */
#define KIMI_TOOLS                                                         \
    "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", "     \
    "\"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": "   \
    "\"object\", \"properties\": {\"zone\": {\"type\": \"string\"}}}}}]"   \
    "<|im_end|>"
    expect_prompt(
        "kimi", kimi_model,
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{\\\"zone\\\": \\\"utc\\\"}\"}},"
        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"12:00\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":\"13:00\"},"
        "{\"role\":\"assistant\",\"content\":\"Noon.\"},"
        "{\"role\":\"user\",\"content\":\"Again?\"},"
        "{\"role\":\"assistant\",\"content\":\"Sure.\",\"tool_calls\":["
        "{\"id\":\"call_3\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_3\",\"content\":\"14:00\"}]",
        tool_list,
        KIMI_TOOLS "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>Time?<|im_end|><|im_assistant|>"
        "assistant<|im_middle|><|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>"
        "{\"zone\": \"utc\"}<|tool_call_end|><|tool_call_begin|>"
        "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>"
        "## Return of functions.get_time:0\n12:00<|im_end|><|im_system|>tool"
        "<|im_middle|>## Return of functions.get_time:1\n13:00<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>Noon.<|im_end|><|im_user|>user"
        "<|im_middle|>Again?<|im_end|><|im_assistant|>assistant<|im_middle|>"
        "Sure.<|tool_calls_section_begin|><|tool_call_begin|>"
        "functions.get_time:2<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>"
        "## Return of functions.get_time:2\n14:00<|im_end|><|im_assistant|>"
        "assistant<|im_middle|>");
    /* without a system text: the template's default after the tools (its
     * newline after that turn is not written: README) */
    expect_prompt("kimi", kimi_model,
                  "[{\"role\":\"user\",\"content\":\"Time?\"}]", tool_list,
                  KIMI_TOOLS "<|im_system|>system<|im_middle|>You are Kimi, "
                  "an AI assistant created by Moonshot AI.<|im_end|>"
                  "<|im_user|>user<|im_middle|>Time?<|im_end|>"
                  "<|im_assistant|>assistant<|im_middle|>");
    {
        /* eleven calls: the numbers count across the conversation (the
         * last is 10, two digits, where a count per answer gives 0) */
        char many[8192], want[8192];
        size_t ml = 0, wl = 0;
        ml += (size_t)snprintf(many + ml, sizeof(many) - ml,
                               "[{\"role\":\"user\",\"content\":\"Q\"},"
                               "{\"role\":\"assistant\",\"content\":\"\","
                               "\"tool_calls\":[");
        wl += (size_t)snprintf(want + wl, sizeof(want) - wl,
                               KIMI_TOOLS "<|im_system|>system<|im_middle|>"
                               "You are Kimi, an AI assistant created by "
                               "Moonshot AI.<|im_end|><|im_user|>user"
                               "<|im_middle|>Q<|im_end|><|im_assistant|>"
                               "assistant<|im_middle|>"
                               "<|tool_calls_section_begin|>");
        for (int i = 0; i < 10; i++) {
            ml += (size_t)snprintf(many + ml, sizeof(many) - ml,
                                   "%s{\"id\":\"c%d\",\"type\":\"function\","
                                   "\"function\":{\"name\":\"get_time\","
                                   "\"arguments\":\"{}\"}}",
                                   i ? "," : "", i);
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl,
                                   "<|tool_call_begin|>functions.get_time:%d"
                                   "<|tool_call_argument_begin|>{}"
                                   "<|tool_call_end|>",
                                   i);
        }
        ml += (size_t)snprintf(many + ml, sizeof(many) - ml, "]}");
        wl += (size_t)snprintf(want + wl, sizeof(want) - wl,
                               "<|tool_calls_section_end|><|im_end|>");
        for (int i = 0; i < 10; i++) {
            ml += (size_t)snprintf(many + ml, sizeof(many) - ml,
                                   ",{\"role\":\"tool\",\"tool_call_id\":"
                                   "\"c%d\",\"content\":\"r\"}",
                                   i);
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl,
                                   "<|im_system|>tool<|im_middle|>## Return "
                                   "of functions.get_time:%d\nr<|im_end|>",
                                   i);
        }
        snprintf(many + ml, sizeof(many) - ml,
                 ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
                 "{\"id\":\"c10\",\"type\":\"function\",\"function\":{"
                 "\"name\":\"get_time\",\"arguments\":\"{}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"c10\",\"content\":"
                 "\"r\"}]");
        snprintf(want + wl, sizeof(want) - wl,
                 "<|im_assistant|>assistant<|im_middle|>"
                 "<|tool_calls_section_begin|><|tool_call_begin|>"
                 "functions.get_time:10<|tool_call_argument_begin|>{}"
                 "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
                 "<|im_system|>tool<|im_middle|>## Return of "
                 "functions.get_time:10\nr<|im_end|><|im_assistant|>"
                 "assistant<|im_middle|>");
        expect_prompt("kimi", kimi_model, many, tool_list, want);
    }
#undef KIMI_TOOLS
    /* Moonlight: its default system text, its turns */
    expect_prompt("moon", moon_model,
                  "[{\"role\":\"user\",\"content\":\"Hi there, who are "
                  "you and what can you do for me today?\"}]",
                  NULL,
                  "<|im_system|>system<|im_middle|>You are a helpful "
                  "assistant provided by Moonshot-AI.<|im_end|><|im_user|>user"
                  "<|im_middle|>Hi there, who are you and what can you do for "
                  "me today?<|im_end|><|im_assistant|>assistant<|im_middle|>");
    /* a result whose text is JSON goes in as that value, not a string */
    expect_prompt(
        "nemo", nemo_model,
        "[{\"role\":\"user\",\"content\":\"Time?\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_time\","
        "\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":"
        "\"{\\\"h\\\": 11, \\\"tz\\\": [\\\"cet\\\"]}\"}]",
        tool_list,
        "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": "
        "{\"zone\": {\"type\": \"string\"}}}}}][/AVAILABLE_TOOLS][INST]Time?"
        "[/INST][TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}, "
        "\"id\": \"7pPNQO8GX\"}]</s>[TOOL_RESULTS]{\"content\": {\"h\": 11, "
        "\"tz\": [\"cet\"]}, \"call_id\": \"7pPNQO8GX\"}[/TOOL_RESULTS]");
#undef MIS_TOOLS
    /* two calls in one turn, their results in one user turn (hermes) */
    expect_prompt(
        "herm", herm_model,
        two_calls,
        tool_list,
        "<|im_start|>system\n"
        HERM_TOOLS
        "<|im_start|>user\nTime?<|im_end|>\n"
        "<|im_start|>assistant\nBoth.\n<tool_call>\n{\"name\": \"get_time\", "
        "\"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"cet\"}}\n</tool_call>"
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n11:00\n</tool_response>\n"
        "<tool_response>\n12:00\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n");
    /* Granite 4: the client's system text, then the tools; a call as
     * hermes's; results in one user turn, each opening with a newline */
    expect_prompt(
        "gran", gran_model, msgs, tool_list,
        "<|start_of_role|>system<|end_of_role|>Be brief.\n\n" GRAN_TOOLS
        "<|start_of_role|>user<|end_of_role|>Time?<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|><tool_call>\n{\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"utc\"}}\n</tool_call>"
        "<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>\n<tool_response>\n12:00\n"
        "</tool_response><|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Thanks<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>");
    /* without a system text the tools' text is the system turn (Granite
     * 4.0's default system text is not written then) */
    expect_prompt(
        "gran", gran_model, two_calls, tool_list,
        "<|start_of_role|>system<|end_of_role|>" GRAN_TOOLS
        "<|start_of_role|>user<|end_of_role|>Time?<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>Both.\n<tool_call>\n"
        "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": "
        "\"cet\"}}\n</tool_call><|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>\n<tool_response>\n11:00\n"
        "</tool_response>\n<tool_response>\n12:00\n</tool_response>"
        "<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>");
#undef GRAN_TOOLS
    /* Granite 3.3: the tools' list as tojson(indent=4) in a turn of its
     * own after the system turn; a call as the model writes it; a result
     * as a "tool" turn */
#define G33_TOOLS                                                          \
    "<|start_of_role|>available_tools<|end_of_role|>[\n    {\n        "    \
    "\"type\": \"function\",\n        \"function\": {\n            "       \
    "\"name\": \"get_time\",\n            \"parameters\": {\n          "   \
    "      \"type\": \"object\",\n                \"properties\": {\n   "  \
    "                 \"zone\": {\n                        \"type\": "      \
    "\"string\"\n                    }\n                }\n            }\n" \
    "        }\n    }\n]<|end_of_text|>\n"
    expect_prompt(
        "g33", g33_model, msgs, tool_list,
        "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
        G33_TOOLS
        "<|start_of_role|>user<|end_of_role|>Time?<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{\"name\": "
        "\"get_time\", \"arguments\": {\"zone\": \"utc\"}}]"
        "<|end_of_text|>\n"
        "<|start_of_role|>tool<|end_of_role|>12:00<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Thanks<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>");
    {
        /* no system text: the dated default naming the call format */
        char want[4096], day[64];
        utc_today("%B %d, %Y", day, sizeof(day));
        snprintf(
            want, sizeof(want),
            "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: "
            "April 2024. Today's Date: %s. You are Granite, developed by "
            "IBM. You are a helpful assistant with access to the following "
            "tools. When a tool is required to answer the user's query, "
            "respond only with <|tool_call|> followed by a JSON list of "
            "tools used. If a tool does not exist in the provided list of "
            "tools, notify the user that you do not have the ability to "
            "fulfill the request.<|end_of_text|>\n" G33_TOOLS
            "<|start_of_role|>user<|end_of_role|>Time?<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>Both.<|tool_call|>["
            "{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": "
            "\"get_time\", \"arguments\": {\"zone\": \"cet\"}}]"
            "<|end_of_text|>\n"
            "<|start_of_role|>tool<|end_of_role|>11:00<|end_of_text|>\n"
            "<|start_of_role|>tool<|end_of_role|>12:00<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>",
            day);
        expect_prompt("g33", g33_model, two_calls, tool_list, want);
    }
#undef G33_TOOLS
    /* no system text of the client's: the format's own system turn */
    expect_prompt(
        "l3", l3_model, "[{\"role\":\"user\",\"content\":\"Hi\"}]", tool_list,
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython"
        "\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024"
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the "
        "following functions, please respond with a JSON for a function "
        "call with its proper arguments that best answers the given "
        "prompt.\n\nRespond in the format {\"name\": function name, "
        "\"parameters\": dictionary of argument name and its value}.Do not "
        "use variables.\n\n{\n    \"type\": \"function\",\n    "
        "\"function\": {\n        \"name\": \"get_time\",\n        "
        "\"parameters\": {\n            \"type\": \"object\",\n            "
        "\"properties\": {\n                \"zone\": {\n                 "
        "   \"type\": \"string\"\n                }\n            }\n      "
        "  }\n    }\n}\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The DeepSeek markers as control tokens: each gives its text (so that
 * the call grammar can take it as one token), other control tokens
 * none (</s>: its text only when asked for specials) */
static void
test_ds_markers(void)
{
    struct le_model *m = NULL;
    char err[256], piece[64];
    T_EQ_INT(le_model_open_vocab(dst_model, &m, err, sizeof(err)), LE_OK);
    if (!m)
        return;
    T_EQ_INT(le_model_chat_tools(m), LE_TOOLS_DEEPSEEK);
    for (size_t k = 0; dst_controls[k]; k++) {
        const char *t = dst_controls[k];
        int32_t id = -1;
        T_EQ_INT(le_model_tokenize(m, t, strlen(t), 0, 1, &id, 1), 1);
        size_t n = le_model_token_to_piece(m, id, 0, piece, sizeof(piece));
        T_EQ_INT(n, strlen(t));
        T_CHECK(n == strlen(t) && !memcmp(piece, t, n));
    }
    T_EQ_INT(le_model_token_to_piece(m, 2, 0, piece, sizeof(piece)), 0);
    T_EQ_INT(le_model_token_to_piece(m, 2, 1, piece, sizeof(piece)), 4);
    le_model_free(m);
    m = NULL;
    T_EQ_INT(le_model_open_vocab(d31_model, &m, err, sizeof(err)), LE_OK);
    if (!m)
        return;
    T_EQ_INT(le_model_chat_template(m), LE_CHAT_DEEPSEEK31);
    T_EQ_INT(le_model_chat_tools(m), LE_TOOLS_DEEPSEEK31);
    le_model_free(m);
}

/* Calls on herm, l3 and rand (llmux's own JSON wrapper) with required,
 * named and auto, each non-stream and streamed with the same seed: the
 * call parses and validates, carries none of the format's wrapper, and
 * the stream's deltas rebuild exactly the non-stream arguments (a random
 * model's arguments hold multi-byte characters: a delta cut inside one
 * was dropped before). */
static void
test_native_calls(void)
{
    static const char *const models[] = {"herm", "l3",  "rand",
                                         "mis",  "nemo", "m11",
                                         "dst",  "gran", "g33", "d31",
                                         "glm",  "q3c", "m32", "mag",
                                         "kimi"};
    /* the first byte of each one's calls, which auto's text never has */
    static const char first[] = "<{{[[[<<<<<<[[<";
    int model_ids = 0;
    for (size_t mi = 0; mi < 15; mi++) {
        int calls = 0, texts = 0, multi = 0;
        for (int seed = 0; seed < 12; seed++) {
            const char *choice =
                seed % 3 == 0   ? "\"required\""
                : seed % 3 == 1 ? "{\"type\":\"function\",\"function\":{"
                                  "\"name\":\"get_weather\"}}"
                                : "\"auto\"";
            char body[4096];
            /* glm and mag reason first by default (their answers here
             * would not close it) */
            /* m32's calls are long (each with its id): up to 8 of
             * them need more room */
            snprintf(body, sizeof(body),
                     "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":%d,"
                     "\"tools\":%s,\"tool_choice\":%s,%s%%s\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Weather in Rome?\"}]}",
                     models[mi], seed, mi == 12 ? 800 : 400, tools, choice,
                     mi == 10 || mi == 13 ? "\"reasoning_effort\":\"none\","
                                          : "");
            char plain[4096], streamed[4096];
            snprintf(plain, sizeof(plain), body, "");
            snprintf(streamed, sizeof(streamed), body, "\"stream\":true,");
            long st;
            json_t *o = post(plain, &st);
            T_EQ_INT(st, 200);
            const json_t *ch = choice0(o);
            const json_t *msg = json_object_get(ch, "message");
            const char *fr =
                json_string_value(json_object_get(ch, "finish_reason"));
            const json_t *tcs = json_object_get(msg, "tool_calls");
            struct call_stream cs;
            call_stream_post(streamed, &cs);
            T_CHECK(cs.done);
            T_EQ_STR(cs.fin, fr ? fr : "?");
            if (fr && !strcmp(fr, "tool_calls")) {
                calls++;
                /* several in the hermes and mistral formats only */
                size_t nc = calls_valid(tcs,
                                        seed % 3 == 1 ? "get_weather" : NULL,
                                        mi == 1 || mi == 2);
                multi += nc > 1;
                for (size_t i = 0; i < nc; i++) {
                    const char *args = json_string_value(json_object_get(
                        json_object_get(json_array_get(tcs, i), "function"),
                        "arguments"));
                    T_CHECK(args && !strstr(args, "tool_call") &&
                            !strstr(args, "TOOL_CALLS") &&
                            !strstr(args, "parameters") &&
                            !strstr(args, "```") && !strstr(args, "｜"));
                }
                T_EQ_INT(cs.content, 0);
                calls_same(&cs, tcs);
                if (!strcmp(models[mi], "m32"))
                    model_ids += m32_ids(&cs, tcs);
            } else if (seed % 3 == 2 && msg_content(ch)) {
                /* auto gave text: never starting like a call */
                const char *c = msg_content(ch);
                texts++;
                T_CHECK(*c != first[mi]);
                T_CHECK(!json_object_get(msg, "tool_calls"));
            } else {
                T_EQ_STR(fr, "length");
            }
            json_decref(cs.calls);
            json_decref(o);
        }
        fprintf(stderr, "  %s: %d of 12 complete calls (%d of several), "
                        "%d texts\n",
                models[mi], calls, multi, texts);
        T_CHECK(calls >= 5);
    }
    fprintf(stderr, "  m32: %d calls returned with the model's own id\n",
            model_ids);
    T_CHECK(model_ids >= 5);
}

/* parallel_tool_calls: up to 8 calls an answer in the hermes format,
 * '\n' between them (a random model ends after a call with EOS only now
 * and then, so several come often), and in mistral's list, ", " between
 * them; each valid, streamed as deltas of indexes 0, 1, ... equal to the
 * non-stream calls; one at most with parallel_tool_calls false and in
 * the JSON and llama3 formats. */
static void
test_parallel_calls(void)
{
    static const char *const models[] = {"herm", "rand", "l3",  "mis",
                                         "m11",  "dst",  "gran", "g33",
                                         "d31",  "glm",  "q3c", "m32",
                                         "mag",  "kimi"};
    for (size_t mi = 0; mi < 14; mi++) {
        int multi = 0, single = 0, complete = 0;
        for (int seed = 0; seed < 16; seed++) {
            int par = seed % 4 != 3;
            char body[4096], streamed[4200];
            snprintf(body, sizeof(body),
                     "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":%d,"
                     "\"tools\":%s,\"tool_choice\":\"required\",%s%s"
                     "\"messages\":[{\"role\":\"user\",\"content\":"
                     "\"Weather in Rome and Oslo?\"}]}",
                     /* l3's and g33's prompts are long in the 500-token
                      * vocabulary (the tools' indented JSON) */
                     models[mi], seed, mi == 2 || mi == 7 ? 400 : 800, tools,
                     par ? "" : "\"parallel_tool_calls\":false,",
                     mi == 9 || mi == 12 ? "\"reasoning_effort\":\"none\","
                                         : "");
            snprintf(streamed, sizeof(streamed), "{\"stream\":true,%s",
                     body + 1);
            long st;
            json_t *o = post(body, &st);
            T_EQ_INT(st, 200);
            const json_t *ch = choice0(o);
            const char *fr =
                json_string_value(json_object_get(ch, "finish_reason"));
            const json_t *tcs =
                json_object_get(json_object_get(ch, "message"), "tool_calls");
            if (fr && !strcmp(fr, "tool_calls")) {
                complete++;
                size_t n =
                    calls_valid(tcs, NULL, !par || mi == 1 || mi == 2);
                multi += n > 1;
                single += !par && n == 1;
            } else {
                T_EQ_STR(fr, "length");
            }
            struct call_stream cs;
            call_stream_post(streamed, &cs);
            T_CHECK(cs.done);
            T_EQ_STR(cs.fin, fr ? fr : "?");
            calls_same(&cs, tcs);
            json_decref(cs.calls);
            json_decref(o);
        }
        fprintf(stderr, "  %s: %d of 16 complete, %d with several calls, "
                        "%d of 4 single with parallel_tool_calls false\n",
                models[mi], complete, multi, single);
        T_CHECK(complete >= 8);
        if (mi == 0 || mi >= 3)
            T_CHECK(multi >= 2);
        else
            T_EQ_INT(multi, 0);
    }
}

/* magistral's [THINK] and [/THINK] are control tokens of its vocabulary:
 * their text must come out for the answer to split (favoured here by
 * logit_bias, ids 498 and 499); the stream gives the same parts */
static void
test_magistral_markers(void)
{
    int split = 0;
    for (int seed = 0; seed < 6; seed++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"mag\",\"seed\":%d,\"max_tokens\":30,"
                 "\"temperature\":1,\"logit_bias\":{\"498\":6,\"499\":4},"
                 "%%s\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
                 seed);
        char plain[600], streamed[600];
        snprintf(plain, sizeof(plain), body, "");
        snprintf(streamed, sizeof(streamed), body, "\"stream\":true,");
        long st;
        json_t *o = post(plain, &st);
        T_EQ_INT(st, 200);
        const json_t *msg = json_object_get(choice0(o), "message");
        const char *r =
            json_string_value(json_object_get(msg, "reasoning_content"));
        const char *c = json_string_value(json_object_get(msg, "content"));
        if (r) {
            split++;
            /* the open marker is neither's; the first close ends it */
            T_CHECK(!strstr(r, "[/THINK]"));
            T_CHECK(!c || strncmp(c, "[/THINK]", 8));
        }
        struct e2e_resp sr;
        T_EQ_INT(e2e_http("POST", url, streamed, NULL, 120000, &sr), 0);
        json_t *evs = e2e_sse_objects(sr.body ? sr.body : "");
        char rs[8192], cs[8192];
        size_t rn = e2e_sse_deltas(evs, "reasoning_content", rs, sizeof(rs)),
               cn = e2e_sse_deltas(evs, "content", cs, sizeof(cs));
        T_CHECK(rn == (r ? strlen(r) : 0) && (!rn || !memcmp(rs, r, rn)));
        T_CHECK(cn == (c ? strlen(c) : 0) && (!cn || !memcmp(cs, c, cn)));
        json_decref(evs);
        e2e_resp_free(&sr);
        json_decref(o);
    }
    fprintf(stderr, "  mag: %d of 6 answers reasoned in [THINK]\n", split);
    T_CHECK(split >= 2);
}

/* XML calls (GLM's; Qwen3-Coder's, q3c) with values of every kind: a
 * text (any text up to its closing tag, quotes and backslashes in it
 * escaped in the JSON; glm's unbounded, "</arg_value>" one token
 * favoured by logit_bias so that it ends; glmx's and q3c's at most 6
 * characters, the tags spelled out in pieces, which the stream holds
 * back while they may be a closing tag), an integer, an array and an
 * object (their JSON as it is).  Each complete
 * call's arguments are a JSON object of the schema, the same streamed
 * (the stream's deltas are the JSON as it grows). */
static void
glm_values(const char *model, const char *path, const char *title,
           int reasons)
{
    struct le_model *m = NULL;
    char err[256], plan[1024];
    int32_t close = 0;
    T_EQ_INT(le_model_open_vocab(path, &m, err, sizeof(err)), LE_OK);
    int single = m && le_model_tokenize(m, "</arg_value>", 12, 0, 1, &close,
                                        1) == 1;
    le_model_free(m);
    snprintf(plan, sizeof(plan),
        "[{\"type\":\"function\",\"function\":{\"name\":\"plan\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"title\":%s,\"days\":{\"type\":"
        "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":"
        "[\"a\",\"b\"]},\"maxItems\":3},\"opt\":{\"type\":\"object\","
        "\"properties\":{\"x\":{\"type\":\"boolean\"}},\"required\":"
        "[\"x\"],\"additionalProperties\":false}},\"required\":[\"title\","
        "\"days\",\"tags\",\"opt\"],\"additionalProperties\":false}}}]",
        title);
    int complete = 0;
    for (int seed = 0; seed < 12; seed++) {
        char body[4096], streamed[4200];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":300,"
                 "\"temperature\":1,\"logit_bias\":{\"%d\":%d},"
                 "%s\"tools\":%s,"
                 "\"tool_choice\":\"required\",\"parallel_tool_calls\":"
                 "false,\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"Plan a trip\"}]}",
                 model, seed, close, single ? 3 : 0,
                 reasons ? "\"reasoning_effort\":\"none\"," : "", plan);
        snprintf(streamed, sizeof(streamed), "{\"stream\":true,%s", body + 1);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        const json_t *tcs =
            json_object_get(json_object_get(ch, "message"), "tool_calls");
        if (fr && !strcmp(fr, "tool_calls")) {
            complete++;
            const char *args = json_string_value(json_object_get(
                json_object_get(json_array_get(tcs, 0), "function"),
                "arguments"));
            json_t *a = args ? json_loads(args, 0, NULL) : NULL;
            const json_t *tags = json_object_get(a, "tags");
            const json_t *opt = json_object_get(a, "opt");
            int ok = json_is_object(a) && json_object_size(a) == 4 &&
                     json_is_string(json_object_get(a, "title")) &&
                     json_is_integer(json_object_get(a, "days")) &&
                     json_is_array(tags) && json_array_size(tags) <= 3 &&
                     json_is_object(opt) && json_object_size(opt) == 1 &&
                     json_is_boolean(json_object_get(opt, "x"));
            for (size_t i = 0; ok && i < json_array_size(tags); i++) {
                const char *t = json_string_value(json_array_get(tags, i));
                ok = t && (!strcmp(t, "a") || !strcmp(t, "b"));
            }
            if (!ok)
                fprintf(stderr, "glm seed %d: bad arguments %s\n", seed,
                        args ? args : "(none)");
            T_CHECK(ok);
            json_decref(a);
        } else {
            T_EQ_STR(fr, "length");
        }
        struct call_stream cs;
        call_stream_post(streamed, &cs);
        T_CHECK(cs.done);
        T_EQ_STR(cs.fin, fr ? fr : "?");
        calls_same(&cs, tcs);
        json_decref(cs.calls);
        json_decref(o);
    }
    fprintf(stderr, "  %s values: %d of 12 complete calls\n", model,
            complete);
    T_CHECK(complete >= 3);
}

/* Anthropic's count_tokens on an XML-format model with tools: the
 * prompt a generation would see, as the chat request's prompt_tokens */
static void
glm_count_tokens(void)
{
    char curl[300];
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d/v1/messages/count_tokens",
             gw.port);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", curl,
                      "{\"model\":\"glm\",\"tools\":[{\"name\":\"f\","
                      "\"input_schema\":{\"type\":\"object\",\"properties\":"
                      "{\"a\":{\"type\":\"string\"},\"n\":{\"type\":"
                      "\"integer\"}}}}],\"messages\":[{\"role\":\"user\","
                      "\"content\":\"Q\"}]}",
                      NULL, 30000, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *cj = json_loads(r.body ? r.body : "", 0, NULL);
    json_int_t counted =
        json_integer_value(json_object_get(cj, "input_tokens"));
    json_decref(cj);
    e2e_resp_free(&r);
    long st;
    json_t *o = post("{\"model\":\"glm\",\"max_tokens\":1,\"tools\":[{"
                     "\"type\":\"function\",\"function\":{\"name\":\"f\","
                     "\"parameters\":{\"type\":\"object\",\"properties\":{"
                     "\"a\":{\"type\":\"string\"},\"n\":{\"type\":"
                     "\"integer\"}}}}}],\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Q\"}]}",
                     &st);
    T_EQ_INT(st, 200);
    T_EQ_INT(counted, json_integer_value(json_object_get(
                          json_object_get(o, "usage"), "prompt_tokens")));
    T_CHECK(counted > 100);
    json_decref(o);
}

static void
test_glm_values(void)
{
    glm_count_tokens();
    glm_values("glm", glm_model, "{\"type\":\"string\"}", 1);
    glm_values("glmx", glmx_model, "{\"type\":\"string\",\"maxLength\":6}",
               1);
    glm_values("q3c", q3c_model, "{\"type\":\"string\",\"maxLength\":6}", 0);
    /* what its XML cannot carry is refused, naming the tool's schema */
    static const char *const bad[] = {
        "{\"type\":\"array\"}",
        "{\"type\":\"object\",\"properties\":{\"a<b\":{\"type\":"
        "\"string\"}}}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"string\",\"pattern\":\"x\"}}}"};
    for (size_t i = 0; i < 3; i++) {
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"model\":\"glm\",\"max_tokens\":5,\"tools\":[{"
                 "\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "\"parameters\":%s}}],\"tool_choice\":\"required\","
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
                 bad[i]);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 400);
        const json_t *e = json_object_get(o, "error");
        T_EQ_STR(json_string_value(json_object_get(e, "param")),
                 "tools[0].function.parameters");
        const char *msg = json_string_value(json_object_get(e, "message"));
        T_CHECK(msg && (i == 2 ? strstr(msg, "pattern") != NULL
                               : strstr(msg, "GLM") != NULL));
        json_decref(o);
    }
}

static void
test_auto_none_and_turns(void)
{
    /* auto: text, or (when the output starts with '{') a valid call */
    for (int seed = 0; seed < 6; seed++) {
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":60,"
                 "\"tools\":%s,\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"Hello\"}]}",
                 seed % 2 ? "rand" : "local", seed, tools);
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const json_t *msg = json_object_get(ch, "message");
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        const json_t *tcs = json_object_get(msg, "tool_calls");
        if (tcs) {
            T_EQ_STR(fr, "tool_calls");
            calls_valid(tcs, NULL, 0);
        } else {
            const char *c =
                json_string_value(json_object_get(msg, "content"));
            T_CHECK(c != NULL);
            T_CHECK(fr && (!strcmp(fr, "stop") || !strcmp(fr, "length")));
        }
        json_decref(o);
    }
    /* none: plain text even with tools */
    char body[8192];
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"temperature\":0,\"max_tokens\":10,"
             "\"tools\":%s,\"tool_choice\":\"none\",\"messages\":[{\"role\":"
             "\"user\",\"content\":\"Hello\"}]}",
             tools);
    long st;
    json_t *o = post(body, &st);
    T_EQ_INT(st, 200);
    T_CHECK(!json_object_get(json_object_get(choice0(o), "message"),
                             "tool_calls"));
    json_decref(o);
    /* a conversation with a call and its result, then another call */
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"seed\":1,\"max_tokens\":150,\"tools\":%s,"
             "\"tool_choice\":\"required\",\"messages\":["
             "{\"role\":\"system\",\"content\":\"You help.\"},"
             "{\"role\":\"user\",\"content\":\"Weather in Oslo?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
             "\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
             "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\","
             "\\\"unit\\\":\\\"c\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":"
             "\"-3 and snow\"},"
             "{\"role\":\"user\",\"content\":\"And the time?\"}]}",
             tools);
    o = post(body, &st);
    T_EQ_INT(st, 200);
    const json_t *ch = choice0(o);
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    T_CHECK(fr && (!strcmp(fr, "tool_calls") || !strcmp(fr, "length")));
    json_decref(o);
}

/* Streams of auto and json_schema: the deltas rebuild a valid answer. */
static void
test_other_streams(void)
{
    json_t *sch = json_loads(schema, 0, NULL);
    int valid = 0;
    for (int seed = 0; seed < 8; seed++) {
        char body[4096];
        if (seed % 2)
            snprintf(body, sizeof(body),
                     "{\"model\":\"rand\",\"stream\":true,\"seed\":%d,"
                     "\"max_tokens\":60,\"tools\":%s,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Hi\"}]}",
                     seed, tools);
        else
            snprintf(body, sizeof(body),
                     "{\"model\":\"local\",\"stream\":true,\"seed\":%d,"
                     "\"max_tokens\":200,\"response_format\":{\"type\":"
                     "\"json_schema\",\"json_schema\":{\"name\":\"w\","
                     "\"schema\":%s}},\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Weather\"}]}",
                     seed, schema);
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", url, body, NULL, 120000, &r), 0);
        T_EQ_INT(r.status, 200);
        char content[8192] = "", args[8192] = "", fin[32] = "";
        int tool_heads = 0;
        const char *p = r.body;
        while ((p = strstr(p, "data: ")) != NULL) {
            p += 6;
            const char *e = strstr(p, "\n\n");
            if (!e || !strncmp(p, "[DONE]", 6))
                break;
            /* "\u0000" is valid (a random model's <0x00> byte token) */
            json_t *o = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
            T_CHECK(o != NULL);
            const json_t *ch = choice0(o);
            const json_t *d = json_object_get(ch, "delta");
            char cb[8192];
            const char *c =
                no_nul(json_object_get(d, "content"), cb, sizeof(cb));
            if (c && strlen(content) + strlen(c) < sizeof(content))
                strcat(content, c);
            const json_t *tc =
                json_array_get(json_object_get(d, "tool_calls"), 0);
            tool_heads += json_object_get(tc, "id") != NULL;
            const char *a = json_string_value(json_object_get(
                json_object_get(tc, "function"), "arguments"));
            if (a && strlen(args) + strlen(a) < sizeof(args))
                strcat(args, a);
            const char *f =
                json_string_value(json_object_get(ch, "finish_reason"));
            if (f)
                snprintf(fin, sizeof(fin), "%s", f);
            json_decref(o);
            p = e;
        }
        if (seed % 2 == 0 && !strcmp(fin, "stop")) {
            json_t *v = json_loads(content, 0, NULL);
            T_CHECK(v && json_check_schema(v, sch));
            valid += v != NULL;
            json_decref(v);
        } else if (seed % 2 && tool_heads) {
            /* auto chose a call: content stays empty */
            T_EQ_INT(strlen(content), 0);
            T_CHECK(!strcmp(fin, "tool_calls") || !strcmp(fin, "length"));
        } else if (seed % 2) {
            T_CHECK(strlen(content) > 0 && content[0] != '{');
            T_CHECK(!strcmp(fin, "stop") || !strcmp(fin, "length"));
        }
        e2e_resp_free(&r);
    }
    fprintf(stderr, "  streamed json_schema: %d of 4 valid\n", valid);
    T_CHECK(valid >= 2);
    json_decref(sch);
}


/* ---- logprobs -------------------------------------------------------- */

/* The bytes of a logprobs content list, joined, into out (NUL-ended);
 * checks every entry on the way: logprob <= 0, want_top alternatives most
 * likely first whose probabilities sum to at most 1, and with greedy the
 * token its own first alternative.  Returns the entries' count. */
static size_t
lp_join(const json_t *content, size_t want_top, int greedy, char *out,
        size_t cap)
{
    size_t o = 0, n = json_array_size(content);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(content, i);
        double lp = json_number_value(json_object_get(e, "logprob"));
        T_CHECK(lp <= 0.0);
        const json_t *b = json_object_get(e, "bytes"), *top =
            json_object_get(e, "top_logprobs");
        for (size_t k = 0; k < json_array_size(b) && o + 1 < cap; k++)
            if (json_integer_value(json_array_get(b, k))) /* as no_nul */
                out[o++] = (char)json_integer_value(json_array_get(b, k));
        T_EQ_INT(json_array_size(top), want_top);
        double sum = 0, prev = 0;
        for (size_t k = 0; k < json_array_size(top); k++) {
            double t =
                json_number_value(json_object_get(json_array_get(top, k),
                                                  "logprob"));
            if (k)
                T_CHECK(t <= prev);
            prev = t;
            sum += exp(t);
        }
        T_CHECK(sum <= 1.0 + 1e-5);
        if (greedy && want_top)
            T_CHECK(json_equal(json_object_get(json_array_get(top, 0), "token"),
                               json_object_get(e, "token")) &&
                    json_number_value(json_object_get(json_array_get(top, 0),
                                                      "logprob")) == lp);
    }
    out[o] = '\0';
    return n;
}

static void
test_logprobs(void)
{
    long st;
    char got[4096], body[1024];
    /* greedy: an entry a token, their bytes the content */
    json_t *o = post("{\"model\":\"local\",\"max_tokens\":12,\"temperature\":0,"
                     "\"logprobs\":true,\"top_logprobs\":3,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Once upon a time\"}]}",
                     &st);
    T_EQ_INT(st, 200);
    const json_t *ch = choice0(o);
    const char *content = msg_content(ch);
    size_t n = lp_join(json_object_get(json_object_get(ch, "logprobs"),
                                       "content"),
                       3, 1, got, sizeof(got));
    T_EQ_INT((long)n, json_integer_value(json_object_get(
                          json_object_get(o, "usage"), "completion_tokens")));
    T_EQ_STR(got, content ? content : "(none)");
    T_CHECK(json_is_null(json_object_get(json_object_get(ch, "logprobs"),
                                         "refusal")));
    /* a stop string inside that text: only the tokens before it */
    char stop[8] = "";
    if (content && strlen(content) >= 6)
        memcpy(stop, content + 4, 2);
    json_decref(o);
    if (*stop) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"local\",\"max_tokens\":12,\"temperature\":0,"
                 "\"logprobs\":true,\"stop\":[\"%s\"],\"messages\":[{"
                 "\"role\":\"user\",\"content\":\"Once upon a time\"}]}",
                 stop);
        o = post(body, &st);
        T_EQ_INT(st, 200);
        ch = choice0(o);
        const char *c2 = msg_content(ch);
        lp_join(json_object_get(json_object_get(ch, "logprobs"), "content"),
                0, 1, got, sizeof(got));
        T_CHECK(c2 && strstr(c2, stop) == NULL);
        /* the listed tokens are the content, or the content and the start
         * of a token the stop string cut */
        T_CHECK(c2 && strlen(got) <= strlen(c2) &&
                !strncmp(got, c2, strlen(got)));
        json_decref(o);
    }
    /* the stream lists the same tokens as the answer, chunk by chunk */
    o = post("{\"model\":\"local\",\"max_tokens\":12,\"temperature\":0,"
             "\"logprobs\":true,\"top_logprobs\":3,\"messages\":[{"
             "\"role\":\"user\",\"content\":\"Once upon a time\"}]}",
             &st);
    char want[4096];
    lp_join(json_object_get(json_object_get(choice0(o), "logprobs"),
                            "content"),
            3, 1, want, sizeof(want));
    json_decref(o);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"local\",\"stream\":true,\"max_tokens\":12,"
                      "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"Once "
                      "upon a time\"}]}",
                      NULL, 120000, &r),
             0);
    T_EQ_INT(r.status, 200);
    size_t gl = 0, i;
    json_t *evs = e2e_sse_objects(r.body), *ev;
    T_CHECK(json_array_size(evs) >= 2);
    json_array_foreach(evs, i, ev) {
        const json_t *lp = json_object_get(choice0(ev), "logprobs");
        if (json_is_object(lp))
            gl += lp_join(json_object_get(lp, "content"), 3, 1, got + gl,
                          sizeof(got) - gl) ? strlen(got + gl) : 0;
    }
    json_decref(evs);
    got[gl] = '\0';
    T_EQ_STR(got, want);
    e2e_resp_free(&r);
    /* n = 2, sampled: each choice its own list; the random model's 20
     * alternatives */
    o = post("{\"model\":\"rand\",\"n\":2,\"seed\":5,\"max_tokens\":6,"
             "\"logprobs\":true,\"top_logprobs\":20,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"x\"}]}",
             &st);
    T_EQ_INT(st, 200);
    const json_t *cs = json_object_get(o, "choices");
    T_EQ_INT(json_array_size(cs), 2);
    for (size_t k = 0; k < json_array_size(cs); k++) {
        const json_t *c = json_array_get(cs, k);
        lp_join(json_object_get(json_object_get(c, "logprobs"), "content"),
                20, 0, got, sizeof(got));
        const char *t = json_string_value(
            json_object_get(json_object_get(c, "message"), "content"));
        /* the random model's bytes may not be UTF-8: the answer repairs
         * them, so compare only where both are plain ASCII */
        int ascii = 1;
        for (const char *q = got; *q; q++)
            ascii &= (unsigned char)*q < 0x80;
        if (ascii)
            T_EQ_STR(got, t ? t : "(none)");
    }
    json_decref(o);
    /* without logprobs: null, as before */
    o = post("{\"model\":\"local\",\"max_tokens\":2,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"x\"}]}",
             &st);
    T_CHECK(json_is_null(json_object_get(choice0(o), "logprobs")));
    json_decref(o);
}

/* A chat choice's logprobs is {"content": [], "refusal": null}. */
static int
lp_empty(const json_t *lp)
{
    return json_is_object(lp) && json_object_size(lp) == 2 &&
           json_is_array(json_object_get(lp, "content")) &&
           json_array_size(json_object_get(lp, "content")) == 0 &&
           json_is_null(json_object_get(lp, "refusal"));
}

/* A streamed chat answer rebuilt: its text, its tool calls (cs), the
 * logprobs tokens' bytes joined, and whether every chunk carrying
 * tool_calls had lp_empty logprobs. */
struct lp_stream {
    char text[4096], lp_text[4096];
    struct call_stream cs;
    int tool_chunks, tool_lp_ok, done;
    char finish[32];
};

static void
lp_stream_read(const char *body, struct lp_stream *o)
{
    memset(o, 0, sizeof(*o));
    call_stream_read(body, &o->cs);
    size_t i, tl = 0, ll = 0;
    json_t *evs = e2e_sse_objects(body), *ev;
    o->done = strstr(body, "data: [DONE]") != NULL;
    o->tool_lp_ok = 1;
    json_array_foreach(evs, i, ev) {
        const json_t *ch = choice0(ev), *d = json_object_get(ch, "delta");
        const json_t *lp = json_object_get(ch, "logprobs");
        char cb[4096];
        const char *c = no_nul(json_object_get(d, "content"), cb, sizeof(cb));
        if (c && tl + strlen(c) < sizeof(o->text)) {
            memcpy(o->text + tl, c, strlen(c) + 1);
            tl += strlen(c);
        }
        if (json_is_object(lp))
            ll += lp_join(json_object_get(lp, "content"), 1, 0,
                          o->lp_text + ll, sizeof(o->lp_text) - ll)
                      ? strlen(o->lp_text + ll)
                      : 0;
        if (json_array_size(json_object_get(d, "tool_calls"))) {
            o->tool_chunks++;
            o->tool_lp_ok &= lp_empty(lp);
        }
        const char *f = json_string_value(json_object_get(ch, "finish_reason"));
        if (f)
            snprintf(o->finish, sizeof(o->finish), "%s", f);
    }
    json_decref(evs);
}

/*
 * logprobs with tools: a text answer (tool_choice none, or auto answering
 * with text) lists its content tokens as without tools (their bytes are
 * the content, one entry a completion token); an answer that is only a
 * tool call lists none ({"content": [], "refusal": null}, what an empty
 * text answer has) and its call is valid; streamed, every tool_call
 * delta carries that empty list and text chunks their tokens, and the
 * stream's tokens are the answer's.  On stories260K and the random model,
 * required, named, auto and none.
 */
static void
test_logprobs_tools(void)
{
    int calls = 0, texts = 0;
    for (int seed = 0; seed < 12; seed++) {
        const char *model = seed % 2 ? "rand" : "local";
        static const char *const choices[] = {
            "\"required\"", "\"auto\"", "\"none\"",
            "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}"};
        const char *choice = choices[seed % 4];
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"seed\":%d,\"max_tokens\":120,"
                 "\"logprobs\":true,\"top_logprobs\":1,\"tools\":%s,"
                 "\"tool_choice\":%s,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"%s\"}]}",
                 model, seed, tools, choice,
                 seed % 4 == 1 && seed % 8 < 4 ? "{" : "Hello");
        long st;
        json_t *o = post(body, &st);
        T_EQ_INT(st, 200);
        const json_t *ch = choice0(o);
        const json_t *msg = json_object_get(ch, "message");
        const json_t *lp = json_object_get(ch, "logprobs");
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        const json_t *tcs = json_object_get(msg, "tool_calls");
        char joined[4096];
        if (tcs) {
            calls++;
            T_CHECK(lp_empty(lp));
            T_CHECK(json_is_null(json_object_get(msg, "content")));
            if (fr && !strcmp(fr, "tool_calls"))
                calls_valid(tcs, seed % 4 == 3 ? "get_time" : NULL, 0);
            else
                T_EQ_STR(fr, "length");
        } else {
            texts++;
            T_CHECK(seed % 4 == 1 || seed % 4 == 2); /* auto or none */
            char cb[4096];
            const char *c = no_nul(
                json_object_get(json_object_get(ch, "message"), "content"),
                cb, sizeof(cb));
            size_t n = lp_join(json_object_get(lp, "content"), 1, 0, joined,
                               sizeof(joined));
            T_EQ_INT((long)n, json_integer_value(json_object_get(
                                  json_object_get(o, "usage"),
                                  "completion_tokens")));
            int ascii = 1; /* the answer repairs non-UTF-8 bytes */
            for (const char *q = joined; *q; q++)
                ascii &= (unsigned char)*q < 0x80;
            if (ascii)
                T_EQ_STR(joined, c ? c : "(none)");
            T_CHECK(json_is_null(json_object_get(lp, "refusal")));
        }
        /* the same request streamed (same seed: the same answer) */
        char sbody[4200];
        snprintf(sbody, sizeof(sbody), "{\"stream\":true,%s", body + 1);
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", url, sbody, NULL, 120000, &r), 0);
        T_EQ_INT(r.status, 200);
        static struct lp_stream ls;
        lp_stream_read(r.body, &ls);
        T_CHECK(ls.done);
        T_EQ_STR(ls.finish, fr ? fr : "(none)");
        if (tcs) {
            T_CHECK(ls.cs.heads >= 1 && ls.tool_chunks >= 1 && ls.tool_lp_ok);
            T_EQ_STR(ls.lp_text, "");
            T_EQ_STR(ls.text, "");
            calls_same(&ls.cs, tcs);
        } else {
            T_CHECK(ls.cs.heads == 0 && ls.tool_chunks == 0);
            T_EQ_STR(ls.lp_text, joined);
        }
        json_decref(ls.cs.calls);
        e2e_resp_free(&r);
        json_decref(o);
    }
    fprintf(stderr, "  logprobs with tools: %d calls, %d text answers\n",
            calls, texts);
    T_CHECK(calls >= 4 && texts >= 3);
}

/* logit_bias on chat: +100 on a token fills the answer with it (the
 * logprobs staying the model's: the forced token's own figure is below
 * 0 and not the likeliest), and under a json_schema whose only string is
 * an enum the grammar still wins over a forced token it forbids
 * (" time" fits nowhere): every answer ends by the grammar and
 * validates. */
static void
test_logit_bias(void)
{
    long st;
    /* 378 is stories260K's " time" (llmux tokenize) */
    json_t *o = post("{\"model\":\"local\",\"max_tokens\":3,\"temperature\":0,"
                     "\"logprobs\":true,\"top_logprobs\":1,\"logit_bias\":{"
                     "\"378\":100},\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Once upon a time\"}]}",
                     &st);
    T_EQ_INT(st, 200);
    const json_t *ch = choice0(o);
    const char *c = msg_content(ch);
    T_EQ_STR(c ? c : "(none)", " time time time");
    const json_t *e0 = json_array_get(
        json_object_get(json_object_get(ch, "logprobs"), "content"), 0);
    T_EQ_STR(json_string_value(json_object_get(e0, "token")), " time");
    T_CHECK(json_number_value(json_object_get(e0, "logprob")) < -0.01);
    const json_t *top0 =
        json_array_get(json_object_get(e0, "top_logprobs"), 0);
    T_CHECK(json_number_value(json_object_get(top0, "logprob")) >
            json_number_value(json_object_get(e0, "logprob")));
    json_decref(o);
    static const char *const enum_schema =
        "{\"type\":\"object\",\"additionalProperties\":false,"
        "\"required\":[\"unit\"],\"properties\":{\"unit\":{\"enum\":["
        "\"celsius\",\"kelvin\"]}}}";
    json_t *sch = json_loads(enum_schema, 0, NULL);
    int parsed = 0;
    for (int seed = 0; seed < 4; seed++) {
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"model\":\"local\",\"max_tokens\":40,\"seed\":%d,"
                 "\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"e\",\"strict\":true,"
                 "\"schema\":%s}},"
                 "\"logit_bias\":{\"378\":100},\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"Once upon a time\"}]}",
                 seed, enum_schema);
        o = post(body, &st);
        T_EQ_INT(st, 200);
        ch = choice0(o);
        c = msg_content(ch);
        const char *fr =
            json_string_value(json_object_get(ch, "finish_reason"));
        T_EQ_STR(fr ? fr : "(none)", "stop");
        json_t *v = c ? json_loads(c, 0, NULL) : NULL;
        T_CHECK(v && json_check_schema(v, sch));
        parsed += v != NULL;
        json_decref(v);
        json_decref(o);
    }
    T_EQ_INT(parsed, 4);
    json_decref(sch);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_refusals);
    T_RUN(test_json_schema);
    T_RUN(test_tool_calls);
    T_RUN(test_tool_stream);
    T_RUN(test_native_prompts);
    T_RUN(test_magistral_markers);
    T_RUN(test_ds_markers);
    T_RUN(test_glm_values);
    T_RUN(test_native_calls);
    T_RUN(test_parallel_calls);
    T_RUN(test_auto_none_and_turns);
    T_RUN(test_other_streams);
    T_RUN(test_logprobs);
    T_RUN(test_logprobs_tools);
    T_RUN(test_logit_bias);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    unlink(rand_model);
    unlink(herm_model);
    unlink(l3_model);
    unlink(mis_model);
    unlink(m11_model);
    unlink(dst_model);
    unlink(gran_model);
    unlink(g33_model);
    unlink(d31_model);
    unlink(glm_model);
    unlink(glmx_model);
    unlink(q3c_model);
    unlink(m32_model);
    unlink(mag_model);
    unlink(kimi_model);
    unlink(moon_model);
    unlink(nemo_model);
    unlink(ds_model);
    curl_global_cleanup();
    return T_END();
}
