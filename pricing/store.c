/*
 * store.c: the storage interface's front: struct pr_ledger is a backend
 * table plus that backend's handle; every pr_ledger_* call dispatches.
 * Which backend: pr_store_is_pg(database).
 */
#include "pricing.h"
#include "pricing_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pr_ledger {
    const struct pr_store_ops *ops;
    void *be;
};

int
pr_store_is_pg(const char *database)
{
    return database && (strncmp(database, "postgres://", 11) == 0 ||
                        strncmp(database, "postgresql://", 13) == 0);
}

void
pr_store_redact(const char *database, char *buf, size_t buflen)
{
    if (!buflen)
        return;
    if (!database) {
        snprintf(buf, buflen, "(none)");
        return;
    }
    /* scheme://user:password@host: the password is between the first ':'
     * after "//" and the last '@' before the path. */
    const char *s = strstr(database, "://");
    const char *at = NULL, *colon = NULL;
    if (s && pr_store_is_pg(database)) {
        s += 3;
        const char *end = s + strcspn(s, "/?");
        for (const char *p = s; p < end; p++)
            if (*p == '@')
                at = p;
        if (at)
            for (const char *p = s; p < at; p++)
                if (*p == ':') {
                    colon = p;
                    break;
                }
    }
    if (!colon) {
        /* a password given as ?password=... */
        const char *pw = strstr(database, "password=");
        if (pw) {
            const char *e = pw + 9 + strcspn(pw + 9, "&");
            snprintf(buf, buflen, "%.*s***%s", (int)(pw + 9 - database),
                     database, e);
        } else {
            snprintf(buf, buflen, "%s", database);
        }
        return;
    }
    snprintf(buf, buflen, "%.*s:***%s", (int)(colon - database), database, at);
}

enum gx_status
pr_ledger_open_ex(const char *database, const struct pr_ledger_opts *opts,
                  struct pr_ledger **out, char *err, size_t errlen)
{
    if (!database || !out) {
        gx_errf(err, errlen, "no database path");
        return GX_EINVAL;
    }
    struct pr_ledger *l = calloc(1, sizeof(*l));
    if (!l) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    l->ops = pr_store_is_pg(database) ? &pr_store_pg : &pr_store_sqlite;
    enum gx_status st = l->ops->ledger_open(database, opts, &l->be, err, errlen);
    if (st != GX_OK) {
        free(l);
        return st;
    }
    *out = l;
    return GX_OK;
}

enum gx_status
pr_ledger_open(const char *database, struct pr_ledger **out, char *err,
               size_t errlen)
{
    return pr_ledger_open_ex(database, NULL, out, err, errlen);
}

void
pr_ledger_close(struct pr_ledger *l)
{
    if (!l)
        return;
    l->ops->ledger_close(l->be);
    free(l);
}

enum gx_status
pr_ledger_submit(struct pr_ledger *l, const struct pr_usage_row *row,
                 pr_commit_cb cb, void *ud)
{
    if (!l || !row)
        return GX_EINVAL;
    return l->ops->ledger_submit(l->be, row, cb, ud);
}

void
pr_ledger_prewake(struct pr_ledger *l)
{
    if (l && l->ops->ledger_prewake)
        l->ops->ledger_prewake(l->be);
}

void
pr_ledger_flush(struct pr_ledger *l)
{
    if (l)
        l->ops->ledger_flush(l->be);
}

const char *
pr_ledger_path(const struct pr_ledger *l)
{
    return l ? l->ops->ledger_path(l->be) : NULL;
}

void
pr_ledger_stats(struct pr_ledger *l, struct pr_ledger_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (l)
        l->ops->ledger_stats(l->be, out);
}

int
pr_ledger_available(struct pr_ledger *l)
{
    return !l || !l->ops->ledger_available ||
           l->ops->ledger_available(l->be);
}

void
pr_ledger_attach_budget(struct pr_ledger *l, struct pr_budget *b)
{
    if (l && l->ops->ledger_attach_budget)
        l->ops->ledger_attach_budget(l->be, b);
}
