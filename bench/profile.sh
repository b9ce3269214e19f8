#!/bin/sh
# Where the gateway's time goes: llmux (1 worker, ledger on a file) under
# callgrind while wrk sends chats through it for PROFILE_SECONDS to a fast
# upstream (nginx `return 200` with a fixed chat.completion, or with
# PROFILE_STREAM=1 a fixed 6-chunk SSE stream with usage); with
# PROFILE_UPSTREAM=fake to tests/fake_provider instead.  callgrind counts
# instructions, so the per-request figure is repeatable whatever else the
# machine does.  Writes bench/out/profile.md (PROFILE_OUT to change).
set -u
BUILD=${1:-build/release}
SECS=${PROFILE_SECONDS:-10}
TMP=$(mktemp -d /tmp/llmux-prof-XXXXXX)
OUT=${PROFILE_OUT:-bench/out/profile.md}
UPSTREAM=${PROFILE_UPSTREAM:-fast}
STREAM=${PROFILE_STREAM:-0}
# wrk connections: 4 by default; 1 makes every request meet an idle loop,
# so small A/B differences are not hidden by how requests batch.
CONNS=${PROFILE_CONNECTIONS:-4}
mkdir -p bench/out
command -v valgrind >/dev/null || { echo "profile needs valgrind"; exit 0; }
FAKE=
if [ "$UPSTREAM" = fake ]; then
    "$BUILD/tests/fake_provider" --port 0 --max-seconds 300 >"$TMP/fake.out" 2>/dev/null &
    FAKE=$!
    i=0; while [ $i -lt 50 ] && ! grep -q PORT "$TMP/fake.out" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
    BASE="http://127.0.0.1:$(sed -n 's/PORT //p' "$TMP/fake.out")/v1"
else
    FP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$TMP/ngx"
    # Quoted here-document: the bodies are nginx strings as written.
    cat >"$TMP/ngx.conf.in" <<'CONF'
worker_processes 1;
pid @TMP@/ngx.pid;
error_log @TMP@/ngx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; keepalive_requests 1000000;
  client_body_temp_path @TMP@/ngx/b; proxy_temp_path @TMP@/ngx/p; fastcgi_temp_path @TMP@/ngx/f; uwsgi_temp_path @TMP@/ngx/u; scgi_temp_path @TMP@/ngx/s;
  server { listen 127.0.0.1:@PORT@;
    location /ns/v1/chat/completions { default_type application/json; return 200 "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello! How can I help you today?\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":9,\"total_tokens\":23}}"; }
    location /st/v1/chat/completions { default_type text/event-stream; return 200 "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":6,\"total_tokens\":20}}\n\ndata: [DONE]\n\n"; } }
}
CONF
    sed "s|@TMP@|$TMP|g; s|@PORT@|$FP|g" "$TMP/ngx.conf.in" >"$TMP/ngx.conf"
    /usr/sbin/nginx -c "$TMP/ngx.conf" -p "$TMP/ngx" || { echo "nginx did not start"; exit 1; }
    if [ "$STREAM" = 1 ]; then BASE="http://127.0.0.1:$FP/st/v1"; else BASE="http://127.0.0.1:$FP/ns/v1"; fi
fi
cat >"$TMP/c.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/ledger.db","require_keys":false,
 "providers":{"p1":{"kind":"openai","base_url":"$BASE","api_key":"sk-x","models":{"gpt-4.1":{}}}}}
JSON
# Counting starts after start-up (callgrind_control -i on below) and
# stops before shutdown, so the total is the requests' alone.
valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --callgrind-out-file="$TMP/cg.out" "$BUILD/llmux" serve --config "$TMP/c.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW=$!
i=0; while [ $i -lt 300 ] && ! grep -q listening "$TMP/gw.out"; do sleep 0.1; i=$((i+1)); done
PORT=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$TMP/gw.out" | head -n 1)
# One request before counting: connections, curl handles, caches warm.
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:$PORT/v1/chat/completions"
callgrind_control -i on "$GW" >/dev/null
BENCH_MODEL=gpt-4.1 BENCH_STREAM=$STREAM wrk -t1 -c"$CONNS" -d"${SECS}s" -s bench/chat.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
N=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
sleep 0.5 # the ledger's last commits
callgrind_control -i off "$GW" >/dev/null
kill -TERM "$GW"; wait "$GW" 2>/dev/null
[ -n "$FAKE" ] && kill "$FAKE" 2>/dev/null
[ -f "$TMP/ngx.pid" ] && kill "$(cat "$TMP/ngx.pid")" 2>/dev/null
# One file per thread (cg.out-01, ...): the worker's (the request path:
# inbound HTTP, parse, route, curl, reply) and the ledger writer's apart;
# time-driven background work (rollups, key reloads) depends on how long
# the run took, not on N.
TOTAL=$(cat "$TMP"/cg.out-* | awk '/^totals:/ { t += $2 } END { print t + 0 }')
WFILE=$(grep -l '^fn=([0-9]*) event_base_loop$' "$TMP"/cg.out-* | head -n 1)
LFILE=$(grep -l '^fn=([0-9]*) writer_main$' "$TMP"/cg.out-* | head -n 1)
incl() { [ -n "$2" ] && callgrind_annotate --inclusive=yes "$2" 2>/dev/null | awk -v f="$1" '$0 ~ f { gsub(",","",$1); print $1; exit }'; }
WORKER=$(incl ':event_base_loop ' "$WFILE")
WRITER=$(incl 'ledger.c:writer_main ' "$LFILE")
per() { awk -v t="${1:-0}" -v n="$N" 'BEGIN { if (n > 0) printf "%.0f", t / n; else print "?" }'; }
{
echo "## Where the gateway's time goes (callgrind)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); llmux serve with 1 worker under \`valgrind --tool=callgrind\`, $N $( [ "$STREAM" = 1 ] && echo "stream (6 chunks + usage)" || echo non-stream) requests (wrk -c$CONNS, ${SECS}s) to the $( [ "$UPSTREAM" = fake ] && echo "fake provider" || echo "fast upstream (nginx return 200)"), ledger on a file; instructions counted from just before the load to just after it (no start-up, no shutdown), all threads."
echo "- total: $TOTAL instructions, about $(per "$TOTAL") per request; of which the worker thread's event loop (the request path) $(per "$WORKER") and the ledger writer $(per "$WRITER") per request."
echo
echo "Self instructions per request by thread and part (bench/cg_split.py; libc split into its allocator, its mem*/str* routines and the rest):"
echo
python3 bench/cg_split.py "$N" "$TMP"/cg.out-*
echo
echo "Inclusive cost of the main parts of the worker thread (share of its instructions):"
echo
echo '```'
callgrind_annotate --inclusive=yes "$WFILE" 2>/dev/null | grep -E "writer_main|worker_main|gw_chat_handle|complete_reply|gw_chat_run_done|drive|start_call|pv_chat_parse|pv_call_start|oa_on_finish|oa_start|on_event|json_loadb|json_dumps|curl_multi_socket_action|curl_multi_remove_handle|curl_multi_add_handle|gw_hreq_send_reply|gw_hreq_reply_chunk|GX_LOG|gx_log|write_batch_once|cells_write|sqlite3_step|rt_plan_route|gw_chat_admit|pr_ledger_submit" | grep -E '%\)  [^ ]+:[A-Za-z_][A-Za-z0-9_.]*( \[|$)' | grep -v '^ *[0-9,]* ([ 0-9.]*%)  /' | head -30
echo '```'
echo
echo "Top functions of the worker thread by own cost:"
echo
echo '```'
callgrind_annotate "$WFILE" 2>/dev/null | sed -n '/file:function/,$p' | sed -n '2,21p'
echo '```'
} >"$OUT"
[ -n "${PROFILE_KEEP:-}" ] || rm -rf "$TMP"
echo "wrote $OUT"
