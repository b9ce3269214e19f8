/* Placeholder until the engine lands: the CLI entry points say so. */
#include <stdio.h>

#include "le_int.h"

int
le_cli_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "llmux run: the local engine is not built yet\n");
    return 1;
}

int
le_cli_bench(int argc, char **argv)
{
    return le_cli_run(argc, argv);
}

int
le_cli_tokenize(int argc, char **argv)
{
    return le_cli_run(argc, argv);
}
