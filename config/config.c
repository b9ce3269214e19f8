/*
 * config: loading and strict validation of the JSON configuration
 * (DESIGN.md section 5) into the plain structs of config.h, plus lookups
 * and model resolution.  Built-in defaults are in cfg_defaults.c, the
 * `llmux check` command and cfg_print in cfg_cli.c, the position index that
 * gives errors their LINE:COL in cfg_pos.c.
 *
 * Validation stops at the first error, which is written as
 *   FILE:LINE:COL: json.path: reason
 * where LINE:COL is the start of the offending value (or of the key, for an
 * unknown key; or of the enclosing object, for a missing key).
 *
 * ${VAR} interpolation (every string value, never keys):
 *   ${NAME}          the environment variable NAME; unset is an error
 *   ${NAME:-TEXT}    NAME if set and non-empty, else TEXT (no nesting)
 *   $${              a literal "${"; any other '$' is literal
 * Secrets: a provider's api_key, and admin_key when require_keys is true,
 * may not be empty or come from an unset/empty variable (the error names
 * the variable).  admin_key with require_keys false is optional: unset or
 * empty means no admin key.  Every other unset variable is an error at its
 * path (e.g. a local provider's "model_path": "${LLMUX_MODEL}"); use
 * ${NAME:-default} to make a value optional.  After substitution no value
 * may contain a control character (they would end up in HTTP headers).
 *
 * Invariant: a struct cfg handed out is complete and consistent: every
 * target indexes an existing provider and model, every model has prices
 * (has_price) unless it is a local model, weights match targets.
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../pricing/pricing.h"
#include "config_int.h"

#define CFG_MAX_FILE_BYTES (16u << 20)
#define CFG_MAX_MS 86400000LL /* a day: any larger timeout is a typo */

/* ------------------------------------------------------------------------
 * Validation context and error reporting
 */

struct vctx {
    const char *name; /* FILE in messages */
    const char *text;
    size_t len;
    struct gx_buf path; /* path of the value being checked */
    char *err;
    size_t errlen;
    int require_keys;
};

static size_t
path_push_key(struct vctx *v, const char *key)
{
    size_t keep = v->path.len;
    /* On ENOMEM a message names a shorter path; nothing else changes. */
    if (!keep || gx_buf_append(&v->path, ".", 1) == GX_OK)
        (void)gx_buf_append(&v->path, key, strlen(key));
    return keep;
}

static size_t
path_push_index(struct vctx *v, size_t i)
{
    size_t keep = v->path.len;
    (void)gx_buf_printf(&v->path, "[%zu]", i);
    return keep;
}

static void
path_pop(struct vctx *v, size_t keep)
{
    v->path.len = keep;
    if (v->path.data)
        v->path.data[keep] = '\0';
}

static const char *
path_str(const struct vctx *v)
{
    return v->path.data ? v->path.data : "";
}

enum where { AT_VALUE, AT_KEY };

/* Writes the error for the current path; always returns GX_EINVAL. */
static enum gx_status verr(struct vctx *v, enum where w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum gx_status
verr(struct vctx *v, enum where w, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);

    /* The index is built only now: a valid config never pays for it. */
    struct cfg_pos pos = {0};
    (void)cfg_pos_build(&pos, v->text, v->len);
    int line = 1, col = 1;
    char *look = strdup(path_str(v));
    const struct cfg_pos_entry *e = NULL;
    while (look) {
        e = cfg_pos_get(&pos, look);
        if (e || !look[0])
            break;
        /* A missing key: fall back to its enclosing value, not its key. */
        w = AT_VALUE;
        char *dot = strrchr(look, '.'), *br = strrchr(look, '[');
        char *cut = dot > br ? dot : br;
        if (cut)
            *cut = '\0';
        else
            look[0] = '\0';
    }
    if (e) {
        if (w == AT_KEY && e->key_line) {
            line = e->key_line;
            col = e->key_col;
        } else {
            line = e->line;
            col = e->col;
        }
    }
    free(look);
    cfg_pos_cleanup(&pos);
    const char *p = path_str(v);
    gx_errf(v->err, v->errlen, "%s:%d:%d: %s: %s", v->name, line, col,
            p[0] ? p : "(root)", reason);
    return GX_EINVAL;
}

static const char *
type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

/* The nearest of names to s, or NULL if none is close enough. */
static const char *
nearest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    int bestd = 1000;
    for (size_t k = 0; k < n; k++) {
        if (!names[k])
            continue;
        int d = cfg_edit_distance(s, names[k]);
        if (d < bestd) {
            bestd = d;
            best = names[k];
        }
    }
    size_t len = strlen(s);
    if (best && (bestd <= 2 || (size_t)bestd * 3 <= len) &&
        (size_t)bestd < len)
        return best;
    return NULL;
}

static size_t
count_names(const char *const *names)
{
    size_t n = 0;
    while (names[n])
        n++;
    return n;
}

/*
 * Rejects keys of obj not in known (NULL-terminated).  A key in other (keys
 * valid for the other provider kind) gets a message saying so; other_what
 * names this object's kind for it.
 */
static enum gx_status
check_keys(struct vctx *v, json_t *obj, const char *const *known,
           const char *const *other, const char *other_what)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        int ok = 0;
        for (size_t k = 0; known[k] && !ok; k++)
            ok = strcmp(key, known[k]) == 0;
        if (ok)
            continue;
        size_t keep = path_push_key(v, key);
        enum gx_status st;
        int elsewhere = 0;
        for (size_t k = 0; other && other[k] && !elsewhere; k++)
            elsewhere = strcmp(key, other[k]) == 0;
        const char *near = nearest(key, known, count_names(known));
        if (elsewhere) {
            st = verr(v, AT_KEY, "key '%s' is not valid for %s", key,
                      other_what);
        } else if (near) {
            st = verr(v, AT_KEY, "unknown key '%s' (did you mean '%s'?)", key,
                      near);
        } else {
            char list[512] = "";
            size_t used = 0;
            for (size_t k = 0; known[k] && used < sizeof(list); k++)
                used += (size_t)snprintf(list + used, sizeof(list) - used,
                                         "%s%s", k ? ", " : "", known[k]);
            st = verr(v, AT_KEY, "unknown key '%s' (expected one of: %s)", key,
                      list);
        }
        path_pop(v, keep);
        return st;
    }
    return GX_OK;
}

/* ------------------------------------------------------------------------
 * ${VAR} interpolation
 */

enum strkind {
    STR_PLAIN,    /* may be empty; unset variables are errors */
    STR_NONEMPTY, /* as PLAIN but must not end up empty */
    STR_SECRET,   /* no empty value, no unset or empty variable */
    STR_OPTIONAL  /* unset/empty variable or empty value -> NULL */
};

static int
is_name_char(int c, int first)
{
    return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (!first && c >= '0' && c <= '9');
}

/*
 * Substitutes in; on success *out is malloc'd.  unset_var / empty_var get
 * the first variable that was unset (without default) / set but empty.
 * Returns GX_OK, GX_ENOTFOUND (an unset variable), GX_EINVAL (bad syntax,
 * reason in why) or GX_ENOMEM.
 */
static enum gx_status
interpolate(const char *in, char **out, char *unset_var, char *empty_var,
            size_t varlen, const char **why)
{
    struct gx_buf b;
    enum gx_status st = GX_OK;
    int unset = 0;
    gx_buf_init(&b, 0);
    unset_var[0] = empty_var[0] = '\0';
    if ((st = gx_buf_append(&b, "", 0)) != GX_OK)
        goto out;
    for (const char *p = in; *p;) {
        if (p[0] == '$' && p[1] == '$' && p[2] == '{') {
            st = gx_buf_append(&b, "${", 2);
            p += 3;
        } else if (p[0] == '$' && p[1] == '{') {
            const char *name = p + 2, *q = name;
            while (is_name_char((unsigned char)*q, q == name))
                q++;
            size_t nlen = (size_t)(q - name);
            const char *def = NULL;
            size_t dlen = 0;
            if (q[0] == ':' && q[1] == '-') {
                def = q + 2;
                const char *close = strchr(def, '}');
                if (close) {
                    dlen = (size_t)(close - def);
                    q = close;
                } else {
                    q = def + strlen(def);
                }
            }
            if (nlen == 0 || *q != '}') {
                *why = nlen == 0 ? "bad ${...}: expected a variable name "
                                   "(letters, digits, _)"
                                 : "bad ${...}: missing '}'";
                st = GX_EINVAL;
                goto out;
            }
            char var[256];
            snprintf(var, sizeof(var), "%.*s", (int)(nlen < 255 ? nlen : 255),
                     name);
            const char *val = getenv(var);
            if ((!val || !val[0]) && def) {
                st = gx_buf_append(&b, def, dlen);
            } else if (!val) {
                if (!unset++)
                    snprintf(unset_var, varlen, "%s", var);
            } else {
                if (!val[0] && !empty_var[0])
                    snprintf(empty_var, varlen, "%s", var);
                st = gx_buf_append(&b, val, strlen(val));
            }
            p = q + 1;
        } else {
            st = gx_buf_append(&b, p, 1);
            p++;
        }
        if (st != GX_OK)
            goto out;
    }
    if (unset) {
        st = GX_ENOTFOUND;
        goto out;
    }
    *out = b.data;
    b.data = NULL;
out:
    gx_buf_cleanup(&b);
    return st;
}

static int
has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* Validates the string value j at the current path; *out malloc'd (NULL
 * for an absent optional value). */
static enum gx_status
str_value(struct vctx *v, json_t *j, enum strkind kind, char **out)
{
    char unset_var[256], empty_var[256];
    const char *why = "";
    char *s = NULL;
    if (!json_is_string(j))
        return verr(v, AT_VALUE, "expected a string, got %s", type_name(j));
    enum gx_status st = interpolate(json_string_value(j), &s, unset_var,
                                    empty_var, sizeof(unset_var), &why);
    if (st == GX_ENOMEM)
        return st;
    if (st == GX_EINVAL)
        return verr(v, AT_VALUE, "%s", why);
    if (st == GX_ENOTFOUND) {
        if (kind == STR_OPTIONAL) {
            *out = NULL;
            return GX_OK;
        }
        return verr(v, AT_VALUE, "environment variable %s is not set%s",
                    unset_var,
                    kind == STR_SECRET ? " (a required secret)" : "");
    }
    if (!s[0] && kind != STR_PLAIN) {
        free(s);
        if (kind == STR_OPTIONAL) {
            *out = NULL;
            return GX_OK;
        }
        if (empty_var[0])
            return verr(v, AT_VALUE, "environment variable %s is empty%s",
                        empty_var,
                        kind == STR_SECRET ? " (a required secret)" : "");
        return verr(v, AT_VALUE, "must not be empty");
    }
    if (kind == STR_SECRET && empty_var[0]) {
        /* "Bearer ${A}${B}" with B empty is almost surely a mistake. */
        free(s);
        return verr(v, AT_VALUE, "environment variable %s is empty "
                                 "(a required secret)",
                    empty_var);
    }
    if (has_control(s)) {
        free(s);
        return verr(v, AT_VALUE, "contains a control character%s",
                    strstr(json_string_value(j), "${")
                        ? " (after ${VAR} substitution)"
                        : "");
    }
    *out = s;
    return GX_OK;
}

/* ------------------------------------------------------------------------
 * Typed member getters: absent members leave *out untouched unless
 * required (then: "missing required key" at the enclosing object).
 */

static enum gx_status
missing(struct vctx *v, json_t *obj, const char *key, const char *hint)
{
    (void)obj;
    size_t keep = path_push_key(v, key);
    enum gx_status st = verr(v, AT_VALUE, "missing required key%s", hint);
    path_pop(v, keep);
    return st;
}

static enum gx_status
get_str(struct vctx *v, json_t *obj, const char *key, int required,
        enum strkind kind, char **out)
{
    json_t *j = json_object_get(obj, key);
    if (!j)
        return required ? missing(v, obj, key, "") : GX_OK;
    size_t keep = path_push_key(v, key);
    char *s = NULL;
    enum gx_status st = str_value(v, j, kind, &s);
    path_pop(v, keep);
    if (st == GX_OK) {
        free(*out);
        *out = s;
    }
    return st;
}

static enum gx_status
int_value(struct vctx *v, json_t *j, long long lo, long long hi,
          long long *out)
{
    if (!json_is_integer(j)) {
        if (json_is_real(j))
            return verr(v, AT_VALUE, "expected an integer, got %g",
                        json_real_value(j));
        return verr(v, AT_VALUE, "expected an integer, got %s", type_name(j));
    }
    long long x = json_integer_value(j);
    if (x < lo || x > hi)
        return verr(v, AT_VALUE, "must be between %lld and %lld, got %lld", lo,
                    hi, x);
    *out = x;
    return GX_OK;
}

static enum gx_status
get_ll(struct vctx *v, json_t *obj, const char *key, long long lo,
       long long hi, long long *out)
{
    json_t *j = json_object_get(obj, key);
    if (!j)
        return GX_OK;
    size_t keep = path_push_key(v, key);
    enum gx_status st = int_value(v, j, lo, hi, out);
    path_pop(v, keep);
    return st;
}

static enum gx_status
get_int(struct vctx *v, json_t *obj, const char *key, long long lo,
        long long hi, int *out)
{
    long long x = *out;
    enum gx_status st = get_ll(v, obj, key, lo, hi, &x);
    if (st == GX_OK)
        *out = (int)x;
    return st;
}

static enum gx_status
get_bool(struct vctx *v, json_t *obj, const char *key, int *out)
{
    json_t *j = json_object_get(obj, key);
    if (!j)
        return GX_OK;
    if (!json_is_boolean(j)) {
        size_t keep = path_push_key(v, key);
        enum gx_status st = verr(v, AT_VALUE, "expected true or false, got %s",
                                 type_name(j));
        path_pop(v, keep);
        return st;
    }
    *out = json_is_true(j);
    return GX_OK;
}

/* The member key of obj if it is an object (or absent: *out NULL). */
static enum gx_status
get_object(struct vctx *v, json_t *obj, const char *key, json_t **out)
{
    json_t *j = json_object_get(obj, key);
    *out = NULL;
    if (!j)
        return GX_OK;
    if (!json_is_object(j)) {
        size_t keep = path_push_key(v, key);
        enum gx_status st =
            verr(v, AT_VALUE, "expected an object, got %s", type_name(j));
        path_pop(v, keep);
        return st;
    }
    *out = j;
    return GX_OK;
}

/* Names of providers, models and routes go into HTTP headers and logs. */
static enum gx_status
check_name(struct vctx *v, const char *name, const char *what, int allow_at)
{
    if (!name[0])
        return verr(v, AT_KEY, "empty %s name", what);
    for (const char *p = name; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch == 0x7f)
            return verr(v, AT_KEY, "%s name '%s' contains a space or a "
                                   "control character",
                        what, name);
        if (ch == '@' && !allow_at)
            return verr(v, AT_KEY, "%s name '%s' must not contain '@' "
                                   "(targets are MODEL@PROVIDER)",
                        what, name);
    }
    return GX_OK;
}

/* ------------------------------------------------------------------------
 * Shared helpers (config_int.h)
 */

int
cfg_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

int
cfg_parse_listen(const char *s, char **host, int *port)
{
    const char *colon, *h = s;
    size_t hlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -1;
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hlen = (size_t)(colon - s);
        if (memchr(s, ':', hlen))
            return -1; /* bare IPv6 needs brackets */
    }
    if (hlen == 0)
        return -1;
    for (size_t k = 0; k < hlen; k++) {
        unsigned char ch = (unsigned char)h[k];
        if (ch <= 0x20 || ch == 0x7f || ch == '/' || ch == '[' || ch == ']')
            return -1;
    }
    const char *ps = colon + 1;
    size_t plen = strlen(ps);
    if (plen == 0 || plen > 5 || strspn(ps, "0123456789") != plen)
        return -1;
    long p = strtol(ps, NULL, 10);
    if (p > 65535)
        return -2;
    char *copy = strndup(h, hlen);
    if (!copy)
        return -3;
    *host = copy;
    *port = (int)p;
    return 0;
}

enum gx_status
cfg_listen_parse(const char *s, char **host, int *port)
{
    int rc = s ? cfg_parse_listen(s, host, port) : -1;
    return rc == 0 ? GX_OK : rc == -3 ? GX_ENOMEM : GX_EINVAL;
}

enum gx_status
cfg_failover_defaults(struct cfg_failover *f)
{
    /* 529: Anthropic's "overloaded", a temporary state like 503. */
    static const int retry[] = {408, 409, 429, 500, 502, 503, 504, 529};
    size_t n = sizeof(retry) / sizeof(retry[0]);
    f->retry_on_status = malloc(sizeof(retry));
    if (!f->retry_on_status)
        return GX_ENOMEM;
    memcpy(f->retry_on_status, retry, sizeof(retry));
    f->n_retry_on_status = n;
    f->max_attempts = 3;
    f->backoff_ms = 50;
    f->hedge_after_ms = 0;
    f->circuit_failures = 5;
    f->circuit_cooldown_ms = 30000;
    return GX_OK;
}

/* ------------------------------------------------------------------------
 * Providers and models
 */

static const char *const model_keys[] = {"upstream", "input_per_mtok",
                                         "output_per_mtok",
                                         "cached_input_per_mtok",
                                         "cache_write_per_mtok", NULL};

static enum gx_status
price_value(struct vctx *v, json_t *obj, const char *key, int64_t *out,
            int *present)
{
    json_t *j = json_object_get(obj, key);
    if (!j)
        return GX_OK;
    *present = 1;
    size_t keep = path_push_key(v, key);
    enum gx_status st = GX_OK;
    if (!json_is_number(j)) {
        st = verr(v, AT_VALUE, "expected a number, got %s", type_name(j));
    } else {
        double d = json_number_value(j);
        if (!isfinite(d) || d < 0)
            st = verr(v, AT_VALUE, "must not be negative, got %g", d);
        else if (pr_usd_per_mtok_from_double(d, out) != GX_OK)
            st = verr(v, AT_VALUE, "%g USD per million tokens is too large",
                      d);
    }
    path_pop(v, keep);
    return st;
}

/* Fills m's prices from the config object mo (may be NULL) or the
 * built-in table.  The current path is the model's. */
static enum gx_status
model_prices(struct vctx *v, json_t *mo, struct cfg_model *m,
             enum cfg_kind kind)
{
    int has_in = 0, has_out = 0, has_cached = 0, has_cw = 0;
    int local = kind == CFG_KIND_LOCAL;
    enum gx_status st;
    if (mo) {
        if ((st = price_value(v, mo, "cache_write_per_mtok",
                              &m->cache_write_pusd, &has_cw)) != GX_OK)
            return st;
        if ((st = price_value(v, mo, "input_per_mtok", &m->input_pusd,
                              &has_in)) != GX_OK ||
            (st = price_value(v, mo, "output_per_mtok", &m->output_pusd,
                              &has_out)) != GX_OK ||
            (st = price_value(v, mo, "cached_input_per_mtok",
                              &m->cached_input_pusd, &has_cached)) != GX_OK)
            return st;
    }
    if (has_in || has_out || has_cached || has_cw) {
        if (!has_in)
            return missing(v, mo, "input_per_mtok",
                           " (prices come as input_per_mtok and "
                           "output_per_mtok together)");
        if (!has_out)
            return missing(v, mo, "output_per_mtok",
                           " (prices come as input_per_mtok and "
                           "output_per_mtok together)");
        if (!has_cached)
            m->cached_input_pusd = m->input_pusd;
        if (!has_cw && kind == CFG_KIND_ANTHROPIC) {
            /* Anthropic bills 5-minute cache writes at 1.25x input. */
            if (pr_cache_write_from_input(m->input_pusd,
                                          &m->cache_write_pusd) != GX_OK)
                return verr(v, AT_KEY, "input_per_mtok is too large");
        } else if (!has_cw) {
            m->cache_write_pusd = m->input_pusd;
        }
        m->has_price = 1;
        return GX_OK;
    }
    struct pr_rates pp;
    if (pr_rates_default(m->name, &pp) ||
        (strcmp(m->upstream, m->name) && pr_rates_default(m->upstream, &pp))) {
        m->input_pusd = pp.input_pusd;
        m->cached_input_pusd = pp.cached_input_pusd;
        m->cache_write_pusd = pp.cache_write_pusd;
        m->output_pusd = pp.output_pusd;
        m->has_price = 1;
        return GX_OK;
    }
    if (local) {
        /* The local engine costs nothing per token. */
        m->has_price = 1;
        return GX_OK;
    }
    return verr(v, AT_KEY, "no price for model '%s': it is not in the "
                           "built-in price table; set input_per_mtok and "
                           "output_per_mtok",
                m->name);
}

/* One model; the current path is the model's.  mo is its object (NULL in
 * the array form). */
static enum gx_status
parse_model(struct vctx *v, struct cfg_provider *p, const char *name,
            json_t *mo)
{
    enum gx_status st;
    if ((st = check_name(v, name, "model", 1)) != GX_OK)
        return st;
    if (mo && !json_is_object(mo))
        return verr(v, AT_VALUE, "expected an object (upstream, prices), "
                                 "got %s",
                    type_name(mo));
    if (mo && (st = check_keys(v, mo, model_keys, NULL, NULL)) != GX_OK)
        return st;
    for (size_t q = 0; q < p->n_models; q++)
        if (!strcmp(p->models[q].name, name))
            return verr(v, AT_VALUE, "duplicate model '%s'", name);
    struct cfg_model *m = &p->models[p->n_models++];
    if (!(m->name = strdup(name)))
        return GX_ENOMEM;
    if (mo && (st = get_str(v, mo, "upstream", 0, STR_NONEMPTY,
                            &m->upstream)) != GX_OK)
        return st;
    if (!m->upstream && !(m->upstream = strdup(name)))
        return GX_ENOMEM;
    return model_prices(v, mo, m, p->kind);
}

static enum gx_status
parse_models(struct vctx *v, json_t *po, struct cfg_provider *p)
{
    json_t *models = json_object_get(po, "models");
    enum gx_status st = GX_OK;
    if (!models) {
        if (p->kind != CFG_KIND_LOCAL)
            return missing(v, po, "models",
                           " (the models this provider serves)");
        /* A local provider serves one model, named "local", for free. */
        if (!(p->models = calloc(1, sizeof(*p->models))))
            return GX_ENOMEM;
        p->n_models = 1;
        p->models[0].name = strdup("local");
        p->models[0].upstream = strdup("local");
        p->models[0].has_price = 1;
        return p->models[0].name && p->models[0].upstream ? GX_OK : GX_ENOMEM;
    }
    size_t keep = path_push_key(v, "models");
    size_t n = json_is_object(models)  ? json_object_size(models)
               : json_is_array(models) ? json_array_size(models)
                                       : 0;
    if (!json_is_object(models) && !json_is_array(models)) {
        st = verr(v, AT_VALUE,
                  "expected an object of models (or an array of names), "
                  "got %s",
                  type_name(models));
        goto out;
    }
    if (n == 0) {
        st = verr(v, AT_VALUE, "must list at least one model");
        goto out;
    }
    if (!(p->models = calloc(n, sizeof(*p->models)))) {
        st = GX_ENOMEM;
        goto out;
    }
    if (json_is_object(models)) {
        const char *name;
        json_t *mo;
        json_object_foreach(models, name, mo) {
            size_t keep2 = path_push_key(v, name);
            st = parse_model(v, p, name, mo);
            path_pop(v, keep2);
            if (st != GX_OK)
                goto out;
        }
    } else {
        for (size_t k = 0; k < n; k++) {
            json_t *jn = json_array_get(models, k);
            size_t keep2 = path_push_index(v, k);
            if (!json_is_string(jn))
                st = verr(v, AT_VALUE, "expected a model name, got %s",
                          type_name(jn));
            else
                st = parse_model(v, p, json_string_value(jn), NULL);
            path_pop(v, keep2);
            if (st != GX_OK)
                goto out;
        }
    }
out:
    path_pop(v, keep);
    return st;
}

static int
header_name_ok(const char *s)
{
    if (!s[0])
        return 0;
    for (; *s; s++)
        if (!strchr("!#$%&'*+-.^_`|~", *s) &&
            !((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return 0;
    return 1;
}

const char *
cfg_key_header(enum cfg_kind kind)
{
    switch (kind) {
    case CFG_KIND_ANTHROPIC: return "x-api-key";
    case CFG_KIND_GEMINI: return "x-goog-api-key";
    default: return "Authorization";
    }
}

static enum gx_status
parse_headers(struct vctx *v, json_t *po, struct cfg_provider *p)
{
    json_t *h;
    enum gx_status st = get_object(v, po, "headers", &h);
    if (st != GX_OK || !h)
        return st;
    size_t keep = path_push_key(v, "headers");
    p->headers = calloc(json_object_size(h) + 1, sizeof(*p->headers));
    if (!p->headers) {
        st = GX_ENOMEM;
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(h, key, val) {
        size_t keep2 = path_push_key(v, key);
        if (!header_name_ok(key)) {
            st = verr(v, AT_KEY, "'%s' is not a valid HTTP header name",
                      key);
        } else if (!strcasecmp(key, "Host") ||
                   !strcasecmp(key, "Content-Length") ||
                   !strcasecmp(key, "Transfer-Encoding") ||
                   !strcasecmp(key, "Connection")) {
            /* Framing headers belong to the HTTP client; overriding them
             * would corrupt the upstream request. */
            st = verr(v, AT_KEY, "header '%s' is set by llmux itself", key);
        } else if (p->api_key && !strcasecmp(key, cfg_key_header(p->kind))) {
            st = verr(v, AT_KEY, "header '%s' conflicts with api_key (sent "
                                 "in that header by this provider kind); "
                                 "set one of them",
                      key);
        } else {
            struct cfg_header *hd = &p->headers[p->n_headers];
            st = str_value(v, val, STR_PLAIN, &hd->value);
            if (st == GX_OK) {
                p->n_headers++;
                if (!(hd->name = strdup(key)))
                    st = GX_ENOMEM;
            }
        }
        path_pop(v, keep2);
        if (st != GX_OK)
            goto out;
    }
out:
    path_pop(v, keep);
    return st;
}

static enum gx_status
check_base_url(struct vctx *v, char *url)
{
    const char *rest = NULL;
    if (!strncasecmp(url, "https://", 8))
        rest = url + 8;
    else if (!strncasecmp(url, "http://", 7))
        rest = url + 7;
    if (!rest || !rest[0] || rest[0] == '/' || strchr(url, ' '))
        return verr(v, AT_VALUE, "expected an http:// or https:// URL");
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
    return GX_OK;
}

static const char *const openai_keys[] = {
    "kind",    "base_url",   "api_key", "timeout_ms", "connect_timeout_ms",
    "first_byte_timeout_ms", "headers", "models",     "ca_file", NULL};
static const char *const local_keys[] = {
    "kind",   "model_path", "threads", "context", "parallel",
    "timeout_ms", "first_byte_timeout_ms", "models", "queue",
    "prefix_cache", "prefill_chunk", NULL};
static const char *const kinds[] = {"openai", "local", "anthropic", "gemini",
                                    NULL};

static enum gx_status
parse_provider(struct vctx *v, const char *name, json_t *po,
               struct cfg_provider *p)
{
    enum gx_status st;
    char *kind = NULL;
    if ((st = check_name(v, name, "provider", 0)) != GX_OK)
        return st;
    if (!(p->name = strdup(name)))
        return GX_ENOMEM;
    if (!json_is_object(po))
        return verr(v, AT_VALUE, "expected an object, got %s", type_name(po));
    if ((st = get_str(v, po, "kind", 1, STR_NONEMPTY, &kind)) != GX_OK)
        return st;
    if (!strcmp(kind, "openai")) {
        p->kind = CFG_KIND_OPENAI;
    } else if (!strcmp(kind, "local")) {
        p->kind = CFG_KIND_LOCAL;
    } else if (!strcmp(kind, "anthropic")) {
        p->kind = CFG_KIND_ANTHROPIC;
    } else if (!strcmp(kind, "gemini")) {
        p->kind = CFG_KIND_GEMINI;
    } else {
        size_t keep = path_push_key(v, "kind");
        const char *near = nearest(kind, kinds, 4);
        st = verr(v, AT_VALUE,
                  "unknown provider kind '%s' (%s%s%s)", kind,
                  near ? "did you mean '"
                       : "expected openai, anthropic, gemini or local",
                  near ? near : "", near ? "'?" : "");
        path_pop(v, keep);
        free(kind);
        return st;
    }
    free(kind);
    int local = p->kind == CFG_KIND_LOCAL;
    if ((st = check_keys(v, po, local ? local_keys : openai_keys,
                         local ? openai_keys : local_keys,
                         local ? "a local provider"
                         : p->kind == CFG_KIND_ANTHROPIC
                             ? "an anthropic provider"
                         : p->kind == CFG_KIND_GEMINI ? "a gemini provider"
                                                      : "an openai provider")) !=
        GX_OK)
        return st;

    p->timeout_ms = CFG_DEFAULT_TIMEOUT_MS;
    p->connect_timeout_ms = CFG_DEFAULT_CONNECT_TIMEOUT_MS;
    p->first_byte_timeout_ms = CFG_DEFAULT_FIRST_BYTE_TIMEOUT_MS;
    p->threads = cfg_ncpu();
    p->context = 4096;
    p->parallel = 4;
    p->queue = 64;
    p->prefix_cache = 2;
    p->prefill_chunk = 32;
    if ((st = get_int(v, po, "timeout_ms", 1, CFG_MAX_MS, &p->timeout_ms)) ||
        (st = get_int(v, po, "connect_timeout_ms", 1, CFG_MAX_MS,
                      &p->connect_timeout_ms)) ||
        (st = get_int(v, po, "first_byte_timeout_ms", 1, CFG_MAX_MS,
                      &p->first_byte_timeout_ms)))
        return st;
    if (local) {
        if ((st = get_str(v, po, "model_path", 1, STR_NONEMPTY,
                          &p->model_path)) ||
            (st = get_int(v, po, "threads", 1, 256, &p->threads)) ||
            (st = get_int(v, po, "context", 16, 1 << 20, &p->context)) ||
            (st = get_int(v, po, "parallel", 1, 256, &p->parallel)) ||
            (st = get_int(v, po, "queue", 0, 4096, &p->queue)) ||
            (st = get_int(v, po, "prefix_cache", 0, 64, &p->prefix_cache)) ||
            (st = get_int(v, po, "prefill_chunk", 1, 4096,
                          &p->prefill_chunk)))
            return st;
    } else {
        /* The native kinds know their public endpoint; an openai
         * provider must say which upstream it is. */
        const char *dflt_url =
            p->kind == CFG_KIND_ANTHROPIC ? "https://api.anthropic.com"
            : p->kind == CFG_KIND_GEMINI
                ? "https://generativelanguage.googleapis.com"
                : NULL;
        if ((st = get_str(v, po, "base_url", !dflt_url, STR_NONEMPTY,
                          &p->base_url)) != GX_OK)
            return st;
        if (!p->base_url && !(p->base_url = strdup(dflt_url)))
            return GX_ENOMEM;
        size_t keep = path_push_key(v, "base_url");
        st = check_base_url(v, p->base_url);
        path_pop(v, keep);
        if (st != GX_OK ||
            (st = get_str(v, po, "api_key", 0, STR_SECRET, &p->api_key)) ||
            (st = get_str(v, po, "ca_file", 0, STR_OPTIONAL, &p->ca_file)) ||
            (st = parse_headers(v, po, p)))
            return st;
    }
    return parse_models(v, po, p);
}

static enum gx_status
parse_providers(struct vctx *v, json_t *root, struct cfg *c)
{
    json_t *provs;
    enum gx_status st = get_object(v, root, "providers", &provs);
    if (st != GX_OK)
        return st;
    if (!provs)
        return missing(v, root, "providers", " (at least one provider)");
    size_t keep = path_push_key(v, "providers");
    size_t n = json_object_size(provs);
    if (n == 0) {
        st = verr(v, AT_VALUE, "must name at least one provider");
        goto out;
    }
    if (!(c->providers = calloc(n, sizeof(*c->providers)))) {
        st = GX_ENOMEM;
        goto out;
    }
    const char *name;
    json_t *po;
    json_object_foreach(provs, name, po) {
        size_t keep2 = path_push_key(v, name);
        st = parse_provider(v, name, po, &c->providers[c->n_providers++]);
        path_pop(v, keep2);
        if (st != GX_OK)
            goto out;
    }
out:
    path_pop(v, keep);
    return st;
}

/* ------------------------------------------------------------------------
 * Routes
 */

/* Finds model[0..len) among p's models (model need not be terminated). */
static int
find_model_n(const struct cfg_provider *p, const char *model, size_t len,
             size_t *out)
{
    for (size_t k = 0; k < p->n_models; k++)
        if (!strncmp(p->models[k].name, model, len) &&
            p->models[k].name[len] == '\0') {
            *out = k;
            return 1;
        }
    return 0;
}

static int
find_model(const struct cfg_provider *p, const char *model, size_t *out)
{
    return find_model_n(p, model, strlen(model), out);
}

static int
find_provider(const struct cfg *c, const char *name, size_t *out)
{
    for (size_t k = 0; k < c->n_providers; k++)
        if (!strcmp(c->providers[k].name, name)) {
            *out = k;
            return 1;
        }
    return 0;
}

/* Parses "MODEL@PROVIDER" (split at the last '@', so a model name may hold
 * '@'); 1 when both exist.  No allocation: cfg_resolve runs per request. */
static int
parse_target(const struct cfg *c, const char *s, struct cfg_target *t)
{
    const char *at = strrchr(s, '@');
    if (!at || at == s || !at[1])
        return 0;
    return find_provider(c, at + 1, &t->provider) &&
           find_model_n(&c->providers[t->provider], s, (size_t)(at - s),
                        &t->model);
}

/* Explains why the string value j at the current path is not a target. */
static enum gx_status
target_value(struct vctx *v, const struct cfg *c, json_t *j,
             struct cfg_target *t)
{
    if (!json_is_string(j))
        return verr(v, AT_VALUE, "expected a target \"MODEL@PROVIDER\", "
                                 "got %s",
                    type_name(j));
    const char *s = json_string_value(j);
    if (parse_target(c, s, t))
        return GX_OK;
    const char *at = strrchr(s, '@');
    if (!at || at == s || !at[1]) {
        for (size_t k = 0; k < c->n_providers; k++) {
            size_t m;
            if (find_model(&c->providers[k], s, &m))
                return verr(v, AT_VALUE,
                            "'%s' is not a target (expected MODEL@PROVIDER; "
                            "did you mean '%s@%s'?)",
                            s, s, c->providers[k].name);
        }
        return verr(v, AT_VALUE,
                    "'%s' is not a target (expected MODEL@PROVIDER)", s);
    }
    const char *pname = at + 1;
    size_t pi;
    if (!find_provider(c, pname, &pi)) {
        const char **names = calloc(c->n_providers + 1, sizeof(*names));
        for (size_t k = 0; names && k < c->n_providers; k++)
            names[k] = c->providers[k].name;
        const char *near = names ? nearest(pname, names, c->n_providers)
                                 : NULL;
        enum gx_status st =
            verr(v, AT_VALUE, "unknown provider '%s' in target '%s'%s%s%s",
                 pname, s, near ? " (did you mean '" : "", near ? near : "",
                 near ? "'?)" : "");
        free(names);
        return st;
    }
    const struct cfg_provider *p = &c->providers[pi];
    const char **names = calloc(p->n_models + 1, sizeof(*names));
    for (size_t k = 0; names && k < p->n_models; k++)
        names[k] = p->models[k].name;
    char model[256];
    snprintf(model, sizeof(model), "%.*s", (int)(at - s), s);
    const char *near = names ? nearest(model, names, p->n_models) : NULL;
    enum gx_status st =
        verr(v, AT_VALUE, "provider '%s' has no model '%s'%s%s%s", pname,
             model, near ? " (did you mean '" : "", near ? near : "",
             near ? "'?)" : "");
    free(names);
    return st;
}

static const char *const route_keys[] = {"policy",   "targets",
                                         "weights",  "fallback",
                                         "max_latency_ms", NULL};
static const char *const policies[] = {"priority", "weighted", "cost",
                                       "latency", NULL};

static enum gx_status
parse_weights(struct vctx *v, json_t *ro, struct cfg_route *r)
{
    json_t *w = json_object_get(ro, "weights");
    if (r->policy != CFG_POLICY_WEIGHTED) {
        if (!w)
            return GX_OK;
        size_t keep = path_push_key(v, "weights");
        enum gx_status st = verr(v, AT_KEY, "weights are only used with "
                                            "\"policy\": \"weighted\"");
        path_pop(v, keep);
        return st;
    }
    if (!(r->weights = calloc(r->n_targets, sizeof(*r->weights))))
        return GX_ENOMEM;
    if (!w) { /* weighted without weights: all equal */
        for (size_t k = 0; k < r->n_targets; k++)
            r->weights[k] = 1;
        return GX_OK;
    }
    size_t keep = path_push_key(v, "weights");
    enum gx_status st = GX_OK;
    if (!json_is_array(w)) {
        st = verr(v, AT_VALUE, "expected an array of numbers, got %s",
                  type_name(w));
        goto out;
    }
    if (json_array_size(w) != r->n_targets) {
        st = verr(v, AT_VALUE, "has %zu weights but targets has %zu",
                  json_array_size(w), r->n_targets);
        goto out;
    }
    double sum = 0;
    for (size_t k = 0; k < r->n_targets; k++) {
        json_t *x = json_array_get(w, k);
        size_t keep2 = path_push_index(v, k);
        if (!json_is_number(x))
            st = verr(v, AT_VALUE, "expected a number, got %s",
                      type_name(x));
        else if (!isfinite(json_number_value(x)) || json_number_value(x) < 0)
            st = verr(v, AT_VALUE, "must not be negative, got %g",
                      json_number_value(x));
        path_pop(v, keep2);
        if (st != GX_OK)
            goto out;
        r->weights[k] = json_number_value(x);
        sum += r->weights[k];
    }
    if (!(sum > 0) || !isfinite(sum))
        st = verr(v, AT_VALUE, "weights must add up to more than 0");
out:
    path_pop(v, keep);
    return st;
}

static enum gx_status
parse_route(struct vctx *v, const struct cfg *c, const char *name,
            json_t *ro, struct cfg_route *r)
{
    enum gx_status st;
    char *policy = NULL;
    if ((st = check_name(v, name, "route", 0)) != GX_OK)
        return st;
    if (!(r->name = strdup(name)))
        return GX_ENOMEM;
    if (!json_is_object(ro))
        return verr(v, AT_VALUE, "expected an object (policy, targets), "
                                 "got %s",
                    type_name(ro));
    if ((st = check_keys(v, ro, route_keys, NULL, NULL)) ||
        (st = get_str(v, ro, "policy", 0, STR_NONEMPTY, &policy)))
        return st;
    r->policy = CFG_POLICY_PRIORITY;
    if (policy) {
        size_t k = 0;
        while (policies[k] && strcmp(policies[k], policy))
            k++;
        if (policies[k]) {
            r->policy = (enum cfg_policy)k;
        } else {
            size_t keep = path_push_key(v, "policy");
            const char *near = nearest(policy, policies, 4);
            st = verr(v, AT_VALUE, "unknown policy '%s' (%s%s%s)", policy,
                      near ? "did you mean '"
                           : "expected priority, weighted, cost or latency",
                      near ? near : "", near ? "'?" : "");
            path_pop(v, keep);
            free(policy);
            return st;
        }
        free(policy);
    }
    json_t *targets = json_object_get(ro, "targets");
    if (!targets)
        return missing(v, ro, "targets", " (a list of \"MODEL@PROVIDER\")");
    size_t keep = path_push_key(v, "targets");
    if (!json_is_array(targets)) {
        st = verr(v, AT_VALUE, "expected an array of \"MODEL@PROVIDER\", "
                               "got %s",
                  type_name(targets));
        goto out;
    }
    size_t n = json_array_size(targets);
    if (n == 0) {
        st = verr(v, AT_VALUE, "empty route: list at least one target");
        goto out;
    }
    if (!(r->targets = calloc(n, sizeof(*r->targets)))) {
        st = GX_ENOMEM;
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        size_t keep2 = path_push_index(v, k);
        struct cfg_target *t = &r->targets[k];
        st = target_value(v, c, json_array_get(targets, k), t);
        for (size_t q = 0; st == GX_OK && q < k; q++)
            if (r->targets[q].provider == t->provider &&
                r->targets[q].model == t->model)
                st = verr(v, AT_VALUE, "duplicate target '%s' (already "
                                       "targets[%zu])",
                          json_string_value(json_array_get(targets, k)), q);
        path_pop(v, keep2);
        if (st != GX_OK)
            goto out;
        r->n_targets++;
    }
    path_pop(v, keep);
    keep = v->path.len;
    if ((st = parse_weights(v, ro, r)) ||
        (st = get_int(v, ro, "max_latency_ms", 0, CFG_MAX_MS,
                      &r->max_latency_ms)))
        goto out;
    json_t *fj = json_object_get(ro, "fallback");
    if (fj) {
        path_push_key(v, "fallback");
        if ((st = target_value(v, c, fj, &r->fallback)) != GX_OK)
            goto out;
        r->has_fallback = 1;
    }
out:
    path_pop(v, keep);
    return st;
}

static enum gx_status
parse_routes(struct vctx *v, json_t *root, struct cfg *c)
{
    json_t *routes;
    enum gx_status st = get_object(v, root, "routes", &routes);
    if (st != GX_OK || !routes)
        return st;
    size_t keep = path_push_key(v, "routes");
    size_t n = json_object_size(routes);
    if (n && !(c->routes = calloc(n, sizeof(*c->routes)))) {
        st = GX_ENOMEM;
        goto out;
    }
    const char *name;
    json_t *ro;
    json_object_foreach(routes, name, ro) {
        size_t keep2 = path_push_key(v, name);
        st = parse_route(v, c, name, ro, &c->routes[c->n_routes++]);
        path_pop(v, keep2);
        if (st != GX_OK)
            goto out;
    }
out:
    path_pop(v, keep);
    return st;
}

/* ------------------------------------------------------------------------
 * Top level
 */

static const char *const root_keys[] = {
    "listen", "workers", "database",  "admin_key", "require_keys",
    "limits", "tls",     "providers", "routes",    "failover",
    "cors",   "storage", "log",     "otel",      NULL};
static const char *const storage_keys[] = {
    "url", "password", "on_unavailable", "spool_file", "timeout_ms", NULL};

/* Appends "?password=" or "&password=" and s percent-encoded to *url. */
static enum gx_status
url_add_password(char **url, const char *pw)
{
    size_t n = strlen(*url), m = strlen(pw);
    char *u = malloc(n + 11 + 3 * m + 1);
    if (!u)
        return GX_ENOMEM;
    memcpy(u, *url, n);
    size_t k = n;
    k += (size_t)sprintf(u + k, "%spassword=", strchr(*url, '?') ? "&" : "?");
    static const char hexd[] = "0123456789ABCDEF";
    for (size_t i = 0; i < m; i++) {
        unsigned char ch = (unsigned char)pw[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
            u[k++] = (char)ch;
        } else {
            u[k++] = '%';
            u[k++] = hexd[ch >> 4];
            u[k++] = hexd[ch & 15];
        }
    }
    u[k] = '\0';
    free(*url);
    *url = u;
    return GX_OK;
}

/* "storage": {"url", "password", "on_unavailable", "spool_file",
 * "timeout_ms"}: the PostgreSQL store, as an alternative to a postgres://
 * "database". */
static enum gx_status
parse_storage(struct vctx *v, json_t *root, struct cfg *c)
{
    json_t *so;
    enum gx_status st = get_object(v, root, "storage", &so);
    if (st != GX_OK || !so)
        return st;
    size_t keep = path_push_key(v, "storage");
    char *url = NULL, *pw = NULL, *mode = NULL;
    if (!(st = check_keys(v, so, storage_keys, NULL, NULL)) &&
        !(st = get_str(v, so, "url", 0, STR_NONEMPTY, &url)) &&
        !(st = get_str(v, so, "password", 0, STR_OPTIONAL, &pw)) &&
        !(st = get_str(v, so, "on_unavailable", 0, STR_NONEMPTY, &mode)) &&
        !(st = get_str(v, so, "spool_file", 0, STR_NONEMPTY,
                       &c->storage_spool_file)))
        st = get_int(v, so, "timeout_ms", 1, 600000, &c->storage_timeout_ms);
    if (st == GX_OK && mode) {
        if (strcmp(mode, "spool") == 0) {
            c->storage_spool = 1;
        } else if (strcmp(mode, "fail") != 0) {
            size_t k2 = path_push_key(v, "on_unavailable");
            st = verr(v, AT_VALUE, "must be \"fail\" or \"spool\", got \"%s\"",
                      mode);
            path_pop(v, k2);
        }
    }
    if (st == GX_OK && url) {
        if (strncmp(url, "postgres://", 11) != 0 &&
            strncmp(url, "postgresql://", 13) != 0) {
            size_t k2 = path_push_key(v, "url");
            st = verr(v, AT_VALUE, "must be a postgres:// URI");
            path_pop(v, k2);
        } else if (json_object_get(root, "database")) {
            st = verr(v, AT_KEY, "give either \"database\" or \"storage.url\","
                                 " not both");
        } else if (pw && pw[0] && (st = url_add_password(&url, pw)) == GX_OK) {
            ;
        }
        if (st == GX_OK) {
            free(c->database);
            c->database = url;
            url = NULL;
        }
    }
    if (pw) {
        memset(pw, 0, strlen(pw));
        free(pw);
    }
    free(url);
    free(mode);
    path_pop(v, keep);
    return st;
}
static const char *const limits_keys[] = {
    "max_body_bytes", "max_connections", "header_timeout_ms",
    "idle_timeout_ms", "stream_buffer_bytes", NULL};
static const char *const cors_keys[] = {"origins", NULL};
static const char *const tls_keys[] = {"cert", "key", NULL};
static const char *const log_keys[] = {"format", "file", "level", NULL};
static const char *const otel_keys[] = {"endpoint", "sample_ratio", "sample",
                                        "queue", "service_name",
                                        "timeout_ms", NULL};
static const char *const failover_keys[] = {
    "max_attempts",     "retry_on_status",     "backoff_ms", "hedge_after_ms",
    "circuit_failures", "circuit_cooldown_ms", NULL};

static enum gx_status
parse_failover(struct vctx *v, json_t *root, struct cfg_failover *f)
{
    json_t *fo;
    enum gx_status st = get_object(v, root, "failover", &fo);
    if (st != GX_OK || !fo)
        return st;
    size_t keep = path_push_key(v, "failover");
    if ((st = check_keys(v, fo, failover_keys, NULL, NULL)) ||
        (st = get_int(v, fo, "max_attempts", 1, 100, &f->max_attempts)) ||
        (st = get_int(v, fo, "backoff_ms", 0, 600000, &f->backoff_ms)) ||
        (st = get_int(v, fo, "hedge_after_ms", 0, CFG_MAX_MS,
                      &f->hedge_after_ms)) ||
        (st = get_int(v, fo, "circuit_failures", 1, 1000000,
                      &f->circuit_failures)) ||
        (st = get_int(v, fo, "circuit_cooldown_ms", 0, CFG_MAX_MS,
                      &f->circuit_cooldown_ms)))
        goto out;
    json_t *rs = json_object_get(fo, "retry_on_status");
    if (rs) {
        size_t keep2 = path_push_key(v, "retry_on_status");
        if (!json_is_array(rs)) {
            st = verr(v, AT_VALUE, "expected an array of HTTP statuses, "
                                   "got %s",
                      type_name(rs));
        } else {
            size_t n = json_array_size(rs);
            int *a = calloc(n + 1, sizeof(*a));
            if (!a)
                st = GX_ENOMEM;
            for (size_t k = 0; a && k < n; k++) {
                long long x = 0;
                size_t keep3 = path_push_index(v, k);
                st = int_value(v, json_array_get(rs, k), 100, 599, &x);
                path_pop(v, keep3);
                if (st != GX_OK)
                    break;
                a[k] = (int)x;
            }
            if (st == GX_OK) {
                free(f->retry_on_status);
                f->retry_on_status = a;
                f->n_retry_on_status = n;
            } else {
                free(a);
            }
        }
        path_pop(v, keep2);
    }
out:
    path_pop(v, keep);
    return st;
}

/* An origin as browsers send it: scheme://host[:port], no path. */
static int
origin_ok(const char *o)
{
    const char *h = !strncmp(o, "https://", 8)  ? o + 8
                    : !strncmp(o, "http://", 7) ? o + 7
                                                : NULL;
    if (!h || !*h)
        return 0;
    for (; *h; h++)
        if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') ||
              (*h >= '0' && *h <= '9') || *h == '.' || *h == '-' ||
              *h == ':' || *h == '[' || *h == ']'))
            return 0;
    return 1;
}

/* "log": {"format": "json"|"logfmt", "file": PATH, "level": LEVEL}. */
static enum gx_status
parse_log(struct vctx *v, json_t *root, struct cfg *c)
{
    static const char *const levels[] = {"error", "warn", "info", "debug",
                                         NULL};
    json_t *lo;
    enum gx_status st = get_object(v, root, "log", &lo);
    if (st != GX_OK || !lo)
        return st;
    size_t keep = path_push_key(v, "log");
    char *fmt = NULL, *lvl = NULL;
    if ((st = check_keys(v, lo, log_keys, NULL, NULL)) ||
        (st = get_str(v, lo, "format", 0, STR_NONEMPTY, &fmt)) ||
        (st = get_str(v, lo, "file", 0, STR_NONEMPTY, &c->log_file)) ||
        (st = get_str(v, lo, "level", 0, STR_NONEMPTY, &lvl)))
        goto out;
    if (fmt && strcmp(fmt, "json") && strcmp(fmt, "logfmt")) {
        size_t k2 = path_push_key(v, "format");
        st = verr(v, AT_VALUE, "expected \"json\" or \"logfmt\", got \"%s\"",
                  fmt);
        path_pop(v, k2);
        goto out;
    }
    c->log_logfmt = fmt && !strcmp(fmt, "logfmt");
    c->log_level = GX_LOG_INFO; /* a "log" block turns access lines on */
    if (lvl) {
        c->log_level = -1;
        for (int i = 0; levels[i]; i++)
            if (!strcmp(lvl, levels[i]))
                c->log_level = i;
        if (c->log_level < 0) {
            size_t k2 = path_push_key(v, "level");
            st = verr(v, AT_VALUE,
                      "expected error, warn, info or debug, got \"%s\"", lvl);
            path_pop(v, k2);
        }
    }
out:
    free(fmt);
    free(lvl);
    path_pop(v, keep);
    return st;
}

/* "otel": {"endpoint": URL, "sample_ratio": 0..1 ("sample" as DESIGN.md's
 * example spells it), "queue": spans, "service_name": NAME, "timeout_ms"}.
 * No block: no traces. */
static enum gx_status
parse_otel(struct vctx *v, json_t *root, struct cfg *c)
{
    json_t *ot;
    enum gx_status st = get_object(v, root, "otel", &ot);
    if (st != GX_OK || !ot)
        return st;
    size_t keep = path_push_key(v, "otel");
    if ((st = check_keys(v, ot, otel_keys, NULL, NULL)) ||
        (st = get_str(v, ot, "endpoint", 1, STR_NONEMPTY,
                      &c->otel_endpoint)) ||
        (st = get_str(v, ot, "service_name", 0, STR_NONEMPTY,
                      &c->otel_service)) ||
        (st = get_int(v, ot, "queue", 1, 1 << 20, &c->otel_queue)) ||
        (st = get_int(v, ot, "timeout_ms", 1, 600000, &c->otel_timeout_ms)))
        goto out;
    if (strncmp(c->otel_endpoint, "http://", 7) &&
        strncmp(c->otel_endpoint, "https://", 8)) {
        size_t k2 = path_push_key(v, "endpoint");
        st = verr(v, AT_VALUE,
                  "expected an http:// or https:// URL (OTLP/HTTP), got "
                  "\"%s\"",
                  c->otel_endpoint);
        path_pop(v, k2);
        goto out;
    }
    for (int i = 0; i < 2; i++) {
        const char *k = i ? "sample" : "sample_ratio";
        json_t *j = json_object_get(ot, k);
        if (!j)
            continue;
        if (!json_is_number(j) || json_number_value(j) < 0 ||
            json_number_value(j) > 1) {
            size_t k2 = path_push_key(v, k);
            st = verr(v, AT_VALUE, "expected a number from 0 to 1");
            path_pop(v, k2);
            goto out;
        }
        c->otel_sample = json_number_value(j);
    }
out:
    path_pop(v, keep);
    return st;
}

/* "cors": {"origins": ["https://app.example", ...]} or ["*"]. */
static enum gx_status
parse_cors(struct vctx *v, json_t *root, struct cfg *c)
{
    json_t *co;
    enum gx_status st = get_object(v, root, "cors", &co);
    if (st != GX_OK || !co)
        return st;
    size_t keep = path_push_key(v, "cors");
    if ((st = check_keys(v, co, cors_keys, NULL, NULL)) != GX_OK)
        goto out;
    json_t *a = json_object_get(co, "origins");
    if (!a)
        goto out;
    size_t keep2 = path_push_key(v, "origins");
    if (!json_is_array(a)) {
        st = verr(v, AT_VALUE, "expected an array of origins like "
                               "\"https://app.example\", got %s",
                  type_name(a));
    } else if (!(c->cors_origins =
                     calloc(json_array_size(a) + 1, sizeof(char *)))) {
        st = GX_ENOMEM;
    }
    for (size_t k = 0; st == GX_OK && k < json_array_size(a); k++) {
        size_t keep3 = path_push_index(v, k);
        char *o = NULL;
        st = str_value(v, json_array_get(a, k), STR_NONEMPTY, &o);
        if (st == GX_OK && strcmp(o, "*") && !origin_ok(o))
            st = verr(v, AT_VALUE,
                      "expected \"*\" or an origin scheme://host[:port] "
                      "without a path (e.g. \"https://app.example\"), "
                      "got \"%s\"",
                      o);
        if (st == GX_OK)
            c->cors_origins[c->n_cors_origins++] = o;
        else
            free(o);
        path_pop(v, keep3);
    }
    path_pop(v, keep2);
out:
    path_pop(v, keep);
    return st;
}

static enum gx_status
parse_root(struct vctx *v, json_t *root, struct cfg *c)
{
    enum gx_status st;
    char *listen = NULL;
    json_t *limits, *tls;
    if (!json_is_object(root))
        return verr(v, AT_VALUE, "expected an object, got %s",
                    type_name(root));
    if ((st = check_keys(v, root, root_keys, NULL, NULL)) != GX_OK)
        return st;

    c->require_keys = 1;
    c->workers = cfg_ncpu();
    c->listen_port = 8080;
    c->max_body_bytes = 4194304;
    c->max_connections = 10000;
    c->log_level = -1;
    c->otel_sample = 1.0;
    c->otel_queue = 2048;
    c->otel_timeout_ms = 5000;
    c->header_timeout_ms = 10000;
    c->idle_timeout_ms = 60000;
    c->stream_buffer_bytes = CFG_STREAM_BUFFER_DEFAULT;
    if ((st = cfg_failover_defaults(&c->failover)) != GX_OK ||
        !(c->listen_host = strdup("127.0.0.1")) ||
        !(c->database = strdup("llmux.db")))
        return st != GX_OK ? st : GX_ENOMEM;

    if ((st = get_bool(v, root, "require_keys", &c->require_keys)) ||
        (st = get_str(v, root, "listen", 0, STR_NONEMPTY, &listen)))
        return st;
    v->require_keys = c->require_keys;
    if (listen) {
        char *host = NULL;
        int port = 0, rc = cfg_parse_listen(listen, &host, &port);
        free(listen);
        if (rc == -3)
            return GX_ENOMEM;
        if (rc) {
            size_t keep = path_push_key(v, "listen");
            st = verr(v, AT_VALUE,
                      rc == -2 ? "port must be between 0 and 65535"
                               : "expected HOST:PORT (e.g. 127.0.0.1:8080 or "
                                 "[::1]:8080)");
            path_pop(v, keep);
            return st;
        }
        free(c->listen_host);
        c->listen_host = host;
        c->listen_port = port;
    }
    if ((st = get_int(v, root, "workers", 1, 256, &c->workers)) ||
        (st = get_str(v, root, "database", 0, STR_NONEMPTY, &c->database)) ||
        (st = get_str(v, root, "admin_key", 0,
                      c->require_keys ? STR_SECRET : STR_OPTIONAL,
                      &c->admin_key)))
        return st;

    if ((st = get_object(v, root, "limits", &limits)) != GX_OK)
        return st;
    if (limits) {
        long long mb = c->max_body_bytes;
        size_t keep = path_push_key(v, "limits");
        if (!(st = check_keys(v, limits, limits_keys, NULL, NULL)) &&
            !(st = get_ll(v, limits, "max_body_bytes", 1, 1LL << 30, &mb)) &&
            (st = get_int(v, limits, "max_connections", 1, 1000000,
                          &c->max_connections)) == GX_OK &&
            (st = get_int(v, limits, "header_timeout_ms", 100, 600000,
                          &c->header_timeout_ms)) == GX_OK &&
            (st = get_int(v, limits, "idle_timeout_ms", 100, 3600000,
                          &c->idle_timeout_ms)) == GX_OK)
            st = get_int(v, limits, "stream_buffer_bytes", 1024, 64 << 20,
                         &c->stream_buffer_bytes);
        c->max_body_bytes = mb;
        path_pop(v, keep);
        if (st != GX_OK)
            return st;
    }

    if ((st = get_object(v, root, "tls", &tls)) != GX_OK)
        return st;
    if (tls) {
        size_t keep = path_push_key(v, "tls");
        if (!(st = check_keys(v, tls, tls_keys, NULL, NULL)) &&
            !(st = get_str(v, tls, "cert", 1, STR_NONEMPTY, &c->tls_cert)))
            st = get_str(v, tls, "key", 1, STR_NONEMPTY, &c->tls_key);
        path_pop(v, keep);
        if (st != GX_OK)
            return st;
    }

    if ((st = parse_storage(v, root, c)) || (st = parse_cors(v, root, c)) ||
        (st = parse_log(v, root, c)) || (st = parse_otel(v, root, c)) ||
        (st = parse_providers(v, root, c)) ||
        (st = parse_routes(v, root, c)))
        return st;
    return parse_failover(v, root, &c->failover);
}

enum gx_status
cfg_load_string(const char *text, const char *name, struct cfg **out,
                char *err, size_t errlen)
{
    enum gx_status st = GX_ENOMEM;
    /* Some editors start UTF-8 files with a BOM; editors do not count it
     * as a column, so neither do we. */
    if (text && !strncmp(text, "\xEF\xBB\xBF", 3))
        text += 3;
    struct vctx v = {.name = name ? name : "(config)",
                     .text = text,
                     .len = text ? strlen(text) : 0,
                     .err = err,
                     .errlen = errlen};
    struct cfg *c = NULL;
    json_error_t je;
    if (!text) {
        gx_errf(err, errlen, "%s: no text", v.name);
        return GX_EINVAL;
    }
    json_t *root = json_loadb(text, v.len, JSON_REJECT_DUPLICATES, &je);
    gx_buf_init(&v.path, 0);
    if (!root) {
        st = GX_EINVAL;
        struct cfg_pos pos = {0};
        if (json_error_code(&je) == json_error_duplicate_key &&
            cfg_pos_build(&pos, text, v.len) != GX_ENOMEM && pos.dup) {
            const struct cfg_pos_entry *first = &pos.a[pos.dup_first];
            gx_errf(err, errlen,
                    "%s:%d:%d: %s: duplicate key '%s' (first at line %d, "
                    "column %d)",
                    v.name, pos.dup_line, pos.dup_col, first->path,
                    pos.dup_key, first->key_line, first->key_col);
        } else {
            gx_errf(err, errlen, "%s:%d:%d: invalid JSON: %s", v.name,
                    je.line > 0 ? je.line : 1,
                    je.column > 0 ? je.column : 1, je.text);
        }
        cfg_pos_cleanup(&pos);
        goto out;
    }
    if (!(c = calloc(1, sizeof(*c))) || !(c->path = strdup(v.name)))
        goto out;
    if ((st = parse_root(&v, root, c)) != GX_OK)
        goto out;
    *out = c;
    c = NULL;
out:
    if (st == GX_ENOMEM)
        gx_errf(err, errlen, "%s: out of memory", v.name);
    gx_buf_cleanup(&v.path);
    json_decref(root);
    cfg_free(c);
    return st;
}

enum gx_status
cfg_load_file(const char *path, struct cfg **out, char *err, size_t errlen)
{
    enum gx_status st = GX_EIO;
    struct gx_buf b;
    gx_buf_init(&b, CFG_MAX_FILE_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f) {
        gx_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    char chunk[16384];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (gx_buf_append(&b, chunk, n) != GX_OK) {
            gx_errf(err, errlen, "%s: larger than %u bytes", path,
                    CFG_MAX_FILE_BYTES);
            st = GX_ETOOBIG;
            goto out;
        }
    }
    if (ferror(f)) {
        gx_errf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    if ((st = gx_buf_append(&b, "", 0)) != GX_OK)
        goto out;
    if (memchr(b.data, '\0', b.len)) {
        /* cfg_load_string takes a C string; say where the NUL is. */
        size_t at = (size_t)((char *)memchr(b.data, '\0', b.len) - b.data);
        int line = 1, col = 1;
        for (size_t k = 0; k < at; k++) {
            if (b.data[k] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)b.data[k] & 0xC0) != 0x80) {
                col++;
            }
        }
        gx_errf(err, errlen, "%s:%d:%d: invalid JSON: NUL byte", path, line,
                col);
        st = GX_EINVAL;
        goto out;
    }
    st = cfg_load_string(b.data, path, out, err, errlen);
out:
    if (f)
        fclose(f);
    gx_buf_cleanup(&b);
    return st;
}

/* ------------------------------------------------------------------------
 * Free, lookups, resolution
 */

void
cfg_free(struct cfg *c)
{
    if (!c)
        return;
    for (size_t k = 0; k < c->n_providers; k++) {
        struct cfg_provider *p = &c->providers[k];
        free(p->name);
        free(p->base_url);
        if (p->api_key) {
            /* Do not leave the secret in freed memory. */
            volatile char *s = p->api_key;
            while (*s)
                *s++ = 0;
            free(p->api_key);
        }
        for (size_t h = 0; h < p->n_headers; h++) {
            free(p->headers[h].name);
            free(p->headers[h].value);
        }
        free(p->headers);
        free(p->ca_file);
        free(p->model_path);
        for (size_t m = 0; m < p->n_models; m++) {
            free(p->models[m].name);
            free(p->models[m].upstream);
        }
        free(p->models);
    }
    free(c->providers);
    for (size_t k = 0; k < c->n_routes; k++) {
        free(c->routes[k].name);
        free(c->routes[k].targets);
        free(c->routes[k].weights);
    }
    free(c->routes);
    free(c->failover.retry_on_status);
    free(c->path);
    free(c->listen_host);
    free(c->database);
    free(c->storage_spool_file);
    if (c->admin_key) {
        volatile char *s = c->admin_key;
        while (*s)
            *s++ = 0;
        free(c->admin_key);
    }
    free(c->tls_cert);
    free(c->tls_key);
    free(c->log_file);
    free(c->otel_endpoint);
    free(c->otel_service);
    for (size_t k = 0; k < c->n_cors_origins; k++)
        free(c->cors_origins[k]);
    free(c->cors_origins);
    free(c);
}

const struct cfg_provider *
cfg_provider_find(const struct cfg *c, const char *name)
{
    size_t k;
    return c && name && find_provider(c, name, &k) ? &c->providers[k]
                                                    : NULL;
}

const struct cfg_route *
cfg_route_find(const struct cfg *c, const char *name)
{
    for (size_t k = 0; c && name && k < c->n_routes; k++)
        if (!strcmp(c->routes[k].name, name))
            return &c->routes[k];
    return NULL;
}

size_t
cfg_resolve(const struct cfg *c, const char *model,
            const struct cfg_route **route, struct cfg_target *out,
            size_t cap)
{
    size_t n = 0;
    if (route)
        *route = NULL;
    if (!c || !model)
        return 0;
    const struct cfg_route *r = cfg_route_find(c, model);
    if (r) {
        if (route)
            *route = r;
        for (size_t k = 0; k < r->n_targets && n < cap; k++)
            out[n++] = r->targets[k];
        if (r->has_fallback && n < cap) {
            int dup = 0;
            for (size_t k = 0; k < r->n_targets && !dup; k++)
                dup = r->targets[k].provider == r->fallback.provider &&
                      r->targets[k].model == r->fallback.model;
            if (!dup)
                out[n++] = r->fallback;
        }
        return n;
    }
    struct cfg_target t;
    if (strchr(model, '@') && parse_target(c, model, &t)) {
        if (cap > 0)
            out[n++] = t;
        return n;
    }
    for (size_t k = 0; k < c->n_providers && n < cap; k++) {
        size_t m;
        if (find_model(&c->providers[k], model, &m))
            out[n++] = (struct cfg_target){k, m};
    }
    return n;
}
