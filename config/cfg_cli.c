/*
 * cfg_cli: cfg_print and `llmux check`.
 *
 * Output never contains a secret: api_key and admin_key print as "set" or
 * "unset", header values are left out (they may carry tokens), and a
 * base_url's user:password@ part is masked.
 */
#include "config.h"
#include "../pricing/pricing.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const policy_names[] = {"priority", "weighted", "cost",
                                           "latency"};

/* pUSD per token as USD per million tokens: pusd / 1e6, exactly. */
static void
fmt_price(int64_t pusd, char *buf, size_t len)
{
    char frac[8];
    snprintf(frac, sizeof(frac), "%06" PRId64, pusd % 1000000);
    size_t n = strlen(frac);
    while (n > 1 && frac[n - 1] == '0')
        frac[--n] = '\0';
    snprintf(buf, len, "%" PRId64 ".%s", pusd / 1000000, frac);
}

static void
print_url(FILE *f, const char *url)
{
    const char *scheme = strstr(url, "://");
    if (scheme) {
        const char *host = scheme + 3;
        const char *slash = strchr(host, '/');
        const char *at = strchr(host, '@');
        if (at && (!slash || at < slash)) {
            fprintf(f, "%.*s***%s", (int)(host - url), url, at);
            return;
        }
    }
    fputs(url, f);
}

static void
print_target(FILE *f, const struct cfg *c, const struct cfg_target *t)
{
    const struct cfg_provider *p = &c->providers[t->provider];
    fprintf(f, "%s@%s", p->models[t->model].name, p->name);
}

void
cfg_print(const struct cfg *c, FILE *f)
{
    char db[1024]; /* a PostgreSQL URI may carry a password */
    pr_store_redact(c->database, db, sizeof(db));
    fprintf(f, "listen %s%s%s:%d, workers %d, database %s, require_keys %s, "
               "admin_key %s, max_body_bytes %" PRId64
               ", max_connections %d, header_timeout_ms %d, idle_timeout_ms "
               "%d, stream_buffer_bytes %d, cors origins %zu, tls %s\n",
            strchr(c->listen_host, ':') ? "[" : "", c->listen_host,
            strchr(c->listen_host, ':') ? "]" : "", c->listen_port,
            c->workers, db, c->require_keys ? "true" : "false",
            c->admin_key ? "set" : "unset", c->max_body_bytes,
            c->max_connections, c->header_timeout_ms, c->idle_timeout_ms,
            c->stream_buffer_bytes,
            c->n_cors_origins, c->tls_cert ? "on" : "off");
    for (size_t k = 0; k < c->n_providers; k++) {
        const struct cfg_provider *p = &c->providers[k];
        if (p->kind == CFG_KIND_LOCAL) {
            fprintf(f, "provider %s: kind local, model_path %s, threads %d, "
                       "context %d, parallel %d\n",
                    p->name, p->model_path, p->threads, p->context,
                    p->parallel);
        } else {
            const char *kind = p->kind == CFG_KIND_ANTHROPIC ? "anthropic"
                               : p->kind == CFG_KIND_GEMINI  ? "gemini"
                                                             : "openai";
            fprintf(f, "provider %s: kind %s, base_url ", p->name, kind);
            print_url(f, p->base_url);
            fprintf(f, ", api_key %s, timeout_ms %d, connect_timeout_ms %d, "
                       "first_byte_timeout_ms %d",
                    p->api_key ? "set" : "unset", p->timeout_ms,
                    p->connect_timeout_ms, p->first_byte_timeout_ms);
            for (size_t h = 0; h < p->n_headers; h++)
                fprintf(f, "%s%s", h ? ", " : ", headers ",
                        p->headers[h].name);
            fputc('\n', f);
        }
        for (size_t m = 0; m < p->n_models; m++) {
            const struct cfg_model *md = &p->models[m];
            char in[32], cached[32], out[32];
            fmt_price(md->input_pusd, in, sizeof(in));
            fmt_price(md->cached_input_pusd, cached, sizeof(cached));
            fmt_price(md->output_pusd, out, sizeof(out));
            fprintf(f, "  model %s@%s: upstream %s, ", md->name, p->name,
                    md->upstream);
            if (md->has_price && p->kind == CFG_KIND_ANTHROPIC) {
                /* Only this kind reports cache writes. */
                char cw[32];
                fmt_price(md->cache_write_pusd, cw, sizeof(cw));
                fprintf(f, "USD per million tokens: input %s, cached input "
                           "%s, cache write %s, output %s\n",
                        in, cached, cw, out);
            } else if (md->has_price)
                fprintf(f, "USD per million tokens: input %s, cached input "
                           "%s, output %s\n",
                        in, cached, out);
            else
                fputs("no price\n", f);
        }
    }
    for (size_t k = 0; k < c->n_routes; k++) {
        const struct cfg_route *r = &c->routes[k];
        fprintf(f, "route %s: policy %s, targets ", r->name,
                policy_names[r->policy]);
        for (size_t t = 0; t < r->n_targets; t++) {
            if (t)
                fputs(", ", f);
            print_target(f, c, &r->targets[t]);
            if (r->weights)
                fprintf(f, " (weight %g)", r->weights[t]);
        }
        if (r->has_fallback) {
            fputs("; fallback ", f);
            print_target(f, c, &r->fallback);
        }
        if (r->max_latency_ms)
            fprintf(f, "; max_latency_ms %d", r->max_latency_ms);
        fputc('\n', f);
    }
    /* Bare model names, as cfg_resolve sees them (routes shadow them). */
    for (size_t k = 0; k < c->n_providers; k++) {
        for (size_t m = 0; m < c->providers[k].n_models; m++) {
            const char *name = c->providers[k].models[m].name;
            int seen = 0;
            for (size_t q = 0; q < k && !seen; q++)
                for (size_t r = 0; r < c->providers[q].n_models && !seen; r++)
                    seen = !strcmp(c->providers[q].models[r].name, name);
            if (seen)
                continue;
            fprintf(f, "model %s:", name);
            if (cfg_route_find(c, name))
                fputs(" (shadowed by the route of that name)", f);
            for (size_t q = k; q < c->n_providers; q++)
                for (size_t r = 0; r < c->providers[q].n_models; r++)
                    if (!strcmp(c->providers[q].models[r].name, name))
                        fprintf(f, " %s@%s", name, c->providers[q].name);
            fputc('\n', f);
        }
    }
    const struct cfg_failover *fo = &c->failover;
    fprintf(f, "failover: max_attempts %d, retry_on_status", fo->max_attempts);
    for (size_t k = 0; k < fo->n_retry_on_status; k++)
        fprintf(f, " %d", fo->retry_on_status[k]);
    if (!fo->n_retry_on_status)
        fputs(" (none)", f);
    fprintf(f, ", backoff_ms %d, hedge_after_ms %d, circuit_failures %d, "
               "circuit_cooldown_ms %d\n",
            fo->backoff_ms, fo->hedge_after_ms, fo->circuit_failures,
            fo->circuit_cooldown_ms);
}

static void
check_usage(FILE *f)
{
    fputs("usage: llmux check --config FILE\n"
          "       llmux check --defaults\n"
          "\n"
          "Validates a configuration file (JSON, ${VAR} taken from the\n"
          "environment) and prints the resolved providers, models and\n"
          "routes; secrets print as set/unset.  --defaults checks the\n"
          "built-in configuration that `llmux serve` uses without --config.\n"
          "\n"
          "Exit status: 0 valid; 1 invalid (FILE:LINE:COL: path: reason on\n"
          "stderr); 2 usage error.\n",
          f);
}

int
cfg_cli_check(int argc, char **argv)
{
    const char *path = NULL;
    int defaults = 0;
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            check_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--config") || !strcmp(a, "-c")) {
            if (k + 1 >= argc) {
                fprintf(stderr, "llmux check: %s needs a FILE\n\n", a);
                check_usage(stderr);
                return 2;
            }
            path = argv[++k];
        } else if (!strncmp(a, "--config=", 9)) {
            path = a + 9;
        } else if (!strcmp(a, "--defaults")) {
            defaults = 1;
        } else {
            fprintf(stderr, "llmux check: unexpected argument '%s'\n\n", a);
            check_usage(stderr);
            return 2;
        }
    }
    if ((!path && !defaults) || (path && defaults) || (path && !path[0])) {
        fprintf(stderr, "llmux check: give --config FILE or --defaults\n\n");
        check_usage(stderr);
        return 2;
    }
    char err[1024] = "";
    struct cfg *c = NULL;
    enum gx_status st = path ? cfg_load_file(path, &c, err, sizeof(err))
                             : cfg_defaults(&c, err, sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "%s\n", err[0] ? err : gx_status_str(st));
        return 1;
    }
    cfg_print(c, stdout);
    printf("%s: OK\n", c->path);
    cfg_free(c);
    return 0;
}
