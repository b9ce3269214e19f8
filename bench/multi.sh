#!/bin/sh
# Gateway throughput of 1 vs 2 llmux instances behind nginx, both over one
# PostgreSQL database (issue 15), on this machine:
#   wrk -> nginx (least_conn, keepalive) -> llmux x N -> fast upstream
# The fast upstream is a second nginx answering `return 200` with a fixed
# chat.completion, so it costs next to nothing (the single-threaded fake
# provider would cap every row).  Rows, each BENCH_SECONDS (default 10)
# with wrk -t 2 -c BENCH_CONNECTIONS (default 32), run back to back:
#   1 instance, SQLite file          the embedded default, for reference
#   1 instance, PostgreSQL           anonymous (no key)
#   2 instances, PostgreSQL          anonymous
#   2 instances, PostgreSQL, key     a key with budget, rpm and tpm: the
#                                    leased budget and rate paths
# PostgreSQL is a private cluster started here (initdb into a temp dir as
# the user postgres when root, a free port on 127.0.0.1, fsync off),
# stopped at the end.  Writes bench/out/multi.md (make bench includes it;
# `sh bench/multi.sh` alone, or `make bench-multi`).  Needs wrk, nginx and
# the postgresql server package.  Bounded: fixed durations.
set -u
BUILD=${1:-build/release}
DUR=${BENCH_SECONDS:-10}
CONN=${BENCH_CONNECTIONS:-32}
OUT=bench/out/multi.md
mkdir -p bench/out
TMP=$(mktemp -d /tmp/llmux-multi-XXXXXX)
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$PGBIN/initdb" ] || { echo "needs: apt-get install -y postgresql"; exit 1; }
command -v wrk >/dev/null && [ -x /usr/sbin/nginx ] || { echo "needs wrk and nginx"; exit 1; }
AS=""
if [ "$(id -u)" = 0 ]; then chown postgres "$TMP" 2>/dev/null && AS="runuser -u postgres --"; fi
chmod 755 "$TMP"
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for f in "$TMP"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    $AS "$PGBIN/pg_ctl" -D "$TMP/pg" -m fast -w stop >/dev/null 2>&1
    sleep 0.3; rm -rf "$TMP"
}
trap cleanup EXIT
. bench/lib.sh # port_of, free_port, nginx_start
PGPORT=$(free_port)
(cd /tmp && $AS "$PGBIN/initdb" -D "$TMP/pg" -U llmux -A trust -E UTF8 --locale=C --no-sync >/dev/null) || exit 1
$AS "$PGBIN/pg_ctl" -D "$TMP/pg" -l "$TMP/pg/pg.log" -w -o "-p $PGPORT -k $TMP -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null || exit 1
"$PGBIN/psql" -h 127.0.0.1 -p $PGPORT -U llmux -d postgres -qc "CREATE DATABASE llmux" || exit 1
DB="postgres://llmux@127.0.0.1:$PGPORT/llmux"

NS_BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":9,"total_tokens":23}}'
NS_BODY_NGX=$(printf '%s' "$NS_BODY" | sed 's/"/\\"/g')
UP_PORT=$(free_port)
nginx_start up 1 "keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP_PORT backlog=4096;
    location /v1/chat/completions { default_type application/json; return 200 \"$NS_BODY_NGX\"; } }"

start_gw() { # index database; sets GWPORT (not in a $(...) subshell: PIDS must stick)
    cat >"$TMP/gw$1.json" <<JSON
{ "listen": "127.0.0.1:0", "workers": 1, "database": "$2", "require_keys": false,
  "providers": { "p1": {"kind": "openai", "base_url": "http://127.0.0.1:$UP_PORT/v1",
                        "api_key": "sk-bench", "models": {"gpt-4.1": {}}}} }
JSON
    : >"$TMP/gw$1.out"
    "$BUILD/llmux" serve --config "$TMP/gw$1.json" >"$TMP/gw$1.out" 2>"$TMP/gw$1.err" &
    PIDS="$PIDS $!"
    GWPORT=$(port_of "$TMP/gw$1.out" "listening on http:\/\/127.0.0.1:") ||
        { echo "llmux $1 did not start"; tail -n 5 "$TMP/gw$1.err"; exit 1; }
}
start_gw 0 "$TMP/sqlite.db" && P0=$GWPORT || exit 1
start_gw 1 "$DB" && P1=$GWPORT || exit 1
start_gw 2 "$DB" && P2=$GWPORT || exit 1
KEY=$("$BUILD/llmux" keys create --db "$DB" --name bench --budget-usd 1000000 \
      --rpm 100000000 --tpm 100000000 2>/dev/null)
[ -n "$KEY" ] || { echo "could not create the key"; exit 1; }
sleep 2 # both instances load the key and lease a part of its limits
LB=$(free_port)
lb() { # upstream ports...
    servers=""; for p in "$@"; do servers="$servers server 127.0.0.1:$p;"; done
    nginx_start lb 1 "keepalive_requests 1000000;
  upstream llmux { least_conn; $servers keepalive 64; }
  server { listen 127.0.0.1:$LB backlog=4096;
    location / { proxy_pass http://llmux; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
    sleep 0.3
}
run() { # label [wrk args...]
    label=$1; shift
    wrk -t 2 -c "$CONN" -d "${DUR}s" -s bench/chat.lua "$@" "http://127.0.0.1:$LB/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
    rps=$(sed -n 's/^Requests\/sec: *//p' "$TMP/wrk.txt")
    lat=$(sed -n 's/^ *Latency *\([^ ]*\).*/\1/p' "$TMP/wrk.txt")
    non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: *//p' "$TMP/wrk.txt")
    echo "| $label | $rps | $lat | ${non2xx:-0} |"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
lb "$P0"; R0=$(run "1 instance, SQLite file")
lb "$P1"; R1=$(run "1 instance, PostgreSQL")
lb "$P1" "$P2"; R2=$(run "2 instances, PostgreSQL")
R3=$(run "2 instances, PostgreSQL, key with budget + rpm + tpm" -H "Authorization: Bearer $KEY")
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
sleep 1
ROWS=$("$PGBIN/psql" -h 127.0.0.1 -p $PGPORT -U llmux -d llmux -Atc "SELECT count(*) FROM usage")
KEYROWS=$("$PGBIN/psql" -h 127.0.0.1 -p $PGPORT -U llmux -d llmux -Atc "SELECT count(*) FROM usage WHERE key_id IS NOT NULL")
{
echo "## Gateway behind nginx: 1 vs 2 instances over one PostgreSQL (bench/multi.sh)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null); wrk -t 2 -c $CONN -d ${DUR}s per row, back to back, non-stream chat (bench/chat.lua); nginx (1 worker, least_conn, keepalive 64) in front; each llmux 1 worker; upstream: nginx \`return 200\` (1 worker); PostgreSQL $(basename "$(dirname "$PGBIN")") (fsync off) on the same machine; $(nproc) cores for everything; load average before $LOAD_BEFORE, after $LOAD_AFTER"
echo "- $ROWS ledger rows committed to PostgreSQL ($KEYROWS of them the key's)"
echo
echo "| setup | requests/s | mean latency | non-2xx |"
echo "|---|---|---|---|"
echo "$R0"
echo "$R1"
echo "$R2"
echo "$R3"
} >"$OUT"
cat "$OUT"
