/*
 * tool_args.c: a tool call's arguments read as the model writes them
 * (providers/local.c): where a JSON value ends, and the XML argument
 * pairs of GLM's and Qwen3-Coder's calls as the JSON object they stand
 * for.  Both work on a growing
 * output: called again with more of it, they go on or start over and
 * give the same answer as one call on the whole.  And Mistral's call ids
 * (pv_mistral_id).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "providers_int.h"

int
pv_json_end(struct pv_jend *cs, const char *acc, size_t len, int final)
{
    for (; cs->scan < len; cs->scan++) {
        unsigned char ch = (unsigned char)acc[cs->scan];
        if (cs->in_str) {
            if (cs->esc) {
                cs->esc = 0;
            } else if (ch == '\\') {
                cs->esc = 1;
            } else if (ch == '"') {
                cs->in_str = 0;
                if (cs->depth == 0)
                    goto closed;
            }
            continue;
        }
        if (cs->scalar) {
            if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
                ch == '.' || ch == '+' || ch == '-' || ch == 'E')
                continue;
            cs->end = cs->scan;
            return 1;
        }
        if (ch == '"') {
            cs->in_str = 1;
            cs->started = 1;
        } else if (ch == '{' || ch == '[') {
            cs->depth++;
            cs->started = 1;
        } else if (ch == '}' || ch == ']') {
            if (--cs->depth <= 0)
                goto closed;
        } else if (ch != ' ' && ch != '\n' && ch != '\t' && ch != '\r' &&
                   !cs->started) {
            cs->scalar = cs->started = 1;
        }
    }
    if (final && cs->scalar) {
        cs->end = len;
        return 1;
    }
    return 0;
closed:
    cs->end = ++cs->scan;
    return 1;
}

/* JSON string text of the bytes s[0, n) (not validated: the engine's text
 * is UTF-8) into out */
static void
json_escape_into(struct gx_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = ch == '"'    ? "\\\""
                        : ch == '\\' ? "\\\\"
                        : ch == '\n'  ? "\\n"
                        : ch == '\r'  ? "\\r"
                        : ch == '\t'  ? "\\t"
                        : ch == '\b'  ? "\\b"
                        : ch == '\f'  ? "\\f"
                                      : NULL;
        if (e)
            gx_buf_append(out, e, 2);
        else if (ch < 0x20)
            gx_buf_printf(out, "\\u%04x", ch);
        else
            gx_buf_append(out, (const char *)&ch, 1);
    }
}

const struct pv_xml_fmt pv_xml_glm = {
    "<arg_key>", "</arg_key><arg_value>", "</arg_value>", "</tool_call>",
    "x", "GLM"};
const struct pv_xml_fmt pv_xml_qwen3_coder = {
    "<parameter=", ">\n", "\n</parameter>\n", "</function>", "q",
    "Qwen3-Coder"};

int
pv_xml_args_read(const struct pv_xml_fmt *f, const json_t *keys,
                 const char *x, size_t n, int final, struct gx_buf *out,
                 struct pv_xml_read *st)
{
    size_t ko = strlen(f->key_open), km = strlen(f->key_mid),
           cl = strlen(f->close), el = strlen(f->end);
#define AT(p, lit, l) ((p) + (l) <= n && !memcmp(x + (p), lit, l))
    if (st->stage == XR_BEGIN) {
        gx_buf_append(out, "{", 1);
        st->stage = XR_PAIR;
        st->first = 1;
    }
    for (;;) {
        size_t p = st->p;
        switch (st->stage) {
        case XR_PAIR: { /* a pair's head, or the end */
            if (AT(p, f->end, el)) {
                gx_buf_append(out, "}", 1);
                st->end = p;
                st->stage = XR_DONE;
                return 1;
            }
            if (!AT(p, f->key_open, ko))
                return 0;
            size_t k0 = p + ko;
            const char *ke = memmem(x + k0, n - k0, f->key_mid, km);
            if (!ke)
                return 0;
            size_t kl = (size_t)(ke - x) - k0;
            char *key = strndup(x + k0, kl);
            if (!key)
                return 0;
            const json_t *jv = json_object_get(keys, key);
            int text = !jv || json_is_true(jv);
            free(key);
            gx_buf_append(out, st->first ? "\"" : ", \"", st->first ? 1 : 3);
            json_escape_into(out, x + k0, kl); /* key may stop at a NUL */
            gx_buf_append(out, text ? "\": \"" : "\": ", text ? 4 : 3);
            st->first = 0;
            st->p = k0 + kl + km;
            memset(&st->js, 0, sizeof(st->js));
            st->js.scan = st->p;
            st->stage = text ? XR_TEXT : XR_JSON;
            break;
        }
        case XR_TEXT: { /* a text up to its close; the end of it that may
                           be starting the close held back */
            const char *c = memmem(x + p, n - p, f->close, cl);
            size_t vl = c ? (size_t)(c - x) - p : n - p;
            for (size_t h = vl >= cl ? vl - cl + 1 : 0;
                 !c && !final && h < vl; h++)
                if (!memcmp(x + p + h, f->close, vl - h)) {
                    vl = h;
                    break;
                }
            json_escape_into(out, x + p, vl);
            st->p = p + vl;
            if (!c)
                return 0;
            gx_buf_append(out, "\"", 1);
            st->p += cl;
            st->stage = XR_PAIR;
            break;
        }
        case XR_JSON: { /* a JSON value as it is, then its close */
            int closed = pv_json_end(&st->js, x, n, final);
            size_t ve = closed ? st->js.end : n;
            gx_buf_append(out, x + p, ve - p);
            st->p = ve;
            if (!closed)
                return 0;
            st->stage = XR_CLOSE;
            break;
        }
        case XR_CLOSE:
            if (!AT(p, f->close, cl))
                return 0;
            st->p = p + cl;
            st->stage = XR_PAIR;
            break;
        default: /* XR_DONE */
            return 1;
        }
    }
#undef AT
}

int
pv_xml_args_json(const struct pv_xml_fmt *f, const json_t *keys,
                 const char *x, size_t n, int final, struct gx_buf *out,
                 size_t *end)
{
    struct pv_xml_read st = {0};
    int closed = pv_xml_args_read(f, keys, x, n, final, out, &st);
    *end = st.end;
    return closed;
}

size_t
pv_utf8_partial(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && k < 4 && ((unsigned char)s[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return 0;
    unsigned char lead = (unsigned char)s[n - 1 - k];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return want > k + 1 ? k + 1 : 0;
}

/* A call id as Mistral's template requires it: 9 characters [a-zA-Z0-9]
 * (the template refuses others): the model's own for "call_" and 9 such
 * (what a Small 3.2 answer's call was returned with: local.c's
 * call_id_of), any
 * other the same for the same id (64-bit FNV-1a in base 62), so a call
 * and its result still name each other. */
void
pv_mistral_id(const char *id, char out[10])
{
    static const char b62[] =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    if (id && strlen(id) == 14 && !strncmp(id, "call_", 5) &&
        strspn(id + 5, b62) == 9) {
        memcpy(out, id + 5, 10);
        return;
    }
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)(id ? id : "");
         *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    for (int i = 0; i < 9; i++, h /= 62)
        out[i] = b62[h % 62];
    out[9] = 0;
}
