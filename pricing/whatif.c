/*
 * whatif.c: "what would this have cost elsewhere".  The period's actual
 * token counts, summed from a usage result, re-priced at other models'
 * rates with the same exact arithmetic as a request's cost
 * (pr_cost_tokens, integer picodollars): no floating point anywhere, so
 * the figures are the exact sums a bill at those prices would show.
 *
 * Cache writes are re-priced at each model's cache-write price (its input
 * price when it has none, as pr_cost_tokens defines); reasoning tokens are
 * part of the completion tokens and billed as output.  Limit: a model's
 * cached price applies to the cached tokens the actual providers reported
 * (a provider without prompt caching would have billed them at full
 * input).
 */
#include "pricing.h"
#include "pricing_int.h"

#include <stdlib.h>
#include <string.h>

enum gx_status
pr_usage_totals(const struct pr_usage_result *r, struct pr_tokens *t,
                int64_t *actual_pusd, int64_t *requests)
{
    memset(t, 0, sizeof(*t));
    *actual_pusd = 0;
    *requests = 0;
    for (size_t i = 0; r && i < r->n; i++) {
        const struct pr_usage_group *g = &r->rows[i];
        if (__builtin_add_overflow(t->prompt, g->prompt_tokens, &t->prompt) ||
            __builtin_add_overflow(t->cached, g->cached_tokens, &t->cached) ||
            __builtin_add_overflow(t->cache_write, g->cache_write_tokens,
                                   &t->cache_write) ||
            __builtin_add_overflow(t->reasoning, g->reasoning_tokens,
                                   &t->reasoning) ||
            __builtin_add_overflow(t->completion, g->completion_tokens,
                                   &t->completion) ||
            __builtin_add_overflow(*requests, g->requests, requests) ||
            pr_pusd_add(*actual_pusd, g->cost_pusd, actual_pusd) != GX_OK)
            return GX_ETOOBIG;
    }
    /* Rows are checked when written (pr_cost_tokens); clamp anyway so a
     * hand-edited ledger still re-prices rather than fails. */
    if (t->cached > t->prompt)
        t->cached = t->prompt;
    if (t->cache_write > t->prompt - t->cached)
        t->cache_write = t->prompt - t->cached;
    if (t->reasoning > t->completion)
        t->reasoning = t->completion;
    return GX_OK;
}

static int
row_cmp(const void *a, const void *b)
{
    const struct pr_whatif_row *x = a, *y = b;
    if (x->ok != y->ok)
        return x->ok ? -1 : 1;
    if (x->ok && x->cost_pusd != y->cost_pusd)
        return x->cost_pusd < y->cost_pusd ? -1 : 1;
    return strcmp(x->m->name, y->m->name);
}

enum gx_status
pr_whatif_price(const struct pr_usage_result *r,
                const struct pr_whatif_model *m, size_t n,
                struct pr_whatif_row *rows)
{
    struct pr_tokens t;
    int64_t actual, req;
    enum gx_status st = pr_usage_totals(r, &t, &actual, &req);
    if (st != GX_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        rows[i].m = &m[i];
        rows[i].ok = pr_cost_tokens(&m[i].rates, &t, &rows[i].cost_pusd) ==
                         GX_OK &&
                     !__builtin_sub_overflow(rows[i].cost_pusd, actual,
                                             &rows[i].delta_pusd);
    }
    qsort(rows, n, sizeof(*rows), row_cmp);
    return GX_OK;
}

size_t
pr_whatif_builtin(struct pr_whatif_model *out, size_t max)
{
    size_t n = pr_price_default_count();
    for (size_t i = 0; i < n && i < max; i++) {
        struct pr_price p;
        const char *name = pr_price_default_at(i, &p);
        out[i].name = name;
        out[i].source = "built-in";
        if (!pr_rates_default(name, &out[i].rates))
            out[i].rates = (struct pr_rates){p.input_pusd,
                                             p.cached_input_pusd,
                                             p.input_pusd, p.output_pusd};
    }
    return n;
}

enum gx_status
pr_whatif_json(const struct pr_usage_result *r,
               const struct pr_whatif_model *m, size_t n, struct gx_buf *out)
{
    struct pr_tokens t;
    int64_t actual, req;
    enum gx_status st = pr_usage_totals(r, &t, &actual, &req);
    if (st != GX_OK)
        return st;
    struct pr_whatif_row *rows = calloc(n ? n : 1, sizeof(*rows));
    if (!rows)
        return GX_ENOMEM;
    st = pr_whatif_price(r, m, n, rows);
    char a[48];
    pr_pusd_format(actual, a, sizeof(a));
    if (st == GX_OK)
        st = gx_buf_printf(
            out,
            ",\"what_if\":{\"requests\":%lld,\"prompt_tokens\":%lld,"
            "\"cached_tokens\":%lld,\"cache_write_tokens\":%lld,"
            "\"completion_tokens\":%lld,\"reasoning_tokens\":%lld,"
            "\"actual_cost_usd\":\"%s\","
            "\"actual_cost_pusd\":%lld,\"models\":[",
            (long long)req, (long long)t.prompt, (long long)t.cached,
            (long long)t.cache_write, (long long)t.completion,
            (long long)t.reasoning, a, (long long)actual);
    for (size_t i = 0; st == GX_OK && i < n; i++) {
        const struct pr_whatif_row *w = &rows[i];
        char in[32], ca[32], cw[32], o[32];
        pr_usd_per_mtok_format(w->m->rates.input_pusd, in, sizeof(in));
        pr_usd_per_mtok_format(w->m->rates.cached_input_pusd, ca, sizeof(ca));
        pr_usd_per_mtok_format(w->m->rates.cache_write_pusd, cw, sizeof(cw));
        pr_usd_per_mtok_format(w->m->rates.output_pusd, o, sizeof(o));
        st = gx_buf_printf(out, "%s{\"model\":", i ? "," : "");
        if (st == GX_OK)
            st = pr_json_str(out, w->m->name);
        if (st == GX_OK)
            st = gx_buf_printf(out,
                               ",\"source\":\"%s\",\"input_per_mtok\":\"%s\","
                               "\"cached_input_per_mtok\":\"%s\","
                               "\"cache_write_per_mtok\":\"%s\","
                               "\"output_per_mtok\":\"%s\",",
                               w->m->source, in, ca, cw, o);
        if (st == GX_OK && !w->ok) {
            st = gx_buf_printf(out, "\"cost_usd\":null,\"cost_pusd\":null,"
                                    "\"delta_usd\":null,\"delta_pusd\":"
                                    "null}");
        } else if (st == GX_OK) {
            char c[48], d[48];
            pr_pusd_format(w->cost_pusd, c, sizeof(c));
            pr_pusd_format(w->delta_pusd, d, sizeof(d));
            st = gx_buf_printf(out,
                               "\"cost_usd\":\"%s\",\"cost_pusd\":%lld,"
                               "\"delta_usd\":\"%s\",\"delta_pusd\":%lld}",
                               c, (long long)w->cost_pusd, d,
                               (long long)w->delta_pusd);
        }
    }
    if (st == GX_OK)
        st = gx_buf_printf(out, "]}");
    free(rows);
    return st;
}
