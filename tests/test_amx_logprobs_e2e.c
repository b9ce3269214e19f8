/*
 * End to end: prompt log-probabilities on the AMX prefill path against
 * the per-row kernels, through the real binary.  Two llmux servers on
 * one random-weight 1024-wide q4_0 model (q4_0 takes the AMX GEMM from 32
 * tokens), the second with LLMUX_NO_AMX=1, score the same 200-token
 * prompt (echo, max_tokens 0, logprobs 2): whole 32-token pieces from
 * position 128 on take the AMX GEMM on the first server when the CPU and
 * kernel allow it (sched.c's SCHED_AMX_POS).  Every figure agrees within
 * LP_TOL; the figures of positions before 128 (per-row on both) are the
 * same bits; where AMX is usable here, at least one later figure differs
 * (so the AMX path ran: otherwise the check would compare a path with
 * itself).  Where AMX is not usable the two servers run the same
 * kernels and the test says so on stderr.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../local_engine/le_int.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

#define N_PROMPT 200
/* Both paths quantise the activations to q8_0 blocks the same way and sum
 * the same integer block products; only the GEMM's float order differs
 * from vec_dot's (tests/test_amx.c: within 1e-5 of each product's
 * magnitude), mostly giving the same bits.  Where a last bit differs, the
 * next product's q8_0 rounding of that activation can move by one step,
 * and a random-weight model carries that into the figures: measured on
 * this model, 2 December 2026 (one run, the stderr line): most positions
 * from 128 on differ, by at most 1.6e-2 (figures around -6), some not at
 * all; the per-row SIMD kernels against plain C (LLMUX_NO_SIMD=1) give the
 * same bits.  A wrong AMX piece (positions, cells, a tile) moves figures
 * by whole units, far beyond this. */
#define LP_TOL 5e-2

static json_t *
post(int port, const char *body, long *status)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/completions", port);
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 120000, &r) == 0) {
        *status = r.status;
        json_error_t je;
        o = json_loads(r.body, JSON_ALLOW_NUL, &je); /* byte tokens */
        if (!o)
            fprintf(stderr, "not JSON (%s): %.300s\n", je.text, r.body);
    }
    e2e_resp_free(&r);
    return o;
}

static const json_t *
lp_list(const json_t *o, const char *k)
{
    return json_object_get(
        json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                        "logprobs"),
        k);
}

int
main(void)
{
    /* before the environment changes: the first server's view (an
     * LLMUX_NO_AMX=1 already set reaches both servers) */
    int usable = le_amx_usable();
    char *dir = e2e_temp_dir();
    char model[600], cfg[2048];
    snprintf(model, sizeof(model), "%s/amx.gguf", dir ? dir : "/tmp");
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 300;
    lp.n_embd = 1024;
    lp.n_layer = 2;
    lp.n_head = 8;
    lp.n_head_kv = 4;
    lp.n_ff = 2048;
    lp.n_ctx = 512;
    lp.type = LE_TYPE_Q4_0;
    lp.seed = 93;
    T_EQ_INT(gguf_w_llama_write(&lp, model), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 1}}}\n",
             dir ? dir : "/tmp", model);
    char *path = e2e_write_temp("amx_lp.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    struct e2e_proc amx, plain;
    int ok_amx = path && e2e_start(&amx, argv, "listening on "
                                               "http://127.0.0.1:",
                                   30000) == 0;
    const char *was = getenv("LLMUX_NO_AMX");
    char *keep = was ? strdup(was) : NULL;
    setenv("LLMUX_NO_AMX", "1", 1);
    int ok_plain = path && e2e_start(&plain, argv, "listening on "
                                                   "http://127.0.0.1:",
                                     30000) == 0;
    if (keep)
        setenv("LLMUX_NO_AMX", keep, 1);
    else
        unsetenv("LLMUX_NO_AMX");
    free(keep);
    T_CHECK(ok_amx && ok_plain);

    /* token ids (no BOS added): every id of the vocabulary but the
     * three specials, in a scrambled order */
    static char body[8192];
    size_t o = (size_t)snprintf(body, sizeof(body),
                                "{\"model\":\"local\",\"echo\":true,"
                                "\"max_tokens\":0,\"logprobs\":2,"
                                "\"prompt\":[");
    for (int i = 0; i < N_PROMPT; i++)
        o += (size_t)snprintf(body + o, sizeof(body) - o, "%s%d",
                              i ? "," : "", 3 + (i * 37 + 11) % 297);
    snprintf(body + o, sizeof(body) - o, "]}");
    long sa = -1, sp = -1;
    json_t *a = ok_amx ? post(amx.port, body, &sa) : NULL;
    json_t *p = ok_plain ? post(plain.port, body, &sp) : NULL;
    T_EQ_INT(sa, 200);
    T_EQ_INT(sp, 200);
    if (sa != 200 || sp != 200 || !lp_list(a, "tokens")) {
        char *t = json_dumps(sa != 200 || sp == 200 ? a : p, 0);
        fprintf(stderr, "answer: %s\n", t ? t : "(none)");
        free(t);
    }
    const json_t *la = lp_list(a, "token_logprobs"),
                 *lb = lp_list(p, "token_logprobs"),
                 *ta = lp_list(a, "top_logprobs"),
                 *tb = lp_list(p, "top_logprobs");
    T_EQ_INT(json_array_size(la), N_PROMPT);
    T_EQ_INT(json_array_size(lb), N_PROMPT);
    T_CHECK(json_is_null(json_array_get(la, 0)));
    double worst = 0;
    int early_same = 1, late_differ = 0;
    for (size_t i = 1; i < json_array_size(la) && i < json_array_size(lb);
         i++) {
        const json_t *x = json_array_get(la, i), *y = json_array_get(lb, i);
        T_CHECK(json_is_number(x) && json_is_number(y));
        double d = fabs(json_number_value(x) - json_number_value(y));
        /* the alternatives' figures, by token (both lists the same 2
         * tokens unless two are within the tolerance) */
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)json_array_get(ta, i), k, v) {
            const json_t *w = json_object_get(json_array_get(tb, i), k);
            if (w) {
                double e = fabs(json_number_value(v) - json_number_value(w));
                d = e > d ? e : d;
            }
        }
        worst = d > worst ? d : worst;
        /* entry i is the figure of the logits at position i - 1 */
        int same = json_equal(x, y) &&
                   json_equal(json_array_get(ta, i), json_array_get(tb, i));
        if (i - 1 < 128)
            early_same &= same;
        else
            late_differ |= !same;
    }
    fprintf(stderr,
            "  AMX %s: prompt logprobs within %.3g of LLMUX_NO_AMX=1's "
            "(positions 128..: %s)\n",
            usable ? "usable" : le_amx_status(), worst,
            late_differ ? "differ" : "the same bits");
    T_CHECK(worst <= LP_TOL);
    T_CHECK(early_same);
    if (usable)
        T_CHECK(late_differ);
    json_decref(a);
    json_decref(p);
    if (ok_amx)
        T_EQ_INT(e2e_stop(&amx, 15, 20000), 0);
    if (ok_plain)
        T_EQ_INT(e2e_stop(&plain, 15, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(path);
    free(dir);
    return T_END();
}
