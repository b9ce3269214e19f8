#!/bin/sh
# Where the gateway's time goes: llmux (1 worker, ledger on a file) under
# callgrind while wrk sends non-stream chats through it to the fake
# provider for PROFILE_SECONDS.  callgrind counts instructions, so the
# split is repeatable whatever else the machine does.  Writes
# bench/out/profile.md.
set -u
BUILD=${1:-build/release}
SECS=${PROFILE_SECONDS:-10}
TMP=$(mktemp -d /tmp/llmux-prof-XXXXXX)
OUT=bench/out/profile.md
mkdir -p bench/out
command -v valgrind >/dev/null || { echo "profile needs valgrind"; exit 0; }
"$BUILD/tests/fake_provider" --port 0 --max-seconds 300 >"$TMP/fake.out" 2>/dev/null &
FAKE=$!
i=0; while [ $i -lt 50 ] && ! grep -q PORT "$TMP/fake.out" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
FP=$(sed -n 's/PORT //p' "$TMP/fake.out")
cat >"$TMP/c.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/ledger.db","require_keys":false,
 "providers":{"p1":{"kind":"openai","base_url":"http://127.0.0.1:$FP/v1","api_key":"sk-x","models":{"gpt-4.1":{}}}}}
JSON
valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$BUILD/llmux" serve --config "$TMP/c.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW=$!
i=0; while [ $i -lt 300 ] && ! grep -q listening "$TMP/gw.out"; do sleep 0.1; i=$((i+1)); done
PORT=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$TMP/gw.out" | head -n 1)
BENCH_MODEL=gpt-4.1 wrk -t1 -c4 -d"${SECS}s" -s bench/chat.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
N=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
kill -TERM "$GW"; wait "$GW" 2>/dev/null
kill "$FAKE" 2>/dev/null
TOTAL=$(callgrind_annotate "$TMP/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
{
echo "## Where the gateway's time goes (callgrind)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); llmux serve with 1 worker under \`valgrind --tool=callgrind\`, $N non-stream requests (wrk -c4, ${SECS}s) to the fake provider, ledger on a file; instructions include start-up and shutdown."
echo "- total: $TOTAL instructions, about $(awk -v t="$TOTAL" -v n="$N" 'BEGIN { if (n > 0) printf "%.0f", t / n; else print "?" }') per request."
echo
echo "Inclusive cost of the main parts (share of all instructions):"
echo
echo '```'
callgrind_annotate --inclusive=yes "$TMP/cg.out" 2>/dev/null | grep -E "writer_main|worker_main|gw_chat_handle|complete_reply|gw_chat_run_done|start_attempt|pv_call_start|oa_on_finish|oa_start|json_loadb|json_dumps|curl_multi_socket_action|evhttp_send_reply|write_batch_once|cells_write|sqlite3_step|rt_plan_route|gw_chat_admit|pr_ledger_submit" | grep -E '%\)  [^ ]+:[A-Za-z_][A-Za-z0-9_.]*( \[|$)' | grep -v '^ *[0-9,]* ([ 0-9.]*%)  /' | head -30
echo '```'
echo
echo "Top functions by own cost:"
echo
echo '```'
callgrind_annotate "$TMP/cg.out" 2>/dev/null | sed -n '/file:function/,$p' | sed -n '2,21p'
echo '```'
} >"$OUT"
rm -rf "$TMP"
echo "wrote $OUT"
