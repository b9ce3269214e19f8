#!/bin/sh
# Where a request's time inside llmux goes: llmux (1 worker, ledger on a
# file) under `perf trace` while wrk sends one paced connection of
# non-stream chats (8 ms apart) to the fast upstream of bench/profile.sh.
# From the system calls' entry times, per request (medians and p90 over
# the traced requests):
#   pre-send   client request read (readv) -> request sent upstream (sendto)
#   upstream   sendto -> the answer read (recvfrom): the upstream's part
#   to-commit  recvfrom -> the ledger thread's wake-up of the worker
#              (write to the eventfd): finishing, the hand-off to the
#              ledger thread, its wake-up and the SQLite commit
#   wake-back  that write -> the reply written to the client (writev)
# perf trace adds a few microseconds to every system call, so the sum is
# above the untraced figure; the split is what this is for.  Needs perf
# (linux-perf) and root or perf_event_paranoid <= -1.  Bounded (~10 s).
set -u
BUILD=${1:-build/release}
SECS=${TRACE_SECONDS:-3}
TMP=$(mktemp -d /tmp/llmux-lat-XXXXXX)
command -v perf >/dev/null || { echo "latency_trace needs perf"; exit 0; }
FP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$TMP/ngx"
# The same fast upstream as bench/profile.sh (its config, other port).
sed -n "/^worker_processes 1;/,/^CONF\$/p" bench/profile.sh | sed '$d' | sed "s|@TMP@|$TMP|g; s|@PORT@|$FP|g" >"$TMP/ngx.conf"
/usr/sbin/nginx -c "$TMP/ngx.conf" -p "$TMP/ngx" || { echo "nginx did not start"; exit 1; }
cat >"$TMP/c.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/ledger.db","require_keys":false,
 "providers":{"p1":{"kind":"openai","base_url":"http://127.0.0.1:$FP/ns/v1","api_key":"sk-x","models":{"gpt-4.1":{}}}}}
JSON
"$BUILD/llmux" serve --config "$TMP/c.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW=$!
i=0; while [ $i -lt 100 ] && ! grep -q listening "$TMP/gw.out"; do sleep 0.1; i=$((i+1)); done
PORT=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$TMP/gw.out" | head -n 1)
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:$PORT/v1/chat/completions"
perf trace -p "$GW" -o "$TMP/trace.txt" >/dev/null 2>&1 &
PT=$!
sleep 1
BENCH_MODEL=gpt-4.1 BENCH_DELAY_MS=8 wrk -t1 -c1 -d"${SECS}s" --latency -s bench/chat.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
sleep 0.3
kill -INT "$PT" 2>/dev/null; wait "$PT" 2>/dev/null
kill -TERM "$GW"; wait "$GW" 2>/dev/null
kill "$(cat "$TMP/ngx.pid")" 2>/dev/null
echo "wrk (traced, 1 connection, 8 ms pause): $(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.txt") req/s, p50 $(awk '$1 == "50%" {print $2}' "$TMP/wrk.txt")"
# Lines: "  <ms> ( <dur> ms): llmux/<tid> <call>(<args>) = <ret>".  The
# eventfd is the descriptor the ledger thread writes 8 bytes to.
awk '
function med(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n ? a[int((n + 1) / 2)] : 0
}
function p90(a, n) { return n ? a[int(n * 0.9 + 0.5) < 1 ? 1 : int(n * 0.9 + 0.5)] : 0 }
{
    t = $1 + 0; call = ""
    for (f = 2; f <= NF; f++) if ($f ~ /^llmux\//) { call = $(f + 1); break }
    sub(/\(.*/, "", call)
}
call == "readv"    { if (!st) { r = t; st = 1 } }
call == "sendto"   { if (st == 1) { s = t; st = 2 } }
call == "recvfrom" { if (st == 2) { v = t; st = 3 } }
call == "write" && $0 ~ /count: 8\)/ { if (st == 3) { w = t; st = 4 } }
call == "writev"   { if (st == 4) { n++; pre[n] = (s - r) * 1000; up[n] = (v - s) * 1000; co[n] = (w - v) * 1000; wb[n] = (t - w) * 1000; tot[n] = (t - r) * 1000 } st = 0 }
END {
    if (!n) { print "no complete request in the trace"; exit }
    printf "requests traced: %d (readv -> sendto -> recvfrom -> eventfd write -> writev)\n", n
    printf "%-10s %8s %8s\n", "phase", "p50 us", "p90 us"
    printf "%-10s %8.0f", "pre-send", med(pre, n); printf " %8.0f\n", p90(pre, n)
    printf "%-10s %8.0f", "upstream", med(up, n);  printf " %8.0f\n", p90(up, n)
    printf "%-10s %8.0f", "to-commit", med(co, n); printf " %8.0f\n", p90(co, n)
    printf "%-10s %8.0f", "wake-back", med(wb, n); printf " %8.0f\n", p90(wb, n)
    printf "%-10s %8.0f", "total", med(tot, n);    printf " %8.0f\n", p90(tot, n)
}' "$TMP/trace.txt"
[ -n "${TRACE_KEEP:-}" ] || rm -rf "$TMP"
