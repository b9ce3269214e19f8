/*
 * local_engine: llmux's in-process llama engine (DESIGN.md section 9).
 * Depends on libc, libm and pthreads only; builds and tests alone.
 *
 * This header is the face other folders use (providers/local.c and the
 * CLI in gateway/main.c).  Internal structs live in le_int.h.
 */
#ifndef LLMUX_LOCAL_ENGINE_H
#define LLMUX_LOCAL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

enum le_status {
    LE_OK = 0,
    LE_ENOMEM,   /* allocation failed */
    LE_EINVAL,   /* bad argument or bad input data */
    LE_EIO,      /* file could not be opened / read / mapped */
    LE_EFORMAT,  /* the file is not a valid / supported GGUF model */
    LE_ECONTEXT, /* the context window is full */
    LE_ECANCELED /* cancelled */
};

const char *le_status_str(enum le_status st);

/*
 * CLI entry points for `llmux run`, `llmux bench` and `llmux tokenize`
 * (DESIGN.md section 4).  argv[0] is the subcommand name.  Return the
 * process exit code (0 ok, 1 bad input, 2 usage error); never exit().
 */
int le_cli_run(int argc, char **argv);
int le_cli_bench(int argc, char **argv);
int le_cli_tokenize(int argc, char **argv);

#endif
