/*
 * test_think: a reasoning model's answer split into reasoning and content
 * (providers/think.c) gives the same parts whether the text arrives whole,
 * a byte at a time, or cut anywhere in two: markers cut across pieces,
 * near-markers ("<</think>", "</thi" at the end, "<thinking>"), blanks
 * around the markers, and the modes (3: harmony's channels; 6:
 * Mistral's [THINK] markers).
 */
#include <stdio.h>
#include <string.h>

#include "../providers/providers_int.h"
#include "harness.h"

struct tcase {
    int mode;
    const char *in, *r, *c;
};

static const struct tcase cases[] = {
    {2, "abc</think>\n\nXYZ", "abc", "XYZ"},
    {2, "\nabc\n</think>\n\nXYZ", "abc\n", "XYZ"},
    {2, "a<b</th</think>C", "a<b</th", "C"},
    {2, "a<</think>x</think>y", "a<", "x</think>y"},
    {2, "no end</thi", "no end</thi", ""},
    {2, "</think>", "", ""},
    {2, "", "", ""},
    {1, "<think>\nR\n</think>\n\nC", "R\n", "C"},
    {1, "\n <think>R</think>C", "R", "C"},
    {1, "  Hello", "", "  Hello"},
    {1, "<thinking> x", "", "<thinking> x"},
    {1, "<thi", "", "<thi"},
    {1, "Hi <think>x</think>", "", "Hi <think>x</think>"},
    {1, "<think>caf\xc3\xa9 </think>\xc3\xa9t\xc3\xa9", "caf\xc3\xa9 ",
     "\xc3\xa9t\xc3\xa9"},
    {0, "<think>x</think>y", "", "<think>x</think>y"},
    /* magistral: Mistral's markers, the answer right after [/THINK] */
    {6, "[THINK]R [a] [/TH[/THINK]C", "R [a] [/TH", "C"},
    {6, "[THINK]x[[/THINK]", "x[", ""},
    {6, "\n[THINK]R[/THINK]\n\nC [THINK]", "R", "C [THINK]"},
    {6, "Plain [THINK]", "", "Plain [THINK]"},
    {6, "[THIN", "", "[THIN"},
    {6, "<think>x</think>y", "", "<think>x</think>y"},
    {6, "[THINK]cut [/THI", "cut [/THI", ""},
    {1, "<think>x[/THINK]y", "x[/THINK]y", ""},
    /* harmony (gpt-oss): analysis is the reasoning, final the content */
    {3,
     "<|channel|>analysis<|message|>Think <b>.<|end|><|start|>assistant"
     "<|channel|>final<|message|>Answer <|en d.",
     "Think <b>.", "Answer <|en d."},
    {3, "<|channel|>final<|message|>Only<|end", "", "Only<|end"},
    {3, "Plain text", "", "Plain text"},
    {3, "<|channel|>analysis<|message|>cut", "cut", ""},
    {3, "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|chan", "R",
     ""},
    {3,
     "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>"
     "commentary<|message|>pre<|end|><|start|>assistant<|channel|>analysis"
     "<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c",
     "ab", "prec"},
    {3, "<not a header, longer than the sixty-four bytes held for one....>",
     "", "<not a header, longer than the sixty-four bytes held for one....>"},
};

/* in split at the offsets cuts[0..n) (increasing) */
static void
run(const struct tcase *t, const size_t *cuts, size_t n, struct gx_buf *r,
    struct gx_buf *c)
{
    struct pv_think k;
    pv_think_init(&k, t->mode);
    size_t len = strlen(t->in), from = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t to = i < n ? cuts[i] : len;
        pv_think_feed(&k, t->in + from, to - from, r, c, i == n);
        from = to;
    }
}

static int
same(const struct gx_buf *b, const char *want)
{
    size_t n = strlen(want);
    return b->len == n && (!n || !memcmp(b->data, want, n));
}

static void
test_splits(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tcase *t = &cases[i];
        size_t len = strlen(t->in), cuts[256];
        int bad = 0;
        /* whole; every single cut; every byte its own piece */
        for (size_t a = 0; a <= len + 1; a++) {
            struct gx_buf r, c;
            gx_buf_init(&r, 0);
            gx_buf_init(&c, 0);
            size_t n = 0;
            if (a == len + 1)
                for (size_t k = 1; k < len; k++)
                    cuts[n++] = k;
            else if (a > 0 && a < len)
                cuts[n++] = a;
            run(t, cuts, n, &r, &c);
            if (!same(&r, t->r) || !same(&c, t->c)) {
                fprintf(stderr, "case %zu (%s) split %zu: r '%.*s' c '%.*s'\n",
                        i, t->in, a, (int)r.len, r.data ? r.data : "",
                        (int)c.len, c.data ? c.data : "");
                bad = 1;
            }
            gx_buf_cleanup(&r);
            gx_buf_cleanup(&c);
        }
        T_CHECK(!bad);
    }
}

/* the state alone (no buffers) moves as with them: what the token
 * counter reads */
static void
test_state_only(void)
{
    struct pv_think k;
    pv_think_init(&k, 1);
    T_EQ_INT(k.state, 0);
    pv_think_feed(&k, "<think>", 7, NULL, NULL, 0);
    T_EQ_INT(k.state, 4);
    pv_think_feed(&k, "x</think>", 9, NULL, NULL, 0);
    T_EQ_INT(k.state, 2);
    pv_think_feed(&k, "\n\nA", 3, NULL, NULL, 0);
    T_EQ_INT(k.state, 3);
    pv_think_init(&k, 0);
    T_EQ_INT(k.state, 3);
    pv_think_init(&k, 2);
    T_EQ_INT(k.state, 4);
    pv_think_init(&k, 3); /* harmony: header, analysis, header, final */
    T_EQ_INT(k.state, 0);
    pv_think_feed(&k, "<|channel|>analysis", 19, NULL, NULL, 0);
    T_EQ_INT(k.state, 0);
    pv_think_feed(&k, "<|message|>", 11, NULL, NULL, 0);
    T_EQ_INT(k.state, 1);
    pv_think_feed(&k, "x<|end|>", 8, NULL, NULL, 0);
    T_EQ_INT(k.state, 0);
    pv_think_feed(&k, "<|start|>assistant<|channel|>final<|message|>", 45,
                  NULL, NULL, 0);
    T_EQ_INT(k.state, 3);
}

int
main(void)
{
    T_RUN(test_splits);
    T_RUN(test_state_only);
    return T_END();
}
