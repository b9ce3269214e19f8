/*
 * gateway: the HTTP server (N libevent workers on one port), the request
 * lifecycle, auth, admin and usage API.  main.c is the CLI.
 */
#ifndef LLMUX_GATEWAY_H
#define LLMUX_GATEWAY_H

#include "../common/common.h"
#include "../config/config.h"

/* `llmux serve ...`: runs until SIGTERM/SIGINT; returns the exit code. */
int gw_cli_serve(int argc, char **argv);

/* `llmux keys create|list|revoke ...` (keys_cli.c); argv[0] = "keys".
 * Returns the exit code (0 ok, 1 bad input or database error, 2 usage). */
int gw_cli_keys(int argc, char **argv);

/* `llmux prices ...`: prints the effective price table. */
int gw_cli_prices(int argc, char **argv);

/* `llmux usage ...` (usage_cli.c): pricing's report; --config FILE gives
 * the default --db and the config's priced targets for --what-if. */
int gw_cli_usage(int argc, char **argv);

#endif
