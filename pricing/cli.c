/*
 * cli.c: `llmux usage`, a grouped usage report on stdout (table, json or
 * csv) read from the ledger database with pr_usage_query.
 */
#include "pricing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage_help(FILE *f)
{
    fprintf(f,
            "usage: llmux usage [--since 24h|7d|ISO] [--until 1h|ISO]\n"
            "                   [--group-by none|model|provider|route|key|"
            "day|hour|api]\n"
            "                   [--format table|json|csv] [--key ID]"
            " [--db FILE] [--raw]\n"
            "                   [--what-if] [--config FILE]\n"
            "\n"
            "Requests, errors, tokens, exact cost (USD) and approximate\n"
            "p50/p95 latency from the usage ledger, grouped.  --since\n"
            "defaults to 24h, --until to now, --group-by to model, --db to\n"
            "llmux.db.  Times: 30m, 24h, 7d, 2w (ago), epoch ms, or UTC ISO\n"
            "8601 (2026-11-29 or 2026-11-29T15:00:00Z); --until is\n"
            "exclusive.  --by is short for --group-by; --group-by api\n"
            "reads raw rows (the rollups do not carry the API).\n"
            "--key -1 selects anonymous requests.  --raw reads\n"
            "raw rows only (slow on big ledgers; same totals).\n"
            "--what-if adds the period's tokens re-priced, exactly, at every\n"
            "priced model of the config (--config; its database is the\n"
            "default --db) and of the built-in table, next to the actual\n"
            "cost.\n");
}

/* CSV field: quoted when it holds a comma, quote or newline. */
static void
csv_field(const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void
fmt_ms(int64_t v, char *buf, size_t n)
{
    if (v < 0)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%lld", (long long)v);
}

static void
print_table(const struct pr_usage_result *r, enum pr_group g)
{
    const char *gname = g == PR_GROUP_NONE ? "total" : pr_group_name(g);
    int w = (int)strlen(gname);
    for (size_t i = 0; i < r->n; i++) {
        int l = (int)strlen(r->rows[i].group);
        if (l == 0)
            l = 6; /* "(none)" */
        if (l > w)
            w = l;
    }
    printf("%-*s %10s %8s %14s %14s %12s %15s %13s %18s %8s %8s %8s\n", w,
           gname, "requests", "errors", "prompt_tok", "completion_tok",
           "cached_tok", "cache_write_tok", "reasoning_tok", "cost_usd",
           "unpriced", "p50_ms", "p95_ms");
    int64_t tr = 0, te = 0, tp = 0, tc = 0, tk = 0, tw = 0, ts = 0, tcost = 0,
            tu = 0;
    int overflow = 0;
    for (size_t i = 0; i < r->n; i++) {
        const struct pr_usage_group *x = &r->rows[i];
        char p50[24], p95[24];
        fmt_ms(x->p50_ms, p50, sizeof(p50));
        fmt_ms(x->p95_ms, p95, sizeof(p95));
        const char *name = x->group[0]          ? x->group
                           : g == PR_GROUP_NONE ? "total"
                                                : "(none)";
        printf("%-*s %10lld %8lld %14lld %14lld %12lld %15lld %13lld %18s"
               " %8lld %8s %8s\n",
               w, name, (long long)x->requests, (long long)x->errors,
               (long long)x->prompt_tokens, (long long)x->completion_tokens,
               (long long)x->cached_tokens, (long long)x->cache_write_tokens,
               (long long)x->reasoning_tokens, x->cost_usd,
               (long long)x->unpriced, p50, p95);
        tw += x->cache_write_tokens;
        ts += x->reasoning_tokens;
        tu += x->unpriced;
        tr += x->requests;
        te += x->errors;
        tp += x->prompt_tokens;
        tc += x->completion_tokens;
        tk += x->cached_tokens;
        if (pr_pusd_add(tcost, x->cost_pusd, &tcost) != GX_OK)
            overflow = 1;
    }
    if (g != PR_GROUP_NONE && r->n > 1) {
        char cost[32];
        if (overflow)
            snprintf(cost, sizeof(cost), "overflow");
        else
            pr_pusd_format(tcost, cost, sizeof(cost));
        printf("%-*s %10lld %8lld %14lld %14lld %12lld %15lld %13lld %18s"
               " %8lld\n",
               w, "total", (long long)tr, (long long)te, (long long)tp,
               (long long)tc, (long long)tk, (long long)tw, (long long)ts,
               cost, (long long)tu);
    }
    /* An unpriced request's cost is unknown, not zero: say so. */
    if (tu > 0)
        printf("note: %lld request%s had no price (model without one); "
               "cost_usd leaves them out\n",
               (long long)tu, tu == 1 ? "" : "s");
}

static void
print_csv(const struct pr_usage_result *r, enum pr_group g)
{
    printf("%s,requests,errors,prompt_tokens,completion_tokens,"
           "cached_tokens,cost_usd,cost_pusd,p50_ms,p95_ms,unpriced,"
           "cache_write_tokens,reasoning_tokens\n",
           g == PR_GROUP_NONE ? "group" : pr_group_name(g));
    for (size_t i = 0; i < r->n; i++) {
        const struct pr_usage_group *x = &r->rows[i];
        csv_field(x->group);
        printf(",%lld,%lld,%lld,%lld,%lld,%s,%lld,", (long long)x->requests,
               (long long)x->errors, (long long)x->prompt_tokens,
               (long long)x->completion_tokens, (long long)x->cached_tokens,
               x->cost_usd, (long long)x->cost_pusd);
        if (x->p50_ms >= 0)
            printf("%lld,%lld", (long long)x->p50_ms, (long long)x->p95_ms);
        else
            printf(",");
        printf(",%lld,%lld,%lld\n", (long long)x->unpriced,
               (long long)x->cache_write_tokens,
               (long long)x->reasoning_tokens);
    }
}

/* The what-if models: the caller's, then the built-in table (malloc'd). */
static struct pr_whatif_model *
whatif_models(const struct pr_whatif_model *m, size_t n, size_t *out_n)
{
    size_t nb = pr_whatif_builtin(NULL, 0);
    struct pr_whatif_model *all = calloc(n + nb + 1, sizeof(*all));
    if (!all)
        return NULL;
    for (size_t i = 0; i < n; i++)
        all[i] = m[i];
    *out_n = n + pr_whatif_builtin(all + n, nb);
    return all;
}

static int
print_whatif(const struct pr_usage_result *r, const struct pr_whatif_model *m,
             size_t n, int csv)
{
    struct pr_tokens t;
    int64_t actual, req;
    struct pr_whatif_row *rows = calloc(n ? n : 1, sizeof(*rows));
    if (!rows || pr_usage_totals(r, &t, &actual, &req) != GX_OK ||
        pr_whatif_price(r, m, n, rows) != GX_OK) {
        free(rows);
        fprintf(stderr, "llmux usage: the what-if totals overflow\n");
        return 1;
    }
    char a[48];
    pr_pusd_format(actual, a, sizeof(a));
    if (csv)
        printf("\nmodel,source,cost_usd,cost_pusd,delta_usd,delta_pusd\n");
    else
        printf("\nwhat if: %lld requests, %lld prompt tokens (%lld cached, "
               "%lld cache writes), %lld completion tokens (%lld reasoning);"
               " actual cost %s USD\n"
               "%-40s %-9s %18s %18s\n",
               (long long)req, (long long)t.prompt, (long long)t.cached,
               (long long)t.cache_write, (long long)t.completion,
               (long long)t.reasoning, a, "model", "source", "cost_usd",
               "vs_actual_usd");
    for (size_t i = 0; i < n; i++) {
        char c[48] = "overflow", d[48] = "overflow";
        if (rows[i].ok) {
            pr_pusd_format(rows[i].cost_pusd, c, sizeof(c));
            pr_pusd_format(rows[i].delta_pusd, d, sizeof(d));
        }
        if (csv) {
            csv_field(rows[i].m->name);
            printf(",%s,%s,%lld,%s,%lld\n", rows[i].m->source, c,
                   (long long)rows[i].cost_pusd, d,
                   (long long)rows[i].delta_pusd);
        } else {
            printf("%-40s %-9s %18s %s%17s\n", rows[i].m->name,
                   rows[i].m->source, c,
                   rows[i].ok && rows[i].delta_pusd > 0 ? "+" : " ", d);
        }
    }
    free(rows);
    return 0;
}

int
pr_cli_usage(int argc, char **argv)
{
    return pr_cli_usage_ex(argc, argv, NULL, 0);
}

int
pr_cli_usage_ex(int argc, char **argv, const struct pr_whatif_model *wm,
                size_t n_wm)
{
    const char *since_s = "24h", *until_s = NULL, *group_s = "model";
    const char *format = "table", *db = "llmux.db", *key_s = NULL;
    int raw = 0, what_if = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_help(stdout);
            return 0;
        } else if (!strcmp(a, "--raw")) {
            raw = 1;
            continue;
        } else if (!strcmp(a, "--what-if")) {
            what_if = 1;
            continue;
        } else if (!strcmp(a, "--since")) {
            dst = &since_s;
        } else if (!strcmp(a, "--until")) {
            dst = &until_s;
        } else if (!strcmp(a, "--group-by") || !strcmp(a, "--by")) {
            dst = &group_s;
        } else if (!strcmp(a, "--format")) {
            dst = &format;
        } else if (!strcmp(a, "--db")) {
            dst = &db;
        } else if (!strcmp(a, "--key")) {
            dst = &key_s;
        } else {
            fprintf(stderr, "llmux usage: unknown argument '%s'\n", a);
            usage_help(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llmux usage: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }

    int64_t now = gx_now_ms();
    struct pr_usage_query q = {.key_filter = PR_KEY_ALL, .raw_only = raw};
    if (pr_time_parse(since_s, now, &q.since_ms) != GX_OK) {
        fprintf(stderr, "llmux usage: bad --since '%s'\n", since_s);
        return 2;
    }
    q.until_ms = now + 1;
    if (until_s && pr_time_parse(until_s, now, &q.until_ms) != GX_OK) {
        fprintf(stderr, "llmux usage: bad --until '%s'\n", until_s);
        return 2;
    }
    if (pr_group_parse(group_s, &q.group_by) != GX_OK) {
        fprintf(stderr, "llmux usage: bad --group-by '%s'\n", group_s);
        return 2;
    }
    if (strcmp(format, "table") && strcmp(format, "json") &&
        strcmp(format, "csv")) {
        fprintf(stderr, "llmux usage: bad --format '%s'\n", format);
        return 2;
    }
    if (key_s) {
        char *end = NULL;
        long long k = strtoll(key_s, &end, 10);
        if (!*key_s || *end || k < -1) {
            fprintf(stderr, "llmux usage: bad --key '%s'\n", key_s);
            return 2;
        }
        q.key_filter = k;
    }
    /* A missing file must not be created by a read: check first. */
    if (strncmp(db, "file:", 5) != 0 && !pr_store_is_pg(db)) {
        FILE *f = fopen(db, "rb");
        if (!f) {
            fprintf(stderr, "llmux usage: cannot open database %s\n", db);
            return 1;
        }
        fclose(f);
    }

    char err[256] = "";
    struct pr_usage_result *r = NULL;
    if (pr_usage_query(db, &q, &r, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux usage: %s\n", err[0] ? err : "query failed");
        return 1;
    }
    int rc = 0;
    size_t n_all = 0;
    struct pr_whatif_model *all = what_if ? whatif_models(wm, n_wm, &n_all)
                                          : NULL;
    if (what_if && !all) {
        pr_usage_result_free(r);
        fprintf(stderr, "llmux usage: out of memory\n");
        return 1;
    }
    if (!strcmp(format, "json")) {
        struct gx_buf b;
        gx_buf_init(&b, 0);
        if (pr_usage_result_json_whatif(r, all, n_all, &b) == GX_OK) {
            fwrite(b.data, 1, b.len, stdout);
            putchar('\n');
        } else {
            rc = 1;
        }
        gx_buf_cleanup(&b);
    } else if (!strcmp(format, "csv")) {
        print_csv(r, q.group_by);
        if (all)
            rc = print_whatif(r, all, n_all, 1);
    } else {
        print_table(r, q.group_by);
        if (all)
            rc = print_whatif(r, all, n_all, 0);
    }
    free(all);
    pr_usage_result_free(r);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}
