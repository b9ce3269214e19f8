#!/bin/sh
# A/B added latency at the fixed moderate rate of bench/run.sh (8
# connections, 8 ms pause each, ~900 req/s, 1 llmux worker, ledger on a
# file, the fast nginx upstream): two llmux binaries side by side, rounds
# interleaved (direct, A, B, direct, B, A, ...) so a shared machine's
# noise falls on both.  Prints each run and the median over the rounds of
# p50/p99 minus the direct path's of the same round.
#   bench/ab_rate.sh A/llmux B/llmux   (AB_ROUNDS=6, AB_SECONDS=8)
# Bounded: 3 x rounds x seconds.
set -u
A=$1 B=$2
ROUNDS=${AB_ROUNDS:-6}
DUR=${AB_SECONDS:-8}
TMP=$(mktemp -d /tmp/llmux-ab-XXXXXX)
cleanup() {
    for f in "$TMP"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    sleep 0.3
    rm -rf "$TMP"
}
trap cleanup EXIT
. bench/lib.sh
NS='{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":9,"total_tokens":23}}'
NS_NGX=$(printf '%s' "$NS" | sed 's/"/\\"/g')
UP=$(free_port)
nginx_start up 2 "
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$UP backlog=4096;
    location /ns/v1/chat/completions { default_type application/json; return 200 \"$NS_NGX\"; }
  }"
gw() { # name binary
    cat >"$TMP/$1.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/$1.db","require_keys":false,
 "providers":{"ns":{"kind":"openai","base_url":"http://127.0.0.1:$UP/ns/v1","api_key":"sk-bench","models":{"gpt-4.1":{}}}}}
JSON
    : >"$TMP/$1.out"
    "$2" serve --config "$TMP/$1.json" >"$TMP/$1.out" 2>"$TMP/$1.err" &
    echo $! >"$TMP/$1.pid"
    port_of "$TMP/$1.out" "listening on http:\/\/127.0.0.1:" || { echo "llmux $1 did not start"; cat "$TMP/$1.err"; exit 1; }
}
PA=$(gw a "$A") PB=$(gw b "$B")
sleep 0.5
ms() { echo "$1" | awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v+0} else {sub(/s$/,"",v); print v*1000}}'; }
one() { # name url round
    BENCH_MODEL=gpt-4.1 BENCH_DELAY_MS=8 wrk -t1 -c8 -d"${DUR}s" --latency -s bench/chat.lua "$2/chat/completions" >"$TMP/w.txt" 2>&1
    p50=$(ms "$(awk '$1=="50%" {print $2}' "$TMP/w.txt")")
    p99=$(ms "$(awk '$1=="99%" {print $2}' "$TMP/w.txt")")
    rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/w.txt")
    echo "$3 $1 $rps $p50 $p99" >>"$TMP/all"
    echo "  round $3 $1: $rps req/s p50 $p50 ms p99 $p99 ms"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ $r -le "$ROUNDS" ]; do
    one direct "http://127.0.0.1:$UP/ns/v1" $r
    if [ $((r % 2)) = 1 ]; then
        one A "http://127.0.0.1:$PA/v1" $r; one B "http://127.0.0.1:$PB/v1" $r
    else
        one B "http://127.0.0.1:$PB/v1" $r; one A "http://127.0.0.1:$PA/v1" $r
    fi
    r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The ledger's own histogram (hand-off to commit callback), over all of
# each binary's rounds: a checkpoint inside a commit shows in the tail.
for w in A B; do
    [ $w = A ] && p=$PA || p=$PB
    curl -s "http://127.0.0.1:$p/metrics" | awk -v w=$w '
        /^llmux_ledger_commit_seconds_bucket/ { le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le); c[++n] = $2; l[n] = le }
        /^llmux_ledger_commit_seconds_count/ { t = $2 }
        END { if (!t) { print w ": no commit histogram"; exit }
              printf "%s commits %d:", w, t
              for (i = 1; i <= n; i++) if (l[i] != "+Inf") printf " >%sms %.2f%%", l[i] * 1000, 100 * (t - c[i]) / t
              printf "\n" }'
done
awk '
function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
{ p50[$1, $2] = $4; p99[$1, $2] = $5; if ($1 > R) R = $1 }
END {
    for (who = 1; who <= 2; who++) {
        w = who == 1 ? "A" : "B"; n = 0
        for (r = 1; r <= R; r++) { n++; a[n] = p50[r, w] - p50[r, "direct"]; b[n] = p99[r, w] - p99[r, "direct"] }
        printf "%s: added p50 %+.3f ms, added p99 %+.3f ms (medians of %d rounds)\n", w, med(a, n), med(b, n), n
    }
}' "$TMP/all"
