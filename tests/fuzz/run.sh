#!/bin/sh
# make fuzz: builds every tests/fuzz/fuzz_*.c with clang's libFuzzer plus
# ASan and UBSan, runs each for FUZZ_SECONDS (default 60) on a corpus kept
# in build/fuzz/corpus/NAME (seeded from real files on the first run),
# prints a summary and exits nonzero if any target crashed or would not
# build.  Crash inputs land in build/fuzz/artifacts/NAME/.
#
#   FUZZ_SECONDS=N      seconds per target (default 60)
#   FUZZ_TARGETS="a b"  run only these (names without fuzz_, e.g. gguf)
#   FUZZ_JOBS=N         compile jobs (default 2; this is a 2-core machine)
#
# Which library sources a target links is decided by its name below
# (sources_for); a new target that needs something else adds a line there.
# The engine targets take every local_engine/*.c, the *_avx2.c files with
# the same ISA flags as the Makefile gives them.
set -u
cd "$(dirname "$0")/../.." || exit 2
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
CC=${FUZZ_CC:-clang}
OUT=build/fuzz
: "${LLMUX_TEST_DATA:=$(cd .. && pwd)/shared/data}"
export LLMUX_TEST_DATA
mkdir -p "$OUT/obj" "$OUT/bin" "$OUT/corpus" "$OUT/artifacts" "$OUT/log"

# --- toolchain: clang with the libFuzzer runtime ---------------------------
probe() {
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' >"$OUT/probe.c"
    "$CC" -fsanitize=fuzzer,address,undefined "$OUT/probe.c" -o "$OUT/probe" >/dev/null 2>&1
}
if ! command -v "$CC" >/dev/null || ! probe; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "fuzz: installing clang and its libFuzzer runtime with apt-get"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-dev) >/dev/null 2>&1 ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev >/dev/null 2>&1
    fi
    if ! command -v "$CC" >/dev/null || ! probe; then
        echo "fuzz: clang with libFuzzer is needed; as root run:"
        echo "  apt-get install -y clang libclang-rt-dev   (Debian 12: libclang-rt-14-dev)"
        exit 1
    fi
fi

CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -pthread \
 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
LDFLAGS="-fsanitize=fuzzer,address,undefined -pthread -lm"
AVX2_FLAGS="-mavx2 -mfma -mf16c"
# the Makefile's per-file ISA flags (x86-64 only)
AVX512_FLAGS="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c"
AVXVNNI_FLAGS="-mavx2 -mfma -mf16c -mavxvnni"
AMX_FLAGS="-mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c"
[ "$(uname -m)" = x86_64 ] || { AVX2_FLAGS=; AVX512_FLAGS=; AVXVNNI_FLAGS=; AMX_FLAGS=; }

# sources_for NAME -> library sources; libs_for NAME -> extra link flags
sources_for() {
    case "$1" in
    sse) echo providers/sse.c common/common.c ;;
    json_scan) echo providers/json_scan.c ;;
    chat_request) echo providers/request.c providers/json_scan.c ;;
    responses) echo gateway/responses.c gateway/embeddings.c providers/request.c providers/json_scan.c common/common.c ;;
    scrub) echo providers/scrub.c common/common.c ;;
    json_schema) echo providers/json_schema.c common/common.c local_engine/*.c ;;
    tool_args) echo providers/tool_args.c common/common.c ;;
    config) echo config/*.c pricing/*.c common/*.c ;;
    conn) echo gateway/conn.c common/common.c ;;
    # the translations link the provider layer (loop.c pulls in every kind)
    native) echo providers/*.c config/*.c pricing/*.c common/*.c local_engine/*.c ;;
    messages) echo providers/*.c config/*.c pricing/*.c common/*.c local_engine/*.c ;;
    *) echo local_engine/*.c ;;
    esac
}
libs_for() {
    case "$1" in
    config | json_scan | chat_request | json_schema | tool_args) pkg-config --libs jansson sqlite3 libpq 2>/dev/null || echo "-ljansson -lsqlite3 -lpq" ;;
    responses) pkg-config --libs jansson 2>/dev/null || echo -ljansson ;;
    conn) echo "$(pkg-config --libs libevent 2>/dev/null || echo -levent) -lhttp_parser" ;;
    native | messages) pkg-config --libs libevent libevent_pthreads libcurl jansson sqlite3 libpq 2>/dev/null ;;
    *) echo "" ;;
    esac
}
pkg_cflags_for() {
    case "$1" in
    config | json_scan | chat_request | json_schema | tool_args) pkg-config --cflags jansson sqlite3 libpq 2>/dev/null ;;
    responses) pkg-config --cflags jansson libevent libcurl sqlite3 libpq 2>/dev/null ;;
    # conn.c's framing only (gw_hparse), without the server around it
    conn) echo "$(pkg-config --cflags jansson libevent 2>/dev/null) -DGW_HPARSE_ONLY" ;;
    native | messages) pkg-config --cflags libevent libcurl jansson sqlite3 libpq 2>/dev/null ;;
    *) echo "" ;;
    esac
}

# Object of a library source: rebuilt when the source or any header of the
# tree is newer (headers are few; this keeps the script make-free).
obj_of() { echo "$OUT/obj/$(echo "$1" | tr / _ | sed 's/\.c$/.o/')"; }
NEWEST_H=$(ls -t */*.h tests/lib/*.h 2>/dev/null | head -n 1)
compile() { # src extra-cflags
    o=$(obj_of "$1")
    if [ -f "$o" ] && [ "$o" -nt "$1" ] && { [ -z "$NEWEST_H" ] || [ "$o" -nt "$NEWEST_H" ]; }; then
        return 0
    fi
    case "$1" in
    *_avx2.c) isa=$AVX2_FLAGS ;;
    *_avx512.c) isa=$AVX512_FLAGS ;;
    *_avxvnni.c) isa=$AVXVNNI_FLAGS ;;
    local_engine/*_amx.c) isa=$AMX_FLAGS ;;
    *) isa= ;;
    esac
    # shellcheck disable=SC2086
    "$CC" $CFLAGS $isa $2 -c "$1" -o "$o" 2>"$o.err" || { cat "$o.err"; return 1; }
}

# --- seeds (first run only: the corpus then grows by itself) --------------
seed_gguf() { # dir
    gen=build/release/tests/tool_gguf_gen
    [ -x "$gen" ] || make -s "$gen" >/dev/null 2>&1
    if [ -x "$gen" ]; then
        # small files mutate fast: K-quants need rows of 256, others 32
        for t in f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k mxfp4; do
            case $t in *_k) e=256 ;; *) e=32 ;; esac
            "$gen" --out "$1/tiny_$t.gguf" --type "$t" --n-embd $e --n-layer 1 \
                --n-head 4 --n-head-kv 2 --n-ff $e --n-vocab 259 --seed 1 >/dev/null 2>&1
        done
        # the other layouts: experts (Mixtral's, qwen3moe, qwen2moe's
        # shared one, granitemoe's multipliers, gpt-oss's biases and sinks
        # with MXFP4 experts, deepseek2's), phi3's fused weights and
        # LongRoPE, YaRN
        c="--type q8_0 --n-embd 32 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 64 --n-vocab 259"
        "$gen" --out "$1/tiny_mix.gguf" $c --experts 4,2 >/dev/null 2>&1
        "$gen" --out "$1/tiny_q3m.gguf" $c --arch qwen3moe --experts 4,2 \
            --n-ff-exp 32 >/dev/null 2>&1
        "$gen" --out "$1/tiny_q2m.gguf" $c --arch qwen2moe --experts 4,2 \
            --n-ff-exp 32 --n-ff-shexp 64 >/dev/null 2>&1
        "$gen" --out "$1/tiny_gran.gguf" $c --arch granitemoe --experts 4,2 >/dev/null 2>&1
        "$gen" --out "$1/tiny_phi3.gguf" $c --arch phi3 --sliding-window 4 \
            --longrope 16,1.2 >/dev/null 2>&1
        "$gen" --out "$1/tiny_yarn.gguf" $c --yarn 4,16 >/dev/null 2>&1
        "$gen" --out "$1/tiny_oss.gguf" $c --arch gpt-oss --experts 4,2 \
            --exp-type mxfp4 --sliding-window 4 --yarn 4,16 >/dev/null 2>&1
        # deepseek2 in both attention layouts (latent attention, a dense
        # first layer, V3's sigmoid router with its bias, YaRN)
        "$gen" --out "$1/tiny_ds.gguf" $c --arch deepseek2 --experts 4,2 \
            --n-layer 2 --n-ff-exp 32 --kv-lora 32 --q-lora 32 \
            --ds-heads 16,8,16 --dense-lead 1 >/dev/null 2>&1
        "$gen" --out "$1/tiny_ds3.gguf" $c --arch deepseek2 --experts 4,2 \
            --n-layer 2 --n-ff-exp 32 --kv-lora 32 --ds-heads 16,8,16 \
            --dense-lead 1 --ds-mla --ds-gating sigmoid --ds-probs-b \
            --ds-wnorm --ds-wscale 2.5 --yarn 4,16 --yarn-log-mul 0.07 \
            >/dev/null 2>&1
    fi
    # (no real vocabulary file: at 700 KB each run parses 32000 strings and
    # the fuzzer manages a few runs a second; the tokenizer target covers them)
}
seed_tokenizer() { # dir: each test string of the shared .inp, for each vocab
    inp="$LLMUX_TEST_DATA/tokenizer/ggml-vocab-gpt-2.gguf.inp"
    [ -f "$inp" ] || return 0
    awk -v dir="$1" 'BEGIN { RS = "\n__ggml_vocab_test__\n"; ORS = "" }
        { f = sprintf("%s/str_%03d", dir, NR); printf "%s", $0 > f; close(f) }' "$inp"
    for s in "$1"/str_*; do
        for k in 0 1 2 3 4 5 6; do
            # byte 0: vocab k with parse_special (64); add_special for some
            b=$((k + 64 + (k % 2) * 128))
            { printf "\\$(printf '%03o' "$b")"; cat "$s"; } >"$s.v$k"
        done
        rm -f "$s"
    done
    printf '\100<s>Hello <|endoftext|> world</s>' >"$1/special"
}
seed_config() {
    for f in config/*.json; do [ -f "$f" ] && cp "$f" "$1/"; done
    printf '{"listen":"127.0.0.1:0","providers":{}}' >"$1/min.json"
}
seed_json_scan() {
    printf '{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \\u00e9\\ud83d\\ude00 \303\251"},"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":7}}}' >"$1/chat"
    printf '{"choices":[{"logprobs":{"content":[{"logprob":-0.3132,"bytes":[72,105]}]}}],"x":[1.5e3,-2E-7,0,true,false,null,{},[]],"usage":{"prompt_tokens":1.9e1,"completion_tokens":9223372036854775807}}' >"$1/nums"
    printf '{"usage":{"prompt_tokens":5},"usage":null,"choices":7}' >"$1/dup"
    printf '{"error":{"message":"bad","type":"x"}}' >"$1/error"
    # Messages shapes for the passthrough's member scanner
    printf '{ "id" : "msg_1",\n\t"type":"message","content":[{"type":"thinking","thinking":"Caf\\u00e9 \\/","signature":"Eq+/=="},{"type":"redacted_thinking","data":"RWFy"}],"mod\\u0065l" :  "claude-up" ,"usage":{"output_tokens":3,"cache_read_input_tokens":2},"model":"b"}' >"$1/msgs_answer"
    printf '{"type": "message_start", "message": {"id":"m", "model":"claude-up","usage":{"input_tokens":5}},"message":{"model":1.0e2}}' >"$1/msgs_start"
}
seed_conn() { # byte 0: read size, byte 1: body cap / 64, then the stream
    printf '\000\020GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >"$1/get"
    printf '\003\020POST /v1/chat/completions?a=b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n' >"$1/pipelined"
    printf '\007\002POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nTrailer: t\r\n\r\nHEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' >"$1/chunked"
    printf '\001\001POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab' >"$1/two_cl"
    printf '\000\001POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n' >"$1/te"
}
seed_chat_request() {
    printf '{"model":"gpt-4.1","messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"n":2,"stream":true,"stream_options":{"include_usage":true}}' >"$1/ok"
    printf '{"model":"m","messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":1000000,"max_tokens":null,"temperature":0.5,"seed":-3}' >"$1/parts"
    printf '{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0,"stream_options":{"include_usage":"yes"}}' >"$1/bad"
}
seed_scrub() {
    printf '{"error":{"message":"Incorrect API key provided: sk-proj-ABCdef0123456789xy"}}' >"$1/prefix"
    printf '{"m":"\\u0073k-proj-ABCdef0123456789xyzXYZ a\\/b"}' >"$1/escaped"
    printf 'Authorization: Basic Ym9iOnBAc3Mtd29yZC0xMjM0NTY=; api-key: aGRyLXRvay0wMTIzNDU2Nzg5YWJjZGVm' >"$1/b64"
    printf '{"c":"\\\\x73\\\\x6B\\\\X2d\\\\x70\\\\x72\\\\x6f\\\\x6a\\\\x2d\\\\x41"}' >"$1/hexesc"
    printf 'char k[] = {0x73, 0x6b,0x2d, 0X70, 0x72, 0x6f, 0x6a, 0x2d, 0x41, 0x42};' >"$1/bytelist"
}
seed_grammar() { # grammar text, NUL, input
    printf 'root ::= "{" ws ( k ws ":" ws v ( "," ws k ws ":" ws v )* )? "}"\nk ::= "\\"" [a-z]{1,3} "\\""\nv ::= "true" | [0-9]+ | root\nws ::= [ ]?\n\000{"ab": {"c":12}}' >"$1/json"
    printf 'root ::= x{2,5} ( "a" | %%free )\nx ::= [^a-c]\n\000zzzzq hello' >"$1/free"
    printf 'root ::= root "a" | "b"\n\000ba' >"$1/leftrec"
}
seed_json_schema() {
    printf '{"type":"object","properties":{"a":{"type":"string","maxLength":5},"b":{"enum":[1,"x",null]},"c":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["a"],"additionalProperties":false,"$defs":{"n":{"anyOf":[{"type":"integer"},{"type":["boolean","null"]}]}}}' >"$1/obj"
    printf '{"type":"string","pattern":"x"}' >"$1/refused"
}
seed_tool_args() {
    printf '\000<arg_key>s</arg_key><arg_value>a "q" </arg_va <b></arg_value><arg_key>n</arg_key><arg_value>[1, {"a": "</arg_value>"}]</arg_value><arg_key>x</arg_key><arg_value>7</arg_value></tool_call>' >"$1/pairs"
    printf '\000</tool_call>' >"$1/empty"
    printf '\001<parameter=s>\nline\n\n</param\n</parameter>\n<parameter=n>\n{"a": [1]}\n</parameter>\n</function>' >"$1/qwen"
}
seed_chat_template() { # template texts (the lines that tell each kind)
    printf "{%%- set default_system_message = 'Think [THINK]x[/THINK].' %%}{{- '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' }}{%%- set t = '[AVAILABLE_TOOLS]' %%}{%%- for message in loop_messages %%}{{- '[INST]' + c + '[/INST]' }}[TOOL_CALLS] [ARGS]" >"$1/magistral"
    printf "{{- '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + c + '[/INST]' }}{{- '[THINK]' + b + '[/THINK]' }}" >"$1/nodefault"
    printf '<|im_system|>tool_declare<|im_middle|>{{ tools }}<|im_end|><|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|><|tool_calls_section_begin|><|tool_call_argument_begin|>' >"$1/kimi"
    printf "{%%- set today = strftime_now(\"%%Y-%%m-%%d\") %%}{%%- set default_system_message = \"Today is \" + today + \".\" %%}[SYSTEM_PROMPT] '[INST]' [TOOL_CALLS] [CALL_ID] [ARGS] [AVAILABLE_TOOLS]" >"$1/m32"
    printf "[gMASK]<sop><|assistant|><tool_call><arg_key><arg_value>" >"$1/glm"
    printf "<|im_start|>assistant\\n<think>\\n' <tool_call> <function= <parameter=" >"$1/qwen"
    printf "<\357\275\234User\357\275\234><\357\275\234Assistant\357\275\234></think>'" >"$1/ds31"
}
seed_native() {
    printf '\000{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required","stop":["x"]}' >"$1/request"
    printf '\001{"type":"message","id":"m","model":"c","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"cache_creation_input_tokens":2,"cache_read_input_tokens":1,"output_tokens":4}}' >"$1/anth_answer"
    printf '\002{"candidates":[{"content":{"parts":[{"text":"t","thought":true},{"text":"x"},{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"cachedContentTokenCount":1,"thoughtsTokenCount":3}}' >"$1/gem_answer"
    printf '\003message_start {"type":"message_start","message":{"id":"m","usage":{"input_tokens":2}}}\ncontent_block_start {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f"}}\ncontent_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}\nmessage_delta {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}\nmessage_stop {"type":"message_stop"}' >"$1/anth_stream"
    printf '\004{"candidates":[{"content":{"parts":[{"text":"a"}]}}]}\n{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f"}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}' >"$1/gem_stream"
    printf '\005{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}' >"$1/error"
}
seed_responses() { # byte 0: what (see the target), byte 1: flags
    printf '\000\000{"model":"m","instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"data:,"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"},{"type":"reasoning"}],"tools":[{"type":"function","name":"f","parameters":{},"strict":true}],"tool_choice":{"type":"function","name":"f"},"text":{"format":{"type":"json_schema","name":"s","schema":{}}},"max_output_tokens":9,"stream":true,"metadata":{"a":"b"}}' >"$1/request"
    printf '\000\000{"model":"m","input":"x","previous_response_id":"r"}' >"$1/stateful"
    printf '\001\000{"model":"u","choices":[{"message":{"content":"hi","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"length"}]}' >"$1/answer"
    printf '\002\000{"model":"u","choices":[{"delta":{"content":"a"}}]}\n{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}\n{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]},"finish_reason":"tool_calls"}]}' >"$1/stream"
    printf '\003\000{"model":"e","input":[[1,2],"ab"]}' >"$1/embeddings"
    printf '\004\000{"model":"c","prompt":["a"],"max_tokens":3,"best_of":2,"stream":true}' >"$1/completions"
}
seed_messages() {
    printf '\000{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}],"is_error":true}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},"stop_sequences":["x"],"thinking":{"type":"enabled","budget_tokens":1024}}' >"$1/request"
    printf '\001{"id":"c","choices":[{"message":{"role":"assistant","content":"hi","reasoning_content":"r","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\\"a\\":1}"}}]},"finish_reason":"tool_calls"}]}' >"$1/answer"
    printf '\002{"choices":[{"delta":{"content":"a"}}]}\n{"choices":[{"delta":{"reasoning_content":"b"}}]}\n{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}\n{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}\n[DONE]' >"$1/chunks"
    printf '\003{"type":"message_start","message":{"model":"x"}}\n{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}\n{"type":"message_stop"}' >"$1/pass"
    printf '\004{"error":{"message":"m","code":"insufficient_quota"}}' >"$1/error"
}
seed_sse() {
    printf '\005data: {"a":1}\r\n\r\nevent: x\ndata: y\n\n: c\n\n' >"$1/basic"
    printf '\003data: [DONE]\n\n' >"$1/done"
}

# --- build and run ---------------------------------------------------------
targets=""
for f in tests/fuzz/fuzz_*.c; do
    n=$(basename "$f" .c); n=${n#fuzz_}
    if [ -n "${FUZZ_TARGETS:-}" ]; then
        case " $FUZZ_TARGETS " in *" $n "*) ;; *) continue ;; esac
    fi
    targets="$targets $n"
done
[ -n "$targets" ] || { echo "fuzz: no targets"; exit 2; }

failed=0
summary=""
for n in $targets; do
    bin="$OUT/bin/fuzz_$n"
    pc=$(pkg_cflags_for "$n")
    objs=""; ok=1
    srcs=$(sources_for "$n")
    # two compiles at a time at most
    set -- $srcs
    while [ $# -gt 0 ]; do
        pids=""; i=0
        while [ $# -gt 0 ] && [ $i -lt "$JOBS" ]; do
            compile "$1" "$pc" & pids="$pids $!"; objs="$objs $(obj_of "$1")"
            shift; i=$((i + 1))
        done
        for p in $pids; do wait "$p" || ok=0; done
    done
    if [ $ok = 1 ]; then
        # shellcheck disable=SC2086
        "$CC" $CFLAGS $pc "tests/fuzz/fuzz_$n.c" $objs $LDFLAGS $(libs_for "$n") -o "$bin" \
            2>"$OUT/log/$n.build" || ok=0
    fi
    if [ $ok = 0 ]; then
        echo "== fuzz_$n: BUILD FAILED"; tail -n 20 "$OUT/log/$n.build" 2>/dev/null
        summary="$summary
fuzz_$n: build failed"
        failed=$((failed + 1)); continue
    fi
    corpus="$OUT/corpus/$n"
    if [ ! -d "$corpus" ]; then
        mkdir -p "$corpus"
        case "$n" in
        gguf | model) seed_gguf "$corpus" ;;
        tokenizer) seed_tokenizer "$corpus" ;;
        config) seed_config "$corpus" ;;
        sse) seed_sse "$corpus" ;;
        conn) seed_conn "$corpus" ;;
        json_scan) seed_json_scan "$corpus" ;;
        chat_request) seed_chat_request "$corpus" ;;
        scrub) seed_scrub "$corpus" ;;
        grammar) seed_grammar "$corpus" ;;
        json_schema) seed_json_schema "$corpus" ;;
        tool_args) seed_tool_args "$corpus" ;;
        chat_template) seed_chat_template "$corpus" ;;
        native) seed_native "$corpus" ;;
        responses) seed_responses "$corpus" ;;
        messages) seed_messages "$corpus" ;;
        esac
    fi
    art="$OUT/artifacts/$n/"
    mkdir -p "$art"
    echo "== fuzz_$n: ${SECS}s"
    log="$OUT/log/$n.log"
    "$bin" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=3072 \
        -print_final_stats=1 -artifact_prefix="$art" "$corpus" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | sed 's/cov: //')
    ncorp=$(ls "$corpus" | wc -l)
    if [ $rc = 0 ]; then
        line="fuzz_$n: ok, ${execs:-?} runs, cov ${cov:-?}, corpus $ncorp"
    else
        crash=$(ls -t "$art" 2>/dev/null | head -n 1)
        line="fuzz_$n: CRASH (exit $rc), input $art$crash"
        failed=$((failed + 1))
        grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$log" | head -n 25
    fi
    echo "   $line"
    summary="$summary
$line"
done
echo
echo "fuzz summary (${SECS}s each):$summary"
[ $failed = 0 ] || { echo "fuzz: $failed target(s) failed; logs in $OUT/log/"; exit 1; }
exit 0
