/*
 * config_int.h: private to config/ (never included from another folder).
 *
 * The position index: jansson keeps no positions of values, so after
 * jansson accepted a document we scan the original text once more with a
 * tiny JSON tokenizer that tracks the path of every value and records
 * where its key and its value start.  Validation errors then look the
 * offending path up to print FILE:LINE:COL.
 *
 * Paths: object members are joined with '.', array elements get "[i]":
 *   providers.relay.models.gpt-4.1.input_per_mtok, routes.auto.targets[1]
 * The root value has the empty path "".
 *
 * Lines and columns are 1-based; a column counts characters (UTF-8 lead
 * bytes), like jansson's own error columns; a tab is one column.
 */
#ifndef LLMUX_CONFIG_INT_H
#define LLMUX_CONFIG_INT_H

#include <stddef.h>

#include "../common/common.h"
#include "config.h"

struct cfg_pos_entry {
    char *path;
    int key_line, key_col; /* of the member's key string; 0 if none */
    int line, col;         /* of the value's first character */
};

struct cfg_pos {
    struct cfg_pos_entry *a;
    size_t n, cap;
    size_t *slots; /* open-addressing hash of 1 + index into a; 0 = empty */
    size_t nslots; /* power of two */
    /* Set when cfg_pos_build stopped at a key seen twice in one object. */
    int dup;
    size_t dup_first; /* index of the first occurrence in a */
    int dup_line, dup_col; /* of the second key */
    char *dup_key;         /* the repeated key, decoded */
};

/*
 * Scans text[0..len) (a JSON document) and indexes every value.  Returns
 * GX_OK; GX_EINVAL when the text is not JSON (the index holds what came
 * before) or when an object repeats a key (p->dup is then set); GX_ENOMEM.
 * p must be zeroed before; free with cfg_pos_cleanup either way.
 */
enum gx_status cfg_pos_build(struct cfg_pos *p, const char *text, size_t len);

/* The entry for path, or NULL. */
const struct cfg_pos_entry *cfg_pos_get(const struct cfg_pos *p,
                                        const char *path);

void cfg_pos_cleanup(struct cfg_pos *p);

/* Levenshtein distance of two short strings (capped at 255). */
int cfg_edit_distance(const char *a, const char *b);

/* Helpers shared by config.c and cfg_defaults.c. */
int cfg_ncpu(void); /* online CPUs, clamped to 1..256 */
/* Parses "HOST:PORT" / "[V6]:PORT"; *host is malloc'd.  0 ok, -1 bad
 * syntax, -2 port out of range, -3 out of memory (cfg_listen_parse wraps
 * it for other folders). */
int cfg_parse_listen(const char *s, char **host, int *port);
/* Fills f with the defaults of config.h; GX_ENOMEM possible. */
enum gx_status cfg_failover_defaults(struct cfg_failover *f);

#endif
