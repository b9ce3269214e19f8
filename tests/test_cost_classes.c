/*
 * test_cost_classes: the cost of every token class (DESIGN.md section 7):
 * cache reads, cache writes and reasoning tokens, exact in pUSD, the
 * built-in rates of the native providers' models, and the config's
 * cache_write_per_mtok with its defaults per kind.
 */
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"
#include "../pricing/pricing.h"

static void
test_builtin_rates(void)
{
    struct pr_rates r;
    T_CHECK(pr_rates_default("claude-sonnet-4.5", &r));
    T_EQ_INT(r.input_pusd, 3000000);
    T_EQ_INT(r.cached_input_pusd, 300000);
    T_EQ_INT(r.cache_write_pusd, 3750000);
    T_EQ_INT(r.output_pusd, 15000000);
    T_CHECK(pr_rates_default("gemini-2.5-flash", &r));
    T_EQ_INT(r.input_pusd, 300000);
    T_EQ_INT(r.cached_input_pusd, 30000);
    T_EQ_INT(r.cache_write_pusd, 300000); /* no write price: as input */
    T_EQ_INT(r.output_pusd, 2500000);
    T_CHECK(!pr_rates_default("no-such-model", &r));
    /* The old table agrees with the new one. */
    struct pr_price p;
    T_CHECK(pr_price_default("claude-sonnet-4.5", &p));
    T_EQ_INT(p.cached_input_pusd, 300000);
}

static void
test_cost_tokens(void)
{
    struct pr_rates son;
    T_CHECK(pr_rates_default("claude-sonnet-4.5", &son));
    /* Anthropic: input_tokens 100, cache_creation 2000, cache_read 5000,
     * output 300 -> prompt 7100:
     * 100*3e6 + 5000*3e5 + 2000*3.75e6 + 300*1.5e7
     * = 3e8 + 1.5e9 + 7.5e9 + 4.5e9 = 1.38e10 pUSD = 0.0138 USD. */
    struct pr_tokens t = {7100, 5000, 2000, 300, 0};
    int64_t c = -1;
    T_EQ_INT(pr_cost_tokens(&son, &t, &c), GX_OK);
    T_EQ_INT(c, 13800000000LL);
    char buf[64];
    pr_pusd_format(c, buf, sizeof(buf));
    T_EQ_STR(buf, "0.0138");

    /* Gemini: promptTokenCount 1000 (cachedContentTokenCount 600),
     * candidates 50 + thoughts 200 -> completion 250, reasoning 200:
     * 400*3e5 + 600*3e4 + 250*2.5e6 = 1.2e8 + 1.8e7 + 6.25e8. */
    struct pr_rates fl;
    T_CHECK(pr_rates_default("gemini-2.5-flash", &fl));
    struct pr_tokens g = {1000, 600, 0, 250, 200};
    T_EQ_INT(pr_cost_tokens(&fl, &g, &c), GX_OK);
    T_EQ_INT(c, 763000000LL);
    /* Thinking tokens cost the output price: the same bill as 250 plain
     * completion tokens. */
    struct pr_tokens g2 = {1000, 600, 0, 250, 0};
    int64_t c2 = -1;
    T_EQ_INT(pr_cost_tokens(&fl, &g2, &c2), GX_OK);
    T_EQ_INT(c2, c);

    /* pr_cost is the same formula without cache writes. */
    struct pr_price sp = {3000000, 300000, 15000000};
    struct pr_tokens t3 = {7100, 5000, 0, 300, 0};
    int64_t a = -1, b = -2;
    T_EQ_INT(pr_cost(&sp, 7100, 5000, 300, &a), GX_OK);
    T_EQ_INT(pr_cost_tokens(&son, &t3, &b), GX_OK);
    T_EQ_INT(a, b);

    /* Bad counts: refused, result untouched. */
    c = 7;
    struct pr_tokens bad1 = {100, 60, 50, 0, 0}; /* reads+writes > prompt */
    struct pr_tokens bad2 = {100, 0, 0, 10, 11}; /* reasoning > completion */
    struct pr_tokens bad3 = {100, 0, -1, 0, 0};
    T_EQ_INT(pr_cost_tokens(&son, &bad1, &c), GX_EINVAL);
    T_EQ_INT(pr_cost_tokens(&son, &bad2, &c), GX_EINVAL);
    T_EQ_INT(pr_cost_tokens(&son, &bad3, &c), GX_EINVAL);
    T_EQ_INT(c, 7);
    /* Overflow in the cache-write term alone is an error, not a wrap. */
    struct pr_rates huge = {0, 0, INT64_MAX / 2, 0};
    struct pr_tokens w2 = {2, 0, 2, 0, 0}, w3 = {3, 0, 3, 0, 0};
    T_EQ_INT(pr_cost_tokens(&huge, &w2, &c), GX_OK);
    T_EQ_INT(c, (INT64_MAX / 2) * 2);
    T_EQ_INT(pr_cost_tokens(&huge, &w3, &c), GX_ETOOBIG);
    T_EQ_INT(c, (INT64_MAX / 2) * 2);
    /* Sum overflow across terms. */
    struct pr_rates half = {INT64_MAX / 2, 0, INT64_MAX / 2, 0};
    struct pr_tokens s1 = {2, 0, 1, 0, 0};
    T_EQ_INT(pr_cost_tokens(&half, &s1, &c), GX_OK);
    struct pr_tokens s2 = {3, 0, 1, 0, 0};
    T_EQ_INT(pr_cost_tokens(&half, &s2, &c), GX_ETOOBIG);
}

static void
test_cache_write_default(void)
{
    int64_t w = -1;
    T_EQ_INT(pr_cache_write_from_input(3000000, &w), GX_OK);
    T_EQ_INT(w, 3750000);
    T_EQ_INT(pr_cache_write_from_input(1, &w), GX_OK); /* 1.25 -> 1 */
    T_EQ_INT(w, 1);
    T_EQ_INT(pr_cache_write_from_input(2, &w), GX_OK); /* 2.5 -> 3 */
    T_EQ_INT(w, 3);
    T_EQ_INT(pr_cache_write_from_input(INT64_MAX / 2, &w), GX_ETOOBIG);
    T_EQ_INT(pr_cache_write_from_input(-1, &w), GX_EINVAL);
}

static struct cfg *
load(const char *text)
{
    char err[512] = "";
    struct cfg *c = NULL;
    if (cfg_load_string(text, "t.json", &c, err, sizeof(err)) != GX_OK)
        fprintf(stderr, "  config error: %s\n", err);
    return c;
}

static void
test_config_prices(void)
{
    struct cfg *c = load(
        "{\"providers\":{"
        "\"a\":{\"kind\":\"anthropic\",\"api_key\":\"k\",\"models\":{"
        "  \"claude-sonnet-4.5\":{\"upstream\":\"claude-sonnet-4-5\"},"
        "  \"cheap\":{\"input_per_mtok\":1.00,\"output_per_mtok\":5},"
        "  \"onehour\":{\"input_per_mtok\":3,\"output_per_mtok\":15,"
        "             \"cache_write_per_mtok\":6}}},"
        "\"g\":{\"kind\":\"gemini\",\"api_key\":\"k\",\"models\":"
        "  [\"gemini-2.5-flash\"]},"
        "\"o\":{\"kind\":\"openai\",\"base_url\":\"http://h\",\"models\":{"
        "  \"m\":{\"input_per_mtok\":2,\"output_per_mtok\":8}}}}}");
    T_CHECK(c != NULL);
    if (!c)
        return;
    const struct cfg_provider *a = cfg_provider_find(c, "a");
    const struct cfg_provider *g = cfg_provider_find(c, "g");
    const struct cfg_provider *o = cfg_provider_find(c, "o");
    T_CHECK(a && g && o);
    if (a && g && o) {
        T_EQ_INT(a->kind, CFG_KIND_ANTHROPIC);
        T_EQ_STR(a->base_url, "https://api.anthropic.com");
        T_EQ_INT(a->models[0].cache_write_pusd, 3750000); /* built in */
        T_EQ_INT(a->models[1].cache_write_pusd, 1250000); /* 1.25 x */
        T_EQ_INT(a->models[2].cache_write_pusd, 6000000); /* given */
        T_EQ_INT(g->kind, CFG_KIND_GEMINI);
        T_EQ_STR(g->base_url, "https://generativelanguage.googleapis.com");
        T_EQ_INT(g->models[0].cached_input_pusd, 30000);
        T_EQ_INT(o->models[0].cache_write_pusd, 2000000); /* = input */
        /* `llmux check` names the kinds and shows the write price. */
        char *text = NULL;
        size_t tl = 0;
        FILE *f = open_memstream(&text, &tl);
        if (f) {
            cfg_print(c, f);
            fclose(f);
        }
        T_CHECK(text && strstr(text, "provider a: kind anthropic, base_url "
                                     "https://api.anthropic.com"));
        T_CHECK(text && strstr(text, "provider g: kind gemini"));
        T_CHECK(text && strstr(text, "cached input 0.3, cache write 3.75, "
                                     "output 15.0"));
        T_CHECK(text && strstr(text, "onehour@a: upstream onehour, USD per "
                                     "million tokens: input 3.0, cached input "
                                     "3.0, cache write 6.0"));
        free(text);
    }
    cfg_free(c);
    /* A header that would carry the key a second time is refused. */
    char err[512] = "";
    struct cfg *bad = NULL;
    T_EQ_INT(cfg_load_string("{\"providers\":{\"a\":{\"kind\":\"anthropic\","
                             "\"api_key\":\"k\",\"headers\":{\"X-Api-Key\":"
                             "\"x\"},\"models\":[\"claude-sonnet-4.5\"]}}}",
                             "t.json", &bad, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strstr(err, "providers.a.headers.X-Api-Key") != NULL);
    cfg_free(bad);
    T_EQ_INT(cfg_load_string("{\"providers\":{\"a\":{\"kind\":\"gemini\","
                             "\"model_path\":\"x\",\"models\":"
                             "[\"gemini-2.5-flash\"]}}}",
                             "t.json", &bad, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strstr(err, "not valid for a gemini provider") != NULL);
    cfg_free(bad);
}

int
main(void)
{
    T_RUN(test_builtin_rates);
    T_RUN(test_cost_tokens);
    T_RUN(test_cache_write_default);
    T_RUN(test_config_prices);
    return T_END();
}
