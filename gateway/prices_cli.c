/*
 * prices_cli: `llmux prices [--config FILE] [--builtin]`: the effective
 * price table, USD per million tokens, for every model a config serves
 * (config prices over the built-in table), or the built-in table alone.
 */
#include <stdio.h>
#include <string.h>

#include "gw_int.h"

static void
prices_usage(FILE *f)
{
    fputs("usage: llmux prices [--config FILE] [--builtin]\n"
          "\n"
          "Prints the effective prices (USD per million tokens: input,\n"
          "cached input, output) of every model the config serves, and\n"
          "where each comes from.  Without --config: the built-in defaults\n"
          "plus the providers found in the environment.  --builtin: the\n"
          "built-in table only.\n",
          f);
}

static void
print_row(const char *target, const char *upstream, int64_t in,
          int64_t cached, int64_t out, const char *source)
{
    char a[32], b[32], c[32];
    pr_usd_per_mtok_format(in, a, sizeof(a));
    pr_usd_per_mtok_format(cached, b, sizeof(b));
    pr_usd_per_mtok_format(out, c, sizeof(c));
    printf("%-36s %-22s %10s %10s %10s  %s\n", target, upstream, a, b, c,
           source);
}

int
gw_cli_prices(int argc, char **argv)
{
    const char *config = NULL;
    int builtin = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            prices_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--builtin")) {
            builtin = 1;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else {
            fprintf(stderr, "llmux prices: unknown or incomplete option "
                            "'%s'\n",
                    argv[i]);
            prices_usage(stderr);
            return 2;
        }
    }
    printf("%-36s %-22s %10s %10s %10s  %s\n", "target", "upstream model",
           "input", "cached", "output", "source");
    if (builtin) {
        for (size_t i = 0; i < pr_price_default_count(); i++) {
            struct pr_price p;
            const char *name = pr_price_default_at(i, &p);
            print_row(name, name, p.input_pusd, p.cached_input_pusd,
                      p.output_pusd, "built-in");
        }
        return 0;
    }
    char err[1024];
    struct cfg *c = NULL;
    enum gx_status st = config ? cfg_load_file(config, &c, err, sizeof(err))
                               : cfg_defaults(&c, err, sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "llmux prices: %s\n", err);
        return 1;
    }
    for (size_t p = 0; p < c->n_providers; p++) {
        const struct cfg_provider *pv = &c->providers[p];
        for (size_t m = 0; m < pv->n_models; m++) {
            const struct cfg_model *md = &pv->models[m];
            char target[256];
            snprintf(target, sizeof(target), "%s@%s", md->name, pv->name);
            struct pr_price d;
            const char *source = "config";
            if (pv->kind == CFG_KIND_LOCAL)
                source = "local";
            else if (pr_price_default(md->name, &d) &&
                     d.input_pusd == md->input_pusd &&
                     d.output_pusd == md->output_pusd &&
                     d.cached_input_pusd == md->cached_input_pusd)
                source = "built-in";
            print_row(target, md->upstream ? md->upstream : md->name,
                      md->input_pusd, md->cached_input_pusd, md->output_pusd,
                      source);
        }
    }
    if (c->n_providers == 0)
        printf("(no providers: set an API key or LLMUX_MODEL, or pass "
               "--config; --builtin shows the built-in table)\n");
    cfg_free(c);
    return 0;
}
