/*
 * usage_cli: `llmux usage [--config FILE] ...`.  The report is pricing's
 * (pr_cli_usage_ex); this wrapper only reads the config, since pricing
 * never depends on config/: its database becomes the default --db and
 * its priced targets join the built-in table for --what-if.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_int.h"

int
gw_cli_usage(int argc, char **argv)
{
    const char *config = NULL;
    int has_db = 0;
    char **av = calloc((size_t)argc + 3, sizeof(*av));
    if (!av)
        return 1;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "llmux usage: --config needs a value\n");
                free(av);
                return 2;
            }
            config = argv[++i];
            continue;
        }
        has_db |= i > 0 && !strcmp(argv[i], "--db");
        av[n++] = argv[i];
    }
    struct cfg *c = NULL;
    struct pr_whatif_model *m = NULL;
    size_t nm = 0;
    int rc = 1;
    if (config) {
        char err[1024];
        if (cfg_load_file(config, &c, err, sizeof(err)) != GX_OK) {
            fprintf(stderr, "llmux usage: %s\n", err);
            goto out;
        }
        if (!has_db && c->database) {
            av[n++] = "--db";
            av[n++] = c->database;
        }
        /* The config's targets only: pricing adds the built-in table. */
        if (!(m = gw_whatif_models(c, 0, &nm))) {
            fprintf(stderr, "llmux usage: out of memory\n");
            goto out;
        }
    }
    rc = pr_cli_usage_ex(n, av, m, nm);
out:
    gw_whatif_models_free(m, nm);
    cfg_free(c);
    free(av);
    return rc;
}
