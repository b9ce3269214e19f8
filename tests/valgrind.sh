#!/bin/sh
# valgrind.sh: the real llmux binary's main paths under valgrind memcheck.
#
#   sh tests/valgrind.sh [BUILD]        (BUILD defaults to build/release)
#
# Runs `llmux serve` under memcheck against the fake provider (itself not
# under valgrind), a second fake speaking TLS, nginx as an HTTP/2 upstream
# in front of the fake (when installed) and the local engine (stories260K
# from $LLMUX_TEST_DATA); drives every main path with curl in bounded
# loops; SIGHUP twice (the second changes the local provider); stops it
# with SIGTERM.  Then a second, short `serve`
# on the HTTPS listener; then `llmux usage` and `llmux keys` on the ledger
# it wrote, `llmux check`, `llmux run -n 8`, a greedy `llmux run -n 64`
# (decodes a byte-fallback token) and `llmux tokenize`, each under
# memcheck.  The TLS parts need the openssl command (certificates are made
# at run time) and are skipped without it.
#
# Exits 0 only if every run reported no memcheck error and no definite or
# indirect leak, exited as expected, and the answers checked out; prints
# one summary line (findings with their stacks go to stderr).  Possible
# and still-reachable blocks are not errors (libcurl, OpenSSL and glibc
# keep one-time state until exit); tests/valgrind.supp holds nothing yet.
#
# Bounded: every curl has --max-time, the gateway gets 120 s to come up and
# 60 s to stop after SIGTERM, the fake provider exits after --max-seconds.
# VG_LOOPS (default 3) repeats the request set, so a per-request leak shows
# as a multiple of the loop count; VG_KEEP=1 keeps the logs (they are kept
# anyway when something failed).  About a minute on 2 slow cores.
BUILD=${1:-build/release}
LOOPS=${VG_LOOPS:-3}
here=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/llmux"
FAKE="$BUILD/tests/fake_provider"
: "${LLMUX_TEST_DATA:=$(cd "$here/../.." && pwd)/shared/data}"
MODEL="$LLMUX_TEST_DATA/models/stories260K.gguf"
SUPP="$here/valgrind.supp"

for f in "$BIN" "$FAKE" "$MODEL"; do
    if [ ! -e "$f" ]; then
        echo "valgrind: missing $f (build first: make $BIN $FAKE)"
        exit 2
    fi
done
if ! command -v valgrind >/dev/null || ! command -v curl >/dev/null; then
    echo "valgrind: needs valgrind and curl (apt-get install -y valgrind curl)"
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmux-vg.XXXXXX")
fake_pid=""
tfake_pid=""
nginx_pid=""
gw_pid=""
cleanup() {
    st=$?   # the exit status: the logs are kept when it is not 0
    [ -n "$gw_pid" ] && kill -KILL "$gw_pid" 2>/dev/null
    if [ -n "$nginx_pid" ]; then
        kill -QUIT "$nginx_pid" 2>/dev/null
        wait "$nginx_pid" 2>/dev/null
    fi
    for p in $fake_pid $tfake_pid; do
        kill -TERM "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    if [ -n "$VG_KEEP" ] || [ "$st" != 0 ]; then
        echo "valgrind: logs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 3' INT TERM

VG="valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect
    --error-exitcode=99 --track-fds=no --num-callers=30
    --suppressions=$SUPP"

fails=0      # failed answer checks (not valgrind findings)
runs=0       # valgrind runs
bad_runs=""  # names of runs with findings
note() { echo "valgrind: $*" >&2; }
fail() { fails=$((fails + 1)); note "FAIL: $*"; }

# Waits up to $2 tenths of a second for file $1 to hold a line matching $3.
wait_line() {
    i=0
    while [ "$i" -lt "$2" ]; do
        grep -q "$3" "$1" 2>/dev/null && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# Waits up to $2 tenths of a second for pid $1 to exit; 0 if it did.
wait_exit() {
    i=0
    while [ "$i" -lt "$2" ]; do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# Checks one valgrind log ($1, run name $2, exit code $3, wanted exit $4).
check_log() {
    runs=$((runs + 1))
    ok=1
    if ! grep -q "ERROR SUMMARY: 0 errors" "$1"; then ok=0; fi
    if grep -Eq "(definitely|indirectly) lost: [1-9]" "$1"; then ok=0; fi
    if [ "$3" = 99 ]; then ok=0; fi
    if [ "$3" != "$4" ]; then
        note "$2: exit $3, expected $4"
        ok=0
    fi
    if [ "$ok" = 0 ]; then
        bad_runs="$bad_runs $2"
        note "$2: findings (log $1):"
        grep -E "^==[0-9]+== (ERROR SUMMARY|  *(definitely|indirectly) lost)" "$1" >&2
        # The first findings with their stacks, for the report.
        awk '/^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Mismatched|Source and)|are definitely lost|are indirectly lost/{p=1}
             p{print} /^==[0-9]+== $/{if(p)n++; p=0} n>=12{exit}' "$1" >&2
    fi
}

# ---- TLS material: a CA and a certificate for 127.0.0.1 it signed --------
tls=0
if command -v openssl >/dev/null &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj /CN=llmux-vg-ca -days 1 -keyout "$tmp/ca.key" -out "$tmp/ca.pem" \
        -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign >/dev/null 2>&1 &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj /CN=127.0.0.1 -keyout "$tmp/srv.key" -out "$tmp/srv.csr" \
        >/dev/null 2>&1 &&
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
        >"$tmp/srv.ext" &&
    openssl x509 -req -in "$tmp/srv.csr" -CA "$tmp/ca.pem" \
        -CAkey "$tmp/ca.key" -CAcreateserial -days 1 -extfile "$tmp/srv.ext" \
        -out "$tmp/srv.pem" >/dev/null 2>&1; then
    tls=1
else
    note "no openssl command or it failed: skipping the TLS parts"
fi

# ---- the fake providers (not under valgrind) --------------------------------
# start_fake OUTFILE [args]: starts one, sets $started_pid and $started_port.
start_fake() {
    out=$1
    shift
    "$FAKE" --port 0 --max-seconds 900 "$@" >"$out" 2>"$out.err" &
    started_pid=$!
    if ! wait_line "$out" 100 '^PORT '; then
        note "fake provider did not start"; cat "$out.err" >&2; exit 1
    fi
    started_port=$(sed -n 's/^PORT \([0-9]*\).*/\1/p' "$out" | head -n 1)
}
start_fake "$tmp/fake.out"
fake_pid=$started_pid
fake="http://127.0.0.1:$started_port"
# The https upstream (the openai kind over libcurl + OpenSSL, "ca_file").
tls_provider=""
tls_route=""
if [ "$tls" = 1 ]; then
    start_fake "$tmp/tfake.out" --tls-cert "$tmp/srv.pem" --tls-key "$tmp/srv.key"
    tfake_pid=$started_pid
    tls_provider="\"tls\": {\"kind\": \"openai\",
             \"base_url\": \"https://127.0.0.1:$started_port/v1\",
             \"ca_file\": \"$tmp/ca.pem\", \"api_key\": \"sk-vg\",
             \"models\": {\"gpt-4.1\": {}}},"
    tls_route="\"tls\": {\"policy\": \"priority\", \"targets\": [\"gpt-4.1@tls\"]},"
fi
# An HTTP/2 upstream: nginx (TLS + h2) in front of the plain fake, when
# nginx is installed (evhttp has no h2).  Its port is one the kernel gave
# and released; nginx cannot report a port of its own choosing.
h2=0
NGINX=${NGINX:-$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null)}
if [ "$tls" = 1 ] && [ -n "$NGINX" ] && [ -x "$NGINX" ]; then
    # A port the kernel picks for a throwaway fake, free again once it
    # exits.
    start_fake "$tmp/probe.out"
    nport=$started_port
    kill -TERM "$started_pid"
    wait "$started_pid"
    mkdir -p "$tmp/nginx"
    cat >"$tmp/nginx/nginx.conf" <<EOF2
daemon off; master_process off; worker_processes 1;
pid $tmp/nginx/nginx.pid; error_log $tmp/nginx/error.log warn;
events { worker_connections 64; }
http {
 log_format p '\$server_protocol \$status \$request_uri';
 access_log $tmp/nginx/access.log p;
 client_body_temp_path $tmp/nginx/t1; proxy_temp_path $tmp/nginx/t2;
 fastcgi_temp_path $tmp/nginx/t3; uwsgi_temp_path $tmp/nginx/t4;
 scgi_temp_path $tmp/nginx/t5;
 server {
  listen 127.0.0.1:$nport ssl http2;
  ssl_certificate $tmp/srv.pem; ssl_certificate_key $tmp/srv.key;
  location / { proxy_pass $fake; proxy_http_version 1.1;
               proxy_set_header Connection ""; proxy_buffering off; }
 }
}
EOF2
    if [ -n "$nport" ]; then
        "$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" \
            -e "$tmp/nginx/error.log" >/dev/null 2>&1 &
        nginx_pid=$!
        i=0
        while [ "$i" -lt 100 ] && kill -0 "$nginx_pid" 2>/dev/null; do
            if curl -s -o /dev/null --max-time 2 --cacert "$tmp/ca.pem" \
                "https://127.0.0.1:$nport/v1/models"; then
                h2=1
                break
            fi
            sleep 0.1
            i=$((i + 1))
        done
    fi
    if [ "$h2" = 1 ]; then
        tls_provider="$tls_provider
    \"h2\": {\"kind\": \"openai\",
            \"base_url\": \"https://127.0.0.1:$nport/v1\",
            \"ca_file\": \"$tmp/ca.pem\", \"api_key\": \"sk-vg\",
            \"models\": {\"gpt-4.1\": {}}},"
        tls_route="$tls_route
    \"h2\": {\"policy\": \"priority\", \"targets\": [\"gpt-4.1@h2\"]},"
    else
        note "nginx did not start: skipping the HTTP/2 upstream"
    fi
else
    note "no nginx (or no TLS): skipping the HTTP/2 upstream"
fi

cat >"$tmp/llmux.json" <<EOF
{
  "listen": "127.0.0.1:0", "workers": 2,
  "database": "$tmp/ledger.db", "require_keys": false,
  "admin_key": "adm-valgrind-0123456789",
  "limits": {"max_body_bytes": 65536},
  "providers": {
    $tls_provider
    "fake": {"kind": "openai", "base_url": "$fake/v1", "api_key": "sk-vg",
             "timeout_ms": 20000, "connect_timeout_ms": 5000,
             "first_byte_timeout_ms": 10000,
             "models": {"gpt-4.1": {}}},
    "bad": {"kind": "openai", "base_url": "$fake/v1", "api_key": "sk-vg",
            "headers": {"X-Fake": "status=503"},
            "models": {"gpt-4.1": {}}},
    "slow": {"kind": "openai", "base_url": "$fake/f/delay_ms=4000/v1",
             "api_key": "sk-vg", "timeout_ms": 20000,
             "first_byte_timeout_ms": 1500,
             "models": {"gpt-4.1": {}}},
    "lag": {"kind": "openai", "base_url": "$fake/f/delay_ms=1500/v1",
            "api_key": "sk-vg", "first_byte_timeout_ms": 15000,
            "models": {"gpt-4.1": {}}},
    "local": {"kind": "local", "model_path": "$MODEL", "threads": 1,
              "context": 256, "parallel": 2,
              "models": {"local": {}}}
  },
  "routes": {
    $tls_route
    "main": {"policy": "priority", "targets": ["gpt-4.1@fake"]},
    "failover": {"policy": "priority",
                 "targets": ["gpt-4.1@bad", "gpt-4.1@fake"]},
    "hedge": {"policy": "priority",
              "targets": ["gpt-4.1@lag", "gpt-4.1@fake"]}
  },
  "failover": {"max_attempts": 3, "backoff_ms": 10, "circuit_failures": 1000,
               "hedge_after_ms": 300}
}
EOF

# ---- llmux serve under memcheck ---------------------------------------------
# start_serve NAME CONFIG SCHEME: sets $gw_pid and $gw (the base URL).
start_serve() {
    # shellcheck disable=SC2086
    $VG --log-file="$tmp/vg-$1.log" "$BIN" serve --config "$2" \
        >"$tmp/$1.out" 2>"$tmp/$1.err" &
    gw_pid=$!
    if ! wait_line "$tmp/$1.out" 1200 "listening on $3://127.0.0.1:"; then
        note "llmux serve ($1) did not start under valgrind"
        tail -n 20 "$tmp/$1.err" "$tmp/vg-$1.log" >&2
        exit 1
    fi
    gport=$(sed -n "s/.*listening on $3:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p" \
            "$tmp/$1.out" | head -n 1)
    gw="$3://127.0.0.1:$gport"
}
# stop_serve NAME: SIGTERM, bounded wait, then checks its log.
stop_serve() {
    kill -TERM "$gw_pid"
    if ! wait_exit "$gw_pid" 600; then
        fail "llmux serve ($1) did not exit within 60 s of SIGTERM"
        kill -KILL "$gw_pid"
    fi
    wait "$gw_pid"
    rc=$?
    gw_pid=""
    check_log "$tmp/vg-$1.log" "$1" "$rc" 0
}
start_serve serve "$tmp/llmux.json" http

CURL_TLS=""  # curl options for an https gateway
# req NAME EXPECTED_STATUS MAXTIME METHOD PATH [BODY] [curl args...]
# Checks the HTTP status and keeps the body in $tmp/NAME.body.
req() {
    name=$1 want=$2 mt=$3 method=$4 path=$5 body=$6
    shift 6
    if [ -n "$body" ]; then
        code=$(curl -s -o "$tmp/$name.body" -w '%{http_code}' --max-time "$mt" \
               $CURL_TLS -X "$method" -H 'Content-Type: application/json' \
               --data-binary "$body" "$@" "$gw$path")
    else
        code=$(curl -s -o "$tmp/$name.body" -w '%{http_code}' --max-time "$mt" \
               $CURL_TLS -X "$method" "$@" "$gw$path")
    fi
    crc=$?
    if [ "$code" != "$want" ] || [ "$crc" != 0 ]; then
        fail "$name: HTTP $code (curl exit $crc), expected $want: $(head -c 300 "$tmp/$name.body" 2>/dev/null)"
        return 1
    fi
    return 0
}
# chat_body MODEL CONTENT STREAM(true/false) [MAX_TOKENS] [MORE_FIELDS,]
chat_body() {
    printf '{"model":"%s","stream":%s,"max_tokens":%s,%s%s"messages":[{"role":"user","content":"%s"}]}' \
        "$1" "$3" "${4:-16}" \
        "$( [ "$3" = true ] && printf '"stream_options":{"include_usage":true},' )" \
        "$5" "$2"
}
# Waits for the background curls listed in $bg (each has --max-time).
wait_bg_curls() {
    for p in $bg; do wait "$p"; done
    bg=""
}
has() {
    grep -q "$2" "$tmp/$1.body" ||
        fail "$1: body lacks '$2': $(head -c 300 "$tmp/$1.body") ... $(tail -c 300 "$tmp/$1.body")"
}

adm='Authorization: Bearer adm-valgrind-0123456789'
loop=0
while [ "$loop" -lt "$LOOPS" ]; do
    loop=$((loop + 1))
    note "request loop $loop/$LOOPS"
    req health 200 30 GET /health "" && has health '"ok"'
    req models 200 30 GET /v1/models "" && has models '"list"'
    req metrics 200 30 GET /metrics ""
    req providers 200 30 GET /admin/providers "" -H "$adm"
    # Chats through the fake provider.
    req chat 200 60 POST /v1/chat/completions "$(chat_body main hello false)" \
        && has chat 'Hello from fake provider'
    req stream 200 60 POST /v1/chat/completions "$(chat_body main hello true)" \
        && has stream '\[DONE\]'
    req bare 200 60 POST /v1/chat/completions "$(chat_body gpt-4.1@fake 'fake:chunks=3' false)"
    # Failover: the first target answers 503, the second serves.
    req failover 200 60 POST /v1/chat/completions "$(chat_body failover hi false)" \
        && has failover 'Hello from fake provider'
    req failover_s 200 60 POST /v1/chat/completions "$(chat_body failover hi true)" \
        && has failover_s '\[DONE\]'
    # Hedging: the first target has sent nothing after 300 ms, the second
    # starts and wins, the first is cancelled.
    req hedge 200 60 POST /v1/chat/completions "$(chat_body hedge hi false)" \
        && has hedge 'Hello from fake provider'
    req hedge_s 200 60 POST /v1/chat/completions "$(chat_body hedge hi true)" \
        && has hedge_s '\[DONE\]'
    # Upstream misbehaviour: every target fails -> 502/504 with an error.
    req malformed 502 60 POST /v1/chat/completions "$(chat_body main fake:malformed false)"
    # A stream fails after its first byte reached the client: an in-band
    # error event ends it.
    req malformed_s 200 60 POST /v1/chat/completions "$(chat_body main fake:malformed true)" \
        && has malformed_s '"error"'
    req reset 502 60 POST /v1/chat/completions "$(chat_body main fake:reset false)" \
        && has reset 'upstream'
    req reset_s 502 60 POST /v1/chat/completions "$(chat_body main fake:reset true)"
    req drop_s 200 60 POST /v1/chat/completions "$(chat_body main 'fake:drop_after=2' true)" \
        && has drop_s '"error"'
    req timeout 504 60 POST /v1/chat/completions "$(chat_body gpt-4.1@slow hi false)"
    req upstream_400 400 60 POST /v1/chat/completions "$(chat_body main 'fake:status=400' false)"
    # A slow client (2 MB/s) of a 3 MB stream: the gateway's output passes
    # its high-water mark and pauses the upstream call, then resumes it.
    req slow_s 200 60 POST /v1/chat/completions "$(chat_body main 'fake:big=3000000;chunks=1500' true)" \
        --limit-rate 2000k && has slow_s '\[DONE\]'
    # The client goes away mid-stream (curl gives up after 1 s of a 4 s
    # stream); the gateway must cancel the upstream call and free it.
    curl -s -o /dev/null --max-time 1 -H 'Content-Type: application/json' \
        --data-binary "$(chat_body main 'fake:chunks=20;chunk_delay_ms=200' true)" \
        "$gw/v1/chat/completions"
    # ... and one that goes away before the first byte.
    curl -s -o /dev/null --max-time 1 -H 'Content-Type: application/json' \
        --data-binary "$(chat_body main 'fake:delay_ms=2500' false)" \
        "$gw/v1/chat/completions"
    # Bad input.
    req badjson 400 30 POST /v1/chat/completions '{"model": "main", "messages": ['
    req notobj 400 30 POST /v1/chat/completions '[1,2,3]'
    req nomsgs 400 30 POST /v1/chat/completions '{"model":"main"}'
    req unknown 404 30 POST /v1/chat/completions "$(chat_body no-such-model hi false)"
    req badutf8 400 30 POST /v1/chat/completions "$(printf '{"model":"main","messages":[{"role":"user","content":"\377\376"}]}')"
    req notfound 404 30 GET /no/such/path ""
    head -c 70000 /dev/zero | tr '\0' x >"$tmp/big.txt"
    req toobig 413 30 POST /v1/chat/completions "" --data-binary @"$tmp/big.txt" \
        -H 'Content-Type: application/json'
    # Keys: create, use, list, revoke (the admin API and the auth path).
    req keynew 200 30 POST /admin/keys "{\"name\":\"vg-$loop\",\"rpm\":1000,\"budget_usd\":5}" -H "$adm"
    key=$(sed -n 's/.*"key": *"\([^"]*\)".*/\1/p' "$tmp/keynew.body")
    kid=$(sed -n 's/.*"id": *\([0-9]*\).*/\1/p' "$tmp/keynew.body")
    if [ -n "$key" ] && [ -n "$kid" ]; then
        req keychat 200 60 POST /v1/chat/completions "$(chat_body main hi false)" \
            -H "Authorization: Bearer $key"
        req keyusage 200 30 GET /v1/usage "" -H "Authorization: Bearer $key"
        req keylist 200 30 GET /admin/keys "" -H "$adm" && has keylist "vg-$loop"
        req keydel 200 30 DELETE "/admin/keys/$kid" "" -H "$adm"
        req keygone 401 30 POST /v1/chat/completions "$(chat_body main hi false)" \
            -H "Authorization: Bearer $key"
    else
        fail "keynew: no key or id in $(head -c 300 "$tmp/keynew.body")"
    fi
    # A key's rate limit: the second request in a minute is refused.
    req keyrpm 200 30 POST /admin/keys "{\"name\":\"vg-rpm-$loop\",\"rpm\":1}" -H "$adm"
    key=$(sed -n 's/.*"key": *"\([^"]*\)".*/\1/p' "$tmp/keyrpm.body")
    req rpm1 200 60 POST /v1/chat/completions "$(chat_body main hi false)" \
        -H "Authorization: Bearer $key"
    req rpm2 429 60 POST /v1/chat/completions "$(chat_body main hi false)" \
        -H "Authorization: Bearer $key"
    req badkey 401 30 POST /v1/chat/completions "$(chat_body main hi false)" \
        -H 'Authorization: Bearer sk-llmux-not-a-real-key'
    req usage 200 30 GET '/v1/usage?group_by=provider' "" -H "$adm"
    req dashboard 200 30 GET /dashboard ""
    # The https upstream.
    if [ "$tls" = 1 ]; then
        req tls_up 200 60 POST /v1/chat/completions "$(chat_body tls hi false)" \
            && has tls_up 'Hello from fake provider'
        req tls_up_s 200 60 POST /v1/chat/completions "$(chat_body tls hi true)" \
            && has tls_up_s '\[DONE\]'
    fi
    # The HTTP/2 upstream: a burst of concurrent calls (multiplexed on one
    # connection), a stream, and a client leaving an h2 stream midway.
    if [ "$h2" = 1 ]; then
        for i in 1 2 3 4; do
            curl -s -o "$tmp/h2burst.$i" --max-time 60 -H 'Content-Type: application/json' \
                --data-binary "$(chat_body h2 "fake:chunks=4;chunk_delay_ms=50" $([ $i -le 2 ] && echo true || echo false))" \
                "$gw/v1/chat/completions" &
            bg="$bg $!"
        done
        req h2_up 200 60 POST /v1/chat/completions "$(chat_body h2 hi false)" \
            && has h2_up 'Hello from fake provider'
        req h2_up_s 200 60 POST /v1/chat/completions "$(chat_body h2 hi true)" \
            && has h2_up_s '\[DONE\]'
        curl -s -o /dev/null --max-time 1 -H 'Content-Type: application/json' \
            --data-binary "$(chat_body h2 'fake:chunks=20;chunk_delay_ms=200' true)" \
            "$gw/v1/chat/completions"
        wait_bg_curls
        for i in 1 2 3 4; do
            grep -q '"choices"' "$tmp/h2burst.$i" || fail "h2 burst call $i: $(head -c 200 "$tmp/h2burst.$i")"
        done
    fi
    # The local engine: a short non-stream and a streamed generation,
    # greedy so every run decodes the same tokens; the seeded sampler once.
    req local 200 120 POST /v1/chat/completions "$(chat_body local 'Once upon a time' false 8 '"temperature":0,')" \
        && has local '"usage"'
    req local_s 200 120 POST /v1/chat/completions "$(chat_body local 'Once upon a time' true 8 '"temperature":0,')" \
        && has local_s '\[DONE\]'
    req local_seed 200 120 POST /v1/chat/completions "$(chat_body local 'Once upon a time' false 8 '"temperature":0.8,"top_p":0.9,"seed":7,')"
    # A client that leaves a local generation midway (the engine request
    # must be cancelled and freed).
    curl -s -o /dev/null --max-time 1 -H 'Content-Type: application/json' \
        --data-binary "$(chat_body local 'Once upon a time' true 400)" \
        "$gw/v1/chat/completions"
    # SIGHUP (config reload) once, between loops; then once more with the
    # local provider changed (a new instance; the old one freed).
    [ "$loop" = 1 ] && kill -HUP "$gw_pid"
    if [ "$loop" = 2 ]; then
        sed 's/"parallel": 2,/"parallel": 1,/' "$tmp/llmux.json" \
            >"$tmp/llmux-reload.json" &&
            cp "$tmp/llmux-reload.json" "$tmp/llmux.json" &&
            kill -HUP "$gw_pid"
    fi
done
# Let the cancelled upstream calls of the disconnects settle.
sleep 3

stop_serve serve
if [ "$h2" = 1 ]; then
    # Every call nginx relayed came over HTTP/2 (the readiness probe was
    # curl's own; it negotiates h2 too).
    if grep -v '^HTTP/2.0 ' "$tmp/nginx/access.log" | grep -q .; then
        fail "an upstream call did not use HTTP/2: $(grep -v '^HTTP/2.0 ' "$tmp/nginx/access.log" | head -n 3)"
    fi
    grep -q '^HTTP/2.0 200 /v1/chat/completions' "$tmp/nginx/access.log" ||
        fail "nginx logged no HTTP/2 chat call"
fi

# ---- a short serve with the HTTPS listener ----------------------------------
if [ "$tls" = 1 ]; then
    sed "s|\"listen\":|\"tls\": {\"cert\": \"$tmp/srv.pem\", \"key\": \"$tmp/srv.key\"}, \"listen\":|" \
        "$tmp/llmux.json" >"$tmp/llmux-tls.json"
    start_serve serve-tls "$tmp/llmux-tls.json" https
    CURL_TLS="--cacert $tmp/ca.pem"
    req s_health 200 30 GET /health "" && has s_health '"ok"'
    req s_chat 200 60 POST /v1/chat/completions "$(chat_body main hello false)" \
        && has s_chat 'Hello from fake provider'
    req s_stream 200 60 POST /v1/chat/completions "$(chat_body tls hello true)" \
        && has s_stream '\[DONE\]'
    req s_bad 400 30 POST /v1/chat/completions '{"model":'
    # A client leaving a TLS stream midway, and one failing its handshake.
    curl -s -o /dev/null --max-time 1 $CURL_TLS -H 'Content-Type: application/json' \
        --data-binary "$(chat_body main 'fake:chunks=20;chunk_delay_ms=200' true)" \
        "$gw/v1/chat/completions"
    curl -s -o /dev/null --max-time 10 "$gw/health" && fail "https without the CA was accepted"
    curl -s -o /dev/null --max-time 10 "http://127.0.0.1:$gport/health"
    CURL_TLS=""
    sleep 3
    stop_serve serve-tls
fi

# ---- the CLI under memcheck -------------------------------------------------
# The ledger the gateway wrote: usage reports and the keys table.
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-usage.log" "$BIN" usage --db "$tmp/ledger.db" \
    --since 1h --group-by provider --format json >"$tmp/usage.out" 2>&1
check_log "$tmp/vg-usage.log" usage $? 0
grep -q '"fake"' "$tmp/usage.out" || fail "llmux usage: $(head -c 200 "$tmp/usage.out")"
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-keys.log" "$BIN" keys create --name vg-cli --rpm 5 \
    --db "$tmp/ledger.db" >"$tmp/keys.out" 2>&1
check_log "$tmp/vg-keys.log" keys $? 0
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-keyslist.log" "$BIN" keys list --json \
    --db "$tmp/ledger.db" >"$tmp/keyslist.out" 2>&1
check_log "$tmp/vg-keyslist.log" keys-list $? 0
grep -q 'vg-cli' "$tmp/keyslist.out" || fail "llmux keys list: $(head -c 200 "$tmp/keyslist.out")"
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-check.log" "$BIN" check --config "$tmp/llmux.json" \
    >"$tmp/check.out" 2>&1
check_log "$tmp/vg-check.log" check $? 0
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-run.log" "$BIN" run --model "$MODEL" \
    -p "Once upon a time" -n 8 --temp 0 --threads 2 \
    >"$tmp/run.out" 2>"$tmp/run.err"
check_log "$tmp/vg-run.log" run $? 0
[ -s "$tmp/run.out" ] || fail "llmux run printed nothing"
# Long enough (greedy) to decode a byte-fallback token: the first newline
# of the story is <0x0A>.
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-run64.log" "$BIN" run --model "$MODEL" \
    -p "Once upon a time" -n 64 --temp 0 --threads 2 \
    >"$tmp/run64.out" 2>"$tmp/run64.err"
check_log "$tmp/vg-run64.log" run64 $? 0
[ "$(wc -l <"$tmp/run64.out")" -ge 1 ] || fail "llmux run -n 64 printed no newline"
# shellcheck disable=SC2086
$VG --log-file="$tmp/vg-tokenize.log" "$BIN" tokenize --model "$MODEL" \
    "Hello world" >"$tmp/tokenize.out" 2>"$tmp/tokenize.err"
check_log "$tmp/vg-tokenize.log" tokenize $? 0
grep -Eq '^[0-9]+( [0-9]+)*$' "$tmp/tokenize.out" ||
    fail "llmux tokenize printed: $(head -c 200 "$tmp/tokenize.out")"

if [ -z "$bad_runs" ] && [ "$fails" = 0 ]; then
    echo "valgrind: $runs runs ($LOOPS request loops), 0 errors, 0 definite/indirect leaks, 0 failed checks: OK"
    exit 0
fi
echo "valgrind: $runs runs, findings in:${bad_runs:- none}; $fails failed checks: FAIL"
exit 1
