/*
 * grammar.c: constrained generation.  A context-free grammar over bytes,
 * parsed from a small GBNF-like text, run as a pushdown recognizer one
 * byte at a time, and the token mask it allows over a whole vocabulary.
 *
 * Grammar text (our own dialect; the JSON Schema compiler in providers/
 * writes it):
 *
 *   rule  ::= alt ( "|" alt )*          one rule per `name ::= ...`; the
 *   alt   ::= item*                      body runs until the next `name ::=`
 *   item  ::= prim ( "?" | "*" | "+" | "{m}" | "{m,}" | "{m,n}" )?
 *   prim  ::= "literal" | [set] | [^set] | name | "(" rule ")" | %free
 *
 *   literals and sets take \" \\ \] \- \n \r \t \xHH escapes; sets hold
 *   single bytes and ranges a-z; # starts a comment to the end of the line.
 *   %free matches any bytes to the end of the output (and may end at any
 *   point): "from here on, unconstrained".  Matching is on bytes, so UTF-8
 *   is spelled out by the grammar writer.
 *
 * Representation.  Every rule is a flat run of elements: the alternatives
 * one after another, each closed by ALT (another follows) or END (last).
 * A parse position is an index into that array.  A stack is the list of
 * positions still to match, innermost last; its top always names a CHARS
 * (or FREE) element, because pushing expands rule references at once.
 * The recognizer's state is a set of such stacks (the grammar may be
 * ambiguous), deduplicated.  A stack that becomes empty means the input so
 * far is a complete sentence.  A reference that is the last element of an
 * alternative is a tail call: the parent's position is not kept, so
 * right-recursive repetition (x*) runs in constant stack depth.  Left
 * recursion would expand forever; the expansion depth and set size are
 * bounded and exceeding them is an error, never a hang.
 *
 * The token mask walks a prefix trie of the vocabulary's pieces together
 * with the state: a byte that no stack accepts prunes the whole subtree,
 * so only pieces that are live prefixes are ever visited.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_int.h"

enum { GE_END = 0, GE_ALT, GE_REF, GE_CHARS, GE_FREE };

struct gelem {
    uint8_t type;
    uint32_t v; /* rule (REF) or charset index (CHARS) */
};

struct le_grammar {
    struct gelem *el;
    uint32_t n_el;
    uint64_t (*sets)[4]; /* 256-bit byte sets */
    uint32_t n_sets;
    uint32_t *alt;       /* start positions of each rule's alternatives */
    uint32_t *alt_off;   /* [n_rules + 1] into alt */
    uint32_t n_rules;
    uint32_t root;
};

#define G_MAX_DEPTH 256    /* positions in one stack / expansion depth;
                              each level keeps a copy on the C stack */
#define G_MAX_STACKS 4096  /* stacks in one state */
/* expand() calls in one operation (a state's start, a run of bytes, one
 * mask walk): the sets are deduplicated only at their leaves, so a rule
 * with many empty alternatives under a repetition (x ::= | | | ... and
 * x{2,5}) would otherwise expand exponentially (fuzz_grammar found one
 * taking minutes); past this the grammar is refused as too ambiguous.  A
 * 128k-vocabulary mask walk of the JSON grammars takes a few million. */
#define G_MAX_EXPAND (1u << 23)
#define G_MAX_REPEAT 10000 /* m, n of x{m,n} */
#define G_MAX_RULES 200000 /* rules of one grammar, generated ones included */

/* ------------------------------------------------------------------ */
/* Parser                                                               */

struct prule {
    char *name; /* NULL for generated rules */
    struct gelem *el;
    size_t n, cap;
    int defined;
};

/* The chain O_1..O_n of optional copies of one element x (O_k ::= x
 * O_{k-1} | ""), shared by every x{m,n} with the same x: O_k of a shorter
 * bound is a tail of a longer one, so a schema with many bounded strings
 * costs one chain, not one per string. */
struct pchain {
    struct gelem x;
    int *ids; /* ids[k - 1] is O_k */
    size_t n, cap;
};

struct gparse {
    const char *p, *end;
    struct prule *r;
    size_t n_r, cap_r;
    struct pchain *chains;
    size_t n_chains, cap_chains;
    uint64_t (*sets)[4];
    size_t n_sets, cap_sets;
    char *err;
    size_t errlen;
    int failed;
    int line;
};

static void
perr(struct gparse *g, const char *msg, const char *what)
{
    if (g->failed)
        return;
    g->failed = 1;
    if (g->err && g->errlen)
        snprintf(g->err, g->errlen, "grammar line %d: %s%s%s", g->line, msg,
                 what ? " " : "", what ? what : "");
}

static int
grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *np = realloc(*p, c * size);
    if (!np)
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

static int
new_rule(struct gparse *g, const char *name, size_t nlen)
{
    if (g->n_r >= G_MAX_RULES) {
        perr(g, "the grammar is too large", NULL);
        return -1;
    }
    if (grow((void **)&g->r, &g->cap_r, g->n_r + 1, sizeof(*g->r)) != 0) {
        perr(g, "out of memory", NULL);
        return -1;
    }
    struct prule *r = &g->r[g->n_r];
    memset(r, 0, sizeof(*r));
    if (name) {
        r->name = strndup(name, nlen);
        if (!r->name) {
            perr(g, "out of memory", NULL);
            return -1;
        }
    }
    return (int)g->n_r++;
}

static int
rule_by_name(struct gparse *g, const char *name, size_t nlen)
{
    for (size_t i = 0; i < g->n_r; i++)
        if (g->r[i].name && strlen(g->r[i].name) == nlen &&
            !memcmp(g->r[i].name, name, nlen))
            return (int)i;
    return new_rule(g, name, nlen);
}

static void
emit(struct gparse *g, int rule, uint8_t type, uint32_t v)
{
    struct prule *r = &g->r[rule];
    if (grow((void **)&r->el, &r->cap, r->n + 1, sizeof(*r->el)) != 0) {
        perr(g, "out of memory", NULL);
        return;
    }
    r->el[r->n].type = type;
    r->el[r->n].v = v;
    r->n++;
}

static uint32_t
add_set(struct gparse *g, const uint64_t set[4])
{
    for (size_t i = 0; i < g->n_sets; i++)
        if (!memcmp(g->sets[i], set, sizeof(g->sets[i])))
            return (uint32_t)i;
    if (grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1,
             sizeof(*g->sets)) != 0) {
        perr(g, "out of memory", NULL);
        return 0;
    }
    memcpy(g->sets[g->n_sets], set, sizeof(g->sets[0]));
    return (uint32_t)g->n_sets++;
}

static void
skip_ws(struct gparse *g)
{
    while (g->p < g->end) {
        char c = *g->p;
        if (c == '\n') {
            g->line++;
            g->p++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            g->p++;
        } else if (c == '#') {
            while (g->p < g->end && *g->p != '\n')
                g->p++;
        } else {
            break;
        }
    }
}

static int
is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static size_t
name_len(const char *p, const char *end)
{
    size_t n = 0;
    while (p + n < end && is_name_char(p[n]))
        n++;
    return n;
}

static int
hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One byte of a literal or set, escapes decoded; -1 on error. */
static int
read_byte(struct gparse *g)
{
    if (g->p >= g->end) {
        perr(g, "unterminated literal or set", NULL);
        return -1;
    }
    unsigned char c = (unsigned char)*g->p++;
    if (c == '\n')
        g->line++;
    if (c != '\\')
        return c;
    if (g->p >= g->end) {
        perr(g, "unterminated escape", NULL);
        return -1;
    }
    c = (unsigned char)*g->p++;
    switch (c) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'x': {
        int h = g->end - g->p >= 2 ? hexval(g->p[0]) : -1;
        int l = h >= 0 ? hexval(g->p[1]) : -1;
        if (l < 0) {
            perr(g, "bad \\x escape", NULL);
            return -1;
        }
        g->p += 2;
        return h * 16 + l;
    }
    default:
        return c; /* \" \\ \] \- \[ ... */
    }
}

static void
set_bit(uint64_t s[4], int b)
{
    s[b >> 6] |= 1ULL << (b & 63);
}

static void parse_alts(struct gparse *g, int rule, int depth);

/* Parses one primary into a temporary rule tmp (its elements); returns 0. */
static int
parse_prim(struct gparse *g, int tmp, int depth)
{
    char c = *g->p;
    if (c == '"') {
        g->p++;
        while (!g->failed && g->p < g->end && *g->p != '"') {
            int b = read_byte(g);
            if (b < 0)
                return -1;
            uint64_t s[4] = {0};
            set_bit(s, b);
            emit(g, tmp, GE_CHARS, add_set(g, s));
        }
        if (g->p >= g->end) {
            perr(g, "unterminated literal", NULL);
            return -1;
        }
        g->p++;
        return 0;
    }
    if (c == '[') {
        g->p++;
        int neg = 0;
        if (g->p < g->end && *g->p == '^') {
            neg = 1;
            g->p++;
        }
        uint64_t s[4] = {0};
        while (!g->failed && g->p < g->end && *g->p != ']') {
            int a = read_byte(g);
            if (a < 0)
                return -1;
            int b = a;
            if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
                g->p++;
                b = read_byte(g);
                if (b < 0)
                    return -1;
                if (b < a) {
                    perr(g, "reversed range in a set", NULL);
                    return -1;
                }
            }
            for (int x = a; x <= b; x++)
                set_bit(s, x);
        }
        if (g->p >= g->end) {
            perr(g, "unterminated set", NULL);
            return -1;
        }
        g->p++;
        if (neg)
            for (int i = 0; i < 4; i++)
                s[i] = ~s[i];
        emit(g, tmp, GE_CHARS, add_set(g, s));
        return 0;
    }
    if (c == '(') {
        g->p++;
        int sub = new_rule(g, NULL, 0);
        if (sub < 0)
            return -1;
        g->r[sub].defined = 1;
        parse_alts(g, sub, depth + 1);
        skip_ws(g);
        if (g->failed)
            return -1;
        if (g->p >= g->end || *g->p != ')') {
            perr(g, "expected )", NULL);
            return -1;
        }
        g->p++;
        emit(g, tmp, GE_REF, (uint32_t)sub);
        return 0;
    }
    if (c == '%') {
        if (g->end - g->p >= 5 && !memcmp(g->p, "%free", 5)) {
            g->p += 5;
            emit(g, tmp, GE_FREE, 0);
            return 0;
        }
        perr(g, "unknown directive", NULL);
        return -1;
    }
    size_t nl = name_len(g->p, g->end);
    if (!nl) {
        char what[8];
        snprintf(what, sizeof(what), "'%c'", c);
        perr(g, "unexpected character", what);
        return -1;
    }
    int r = rule_by_name(g, g->p, nl);
    if (r < 0)
        return -1;
    g->p += nl;
    emit(g, tmp, GE_REF, (uint32_t)r);
    return 0;
}

static int
read_uint(struct gparse *g, long *out)
{
    long v = 0;
    int any = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        v = v * 10 + (*g->p++ - '0');
        any = 1;
        if (v > G_MAX_REPEAT) {
            perr(g, "repetition count too large", NULL);
            return -1;
        }
    }
    if (!any) {
        perr(g, "expected a number in {m,n}", NULL);
        return -1;
    }
    *out = v;
    return 0;
}

static void
append_elems(struct gparse *g, int rule, const struct gelem *e, size_t n)
{
    for (size_t i = 0; i < n && !g->failed; i++)
        emit(g, rule, e[i].type, e[i].v);
}

/* The single element standing for x: x itself or a rule wrapping it. */
static struct gelem
as_unit(struct gparse *g, int tmp)
{
    struct gelem u = {GE_REF, 0};
    if (g->r[tmp].n == 1)
        return g->r[tmp].el[0];
    int w = new_rule(g, NULL, 0);
    if (w < 0)
        return u;
    g->r[w].defined = 1;
    /* g->r may move in new_rule: copy after */
    append_elems(g, w, g->r[tmp].el, g->r[tmp].n);
    emit(g, w, GE_END, 0);
    u.v = (uint32_t)w;
    return u;
}

/* R ::= x R | ""  (star) or  R ::= x | ""  (opt); returns R. */
static int
rep_rule(struct gparse *g, struct gelem x, int star, int tail)
{
    int r = new_rule(g, NULL, 0);
    if (r < 0)
        return -1;
    g->r[r].defined = 1;
    emit(g, r, x.type, x.v);
    if (star)
        emit(g, r, GE_REF, (uint32_t)r);
    else if (tail >= 0)
        emit(g, r, GE_REF, (uint32_t)tail);
    emit(g, r, GE_ALT, 0);
    emit(g, r, GE_END, 0);
    return r;
}

/* O_k of x (see struct pchain); -1 on failure. */
static int
opt_chain(struct gparse *g, struct gelem x, size_t k)
{
    struct pchain *c = NULL;
    for (size_t i = 0; i < g->n_chains && !c; i++)
        if (g->chains[i].x.type == x.type && g->chains[i].x.v == x.v)
            c = &g->chains[i];
    if (!c) {
        if (grow((void **)&g->chains, &g->cap_chains, g->n_chains + 1,
                 sizeof(*g->chains)) != 0) {
            perr(g, "out of memory", NULL);
            return -1;
        }
        c = &g->chains[g->n_chains++];
        memset(c, 0, sizeof(*c));
        c->x = x;
    }
    while (c->n < k && !g->failed) {
        int r = rep_rule(g, x, 0, c->n ? c->ids[c->n - 1] : -1);
        if (r < 0 ||
            grow((void **)&c->ids, &c->cap, c->n + 1, sizeof(*c->ids)) != 0) {
            perr(g, "out of memory", NULL);
            return -1;
        }
        c->ids[c->n++] = r;
    }
    return g->failed ? -1 : c->ids[k - 1];
}

static void
parse_item(struct gparse *g, int rule, int depth)
{
    int tmp = new_rule(g, NULL, 0);
    if (tmp < 0 || parse_prim(g, tmp, depth) != 0)
        return;
    g->r[tmp].defined = 1;
    char op = g->p < g->end ? *g->p : 0;
    if (op != '?' && op != '*' && op != '+' && op != '{') {
        append_elems(g, rule, g->r[tmp].el, g->r[tmp].n);
        g->r[tmp].n = 0;
        emit(g, tmp, GE_END, 0); /* an unused empty rule, harmless */
        return;
    }
    g->p++;
    struct gelem x = as_unit(g, tmp);
    g->r[tmp].n = 0;
    emit(g, tmp, GE_END, 0);
    if (g->failed)
        return;
    long m = 0, n = -1; /* n < 0: unbounded */
    if (op == '?') {
        n = 1;
    } else if (op == '+') {
        m = 1;
    } else if (op == '{') {
        if (read_uint(g, &m) != 0)
            return;
        n = m;
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            n = -1;
            if (g->p < g->end && *g->p != '}' && read_uint(g, &n) != 0)
                return;
        }
        if (g->p >= g->end || *g->p != '}') {
            perr(g, "expected } after {m,n}", NULL);
            return;
        }
        g->p++;
        if (n >= 0 && n < m) {
            perr(g, "{m,n} with n < m", NULL);
            return;
        }
    }
    for (long i = 0; i < m && !g->failed; i++)
        emit(g, rule, x.type, x.v);
    if (n < 0) {
        int r = rep_rule(g, x, 1, -1);
        if (r >= 0)
            emit(g, rule, GE_REF, (uint32_t)r);
        return;
    }
    /* n - m optional copies, nested: O_k ::= x O_{k-1} | "" */
    if (n > m) {
        int o = opt_chain(g, x, (size_t)(n - m));
        if (o >= 0)
            emit(g, rule, GE_REF, (uint32_t)o);
    }
}

/* Is the text at p `name ::=`? */
static int
at_rule_head(const struct gparse *g)
{
    size_t nl = name_len(g->p, g->end);
    if (!nl)
        return 0;
    const char *q = g->p + nl;
    while (q < g->end && (*q == ' ' || *q == '\t'))
        q++;
    return g->end - q >= 3 && !memcmp(q, "::=", 3);
}

static void
parse_alts(struct gparse *g, int rule, int depth)
{
    if (depth > 64) {
        perr(g, "groups nested too deeply", NULL);
        return;
    }
    for (;;) {
        skip_ws(g);
        if (g->failed)
            return;
        if (g->p >= g->end || *g->p == ')' || (depth == 0 && at_rule_head(g))) {
            emit(g, rule, GE_END, 0);
            return;
        }
        if (*g->p == '|') {
            g->p++;
            emit(g, rule, GE_ALT, 0);
            continue;
        }
        parse_item(g, rule, depth);
    }
}

static void
gparse_cleanup(struct gparse *g)
{
    for (size_t i = 0; i < g->n_r; i++) {
        free(g->r[i].name);
        free(g->r[i].el);
    }
    free(g->r);
    free(g->sets);
    for (size_t i = 0; i < g->n_chains; i++)
        free(g->chains[i].ids);
    free(g->chains);
}

void
le_grammar_free(struct le_grammar *gr)
{
    if (!gr)
        return;
    free(gr->el);
    free(gr->sets);
    free(gr->alt);
    free(gr->alt_off);
    free(gr);
}

static enum le_status
flatten(struct gparse *g, uint32_t root, struct le_grammar **out)
{
    struct le_grammar *gr = calloc(1, sizeof(*gr));
    if (!gr)
        return LE_ENOMEM;
    size_t n_el = 0, n_alt = 0;
    for (size_t i = 0; i < g->n_r; i++) {
        n_el += g->r[i].n;
        for (size_t k = 0; k < g->r[i].n; k++)
            n_alt += g->r[i].el[k].type == GE_ALT ||
                     g->r[i].el[k].type == GE_END;
    }
    uint32_t *start = calloc(g->n_r + 1, sizeof(*start));
    gr->el = malloc((n_el + 1) * sizeof(*gr->el));
    gr->alt = malloc((n_alt + 1) * sizeof(*gr->alt));
    gr->alt_off = calloc(g->n_r + 1, sizeof(*gr->alt_off));
    gr->sets = malloc((g->n_sets + 1) * sizeof(*gr->sets));
    if (!start || !gr->el || !gr->alt || !gr->alt_off || !gr->sets) {
        free(start);
        le_grammar_free(gr);
        return LE_ENOMEM;
    }
    uint32_t pos = 0, na = 0;
    for (size_t i = 0; i < g->n_r; i++) {
        start[i] = pos;
        if (g->r[i].n)
            memcpy(gr->el + pos, g->r[i].el, g->r[i].n * sizeof(*gr->el));
        pos += (uint32_t)g->r[i].n;
    }
    for (size_t i = 0; i < g->n_r; i++) {
        gr->alt_off[i] = na;
        uint32_t a = start[i];
        gr->alt[na++] = a;
        for (uint32_t k = start[i]; k < start[i] + g->r[i].n; k++)
            if (gr->el[k].type == GE_ALT)
                gr->alt[na++] = k + 1;
    }
    gr->alt_off[g->n_r] = na;
    free(start);
    if (g->n_sets)
        memcpy(gr->sets, g->sets, g->n_sets * sizeof(*gr->sets));
    gr->n_el = pos;
    gr->n_sets = (uint32_t)g->n_sets;
    gr->n_rules = (uint32_t)g->n_r;
    gr->root = root;
    *out = gr;
    return LE_OK;
}

enum le_status
le_grammar_parse(const char *text, size_t len, const char *root,
                 struct le_grammar **out, char *err, size_t errlen)
{
    struct gparse g;
    memset(&g, 0, sizeof(g));
    g.p = text;
    g.end = text + len;
    g.err = err;
    g.errlen = errlen;
    g.line = 1;
    if (!text || !out) {
        perr(&g, "no grammar text", NULL);
        return LE_EINVAL;
    }
    for (;;) {
        skip_ws(&g);
        if (g.failed || g.p >= g.end)
            break;
        if (!at_rule_head(&g)) {
            perr(&g, "expected `name ::=`", NULL);
            break;
        }
        size_t nl = name_len(g.p, g.end);
        int r = rule_by_name(&g, g.p, nl);
        if (r < 0)
            break;
        if (g.r[r].defined) {
            perr(&g, "rule defined twice:", g.r[r].name);
            break;
        }
        g.r[r].defined = 1;
        g.p += nl;
        skip_ws(&g);
        g.p += 3; /* ::= */
        parse_alts(&g, r, 0);
    }
    int root_id = -1;
    for (size_t i = 0; !g.failed && i < g.n_r; i++) {
        if (!g.r[i].defined)
            perr(&g, "undefined rule", g.r[i].name);
        if (g.r[i].name && !strcmp(g.r[i].name, root ? root : "root"))
            root_id = (int)i;
    }
    if (!g.failed && root_id < 0)
        perr(&g, "no rule named", root ? root : "root");
    enum le_status st = LE_EINVAL;
    if (!g.failed) {
        st = flatten(&g, (uint32_t)root_id, out);
        if (st != LE_OK && err && errlen)
            snprintf(err, errlen, "grammar: out of memory");
    }
    gparse_cleanup(&g);
    return st;
}

/* ------------------------------------------------------------------ */
/* Stack sets                                                           */

/*
 * A set is stored as a run of uint32 in a growing pool: for each stack
 * its length then its positions (bottom first).  `struct gset` names a run.
 */
struct gpool {
    uint32_t *a;
    size_t n, cap;
    int bad; /* out of memory or a bound was passed */
    size_t work; /* expand() calls since the operation began */
};

struct gset {
    size_t off, len; /* words in the pool */
    uint32_t n_stacks;
};

static int
pool_push(struct gpool *p, const uint32_t *w, size_t n)
{
    if (p->bad)
        return -1;
    if (n == 0)
        return 0;
    if (grow((void **)&p->a, &p->cap, p->n + n, sizeof(*p->a)) != 0) {
        p->bad = 1;
        return -1;
    }
    memcpy(p->a + p->n, w, n * sizeof(*w));
    p->n += n;
    return 0;
}

static int
is_end(const struct le_grammar *gr, uint32_t pos)
{
    uint8_t t = gr->el[pos].type;
    return t == GE_END || t == GE_ALT;
}

/* Appends stack st[0..n) to the set being built at *out (unless already
 * there) after expanding rule references at its top. */
static void
expand(const struct le_grammar *gr, struct gpool *p, struct gset *out,
       const uint32_t *st, uint32_t n, int depth)
{
    if (p->bad)
        return;
    if (depth > G_MAX_DEPTH || n > G_MAX_DEPTH || ++p->work > G_MAX_EXPAND) {
        p->bad = 2;
        return;
    }
    uint32_t buf[G_MAX_DEPTH + 2];
    if (n > 0) {
        uint32_t top = st[n - 1];
        uint8_t t = gr->el[top].type;
        if (t == GE_END || t == GE_ALT) {
            expand(gr, p, out, st, n - 1, depth + 1); /* alternative done */
            return;
        }
        if (t == GE_REF) {
            uint32_t r = gr->el[top].v;
            memcpy(buf, st, (n - 1) * sizeof(*st));
            uint32_t m = n - 1;
            if (!is_end(gr, top + 1))
                buf[m++] = top + 1;
            for (uint32_t a = gr->alt_off[r]; a < gr->alt_off[r + 1]; a++) {
                buf[m] = gr->alt[a];
                expand(gr, p, out, buf, m + 1, depth + 1);
            }
            return;
        }
    }
    /* top is CHARS or FREE, or the stack is empty: a stack of the set */
    const uint32_t *w = out->n_stacks ? p->a + out->off : NULL;
    size_t i = 0;
    for (uint32_t k = 0; k < out->n_stacks; k++) {
        uint32_t l = w[i];
        if (l == n && !memcmp(w + i + 1, st, n * sizeof(*st)))
            return; /* already there */
        i += 1 + l;
    }
    if (out->n_stacks >= G_MAX_STACKS) {
        p->bad = 2;
        return;
    }
    uint32_t nn = n;
    if (pool_push(p, &nn, 1) != 0 || pool_push(p, st, n) != 0)
        return;
    out->len += 1 + n;
    out->n_stacks++;
}

static int
set_has(const uint64_t s[4], unsigned b)
{
    return (int)((s[b >> 6] >> (b & 63)) & 1);
}

/* The set reached from `in` (in the pool) by byte b, appended to the
 * pool; n_stacks 0 when b is rejected. */
static struct gset
advance(const struct le_grammar *gr, struct gpool *p, struct gset in,
        unsigned char b)
{
    struct gset out = {p->n, 0, 0};
    size_t i = in.off;
    uint32_t buf[G_MAX_DEPTH + 2];
    for (uint32_t k = 0; k < in.n_stacks && !p->bad; k++) {
        uint32_t l = p->a[i];
        if (l == 0) {
            i += 1;
            continue; /* complete: nothing more to match */
        }
        uint32_t top = p->a[i + l];
        const struct gelem *e = &gr->el[top];
        if (e->type == GE_FREE) {
            memcpy(buf, p->a + i + 1, l * sizeof(*buf));
            expand(gr, p, &out, buf, l, 0); /* FREE stays */
        } else if (e->type == GE_CHARS && set_has(gr->sets[e->v], b)) {
            memcpy(buf, p->a + i + 1, l * sizeof(*buf));
            buf[l - 1] = top + 1; /* next element; END/ALT pops */
            expand(gr, p, &out, buf, l, 0);
        }
        i += 1 + l;
    }
    return out;
}

static int
set_complete(const struct gpool *p, struct gset s)
{
    size_t i = s.off;
    for (uint32_t k = 0; k < s.n_stacks; k++) {
        uint32_t l = p->a[i];
        if (l == 0)
            return 1;
        i += 1 + l;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Grammar state                                                        */

/*
 * The mask is a function of the stack set (and the trie) alone, and
 * generation revisits sets: inside an unbounded string every character
 * leaves the same set.  A few recent masks are kept, keyed by the set's
 * words, so such a state costs a copy instead of a walk.
 */
#define G_MASK_CACHE 4

struct gmask {
    const struct le_token_trie *trie; /* NULL: empty slot */
    uint32_t *key;                    /* the set's words */
    size_t key_len;
    uint64_t *mask;                   /* [trie->n_words] */
    size_t n_allowed;
};

struct le_gstate {
    const struct le_grammar *gr;
    struct gpool cur;  /* the current set at offset 0 */
    struct gset set;
    struct gpool tmp;  /* scratch for advances and the mask walk */
    struct gmask cache[G_MASK_CACHE];
    unsigned next_slot;
};

static int
state_is_free(const struct le_gstate *gs, const struct gpool *p,
              struct gset s)
{
    (void)gs;
    size_t i = s.off;
    for (uint32_t k = 0; k < s.n_stacks; k++) {
        uint32_t l = p->a[i];
        if (l && gs->gr->el[p->a[i + l]].type == GE_FREE)
            return 1;
        i += 1 + l;
    }
    return 0;
}

enum le_status
le_gstate_new(const struct le_grammar *gr, struct le_gstate **out)
{
    if (!gr || !out)
        return LE_EINVAL;
    struct le_gstate *gs = calloc(1, sizeof(*gs));
    if (!gs)
        return LE_ENOMEM;
    gs->gr = gr;
    /* the start set: each alternative of the root, expanded */
    for (uint32_t a = gr->alt_off[gr->root]; a < gr->alt_off[gr->root + 1];
         a++) {
        uint32_t pos = gr->alt[a];
        expand(gr, &gs->cur, &gs->set, &pos, 1, 0);
    }
    if (gs->cur.bad) {
        enum le_status st = gs->cur.bad == 1 ? LE_ENOMEM : LE_EINVAL;
        le_gstate_free(gs);
        return st;
    }
    *out = gs;
    return LE_OK;
}

void
le_gstate_free(struct le_gstate *gs)
{
    if (!gs)
        return;
    free(gs->cur.a);
    free(gs->tmp.a);
    for (int i = 0; i < G_MASK_CACHE; i++) {
        free(gs->cache[i].key);
        free(gs->cache[i].mask);
    }
    free(gs);
}

/* Runs bytes from the current set in gs->tmp; returns the final set (in
 * tmp) or n_stacks 0. */
static struct gset
run_bytes(struct le_gstate *gs, const char *bytes, size_t n)
{
    gs->tmp.n = 0;
    gs->tmp.bad = 0;
    gs->tmp.work = 0;
    struct gset s = {0, gs->set.len, gs->set.n_stacks};
    if (pool_push(&gs->tmp, gs->cur.a, gs->set.len) != 0) {
        s.n_stacks = 0;
        return s;
    }
    for (size_t i = 0; i < n && s.n_stacks; i++) {
        size_t mark = gs->tmp.n;
        struct gset nx = advance(gs->gr, &gs->tmp, s, (unsigned char)bytes[i]);
        if (gs->tmp.bad) {
            nx.n_stacks = 0;
            s = nx;
            break;
        }
        /* keep only the newest set: slide it down to the front */
        memmove(gs->tmp.a, gs->tmp.a + mark, nx.len * sizeof(uint32_t));
        gs->tmp.n = nx.len;
        nx.off = 0;
        s = nx;
    }
    return s;
}

int
le_gstate_accepts(struct le_gstate *gs, const char *bytes, size_t n)
{
    return run_bytes(gs, bytes, n).n_stacks > 0;
}

int
le_gstate_accept(struct le_gstate *gs, const char *bytes, size_t n)
{
    struct gset s = run_bytes(gs, bytes, n);
    if (!s.n_stacks)
        return 0;
    /* swap: tmp holds the new set at offset 0 */
    struct gpool t = gs->cur;
    gs->cur = gs->tmp;
    gs->tmp = t;
    gs->set = s;
    return 1;
}

int
le_gstate_complete(const struct le_gstate *gs)
{
    return set_complete(&gs->cur, gs->set) || le_gstate_is_free(gs);
}

int
le_gstate_finished(const struct le_gstate *gs)
{
    /* complete, and every stack is empty: no byte can follow */
    size_t i = 0;
    for (uint32_t k = 0; k < gs->set.n_stacks; k++) {
        if (gs->cur.a[i] != 0)
            return 0;
        i += 1 + gs->cur.a[i];
    }
    return gs->set.n_stacks > 0;
}

int
le_gstate_is_free(const struct le_gstate *gs)
{
    return state_is_free(gs, &gs->cur, gs->set);
}

/* ------------------------------------------------------------------ */
/* Token trie and the mask                                              */

struct tnode {
    int32_t child;   /* first child, -1 none */
    int32_t sibling; /* next sibling, -1 none */
    int32_t tok;     /* first token ending here, -1 none (chain in next) */
    unsigned char b;
};

struct le_token_trie {
    struct tnode *nd;
    size_t n, cap;
    int32_t *next_tok; /* [n_tokens] chain of tokens ending at one node */
    int32_t n_tokens;
    size_t n_words;    /* mask words: (n_tokens + 63) / 64 */
    uint64_t *eog;     /* [n_words] end-of-generation tokens */
};

static int32_t
trie_child(struct le_token_trie *t, int32_t at, unsigned char b, int make)
{
    int32_t prev = -1;
    for (int32_t c = t->nd[at].child; c >= 0; c = t->nd[c].sibling) {
        if (t->nd[c].b == b)
            return c;
        prev = c;
    }
    if (!make)
        return -1;
    if (grow((void **)&t->nd, &t->cap, t->n + 1, sizeof(*t->nd)) != 0)
        return -2;
    int32_t id = (int32_t)t->n++;
    t->nd[id].child = t->nd[id].sibling = t->nd[id].tok = -1;
    t->nd[id].b = b;
    if (prev < 0)
        t->nd[at].child = id;
    else
        t->nd[prev].sibling = id;
    return id;
}

void
le_token_trie_free(struct le_token_trie *t)
{
    if (!t)
        return;
    free(t->nd);
    free(t->next_tok);
    free(t->eog);
    free(t);
}

enum le_status
le_token_trie_build(const char *const *pieces, const size_t *lens,
                    const uint8_t *eog, int32_t n_tokens,
                    struct le_token_trie **out)
{
    if (n_tokens <= 0 || !pieces || !lens || !out)
        return LE_EINVAL;
    struct le_token_trie *t = calloc(1, sizeof(*t));
    if (!t)
        return LE_ENOMEM;
    t->n_tokens = n_tokens;
    t->n_words = ((size_t)n_tokens + 63) / 64;
    t->next_tok = malloc((size_t)n_tokens * sizeof(*t->next_tok));
    t->eog = calloc(t->n_words, sizeof(*t->eog));
    if (!t->next_tok || !t->eog ||
        grow((void **)&t->nd, &t->cap, 1, sizeof(*t->nd)) != 0) {
        le_token_trie_free(t);
        return LE_ENOMEM;
    }
    t->n = 1;
    t->nd[0].child = t->nd[0].sibling = t->nd[0].tok = -1;
    /* insert in reverse so each node's chain lists ids ascending */
    for (int32_t id = n_tokens - 1; id >= 0; id--) {
        t->next_tok[id] = -1;
        if (eog && eog[id])
            t->eog[id >> 6] |= 1ULL << (id & 63);
        if (!lens[id] || (eog && eog[id]))
            continue; /* no text: never allowed as text */
        int32_t at = 0;
        for (size_t k = 0; k < lens[id]; k++) {
            at = trie_child(t, at, (unsigned char)pieces[id][k], 1);
            if (at < 0) {
                le_token_trie_free(t);
                return LE_ENOMEM;
            }
        }
        t->next_tok[id] = t->nd[at].tok;
        t->nd[at].tok = id;
    }
    *out = t;
    return LE_OK;
}

enum le_status
le_token_trie_new(const struct le_model *m, struct le_token_trie **out)
{
    int32_t n = le_model_n_vocab(m);
    if (n <= 0)
        return LE_EINVAL;
    char **pieces = calloc((size_t)n, sizeof(*pieces));
    size_t *lens = calloc((size_t)n, sizeof(*lens));
    uint8_t *eog = calloc((size_t)n, 1);
    enum le_status st = LE_ENOMEM;
    if (!pieces || !lens || !eog)
        goto out;
    for (int32_t id = 0; id < n; id++) {
        char small[64];
        size_t l = le_model_token_to_piece(m, id, 0, small, sizeof(small));
        pieces[id] = malloc(l ? l : 1);
        if (!pieces[id])
            goto out;
        if (l <= sizeof(small))
            memcpy(pieces[id], small, l);
        else
            le_model_token_to_piece(m, id, 0, pieces[id], l);
        lens[id] = l;
        eog[id] = (uint8_t)(le_model_is_eog(m, id) != 0);
    }
    st = le_token_trie_build((const char *const *)pieces, lens, eog, n, out);
out:
    for (int32_t id = 0; pieces && id < n; id++)
        free(pieces[id]);
    free(pieces);
    free(lens);
    free(eog);
    return st;
}

size_t
le_token_trie_words(const struct le_token_trie *t)
{
    return t->n_words;
}

static void
mark_tokens(const struct le_token_trie *t, int32_t node, uint64_t *mask)
{
    for (int32_t id = t->nd[node].tok; id >= 0; id = t->next_tok[id])
        mask[id >> 6] |= 1ULL << (id & 63);
}

static void
walk(const struct le_grammar *gr, struct gpool *p,
     const struct le_token_trie *t, int32_t node, struct gset s,
     uint64_t *mask, int depth)
{
    for (int32_t c = t->nd[node].child; c >= 0 && !p->bad;
         c = t->nd[c].sibling) {
        size_t mark = p->n;
        struct gset nx = advance(gr, p, s, t->nd[c].b);
        if (nx.n_stacks) {
            mark_tokens(t, c, mask);
            if (t->nd[c].child >= 0 && depth < 4096)
                walk(gr, p, t, c, nx, mask, depth + 1);
        }
        p->n = mark;
    }
}

static void
mark_all(const struct le_token_trie *t, int32_t node, uint64_t *mask)
{
    for (int32_t c = t->nd[node].child; c >= 0; c = t->nd[c].sibling) {
        mark_tokens(t, c, mask);
        mark_all(t, c, mask);
    }
}

static enum le_status
compute_mask(struct le_gstate *gs, const struct le_token_trie *t,
             uint64_t *mask, size_t *n_allowed)
{
    memset(mask, 0, t->n_words * sizeof(*mask));
    if (le_gstate_is_free(gs)) {
        mark_all(t, 0, mask);
    } else {
        gs->tmp.n = 0;
        gs->tmp.bad = 0;
        gs->tmp.work = 0;
        if (pool_push(&gs->tmp, gs->cur.a, gs->set.len) != 0)
            return LE_ENOMEM;
        struct gset s = {0, gs->set.len, gs->set.n_stacks};
        walk(gs->gr, &gs->tmp, t, 0, s, mask, 0);
        if (gs->tmp.bad)
            return gs->tmp.bad == 1 ? LE_ENOMEM : LE_EINVAL;
    }
    if (le_gstate_complete(gs))
        for (size_t w = 0; w < t->n_words; w++)
            mask[w] |= t->eog[w];
    size_t k = 0;
    for (size_t w = 0; w < t->n_words; w++)
        for (uint64_t x = mask[w]; x; x &= x - 1)
            k++;
    *n_allowed = k;
    return LE_OK;
}

enum le_status
le_gstate_mask(struct le_gstate *gs, const struct le_token_trie *t,
               uint64_t *mask, size_t *n_allowed)
{
    size_t words = t->n_words, klen = gs->set.len, k = 0;
    for (int i = 0; i < G_MASK_CACHE; i++) {
        struct gmask *c = &gs->cache[i];
        if (c->trie == t && c->key_len == klen &&
            !memcmp(c->key, gs->cur.a, klen * sizeof(*c->key))) {
            memcpy(mask, c->mask, words * sizeof(*mask));
            if (n_allowed)
                *n_allowed = c->n_allowed;
            return LE_OK;
        }
    }
    enum le_status st = compute_mask(gs, t, mask, &k);
    if (st != LE_OK)
        return st;
    if (n_allowed)
        *n_allowed = k;
    /* remember it (a failed allocation only skips the cache) */
    struct gmask *c = &gs->cache[gs->next_slot++ % G_MASK_CACHE];
    uint32_t *key = malloc(klen * sizeof(*key) + 1);
    uint64_t *m = c->trie == t ? c->mask : malloc(words * sizeof(*m));
    if (!key || !m) {
        free(key);
        if (m != c->mask)
            free(m);
        return LE_OK;
    }
    if (m != c->mask)
        free(c->mask);
    free(c->key);
    memcpy(key, gs->cur.a, klen * sizeof(*key));
    memcpy(m, mask, words * sizeof(*m));
    c->trie = t;
    c->key = key;
    c->key_len = klen;
    c->mask = m;
    c->n_allowed = k;
    return LE_OK;
}
