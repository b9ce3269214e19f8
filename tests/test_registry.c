/*
 * The registry of provider instances (providers/registry.c with the local
 * kind's instances, providers/local.c), without sockets: real configs
 * (cfg_load_string) naming the real stories260K model.  A registry made
 * from a config has an instance per local provider and none for HTTP
 * kinds; one made with the previous registry shares every local instance
 * whose provider is unchanged and makes a new one for a changed provider
 * (a setting, another file, or the same path rewritten on disk); an added
 * provider gets one, a dropped one is let go; a shared instance outlives
 * the registry that made it; a model that does not load fails the whole
 * registry naming the provider and the file, and leaves prev untouched;
 * pv_registry_drain returns once every instance is freed.
 */
#include "../providers/providers_int.h"
#include "harness.h"
#include "lib/e2e.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static char model[1024], copy[1024];

/* A config with (extra_b) a local provider "b" on the stories file, the
 * local provider "a" on path (parallel p), and an openai provider "h". */
static struct cfg *
config(const char *path, int p, int extra_b)
{
    char text[4096], err[512], bp[1400] = "";
    if (extra_b)
        snprintf(bp, sizeof(bp),
                 " \"b\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
                 "       \"threads\": 1, \"context\": 128,\n"
                 "       \"models\": {\"mb\": {}}},\n",
                 model);
    snprintf(text, sizeof(text),
             "{\"database\": \":memory:\", \"providers\": {\n%s"
             " \"a\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "       \"threads\": 1, \"context\": 128, \"parallel\": %d,\n"
             "       \"models\": {\"ma\": {}}},\n"
             " \"h\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:9/v1\", \"api_key\": \"k\",\n"
             "       \"models\": {\"gpt-4.1\": {}}}}}\n",
             bp, path, p);
    struct cfg *c = NULL;
    if (cfg_load_string(text, "registry.json", &c, err, sizeof(err)) !=
        GX_OK) {
        fprintf(stderr, "config: %s\n", err);
        return NULL;
    }
    return c;
}

static struct pv_inst *
inst(const struct pv_registry *r, const struct cfg *c, const char *name)
{
    const struct cfg_provider *p = cfg_provider_find(c, name);
    return p ? pv_registry_get(r, p) : NULL;
}

static struct pv_registry *
made(const struct cfg *c, const struct pv_registry *prev)
{
    struct pv_registry *r = NULL;
    char err[512] = "";
    enum gx_status st = c ? pv_registry_new(c, prev, &r, err, sizeof(err))
                          : GX_EINVAL;
    if (st != GX_OK)
        fprintf(stderr, "registry: %s\n", err);
    return st == GX_OK ? r : NULL;
}

static void
test_share_and_replace(void)
{
    struct cfg *c1 = config(model, 1, 0), *c2 = config(model, 1, 0),
               *c3 = config(model, 2, 1), *c4 = config(model, 2, 0);
    struct pv_registry *r1 = made(c1, NULL);
    T_CHECK(r1 != NULL);
    T_CHECK(inst(r1, c1, "a") != NULL);
    T_CHECK(inst(r1, c1, "h") == NULL); /* HTTP kinds have none */
    T_EQ_INT(pv_local_count(r1), 1);
    struct pv_local_stat st;
    pv_local_stats(r1, 0, &st);
    T_EQ_STR(st.provider, "a");
    T_EQ_STR(st.model, "ma");
    pv_local_stats(r1, 1, &st); /* past the last: zeroed */
    T_CHECK(st.provider == NULL);

    /* the same config again: the running instance is shared */
    struct pv_registry *r2 = made(c2, r1);
    T_CHECK(r2 && inst(r2, c2, "a") == inst(r1, c1, "a"));
    /* a changed setting: a new instance; an added provider: one more */
    struct pv_registry *r3 = made(c3, r2);
    T_CHECK(r3 && inst(r3, c3, "a") && inst(r3, c3, "a") != inst(r2, c2, "a"));
    T_CHECK(inst(r3, c3, "b") != NULL);
    T_EQ_INT(pv_local_count(r3), 2);
    pv_local_stats(r3, 0, &st); /* config order */
    T_EQ_STR(st.provider, "b");
    T_EQ_STR(st.model, "mb");
    /* the old registries go; r3's instances live on, r2's "a" was shared
     * with r1 only and goes with them */
    pv_registry_free(r1);
    pv_registry_free(r2);
    pv_local_stats(r3, 1, &st);
    T_EQ_STR(st.provider, "a");
    T_EQ_INT(st.active, 0);
    /* "b" dropped, "a" unchanged: shared again */
    struct pv_registry *r4 = made(c4, r3);
    T_CHECK(r4 && inst(r4, c4, "a") == inst(r3, c3, "a"));
    T_EQ_INT(pv_local_count(r4), 1);
    pv_registry_free(r3);
    pv_registry_free(r4);
    pv_registry_drain(); /* every instance freed: returns (else the
                            suite's timeout fails the binary) */
    cfg_free(c1);
    cfg_free(c2);
    cfg_free(c3);
    cfg_free(c4);
}

/* The same path with another file behind it is another model. */
static void
test_file_changed_on_disk(void)
{
    struct cfg *c = config(copy, 1, 0), *c2 = config(copy, 1, 0);
    struct pv_registry *r1 = made(c, NULL);
    T_CHECK(r1 != NULL);
    /* rewrite the file's time as a deploy that replaced it would */
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    T_EQ_INT(utimes(copy, tv), 0);
    struct pv_registry *r2 = made(c2, r1);
    T_CHECK(r2 && inst(r2, c2, "a") != inst(r1, c, "a"));
    pv_registry_free(r1);
    pv_registry_free(r2);
    pv_registry_drain();
    cfg_free(c);
    cfg_free(c2);
}

static void
test_refused(void)
{
    struct cfg *c = config(model, 1, 0);
    struct pv_registry *r1 = made(c, NULL);
    struct pv_inst *a = inst(r1, c, "a");
    /* a missing file: the provider and the file named, nothing made */
    struct cfg *bad = config("/nonexistent/x.gguf", 1, 0);
    struct pv_registry *r2 = (struct pv_registry *)1;
    char err[512] = "";
    T_EQ_INT(pv_registry_new(bad, r1, &r2, err, sizeof(err)), GX_EINVAL);
    T_CHECK(r2 == (struct pv_registry *)1); /* untouched */
    T_EQ_STR(err, "provider a: model_path /nonexistent/x.gguf: No such file "
                  "or directory");
    /* a file that is not a model; b (good) was loaded first and is let go */
    char junk[1100];
    snprintf(junk, sizeof(junk), "%s.junk", copy);
    FILE *f = fopen(junk, "w");
    if (f) {
        fputs("not a model", f);
        fclose(f);
    }
    struct cfg *bad2 = config(junk, 1, 1);
    T_EQ_INT(pv_registry_new(bad2, r1, &r2, err, sizeof(err)), GX_EINVAL);
    T_CHECK(strncmp(err, "provider a: ", 12) == 0 && strstr(err, junk));
    /* prev still serves: its instance is the same and counts */
    T_CHECK(inst(r1, c, "a") == a);
    T_EQ_INT(pv_local_count(r1), 1);
    pv_registry_free(r1);
    pv_registry_drain();
    unlink(junk);
    cfg_free(c);
    cfg_free(bad);
    cfg_free(bad2);
}

int
main(void)
{
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(copy, sizeof(copy), "%s/copy.gguf", dir ? dir : "/tmp");
    free(dir);
    char cmd[2400];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", model, copy);
    if (access(model, R_OK) != 0 || system(cmd) != 0) {
        printf("missing %s\n0 passed, 1 failed\n", model);
        return 1;
    }
    T_RUN(test_share_and_replace);
    T_RUN(test_file_changed_on_disk);
    T_RUN(test_refused);
    unlink(copy);
    return T_END();
}
