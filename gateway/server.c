#include <stdio.h>

#include "gateway.h"

int
gw_cli_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "llmux serve: not built yet\n");
    return 1;
}
