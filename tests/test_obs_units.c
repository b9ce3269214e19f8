/*
 * Unit tests for the pure parts of issue 14's additions: the W3C
 * traceparent parser (gateway/otel.c) and what-if re-pricing
 * (pricing/whatif.c: exact sums, ordering, overflow, JSON).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "../gateway/gw_int.h"
#include "harness.h"

static int
tp(const char *h, int *sampled)
{
    uint8_t t[16], s[8];
    *sampled = -1;
    return gw_otel_parse_traceparent(h, t, s, sampled);
}

static void
test_traceparent(void)
{
    int smp;
    const char *T = "4bf92f3577b34da6a3ce929d0e0e4736";
    const char *S = "00f067aa0ba902b7";
    char h[160];
    snprintf(h, sizeof(h), "00-%s-%s-01", T, S);
    T_EQ_INT(tp(h, &smp), 0);
    T_EQ_INT(smp, 1);
    uint8_t t[16], s[8];
    T_EQ_INT(gw_otel_parse_traceparent(h, t, s, &smp), 0);
    T_EQ_INT(t[0], 0x4b);
    T_EQ_INT(t[15], 0x36);
    T_EQ_INT(s[0], 0x00);
    T_EQ_INT(s[7], 0xb7);
    snprintf(h, sizeof(h), "00-%s-%s-00", T, S);
    T_EQ_INT(tp(h, &smp), 0);
    T_EQ_INT(smp, 0);
    /* Other flag bits do not make it sampled; bit 0 does. */
    snprintf(h, sizeof(h), "00-%s-%s-02", T, S);
    T_EQ_INT(tp(h, &smp), 0);
    T_EQ_INT(smp, 0);
    snprintf(h, sizeof(h), "00-%s-%s-03", T, S);
    T_EQ_INT(tp(h, &smp), 0);
    T_EQ_INT(smp, 1);
    /* A later version may carry more fields; 00 may not. */
    snprintf(h, sizeof(h), "01-%s-%s-01-extra", T, S);
    T_EQ_INT(tp(h, &smp), 0);
    snprintf(h, sizeof(h), "00-%s-%s-01-extra", T, S);
    T_EQ_INT(tp(h, &smp), -1);
    snprintf(h, sizeof(h), "01-%s-%s-01x", T, S);
    T_EQ_INT(tp(h, &smp), -1);
    const char *bad[] = {
        NULL, "", "00", "garbage",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = tp(bad[i], &smp);
        if (r != -1)
            fprintf(stderr, "  accepted: %s\n", bad[i] ? bad[i] : "(null)");
        T_EQ_INT(r, -1);
    }
}

static void
test_whatif(void)
{
    struct pr_usage_group g[2];
    memset(g, 0, sizeof(g));
    g[0].requests = 2;
    g[0].prompt_tokens = 1000;
    g[0].cached_tokens = 400;
    g[0].cache_write_tokens = 200;
    g[0].completion_tokens = 100;
    g[0].cost_pusd = 5;
    g[1].requests = 1;
    g[1].prompt_tokens = 500;
    g[1].completion_tokens = 50;
    g[1].reasoning_tokens = 20;
    g[1].cost_pusd = 7;
    for (int i = 0; i < 2; i++) /* as the query fills it */
        pr_pusd_format(g[i].cost_pusd, g[i].cost_usd, sizeof(g[i].cost_usd));
    struct pr_usage_result r = {2, g};
    struct pr_tokens t;
    int64_t actual, req;
    T_EQ_INT(pr_usage_totals(&r, &t, &actual, &req), GX_OK);
    T_EQ_INT(t.prompt, 1500);
    T_EQ_INT(t.cached, 400);
    T_EQ_INT(t.cache_write, 200);
    T_EQ_INT(t.reasoning, 20);
    T_EQ_INT(t.completion, 150);
    T_EQ_INT(actual, 12);
    T_EQ_INT(req, 3);

    struct pr_whatif_model m[3] = {
        {"dear", "config", {10, 1, 10, 100}},
        {"huge", "config", {INT64_MAX / 2, 0, 0, 0}}, /* overflows */
        {"cheap", "built-in", {2, 1, 5, 3}},
    };
    struct pr_whatif_row rows[3];
    T_EQ_INT(pr_whatif_price(&r, m, 3, rows), GX_OK);
    /* cheap: 900 uncached x 2 + 400 cached x 1 + 200 cache writes x 5 +
     * 150 x 3 = 3650; dear (cache writes at input): 9000 + 400 + 2000 +
     * 15000 = 26400; huge last, not ok. */
    T_EQ_STR(rows[0].m->name, "cheap");
    T_EQ_INT(rows[0].ok, 1);
    T_EQ_INT(rows[0].cost_pusd, 3650);
    T_EQ_INT(rows[0].delta_pusd, 3638);
    T_EQ_STR(rows[1].m->name, "dear");
    T_EQ_INT(rows[1].cost_pusd, 26400);
    T_EQ_STR(rows[2].m->name, "huge");
    T_EQ_INT(rows[2].ok, 0);

    struct gx_buf b;
    gx_buf_init(&b, 0);
    T_EQ_INT(pr_usage_result_json_whatif(&r, m, 3, &b), GX_OK);
    json_t *o = b.data ? json_loadb(b.data, b.len, 0, NULL) : NULL;
    T_CHECK(json_is_array(json_object_get(o, "data")));
    json_t *wi = json_object_get(o, "what_if");
    T_EQ_INT(json_integer_value(json_object_get(wi, "prompt_tokens")), 1500);
    T_EQ_INT(json_integer_value(json_object_get(wi, "cache_write_tokens")),
             200);
    T_EQ_INT(json_integer_value(json_object_get(wi, "reasoning_tokens")), 20);
    json_t *g0 = json_array_get(json_object_get(o, "data"), 0);
    T_EQ_INT(json_integer_value(json_object_get(g0, "cache_write_tokens")),
             200);
    T_EQ_INT(json_integer_value(json_object_get(json_array_get(
                 json_object_get(o, "data"), 1), "reasoning_tokens")),
             20);
    T_EQ_STR(json_string_value(json_object_get(wi, "actual_cost_usd")),
             "0.000000000012");
    json_t *ms = json_object_get(wi, "models");
    T_EQ_INT(json_array_size(ms), 3);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(ms, 0),
                                               "cost_usd")),
             "0.00000000365");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(ms, 0),
                                               "cache_write_per_mtok")),
             "0.000005"); /* 5 pUSD a token */
    T_CHECK(json_is_null(json_object_get(json_array_get(ms, 2), "cost_usd")));
    json_decref(o);
    /* Without models: the plain body, no what_if. */
    gx_buf_reset(&b);
    T_EQ_INT(pr_usage_result_json(&r, &b), GX_OK);
    T_CHECK(b.data && !strstr(b.data, "what_if"));
    gx_buf_cleanup(&b);

    /* The built-in table: every entry priced, names as `llmux prices`. */
    size_t n = pr_whatif_builtin(NULL, 0);
    T_CHECK(n >= 4);
    struct pr_whatif_model all[64];
    T_CHECK(n <= 64);
    T_EQ_INT(pr_whatif_builtin(all, 64), n);
    int seen = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        if (!strcmp(all[i].name, "claude-sonnet-4.5")) {
            seen++;
            T_EQ_INT(all[i].rates.cache_write_pusd, 3750000);
        }
    T_EQ_INT(seen, 1);
}

int
main(void)
{
    T_RUN(test_traceparent);
    T_RUN(test_whatif);
    return T_END();
}
