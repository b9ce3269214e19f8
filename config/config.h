/*
 * config: loads the JSON configuration of DESIGN.md section 5, replaces
 * ${VAR} from the environment, validates it strictly and resolves it into
 * the plain structs below, or builds the built-in defaults (section 4).
 *
 * Errors name the JSON path and FILE:LINE:COL, e.g.
 *   "llmux.json:12:30: providers.relay.models.gpt-4.1.input_per_mtok:
 *    expected a number, got a string"
 *
 * Ownership: cfg_load_* and cfg_defaults return a struct cfg that the caller
 * frees with cfg_free; every string and array inside belongs to it.  A
 * loaded cfg is immutable and may be read from any thread.
 * May use pricing/ (for the built-in price table) and common/.
 */
#ifndef LLMUX_CONFIG_H
#define LLMUX_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/common.h"

/* Prices: picodollars per token (USD per million tokens x 1e6). */
struct cfg_model {
    char *name;      /* the name clients use, e.g. "gpt-4.1" */
    char *upstream;  /* the name sent upstream; == name when not given */
    int has_price;   /* 1 if the config or the built-in table priced it;
                        local models are always priced (0 unless given) */
    int64_t input_pusd;        /* per prompt token */
    int64_t cached_input_pusd; /* per cached prompt token (= input if none) */
    int64_t output_pusd;       /* per completion token */
    int64_t cache_write_pusd;  /* per cache-write prompt token (Anthropic
                                  cache_creation); cache_write_per_mtok, or
                                  the built-in table, or 1.25 x input for
                                  kind anthropic, else = input */
};

struct cfg_header {
    char *name;
    char *value;
};

enum cfg_kind {
    CFG_KIND_OPENAI = 0,
    CFG_KIND_LOCAL = 1,
    CFG_KIND_ANTHROPIC = 2, /* native Messages API (providers/anthropic.c) */
    CFG_KIND_GEMINI = 3     /* native generateContent (providers/gemini.c) */
};

/* Provider timeout defaults, the same for every kind (DESIGN.md section
 * 5): long enough that a 90 s non-stream generation and a stream whose
 * first token comes after 45 s (a long prompt's prefill, a reasoning
 * model) succeed.  A provider that bills a request we then cut off costs
 * money twice when the client retries, so cutting slow-but-working
 * providers short is not the default; faster failover comes from explicit
 * settings, the latency policy and hedging. */
#define CFG_DEFAULT_TIMEOUT_MS 600000            /* total: 10 min */
#define CFG_DEFAULT_CONNECT_TIMEOUT_MS 10000     /* TCP + TLS */
#define CFG_DEFAULT_FIRST_BYTE_TIMEOUT_MS 300000 /* until the first body byte */
/* limits.stream_buffer_bytes: what a slow client may have queued before
 * its stream's upstream pauses (a cloud stream stops reading, a local
 * sequence leaves the batch); big enough to ride out a short stall
 * without pausing, small next to the 64 MiB an answer may reach. */
#define CFG_STREAM_BUFFER_DEFAULT (256 * 1024)

struct cfg_provider {
    char *name; /* key under "providers" */
    enum cfg_kind kind;
    /* openai, anthropic, gemini */
    char *base_url; /* no trailing slash, e.g. "https://relay.example/v1" */
    char *api_key;  /* secret: never log or return it */
    int timeout_ms;            /* total, CFG_DEFAULT_TIMEOUT_MS */
    int connect_timeout_ms;    /* CFG_DEFAULT_CONNECT_TIMEOUT_MS */
    int first_byte_timeout_ms; /* CFG_DEFAULT_FIRST_BYTE_TIMEOUT_MS */
    struct cfg_header *headers;
    size_t n_headers;
    char *ca_file; /* PEM CA bundle to verify an https upstream with, in
                      place of the system's; NULL = system default */
    /* local */
    char *model_path;
    int threads;  /* default: number of CPUs */
    int context;  /* tokens, default 4096 */
    int parallel; /* sequences decoded together, default 4 */
    int queue;    /* requests waiting beyond those (0: none), default 64 */
    int prefix_cache;  /* idle sequences' KV kept for prefix reuse, 2 */
    int prefill_chunk; /* prompt tokens per batched step, default 32 */
    struct cfg_model *models;
    size_t n_models;
};

enum cfg_policy {
    CFG_POLICY_PRIORITY = 0,
    CFG_POLICY_WEIGHTED,
    CFG_POLICY_COST,
    CFG_POLICY_LATENCY
};

/* A resolved target: indexes into cfg->providers and that provider's models. */
struct cfg_target {
    size_t provider; /* index into cfg->providers */
    size_t model;    /* index into cfg->providers[provider].models */
};

struct cfg_route {
    char *name;
    enum cfg_policy policy;
    struct cfg_target *targets;
    size_t n_targets;
    double *weights; /* n_targets entries when policy is weighted, else NULL */
    int has_fallback;
    struct cfg_target fallback;
    int max_latency_ms; /* 0 = no limit */
};

struct cfg_failover {
    int max_attempts;     /* default 3 */
    int *retry_on_status; /* default 408 409 429 500 502 503 504 529 */
    size_t n_retry_on_status;
    int backoff_ms;          /* default 50 */
    int hedge_after_ms;      /* default 0 (off) */
    int circuit_failures;    /* default 5 */
    int circuit_cooldown_ms; /* default 30000 */
};

struct cfg {
    char *path;        /* file it came from, or "(defaults)" */
    char *listen_host; /* default "127.0.0.1" */
    int listen_port;   /* default 8080 */
    int workers;       /* default: number of CPUs */
    char *database;    /* default "llmux.db"; ":memory:" allowed; or a
                          postgres:// URI (from "database" or the
                          "storage" block, whose password is added as
                          ?password=, so never log it raw: use
                          pr_store_redact) */
    int storage_spool;       /* "storage.on_unavailable": "spool" -> 1,
                                "fail" (default) -> 0 */
    char *storage_spool_file; /* NULL = "llmux-spool.jsonl" */
    int storage_timeout_ms;  /* how long a batch waits for PostgreSQL to
                                answer before failing or spooling; 0 =
                                the ledger's default (10000) */
    char *admin_key;   /* NULL if none */
    int require_keys;  /* default 1 in a file, 0 for built-in defaults */
    int64_t max_body_bytes; /* default 4194304 */
    int max_connections;    /* default 10000; inbound, all workers */
    int header_timeout_ms;  /* default 10000: request line + headers */
    int idle_timeout_ms;    /* default 60000: keep-alive between requests */
    int stream_buffer_bytes; /* default 262144: a stream's bytes queued for
                                a slow client before its upstream pauses */
    char **cors_origins;    /* cors.origins: "https://app.example" or "*" */
    size_t n_cors_origins;  /* 0: no CORS headers, preflights refused */
    char *tls_cert;         /* NULL unless "tls": {"cert","key"} */
    char *tls_key;
    /* "log": access log lines (gateway/access_log.c).  log_file NULL =
     * stderr; log_level -1 = no "log" block (LLMUX_LOG), info when the block
     * has no level, else
     * enum gx_log_level; access lines are info level. */
    int log_logfmt; /* 0 json (default), 1 logfmt */
    char *log_file;
    int log_level;
    /* "otel": OpenTelemetry traces (gateway/otel.c); endpoint NULL = off.
     * sample: ratio of requests traced without a client traceparent
     * (default 1); queue: spans waiting for export before new ones are
     * dropped (default 2048); service_name default "llmux"; timeout_ms
     * of one export POST (default 5000). */
    char *otel_endpoint;
    char *otel_service;
    double otel_sample;
    int otel_queue;
    int otel_timeout_ms;
    struct cfg_provider *providers;
    size_t n_providers;
    struct cfg_route *routes;
    size_t n_routes;
    struct cfg_failover failover;
};

/* Loads and validates FILE.  On error returns GX_EINVAL (or GX_EIO when the
 * file cannot be read) and writes "FILE:LINE:COL: path: reason" to err. */
enum gx_status cfg_load_file(const char *path, struct cfg **out, char *err,
                             size_t errlen);

/* Same from a string; name is used in messages in place of FILE. */
enum gx_status cfg_load_string(const char *text, const char *name,
                               struct cfg **out, char *err, size_t errlen);

/* Built-in defaults of DESIGN.md section 4, from the environment:
 * OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, DEEPSEEK_API_KEY,
 * LLMUX_RELAY_URL + LLMUX_RELAY_KEY, LLMUX_MODEL (a GGUF file: local
 * provider with model "local"). */
enum gx_status cfg_defaults(struct cfg **out, char *err, size_t errlen);

void cfg_free(struct cfg *c); /* accepts NULL */

/* The request header a provider kind sends its api_key in:
 * "Authorization" (Bearer, openai), "x-api-key" (anthropic),
 * "x-goog-api-key" (gemini).  A static string. */
const char *cfg_key_header(enum cfg_kind kind);

/* Lookups; NULL / -1 when absent. */
const struct cfg_provider *cfg_provider_find(const struct cfg *c,
                                             const char *name);
const struct cfg_route *cfg_route_find(const struct cfg *c, const char *name);

/*
 * Resolves a request's "model" (DESIGN.md section 5): a route name, a
 * MODEL@PROVIDER target, or a bare model name served by one or more
 * providers (config order).  Fills up to cap targets into out and returns
 * how many it wrote (<= cap); 0 = unknown model.  A route's fallback comes
 * last (skipped if it is already a target).  *route is set to the route
 * when it was a route name, else NULL (route may be NULL).  Allocation-free
 * and read-only: any thread, per request.
 */
size_t cfg_resolve(const struct cfg *c, const char *model,
                   const struct cfg_route **route, struct cfg_target *out,
                   size_t cap);

/* Prints the resolved providers and routes, one line each (for check). */
void cfg_print(const struct cfg *c, FILE *f);

/* Parses "HOST:PORT" or "[IPV6]:PORT" (port 0..65535; 0 = any free port)
 * as `listen` and LLMUX_LISTEN take it, e.g. for `serve --listen`.  On
 * GX_OK *host is a malloc'd copy without brackets, owned by the caller;
 * GX_EINVAL on bad syntax or port, GX_ENOMEM. */
enum gx_status cfg_listen_parse(const char *s, char **host, int *port);

/* `llmux check --config FILE`: returns the exit code (0, 1 or 2). */
int cfg_cli_check(int argc, char **argv);

#endif
