#!/bin/sh
# make bench: side-by-side gateway benchmarks in one run, on this machine.
#   1. wrk -> fake provider directly          (the floor)
#   2. wrk -> llmux -> fake provider          (ledger on a real file)
#   3. wrk -> nginx proxy_pass -> fake        (the bar: nginx-light)
# then the same three at a fixed moderate rate for added latency, and extra
# sections from the engine and ledger tools when they are built.
# Writes bench/BENCHMARKS.md.  Needs wrk and nginx-light (installed when
# root).  Bounded: every run has a fixed duration.
set -u
BUILD=${1:-build/release}
DUR=${BENCH_SECONDS:-10}
CONN=${BENCH_CONNECTIONS:-32}
OUT=bench/BENCHMARKS.md
TMP=$(mktemp -d /tmp/llmux-bench-XXXXXX)
if ! command -v wrk >/dev/null || ! [ -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx-light >/dev/null
    else
        echo "bench needs: apt-get install -y wrk nginx-light"; exit 1
    fi
fi
cleanup() {
    [ -n "${FAKE_PID:-}" ] && kill "$FAKE_PID" 2>/dev/null
    [ -n "${GW_PID:-}" ] && kill "$GW_PID" 2>/dev/null
    [ -f "$TMP/nginx.pid" ] && kill "$(cat "$TMP/nginx.pid")" 2>/dev/null
    sleep 0.3
}
trap cleanup EXIT

port_of() { # file marker
    i=0
    while [ $i -lt 100 ]; do
        p=$(sed -n "s/.*$2\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

"$BUILD/tests/fake_provider" --port 0 --threads 1 --max-seconds 900 >"$TMP/fake.out" 2>"$TMP/fake.err" &
FAKE_PID=$!
FAKE_PORT=$(port_of "$TMP/fake.out" "PORT ") || { echo "fake provider did not start"; exit 1; }

write_cfg() { # file db extra-route-json
cat >"$1" <<JSON
{
  "listen": "127.0.0.1:0", "workers": 2, "database": "$2", "require_keys": false,
  "providers": {
    "p1": {"kind": "openai", "base_url": "http://127.0.0.1:$FAKE_PORT/v1", "api_key": "sk-bench",
           "models": {"gpt-4.1": {}, "deepseek-v3.2": {}, "gemini-2.5-flash": {}}}
  },
  "routes": {
    "single": {"policy": "priority", "targets": ["gpt-4.1@p1"]},
    "cost3": {"policy": "cost", "targets": ["gpt-4.1@p1", "deepseek-v3.2@p1", "gemini-2.5-flash@p1"]}
  }
}
JSON
}
write_cfg "$TMP/llmux.json" "$TMP/ledger.db"
"$BUILD/llmux" serve --config "$TMP/llmux.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW_PID=$!
GW_PORT=$(port_of "$TMP/gw.out" "listening on http:\/\/127.0.0.1:") || { echo "llmux did not start"; cat "$TMP/gw.err"; exit 1; }

NGINX_PORT=$((20000 + $$ % 20000))
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx.conf" <<CONF
worker_processes 2;
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fcgi;
  uwsgi_temp_path $TMP/nginx/uwsgi;
  scgi_temp_path $TMP/nginx/scgi;
  upstream fake { server 127.0.0.1:$FAKE_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://fake;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
/usr/sbin/nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" 2>"$TMP/nginx.err" || { echo "nginx did not start"; cat "$TMP/nginx.err"; }
sleep 0.5

# run NAME URL MODEL DELAY -> appends "NAME rps p50 p99" to $TMP/results
run() {
    BENCH_MODEL=$3 BENCH_DELAY_MS=$4 wrk -t2 -c"$5" -d"${DUR}s" --latency -s bench/chat.lua "$2/v1/chat/completions" >"$TMP/$1.txt" 2>&1
    rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/$1.txt")
    p50=$(awk '$1=="50%" {print $2}' "$TMP/$1.txt")
    p99=$(awk '$1=="99%" {print $2}' "$TMP/$1.txt")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$TMP/$1.txt")
    echo "$1 ${rps:-0} ${p50:-?} ${p99:-?} ${non2xx:-0}" >>"$TMP/results"
    echo "  $1: ${rps:-0} req/s, p50 ${p50:-?}, p99 ${p99:-?}, non-2xx ${non2xx:-0}"
}

echo "throughput ($CONN connections, ${DUR}s each):"
run direct "http://127.0.0.1:$FAKE_PORT" gpt-4.1 0 "$CONN"
run llmux "http://127.0.0.1:$GW_PORT" single 0 "$CONN"
run nginx "http://127.0.0.1:$NGINX_PORT" gpt-4.1 0 "$CONN"
run llmux_cost3 "http://127.0.0.1:$GW_PORT" cost3 0 "$CONN"
echo "fixed moderate rate (8 connections x 1 request / 8 ms ~ 1000 req/s):"
run direct_rate "http://127.0.0.1:$FAKE_PORT" gpt-4.1 8 8
run llmux_rate "http://127.0.0.1:$GW_PORT" single 8 8
run nginx_rate "http://127.0.0.1:$NGINX_PORT" gpt-4.1 8 8

# Ledger on :memory: for comparison, same fake provider.
kill "$GW_PID"; wait "$GW_PID" 2>/dev/null
write_cfg "$TMP/llmux-mem.json" ":memory:"
"$BUILD/llmux" serve --config "$TMP/llmux-mem.json" >"$TMP/gw2.out" 2>"$TMP/gw2.err" &
GW_PID=$!
GW_PORT=$(port_of "$TMP/gw2.out" "listening on http:\/\/127.0.0.1:")
run llmux_memledger "http://127.0.0.1:$GW_PORT" single 0 "$CONN"

# Engine and ledger benchmarks write their own fragments into bench/out/.
kill "$GW_PID" 2>/dev/null; GW_PID=
mkdir -p bench/out
[ -f bench/engine.sh ] && sh bench/engine.sh "$BUILD"
[ -x "$BUILD/tests/tool_ledger_bench" ] && [ -f bench/ledger.sh ] && sh bench/ledger.sh "$BUILD"
[ -f bench/profile.sh ] && sh bench/profile.sh "$BUILD"

to_ms() { # wrk prints 1.23ms / 456.00us / 1.2s
    echo "$1" | awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v+0} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print "nan"}'
}
get() { awk -v n="$1" -v c="$2" '$1==n {print $c}' "$TMP/results"; }

{
echo "# llmux benchmarks"
echo
echo "Generated by \`make bench\` (bench/run.sh). Numbers from one run on one"
echo "machine; compare within a table, not across machines."
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)"
echo "- commit: $(git rev-parse --short HEAD 2>/dev/null)"
echo "- load: wrk -t2 -c$CONN -d${DUR}s, bench/chat.lua (small non-stream chat); fake provider single-threaded; llmux 2 workers; nginx-light 2 workers, keepalive upstream"
echo
echo "## Gateway throughput (all three on the same 2 cores as wrk)"
echo
echo "| path | req/s | p50 | p99 | non-2xx |"
echo "|---|---|---|---|---|"
for n in direct llmux nginx llmux_cost3 llmux_memledger; do
    echo "| $n | $(get $n 2) | $(get $n 3) | $(get $n 4) | $(get $n 5) |"
done
L=$(get llmux 2); N=$(get nginx 2)
echo
echo "llmux / nginx throughput: $(awk -v a="$L" -v b="$N" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }') (goal >= 0.5)."
echo "ledger on file vs :memory:: $(awk -v a="$L" -v b="$(get llmux_memledger 2)" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'). 3-target cost route vs single: $(awk -v a="$(get llmux_cost3 2)" -v b="$L" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')."
echo
echo "## Added latency at a fixed moderate rate (8 connections, 8 ms pause each)"
echo
echo "| path | req/s | p50 | p99 | added p99 vs direct |"
echo "|---|---|---|---|---|"
D99=$(to_ms "$(get direct_rate 4)")
for n in direct_rate llmux_rate nginx_rate; do
    P=$(to_ms "$(get $n 4)")
    echo "| $n | $(get $n 2) | $(get $n 3) | $(get $n 4) | $(awk -v a="$P" -v b="$D99" 'BEGIN { printf "%.3f ms", a - b }') |"
done
echo
[ -f bench/out/gateway-notes.md ] && { cat bench/out/gateway-notes.md; echo; }
for f in bench/out/*.md; do
    case "$f" in */gateway-notes.md) continue ;; esac
    [ -f "$f" ] && { cat "$f"; echo; }
done
} >"$OUT"
echo "wrote $OUT"
