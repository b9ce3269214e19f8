/*
 * GET /dashboard end to end: the real llmux binary in front of the fake
 * provider, with some traffic (successes and failures) in its ledger.
 *
 * Checks the page is self-contained (no URL of any host, no external
 * element, no inline handler, no HTML injection sinks), is the committed
 * gateway/dashboard.html byte for byte (the generated C constant is not
 * stale), and carries a Content-Security-Policy that allows only its own
 * inline script and style (their SHA-256, recomputed here) and fetches to
 * its own origin.  Then the two APIs the page reads answer with the fields
 * it uses, in the exact URL forms it sends.
 *
 * In a real browser (tests/clients/dashboard.mjs: headless /usr/bin/chromium
 * driven by playwright-core) against a ledger seeded with known rows
 * before llmux starts: the admin key typed into the field and submitted,
 * the totals, the per-provider and per-model tables, provider health and
 * the what-if panel equal the seeded numbers, no console error, the key
 * in no URL; the split switched, a new request shown by the page's own
 * refresh, a wrong key reported, the key forgotten.  A screenshot goes to
 * build/artifacts/dashboard.png.  Without the clients installed (make
 * clients) that part is skipped, which fails under LLMUX_REQUIRE_CLIENTS.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "../pricing/pricing.h"
#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-0123456789abcdef-dashboard"
#define SECRET "sk-upstream-SECRET-dashboard-0123456789"
/* A model name that is markup: the page must show it as text. */
#define ODD_MODEL "<i>x</i>&amp;"
#define ODD_MODEL_ESCAPED "&lt;i&gt;x&lt;/i&gt;&amp;amp;"

static struct e2e_proc fake, gw;
static char base[128];
static char *workdir;
static int n_ok, n_err; /* chat requests made, by outcome */
static int browser_requests; /* chat requests dashboard.mjs made */
/* The seeded ledger (seed_ledger): requests, errors, fake's requests. */
#define SEED_REQ 12
#define SEED_ERR 2
#define SEED_FAKE 10

static int
start_gateway(void)
{
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
        " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
        " \"admin_key\": \"%s\",\n"
        " \"providers\": {\n"
        "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"%s\", \"timeout_ms\": 4000,\n"
        "   \"models\": {\"gpt-4.1\": {}, \"cheap\": {\"input_per_mtok\": "
        "0.5, \"output_per_mtok\": 1.0},\n"
        "    \"" ODD_MODEL "\": {\"input_per_mtok\": 1, "
        "\"output_per_mtok\": 1}}},\n"
        "  \"bad\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"%s\", \"headers\": {\"X-Fake\": \"status=503\"},\n"
        "   \"models\": {\"gpt-4.1\": {}}}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"main\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@fake\"]},\n"
        "  \"allbad\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@bad\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 2, \"backoff_ms\": 5,\n"
        "  \"circuit_failures\": 1000}\n"
        "}\n",
        workdir, ADMIN, fake.port, SECRET, fake.port, SECRET);
    char *path = e2e_write_temp("dashboard.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000);
    free(path);
    if (rc == 0)
        snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    return rc;
}

static long
chat(const char *model, const char *content)
{
    char url[256], body[512];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"%s\"}]}",
             model, content);
    struct e2e_resp r;
    long st = e2e_http("POST", url, body, NULL, 20000, &r) == 0 ? r.status : -1;
    e2e_resp_free(&r);
    return st;
}

static int
get(const char *path, const char *const *hdrs, struct e2e_resp *r)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    return e2e_http("GET", url, NULL, hdrs, 10000, r);
}

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap + 1);
    size_t k;
    while (p && (k = fread(p + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *q = realloc(p, 2 * cap + 1);
            if (!q) {
                free(p);
                p = NULL;
                break;
            }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        *len = n;
    }
    return p;
}

/* Occurrences of needle in hay, case-insensitive. */
static int
count_ci(const char *hay, const char *needle)
{
    int n = 0;
    size_t nl = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (!strncasecmp(p, needle, nl))
            n++;
    return n;
}

/* "'sha256-BASE64'" of the text between open and close. */
static int
block_hash(const char *page, const char *open, const char *close, char *out,
           size_t outlen)
{
    const char *a = strstr(page, open);
    if (!a)
        return -1;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b)
        return -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(a, (size_t)(b - a), md, &mdlen, EVP_sha256(), NULL))
        return -1;
    unsigned char b64[64];
    EVP_EncodeBlock(b64, md, (int)mdlen);
    snprintf(out, outlen, "'sha256-%s'", (const char *)b64);
    return 0;
}

/* Markup outside the script and style blocks, with an inline event
 * handler attribute (on...=) or an element that loads something. */
static int
markup_is_inert(const char *page)
{
    const char *s = strstr(page, "<script>"), *e = strstr(page, "</script>");
    const char *ss = strstr(page, "<style>"), *se = strstr(page, "</style>");
    int ok = 1;
    for (const char *p = page; *p; p++) {
        if ((s && p >= s && p < e) || (ss && p >= ss && p < se))
            continue;
        if (p[0] == ' ' || p[0] == '\n') {
            const char *q = p + 1;
            if ((q[0] == 'o' || q[0] == 'O') && (q[1] == 'n' || q[1] == 'N')) {
                q += 2;
                while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z'))
                    q++;
                if (*q == '=' && q > p + 3) {
                    fprintf(stderr, "  inline handler at: %.40s\n", p + 1);
                    ok = 0;
                }
            }
        }
    }
    static const char *const loaders[] = {"<link", "<img", "<iframe",
                                          "<object", "<embed", "<base",
                                          "<form action", " src=", " href=",
                                          "url(", "@import", NULL};
    for (int i = 0; loaders[i]; i++)
        if (count_ci(page, loaders[i])) {
            fprintf(stderr, "  page holds '%s'\n", loaders[i]);
            ok = 0;
        }
    return ok;
}

static void
make_traffic(void)
{
    const char *words[] = {"hello", "how are you", "tell me a story",
                           "<b>bold</b> & \\\"quoted\\\""};
    for (int i = 0; i < 6; i++) {
        long st = chat("main", words[i % 4]);
        T_EQ_INT(st, 200);
        n_ok += st == 200;
    }
    for (int i = 0; i < 3; i++) {
        long st = chat("cheap", "cheap one");
        T_EQ_INT(st, 200);
        n_ok += st == 200;
    }
    long st = chat(ODD_MODEL, "odd");
    T_EQ_INT(st, 200);
    n_ok += st == 200;
    for (int i = 0; i < 2; i++) {
        st = chat("allbad", "this fails");
        T_CHECK(st >= 500);
        n_err += st >= 500;
    }
}

static void
test_page(void)
{
    struct e2e_resp r;
    char h[1024];
    T_EQ_INT(get("/dashboard", NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    const char *ct = e2e_header(&r, "Content-Type", h, sizeof(h));
    T_CHECK(ct && !strncasecmp(ct, "text/html", 9));
    T_CHECK(ct && strstr(ct, "utf-8"));
    T_EQ_STR(e2e_header(&r, "X-Content-Type-Options", h, sizeof(h)),
             "nosniff");
    T_CHECK(r.body_len > 2000 && r.body_len == strlen(r.body));

    /* The generated constant is the committed page, byte for byte. */
    size_t flen = 0;
    char *file = read_file("gateway/dashboard.html", &flen);
    if (file) {
        T_EQ_INT(flen, r.body_len);
        T_CHECK(flen == r.body_len && !memcmp(file, r.body, flen));
        free(file);
    } else {
        fprintf(stderr, "  (gateway/dashboard.html not found from the "
                        "working directory; comparison skipped)\n");
    }

    /* Self-contained: no URL of any host, nothing that loads. */
    T_EQ_INT(count_ci(r.body, "http://"), 0);
    T_EQ_INT(count_ci(r.body, "https://"), 0);
    T_EQ_INT(count_ci(r.body, "<script"), 1);
    T_EQ_INT(count_ci(r.body, "<style"), 1);
    T_CHECK(markup_is_inert(r.body));
    /* Data goes in as text only. */
    T_EQ_INT(count_ci(r.body, "innerHTML"), 0);
    T_EQ_INT(count_ci(r.body, "outerHTML"), 0);
    T_EQ_INT(count_ci(r.body, "insertAdjacentHTML"), 0);
    T_EQ_INT(count_ci(r.body, "document.write"), 0);
    T_EQ_INT(count_ci(r.body, "eval("), 0);
    T_EQ_INT(count_ci(r.body, "new Function"), 0);
    /* The key: sessionStorage, never localStorage or a cookie. */
    T_CHECK(count_ci(r.body, "sessionStorage") > 0);
    T_EQ_INT(count_ci(r.body, "localStorage"), 0);
    T_EQ_INT(count_ci(r.body, "document.cookie"), 0);
    /* It refreshes itself and reads the two documented APIs. */
    T_CHECK(strstr(r.body, "REFRESH_MS = 10000") != NULL);
    T_CHECK(strstr(r.body, "'v1/usage?since='") != NULL);
    T_CHECK(strstr(r.body, "'admin/providers'") != NULL);

    /* The policy: nothing but the page's own blocks and its origin. */
    const char *csp = e2e_header(&r, "Content-Security-Policy", h, sizeof(h));
    T_CHECK(csp != NULL);
    if (csp) {
        char want[128];
        T_CHECK(strstr(csp, "default-src 'none'") != NULL);
        T_CHECK(strstr(csp, "connect-src 'self'") != NULL);
        T_CHECK(strstr(csp, "frame-ancestors 'none'") != NULL);
        T_CHECK(strstr(csp, "base-uri 'none'") != NULL);
        T_CHECK(strstr(csp, "form-action 'none'") != NULL);
        T_EQ_INT(count_ci(csp, "unsafe-"), 0);
        T_EQ_INT(count_ci(csp, "http"), 0);
        T_EQ_INT(count_ci(csp, "*"), 0);
        T_EQ_INT(count_ci(csp, "data:"), 0);
        T_EQ_INT(block_hash(r.body, "<script>", "</script>", want,
                            sizeof(want)),
                 0);
        char dir[192];
        snprintf(dir, sizeof(dir), "script-src %s;", want);
        T_CHECK(strstr(csp, dir) != NULL);
        T_EQ_INT(block_hash(r.body, "<style>", "</style>", want,
                            sizeof(want)),
                 0);
        snprintf(dir, sizeof(dir), "style-src %s;", want);
        T_CHECK(strstr(csp, dir) != NULL);
    }
    e2e_resp_free(&r);

    /* A query string does not matter; the page needs no key; other methods
     * are refused. */
    const char *bad_key[] = {"Authorization: Bearer sk-llmux-nope", NULL};
    T_EQ_INT(get("/dashboard?x=1", bad_key, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    char url[256];
    snprintf(url, sizeof(url), "%s/dashboard", base);
    T_EQ_INT(e2e_http("POST", url, "{}", NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 405);
    T_CHECK(strstr(r.body, "\"error\"") != NULL);
    e2e_resp_free(&r);
    T_EQ_INT(get("/dashboard/x", NULL, &r), 0);
    T_EQ_INT(r.status, 404);
    e2e_resp_free(&r);
}

static int
has_number(const json_t *o, const char *k)
{
    return json_is_number(json_object_get(o, k));
}

/* The APIs answer what the page reads, in the forms it asks them. */
static void
test_apis_the_page_reads(void)
{
    struct e2e_resp r;
    long long now = (long long)time(NULL) * 1000;
    long long step = 3600000, end = (now / step + 1) * step;
    char path[256];
    snprintf(path, sizeof(path), "/v1/usage?since=%lld&until=%lld",
             end - 24 * step, end);
    T_EQ_INT(get(path, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    json_t *row = json_array_get(json_object_get(o, "data"), 0);
    T_CHECK(json_is_object(row));
    T_CHECK(json_is_string(json_object_get(row, "group")));
    T_EQ_INT(json_integer_value(json_object_get(row, "requests")),
             SEED_REQ + browser_requests + n_ok + n_err);
    T_EQ_INT(json_integer_value(json_object_get(row, "errors")),
             SEED_ERR + n_err);
    T_CHECK(has_number(row, "prompt_tokens") &&
            has_number(row, "completion_tokens") &&
            has_number(row, "cost_usd") && has_number(row, "p50_ms") &&
            has_number(row, "p95_ms"));
    T_CHECK(json_number_value(json_object_get(row, "cost_usd")) > 0);
    json_decref(o);
    e2e_resp_free(&r);

    snprintf(path, sizeof(path),
             "/v1/usage?since=%lld&until=%lld&group_by=provider",
             end - 24 * step, end);
    T_EQ_INT(get(path, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    o = json_loads(r.body, 0, NULL);
    size_t i;
    json_t *g;
    int fake_rows = 0;
    json_array_foreach(json_object_get(o, "data"), i, g) {
        const char *name = json_string_value(json_object_get(g, "group"));
        if (name && !strcmp(name, "fake")) {
            fake_rows++;
            T_EQ_INT(json_integer_value(json_object_get(g, "requests")),
                     SEED_FAKE + browser_requests + n_ok);
        }
    }
    T_EQ_INT(fake_rows, 1);
    json_decref(o);
    e2e_resp_free(&r);

    /* A bucket with nothing in it: an empty list, not an error. */
    snprintf(path, sizeof(path),
             "/v1/usage?since=%lld&until=%lld&group_by=model",
             end - 48 * step, end - 47 * step);
    T_EQ_INT(get(path, NULL, &r), 0);
    T_EQ_INT(r.status, 200);
    o = json_loads(r.body, 0, NULL);
    T_CHECK(json_is_array(json_object_get(o, "data")));
    T_EQ_INT(json_array_size(json_object_get(o, "data")), 0);
    json_decref(o);
    e2e_resp_free(&r);

    /* Provider health: the admin key only. */
    T_EQ_INT(get("/admin/providers", NULL, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    const char *adm[] = {"Authorization: Bearer " ADMIN, NULL};
    T_EQ_INT(get("/admin/providers", adm, &r), 0);
    T_EQ_INT(r.status, 200);
    o = json_loads(r.body, 0, NULL);
    int seen = 0;
    json_array_foreach(json_object_get(o, "data"), i, g) {
        T_CHECK(json_is_string(json_object_get(g, "target")));
        T_CHECK(json_is_string(json_object_get(g, "state")));
        T_CHECK(json_object_get(g, "ewma_ms") && json_object_get(g, "p95_ms"));
        T_CHECK(has_number(g, "error_rate") && has_number(g, "requests"));
        seen++;
    }
    T_CHECK(seen >= 2);
    json_decref(o);
    e2e_resp_free(&r);
}

/* ---- the seeded ledger ------------------------------------------------
 *
 * Written through pricing's ledger before llmux starts, ten minutes ago,
 * all anonymous (so the admin key and an anonymous caller see them):
 *
 *   fake  gpt-4.1    6 x 200  1000 prompt  500 completion  2.00/8.00
 *                             = 2e9 + 4e9 pUSD = $0.006 each
 *   fake  cheap      3 x 200  2000 prompt 1000 completion  0.50/1.00
 *                             = 1e9 + 1e9 pUSD = $0.002 each
 *   fake  ODD_MODEL  1 x 200   100 prompt  100 completion  1.00/1.00
 *                             = $0.0002
 *   bad   gpt-4.1    2 x 502    50 prompt    0 completion  $0 (errors)
 *
 * Totals: 12 requests, 2 errors, $0.0422; 12,200 prompt and 6,100
 * completion tokens.  What if at gpt-4.1 (2.00/8.00): 12200 x 2e6 + 6100 x
 * 8e6 = 73.2e9 pUSD = $0.0732 (+$0.031); at cheap@fake: 12200 x 5e5 +
 * 6100 x 1e6 = 12.2e9 = $0.0122 (-$0.03).
 */
static int
seed_ledger(void)
{
    char db[512], err[256];
    snprintf(db, sizeof(db), "%s/ledger.db", workdir);
    struct pr_ledger *l = NULL;
    if (pr_ledger_open(db, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "seed: %s\n", err);
        return -1;
    }
    struct {
        const char *route, *provider, *model;
        int n, status;
        int64_t prompt, completion, cost;
    } kinds[] = {
        {"main", "fake", "gpt-4.1", 6, 200, 1000, 500, 6000000000LL},
        {NULL, "fake", "cheap", 3, 200, 2000, 1000, 2000000000LL},
        {NULL, "fake", ODD_MODEL, 1, 200, 100, 100, 200000000LL},
        {"allbad", "bad", "gpt-4.1", 2, 502, 50, 0, 0},
    };
    int64_t ts = gx_now_ms() - 10 * 60 * 1000;
    int seq = 0, rc = 0;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (int i = 0; i < kinds[k].n; i++) {
            char id[32];
            snprintf(id, sizeof(id), "seed-%d", seq++);
            struct pr_usage_row row = {
                .ts_ms = ts + seq, .request_id = id, .key_id = -1,
                .route = kinds[k].route, .provider = kinds[k].provider,
                .model = kinds[k].model, .status = kinds[k].status,
                .attempts = 1, .prompt_tokens = kinds[k].prompt,
                .completion_tokens = kinds[k].completion,
                .cost_pusd = kinds[k].cost, .latency_ms = 120 + 40 * i,
                .ttft_ms = 80, .usage_source = "upstream",
                .error = kinds[k].status >= 400 ? "upstream 502" : NULL};
            if (pr_ledger_submit(l, &row, NULL, NULL) != GX_OK)
                rc = -1;
        }
    pr_ledger_close(l); /* commits everything queued */
    return rc;
}

/* ---- a real browser: tests/clients/dashboard.mjs ------------------------ */

static void
test_in_browser(void)
{
    /* What the page must show for the seeded ledger (formatted as a
     * reader sees it; the what-if figures are the exact decimals). */
    const char *expect =
        "{\"tiles\": {\"Requests\": \"12\", \"Errors\": \"2\","
        " \"Spend\": \"$0.04\"},"
        " \"providers\": {"
        "  \"fake\": [\"10\", \"0\", \"0.0%\", \"12,100\", \"6,100\","
        " \"$0.04\"],"
        "  \"bad\": [\"2\", \"2\", \"100.0%\", \"100\", \"0\", \"$0\"]},"
        " \"models\": {\"gpt-4.1\": [\"8\", \"2\"], \"cheap\": [\"3\", \"0\"],"
        "  \"<i>x</i>&amp;\": [\"1\", \"0\"]},"
        " \"targets\": [\"gpt-4.1@fake\", \"gpt-4.1@bad\", \"cheap@fake\"],"
        " \"whatif\": {\"note\": \"Actual spend $0.0422 for 12 requests: "
        "12,200 prompt tokens (0 cached, 0 cache writes) and 6,100 completion"
        " tokens.\","
        "  \"costs\": {\"gpt-4.1\": [\"$0.0732\", \"+$0.031\"],"
        "   \"gpt-4.1@fake\": [\"$0.0732\", \"+$0.031\"],"
        "   \"cheap@fake\": [\"$0.0122\", \"\u2212$0.03\"]}}}";
    T_EQ_INT(system("mkdir -p build/artifacts"), 0);
    char e_base[200], e_key[200], e_expect[2048];
    snprintf(e_base, sizeof(e_base), "LLMUX_BASE=%s", base);
    snprintf(e_key, sizeof(e_key), "LLMUX_ADMIN_KEY=%s", ADMIN);
    snprintf(e_expect, sizeof(e_expect), "LLMUX_EXPECT=%s", expect);
    const char *env[] = {e_base, e_key, e_expect,
                         "LLMUX_SCREENSHOT=build/artifacts/dashboard.png",
                         NULL};
    char *out = NULL;
    int rc = e2e_node("dashboard.mjs", env, 240, &out);
    if (rc == E2E_NO_CLIENTS) {
        fprintf(stderr, "  skipped: tests/clients not installed (make "
                        "clients)\n");
        T_CHECK(!getenv("LLMUX_REQUIRE_CLIENTS"));
        free(out);
        return;
    }
    if (rc != 0 || !out || !strstr(out, "checks passed"))
        fprintf(stderr, "%s\n", out ? out : "(no output)");
    T_EQ_INT(rc, 0);
    T_CHECK(out && strstr(out, "checks passed") && !strstr(out, "FAIL "));
    if (out) {
        const char *l = strstr(out, "dashboard.mjs:");
        fprintf(stderr, "  %.*s\n", l ? (int)strcspn(l, "\n") : 0, l ? l : "");
    }
    free(out);
    browser_requests = 1; /* its refresh check sends one */
    /* The artifact: a PNG. */
    size_t n = 0;
    char *png = read_file("build/artifacts/dashboard.png", &n);
    T_CHECK(png && n > 1000 && !memcmp(png, "\x89PNG", 4));
    if (png)
        fprintf(stderr, "  screenshot: build/artifacts/dashboard.png\n");
    free(png);
}

static void
rm_rf(const char *dir)
{
    /* Only our own temp dir, made by e2e_temp_dir under /tmp. */
    if (!dir || strncmp(dir, "/tmp/llmux-test-", 16) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    workdir = e2e_temp_dir();
    if (seed_ledger() != 0 || e2e_start_fake(&fake) != 0 ||
        start_gateway() != 0) {
        fprintf(stderr, "could not seed the ledger or start the fake "
                        "provider or llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_in_browser);
    T_RUN(make_traffic);
    T_RUN(test_page);
    T_RUN(test_apis_the_page_reads);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    rm_rf(workdir);
    free(workdir);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
