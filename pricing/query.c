/*
 * query.c: grouped usage queries on a read-only connection.
 *
 * One SQL statement per query, a UNION ALL of up to five pre-aggregated
 * branches summed by group:
 *
 *   [since .. h0)  raw usage rows  (partial first hour, index usage_ts)
 *   [h0 .. d0)     usage_hourly    (whole hours of the partial first day)
 *   [d0 .. d1)     usage_daily     (whole days)
 *   [d1 .. h1)     usage_hourly    (whole hours of the partial last day)
 *   [h1 .. until)  raw usage rows  (partial last hour)
 *
 * where h0/d0 = since rounded up and h1/d1 = until rounded down to the
 * hour/UTC day.  Without a whole day inside, or grouping by hour, the
 * hourly cells cover [h0 .. h1).  Each rollup branch is one PK range
 * (dim, key_id, time).
 *   [h0 .. h1)     raw usage rows with id > the rollup watermark
 *
 * The writer keeps the rollup cells of recent rows in memory and upserts
 * them every few hundred ms (version 3); the rollup tables hold exactly
 * the rows with id <= usage_rollup_state.rolled_through_id, written in the
 * same transaction as the cells.  The last branch adds the few rows past
 * it; one statement reads the watermark and the cells from the same
 * snapshot.  Totals are exact either way; p50/p95 come from the 18-bucket
 * histogram every branch produces, so they are estimates.  The raw
 * branches can touch at most two hours of rows, so a month-long query
 * reads hours x distinct values rollup cells (720 x a few models), or
 * hours x keys when grouping by key, instead of millions of raw rows.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const group_names[] = {
    [PR_GROUP_NONE] = "none",         [PR_GROUP_MODEL] = "model",
    [PR_GROUP_PROVIDER] = "provider", [PR_GROUP_ROUTE] = "route",
    [PR_GROUP_KEY] = "key",           [PR_GROUP_DAY] = "day",
    [PR_GROUP_HOUR] = "hour",         [PR_GROUP_API] = "api"};

enum gx_status
pr_group_parse(const char *s, enum pr_group *out)
{
    if (!s || !out)
        return GX_EINVAL;
    if (*s == '\0') {
        *out = PR_GROUP_NONE;
        return GX_OK;
    }
    for (size_t i = 0; i < sizeof(group_names) / sizeof(group_names[0]); i++) {
        if (strcmp(s, group_names[i]) == 0) {
            *out = (enum pr_group)i;
            return GX_OK;
        }
    }
    return GX_EINVAL;
}

int
pr_group_is_text(enum pr_group g)
{
    return g == PR_GROUP_MODEL || g == PR_GROUP_PROVIDER ||
           g == PR_GROUP_ROUTE || g == PR_GROUP_API;
}

const char *
pr_group_name(enum pr_group g)
{
    if ((unsigned)g < sizeof(group_names) / sizeof(group_names[0]))
        return group_names[g];
    return "none";
}

/* ------------------------------------------------------------------ */

static int
parse_uint(const char **pp, int ndig, int *out)
{
    int v = 0;
    for (int i = 0; i < ndig; i++) {
        if (!isdigit((unsigned char)**pp))
            return 0;
        v = v * 10 + (**pp - '0');
        (*pp)++;
    }
    *out = v;
    return 1;
}

enum gx_status
pr_time_parse(const char *s, int64_t now_ms, int64_t *out_ms)
{
    if (!s || !*s || !out_ms)
        return GX_EINVAL;
    size_t n = strlen(s);
    /* relative: digits + unit */
    char unit = s[n - 1];
    if (n >= 2 && strchr("smhdw", unit)) {
        int64_t v = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            if (!isdigit((unsigned char)s[i]) || v > 1000000000)
                return GX_EINVAL;
            v = v * 10 + (s[i] - '0');
        }
        int64_t mul = unit == 's'   ? 1000
                      : unit == 'm' ? 60000
                      : unit == 'h' ? 3600000
                      : unit == 'd' ? 86400000
                                    : 7 * 86400000LL;
        *out_ms = now_ms - v * mul;
        return GX_OK;
    }
    /* epoch ms: all digits, no dash */
    int all_digits = 1;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            all_digits = 0;
    if (all_digits) {
        if (n > 18)
            return GX_EINVAL;
        *out_ms = strtoll(s, NULL, 10);
        return GX_OK;
    }
    /* ISO 8601 UTC */
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = s;
    int y, mo, d, h = 0, mi = 0, se = 0;
    if (!parse_uint(&p, 4, &y) || *p++ != '-' || !parse_uint(&p, 2, &mo) ||
        *p++ != '-' || !parse_uint(&p, 2, &d))
        return GX_EINVAL;
    if (*p == 'T' || *p == ' ') {
        p++;
        if (!parse_uint(&p, 2, &h) || *p++ != ':' || !parse_uint(&p, 2, &mi))
            return GX_EINVAL;
        if (*p == ':') {
            p++;
            if (!parse_uint(&p, 2, &se))
                return GX_EINVAL;
            if (*p == '.') { /* fractional seconds: ignored */
                p++;
                while (isdigit((unsigned char)*p))
                    p++;
            }
        }
    }
    if (*p == 'Z')
        p++;
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
        mi > 59 || se > 60)
        return GX_EINVAL;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    time_t t = timegm(&tm);
    *out_ms = (int64_t)t * 1000;
    return GX_OK;
}

/* ------------------------------------------------------------------ */

/* The SQL of a group: src 0 = raw usage rows, 1 = usage_hourly,
 * 2 = usage_daily (never used for PR_GROUP_HOUR). */
static const char *
group_expr(enum pr_group g, int src)
{
    switch (g) {
    case PR_GROUP_MODEL:
        return src ? "value" : "COALESCE(model,'')";
    case PR_GROUP_PROVIDER:
        return src ? "value" : "COALESCE(provider,'')";
    case PR_GROUP_ROUTE:
        return src ? "value" : "COALESCE(route,'')";
    case PR_GROUP_KEY:
        return src ? "key_id" : "COALESCE(key_id,-1)";
    case PR_GROUP_DAY:
        return src == 2   ? "day_ms"
               : src == 1 ? "(hour_ms - hour_ms % 86400000)"
                          : "(ts_ms - ts_ms % 86400000)";
    case PR_GROUP_HOUR:
        return src ? "hour_ms" : "(ts_ms - ts_ms % 3600000)";
    case PR_GROUP_API: /* raw rows only (the plan's levels 0) */
        return "COALESCE(api,'chat')";
    case PR_GROUP_NONE:
    default:
        return "''";
    }
}

/* The rollup's dim holding the grouping (ledger.c's dim_names). */
static const char *
group_dim(enum pr_group g)
{
    switch (g) {
    case PR_GROUP_MODEL:
        return "model";
    case PR_GROUP_PROVIDER:
        return "provider";
    case PR_GROUP_ROUTE:
        return "route";
    default:
        return "none";
    }
}

/* Raw rows: grouped by (group, latency bucket) first, with the bucket as
 * one CASE, then pivoted into h0..h17 over the few resulting rows; 18
 * SUM(condition) aggregates per raw row cost 3x more (measured). */
/* The unpriced column, or 0 on a ledger older than version 4 (read as it
 * is: queries never migrate). */
static const char *
unpriced_col(int have)
{
    return have ? "unpriced" : "0";
}

static enum gx_status
append_raw_branch(struct gx_buf *b, enum pr_group g, const char *where,
                  const char *keyw, int have_unpriced)
{
    /* Portable to PostgreSQL: the error count as a CASE (PostgreSQL has
     * no SUM(boolean)) and every derived table named. */
    enum gx_status st = gx_buf_printf(b, "SELECT g, SUM(n) AS n, SUM(e) AS e,"
                                         " SUM(pt) AS pt, SUM(ct) AS ct,"
                                         " SUM(cc) AS cc, SUM(cost) AS cost");
    for (int i = 0; st == GX_OK && i < PR_LAT_NBUCKETS; i++)
        st = gx_buf_printf(
            b, ", SUM(CASE WHEN bk = %d THEN n ELSE 0 END) AS h%d", i, i);
    if (st == GX_OK)
        st = gx_buf_printf(
            b,
            ", SUM(up) AS up, SUM(cw) AS cw, SUM(rs) AS rs"
            " FROM (SELECT %s AS g, COUNT(*) AS n,"
            " SUM(CASE WHEN " PR_IS_ERROR_SQL " THEN 1 ELSE 0 END) AS e,"
            " SUM(prompt_tokens) AS pt,"
            " SUM(completion_tokens) AS ct, SUM(cached_tokens) AS cc,"
            " SUM(cost_pusd) AS cost, SUM(%s) AS up, SUM(%s) AS cw,"
            " SUM(%s) AS rs, CASE",
            /* before version 4 there is no api column: every row was a
             * chat request */
            g == PR_GROUP_API && !have_unpriced ? "'chat'" : group_expr(g, 0),
            unpriced_col(have_unpriced),
            have_unpriced ? "cache_write_tokens" : "0",
            have_unpriced ? "reasoning_tokens" : "0");
    for (int i = 0; st == GX_OK && i < PR_LAT_NBUCKETS - 1; i++)
        st = gx_buf_printf(b, " WHEN latency_ms < %lld THEN %d",
                           (long long)pr_lat_bounds[i], i);
    if (st == GX_OK)
        st = gx_buf_printf(b,
                           " ELSE %d END AS bk FROM usage WHERE %s%s"
                           " GROUP BY 1, bk) AS r GROUP BY g",
                           PR_LAT_NBUCKETS - 1, where, keyw);
    return st;
}

static enum gx_status
append_roll_branch(struct gx_buf *b, const struct pr_usage_query *q, int daily,
                   const char *keyw, const char *lo, const char *hi,
                   int have_unpriced, int have_cw)
{
    const char *tcol = daily ? "day_ms" : "hour_ms";
    enum gx_status st =
        gx_buf_printf(b,
                      "SELECT %s AS g, SUM(requests) AS n, SUM(errors) AS e,"
                      " SUM(prompt_tokens) AS pt, SUM(completion_tokens) AS ct,"
                      " SUM(cached_tokens) AS cc, SUM(cost_pusd) AS cost",
                      group_expr(q->group_by, daily ? 2 : 1));
    for (int i = 0; st == GX_OK && i < PR_LAT_NBUCKETS; i++)
        st = gx_buf_printf(b, ", SUM(h%d) AS h%d", i, i);
    if (st == GX_OK)
        st = gx_buf_printf(b,
                           ", SUM(%s) AS up, SUM(%s) AS cw, SUM(%s) AS rs"
                           " FROM %s WHERE dim = '%s'%s AND"
                           " %s >= %s AND %s < %s GROUP BY 1 UNION ALL ",
                           unpriced_col(have_unpriced),
                           have_cw ? "cache_write_tokens" : "0",
                           have_cw ? "reasoning_tokens" : "0",
                           daily ? "usage_daily" : "usage_hourly",
                           group_dim(q->group_by), keyw, tcol, lo, tcol, hi);
    return st;
}

/* levels: 0 raw rows only; 1 raw edges + hourly cells; 2 raw edges +
 * hourly cells for the partial days + daily cells.  Parameters: ?1 since,
 * ?2 until, ?3 h0, ?4 h1, ?5 key, ?6 d0, ?7 d1. */
static enum gx_status
build_sql(const struct pr_usage_query *q, int levels, int watermark,
          int hu, int cw, struct gx_buf *b)
{
    /* Rollup cells: key_id -2 sums all keys; grouping by key reads the
     * per-key cells (-1 = anonymous) instead. */
    const char *keyw_raw = "", *keyw_roll = " AND key_id = -2";
    /* The past-the-watermark branch must walk the rowid range, never an
     * index over a month of rows: "+" keeps the planner off ts/key. */
    const char *keyw_pend = "";
    if (q->key_filter == -1) {
        keyw_raw = " AND key_id IS NULL";
        keyw_pend = " AND +key_id IS NULL";
        keyw_roll = " AND key_id = -1";
    } else if (q->key_filter != PR_KEY_ALL) {
        keyw_raw = " AND key_id = ?5";
        keyw_pend = " AND +key_id = ?5";
        keyw_roll = " AND key_id = ?5";
    } else if (q->group_by == PR_GROUP_KEY) {
        keyw_roll = " AND key_id >= -1";
    }
    enum gx_status st = gx_buf_printf(b, "SELECT g, SUM(n), SUM(e), SUM(pt),"
                                         " SUM(ct), SUM(cc), SUM(cost)");
    for (int i = 0; st == GX_OK && i < PR_LAT_NBUCKETS; i++)
        st = gx_buf_printf(b, ", SUM(h%d)", i);
    if (st == GX_OK)
        st = gx_buf_printf(b, ", SUM(up), SUM(cw), SUM(rs) FROM (");
    if (st != GX_OK)
        return st;
    if (levels == 2) {
        st = append_roll_branch(b, q, 0, keyw_roll, "?3", "?6", hu, cw);
        if (st == GX_OK)
            st = append_roll_branch(b, q, 1, keyw_roll, "?6", "?7", hu, cw);
        if (st == GX_OK)
            st = append_roll_branch(b, q, 0, keyw_roll, "?7", "?4", hu, cw);
    } else if (levels == 1) {
        st = append_roll_branch(b, q, 0, keyw_roll, "?3", "?4", hu, cw);
    }
    if (levels > 0 && watermark) {
        /* Rows committed but not yet in the rollup (the writer flushes
         * its cells every few hundred ms): id > the watermark read in this
         * same statement, so the pair is one consistent snapshot. */
        if (st == GX_OK)
            st = append_raw_branch(
                b, q->group_by,
                "id > (SELECT rolled_through_id FROM usage_rollup_state"
                " WHERE id = 1) AND +ts_ms >= ?3 AND +ts_ms < ?4",
                keyw_pend, hu);
        if (st == GX_OK)
            st = gx_buf_printf(b, " UNION ALL ");
    }
    if (levels > 0) {
        if (st == GX_OK)
            st = append_raw_branch(b, q->group_by, "ts_ms >= ?1 AND ts_ms < ?3",
                                   keyw_raw, hu);
        if (st == GX_OK)
            st = gx_buf_printf(b, " UNION ALL ");
        if (st == GX_OK)
            st = append_raw_branch(b, q->group_by, "ts_ms >= ?4 AND ts_ms < ?2",
                                   keyw_raw, hu);
    } else if (st == GX_OK) {
        st = append_raw_branch(b, q->group_by, "ts_ms >= ?1 AND ts_ms < ?2",
                               keyw_raw, hu);
    }
    if (st == GX_OK)
        st = gx_buf_printf(b, ") AS u GROUP BY g ORDER BY g");
    return st;
}

/* PostgreSQL: ?N becomes the literal value (all are integers computed
 * here, never caller text), so no parameter types need inferring. */
static enum gx_status
inline_params(const struct gx_buf *in, const int64_t *p, struct gx_buf *out)
{
    enum gx_status st = GX_OK;
    for (size_t i = 0; st == GX_OK && i < in->len; i++) {
        char c = in->data[i];
        if (c == '?' && i + 1 < in->len && in->data[i + 1] >= '1' &&
            in->data[i + 1] <= '7') {
            st = gx_buf_printf(out, "%lld",
                               (long long)p[in->data[i + 1] - '0']);
            i++;
        } else {
            st = gx_buf_append(out, &c, 1);
        }
    }
    return st;
}

enum gx_status
pr_usage_sql(const struct pr_usage_query *q, const struct pr_usage_plan *pl,
             int watermark, int pg, struct gx_buf *b)
{
    if (!pg)
        return build_sql(q, pl->levels, watermark, pl->have_unpriced,
                         pl->have_cw, b);
    struct gx_buf tmp;
    gx_buf_init(&tmp, 64 * 1024);
    enum gx_status st =
        build_sql(q, pl->levels, watermark, pl->have_unpriced, pl->have_cw,
                  &tmp);
    if (st == GX_OK)
        st = inline_params(&tmp, pl->p, b);
    gx_buf_cleanup(&tmp);
    return st;
}

static void
format_group(enum pr_group g, const char *text, int64_t v, char *out,
             size_t n)
{
    if (g == PR_GROUP_NONE) {
        snprintf(out, n, "%s", "");
        return;
    }
    if (pr_group_is_text(g)) {
        snprintf(out, n, "%s", text ? text : "");
        return;
    }
    if (g == PR_GROUP_KEY) {
        if (v < 0)
            snprintf(out, n, "%s", "");
        else
            snprintf(out, n, "%lld", (long long)v);
        return;
    }
    time_t t = (time_t)(v / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    if (g == PR_GROUP_DAY)
        strftime(out, n, "%Y-%m-%d", &tm);
    else
        strftime(out, n, "%Y-%m-%dT%H:00Z", &tm);
}

static int64_t
floor_hour(int64_t ms)
{
    int64_t r = ms % 3600000;
    if (r < 0)
        r += 3600000;
    return ms - r;
}

static int64_t
floor_day(int64_t ms)
{
    int64_t r = ms % 86400000;
    if (r < 0)
        r += 86400000;
    return ms - r;
}

void
pr_usage_plan_make(const struct pr_usage_query *q, struct pr_usage_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    int64_t since = q->since_ms, until = q->until_ms;
    if (until < since)
        until = since;
    int64_t h0 = floor_hour(since);
    if (h0 < since)
        h0 += 3600000;
    int64_t h1 = floor_hour(until);
    int64_t d0 = floor_day(h0);
    if (d0 < h0)
        d0 += 86400000;
    int64_t d1 = floor_day(h1);
    pl->have_unpriced = 1;
    pl->have_cw = 1;
    /* The rollup cells have no api dim: grouping by api reads raw rows
     * (exact; adding the dim would be a new cell kind and a backfill). */
    pl->levels = q->raw_only || h0 >= h1 || q->group_by == PR_GROUP_API ? 0
                 : d0 < d1 && q->group_by != PR_GROUP_HOUR              ? 2
                                                                        : 1;
    pl->p[1] = since;
    pl->p[2] = until;
    pl->p[3] = h0;
    pl->p[4] = h1;
    pl->p[5] = q->key_filter;
    pl->p[6] = d0;
    pl->p[7] = d1;
}

void
pr_usage_group_fill(struct pr_usage_group *g, enum pr_group by,
                    const char *gtext, int64_t gint, const int64_t v[9],
                    const int64_t *hist)
{
    memset(g, 0, sizeof(*g));
    format_group(by, gtext, gint, g->group, sizeof(g->group));
    g->requests = v[0];
    g->errors = v[1];
    g->prompt_tokens = v[2];
    g->completion_tokens = v[3];
    g->cached_tokens = v[4];
    g->cost_pusd = v[5];
    g->unpriced = v[6];
    g->cache_write_tokens = v[7];
    g->reasoning_tokens = v[8];
    pr_pusd_format(g->cost_pusd, g->cost_usd, sizeof(g->cost_usd));
    g->p50_ms = pr_lat_quantile(hist, 0.50);
    g->p95_ms = pr_lat_quantile(hist, 0.95);
}

enum gx_status
pr_usage_result_add(struct pr_usage_result *r, size_t *cap,
                    struct pr_usage_group **g)
{
    if (r->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct pr_usage_group *nr = realloc(r->rows, nc * sizeof(*nr));
        if (!nr)
            return GX_ENOMEM;
        r->rows = nr;
        *cap = nc;
    }
    *g = &r->rows[r->n++];
    return GX_OK;
}

enum gx_status
pr_usage_result_finish(struct pr_usage_result *r, enum pr_group by)
{
    /* A range with no rows gives no group, except for group none where the
     * outer SUMs over zero branches give no row either: return one zero
     * row so "total" always has an answer. */
    if (by == PR_GROUP_NONE && r->n == 0) {
        r->rows = calloc(1, sizeof(*r->rows));
        if (!r->rows)
            return GX_ENOMEM;
        r->n = 1;
        pr_pusd_format(0, r->rows[0].cost_usd, sizeof(r->rows[0].cost_usd));
        r->rows[0].p50_ms = r->rows[0].p95_ms = -1;
    }
    return GX_OK;
}

enum gx_status
pr_usage_query(const char *path, const struct pr_usage_query *q,
               struct pr_usage_result **out, char *err, size_t errlen)
{
    if (!path || !q || !out)
        return GX_EINVAL;
    const struct pr_store_ops *ops =
        pr_store_is_pg(path) ? &pr_store_pg : &pr_store_sqlite;
    return ops->usage_query(path, q, out, err, errlen);
}

enum gx_status
pr_sq_usage_query(const char *path, const struct pr_usage_query *q,
                  struct pr_usage_result **out, char *err, size_t errlen)
{
    enum gx_status rs = GX_EIO;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    struct gx_buf sql;
    gx_buf_init(&sql, 64 * 1024);
    struct pr_usage_result *res = NULL;
    size_t cap = 0;
    struct pr_usage_plan pl;
    pr_usage_plan_make(q, &pl);

    if (pr_db_open(path, 1, &db, err, errlen) != SQLITE_OK)
        goto out;
    /* Read-only: never migrate here.  A version-1 ledger (not yet opened
     * by this llmux's writer) has no daily cells: use the hourly ones. */
    int version = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (version < 1) {
        gx_errf(err, errlen,
                "%s is not an llmux usage database (empty or"
                " another schema)",
                path);
        rs = GX_ENOTFOUND;
        goto out;
    }
    if (version < 2 && pl.levels == 2)
        pl.levels = 1;
    pl.have_unpriced = version >= 4;
    /* Version 4 has the cache-write and reasoning columns in raw rows but
     * not in the cells: read raw rows only, so the sums stay exact. */
    pl.have_cw = version >= 5;
    if (version == 4)
        pl.levels = 0;
    if (pr_usage_sql(q, &pl, version >= 3, 0, &sql) != GX_OK) {
        gx_errf(err, errlen, "internal: query text too long");
        rs = GX_ENOMEM;
        goto out;
    }
    if (sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "usage query: %s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_bind_int64(st, 1, pl.p[1]);
    sqlite3_bind_int64(st, 2, pl.p[2]);
    if (pl.levels > 0) {
        sqlite3_bind_int64(st, 3, pl.p[3]);
        sqlite3_bind_int64(st, 4, pl.p[4]);
    }
    if (pl.levels == 2) {
        sqlite3_bind_int64(st, 6, pl.p[6]);
        sqlite3_bind_int64(st, 7, pl.p[7]);
    }
    if (q->key_filter != PR_KEY_ALL && q->key_filter != -1)
        sqlite3_bind_int64(st, 5, q->key_filter);

    res = calloc(1, sizeof(*res));
    if (!res) {
        rs = GX_ENOMEM;
        goto out;
    }
    int rc;
    /* The shared-cache memory database locks tables (SQLITE_LOCKED, not
     * covered by busy_timeout) while the writer commits: retry. */
    for (int tries = 0;; tries++) {
        rc = sqlite3_step(st);
        if ((rc & 0xff) != SQLITE_LOCKED || tries >= 2500)
            break;
        sqlite3_reset(st);
        usleep(2000);
    }
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        struct pr_usage_group *g;
        if (pr_usage_result_add(res, &cap, &g) != GX_OK) {
            rs = GX_ENOMEM;
            goto out;
        }
        int64_t v[9], hist[PR_LAT_NBUCKETS];
        for (int i = 0; i < 6; i++)
            v[i] = sqlite3_column_int64(st, 1 + i);
        for (int i = 0; i < PR_LAT_NBUCKETS; i++)
            hist[i] = sqlite3_column_int64(st, 7 + i);
        for (int i = 6; i < 9; i++)
            v[i] = sqlite3_column_int64(st, 1 + PR_LAT_NBUCKETS + i);
        int is_text = pr_group_is_text(q->group_by);
        pr_usage_group_fill(
            g, q->group_by,
            is_text ? (const char *)sqlite3_column_text(st, 0) : NULL,
            is_text ? 0 : sqlite3_column_int64(st, 0), v, hist);
    }
    if (rc != SQLITE_DONE) {
        /* SQLite's SUM fails with "integer overflow" rather than wrap. */
        gx_errf(err, errlen, "usage query: %s", sqlite3_errmsg(db));
        goto out;
    }
    rs = pr_usage_result_finish(res, q->group_by);
    if (rs != GX_OK)
        goto out;
    *out = res;
    res = NULL;
out:
    pr_usage_result_free(res);
    sqlite3_finalize(st);
    sqlite3_close(db);
    gx_buf_cleanup(&sql);
    return rs;
}

void
pr_usage_result_free(struct pr_usage_result *r)
{
    if (!r)
        return;
    free(r->rows);
    free(r);
}

enum gx_status
pr_json_str(struct gx_buf *b, const char *s)
{
    enum gx_status st = gx_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; st == GX_OK && *p;
         p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            st = gx_buf_append(b, e, 2);
        } else if (*p < 0x20) {
            st = gx_buf_printf(b, "\\u%04x", *p);
        } else {
            st = gx_buf_append(b, p, 1);
        }
    }
    if (st == GX_OK)
        st = gx_buf_append(b, "\"", 1);
    return st;
}

enum gx_status
pr_usage_result_json(const struct pr_usage_result *r, struct gx_buf *out)
{
    return pr_usage_result_json_whatif(r, NULL, 0, out);
}

enum gx_status
pr_usage_result_json_whatif(const struct pr_usage_result *r,
                            const struct pr_whatif_model *wi, size_t n_wi,
                            struct gx_buf *out)
{
    if (!r || !out)
        return GX_EINVAL;
    enum gx_status st = gx_buf_printf(out, "{\"data\":[");
    for (size_t i = 0; st == GX_OK && i < r->n; i++) {
        const struct pr_usage_group *g = &r->rows[i];
        st = gx_buf_printf(out, "%s{\"group\":", i ? "," : "");
        if (st == GX_OK)
            st = pr_json_str(out, g->group);
        if (st == GX_OK)
            st = gx_buf_printf(
                out,
                ",\"requests\":%lld,\"errors\":%lld,\"prompt_tokens\":%lld,"
                "\"completion_tokens\":%lld,\"cached_tokens\":%lld,"
                "\"cache_write_tokens\":%lld,\"reasoning_tokens\":%lld,"
                "\"cost_usd\":%s,\"cost_pusd\":%lld,\"unpriced\":%lld",
                (long long)g->requests, (long long)g->errors,
                (long long)g->prompt_tokens, (long long)g->completion_tokens,
                (long long)g->cached_tokens, (long long)g->cache_write_tokens,
                (long long)g->reasoning_tokens, g->cost_usd,
                (long long)g->cost_pusd, (long long)g->unpriced);
        if (st == GX_OK) {
            if (g->p50_ms < 0)
                st = gx_buf_printf(out, ",\"p50_ms\":null,\"p95_ms\":null}");
            else
                st = gx_buf_printf(out, ",\"p50_ms\":%lld,\"p95_ms\":%lld}",
                                   (long long)g->p50_ms, (long long)g->p95_ms);
        }
    }
    if (st == GX_OK)
        st = gx_buf_printf(out, "]");
    if (st == GX_OK && wi)
        st = pr_whatif_json(r, wi, n_wi, out);
    if (st == GX_OK)
        st = gx_buf_printf(out, "}");
    return st;
}
