/* pg.c: PostgreSQL backend (filled in by the next step). */
#include "pricing.h"
#include "pricing_int.h"

static enum gx_status
pg_unsupported(char *err, size_t errlen)
{
    gx_errf(err, errlen, "PostgreSQL support is not built in");
    return GX_EINVAL;
}
static enum gx_status
pg_open(const char *d, const struct pr_ledger_opts *o, void **be, char *err,
        size_t errlen)
{
    (void)d; (void)o; (void)be;
    return pg_unsupported(err, errlen);
}
const struct pr_store_ops pr_store_pg = {.name = "postgres", .ledger_open = pg_open};
