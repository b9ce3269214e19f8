/*
 * e2e: see e2e.h.
 */
#include "e2e.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sqlite3.h>

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *
e2e_temp_dir(void)
{
    char tmpl[] = "/tmp/llmux-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static char *temp_root;

char *
e2e_write_temp(const char *name, const char *text)
{
    if (!temp_root)
        temp_root = e2e_temp_dir();
    if (!temp_root)
        return NULL;
    size_t n = strlen(temp_root) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path)
        return NULL;
    snprintf(path, n, "%s/%s", temp_root, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(path);
        return NULL;
    }
    fputs(text, f);
    fclose(f);
    return path;
}

int
e2e_replace_file(const char *path, const char *text)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    return bad || rename(tmp, path) != 0 ? -1 : 0;
}

int
e2e_log_count(const struct e2e_proc *p, const char *needle)
{
    FILE *f = fopen(p->log_path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

const char *
e2e_env(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

int
e2e_start(struct e2e_proc *p, char *const argv[], const char *marker,
          int timeout_ms)
{
    memset(p, 0, sizeof(*p));
    p->out_fd = -1;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    snprintf(p->log_path, sizeof(p->log_path), "/tmp/llmux-e2e-%d-%lld.log",
             (int)getpid(), now_ms());
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* a test that dies (a sanitizer's abort, a signal) takes its
         * server with it instead of leaving it running */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        int lf = open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (lf >= 0)
            dup2(lf, 2);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->out_fd = fds[0];
    char buf[4096];
    size_t len = 0;
    long long deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        struct pollfd pf = {p->out_fd, POLLIN, 0};
        int rc = poll(&pf, 1, 50);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc > 0) {
            ssize_t n = read(p->out_fd, buf + len, sizeof(buf) - 1 - len);
            if (n <= 0)
                break;
            len += (size_t)n;
            buf[len] = '\0';
            char *m = strstr(buf, marker);
            if (m) {
                char *num = m + strlen(marker);
                char *end;
                long port = strtol(num, &end, 10);
                if (end != num && (*end == '\n' || *end == ' ' ||
                                   *end == '\r' || *end == '/')) {
                    p->port = (int)port;
                    /* Keep reading the pipe in the background? No: the
                     * child writes little after start; leave it open so
                     * it never gets SIGPIPE. */
                    return 0;
                }
            }
            if (len == sizeof(buf) - 1)
                len = 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            p->pid = 0;
            break;
        }
    }
    fprintf(stderr, "e2e: %s did not report its port; its stderr:\n",
            argv[0]);
    FILE *f = fopen(p->log_path, "r");
    if (f) {
        int c, k = 0;
        while ((c = fgetc(f)) != EOF && k++ < 4000)
            fputc(c, stderr);
        fclose(f);
    }
    e2e_stop(p, SIGKILL, 1000);
    return -1;
}

int e2e_sanitizer_reports;

/* Scans the child's stderr for sanitizer reports; prints the log if any. */
static void
check_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    int bad = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "Sanitizer") || strstr(line, "runtime error:"))
            bad = 1;
    if (bad) {
        e2e_sanitizer_reports++;
        rewind(f);
        fprintf(stderr, "e2e: sanitizer report in %s:\n", path);
        int k = 0;
        while (fgets(line, sizeof(line), f) && k++ < 200)
            fputs(line, stderr);
    }
    fclose(f);
    if (!bad)
        unlink(path);
}

int
e2e_stop(struct e2e_proc *p, int sig, int timeout_ms)
{
    int result = -1;
    if (p->pid > 0) {
        kill(p->pid, sig);
        long long deadline = now_ms() + timeout_ms;
        int st = 0;
        for (;;) {
            pid_t r = waitpid(p->pid, &st, WNOHANG);
            if (r == p->pid) {
                result = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                break;
            }
            if (now_ms() >= deadline) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, &st, 0);
                break;
            }
            usleep(10000);
        }
        p->pid = 0;
        check_log(p->log_path);
    }
    if (p->out_fd >= 0)
        close(p->out_fd);
    p->out_fd = -1;
    return result;
}

int
e2e_start_fake(struct e2e_proc *p)
{
    const char *bin = e2e_env("FAKE_PROVIDER", "build/release/tests/fake_provider");
    char *argv[] = {(char *)bin, "--port", "0", "--max-seconds", "600", NULL};
    return e2e_start(p, argv, "PORT ", 10000);
}

int
e2e_start_llmux(struct e2e_proc *p, const char *cfg, int timeout_ms)
{
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", (char *)cfg, NULL};
    return cfg ? e2e_start(p, argv, "listening on http://127.0.0.1:",
                           timeout_ms)
               : -1;
}

struct grow {
    char *p;
    size_t n;
};

static size_t
grow_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct grow *g = ud;
    size_t n = size * nmemb;
    char *q = realloc(g->p, g->n + n + 1);
    if (!q)
        return 0;
    memcpy(q + g->n, data, n);
    g->n += n;
    q[g->n] = '\0';
    g->p = q;
    return n;
}

int
e2e_http(const char *method, const char *url, const char *body,
         const char *const *extra_headers, int timeout_ms,
         struct e2e_resp *out)
{
    memset(out, 0, sizeof(*out));
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct grow b = {0}, h = {0};
    struct curl_slist *hl = NULL;
    if (body)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    for (size_t i = 0; extra_headers && extra_headers[i]; i++)
        hl = curl_slist_append(hl, extra_headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grow_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, grow_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    out->curl_code = (int)rc;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &out->total_s);
    out->body = b.p ? b.p : strdup("");
    out->body_len = b.n;
    out->headers = h.p ? h.p : strdup("");
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

void
e2e_resp_free(struct e2e_resp *r)
{
    free(r->body);
    free(r->headers);
    r->body = r->headers = NULL;
}

const char *
e2e_header(const struct e2e_resp *r, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    const char *p = r->headers;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (ll > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(p + ll - v);
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return buf;
        }
        p = eol ? eol + 1 : NULL;
    }
    return NULL;
}

void
e2e_small_asan_quarantine(void)
{
    const char *ao = getenv("ASAN_OPTIONS");
    char opts[1024];
    snprintf(opts, sizeof(opts),
             "%s%squarantine_size_mb=4:thread_local_quarantine_size_kb=256",
             ao ? ao : "", ao && *ao ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
}

long long
e2e_db_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    long long n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        else
            fprintf(stderr, "  sql failed: %s\n", sqlite3_errmsg(db));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

int
e2e_node(const char *script, const char *const *env, int timeout_s,
         char **out)
{
    if (out)
        *out = NULL;
    if (access("tests/clients/node_modules/.package-lock.json", R_OK) != 0 ||
        system("command -v node >/dev/null 2>&1") != 0)
        return E2E_NO_CLIENTS;
    char path[512];
    snprintf(path, sizeof(path), "tests/clients/%s", script);
    char log[256];
    snprintf(log, sizeof(log), "/tmp/llmux-node-%d-%lld.out", (int)getpid(),
             now_ms());
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        /* The SDKs must not pick up a real key or proxy from the caller. */
        unsetenv("OPENAI_API_KEY");
        unsetenv("ANTHROPIC_API_KEY");
        unsetenv("HTTP_PROXY");
        unsetenv("HTTPS_PROXY");
        unsetenv("http_proxy");
        unsetenv("https_proxy");
        for (size_t i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execlp("node", "node", path, (char *)NULL);
        fprintf(stderr, "exec node: %s\n", strerror(errno));
        _exit(127);
    }
    int st = 0, rc = -1;
    long long deadline = now_ms() + (long long)timeout_s * 1000;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            break;
        }
        if (now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "  node %s: killed after %d s\n", script,
                    timeout_s);
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    FILE *f = fopen(log, "r");
    if (f) {
        char *buf = NULL;
        size_t len = 0, cap = 0;
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            if (len + n + 1 > cap) {
                cap = (len + n + 1) * 2;
                char *nb = realloc(buf, cap);
                if (!nb)
                    break;
                buf = nb;
            }
            memcpy(buf + len, chunk, n);
            len += n;
        }
        fclose(f);
        if (buf)
            buf[len] = '\0';
        if (out)
            *out = buf;
        else
            free(buf);
    }
    unlink(log);
    return rc;
}

long long
e2e_usd_to_pusd(const char *s)
{
    long long ip = 0, fp = 0;
    int digits = 0;
    if (!s)
        return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        ip = ip * 10 + (*s - '0');
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9' && digits < 12; s++, digits++)
            fp = fp * 10 + (*s - '0');
    for (; digits < 12; digits++)
        fp *= 10;
    return ip * 1000000000000LL + fp;
}

struct json_t *
e2e_sse_objects(const char *body)
{
    json_t *a = json_array();
    for (const char *p = body; p && (p = strstr(p, "data: {")) != NULL;) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        /* "\u0000" is valid JSON (a random model's <0x00> byte token) */
        json_t *o = json_loadb(p, n, JSON_ALLOW_NUL, NULL);
        if (json_is_object(o)) {
            json_array_append_new(a, o);
        } else {
            fprintf(stderr, "e2e_sse_objects: an event is not a JSON "
                            "object: %.200s\n", p);
            json_decref(o);
        }
        p += n;
    }
    return a;
}

size_t
e2e_sse_deltas(const json_t *evs, const char *field, char *out, size_t cap)
{
    size_t n = 0, i;
    const json_t *ev;
    json_array_foreach(evs, i, ev) {
        const json_t *f = json_object_get(
            json_object_get(json_array_get(json_object_get(ev, "choices"), 0),
                            "delta"),
            field);
        size_t l = json_string_length(f);
        if (json_is_string(f) && n + l < cap) {
            memcpy(out + n, json_string_value(f), l);
            n += l;
        }
    }
    if (cap)
        out[n] = '\0';
    return n;
}

json_t *
e2e_post(const char *base, const char *path, const char *body, long *status,
         char **raw)
{
    char u[256];
    snprintf(u, sizeof(u), "%s%s", base, path);
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (raw)
        *raw = NULL;
    if (e2e_http("POST", u, body, NULL, 120000, &r) == 0) {
        *status = r.status;
        if (raw)
            *raw = strdup(r.body);
        else if (!(o = json_loads(r.body, JSON_ALLOW_NUL, NULL)))
            fprintf(stderr, "not JSON (%ld): %s\n", r.status, r.body);
    }
    e2e_resp_free(&r);
    return o;
}
