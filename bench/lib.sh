# Shell helpers shared by bench/run.sh, bench/multi.sh and bench/account.sh
# (sourced; they use the caller's $TMP directory).

# bench_cleanup: (trap it on EXIT) ends the caller's $PIDS and the servers whose
# pid files are in $TMP, then removes $TMP.
bench_cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for f in "$TMP"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    sleep 0.3
    rm -rf "$TMP"
}

port_of() { # file marker: the port printed after marker in file (15 s)
    i=0
    while [ $i -lt 150 ]; do
        p=$(sed -n "s/.*$2\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
free_port() { # a port the kernel hands out now (nginx and postgres need a number)
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# nginx NAME WORKERS BODY-OF-http{}: (re)starts an nginx with its own
# prefix under $TMP.
nginx_start() {
    [ -f "$TMP/$1.pid" ] && kill "$(cat "$TMP/$1.pid")" 2>/dev/null && sleep 0.5
    mkdir -p "$TMP/$1"
    cat >"$TMP/$1.conf" <<CONF
worker_processes $2;
pid $TMP/$1.pid;
error_log $TMP/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/$1/body;
  proxy_temp_path $TMP/$1/proxy;
  fastcgi_temp_path $TMP/$1/fcgi;
  uwsgi_temp_path $TMP/$1/uwsgi;
  scgi_temp_path $TMP/$1/scgi;
  $3
}
CONF
    /usr/sbin/nginx -c "$TMP/$1.conf" -p "$TMP/$1" 2>"$TMP/$1.err" || { echo "nginx $1 did not start"; cat "$TMP/$1.err"; exit 1; }
}

# fast_upstream_start NAME WORKERS PORT: the fast upstream, nginx answering
# `return 200` with a fixed chat.completion at /ns/v1 and a fixed 6-chunk
# stream (role, five words, finish, usage, [DONE]) at /st/v1.
fast_upstream_start() {
    ID='"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-4.1"'
    NS_BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":9,"total_tokens":23}}'
    ST_BODY="data: {$ID,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\\n\\n"
    for w in Hello '!' ' How' ' can' ' I'; do
        ST_BODY="${ST_BODY}data: {$ID,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"$w\"}}]}\\n\\n"
    done
    ST_BODY="${ST_BODY}data: {$ID,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\\n\\n"
    ST_BODY="${ST_BODY}data: {$ID,\"choices\":[],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":6,\"total_tokens\":20}}\\n\\n"
    ST_BODY="${ST_BODY}data: [DONE]\\n\\n"
    ST_BODY_NGX=$(printf '%s' "$ST_BODY" | sed 's/"/\\"/g')
    NS_BODY_NGX=$(printf '%s' "$NS_BODY" | sed 's/"/\\"/g')
    nginx_start "$1" "$2" "
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$3 backlog=4096;
    location /ns/v1/chat/completions { default_type application/json; return 200 \"$NS_BODY_NGX\"; }
    location /st/v1/chat/completions { default_type text/event-stream; return 200 \"$ST_BODY_NGX\"; }
  }"
}

# proxy_conf PORT UPSTREAM-PORT: the reference, nginx proxy_pass with a
# keepalive pool (the body of nginx_start's http{}).
proxy_conf() { # port upstream-port
    echo "
  keepalive_requests 1000000;
  upstream fast { server 127.0.0.1:$2; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$1 backlog=4096;
    location / { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }
  }"
}
