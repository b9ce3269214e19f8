/*
 * llmux command line (DESIGN.md section 4): dispatches a subcommand to the
 * module that owns it.  Exit codes: 0 ok, 1 bad input/config, 2 usage.
 */
#include <stdio.h>
#include <string.h>

#include "../config/config.h"
#include "../local_engine/local_engine.h"
#include "../pricing/pricing.h"
#include "gateway.h"

static void
usage(FILE *f)
{
    fputs("usage: llmux COMMAND [OPTIONS]\n"
          "\n"
          "commands:\n"
          "  serve     [--config FILE] [--listen HOST:PORT] [--workers N]\n"
          "  check     --config FILE      validate a config, print routes\n"
          "  keys      create|list|revoke manage bearer keys\n"
          "  usage     [--since 24h] [--group-by model] usage report\n"
          "  prices    [--config FILE]     the effective price table\n"
          "  run       --model FILE.gguf  one-shot local generation\n"
          "  bench     --model FILE.gguf  prefill/generation tokens/s\n"
          "  tokenize  --model FILE.gguf  print token ids\n"
          "\n"
          "Run `llmux COMMAND --help` for a command's options.\n",
          f);
}

int
main(int argc, char **argv)
{
    gx_log_init_from_env();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "serve"))
        return gw_cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "check"))
        return cfg_cli_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "keys"))
        return gw_cli_keys(argc - 1, argv + 1);
    if (!strcmp(cmd, "prices"))
        return gw_cli_prices(argc - 1, argv + 1);
    if (!strcmp(cmd, "usage"))
        return gw_cli_usage(argc - 1, argv + 1);
    if (!strcmp(cmd, "run"))
        return le_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return le_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return le_cli_tokenize(argc - 1, argv + 1);
    fprintf(stderr, "llmux: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
