#!/bin/sh
# Gateway throughput of 1 vs 2 llmux instances behind nginx, both over one
# PostgreSQL database (issue 15), on this machine:
#   wrk -> nginx -> llmux x N -> fake provider, N = 1 and 2
# PostgreSQL is a private cluster started here (initdb into a temp dir as
# the user postgres when root, a free port on 127.0.0.1, fsync off),
# stopped at the end.  Appends a section to bench/out/multi.md.  Needs wrk,
# nginx and the postgresql server package.  Bounded: fixed durations.
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
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    [ -f "$TMP/nginx.pid" ] && kill "$(cat "$TMP/nginx.pid")" 2>/dev/null
    $AS "$PGBIN/pg_ctl" -D "$TMP/pg" -m fast -w stop >/dev/null 2>&1
    sleep 0.3; rm -rf "$TMP"
}
trap cleanup EXIT
port_of() { # file marker
    i=0
    while [ $i -lt 150 ]; do
        p=$(sed -n "s/.*$2\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
PGPORT=$((30000 + $$ % 20000))
(cd /tmp && $AS "$PGBIN/initdb" -D "$TMP/pg" -U llmux -A trust -E UTF8 --locale=C --no-sync >/dev/null) || exit 1
$AS "$PGBIN/pg_ctl" -D "$TMP/pg" -l "$TMP/pg.log" -w -o "-p $PGPORT -k $TMP -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null || exit 1
"$PGBIN/psql" -h 127.0.0.1 -p $PGPORT -U llmux -d postgres -qc "CREATE DATABASE llmux" || exit 1
DB="postgres://llmux@127.0.0.1:$PGPORT/llmux"

: >"$TMP/fake.out"
"$BUILD/tests/fake_provider" --port 0 --threads 1 --max-seconds 900 >"$TMP/fake.out" 2>"$TMP/fake.err" &
PIDS="$PIDS $!"
FAKE_PORT=$(port_of "$TMP/fake.out" "PORT ") || { echo "fake provider did not start"; exit 1; }
start_gw() { # index; sets GWPORT (not in a $(...) subshell: PIDS must stick)
    cat >"$TMP/gw$1.json" <<JSON
{ "listen": "127.0.0.1:0", "workers": 1, "database": "$DB", "require_keys": false,
  "providers": { "p1": {"kind": "openai", "base_url": "http://127.0.0.1:$FAKE_PORT/v1",
                        "api_key": "sk-bench", "models": {"gpt-4.1": {}}}} }
JSON
    : >"$TMP/gw$1.out"
    "$BUILD/llmux" serve --config "$TMP/gw$1.json" >"$TMP/gw$1.out" 2>"$TMP/gw$1.err" &
    PIDS="$PIDS $!"
    GWPORT=$(port_of "$TMP/gw$1.out" "listening on http:\/\/127.0.0.1:")
}
start_gw 1 && P1=$GWPORT || exit 1
start_gw 2 && P2=$GWPORT || exit 1
NGX=$((20000 + $$ % 10000))
nginx_with() { # upstream servers...
    [ -f "$TMP/nginx.pid" ] && kill "$(cat "$TMP/nginx.pid")" 2>/dev/null && sleep 0.5
    mkdir -p "$TMP/nginx"
    servers=""; for p in "$@"; do servers="$servers server 127.0.0.1:$p;"; done
    cat >"$TMP/nginx.conf" <<CONF
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $TMP/nginx/body; proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/f; uwsgi_temp_path $TMP/nginx/u; scgi_temp_path $TMP/nginx/s;
  upstream llmux { least_conn; $servers keepalive 64; }
  server { listen 127.0.0.1:$NGX;
    location / { proxy_pass http://llmux; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
    /usr/sbin/nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" 2>/dev/null
    sleep 0.5
}
run() { # label
    wrk -t 2 -c "$CONN" -d "${DUR}s" -s bench/chat.lua "http://127.0.0.1:$NGX/v1/chat/completions" >"$TMP/wrk.txt" 2>&1
    rps=$(sed -n 's/^Requests\/sec: *//p' "$TMP/wrk.txt")
    lat=$(sed -n 's/^ *Latency *\([^ ]*\).*/\1/p' "$TMP/wrk.txt")
    non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: *//p' "$TMP/wrk.txt")
    echo "| $1 | $rps | $lat | ${non2xx:-0} |"
}
nginx_with "$P1"
R1=$(run "1 instance")
nginx_with "$P1" "$P2"
R2=$(run "2 instances")
ROWS=$("$PGBIN/psql" -h 127.0.0.1 -p $PGPORT -U llmux -d llmux -Atc "SELECT count(*) FROM usage")
{
echo "## Gateway behind nginx: 1 vs 2 instances over one PostgreSQL (bench/multi.sh)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); wrk -t 2 -c $CONN -d ${DUR}s, non-stream chat, fake provider; each instance 1 worker; nginx 1 worker; PostgreSQL on the same machine; $(nproc) cores for everything; $ROWS ledger rows committed"
echo
echo "| setup | requests/s | mean latency | non-2xx |"
echo "|---|---|---|---|"
echo "$R1"
echo "$R2"
} >"$OUT"
cat "$OUT"
