/*
 * test_chat: template detection from real-looking tokenizer.chat_template
 * snippets, and the exact prompt text of each format for a system + user
 * + assistant + user conversation.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../local_engine/le_int.h"
#include "harness.h"

static const struct le_chat_msg conv[] = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "2+2?"},
};
#define N_CONV (sizeof(conv) / sizeof(conv[0]))

static void
check_opts(enum le_chat_template t, const struct le_chat_msg *m, size_t n,
           int gen, const struct le_chat_opts *o, const char *want)
{
    char *out = NULL;
    size_t len = 0;
    T_EQ_INT(o ? le_chat_apply_opts(t, m, n, gen, o, &out, &len)
               : le_chat_apply(t, m, n, gen, &out, &len),
             LE_OK);
    T_EQ_STR(out, want);
    if (out)
        T_EQ_INT(len, strlen(out));
    free(out);
}

static void
check(enum le_chat_template t, const struct le_chat_msg *m, size_t n,
      int gen, const char *want)
{
    check_opts(t, m, n, gen, NULL, want);
}

static void
test_detect(void)
{
#define D(s) le_chat_detect(s, strlen(s))
    T_EQ_INT(D("{% for message in messages %}{{'<|im_start|>' + "
               "message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}"),
             LE_CHAT_CHATML);
    T_EQ_INT(D("{{ bos_token }}{% for m in messages %}{{ "
               "'<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' "
               "+ m['content'] | trim + '<|eot_id|>' }}{% endfor %}"),
             LE_CHAT_LLAMA3);
    T_EQ_INT(D("{% if messages[0]['role'] == 'system' %}... '<<SYS>>\\n' + "
               "system_message ... bos_token + '[INST] ' + content.strip() + "
               "' [/INST]'"),
             LE_CHAT_LLAMA2);
    T_EQ_INT(D("{{ bos_token }}{% for message in messages %}{% if "
               "message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
               "+ ' [/INST]' }}{% elif %}{{ message['content'] + eos_token}}"),
             LE_CHAT_MISTRAL);
    /* Mistral's own: 7B v0.3 (v3), Nemo (v3-tekken), Large 2411 (v7),
     * Small 3 (v7-tekken), as their published templates write the turns */
    T_EQ_INT(D("{%- if tools is not none and (message == user_messages[-1]) "
               "%}{{- \"[AVAILABLE_TOOLS] [\" }}...{{- \"[INST] \" + "
               "message[\"content\"] + \"[/INST]\" }}"),
             LE_CHAT_MISTRAL_V3);
    T_EQ_INT(D("{{- \"[AVAILABLE_TOOLS][\" }}...{{- \"[INST]\" + "
               "message[\"content\"] + \"[/INST]\" }}"),
             LE_CHAT_MISTRAL_V3_TEKKEN);
    T_EQ_INT(D("{{- '[SYSTEM_PROMPT] ' + message['content'] + "
               "'[/SYSTEM_PROMPT]' }}...{{- '[INST] ' + message['content'] + "
               "'[/INST]' }}"),
             LE_CHAT_MISTRAL_V7);
    T_EQ_INT(D("{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' "
               "}}...{{- '[INST]' + message['content'] + '[/INST]' }}"),
             LE_CHAT_MISTRAL_V7_TEKKEN);
    T_EQ_INT(D("[AVAILABLE_TOOLS] ... '[INST] ' + content + ' [/INST]'"),
             LE_CHAT_MISTRAL);
    /* DeepSeek R1's (and its Qwen and Llama distills') */
    T_EQ_INT(D("{{bos_token}}{{ns.system_prompt}}{%- for message in messages "
               "%}{%- if message['role'] == 'user' %}{{'<\xef\xbd\x9cUser"
               "\xef\xbd\x9c>' + message['content']}}{%- endif %}... "
               "{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>' + content + "
               "'<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence"
               "\xef\xbd\x9c>'}}"),
             LE_CHAT_DEEPSEEK3);
    /* their updated template opens the reasoning */
    T_EQ_INT(D("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}"
               "...{% if add_generation_prompt %}{{'<\xef\xbd\x9c"
               "Assistant\xef\xbd\x9c><think>\\n'}}{% endif %}"),
             LE_CHAT_DEEPSEEK_R1_THINKING);
    /* R1's older one: its </think> rule, the reasoning not opened */
    T_EQ_INT(D("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}"
               "...{% set content = content.split('</think>')[-1] %}..."
               "{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}"),
             LE_CHAT_DEEPSEEK_R1);
    /* Qwen3's (hybrid, Instruct-2507) and Thinking-2507's */
    static const char q3[] =
        "{%- set ns = namespace(multi_step_tool=true, last_query_index="
        "messages|length - 1) %}... {%- if '</think>' in content %}... "
        "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + "
        "reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + "
        "content.lstrip('\\n') }}... {%- if add_generation_prompt %}{{- "
        "'<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and "
        "enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
        "{%- endif %}{%- endif %} <tool_call>";
    static const char q3t[] =
        "{%- set ns = namespace(multi_step_tool=true, last_query_index="
        "messages|length - 1) %}... '<think>' ... {%- if "
        "add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' "
        "}}{%- endif %} <tool_call>";
    T_EQ_INT(D(q3), LE_CHAT_QWEN3);
    T_EQ_INT(D(q3t), LE_CHAT_QWEN3_THINKING);
    T_EQ_INT(le_chat_tools_detect(q3, strlen(q3)), LE_TOOLS_HERMES);
    T_EQ_INT(le_chat_tools_detect(q3t, strlen(q3t)), LE_TOOLS_HERMES);
    /* Qwen2.5's: its default system text */
    static const char q25[] =
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] "
        "}}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a "
        "helpful assistant.' }}{%- endif %} '<|im_start|>' <tool_call>";
    T_EQ_INT(D(q25), LE_CHAT_QWEN25);
    T_EQ_INT(le_chat_tools_detect(q25, strlen(q25)), LE_TOOLS_HERMES);
    T_CHECK(le_chat_default_system(LE_CHAT_QWEN25) != NULL);
    T_CHECK(le_chat_default_system(LE_CHAT_CHATML) == NULL);
    check(LE_CHAT_QWEN25, conv + 1, 1, 1,
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You "
          "are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
          "<|im_end|>\n<|im_start|>assistant\n");
    check(LE_CHAT_QWEN25, conv, 2, 0,
          "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n"
          "Hi<|im_end|>\n");
    /* QwQ-style: reasoning, but not Qwen3's rules: ChatML */
    T_EQ_INT(D("'<|im_start|>assistant\\n<think>\\n' content.split("
               "'</think>')[-1]"),
             LE_CHAT_CHATML);
    T_EQ_INT(D("{% for message in messages %}{{'<|' + message['role'] + "
               "'|>' + '\\n' + message['content'] + '<|end|>\\n' }}{% endfor "
               "%}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}"),
             LE_CHAT_PHI3);
    T_EQ_INT(D("{{ bos_token }}{% for message in messages %}{{ "
               "'<start_of_turn>' + role + '\\n' + message['content'] | trim "
               "+ '<end_of_turn>\\n' }}{% endfor %}"),
             LE_CHAT_GEMMA);
    T_EQ_INT(D("{% for message in messages %}{% if message['role'] == 'user' "
               "%}{{ '<|user|>\\n' + message['content'] + eos_token }}"),
             LE_CHAT_ZEPHYR);
    T_EQ_INT(D("something else entirely"), LE_CHAT_CHATML);
    T_EQ_INT(le_chat_detect(NULL, 0), LE_CHAT_CHATML);
#undef D
    T_EQ_STR(le_chat_template_name(LE_CHAT_GEMMA), "gemma");
    T_EQ_INT(le_chat_template_from_name("llama3"), LE_CHAT_LLAMA3);
    T_EQ_INT(le_chat_template_from_name("nope"), -1);
    T_EQ_STR(le_chat_template_name(LE_CHAT_MISTRAL_V3_TEKKEN),
             "mistral-v3-tekken");
    T_EQ_INT(le_chat_template_from_name("mistral-v7"), LE_CHAT_MISTRAL_V7);
    T_CHECK(le_chat_is_mistral(LE_CHAT_MISTRAL_V7_TEKKEN) &&
            le_chat_is_mistral(LE_CHAT_MISTRAL) &&
            !le_chat_is_mistral(LE_CHAT_LLAMA2));
    T_CHECK(le_chat_is_tekken(LE_CHAT_MISTRAL_V7_TEKKEN) &&
            !le_chat_is_tekken(LE_CHAT_MISTRAL_V3));
}

/* Tool formats: markers of the published templates of Qwen2.5 and Hermes
 * 2 Pro (chatml + <tool_call>) and Llama 3.1 / 3.2 (ipython turns and
 * {"name", "parameters"} calls); Llama 3.0's template and a chatml one
 * without tools have none. */
static void
test_tools_detect(void)
{
#define D(s) le_chat_tools_detect(s, strlen(s))
    const char *qwen =
        "{%- if tools %}{{- '<|im_start|>system\\n' }}... {{- \"\\n\\n# "
        "Tools\\n\\nYou may call one or more functions ...<tools>\" }}{%- "
        "for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor "
        "%}... {{- '<tool_call>\\n{\"name\": \"' }} ... "
        "'<|im_start|>user\\n<tool_response>\\n' ... '<|im_end|>\\n'";
    const char *llama32 =
        "{{- bos_token }}... {{- \"<|start_header_id|>system<|end_header_id|>"
        "\\n\\n\" }}{%- if tools is not none %}{{- \"Environment: "
        "ipython\\n\" }}{%- endif %}... {{- 'Respond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument "
        "name and its value}.' }}... {{- \"<|start_header_id|>ipython"
        "<|end_header_id|>\\n\\n\" }}... '<|eot_id|>'";
    const char *llama30 =
        "{% set loop_messages = messages %}{% for message in loop_messages "
        "%}{% set content = '<|start_header_id|>' + message['role'] + "
        "'<|end_header_id|>\\n\\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}";
    T_EQ_INT(D(qwen), LE_TOOLS_HERMES);
    T_EQ_INT(le_chat_detect(qwen, strlen(qwen)), LE_CHAT_CHATML);
    T_EQ_INT(D(llama32), LE_TOOLS_LLAMA3);
    T_EQ_INT(le_chat_detect(llama32, strlen(llama32)), LE_CHAT_LLAMA3);
    T_EQ_INT(D(llama30), LE_TOOLS_JSON);
    /* llama3-based, ipython turns, but functionary's own call format */
    T_EQ_INT(D("<|start_header_id|>system<|end_header_id|> ... ipython ... "
               "{\"name\": ..., \"parameters\": ...} ... start with "
               "<function= and end with </function>"),
             LE_TOOLS_JSON);
    T_EQ_INT(D("{% for m in messages %}{{'<|im_start|>' + m['role'] + "
               "'\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"),
             LE_TOOLS_JSON);
    /* a marker of one family inside another's template does not count */
    T_EQ_INT(D("[INST] <tool_call> ipython parameters [/INST]"),
             LE_TOOLS_JSON);
    T_EQ_INT(le_chat_tools_detect(NULL, 0), LE_TOOLS_JSON);
    /* Mistral 7B v0.3's template (the v3 tokenizer's list format) */
    const char *mistral3 =
        "{{- bos_token }}{%- for message in loop_messages %}{%- if "
        "message[\"role\"] == \"user\" %}{%- if tools is not none and "
        "(message == user_messages[-1]) %}{{- \"[AVAILABLE_TOOLS] [\" }}"
        "...{{- \"[/AVAILABLE_TOOLS]\" }}{%- endif %}{{- \"[INST] \" + "
        "message[\"content\"] + \"[/INST]\" }}{%- elif message.tool_calls "
        "is defined %}{{- \"[TOOL_CALLS] [\" }}... {{- '[TOOL_RESULTS] "
        "{\"content\": ' + content|string + \", \" }}";
    T_EQ_INT(D(mistral3), LE_TOOLS_MISTRAL);
    T_EQ_INT(le_chat_detect(mistral3, strlen(mistral3)), LE_CHAT_MISTRAL_V3);
    /* Nemo's and Small 3's (tekken, no space after the markers) */
    T_EQ_INT(D("[AVAILABLE_TOOLS][ ... \"[INST]\" + message[\"content\"] "
               "... [TOOL_CALLS][ ... [TOOL_RESULTS]{"),
             LE_TOOLS_MISTRAL);
    T_EQ_INT(D("[SYSTEM_PROMPT] ... '[INST]' + m ... [AVAILABLE_TOOLS][ "
               "... [TOOL_CALLS][ ..."),
             LE_TOOLS_MISTRAL);
    /* v11's (Small 3.1+) [TOOL_CALLS]NAME[ARGS]{...} */
    T_EQ_INT(D("[AVAILABLE_TOOLS]...[INST]...[TOOL_CALLS]' + name + "
               "'[ARGS]' + arguments"),
             LE_TOOLS_MISTRAL_V11);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_MISTRAL_V11), "mistral-v11");
    /* Mistral Small 3.2's: [CALL_ID] besides v11's markers */
    const char *m32 =
        "{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}{{- "
        "'[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{{- "
        "'[INST]' }}{{- '[TOOL_CALLS]' + tool_call.function.name }}{{- "
        "'[CALL_ID]' + tool_call.id }}{{- '[ARGS]' + args|tojson }}";
    T_EQ_INT(D(m32), LE_TOOLS_MISTRAL_CALL_ID);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_MISTRAL_CALL_ID), "mistral-call-id");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_MISTRAL_CALL_ID)[1], "[CALL_ID]");
    /* DeepSeek V3-0324's and R1's (and the distills') templates, as
     * they write a call; V3.1's has no fence and no type;
     * the markers in another family's template do not count */
    const char *ds_v3 =
        "{{'<｜User｜>' + message['content'] + '<｜Assistant｜>'}}... "
        "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
        "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' "
        "+ '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
        "'<｜tool▁call▁end｜>'}}... {{'<｜tool▁calls▁end｜><｜end▁of▁"
        "sentence｜>'}}... {{'<｜tool▁outputs▁begin｜><｜tool▁output▁"
        "begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}";
    const char *ds_r1 =
        "{%- set content = content.split('</think>')[-1] -%}"
        "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜><｜tool▁"
        "calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
        "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
        "'\\n' + tool['function']['arguments'] + '\\n' + '```' + "
        "'<｜tool▁call▁end｜>'}}{{'<｜Assistant｜><think>\\n'}}";
    const char *ds_v31 =
        "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜></think>'}}"
        "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']"
        "['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + "
        "'<｜tool▁call▁end｜>'}}";
    T_EQ_INT(D(ds_v3), LE_TOOLS_DEEPSEEK);
    T_EQ_INT(le_chat_detect(ds_v3, strlen(ds_v3)), LE_CHAT_DEEPSEEK3);
    T_EQ_INT(D(ds_r1), LE_TOOLS_DEEPSEEK);
    T_EQ_INT(le_chat_detect(ds_r1, strlen(ds_r1)),
             LE_CHAT_DEEPSEEK_R1_THINKING);
    T_EQ_INT(D(ds_v31), LE_TOOLS_DEEPSEEK31);
    T_EQ_INT(le_chat_detect(ds_v31, strlen(ds_v31)), LE_CHAT_DEEPSEEK31);
    T_EQ_INT(D("<|im_start|> <｜tool▁calls▁begin｜><｜tool▁sep｜> ```json"),
             LE_TOOLS_JSON);
    /* DeepSeek's template without its tool markers (older, or edited) */
    T_EQ_INT(D("{{'<｜User｜>' + m}}{{'<｜Assistant｜>' + c}} ```json"),
             LE_TOOLS_JSON);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_DEEPSEEK), "deepseek");
    /* the markers a vocabulary may hold as control tokens */
    const char *const *mk = le_chat_tools_markers(LE_TOOLS_DEEPSEEK);
    size_t nmk = 0;
    while (mk[nmk])
        nmk++;
    T_EQ_INT(nmk, 5);
    T_EQ_STR(mk[0], "<｜tool▁calls▁begin｜>");
    T_EQ_STR(mk[2], "<｜tool▁sep｜>");
    T_EQ_STR(mk[4], "<｜tool▁calls▁end｜>");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_HERMES)[0], "<tool_call>");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_GRANITE)[1], "</tool_call>");
    T_CHECK(le_chat_tools_markers(LE_TOOLS_GRANITE)[2] == NULL);
    T_CHECK(le_chat_tools_markers(LE_TOOLS_LLAMA3)[0] == NULL);
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_MISTRAL_V11)[1], "[ARGS]");
    /* mistral's markers in a chatml template */
    T_EQ_INT(D("<|im_start|>[AVAILABLE_TOOLS] [TOOL_CALLS]"), LE_TOOLS_JSON);
#undef D
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_HERMES), "hermes");
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_LLAMA3), "llama3");
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_JSON), "json");
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_MISTRAL), "mistral");
}

static void
test_chatml(void)
{
    check(LE_CHAT_CHATML, conv, N_CONV, 1,
          "<|im_start|>system\nYou are terse.<|im_end|>\n"
          "<|im_start|>user\nHi<|im_end|>\n"
          "<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\n2+2?<|im_end|>\n"
          "<|im_start|>assistant\n");
    check(LE_CHAT_CHATML, conv + 1, 1, 0, "<|im_start|>user\nHi<|im_end|>\n");
}

static void
test_llama2(void)
{
    check(LE_CHAT_LLAMA2, conv, N_CONV, 1,
          "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. "
          "</s><s>[INST] 2+2? [/INST]");
    check(LE_CHAT_LLAMA2, conv + 1, 1, 1, "[INST] Hi [/INST]");
}

static void
test_llama3(void)
{
    check(LE_CHAT_LLAMA3, conv, N_CONV, 1,
          "<|start_header_id|>system<|end_header_id|>\n\nYou are "
          "terse.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* content is trimmed as Meta's template does */
    struct le_chat_msg m = {"user", "  spaced \n"};
    check(LE_CHAT_LLAMA3, &m, 1, 0,
          "<|start_header_id|>user<|end_header_id|>\n\nspaced<|eot_id|>");
}

static void
test_mistral(void)
{
    check(LE_CHAT_MISTRAL, conv, N_CONV, 1,
          "[INST] You are terse.\n\nHi [/INST] Hello.</s> [INST] 2+2? "
          "[/INST]");
    /* "tools" and "tool" turns as they are, outside [INST] */
    struct le_chat_msg t[] = {
        {"system", "S"},
        {"tools", "[AVAILABLE_TOOLS] [][/AVAILABLE_TOOLS]"},
        {"user", "U"},
        {"tool_calls", "[TOOL_CALLS] []"},
        {"tool", "[TOOL_RESULTS] {}[/TOOL_RESULTS]"},
    };
    check(LE_CHAT_MISTRAL, t, 5, 1,
          "[AVAILABLE_TOOLS] [][/AVAILABLE_TOOLS] [INST] S\n\nU [/INST]"
          "[TOOL_CALLS] []</s>[TOOL_RESULTS] {}[/TOOL_RESULTS]");
    /* the system text alone: an instruction of its own, not dropped */
    check(LE_CHAT_MISTRAL, conv, 1, 1, "[INST] You are terse. [/INST]");
    check(LE_CHAT_MISTRAL_V3_TEKKEN, conv, 1, 1, "[INST]You are terse.[/INST]");
}

/* Mistral's v3 / v7 templates (its cookbook): v3 puts the system text in
 * front of the last user turn and trims the assistant's; tekken writes
 * no space after the markers; v7 has a [SYSTEM_PROMPT] turn; a
 * "tool_calls" turn is written as it is, then </s>. */
static void
test_mistral_versions(void)
{
    static const struct le_chat_msg c[] = {
        {"system", "S"}, {"user", "Hi"}, {"assistant", " Hello. "},
        {"user", "2+2?"}};
    check(LE_CHAT_MISTRAL_V3, c, 4, 1,
          "[INST] Hi[/INST] Hello.</s>[INST] S\n\n2+2?[/INST]");
    check(LE_CHAT_MISTRAL_V3_TEKKEN, c, 4, 1,
          "[INST]Hi[/INST] Hello. </s>[INST]S\n\n2+2?[/INST]");
    check(LE_CHAT_MISTRAL_V7, c, 4, 1,
          "[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello. </s>"
          "[INST] 2+2?[/INST]");
    check(LE_CHAT_MISTRAL_V7_TEKKEN, c, 4, 1,
          "[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]Hi[/INST] Hello. </s>"
          "[INST]2+2?[/INST]");
    /* an agent turn: the system text goes to the last user turn, before
     * the calls and their results */
    static const struct le_chat_msg a[] = {
        {"system", "S"},
        {"tools", "[AVAILABLE_TOOLS][][/AVAILABLE_TOOLS]"},
        {"user", "U"},
        {"tool_calls", "[TOOL_CALLS][]"},
        {"tool", "[TOOL_RESULTS]{}[/TOOL_RESULTS]"}};
    check(LE_CHAT_MISTRAL_V3_TEKKEN, a, 5, 1,
          "[AVAILABLE_TOOLS][][/AVAILABLE_TOOLS][INST]S\n\nU[/INST]"
          "[TOOL_CALLS][]</s>[TOOL_RESULTS]{}[/TOOL_RESULTS]");
    /* two system messages: both, joined (none is dropped) */
    static const struct le_chat_msg s2[] = {
        {"system", "A"}, {"system", "B"}, {"user", "U"}};
    check(LE_CHAT_MISTRAL_V3, s2, 3, 1, "[INST] A\n\nB\n\nU[/INST]");
    check(LE_CHAT_MISTRAL, s2, 3, 1, "[INST] A\n\nB\n\nU [/INST]");
}

/* DeepSeek V3 / R1: the system texts first; an assistant's reasoning
 * (up to its </think>) is not sent back */
static void
test_deepseek3(void)
{
#define U "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define A "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define E "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
    check(LE_CHAT_DEEPSEEK3, conv, N_CONV, 1,
          "You are terse." U "Hi" A "Hello." E U "2+2?" A);
    static const struct le_chat_msg r[] = {
        {"system", "S1"}, {"user", "Q"},
        {"assistant", "<think>\nhm\n</think>\n\nFour."}, {"system", "S2"},
        {"user", "Q2"}};
    check(LE_CHAT_DEEPSEEK3, r, 5, 0,
          "S1\n\nS2" U "Q" A "\n\nFour." E U "Q2");
    T_EQ_STR(le_chat_template_name(LE_CHAT_DEEPSEEK3), "deepseek3");
#undef U
#undef A
#undef E
}

/* DeepSeek's tool turns, as V3-0324's and R1-0528's templates write
 * them: the answer's text and calls ("tool_calls", written by the
 * caller), the results in one outputs block ("\n" between two), the
 * answer after them opened by <｜tool▁outputs▁end｜> (not <｜Assistant｜>),
 * a second call turn opening a new block; a prompt ending with results
 * ends with <｜tool▁outputs▁end｜>, no generation prompt (-thinking: its
 * <think>\n after it) */
static void
test_deepseek_tools(void)
{
#define CALL(n, a)                                                         \
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" n "\n```json\n" a          \
    "\n```<｜tool▁call▁end｜>"
    static const struct le_chat_msg m[] = {
        {"system", "S"},
        {"user", "Q"},
        {"tool_calls", "Two.<｜tool▁calls▁begin｜>" CALL("f", "{}")
                       "\n" CALL("g", "{\"x\": 1}") "<｜tool▁calls▁end｜>"},
        {"tool", "R1"},
        {"tool", "R2"},
        {"assistant", "<think>\nhm\n</think>\n\nDone."},
        {"user", "Q2"},
        {"tool_calls", "<｜tool▁calls▁begin｜>" CALL("f", "{}")
                       "<｜tool▁calls▁end｜>"},
        {"tool", "R3"}};
    static const char want[] =
        "S<｜User｜>Q<｜Assistant｜>Two.<｜tool▁calls▁begin｜>" CALL("f", "{}")
        "\n" CALL("g", "{\"x\": 1}") "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>R1<｜tool▁output▁end｜>"
        "\n<｜tool▁output▁begin｜>R2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
        "\n\nDone.<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜>"
        "<｜tool▁calls▁begin｜>" CALL("f", "{}") "<｜tool▁calls▁end｜>"
        "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
        "R3<｜tool▁output▁end｜><｜tool▁outputs▁end｜>";
    check(LE_CHAT_DEEPSEEK3, m, 9, 1, want);
    check(LE_CHAT_DEEPSEEK_R1, m, 9, 1, want);
    check(LE_CHAT_DEEPSEEK_R1_THINKING, m, 9, 1,
          "S<｜User｜>Q<｜Assistant｜>Two.<｜tool▁calls▁begin｜>" CALL("f", "{}")
          "\n" CALL("g", "{\"x\": 1}") "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
          "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>R1<｜tool▁output▁end｜>"
          "\n<｜tool▁output▁begin｜>R2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
          "\n\nDone.<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜>"
          "<｜tool▁calls▁begin｜>" CALL("f", "{}") "<｜tool▁calls▁end｜>"
          "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
          "R3<｜tool▁output▁end｜><｜tool▁outputs▁end｜><think>\n");
    /* the answer after the results: its generation prompt as usual; a
     * user turn after results does not close them (as the template) */
    static const struct le_chat_msg m2[] = {
        {"user", "Q"},
        {"tool_calls", "<｜tool▁calls▁begin｜>" CALL("f", "{}")
                       "<｜tool▁calls▁end｜>"},
        {"tool", "R"},
        {"user", "Q2"}};
    check(LE_CHAT_DEEPSEEK3, m2, 4, 1,
          "<｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜>" CALL("f", "{}")
          "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>"
          "<｜tool▁output▁begin｜>R<｜tool▁output▁end｜><｜User｜>Q2"
          "<｜Assistant｜>");
    /* without the generation prompt the results are still closed */
    check(LE_CHAT_DEEPSEEK3, m2, 3, 0,
          "<｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜>" CALL("f", "{}")
          "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>"
          "<｜tool▁output▁begin｜>R<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
#undef CALL
}

/* DeepSeek V3.1's template (the original's, which llama.cpp's copy
 * edits to "<think></think>"): the expected texts are what Python's
 * jinja2 renders of it for the same messages (as transformers does) */
static void
test_deepseek31(void)
{
#define U "<｜User｜>"
#define A "<｜Assistant｜>"
#define E "<｜end▁of▁sentence｜>"
#define CALL(n, a) "<｜tool▁call▁begin｜>" n "<｜tool▁sep｜>" a "<｜tool▁call▁end｜>"
#define OUT(r) "<｜tool▁output▁begin｜>" r "<｜tool▁output▁end｜>"
    /* the template's lines that tell it, both spellings; R1's is not */
    static const char orig[] =
        "{%- if ns.is_last_user -%}{{'<｜Assistant｜>'}}{%- if "
        "message['prefix'] is defined and message['prefix'] and thinking "
        "-%}{{'<think>'}}{%- else -%}{{'</think>'}}{%- endif -%}"
        "{{'<｜User｜>' + message['content']}}"
        "{%- if ns.is_last_user -%}{{'<｜Assistant｜></think>'}}",
                      edited[] =
        "{{'<｜User｜>' + message['content']}}"
        "{%- if ns.is_last_user -%}{{'<｜Assistant｜><think></think>'}}"
        "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']"
        "['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] | "
        "tojson + '<｜tool▁call▁end｜>'}}";
    T_EQ_INT(le_chat_detect(orig, strlen(orig)), LE_CHAT_DEEPSEEK31);
    T_EQ_INT(le_chat_detect(edited, strlen(edited)), LE_CHAT_DEEPSEEK31);
    T_EQ_INT(le_chat_tools_detect(edited, strlen(edited)),
             LE_TOOLS_DEEPSEEK31);
    /* no tool markers in the snippet: the wrapper */
    T_EQ_INT(le_chat_tools_detect(orig, strlen(orig)), LE_TOOLS_JSON);
    T_EQ_INT(le_chat_template_from_name("deepseek3.1"), LE_CHAT_DEEPSEEK31);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_DEEPSEEK31), "deepseek3.1");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_DEEPSEEK31)[2],
             "<｜tool▁sep｜>");
    T_EQ_INT(le_chat_reasoning(LE_CHAT_DEEPSEEK31), 4);
    T_EQ_STR(le_chat_reasoning_off(LE_CHAT_DEEPSEEK31), "");
    check(LE_CHAT_DEEPSEEK31, conv, N_CONV, 1,
          "You are terse." U "Hi" A "</think>Hello." E U "2+2?" A "</think>");
    struct le_chat_opts think = {"high", NULL, NULL, 1};
    check_opts(LE_CHAT_DEEPSEEK31, conv, N_CONV, 1, &think,
               "You are terse." U "Hi" A "</think>Hello." E U "2+2?" A
               "<think>");
    static const struct le_chat_msg r[] = {
        {"system", "S1"}, {"user", "Q"},
        {"assistant", "<think>\nhm\n</think>\n\nFour."}, {"system", "S2"},
        {"user", "Q2"}};
    check(LE_CHAT_DEEPSEEK31, r, 5, 0,
          "S1\n\nS2" U "Q" A "</think>\n\nFour." E U "Q2");
    /* calls, results, the answer after them (no header, its text as it
     * is), a second round; a prompt ending with results gets no
     * generation prompt, thinking or not */
    static const struct le_chat_msg m[] = {
        {"system", "S"},
        {"user", "Q"},
        {"tool_calls", "Two.<｜tool▁calls▁begin｜>" CALL("f", "{}")
                       CALL("g", "{\"x\": 1}") "<｜tool▁calls▁end｜>"},
        {"tool", "R1"},
        {"tool", "R2"},
        {"assistant", "<think>hm</think>Done."},
        {"user", "Q2"},
        {"tool_calls", "<｜tool▁calls▁begin｜>" CALL("f", "{}")
                       "<｜tool▁calls▁end｜>"},
        {"tool", "R3"}};
#define FIRST                                                              \
    "S" U "Q" A "</think>Two.<｜tool▁calls▁begin｜>" CALL("f", "{}")          \
    CALL("g", "{\"x\": 1}") "<｜tool▁calls▁end｜>" E OUT("R1") OUT("R2")    \
    "<think>hm</think>Done." E U "Q2"
    check(LE_CHAT_DEEPSEEK31, m, 9, 1,
          FIRST A "</think><｜tool▁calls▁begin｜>" CALL("f", "{}")
          "<｜tool▁calls▁end｜>" E OUT("R3"));
    check_opts(LE_CHAT_DEEPSEEK31, m, 9, 1, &think,
               FIRST A "</think><｜tool▁calls▁begin｜>" CALL("f", "{}")
               "<｜tool▁calls▁end｜>" E OUT("R3"));
    check(LE_CHAT_DEEPSEEK31, m, 7, 1, FIRST A "</think>");
#undef FIRST
#undef OUT
#undef CALL
#undef E
#undef A
#undef U
}

/* A Mistral template's default system text: its literals joined, escapes
 * read, today as its strftime_now format writes the date */
static void
test_default_system(void)
{
    static const char m32[] =
        "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set "
        "default_system_message = \"You are Mistral Small 3.\\nThe current "
        "date is \" + today + \".\\n\\nSay \\\"hi\\\".\" %}\n{{- bos_token }}";
    char *d = le_chat_default_eval(m32, strlen(m32), "2026-03-07");
    T_EQ_STR(d, "You are Mistral Small 3.\nThe current date is 2026-03-07."
                "\n\nSay \"hi\".");
    free(d);
    static const char dev[] =
        "{%- set default_system_message = 'You are Devstral.\\n* don\\'t "
        "\\\"guess\\\"' %}";
    d = le_chat_default_eval(dev, strlen(dev), NULL);
    T_EQ_STR(d, "You are Devstral.\n* don't \"guess\"");
    free(d);
    /* none, an empty one, another name, an unclosed literal: NULL */
    static const char *const bad[] = {
        "{{ bos_token }}[INST]",
        "{%- set default_system_message = '' %}",
        "{%- set default_system_message = 'a' + yesterday %}",
        "{%- set default_system_message = 'a' + today %}", /* no format */
        "{%- set default_system_message = 'abc"};
    for (size_t i = 0; i < 5; i++)
        T_CHECK(le_chat_default_eval(bad[i], strlen(bad[i]), NULL) == NULL);
    /* strftime_now( at the very end: nothing read past it (fuzzing
     * found the read; ASan shows it on a copy without the NUL) */
    static const char cut[] = "{%- set default_system_message = 'a' + "
                              "today %}{%- set today = strftime_now(";
    char *cp = malloc(sizeof(cut) - 1);
    if (cp) {
        memcpy(cp, cut, sizeof(cut) - 1);
        T_CHECK(le_chat_default_eval(cp, sizeof(cut) - 1, NULL) == NULL);
        free(cp);
    }
    /* a NUL in the text (fuzzing found it: the text read as empty) */
    static const char nul[] = "{%- set default_system_message = '\0hi' %}";
    T_CHECK(le_chat_default_eval(nul, sizeof(nul) - 1, NULL) == NULL);
    static const char knul[] = "<|im_user|><|im_system|>system<|im_middle|>"
                               "a\0b<|im_end|>";
    T_CHECK(le_chat_default_eval(knul, sizeof(knul) - 1, NULL) == NULL);
}

/* Mistral's reasoning templates (Magistral Small 2507 / 2509, Ministral 3
 * Reasoning): v7-tekken's turns, told apart by a default system text
 * that asks for [THINK] reasoning; the tools listed before the messages'
 * loop go right after the first system text (Ministral 3's and
 * unsloth's Devstral templates), elsewhere before the last user turn */
static void
test_magistral(void)
{
    static const char m3r[] =
        "{%- set default_system_message = '# HOW YOU SHOULD THINK AND "
        "ANSWER\\n\\nFirst draft your thinking process:[THINK]Your "
        "thoughts.[/THINK]Here, provide a self-contained response.' %}"
        "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{{- "
        "'[SYSTEM_PROMPT]' -}}...{%- set tools_definition = "
        "'[AVAILABLE_TOOLS]' + (tools| tojson) + '[/AVAILABLE_TOOLS]' %}"
        "{%- for message in loop_messages %}{{- '[INST]' + "
        "message['content'] + '[/INST]' }}...{{- '[THINK]' + "
        "block['thinking'] + '[/THINK]' }}...{{- name + '[ARGS]' + "
        "arguments }}...{{- '[TOOL_CALLS]' }}";
    T_EQ_INT(le_chat_detect(m3r, strlen(m3r)), LE_CHAT_MAGISTRAL);
    T_EQ_INT(le_chat_tools_detect(m3r, strlen(m3r)), LE_TOOLS_MISTRAL_V11);
    T_EQ_INT(le_chat_tools_first(m3r, strlen(m3r)), 1);
    /* a template that only writes a client's thinking blocks back, its
     * default text asking for none: plain v7-tekken */
    static const char inst[] =
        "{%- set default_system_message = 'You are Ministral 3.' %}{{- "
        "'[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{%- for "
        "message in loop_messages %}{{- '[INST]' + message['content'] + "
        "'[/INST]' }}...{{- '[THINK]' + block['thinking'] + '[/THINK]' }}";
    T_EQ_INT(le_chat_detect(inst, strlen(inst)), LE_CHAT_MISTRAL_V7_TEKKEN);
    T_EQ_INT(le_chat_tools_first(inst, strlen(inst)), 0);
    /* and one with no default text at all (read through
     * le_chat_default_eval, which must not come back here) */
    static const char nodef[] =
        "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- "
        "'[INST]' + message['content'] + '[/INST]' }}...{{- '[THINK]' + "
        "block['thinking'] + '[/THINK]' }}";
    T_EQ_INT(le_chat_detect(nodef, strlen(nodef)), LE_CHAT_MISTRAL_V7_TEKKEN);
    /* Small 3.2's: the tools inside the loop, at the last user turn */
    static const char m32[] =
        "{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}{%- "
        "for message in loop_messages %}{%- if message['role'] == 'user' %}"
        "{%- if tools is not none and (message == user_messages[-1]) %}{{- "
        "'[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{{- "
        "'[INST]' + message['content'] + '[/INST]' }}";
    T_EQ_INT(le_chat_tools_first(m32, strlen(m32)), 0);
    /* not a mistral template at all */
    static const char cml[] = "[AVAILABLE_TOOLS] {% for message in "
                              "messages %}<|im_start|>";
    T_EQ_INT(le_chat_tools_first(cml, strlen(cml)), 0);
    /* Magistral Small 2506's: the same turns, its default asking for
     * <think> tags (qwen3's reasoning rules) */
    static const char m2506[] =
        "{%- set default_system_message = 'Draft first.\\n\\nYour thinking "
        "process must follow the template below:\\n<think>\\nYour thoughts"
        "\\n</think>\\n\\nHere, a summary.' %}{{- '[SYSTEM_PROMPT]' + "
        "system_message + '[/SYSTEM_PROMPT]' }}{%- for message in "
        "loop_messages %}{{- '[INST]' + message['content'] + '[/INST]' }}";
    T_EQ_INT(le_chat_detect(m2506, strlen(m2506)), LE_CHAT_MAGISTRAL_2506);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_MAGISTRAL_2506), 1);
    T_EQ_STR(le_chat_reasoning_off(LE_CHAT_MAGISTRAL_2506),
             "<think>\n\n</think>\n\n");
    T_EQ_STR(le_chat_template_name(LE_CHAT_MAGISTRAL_2506), "magistral-2506");
    T_CHECK(le_chat_is_mistral(LE_CHAT_MAGISTRAL_2506) &&
            le_chat_is_tekken(LE_CHAT_MAGISTRAL_2506));
    check(LE_CHAT_MAGISTRAL_2506, conv, N_CONV, 1,
          "[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hi[/INST]"
          "Hello.</s>[INST]2+2?[/INST]");
    T_EQ_INT(le_chat_template_from_name("magistral"), LE_CHAT_MAGISTRAL);
    T_EQ_STR(le_chat_template_name(LE_CHAT_MAGISTRAL), "magistral");
    T_EQ_INT(le_chat_reasoning(LE_CHAT_MAGISTRAL), 6);
    T_EQ_STR(le_chat_reasoning_off(LE_CHAT_MAGISTRAL), "[THINK][/THINK]");
    T_CHECK(le_chat_is_mistral(LE_CHAT_MAGISTRAL) &&
            le_chat_is_tekken(LE_CHAT_MAGISTRAL));
    /* the turns are v7-tekken's (jinja2's rendering of Ministral 3
     * Reasoning's template, after its BOS) */
    check(LE_CHAT_MAGISTRAL, conv, N_CONV, 1,
          "[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hi[/INST]"
          "Hello.</s>[INST]2+2?[/INST]");
}

/* Moonshot's templates (kimi: Kimi K2, Moonlight): the turns under
 * their role markers, the default system text read from the template's
 * own literal; K2's call markers make its tool format kimi (the expected
 * texts are jinja2's renderings of llama.cpp's Kimi-K2-Instruct.jinja,
 * but for the newline its whitespace leaves after the default system
 * turn, README) */
static void
test_kimi(void)
{
    static const char k2[] =
        "{%- if tools -%}\n  <|im_system|>tool_declare<|im_middle|>{{ tools "
        "| tojson }}<|im_end|>\n{%- endif -%}\n{% for message in messages "
        "%}\n  {%- if loop.first and messages[0]['role'] != 'system' -%}\n"
        "  <|im_system|>system<|im_middle|>You are Kimi, an AI assistant "
        "created by Moonshot AI.<|im_end|>\n  {% endif %}...<|im_user|>{{"
        "role_name}}<|im_middle|>...<|im_assistant|>{{role_name}}"
        "<|im_middle|>...<|tool_calls_section_begin|>...<|tool_call_begin|>"
        "{{ formatted_id }}<|tool_call_argument_begin|>...<|tool_call_end|>"
        "...<|tool_calls_section_end|>";
    T_EQ_INT(le_chat_detect(k2, strlen(k2)), LE_CHAT_KIMI);
    T_EQ_INT(le_chat_tools_detect(k2, strlen(k2)), LE_TOOLS_KIMI);
    char *d = le_chat_default_eval(k2, strlen(k2), NULL);
    T_EQ_STR(d, "You are Kimi, an AI assistant created by Moonshot AI.");
    free(d);
    /* Moonlight's: the same turns, its own default, no call markers */
    static const char moon[] =
        "{%- for message in messages -%}{%- if loop.first and messages[0]"
        "['role'] != 'system' -%}<|im_system|>system<|im_middle|>You are a "
        "helpful assistant provided by Moonshot-AI.<|im_end|>{%- endif -%}"
        "{%- if message['role'] == 'system' -%}<|im_system|>{%- endif -%}"
        "{%- if message['role'] == 'user' -%}<|im_user|>{%- endif -%}{%- "
        "if message['role'] == 'assistant' -%}<|im_assistant|>{%- endif -%}"
        "{{ message['role'] }}<|im_middle|>{{message['content']}}<|im_end|>"
        "{%- endfor -%}";
    T_EQ_INT(le_chat_detect(moon, strlen(moon)), LE_CHAT_KIMI);
    T_EQ_INT(le_chat_tools_detect(moon, strlen(moon)), LE_TOOLS_JSON);
    d = le_chat_default_eval(moon, strlen(moon), NULL);
    T_EQ_STR(d, "You are a helpful assistant provided by Moonshot-AI.");
    free(d);
    T_EQ_INT(le_chat_template_from_name("kimi"), LE_CHAT_KIMI);
    T_EQ_STR(le_chat_template_name(LE_CHAT_KIMI), "kimi");
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_KIMI), "kimi");
    T_EQ_INT(le_chat_reasoning(LE_CHAT_KIMI), 0);
    check(LE_CHAT_KIMI, conv, N_CONV, 1,
          "<|im_system|>system<|im_middle|>You are terse.<|im_end|>"
          "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant"
          "<|im_middle|>Hello.<|im_end|><|im_user|>user<|im_middle|>2+2?"
          "<|im_end|><|im_assistant|>assistant<|im_middle|>");
    /* the turns the local provider writes: the tools' declaration, an
     * answer with its calls, a result */
    static const struct le_chat_msg t[] = {
        {"tools", "[T]"},
        {"user", "Q"},
        {"tool_calls", "<|tool_calls_section_begin|>C"
                       "<|tool_calls_section_end|>"},
        {"tool", "## Return of functions.f:0\nR"},
    };
    check(LE_CHAT_KIMI, t, 4, 0,
          "<|im_system|>tool_declare<|im_middle|>[T]<|im_end|><|im_user|>user"
          "<|im_middle|>Q<|im_end|><|im_assistant|>assistant<|im_middle|>"
          "<|tool_calls_section_begin|>C<|tool_calls_section_end|><|im_end|>"
          "<|im_system|>tool<|im_middle|>## Return of functions.f:0\nR"
          "<|im_end|>");
}

/* GLM-4.7-Flash's template: the expected texts are what Python's jinja2
 * renders of it (llama.cpp's copy, models/templates/GLM-4.7-Flash.jinja)
 * for the same messages, enable_thinking unset or false */
static void
test_glm47(void)
{
    static const char tmpl[] =
        "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n...{%- elif "
        "m.role == 'assistant' -%}\n<|assistant|>\n{%- set "
        "reasoning_content = '' %}...<arg_key>{{ k }}</arg_key>...{%- if "
        "add_generation_prompt -%}\n    <|assistant|>{{- '</think>' if "
        "(enable_thinking is defined and not enable_thinking) else "
        "'<think>' -}}";
    T_EQ_INT(le_chat_detect(tmpl, strlen(tmpl)), LE_CHAT_GLM47);
    /* its XML calls: <tool_call>, <arg_key> and <arg_value> */
    T_EQ_INT(le_chat_tools_detect(tmpl, strlen(tmpl)), LE_TOOLS_JSON);
    static const char calls[] =
        "[gMASK]<sop>{%- if tools -%}<|system|>\n# Tools ... "
        "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key>"
        "<arg_value>{arg-value-1}</arg_value>...</tool_call>{%- endif -%}"
        "<|assistant|>";
    T_EQ_INT(le_chat_tools_detect(calls, strlen(calls)), LE_TOOLS_GLM);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_GLM), "glm");
    const char *const *mk = le_chat_tools_markers(LE_TOOLS_GLM);
    T_EQ_STR(mk[0], "<tool_call>");
    T_EQ_STR(mk[5], "</arg_value>");
    T_CHECK(mk[6] == NULL);
    /* Qwen3-Coder's: ChatML with <function= and <parameter= inside
     * <tool_call> (hermes without them) */
    static const char q3c[] =
        "{{- '<|im_start|>' + message.role }}{{- '\\n<tool_call>\\n"
        "<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + "
        "args_name + '>\\n' }}";
    T_EQ_INT(le_chat_detect(q3c, strlen(q3c)), LE_CHAT_CHATML);
    T_EQ_INT(le_chat_tools_detect(q3c, strlen(q3c)), LE_TOOLS_QWEN3_CODER);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_QWEN3_CODER), "qwen3-coder");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_QWEN3_CODER)[0], "<tool_call>");
    /* the same markers in a template of another family */
    T_EQ_INT(le_chat_tools_detect("<|im_start|><tool_call><arg_key>"
                                  "<arg_value>", 43),
             LE_TOOLS_HERMES);
    T_EQ_INT(le_chat_template_from_name("glm4.7"), LE_CHAT_GLM47);
    T_EQ_STR(le_chat_template_name(LE_CHAT_GLM47), "glm4.7");
    T_EQ_INT(le_chat_reasoning(LE_CHAT_GLM47), 5);
    T_EQ_STR(le_chat_reasoning_off(LE_CHAT_GLM47), "");
    /* without "[gMASK]<sop>": zephyr's markers, as before */
    T_EQ_INT(le_chat_detect("<|user|>\n<|assistant|>\n", 21),
             LE_CHAT_ZEPHYR);
    check(LE_CHAT_GLM47, conv, N_CONV, 1,
          "[gMASK]<sop><|system|>You are terse.<|user|>Hi<|assistant|>"
          "</think>Hello.<|user|>2+2?<|assistant|><think>");
    struct le_chat_opts off = {NULL, NULL, NULL, -1};
    check_opts(LE_CHAT_GLM47, conv, N_CONV, 1, &off,
               "[gMASK]<sop><|system|>You are terse.<|user|>Hi<|assistant|>"
               "</think>Hello.<|user|>2+2?<|assistant|></think>");
    /* reasoning dropped before the last user turn, kept after it */
    static const struct le_chat_msg r[] = {
        {"user", "Q"},
        {"assistant", "<think>\nhm\n</think>\n\nFour."},
        {"user", "Q2"},
        {"assistant", "<think>\nmore\n</think>\n\nFive. "}};
    check(LE_CHAT_GLM47, r, 4, 0,
          "[gMASK]<sop><|user|>Q<|assistant|></think>Four.<|user|>Q2"
          "<|assistant|><think>more</think>Five.");
    /* an empty reasoning, results after one <|observation|>, the
     * reasoning before the first </think> after its last <think>, the
     * text after the last </think> */
    static const struct le_chat_msg t[] = {
        {"system", "S"},
        {"user", "Q"},
        {"assistant", "<think>\n</think>\n x "},
        {"tool", "R1"},
        {"tool", "R2"},
        {"assistant", "a<think>\n r \n</think>b</think>\n c "},
        {"system", "S2"}};
    check(LE_CHAT_GLM47, t, 7, 1,
          "[gMASK]<sop><|system|>S<|user|>Q<|assistant|></think>x"
          "<|observation|><tool_response>R1</tool_response><tool_response>"
          "R2</tool_response><|assistant|><think>r</think>c<|system|>S2"
          "<|assistant|><think>");
    static const struct le_chat_msg a[] = {{"assistant", "<think>r</think>z"}};
    check(LE_CHAT_GLM47, a, 1, 0, "[gMASK]<sop><|assistant|><think>r</think>z");
}

/* Qwen3: reasoning dropped up to the last user query, kept after it (a
 * tool loop), as its template; -thinking opens the answer's reasoning */
static void
test_qwen3(void)
{
    check(LE_CHAT_QWEN3, conv, N_CONV, 1,
          "<|im_start|>system\nYou are terse.<|im_end|>\n"
          "<|im_start|>user\nHi<|im_end|>\n"
          "<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    static const struct le_chat_msg r[] = {
        {"user", "Q"},
        {"assistant", "<think>\nold\n</think>\n\nA1"},
        {"user", "Q2"},
        {"assistant", "<think>\n\nwhy\n\n</think>\n\n<tool_call>\nC\n"
                      "</tool_call>"},
        {"user", "<tool_response>\nR\n</tool_response>"},
        {"assistant", "no reasoning"},
        {"user", "<tool_response>\nR2\n</tool_response>"}};
    static const char body[] =
        "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nwhy\n</think>\n\n<tool_call>\nC\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nno reasoning<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nR2\n</tool_response><|im_end|>"
        "\n";
    check(LE_CHAT_QWEN3, r, 7, 0, body);
    char want[1024];
    snprintf(want, sizeof(want), "%s<|im_start|>assistant\n<think>\n", body);
    check(LE_CHAT_QWEN3_THINKING, r, 7, 1, want);
    /* an assistant turn last after the query: its (empty) reasoning block
     * is written, as the template's loop.last case */
    static const struct le_chat_msg l[] = {{"user", "Q"},
                                           {"assistant", "A"}};
    check(LE_CHAT_QWEN3, l, 2, 0,
          "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n"
          "\n</think>\n\nA<|im_end|>\n");
    T_EQ_STR(le_chat_template_name(LE_CHAT_QWEN3_THINKING), "qwen3-thinking");
    T_EQ_INT(le_chat_template_from_name("qwen3"), LE_CHAT_QWEN3);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_QWEN3), 1);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_DEEPSEEK3), 0);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_DEEPSEEK_R1), 1);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_QWEN3_THINKING), 2);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_DEEPSEEK_R1_THINKING), 2);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_CHATML), 0);
    static const struct le_chat_msg q[] = {{"user", "Q"}};
    check(LE_CHAT_DEEPSEEK_R1_THINKING, q, 1, 1,
          "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
          "Assistant\xef\xbd\x9c><think>\n");
}

static void
test_phi3(void)
{
    check(LE_CHAT_PHI3, conv, N_CONV, 1,
          "<|system|>\nYou are terse.<|end|>\n"
          "<|user|>\nHi<|end|>\n"
          "<|assistant|>\nHello.<|end|>\n"
          "<|user|>\n2+2?<|end|>\n"
          "<|assistant|>\n");
}

/* Granite 3.0's template: '<|start_of_role|>' + role + '<|end_of_role|>'
 * + content + '<|end_of_text|>\n' per turn, the generation prompt without
 * a newline */
static void
test_granite(void)
{
    static const char tmpl[] = "{{- '<|start_of_role|>system<|end_of_role|>"
                               "' + message['content'] + "
                               "'<|end_of_text|>\\n' }}";
    T_EQ_INT(le_chat_detect(tmpl, strlen(tmpl)), LE_CHAT_GRANITE);
    T_EQ_INT(le_chat_template_from_name("granite"), LE_CHAT_GRANITE);
    check(LE_CHAT_GRANITE, conv, N_CONV, 1,
          "<|start_of_role|>system<|end_of_role|>You are terse.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>Hello.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>2+2?<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>");
}

/* Granite 4.0's and 4.1's templates: hermes's <tool_call> in Granite's
 * turns; 4.0 writes its default system text when the messages have no
 * system turn (and no tools: then the tools' text is the system turn,
 * which the caller writes), 4.1 none.  Granite 3.x's templates call with
 * a list after <|tool_call|> (granite3). */
static void
test_granite4(void)
{
    static const char g40[] =
        "{%- set tools_system_message_prefix = 'You are a helpful assistant "
        "with access to the following tools. ...' %}{%- set "
        "g4_default_system_message = 'You are a helpful assistant. Please "
        "ensure responses are professional, accurate, and safe.' %}{{- "
        "'<|start_of_role|>system<|end_of_role|>' + ns.system_message + "
        "'<|end_of_text|>\\n' }}{{- '<tool_call>\\n{\"name\": \"' }}";
    static const char g41[] =
        "{%- set tools_system_message_prefix = 'You are a helpful assistant "
        "with access to the following tools. ...' %}{{- "
        "'<|start_of_role|>system<|end_of_role|>' + ns.system_message + "
        "'<|end_of_text|>\\n' }}{{- '<tool_call>\\n{\"name\": \"' }}";
    static const char g33[] =
        "{%- set system_message = system_message + \" You are a helpful "
        "assistant with access to the following tools. When a tool is "
        "required to answer the user's query, respond only with "
        "<|tool_call|> followed by a JSON list of tools used.\" %}{{- "
        "'<|start_of_role|>available_tools<|end_of_role|>' }}";
    T_EQ_INT(le_chat_detect(g40, strlen(g40)), LE_CHAT_GRANITE4);
    T_EQ_INT(le_chat_detect(g41, strlen(g41)), LE_CHAT_GRANITE);
    T_EQ_INT(le_chat_detect(g33, strlen(g33)), LE_CHAT_GRANITE);
    T_EQ_INT(le_chat_tools_detect(g40, strlen(g40)), LE_TOOLS_GRANITE);
    T_EQ_INT(le_chat_tools_detect(g41, strlen(g41)), LE_TOOLS_GRANITE);
    /* 3.x's list after <|tool_call|> (the dated text is 3.3's: below) */
    T_EQ_INT(le_chat_tools_detect(g33, strlen(g33)), LE_TOOLS_GRANITE3);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_GRANITE), "granite");
    T_EQ_INT(le_chat_template_from_name("granite4"), LE_CHAT_GRANITE4);
    T_EQ_STR(le_chat_template_name(LE_CHAT_GRANITE4), "granite4");
    T_EQ_STR(le_chat_default_system(LE_CHAT_GRANITE4),
             "You are a helpful assistant. Please ensure responses are "
             "professional, accurate, and safe.");
    T_CHECK(le_chat_default_system(LE_CHAT_GRANITE) == NULL);
    /* with a system turn: as granite */
    check(LE_CHAT_GRANITE4, conv, N_CONV, 1,
          "<|start_of_role|>system<|end_of_role|>You are terse.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>Hello.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>2+2?<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>");
    /* without one: the default first */
    check(LE_CHAT_GRANITE4, conv + 1, N_CONV - 1, 1,
          "<|start_of_role|>system<|end_of_role|>You are a helpful "
          "assistant. Please ensure responses are professional, accurate, "
          "and safe.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>Hello.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>2+2?<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>");
    check(LE_CHAT_GRANITE, conv + 1, N_CONV - 1, 0,
          "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
          "<|start_of_role|>assistant<|end_of_role|>Hello.<|end_of_text|>\n"
          "<|start_of_role|>user<|end_of_role|>2+2?<|end_of_text|>\n");
}

/* DeepSeek V2's template (V2-Lite-Chat's): plain "User: " and
 * "Assistant: " turns, the system text first as it is */
static void
test_deepseek2(void)
{
    static const char tmpl[] =
        "{{ bos_token }}{% for message in messages %}{% if message['role'] "
        "== 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif "
        "message['role'] == 'assistant' %}{{ 'Assistant: ' + "
        "message['content'] + eos_token }}{% elif message['role'] == "
        "'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor "
        "%}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";
    T_EQ_INT(le_chat_detect(tmpl, strlen(tmpl)), LE_CHAT_DEEPSEEK2);
    T_EQ_INT(le_chat_template_from_name("deepseek2"), LE_CHAT_DEEPSEEK2);
    T_EQ_INT(le_chat_tools_detect(tmpl, strlen(tmpl)), LE_TOOLS_JSON);
    check(LE_CHAT_DEEPSEEK2, conv, N_CONV, 1,
          "You are terse.\n\nUser: Hi\n\nAssistant: Hello."
          "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence"
          "\xef\xbd\x9c>User: 2+2?\n\nAssistant:");
}

/* Granite 3.3's template: its dated default system text when the
 * messages have none (naming the <|tool_call|> format when there are
 * tools), the tools' list in an available_tools turn after the system
 * turn (the granite template lists them there too) */
static void
test_granite33(void)
{
    static const char tmpl[] =
        "{%- set system_message = \"Knowledge Cutoff Date: April 2024. "
        "Today's Date: \" + strftime_now('%B %d, %Y') + \". You are Granite, "
        "developed by IBM.\" %}{{- '<|start_of_role|>available_tools"
        "<|end_of_role|>' }} ... <|tool_call|>";
    T_EQ_INT(le_chat_detect(tmpl, strlen(tmpl)), LE_CHAT_GRANITE33);
    T_EQ_INT(le_chat_tools_detect(tmpl, strlen(tmpl)), LE_TOOLS_GRANITE3);
    T_EQ_STR(le_chat_template_name(LE_CHAT_GRANITE33), "granite3.3");
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_GRANITE3), "granite3");
    T_EQ_STR(le_chat_tools_markers(LE_TOOLS_GRANITE3)[0], "<|tool_call|>");
    struct le_chat_opts o = {NULL, "2026-03-07", NULL, 0};
    check_opts(LE_CHAT_GRANITE33, conv + 1, 2, 1, &o,
               "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff "
               "Date: April 2024. Today's Date: March 07, 2026. You are "
               "Granite, developed by IBM. You are a helpful AI "
               "assistant.<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
               "<|start_of_role|>assistant<|end_of_role|>Hello."
               "<|end_of_text|>\n"
               "<|start_of_role|>assistant<|end_of_role|>");
    o.tools = "[T]";
    check_opts(LE_CHAT_GRANITE33, conv + 1, 1, 1, &o,
               "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff "
               "Date: April 2024. Today's Date: March 07, 2026. You are "
               "Granite, developed by IBM. You are a helpful assistant "
               "with access to the following tools. When a tool is "
               "required to answer the user's query, respond only with "
               "<|tool_call|> followed by a JSON list of tools used. If a "
               "tool does not exist in the provided list of tools, "
               "notify the user that you do not have the ability to "
               "fulfill the request.<|end_of_text|>\n"
               "<|start_of_role|>available_tools<|end_of_role|>[T]"
               "<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
               "<|start_of_role|>assistant<|end_of_role|>");
    /* a system turn of the client's: as it is, the tools after it */
    check_opts(LE_CHAT_GRANITE33, conv, 2, 0, &o,
               "<|start_of_role|>system<|end_of_role|>You are terse."
               "<|end_of_text|>\n"
               "<|start_of_role|>available_tools<|end_of_role|>[T]"
               "<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n");
    /* granite (3.0-3.2): no default text, the tools' turn first */
    check_opts(LE_CHAT_GRANITE, conv + 1, 1, 0, &o,
               "<|start_of_role|>available_tools<|end_of_role|>[T]"
               "<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n");
    /* granite4 takes no tools' turn (its tools are in the system text) */
    char *out = NULL;
    T_EQ_INT(le_chat_apply_opts(LE_CHAT_GRANITE4, conv, 2, 0, &o, &out,
                                NULL),
             LE_OK);
    T_CHECK(out && !strstr(out, "available_tools"));
    free(out);
}

/* gpt-oss's harmony template: its system message with the date and the
 * reasoning level, the first system text as the developer's
 * instructions, the assistant's final channel; detected by its markers */
static void
test_harmony(void)
{
    static const char tmpl[] =
        "{{- \"<|start|>system<|message|>\" }}{%- if add_generation_prompt "
        "-%}<|start|>assistant{%- endif -%}{{- \"<|channel|>final"
        "<|message|>\" + message.content + \"<|end|>\" }}";
    T_EQ_INT(le_chat_detect(tmpl, strlen(tmpl)), LE_CHAT_HARMONY);
    T_EQ_INT(le_chat_template_from_name("harmony"), LE_CHAT_HARMONY);
    T_EQ_INT(le_chat_reasoning(LE_CHAT_HARMONY), 3);
    T_EQ_STR(le_chat_reasoning_off(LE_CHAT_HARMONY),
             "<|channel|>final<|message|>");
    const char *const *mk = le_chat_markers(LE_CHAT_HARMONY);
    int n = 0;
    while (mk[n])
        n++;
    T_EQ_INT(n, 5);
    T_CHECK(le_chat_markers(LE_CHAT_CHATML)[0] == NULL);
#define HARMONY_SYS(date, level)                                             \
    "<|start|>system<|message|>You are ChatGPT, a large language model "      \
    "trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: " date     \
    "\n\nReasoning: " level "\n\n# Valid channels: analysis, commentary, "   \
    "final. Channel must be included for every message.<|end|>"
    struct le_chat_opts o = {"high", "2026-12-05", NULL, 0};
    char *out = NULL;
    T_EQ_INT(le_chat_apply_opts(LE_CHAT_HARMONY, conv, N_CONV, 1, &o, &out,
                                NULL),
             LE_OK);
    T_EQ_STR(out ? out : "",
             HARMONY_SYS("2026-12-05", "high")
             "<|start|>developer<|message|># Instructions\n\nYou are terse."
             "\n\n<|end|>"
             "<|start|>user<|message|>Hi<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
             "<|start|>user<|message|>2+2?<|end|>"
             "<|start|>assistant");
    free(out);
    out = NULL;
    /* no system text: no developer message; the level's default
     * "medium"; today's date (UTC) when none is given */
    T_EQ_INT(le_chat_apply(LE_CHAT_HARMONY, conv + 1, 1, 1, &out, NULL),
             LE_OK);
    char day[2][16], want[2][1024];
    for (int k = 0; k < 2; k++) { /* around a midnight: either day */
        time_t now = time(NULL) - k * 5;
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(day[k], sizeof(day[k]), "%Y-%m-%d", &tm);
        snprintf(want[k], sizeof(want[k]), HARMONY_SYS("%s", "medium"),
                 day[k]);
    }
    T_CHECK(out && (!strncmp(out, want[0], strlen(want[0])) ||
                    !strncmp(out, want[1], strlen(want[1]))));
    T_CHECK(out && strstr(out, "<|end|><|start|>user<|message|>Hi<|end|>"
                               "<|start|>assistant") != NULL);
    T_CHECK(out && !strstr(out, "developer"));
    free(out);
    /* tools: harmony's own format; the namespace in the developer
     * message after the instructions (or on its own), the system line
     * naming the channel, the caller's call and result turns as they are */
    T_EQ_INT(le_chat_tools_detect(tmpl, strlen(tmpl)), LE_TOOLS_HARMONY);
    T_EQ_STR(le_chat_tools_name(LE_TOOLS_HARMONY), "harmony");
    struct le_chat_opts ot = {NULL, "2026-12-05", "NS", 0};
    const struct le_chat_msg turns[] = {
        {"system", "Be brief."},
        {"user", "Hi"},
        {"tool_calls", "<|start|>assistant to=functions.f<|channel|>"
                       "commentary json<|message|>{}<|call|>"},
        {"tool", "<|start|>functions.f to=assistant<|channel|>commentary"
                 "<|message|>\"ok\"<|end|>"}};
    out = NULL;
    T_EQ_INT(le_chat_apply_opts(LE_CHAT_HARMONY, turns, 4, 1, &ot, &out,
                                NULL),
             LE_OK);
    T_EQ_STR(out ? out : "",
             "<|start|>system<|message|>You are ChatGPT, a large language "
             "model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent "
             "date: 2026-12-05\n\nReasoning: medium\n\n# Valid channels: "
             "analysis, commentary, final. Channel must be included for "
             "every message.\nCalls to these tools must go to the "
             "commentary channel: 'functions'.<|end|>"
             "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n"
             "# Tools\n\nNS<|end|>"
             "<|start|>user<|message|>Hi<|end|>"
             "<|start|>assistant to=functions.f<|channel|>commentary json"
             "<|message|>{}<|call|>"
             "<|start|>functions.f to=assistant<|channel|>commentary"
             "<|message|>\"ok\"<|end|>"
             "<|start|>assistant");
    free(out);
    out = NULL;
    T_EQ_INT(le_chat_apply_opts(LE_CHAT_HARMONY, turns + 1, 1, 1, &ot, &out,
                                NULL),
             LE_OK);
    T_CHECK(out && strstr(out, "'functions'.<|end|><|start|>developer"
                               "<|message|># Tools\n\nNS<|end|><|start|>"
                               "user<|message|>Hi<|end|>") != NULL);
    free(out);
#undef HARMONY_SYS
}

/* Phi-4's template: {{'<|im_start|>user<|im_sep|>' + message['content'] +
 * '<|im_end|>'}} per turn, '<|im_start|>assistant<|im_sep|>' to answer;
 * told from ChatML by its separator */
static void
test_phi4(void)
{
#define D(s) le_chat_detect(s, strlen(s))
    T_EQ_INT(D("{% for message in messages %}{% if (message['role'] == "
               "'system') %}{{'<|im_start|>system<|im_sep|>' + "
               "message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}"
               "{% if add_generation_prompt %}{{ "
               "'<|im_start|>assistant<|im_sep|>' }}{% endif %}"),
             LE_CHAT_PHI4);
#undef D
    T_EQ_INT(le_chat_template_from_name("phi4"), LE_CHAT_PHI4);
    check(LE_CHAT_PHI4, conv, N_CONV, 1,
          "<|im_start|>system<|im_sep|>You are terse.<|im_end|>"
          "<|im_start|>user<|im_sep|>Hi<|im_end|>"
          "<|im_start|>assistant<|im_sep|>Hello.<|im_end|>"
          "<|im_start|>user<|im_sep|>2+2?<|im_end|>"
          "<|im_start|>assistant<|im_sep|>");
}

static void
test_gemma(void)
{
    check(LE_CHAT_GEMMA, conv, N_CONV, 1,
          "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
          "<start_of_turn>model\nHello.<end_of_turn>\n"
          "<start_of_turn>user\n2+2?<end_of_turn>\n"
          "<start_of_turn>model\n");
}

static void
test_zephyr(void)
{
    check(LE_CHAT_ZEPHYR, conv, N_CONV, 1,
          "<|system|>\nYou are terse.</s>\n"
          "<|user|>\nHi</s>\n"
          "<|assistant|>\nHello.</s>\n"
          "<|user|>\n2+2?</s>\n"
          "<|assistant|>\n");
}

static void
test_empty_and_bad(void)
{
    check(LE_CHAT_CHATML, NULL, 0, 1, "<|im_start|>assistant\n");
    char *out = NULL;
    T_EQ_INT(le_chat_apply(LE_CHAT_CHATML, NULL, 2, 1, &out, NULL),
             LE_EINVAL);
    T_CHECK(out == NULL);
}

int
main(void)
{
    T_RUN(test_detect);
    T_RUN(test_tools_detect);
    T_RUN(test_chatml);
    T_RUN(test_llama2);
    T_RUN(test_llama3);
    T_RUN(test_mistral);
    T_RUN(test_mistral_versions);
    T_RUN(test_deepseek3);
    T_RUN(test_deepseek_tools);
    T_RUN(test_deepseek31);
    T_RUN(test_glm47);
    T_RUN(test_magistral);
    T_RUN(test_kimi);
    T_RUN(test_default_system);
    T_RUN(test_qwen3);
    T_RUN(test_phi3);
    T_RUN(test_phi4);
    T_RUN(test_granite);
    T_RUN(test_granite4);
    T_RUN(test_granite33);
    T_RUN(test_deepseek2);
    T_RUN(test_harmony);
    T_RUN(test_gemma);
    T_RUN(test_zephyr);
    T_RUN(test_empty_and_bad);
    return T_END();
}
