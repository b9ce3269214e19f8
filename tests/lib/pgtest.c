/* pgtest.c: see pgtest.h. */
#include "pgtest.h"

#include <arpa/inet.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char bindir[256];
static char dir[256];
/* (psql as ourselves over TCP: trust auth, so any OS user may) */
static char as_user[64]; /* "runuser -u postgres --" or "" */
static int port;
static int running;

static int
run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int p = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        p = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return p;
}

int
pgt_server_start(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s %s/pg_ctl -D %s/data -l %s/log -w -t 30 -o \"-p %d -k %s"
             " -c listen_addresses=127.0.0.1 -c fsync=off"
             " -c max_connections=200\" start >/dev/null 2>&1",
             as_user, bindir, dir, dir, port, dir);
    if (run(cmd) != 0) {
        fprintf(stderr, "pgtest: pg_ctl start failed (log %s/log)\n", dir);
        return -1;
    }
    return 0;
}

int
pgt_server_stop(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s %s/pg_ctl -D %s/data -w -t 30 -m fast stop >/dev/null 2>&1",
             as_user, bindir, dir);
    return run(cmd);
}

void
pgt_stop(void)
{
    if (!dir[0])
        return;
    if (running)
        pgt_server_stop();
    running = 0;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    run(cmd);
    dir[0] = '\0';
}

int
pgt_start(void)
{
    if (running)
        return 0;
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0 ||
        g.gl_pathc == 0) {
        fprintf(stderr, "pgtest: no PostgreSQL server binaries"
                        " (apt-get install postgresql)\n");
        return -1;
    }
    /* The highest version (glob sorts; "15" after "13"). */
    snprintf(bindir, sizeof(bindir), "%s", g.gl_pathv[g.gl_pathc - 1]);
    globfree(&g);
    *strrchr(bindir, '/') = '\0';
    snprintf(dir, sizeof(dir), "/tmp/llmux-pg-XXXXXX");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        return -1;
    }
    if (geteuid() == 0) {
        /* initdb refuses root: hand the directory to a plain user. */
        struct passwd *pw = getpwnam("postgres");
        if (!pw)
            pw = getpwnam("nobody");
        if (!pw || chown(dir, pw->pw_uid, pw->pw_gid) != 0) {
            fprintf(stderr, "pgtest: no user to run PostgreSQL as\n");
            pgt_stop();
            return -1;
        }
        snprintf(as_user, sizeof(as_user), "runuser -u %s --", pw->pw_name);
    }
    chmod(dir, 0700);
    atexit(pgt_stop);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd /tmp && %s %s/initdb -D %s/data -U llmux -A trust -E UTF8"
             " --locale=C --no-sync >/dev/null 2>&1",
             as_user, bindir, dir);
    if (run(cmd) != 0) {
        fprintf(stderr, "pgtest: initdb failed\n");
        pgt_stop();
        return -1;
    }
    for (int tries = 0; tries < 5; tries++) {
        port = free_port();
        if (port > 0 && pgt_server_start() == 0) {
            running = 1;
            return 0;
        }
    }
    pgt_stop();
    return -1;
}

int
pgt_sql(const char *name, const char *sql, char *out, size_t outlen)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "%s/psql -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p %d"
             " -U llmux -d %s -c \"%s\" 2>&1",
             bindir, port, name, sql);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[1024] = "";
    if (!fgets(line, sizeof(line), p))
        line[0] = '\0';
    char drain[256];
    while (fgets(drain, sizeof(drain), p))
        ;
    int st = pclose(p);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (out)
        snprintf(out, outlen, "%s", line);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

#define PGT_NULL "<<pgt:null>>"

int
pgt_query(const char *name, const char *sql,
          void (*cb)(void *ud, int ncols, char **vals), void *ud)
{
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "%s/psql -X -q -A -t -v ON_ERROR_STOP=1 -F '\037' -R '\036'"
             " -P null='" PGT_NULL "' -h 127.0.0.1 -p %d -U llmux -d %s"
             " -c \"%s\"",
             bindir, port, name, sql);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 1024) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int st = pclose(p);
    if (!buf || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        free(buf);
        return -1;
    }
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\036'))
        len--;
    buf[len] = '\0';
    int rows = 0;
    char *vals[64];
    for (char *rec = buf; len && rec;) {
        char *next = strchr(rec, '\036');
        if (next)
            *next++ = '\0';
        int n = 0;
        for (char *f = rec; f && n < 64;) {
            char *fn = strchr(f, '\037');
            if (fn)
                *fn++ = '\0';
            vals[n++] = strcmp(f, PGT_NULL) == 0 ? NULL : f;
            f = fn;
        }
        if (cb)
            cb(ud, n, vals);
        rows++;
        rec = next;
    }
    free(buf);
    return rows;
}

int
pgt_dump(const char *name, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s/pg_dump -h 127.0.0.1 -p %d -U llmux -d %s -f '%s' 2>&1",
             bindir, port, name, path);
    return running && system(cmd) == 0 ? 0 : -1;
}

int
pgt_createdb(const char *name, char *uri, size_t urilen)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    if (pgt_sql("postgres", sql, NULL, 0) != 0)
        return -1;
    snprintf(uri, urilen, "postgres://llmux@127.0.0.1:%d/%s", port, name);
    return 0;
}
