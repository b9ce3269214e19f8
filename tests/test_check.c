/*
 * test_check: end-to-end `llmux check` on the real binary ($LLMUX_BIN, set
 * by tests/run.sh; build/release/llmux otherwise).  Writes good and bad
 * configs into a fresh temp dir, runs the binary with a controlled
 * environment, and checks exit codes (0 ok, 1 bad config, 2 usage), that
 * errors name FILE:LINE:COL and the JSON path, and that no secret is ever
 * printed.  Every child is bounded: killed after 30 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char g_dir[64];
static const char *g_bin;

struct run {
    int code; /* exit code, or 128+signal */
    char out[16384];
    char err[16384];
};

static void
slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/*
 * Runs g_bin with args (NULL-terminated, without argv[0]) and an
 * environment of only PATH, ASAN/UBSAN options and env (NAME=VALUE...,
 * NULL-terminated).
 */
static void
run_llmux(struct run *r, const char *const *args, const char *const *env)
{
    char outp[128], errp[128];
    snprintf(outp, sizeof(outp), "%s/stdout", g_dir);
    snprintf(errp, sizeof(errp), "%s/stderr", g_dir);
    const char *argv[32], *envp[32];
    size_t na = 0, ne = 0;
    argv[na++] = g_bin;
    for (size_t k = 0; args[k] && na < 31; k++)
        argv[na++] = args[k];
    argv[na] = NULL;
    static const char *const keep[] = {"PATH", "ASAN_OPTIONS",
                                       "UBSAN_OPTIONS", "LSAN_OPTIONS", NULL};
    static char keepbuf[4][1024];
    for (size_t k = 0; keep[k]; k++) {
        const char *v = getenv(keep[k]);
        if (v) {
            snprintf(keepbuf[k], sizeof(keepbuf[k]), "%s=%s", keep[k], v);
            envp[ne++] = keepbuf[k];
        }
    }
    for (size_t k = 0; env && env[k] && ne < 31; k++)
        envp[ne++] = env[k];
    envp[ne] = NULL;

    r->code = -1;
    r->out[0] = r->err[0] = '\0';
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execve(g_bin, (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    int status = 0;
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return;
        if (waited == 3000) { /* 30 s: a hang is a failure, not a wait */
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        nanosleep(&nap, NULL);
    }
    r->code = WIFEXITED(status) ? WEXITSTATUS(status)
                                : 128 + WTERMSIG(status);
    slurp(outp, r->out, sizeof(r->out));
    slurp(errp, r->err, sizeof(r->err));
}

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/* Writes text to DIR/name and returns the path (static buffer per slot). */
static const char *
cfgfile(int slot, const char *name, const char *text)
{
    static char paths[8][256];
    snprintf(paths[slot], sizeof(paths[slot]), "%s/%s", g_dir, name);
    write_file(paths[slot], text);
    return paths[slot];
}

static const char *const good_text =
    "{\n"
    "  \"listen\": \"127.0.0.1:18080\",\n"
    "  \"admin_key\": \"${T_ADMIN}\",\n"
    "  \"providers\": {\n"
    "    \"up\": {\n"
    "      \"kind\": \"openai\",\n"
    "      \"base_url\": \"http://127.0.0.1:9/v1\",\n"
    "      \"api_key\": \"${T_UP_KEY}\",\n"
    "      \"headers\": { \"X-Token\": \"hdr-secret-77\" },\n"
    "      \"models\": {\n"
    "        \"gpt-4.1\": {},\n"
    "        \"cheap\": { \"upstream\": \"c-1\", \"input_per_mtok\": 0.28, "
    "\"output_per_mtok\": 0.42 }\n"
    "      }\n"
    "    }\n"
    "  },\n"
    "  \"routes\": {\n"
    "    \"auto\": { \"policy\": \"cost\", \"targets\": [\"cheap@up\", "
    "\"gpt-4.1@up\"] }\n"
    "  }\n"
    "}\n";

static void
test_good(void)
{
    const char *path = cfgfile(0, "good.json", good_text);
    struct run r;
    const char *args[] = {"check", "--config", path, NULL};
    const char *env[] = {"T_ADMIN=adm-secret-55", "T_UP_KEY=sk-up-secret-99",
                         NULL};
    run_llmux(&r, args, env);
    T_EQ_INT(r.code, 0);
    T_CHECK(strstr(r.out, "route auto: policy cost, targets cheap@up, "
                          "gpt-4.1@up") != NULL);
    T_CHECK(strstr(r.out, "api_key set") != NULL);
    T_CHECK(strstr(r.out, "admin_key set") != NULL);
    T_CHECK(strstr(r.out, "input 0.28") != NULL);
    T_CHECK(strstr(r.out, "OK") != NULL);
    /* No secret anywhere: keys, admin key, header values. */
    T_CHECK(strstr(r.out, "sk-up-secret-99") == NULL);
    T_CHECK(strstr(r.out, "adm-secret-55") == NULL);
    T_CHECK(strstr(r.out, "hdr-secret-77") == NULL);
    T_CHECK(strstr(r.err, "secret") == NULL);
    if (r.code != 0)
        fprintf(stderr, "  stderr: %s\n", r.err);

    /* --config=FILE and -c FILE work too. */
    char eq[300];
    snprintf(eq, sizeof(eq), "--config=%s", path);
    const char *args2[] = {"check", eq, NULL};
    run_llmux(&r, args2, env);
    T_EQ_INT(r.code, 0);
    const char *args3[] = {"check", "-c", path, NULL};
    run_llmux(&r, args3, env);
    T_EQ_INT(r.code, 0);

    /* Same file, the secret's variable unset: exit 1 naming it. */
    const char *env2[] = {"T_ADMIN=adm-secret-55", NULL};
    run_llmux(&r, args, env2);
    T_EQ_INT(r.code, 1);
    char want[400];
    snprintf(want, sizeof(want),
             "%s:8:18: providers.up.api_key: environment variable T_UP_KEY "
             "is not set",
             path);
    T_CHECK(strncmp(r.err, want, strlen(want)) == 0);
    if (strncmp(r.err, want, strlen(want)))
        fprintf(stderr, "  want %s\n  got  %s\n", want, r.err);
    T_CHECK(r.out[0] == '\0');
}

/* Runs check on text, expects exit 1 and stderr starting with
 * "FILE:LINE:COL: path: " followed (somewhere) by reason. */
static void
expect_bad(int tline, const char *name, const char *text, int line, int col,
           const char *path, const char *reason)
{
    const char *file = cfgfile(1, name, text);
    struct run r;
    const char *args[] = {"check", "--config", file, NULL};
    const char *env[] = {"T_UP_KEY=k", NULL};
    run_llmux(&r, args, env);
    char want[512];
    snprintf(want, sizeof(want), "%s:%d:%d: %s: ", file, line, col, path);
    int ok = r.code == 1 && strncmp(r.err, want, strlen(want)) == 0 &&
             strstr(r.err, reason) != NULL;
    T_CHECK(ok);
    if (!ok)
        fprintf(stderr, "  (line %d) exit %d, want \"%s...%s\"\n  got %s\n",
                tline, r.code, want, reason, r.err);
}
#define EXPECT_BAD(name, text, line, col, path, reason)                      \
    expect_bad(__LINE__, (name), (text), (line), (col), (path), (reason))

static void
test_bad(void)
{
    EXPECT_BAD("unknown-key.json",
               "{\n"
               "  \"providers\": {\n"
               "    \"up\": {\n"
               "      \"kind\": \"openai\", \"base_url\": \"http://h\",\n"
               "      \"timout_ms\": 100,\n"
               "      \"models\": [\"gpt-4.1\"]\n"
               "    }\n"
               "  }\n"
               "}\n",
               5, 7, "providers.up.timout_ms",
               "unknown key 'timout_ms' (did you mean 'timeout_ms'?)");
    EXPECT_BAD("bad-target.json",
               "{\n"
               "  \"providers\": {\n"
               "    \"up\": { \"kind\": \"openai\", \"base_url\": "
               "\"http://h\", \"models\": [\"gpt-4.1\"] }\n"
               "  },\n"
               "  \"routes\": {\n"
               "    \"auto\": { \"targets\": [\"gpt-4.1@up\", "
               "\"gpt-5@up\"] }\n"
               "  }\n"
               "}\n",
               6, 41, "routes.auto.targets[1]",
               "provider 'up' has no model 'gpt-5'");
    EXPECT_BAD("price.json",
               "{\"providers\": {\"up\": {\"kind\": \"openai\", "
               "\"base_url\": \"http://h\",\n"
               "  \"models\": {\"m\": {\"input_per_mtok\": \"cheap\", "
               "\"output_per_mtok\": 1}}}}}\n",
               2, 38, "providers.up.models.m.input_per_mtok",
               "expected a number, got a string");
    EXPECT_BAD("syntax.json", "{\n  \"providers\": {\n    \"up\": }\n}\n", 3,
               11, "invalid JSON", "unexpected token");
    EXPECT_BAD("dup.json",
               "{\"providers\": {\n"
               "  \"l\": {\"kind\": \"local\", \"model_path\": \"a\"},\n"
               "  \"l\": {\"kind\": \"local\", \"model_path\": \"b\"}}}\n",
               3, 3, "providers.l", "duplicate key 'l'");
    EXPECT_BAD("weights.json",
               "{\"providers\": {\"l\": {\"kind\": \"local\", "
               "\"model_path\": \"a\"}},\n"
               " \"routes\": {\"w\": {\"policy\": \"weighted\",\n"
               "   \"targets\": [\"local@l\"], \"weights\": [1, 2]}}}\n",
               3, 39, "routes.w.weights", "has 2 weights but targets has 1");
}

static void
test_usage_and_io(void)
{
    struct run r;
    const char *a1[] = {"check", NULL};
    run_llmux(&r, a1, NULL);
    T_EQ_INT(r.code, 2);
    T_CHECK(strstr(r.err, "usage: llmux check") != NULL);
    const char *a2[] = {"check", "--bogus", NULL};
    run_llmux(&r, a2, NULL);
    T_EQ_INT(r.code, 2);
    T_CHECK(strstr(r.err, "--bogus") != NULL);
    const char *a3[] = {"check", "--config", NULL};
    run_llmux(&r, a3, NULL);
    T_EQ_INT(r.code, 2);
    const char *a4[] = {"check", "--help", NULL};
    run_llmux(&r, a4, NULL);
    T_EQ_INT(r.code, 0);
    T_CHECK(strstr(r.out, "usage: llmux check --config FILE") != NULL);

    char missing[256];
    snprintf(missing, sizeof(missing), "%s/does-not-exist.json", g_dir);
    const char *a5[] = {"check", "--config", missing, NULL};
    run_llmux(&r, a5, NULL);
    T_EQ_INT(r.code, 1);
    T_CHECK(strstr(r.err, missing) != NULL);

    /* The built-in defaults, from a controlled environment. */
    const char *a6[] = {"check", "--defaults", NULL};
    const char *env[] = {"OPENAI_API_KEY=sk-openai-secret-1",
                         "LLMUX_MODEL=/m/tiny.gguf", NULL};
    run_llmux(&r, a6, env);
    T_EQ_INT(r.code, 0);
    T_CHECK(strstr(r.out, "provider openai: kind openai, base_url "
                          "https://api.openai.com/v1, api_key set") != NULL);
    T_CHECK(strstr(r.out, "route auto: policy cost, targets gpt-4.1@openai, "
                          "gpt-4.1-mini@openai; fallback local@local") !=
            NULL);
    T_CHECK(strstr(r.out, "sk-openai-secret-1") == NULL);
    const char *env2[] = {"LLMUX_LISTEN=bad", NULL};
    run_llmux(&r, a6, env2);
    T_EQ_INT(r.code, 1);
    T_CHECK(strstr(r.err, "LLMUX_LISTEN") != NULL);
}

/* The example configs in config/ check OK with their variables set. */
static void
test_examples(void)
{
    char root[512] = ".";
    if (access("config/llmux.example.json", R_OK) != 0) {
        /* $LLMUX_BIN is ROOT/build/MODE/llmux. */
        snprintf(root, sizeof(root), "%s", g_bin);
        for (int k = 0; k < 3; k++) {
            char *s = strrchr(root, '/');
            if (s)
                *s = '\0';
        }
    }
    char ex[600], loc[600];
    snprintf(ex, sizeof(ex), "%s/config/llmux.example.json", root);
    snprintf(loc, sizeof(loc), "%s/config/llmux.local.json", root);
    T_CHECK(access(ex, R_OK) == 0);
    T_CHECK(access(loc, R_OK) == 0);

    struct run r;
    const char *args[] = {"check", "--config", ex, NULL};
    const char *env[] = {"LLMUX_ADMIN_KEY=adm-x-secret",
                         "RELAY_API_KEY=sk-relay-x-secret",
                         "LLMUX_MODEL=/m/tiny.gguf", NULL};
    run_llmux(&r, args, env);
    T_EQ_INT(r.code, 0);
    if (r.code)
        fprintf(stderr, "  %s", r.err);
    T_CHECK(strstr(r.out, "route auto: policy cost") != NULL);
    T_CHECK(strstr(r.out, "route fast: policy latency") != NULL);
    T_CHECK(strstr(r.out, "route gpt: policy priority") != NULL);
    T_CHECK(strstr(r.out, "route mix: policy weighted") != NULL);
    T_CHECK(strstr(r.out, "secret") == NULL);

    /* Without RELAY_API_KEY: the error names the path and the variable. */
    const char *env2[] = {"LLMUX_ADMIN_KEY=a", "LLMUX_MODEL=/m/tiny.gguf",
                          NULL};
    run_llmux(&r, args, env2);
    T_EQ_INT(r.code, 1);
    T_CHECK(strstr(r.err, ":12:18: providers.relay.api_key: environment "
                          "variable RELAY_API_KEY is not set") != NULL);

    const char *args2[] = {"check", "--config", loc, NULL};
    const char *env3[] = {"LLMUX_MODEL=/m/tiny.gguf", NULL};
    run_llmux(&r, args2, env3);
    T_EQ_INT(r.code, 0);
    if (r.code)
        fprintf(stderr, "  %s", r.err);
}

int
main(void)
{
    g_bin = getenv("LLMUX_BIN");
    if (!g_bin || !g_bin[0])
        g_bin = "build/release/llmux";
    T_CHECK(access(g_bin, X_OK) == 0);
    snprintf(g_dir, sizeof(g_dir), "/tmp/llmux-test-check-XXXXXX");
    if (!mkdtemp(g_dir)) {
        T_CHECK(0);
        return T_END();
    }
    T_RUN(test_good);
    T_RUN(test_bad);
    T_RUN(test_usage_and_io);
    T_RUN(test_examples);
    /* Clean the temp dir (only files we made). */
    static const char *const names[] = {
        "stdout",       "stderr",      "good.json",    "unknown-key.json",
        "bad-target.json", "price.json", "syntax.json", "dup.json",
        "weights.json", NULL};
    for (size_t k = 0; names[k]; k++) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", g_dir, names[k]);
        unlink(p);
    }
    rmdir(g_dir);
    return T_END();
}
