#!/bin/sh
# System calls per request: llmux (1 worker, ledger on a file) under
# strace -c -f while wrk sends SYSCALL_SECONDS of non-stream chats
# (SYSCALL_STREAM=1: streams) to a fast upstream (nginx return 200).
# Prints the strace summary and calls per request.  Bounded.
set -u
BUILD=${1:-build/release}
SECS=${SYSCALL_SECONDS:-3}
STREAM=${SYSCALL_STREAM:-0}
TMP=$(mktemp -d /tmp/llmux-sc-XXXXXX)
command -v strace >/dev/null || { echo "needs strace"; exit 0; }
FP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$TMP/ngx"
# The same fast upstream as bench/profile.sh (its config, other port).
sed -n "/^worker_processes 1;/,/^CONF\$/p" bench/profile.sh | sed '$d' | sed "s|@TMP@|$TMP|g; s|@PORT@|$FP|g" >"$TMP/ngx.conf"
/usr/sbin/nginx -c "$TMP/ngx.conf" -p "$TMP/ngx" || { echo "nginx did not start"; exit 1; }
if [ "$STREAM" = 1 ]; then BASE="http://127.0.0.1:$FP/st/v1"; else BASE="http://127.0.0.1:$FP/ns/v1"; fi
cat >"$TMP/c.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/ledger.db","require_keys":false,
 "providers":{"p1":{"kind":"openai","base_url":"$BASE","api_key":"sk-x","models":{"gpt-4.1":{}}}}}
JSON
"$BUILD/llmux" serve --config "$TMP/c.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW=$!
i=0; while [ $i -lt 100 ] && ! grep -q listening "$TMP/gw.out"; do sleep 0.1; i=$((i+1)); done
PORT=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$TMP/gw.out" | head -n 1)
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:$PORT/v1/chat/completions"
strace -c -f -p "$GW" -o "$TMP/strace.txt" &
ST=$!
sleep 1
BENCH_MODEL=gpt-4.1 BENCH_STREAM=$STREAM wrk -t1 -c4 -d"${SECS}s" -s bench/chat.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
sleep 0.5
kill -INT "$ST"; wait "$ST" 2>/dev/null
N=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
kill -TERM "$GW"; wait "$GW" 2>/dev/null
kill "$(cat "$TMP/ngx.pid")" 2>/dev/null
echo "requests: $N ($( [ "$STREAM" = 1 ] && echo stream || echo non-stream))"
awk -v n="$N" '$1 ~ /^[0-9.]+$/ && NF >= 5 { name = $NF; calls = $4; if ($5 ~ /^[0-9]+$/) calls = $4; printf "%-16s %8d calls  %6.2f per request\n", name, calls, calls / n }' "$TMP/strace.txt" | sort -k4 -n -r | head -20
awk -v n="$N" '$NF == "total" { printf "total            %8d calls  %6.2f per request\n", $4, $4 / n }' "$TMP/strace.txt"
rm -rf "$TMP"
