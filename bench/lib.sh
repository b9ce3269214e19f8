# Shell helpers shared by bench/run.sh and bench/multi.sh (sourced; they
# use the caller's $TMP directory).

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
