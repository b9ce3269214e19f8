/*
 * The official openai npm SDK (tests/clients/local_sdk.mjs) against the
 * real llmux binary serving the local engine only: stories260K and a
 * random-weight model written here, also with chat templates of the hermes,
 * llama3 and mistral tool formats.  What an app that fails over to the
 * local engine relies on, checked by the client people use: tool calls
 * (required; named, streamed) that match the function's schema,
 * response_format json_schema, four concurrent streams, greedy output the
 * same batched as alone, n = 3, the prefix cache's cached_tokens, and
 * n = 3 streamed (greedy equal to n = 1, seeded different, the usage
 * chunk summing the choices), n = 2 with tools streamed, and
 * logprobs / top_logprobs / n = 9 refused as BadRequestError naming
 * the parameter; and a gpt-oss model (MXFP4 experts, harmony's template
 * and its markers as control tokens, as o200k_harmony has them): tool
 * calls in harmony's format, reasoning_effort, a call and its result
 * sent back, a result without a call refused.  Without node or the installed clients it skips, and
 * fails when LLMUX_REQUIRE_CLIENTS is set (CI).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

static struct e2e_proc gw;

int
main(void)
{
    char model[1024], cfg[12288], rand_model[600], herm_model[600],
        l3_model[600], mis_model[600], q3t_model[600], oss_model[600],
        gran_model[600], g33_model[600], ds_model[600], d31_model[600],
        glm_model[600], q3c_model[600], m32_model[600], mag_model[600],
        kimi_model[600];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(rand_model, sizeof(rand_model), "%s/random.gguf",
             dir ? dir : "/tmp");
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 500;
    lp.n_embd = 32;
    lp.n_layer = 1;
    lp.n_head = 2;
    lp.n_head_kv = 2;
    lp.n_ff = 64;
    lp.n_ctx = 2048;
    lp.type = LE_TYPE_Q8_0;
    lp.seed = 777;
    const struct gguf_w_llama base = lp; /* the shape the others share */
    T_EQ_INT(gguf_w_llama_write(&lp, rand_model), 0);
    /* the same with chat templates whose markers choose the hermes
     * (Qwen2.5) and llama3 (3.1+) tool formats */
    snprintf(herm_model, sizeof(herm_model), "%s/herm.gguf",
             dir ? dir : "/tmp");
    snprintf(l3_model, sizeof(l3_model), "%s/l3.gguf", dir ? dir : "/tmp");
    lp.chat_template = "{{'<|im_start|>' + m.role}} ... '<tool_call>\\n'";
    T_EQ_INT(gguf_w_llama_write(&lp, herm_model), 0);
    lp.chat_template = "<|start_header_id|>{{ role }}<|end_header_id|> "
                       "ipython ... \"parameters\": dictionary of argument "
                       "name and its value";
    T_EQ_INT(gguf_w_llama_write(&lp, l3_model), 0);
    /* and mistral's (7B v0.3), its markers control tokens */
    static const char *const mis_controls[] = {
        "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", NULL};
    snprintf(mis_model, sizeof(mis_model), "%s/mis.gguf", dir ? dir : "/tmp");
    lp.chat_template = "[INST] ... [AVAILABLE_TOOLS] [ ... [TOOL_CALLS] [";
    lp.controls = mis_controls;
    T_EQ_INT(gguf_w_llama_write(&lp, mis_model), 0);
    /* Mistral Small 3.2's (calls with ids: [CALL_ID]) */
    static const char *const m32_controls[] = {
        "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
        "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]",
        "[TOOL_CONTENT]", NULL};
    snprintf(m32_model, sizeof(m32_model), "%s/m32.gguf", dir ? dir : "/tmp");
    lp.chat_template = "'[SYSTEM_PROMPT]' + system_prompt ... '[INST]' ... "
                       "'[AVAILABLE_TOOLS]' ... '[TOOL_CALLS]' + name ... "
                       "'[CALL_ID]' + tool_call.id ... '[ARGS]' + args";
    lp.controls = m32_controls;
    T_EQ_INT(gguf_w_llama_write(&lp, m32_model), 0);
    /* Ministral 3 Reasoning's (magistral: a default system text asking
     * for [THINK] reasoning, the tools before the messages' loop);
     * [THINK] and [/THINK] control tokens, ids 498 and 499 */
    static const char *const mag_controls[] = {
        "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
        "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[THINK]",
        "[/THINK]", NULL};
    snprintf(mag_model, sizeof(mag_model), "%s/mag.gguf", dir ? dir : "/tmp");
    lp.chat_template =
        "{%- set default_system_message = 'Draft your thinking [THINK]like "
        "this[/THINK], then answer.' %}'[SYSTEM_PROMPT]' ... {%- set "
        "tools_definition = '[AVAILABLE_TOOLS]' + (tools| tojson) %} {%- for "
        "message in loop_messages %}'[INST]' ... '[TOOL_CALLS]' ... name + "
        "'[ARGS]' + arguments";
    lp.controls = mag_controls;
    T_EQ_INT(gguf_w_llama_write(&lp, mag_model), 0);
    /* Kimi K2's (kimi: its turns, the tools declared first, calls
     * functions.NAME:N between its markers, control tokens) */
    static const char *const kimi_controls[] = {
        "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
        "<|im_end|>", "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", NULL};
    snprintf(kimi_model, sizeof(kimi_model), "%s/kimi.gguf",
             dir ? dir : "/tmp");
    lp.chat_template =
        "<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}"
        "<|im_end|> <|im_system|>system<|im_middle|>You are Kimi."
        "<|im_end|> <|im_user|>{{role_name}}<|im_middle|> "
        "<|tool_calls_section_begin|><|tool_call_begin|>{{ formatted_id }}"
        "<|tool_call_argument_begin|> <|tool_call_end|>";
    lp.controls = kimi_controls;
    T_EQ_INT(gguf_w_llama_write(&lp, kimi_model), 0);
    /* a qwen3 reasoning model (Thinking-2507's template), "<think>" and
     * "</think>" user-defined tokens (ids 498, 499) as in Qwen3's */
    static const char *const think_toks[] = {"<think>", "</think>", NULL};
    snprintf(q3t_model, sizeof(q3t_model), "%s/q3t.gguf", dir ? dir : "/tmp");
    lp.chat_template = "last_query_index <|im_start|> <think> "
                       "'<|im_start|>assistant\\n<think>\\n'";
    lp.controls = NULL;
    lp.user_tokens = think_toks;
    lp.arch = "qwen3";
    T_EQ_INT(gguf_w_llama_write(&lp, q3t_model), 0);
    static const char *const oss_controls[] = {
        "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
        "<|constrain|>", "<|return|>", "<|call|>", NULL};
    snprintf(oss_model, sizeof(oss_model), "%s/oss.gguf", dir ? dir : "/tmp");
    lp.chat_template = "<|start|>assistant<|channel|>final<|message|>";
    lp.user_tokens = NULL;
    lp.controls = oss_controls;
    lp.arch = "gpt-oss";
    lp.n_expert = 4;
    lp.n_expert_used = 2;
    lp.exp_type = LE_TYPE_MXFP4;
    lp.exp_typed = 1;
    lp.n_swa = 8;
    T_EQ_INT(gguf_w_llama_write(&lp, oss_model), 0);
    /* Granite 4's and 3.3's templates (granite and granite3 tool
     * formats, their markers control tokens), and a deepseek2 model with
     * DeepSeek V2's template */
    struct gguf_w_llama lg = base;
    lg.seed = 778;
    static const char *const gran_controls[] = {
        "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>",
        "<tool_call>", "</tool_call>", "<|tool_call|>", NULL};
    lg.controls = gran_controls;
    snprintf(gran_model, sizeof(gran_model), "%s/gran.gguf",
             dir ? dir : "/tmp");
    lg.chat_template = "'<|start_of_role|>system<|end_of_role|>' ... 'You "
                       "are a helpful assistant. Please ensure responses "
                       "are professional, accurate, and safe.' ... "
                       "'<tool_call>\\n{\"name\": \"'";
    T_EQ_INT(gguf_w_llama_write(&lg, gran_model), 0);
    snprintf(g33_model, sizeof(g33_model), "%s/g33.gguf", dir ? dir : "/tmp");
    lg.chat_template = "\"Knowledge Cutoff Date: April 2024. Today's Date: "
                       "\" ... '<|start_of_role|>available_tools"
                       "<|end_of_role|>' ... <|tool_call|>";
    T_EQ_INT(gguf_w_llama_write(&lg, g33_model), 0);
    snprintf(ds_model, sizeof(ds_model), "%s/ds.gguf", dir ? dir : "/tmp");
    lg.controls = NULL;
    lg.chat_template = "{{ 'Assistant: ' + message['content'] + eos_token }}";
    lg.arch = "deepseek2";
    lg.n_layer = 2;
    lg.n_expert = 4;
    lg.n_expert_used = 2;
    lg.n_ff_exp = 32;
    lg.kv_lora = 32;
    lg.ds_nope = 16;
    lg.ds_rope = 8;
    lg.ds_v = 16;
    lg.n_dense_lead = 1;
    lg.ds_mla = 1;
    T_EQ_INT(gguf_w_llama_write(&lg, ds_model), 0);
    /* DeepSeek V3.1's template (its tool format) on the same network,
     * the markers control tokens */
    static const char *const ds_controls[] = {
        "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", NULL};
    snprintf(d31_model, sizeof(d31_model), "%s/d31.gguf", dir ? dir : "/tmp");
    lg.controls = ds_controls;
    lg.chat_template =
        "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜></think>'}}"
        "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']"
        "['name'] + '<｜tool▁sep｜>' + tool['function']['arguments']}}";
    T_EQ_INT(gguf_w_llama_write(&lg, d31_model), 0);
    /* GLM-4.7-Flash's template (XML calls) on the same network */
    static const char *const glm_controls[] = {
        "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
        "<|observation|>", "<tool_call>", "</tool_call>", "<arg_key>",
        "</arg_key>", "<arg_value>", "</arg_value>", NULL};
    snprintf(glm_model, sizeof(glm_model), "%s/glm.gguf", dir ? dir : "/tmp");
    lg.controls = glm_controls;
    lg.chat_template =
        "[gMASK]<sop>{%- if tools -%}<|system|>\n# Tools ... <tool_call>"
        "{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>"
        "{arg-value-1}</arg_value>...</tool_call>{%- endif -%}<|assistant|>";
    T_EQ_INT(gguf_w_llama_write(&lg, glm_model), 0);
    /* Qwen3-Coder's template (XML calls in <tool_call>), no control
     * tokens: the tags spelled out */
    snprintf(q3c_model, sizeof(q3c_model), "%s/q3c.gguf", dir ? dir : "/tmp");
    lg.controls = NULL;
    lg.chat_template =
        "<|im_start|>system\\nYou are Qwen ... '\\n<tool_call>\\n"
        "<function=' + tool_call.name + '>\\n' ... '<parameter=' + "
        "args_name + '>\\n'";
    T_EQ_INT(gguf_w_llama_write(&lg, q3c_model), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 4},\n"
             "  \"rand\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 2,\n"
             "   \"models\": {\"rand\": {}}},\n"
             "  \"herm\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"herm\": {}}},\n"
             "  \"l3\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"l3\": {}}},\n"
             "  \"mis\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"mis\": {}}},\n"
             "  \"q3t\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 1024, \"parallel\": 2,\n"
             "   \"models\": {\"q3t\": {}}},\n"
             "  \"oss\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"oss\": {}}},\n"
             "  \"gran\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"gran\": {}}},\n"
             "  \"g33\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"g33\": {}}},\n"
             "  \"ds\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"ds\": {}}},\n"
             "  \"d31\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"d31\": {}}},\n"
             "  \"glm\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"glm\": {}}},\n"
             "  \"q3c\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"q3c\": {}}},\n"
             "  \"m32\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"m32\": {}}},\n"
             "  \"mag\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"mag\": {}}},\n"
             "  \"kimi\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 2,\n"
             "   \"models\": {\"kimi\": {}}}}}\n",
             dir ? dir : "/tmp", model, rand_model, herm_model, l3_model,
             mis_model, q3t_model, oss_model, gran_model, g33_model,
             ds_model, d31_model, glm_model, q3c_model, m32_model,
             mag_model, kimi_model);
    char *path = e2e_write_temp("sdk_local.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    if (!path ||
        e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000) != 0) {
        fprintf(stderr, "llmux did not start\n");
        return 1;
    }
    char env_url[300];
    snprintf(env_url, sizeof(env_url), "LLMUX_URL=http://127.0.0.1:%d/v1",
             gw.port);
    const char *env[] = {env_url, NULL};
    char *out = NULL;
    int rc = e2e_node("local_sdk.mjs", env, 400, &out);
    if (rc == E2E_NO_CLIENTS) {
        printf("skip: node or tests/clients not installed (make clients)\n");
        T_CHECK(!getenv("LLMUX_REQUIRE_CLIENTS"));
    } else {
        if (rc != 0 || !out || !strstr(out, "all checks passed"))
            fprintf(stderr, "%s\n", out ? out : "(no output)");
        T_EQ_INT(rc, 0);
        T_CHECK(out && strstr(out, "all checks passed"));
    }
    free(out);
    T_EQ_INT(e2e_stop(&gw, 15, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(path);
    free(dir);
    return T_END();
}
