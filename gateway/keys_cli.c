/*
 * keys_cli: `llmux keys create|list|revoke` on the keys table (DESIGN.md
 * section 4).  The database is --db FILE, else the "database" of
 * --config FILE, else llmux.db.  The schema is created or migrated by
 * opening the ledger once, so a fresh file works.
 *
 * create prints the secret alone on stdout (scripts: KEY=$(llmux keys
 * create --name x)) and a note on stderr; it is never stored or shown
 * again.  A running server picks up keys created or revoked here within a
 * few seconds (its aux thread re-reads the table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "gateway.h"
#include "gw_int.h"

static void
keys_usage(FILE *f)
{
    fputs("usage: llmux keys create --name NAME [--budget-usd X] [--rpm N]\n"
          "                         [--tpm N] [--models a,b] "
          "[--expires-days N]\n"
          "       llmux keys list [--json]\n"
          "       llmux keys revoke ID\n"
          "each takes [--db FILE] or [--config FILE] (default llmux.db)\n"
          "\n"
          "create prints the new key once, on stdout; only its SHA-256 is\n"
          "stored.  --models limits the key to those routes/models.\n",
          f);
}

/* Strict decimal integer in [lo, hi]. */
static int
parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int
parse_num(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= 0))
        return -1;
    *out = v;
    return 0;
}

static int
cmd_create(const char *db, json_t *opts)
{
    struct pr_key spec;
    char models[4096], err[512];
    if (gw_key_spec_from_json(opts, &spec, models, sizeof(models), err,
                              sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux keys create: %s\n", err);
        return 2;
    }
    char secret[GW_KEY_LEN + 1];
    if (gw_key_generate(secret, sizeof(secret)) != GX_OK) {
        fprintf(stderr, "llmux keys create: no randomness available\n");
        return 1;
    }
    gw_key_hash(secret, strlen(secret), spec.hash, NULL);
    spec.created_ms = gx_now_ms();
    int64_t id = 0;
    if (gw_keys_db_create(db, &spec, &id, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux keys create: %s\n", err);
        OPENSSL_cleanse(secret, sizeof(secret));
        return 1;
    }
    char where[1024];
    pr_store_redact(db, where, sizeof(where));
    fprintf(stderr,
            "llmux: key %lld \"%s\" created in %s; it is shown only this "
            "once:\n",
            (long long)id, spec.name, where);
    printf("%s\n", secret);
    fflush(stdout);
    OPENSSL_cleanse(secret, sizeof(secret));
    return 0;
}

static void
print_num(const json_t *v, char *buf, size_t len)
{
    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%.6f", json_real_value(v));
    else
        snprintf(buf, len, "-");
}

static int
cmd_list(const char *db, int as_json)
{
    json_t *arr = NULL;
    char err[512];
    if (gw_keys_db_list(db, &arr, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux keys list: %s\n", err);
        return 1;
    }
    if (as_json) {
        json_t *o = json_pack("{s:o}", "data", arr);
        json_dumpf(o, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(o);
        return 0;
    }
    printf("%-6s %-24s %-8s %12s %14s %8s %10s  %s\n", "ID", "NAME", "STATE",
           "BUDGET_USD", "SPENT_USD", "RPM", "TPM", "MODELS");
    size_t i;
    json_t *k;
    json_array_foreach(arr, i, k) {
        char budget[32], spent[32], rpm[24], tpm[24];
        print_num(json_object_get(k, "budget_usd"), budget, sizeof(budget));
        print_num(json_object_get(k, "spent_usd"), spent, sizeof(spent));
        print_num(json_object_get(k, "rpm"), rpm, sizeof(rpm));
        print_num(json_object_get(k, "tpm"), tpm, sizeof(tpm));
        char models[512] = "*";
        const json_t *ml = json_object_get(k, "models");
        if (json_is_array(ml)) {
            size_t j, used = 0;
            const json_t *m;
            models[0] = '\0';
            json_array_foreach(ml, j, m) {
                int n = snprintf(models + used, sizeof(models) - used, "%s%s",
                                 j ? "," : "", json_string_value(m));
                if (n < 0 || (size_t)n >= sizeof(models) - used)
                    break;
                used += (size_t)n;
            }
        }
        printf("%-6lld %-24s %-8s %12s %14s %8s %10s  %s\n",
               (long long)json_integer_value(json_object_get(k, "id")),
               json_string_value(json_object_get(k, "name")),
               json_string_value(json_object_get(k, "state")), budget, spent,
               rpm, tpm, models);
    }
    json_decref(arr);
    return 0;
}

static int
cmd_revoke(const char *db, const char *ids)
{
    long long id;
    if (!ids || parse_int(ids, 1, INT64_MAX, &id) != 0) {
        fprintf(stderr, "llmux keys revoke: wants a key id (see `llmux keys "
                        "list`)\n");
        return 2;
    }
    char err[512];
    enum gx_status st = gw_keys_db_revoke(db, id, gx_now_ms(), err,
                                          sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "llmux keys revoke: %s\n", err);
        return 1;
    }
    printf("key %lld revoked\n", id);
    return 0;
}

int
gw_cli_keys(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        keys_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    int is_create = !strcmp(cmd, "create"), is_list = !strcmp(cmd, "list"),
        is_revoke = !strcmp(cmd, "revoke");
    if (!is_create && !is_list && !is_revoke) {
        fprintf(stderr, "llmux keys: unknown command '%s'\n", cmd);
        keys_usage(stderr);
        return 2;
    }
    const char *db = NULL, *config = NULL, *revoke_id = NULL;
    int as_json = 0, rc = 2;
    json_t *opts = json_object();
    struct cfg *cfg = NULL;
    if (!opts)
        return 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            keys_usage(stdout);
            rc = 0;
            goto out;
        }
        if (!strcmp(a, "--json") && is_list) {
            as_json = 1;
            continue;
        }
        if (a[0] != '-' && is_revoke && !revoke_id) {
            revoke_id = a;
            continue;
        }
        if (a[0] != '-' || i + 1 >= argc) {
            fprintf(stderr, "llmux keys %s: %s '%s'\n", cmd,
                    a[0] == '-' ? "missing value for" : "unexpected", a);
            goto usage;
        }
        const char *v = argv[++i];
        long long n;
        double d;
        if (!strcmp(a, "--db")) {
            db = v;
        } else if (!strcmp(a, "--config")) {
            config = v;
        } else if (is_create && !strcmp(a, "--name")) {
            json_object_set_new(opts, "name", json_string(v));
        } else if (is_create && !strcmp(a, "--budget-usd")) {
            if (parse_num(v, &d) != 0) {
                fprintf(stderr, "llmux keys create: --budget-usd wants a "
                                "number >= 0\n");
                goto usage;
            }
            json_object_set_new(opts, "budget_usd", json_real(d));
        } else if (is_create &&
                   (!strcmp(a, "--rpm") || !strcmp(a, "--tpm"))) {
            if (parse_int(v, 0, 1000000000, &n) != 0) {
                fprintf(stderr, "llmux keys create: %s wants an integer\n",
                        a);
                goto usage;
            }
            json_object_set_new(opts, a + 2, json_integer(n));
        } else if (is_create && !strcmp(a, "--expires-days")) {
            if (parse_num(v, &d) != 0) {
                fprintf(stderr, "llmux keys create: --expires-days wants a "
                                "number of days\n");
                goto usage;
            }
            json_object_set_new(opts, "expires_days", json_real(d));
        } else if (is_create && !strcmp(a, "--models")) {
            json_t *ml = json_array();
            const char *p = v;
            while (ml && *p) {
                const char *c = strchr(p, ',');
                size_t len = c ? (size_t)(c - p) : strlen(p);
                if (len)
                    json_array_append_new(ml, json_stringn(p, len));
                p += len + (c ? 1 : 0);
            }
            json_object_set_new(opts, "models", ml);
        } else {
            fprintf(stderr, "llmux keys %s: unknown option '%s'\n", cmd, a);
            goto usage;
        }
    }
    if (db && config) {
        fprintf(stderr, "llmux keys: give --db or --config, not both\n");
        goto usage;
    }
    if (is_create && !json_object_get(opts, "name")) {
        fprintf(stderr, "llmux keys create: --name is required\n");
        goto usage;
    }
    rc = 1;
    char err[1024];
    if (config) {
        if (cfg_load_file(config, &cfg, err, sizeof(err)) != GX_OK) {
            fprintf(stderr, "llmux keys: %s\n", err);
            goto out;
        }
        db = cfg->database;
    }
    if (!db)
        db = "llmux.db";
    if (!strcmp(db, ":memory:")) {
        fprintf(stderr, "llmux keys: the database is :memory:; keys need a "
                        "file\n");
        goto out;
    }
    /* Create or migrate the schema (the ledger owns it). */
    struct pr_ledger *l = NULL;
    if (pr_ledger_open(db, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux keys: %s\n", err);
        goto out;
    }
    pr_ledger_close(l);
    if (is_create)
        rc = cmd_create(db, opts);
    else if (is_list)
        rc = cmd_list(db, as_json);
    else
        rc = cmd_revoke(db, revoke_id);
    goto out;
usage:
    keys_usage(stderr);
    rc = 2;
out:
    json_decref(opts);
    cfg_free(cfg);
    return rc;
}
