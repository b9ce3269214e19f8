/*
 * The llmux command line as a user runs it: top-level help and usage
 * errors, `prices`, `serve` argument errors.  Runs the real binary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "lib/e2e.h"

/* Runs "$LLMUX_BIN args" with stderr folded into stdout; returns the exit
 * code and a malloc'd copy of the output. */
static int
run(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1",
             e2e_env("LLMUX_BIN", "build/release/llmux"), args);
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0;
    char *buf = calloc(1, cap);
    if (p) {
        size_t k;
        while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0)
            n += k;
    }
    buf[n] = '\0';
    int st = p ? pclose(p) : -1;
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
test_top_level(void)
{
    char *o;
    T_EQ_INT(run("--help", &o), 0);
    T_CHECK(strstr(o, "serve") && strstr(o, "prices") && strstr(o, "usage"));
    free(o);
    T_EQ_INT(run("", &o), 2);
    free(o);
    T_EQ_INT(run("frobnicate", &o), 2);
    T_CHECK(strstr(o, "unknown command") != NULL);
    free(o);
    T_EQ_INT(run("serve --help", &o), 0);
    T_CHECK(strstr(o, "--listen") != NULL);
    free(o);
    T_EQ_INT(run("serve --workers 0", &o), 2);
    free(o);
    T_EQ_INT(run("serve --listen nonsense", &o), 2);
    free(o);
    T_EQ_INT(run("serve --bogus", &o), 2);
    free(o);
    T_EQ_INT(run("serve --config /nonexistent/llmux.json", &o), 1);
    T_CHECK(strstr(o, "/nonexistent/llmux.json") != NULL);
    free(o);
}

static void
test_prices(void)
{
    char *o;
    T_EQ_INT(run("prices --builtin", &o), 0);
    /* Published prices, USD per million tokens. */
    T_CHECK(strstr(o, "gpt-4.1 ") != NULL);
    const char *line = strstr(o, "\ngpt-4.1 ");
    T_CHECK(line && strstr(line, "2.00") && strstr(line, "8.00"));
    line = strstr(o, "\ndeepseek-v3.2 ");
    T_CHECK(line && strstr(line, "0.28") && strstr(line, "0.42"));
    line = strstr(o, "\nclaude-sonnet-4.5 ");
    T_CHECK(line && strstr(line, "3.00") && strstr(line, "15.00"));
    line = strstr(o, "\ngemini-2.5-flash ");
    T_CHECK(line && strstr(line, "0.30") && strstr(line, "2.50"));
    free(o);

    char *path = e2e_write_temp(
        "prices.json",
        "{\"require_keys\": false, \"providers\": {\"r\": {\"kind\": "
        "\"openai\", \"base_url\": \"http://127.0.0.1:9/v1\", \"api_key\": "
        "\"sk-secret-never-printed\", \"models\": {\"gpt-4.1\": {}, "
        "\"cheap\": {\"upstream\": \"deepseek-chat\", \"input_per_mtok\": "
        "0.42, \"output_per_mtok\": 2.5}}}}}\n");
    char args[512];
    snprintf(args, sizeof(args), "prices --config %s", path);
    T_EQ_INT(run(args, &o), 0);
    line = strstr(o, "\ncheap@r ");
    T_CHECK(line && strstr(line, "deepseek-chat") && strstr(line, "0.42") &&
            strstr(line, "2.50") && strstr(line, "config"));
    line = strstr(o, "\ngpt-4.1@r ");
    T_CHECK(line && strstr(line, "built-in"));
    T_CHECK(strstr(o, "sk-secret-never-printed") == NULL);
    free(o);
    free(path);
    T_EQ_INT(run("prices --nope", &o), 2);
    free(o);
}

int
main(void)
{
    T_RUN(test_top_level);
    T_RUN(test_prices);
    return T_END();
}
