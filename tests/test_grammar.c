/*
 * test_grammar: the grammar engine (local_engine/grammar.c): parse errors,
 * sentences accepted and rejected, bounded repetition, %free, bounds that
 * turn left recursion into an error, the token mask against a brute-force
 * check of every token over random walks, and constrained generation on
 * stories260K and on random-weight models (every finished output is a
 * sentence of the grammar).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../local_engine/le_int.h"
#include "harness.h"
#include "lib/le_fixture.h"

static struct le_grammar *
compile(const char *text)
{
    struct le_grammar *g = NULL;
    char err[256] = "";
    if (le_grammar_parse(text, strlen(text), NULL, &g, err, sizeof(err)) !=
        LE_OK)
        fprintf(stderr, "grammar error: %s\n", err);
    return g;
}

/* 1 if s is a whole sentence of g. */
static int
sentence(const struct le_grammar *g, const char *s)
{
    struct le_gstate *gs = NULL;
    if (le_gstate_new(g, &gs) != LE_OK)
        return -1;
    int ok = le_gstate_accept(gs, s, strlen(s)) && le_gstate_complete(gs);
    le_gstate_free(gs);
    return ok;
}

static void
test_parse_errors(void)
{
    const char *bad[] = {
        "root ::= foo",           /* undefined rule */
        "root ::= \"abc",         /* unterminated literal */
        "other ::= \"a\"",        /* no root */
        "root ::= [a-",           /* unterminated set */
        "root ::= \"a\" root ::= \"b\"", /* defined twice */
        "root ::= (\"a\"",        /* missing ) */
        "root ::= \"a\"{3,1}",    /* n < m */
        "root ::= \"a\"{99999}",  /* too many */
        "root ::= [z-a]",         /* reversed range */
        "root ::= \"\\x4\"",      /* bad escape */
        "root ::= @",             /* stray character */
        "just text",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct le_grammar *g = NULL;
        char err[256] = "";
        enum le_status st =
            le_grammar_parse(bad[i], strlen(bad[i]), NULL, &g, err,
                             sizeof(err));
        T_EQ_INT(st, LE_EINVAL);
        T_CHECK(g == NULL);
        T_CHECK(strstr(err, "grammar") != NULL);
    }
    char err[256] = "";
    struct le_grammar *g = NULL;
    T_EQ_INT(le_grammar_parse("root ::= x", 10, NULL, &g, err, sizeof(err)),
             LE_EINVAL);
    T_CHECK(strstr(err, "undefined rule x") != NULL);
}

static void
test_sentences(void)
{
    struct le_grammar *g = compile(
        "# a tiny JSON-like language\n"
        "root  ::= \"{\" ws pair ( \",\" ws pair )* \"}\"\n"
        "pair  ::= key ws \":\" ws value\n"
        "key   ::= \"\\\"\" [a-z]{1,3} \"\\\"\"\n"
        "value ::= num | \"true\" | \"null\" | root\n"
        "num   ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"
        "ws    ::= [ ]?\n");
    T_CHECK(g != NULL);
    if (!g)
        return;
    T_EQ_INT(sentence(g, "{\"a\":1}"), 1);
    T_EQ_INT(sentence(g, "{ \"abc\" : -120,\"b\":{\"c\":null}}"), 1);
    T_EQ_INT(sentence(g, "{\"a\":true, \"b\":0}"), 1);
    T_EQ_INT(sentence(g, "{\"abcd\":1}"), 0);  /* key too long */
    T_EQ_INT(sentence(g, "{\"a\":01}"), 0);    /* leading zero */
    T_EQ_INT(sentence(g, "{\"a\":1"), 0);      /* incomplete */
    T_EQ_INT(sentence(g, "{\"a\":1}}"), 0);    /* trailing */
    T_EQ_INT(sentence(g, "{}"), 0);
    T_EQ_INT(sentence(g, "{  \"a\":1}"), 0);   /* at most one space */
    /* accept leaves the state alone on reject; finished only at the end */
    struct le_gstate *gs = NULL;
    T_EQ_INT(le_gstate_new(g, &gs), LE_OK);
    T_EQ_INT(le_gstate_accept(gs, "{\"a\"", 4), 1);
    T_EQ_INT(le_gstate_accept(gs, "x", 1), 0);
    T_EQ_INT(le_gstate_accepts(gs, ":", 1), 1);
    T_EQ_INT(le_gstate_accept(gs, ":1", 2), 1);
    T_EQ_INT(le_gstate_complete(gs), 0);
    T_EQ_INT(le_gstate_finished(gs), 0);
    T_EQ_INT(le_gstate_accept(gs, "}", 1), 1);
    T_EQ_INT(le_gstate_complete(gs), 1);
    T_EQ_INT(le_gstate_finished(gs), 1);
    T_EQ_INT(le_gstate_accepts(gs, " ", 1), 0);
    le_gstate_free(gs);
    le_grammar_free(g);

    /* complete but not finished: more may follow */
    g = compile("root ::= \"a\"+");
    T_CHECK(g != NULL);
    T_EQ_INT(le_gstate_new(g, &gs), LE_OK);
    T_EQ_INT(le_gstate_accept(gs, "aaa", 3), 1);
    T_EQ_INT(le_gstate_complete(gs), 1);
    T_EQ_INT(le_gstate_finished(gs), 0);
    le_gstate_free(gs);
    le_grammar_free(g);
}

/* A rule of many empty alternatives under a repetition expanded
 * exponentially (fuzz_grammar: minutes for one state); it is refused as too
 * ambiguous now, and a modest one still works. */
static void
test_runaway_expansion(void)
{
    char text[256];
    int k = snprintf(text, sizeof(text), "root ::= x{2,5} \"a\"\nx ::= ");
    for (int i = 0; i < 40; i++)
        text[k++] = '|';
    snprintf(text + k, sizeof(text) - (size_t)k, " [^a-c]\n");
    struct le_grammar *g = compile(text);
    T_CHECK(g != NULL);
    if (!g)
        return;
    struct le_gstate *gs = NULL;
    T_EQ_INT(le_gstate_new(g, &gs), LE_EINVAL);
    le_gstate_free(gs);
    le_grammar_free(g);
    g = compile("root ::= x{2,3} \"a\"\nx ::= | | [^a-c]\n");
    T_CHECK(g != NULL);
    if (!g)
        return;
    T_EQ_INT(sentence(g, "zza"), 1);
    T_EQ_INT(sentence(g, "a"), 1);
    T_EQ_INT(sentence(g, "zzzza"), 0);
    le_grammar_free(g);
}

static void
test_repeat_bounds(void)
{
    struct le_grammar *g = compile("root ::= \"<\" [ab]{2,4} \">\" x{0,2}\n"
                                   "x ::= \"!\"\n");
    T_CHECK(g != NULL);
    if (!g)
        return;
    T_EQ_INT(sentence(g, "<a>"), 0);
    T_EQ_INT(sentence(g, "<ab>"), 1);
    T_EQ_INT(sentence(g, "<abab>"), 1);
    T_EQ_INT(sentence(g, "<ababa>"), 0);
    T_EQ_INT(sentence(g, "<ab>!!"), 1);
    T_EQ_INT(sentence(g, "<ab>!!!"), 0);
    le_grammar_free(g);
    /* escapes and negated sets, bytes past ASCII */
    g = compile("root ::= [^\"\\\\\\x00-\\x1f]* \"\\xc3\\xa9\\n\"");
    T_CHECK(g != NULL);
    if (!g)
        return;
    T_EQ_INT(sentence(g, "caf\xc3\xa9\n"), 1);
    T_EQ_INT(sentence(g, "a\"b\xc3\xa9\n"), 0);
    T_EQ_INT(sentence(g, "a\\\xc3\xa9\n"), 0);
    le_grammar_free(g);
}

static void
test_free_and_bounds(void)
{
    struct le_grammar *g = compile("root ::= \"{\" [a-z] \"}\" | [^{] %free");
    T_CHECK(g != NULL);
    if (!g)
        return;
    struct le_gstate *gs = NULL;
    T_EQ_INT(le_gstate_new(g, &gs), LE_OK);
    T_EQ_INT(le_gstate_is_free(gs), 0);
    T_EQ_INT(le_gstate_accept(gs, "hello {not json", 15), 1);
    T_EQ_INT(le_gstate_is_free(gs), 1);
    T_EQ_INT(le_gstate_complete(gs), 1);
    T_EQ_INT(le_gstate_finished(gs), 0);
    le_gstate_free(gs);
    T_EQ_INT(sentence(g, "{q}"), 1);
    T_EQ_INT(sentence(g, "{qq}"), 0);
    le_grammar_free(g);
    /* too many rules: an error, not gigabytes */
    char big[2048] = "root ::=";
    for (int i = 0; i < 30; i++)
        snprintf(big + strlen(big), sizeof(big) - strlen(big),
                 " ( \"%c\" \"%c\" ){0,10000}", 'a' + i % 26, 'A' + i % 26);
    struct le_grammar *bg = NULL;
    char err[256] = "";
    T_EQ_INT(le_grammar_parse(big, strlen(big), NULL, &bg, err, sizeof(err)),
             LE_EINVAL);
    T_CHECK(strstr(err, "too large") != NULL);
    /* the same bounded element shares one chain however often it is used */
    char many[8192] = "root ::=";
    for (int i = 0; i < 200; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many),
                 " \",\" c{0,%d}", 4000 + i);
    snprintf(many + strlen(many), sizeof(many) - strlen(many),
             "\nc ::= [a-z]\n");
    T_EQ_INT(le_grammar_parse(many, strlen(many), NULL, &bg, err,
                              sizeof(err)),
             LE_OK);
    if (bg) {
        T_EQ_INT(sentence(bg, ",abc,,x"), 0); /* 3 commas: too few */
        char ok[1024] = "";
        for (int i = 0; i < 200; i++)
            strcat(ok, i % 3 ? "," : ",xy");
        T_EQ_INT(sentence(bg, ok), 1);
        le_grammar_free(bg);
    }
    /* left recursion: an error at the start, not a hang or a crash */
    g = compile("root ::= root \"a\" | \"b\"");
    T_CHECK(g != NULL);
    if (g) {
        gs = NULL;
        T_EQ_INT(le_gstate_new(g, &gs), LE_EINVAL);
        T_CHECK(gs == NULL);
        le_grammar_free(g);
    }
}

/* ---- masks against brute force -------------------------------------- */

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define NV 700

static void
check_masks(const char *grammar_text, int walks)
{
    static char pieces_buf[NV][8];
    const char *pieces[NV];
    size_t lens[NV];
    uint8_t eog[NV] = {0};
    const char alpha[] = "{}[]\":, abcxyz019-.tn\\e";
    for (int i = 0; i < NV; i++) {
        size_t l = i < 3 ? 0 : i < 30 ? 1 : 1 + rnd() % 6;
        for (size_t k = 0; k < l; k++)
            pieces_buf[i][k] = i >= 3 && i < 30
                                   ? alpha[(i - 3) % (sizeof(alpha) - 1)]
                                   : alpha[rnd() % (sizeof(alpha) - 1)];
        pieces[i] = pieces_buf[i];
        lens[i] = l;
    }
    eog[2] = 1;
    /* every single byte of the alphabet exists, so a walk never sticks */
    struct le_token_trie *t = NULL;
    T_EQ_INT(le_token_trie_build(pieces, lens, eog, NV, &t), LE_OK);
    struct le_grammar *g = compile(grammar_text);
    T_CHECK(g && t);
    if (!g || !t) {
        le_grammar_free(g);
        le_token_trie_free(t);
        return;
    }
    size_t words = le_token_trie_words(t);
    uint64_t *mask = calloc(words, sizeof(*mask));
    int mismatches = 0, finished = 0, steps = 0;
    for (int w = 0; w < walks; w++) {
        struct le_gstate *gs = NULL;
        T_EQ_INT(le_gstate_new(g, &gs), LE_OK);
        char out[4096];
        size_t olen = 0;
        for (int step = 0; step < 200; step++) {
            size_t n_allowed = 0;
            T_EQ_INT(le_gstate_mask(gs, t, mask, &n_allowed), LE_OK);
            int32_t allowed[NV];
            size_t na = 0;
            for (int id = 0; id < NV; id++) {
                int bit = (int)((mask[id >> 6] >> (id & 63)) & 1);
                int brute = eog[id] ? le_gstate_complete(gs)
                                    : lens[id] > 0 &&
                                          le_gstate_accepts(gs, pieces[id],
                                                            lens[id]);
                if (bit != brute)
                    mismatches++;
                if (bit)
                    allowed[na++] = id;
            }
            T_EQ_INT(na, n_allowed);
            steps++;
            if (na == 0)
                break;
            int32_t id = allowed[rnd() % na];
            if (eog[id]) {
                finished++;
                break;
            }
            T_EQ_INT(le_gstate_accept(gs, pieces[id], lens[id]), 1);
            if (olen + lens[id] < sizeof(out)) {
                memcpy(out + olen, pieces[id], lens[id]);
                olen += lens[id];
            }
            if (le_gstate_finished(gs)) {
                finished++;
                break;
            }
        }
        le_gstate_free(gs);
    }
    T_EQ_INT(mismatches, 0);
    T_CHECK(steps > walks);
    T_CHECK(finished > 0);
    free(mask);
    le_grammar_free(g);
    le_token_trie_free(t);
}

static void
test_mask_brute_force(void)
{
    check_masks("root ::= \"{\" ws \"\\\"a\\\"\" ws \":\" ws v ( \",\" ws "
                "\"\\\"b\\\"\" ws \":\" ws v )? \"}\"\n"
                "v ::= \"true\" | \"null\" | \"-\"? [0-9]{1,3} | \"[\" ( v ( "
                "\",\" v ){0,3} )? \"]\" | \"\\\"\" [a-z]{0,5} \"\\\"\"\n"
                "ws ::= [ ]{0,2}\n",
                60);
    check_masks("root ::= [a-z ]* ( \"x\" | \"yz\" )", 40);
    check_masks("root ::= ( \"ab\" | \"a\" [b-c] | \"abc\" )+ \"9\"", 40);
}

/* ---- generation on real and random models ---------------------------- */

static const char *gen_grammar =
    "root ::= \"{\\\"color\\\": \" color \", \\\"n\\\": \" num \", "
    "\\\"name\\\": \\\"\" [a-z ]{0,12} \"\\\"}\"\n"
    "color ::= \"\\\"red\\\"\" | \"\\\"green\\\"\" | \"\\\"blue\\\"\"\n"
    "num ::= \"-\"? [0-9]{1,4}\n";

/* Is s exactly what gen_grammar describes?  (an independent check) */
static int
valid_output(const char *s)
{
    const char *p = s;
    if (strncmp(p, "{\"color\": \"", 11))
        return 0;
    p += 11;
    const char *colors[] = {"red", "green", "blue"};
    int ok = 0;
    for (int i = 0; i < 3 && !ok; i++) {
        size_t l = strlen(colors[i]);
        if (!strncmp(p, colors[i], l) && p[l] == '"') {
            p += l + 1;
            ok = 1;
        }
    }
    if (!ok || strncmp(p, ", \"n\": ", 7))
        return 0;
    p += 7;
    if (*p == '-')
        p++;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (digits < 1 || digits > 4 || strncmp(p, ", \"name\": \"", 11))
        return 0;
    p += 11;
    int letters = 0;
    while ((*p >= 'a' && *p <= 'z') || *p == ' ') {
        p++;
        letters++;
    }
    return letters <= 12 && !strcmp(p, "\"}");
}

static void
generate_many(struct le_model *m, int seeds, float temp, int *n_done)
{
    struct le_grammar *g = compile(gen_grammar);
    struct le_token_trie *t = NULL;
    T_EQ_INT(le_token_trie_new(m, &t), LE_OK);
    struct le_session *s = NULL;
    char err[256];
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    int32_t prompt[64];
    int64_t np = le_model_tokenize(m, "Once upon a time", 16, 1, 0, prompt,
                                   64);
    T_CHECK(np > 0 && np < 64);
    for (int seed = 0; seed < seeds && g && s && t; seed++) {
        struct le_sampling sp;
        le_sampling_default(&sp);
        sp.seed = (uint64_t)seed;
        sp.temperature = temp;
        sp.max_tokens = 120;
        sp.grammar = g;
        sp.trie = seed % 2 ? t : NULL; /* shared, or built per call */
        char out[4096];
        struct le_gen_result r;
        T_EQ_INT(le_fixture_generate(s, prompt, (size_t)np, &sp, out,
                                     sizeof(out), &r),
                 LE_OK);
        T_CHECK(r.finish == LE_FINISH_STOP || r.finish == LE_FINISH_LENGTH);
        if (r.finish == LE_FINISH_STOP) {
            (*n_done)++;
            if (seed == 0 && getenv("GRAMMAR_SHOW"))
                fprintf(stderr, "  %s\n", out);
            if (!valid_output(out)) {
                fprintf(stderr, "invalid output (seed %d): %s\n", seed,
                        out);
                T_CHECK(0);
            }
        }
    }
    le_session_free(s);
    le_token_trie_free(t);
    le_grammar_free(g);
}

static void
test_generate_stories(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (!m)
        return;
    int done = 0;
    generate_many(m, 30, 1.0f, &done);
    generate_many(m, 2, 0.0f, &done); /* greedy shortcut + mask */
    T_CHECK(done >= 16); /* most finish inside 120 tokens */
    fprintf(stderr, "  stories260K: %d of 32 ended by the grammar\n", done);
    le_model_free(m);
}

static void
test_generate_random_models(void)
{
    int done = 0, total = 0;
    for (int k = 0; k < 3; k++) {
        struct le_model *m = le_fixture_random(
            300 + 150 * k, k == 1 ? LE_TYPE_Q8_0 : LE_TYPE_F32,
            1000 + (uint64_t)k, 256);
        T_CHECK(m != NULL);
        if (!m)
            continue;
        generate_many(m, 12, 1.5f, &done);
        total += 12;
        le_model_free(m);
    }
    fprintf(stderr, "  random models: %d of %d ended by the grammar\n", done,
            total);
    T_CHECK(done >= total / 2);
}

/* A random model whose vocabulary ends with mistral's control tokens,
 * with a mistral tool template (tmpl) or none; NULL on failure. */
static struct le_model *
control_model(const char *tmpl)
{
    static const char *const ctl[] = {"[INST]", "[/INST]", "[TOOL_CALLS]",
                                      NULL};
    return le_fixture_random_tmpl(400, LE_TYPE_F32, 5, 256, tmpl, ctl);
}

/* "[TOOL_CALLS] [1]" greedy on m with the [TOOL_CALLS] token (id 399)
 * biased up: the generated token count. */
static int
calls_marker_tokens(struct le_model *m, char *out, size_t cap)
{
    struct le_grammar *g = compile("root ::= \"[TOOL_CALLS] [1]\"\n");
    struct le_session *s = NULL;
    char err[256];
    int32_t prompt[4] = {1, 300, 301, 302}, id = 399;
    float bias = 100;
    struct le_gen_result r = {0};
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 40;
    sp.grammar = g;
    sp.bias_id = &id;
    sp.bias = &bias;
    sp.n_bias = 1;
    if (g && s)
        T_EQ_INT(le_fixture_generate(s, prompt, 4, &sp, out, cap, &r), LE_OK);
    T_EQ_INT(r.finish, LE_FINISH_STOP);
    le_session_free(s);
    le_grammar_free(g);
    return r.completion_tokens;
}

/* Mistral's [TOOL_CALLS] is a control token: with a mistral tool template
 * the engine gives its text, so a grammar takes it in one token (as the
 * model was trained to write it) and the output shows it; other control
 * tokens stay textless, and without the template the marker must be
 * spelled out of ordinary pieces. */
static void
test_kept_control_token(void)
{
    struct le_model *m = control_model(
        "[INST] ... [AVAILABLE_TOOLS] [ ... [TOOL_CALLS] [ ...");
    struct le_model *plain = control_model(NULL);
    T_CHECK(m && plain);
    if (!m || !plain)
        goto out;
    T_EQ_INT(le_model_chat_tools(m), LE_TOOLS_MISTRAL);
    char piece[32];
    /* ids 397 [INST], 398 [/INST], 399 [TOOL_CALLS] */
    size_t n = le_model_token_to_piece(m, 399, 0, piece, sizeof(piece));
    T_CHECK(n == 12 && !memcmp(piece, "[TOOL_CALLS]", 12));
    T_EQ_INT(le_model_token_to_piece(m, 397, 0, piece, sizeof(piece)), 0);
    T_EQ_INT(le_model_token_to_piece(m, 397, 1, piece, sizeof(piece)), 6);
    T_EQ_INT(le_model_token_to_piece(plain, 399, 0, piece, sizeof(piece)), 0);
    char out[128];
    int k = calls_marker_tokens(m, out, sizeof(out));
    T_EQ_STR(out, "[TOOL_CALLS] [1]");
    int spelled = calls_marker_tokens(plain, out, sizeof(out));
    T_EQ_STR(out, "[TOOL_CALLS] [1]");
    fprintf(stderr, "  [TOOL_CALLS] [1]: %d tokens kept, %d spelled\n", k,
            spelled);
    T_CHECK(k >= 2 && k <= 6); /* the marker, then " [1]" in pieces */
    T_CHECK(spelled > 10);
out:
    le_model_free(m);
    le_model_free(plain);
}

int
main(void)
{
    T_RUN(test_parse_errors);
    T_RUN(test_sentences);
    T_RUN(test_repeat_bounds);
    T_RUN(test_runaway_expansion);
    T_RUN(test_free_and_bounds);
    T_RUN(test_mask_brute_force);
    T_RUN(test_generate_stories);
    T_RUN(test_generate_random_models);
    T_RUN(test_kept_control_token);
    return T_END();
}
