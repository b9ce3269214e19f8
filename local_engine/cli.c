/*
 * cli.c: `llmux run`, `llmux bench` and `llmux tokenize` (DESIGN.md
 * section 4).  Each returns the process exit code: 0 ok, 1 bad input (an
 * unreadable or invalid model, a prompt that does not fit), 2 usage error.
 *
 * run: the generated text alone on stdout, flushed token by token and
 * ended by one newline; with --echo the prompt text comes first.  Timings
 * go to stderr.  BOS is added as the vocabulary says.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

/* ------------------------------------------------------------------ */
/* Argument helpers                                                     */

static int
parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int
parse_float(const char *s, float lo, float hi, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int
parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Reads all of f into a malloc'd buffer (NUL-terminated). */
static char *
read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    if (!p)
        return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            char *np = realloc(p, cap * 2);
            if (!np) {
                free(p);
                return NULL;
            }
            p = np;
            cap *= 2;
        }
        size_t r = fread(p + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

/* Tokenizes into a malloc'd array; NULL on failure. */
static int32_t *
tokenize_all(const struct le_model *m, const char *text, size_t len,
             int add_special, int parse_special, size_t *n_out)
{
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return NULL;
    int64_t n = le_model_tokenize(m, text, len, add_special, parse_special,
                                  ids, cap);
    if (n > (int64_t)cap) {
        int32_t *nids = realloc(ids, (size_t)n * sizeof(*ids));
        if (!nids) {
            free(ids);
            return NULL;
        }
        ids = nids;
        cap = (size_t)n;
        n = le_model_tokenize(m, text, len, add_special, parse_special, ids,
                              cap);
    }
    if (n < 0 || n > (int64_t)cap) {
        free(ids);
        return NULL;
    }
    *n_out = (size_t)n;
    return ids;
}

/* Model options shared by run and bench: returns 1 if argv[i] was one
 * (advancing *i past its value), 0 if not, -1 on a bad value. */
static int
model_opt(int argc, char **argv, int *i, struct le_model_params *mp)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--no-mmap")) {
        mp->use_mmap = 0;
        return 1;
    }
    if (!strcmp(a, "--mlock")) {
        mp->use_mlock = 1;
        return 1;
    }
    if (!strcmp(a, "--kv-type")) {
        if (!v)
            return -1;
        (*i)++;
        if (!strcmp(v, "f16"))
            mp->kv_type = LE_KV_F16;
        else if (!strcmp(v, "q8_0"))
            mp->kv_type = LE_KV_Q8_0;
        else
            return -1;
        return 1;
    }
    if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
        if (!v || parse_int(v, 1, 512, &mp->n_batch))
            return -1;
        (*i)++;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* run                                                                  */

static void
run_usage(FILE *f)
{
    fputs("usage: llmux run --model FILE.gguf [-p PROMPT] [--chat] [-n N]\n"
          "                 [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
          "                 [--repeat-penalty R] [--seed S] [--threads N]\n"
          "                 [--ctx N] [--echo]\n"
          "\n"
          "One-shot local generation: the generated text alone on stdout,\n"
          "timings on stderr.\n"
          "  --model FILE   GGUF model (llama and Mixtral, qwen2, qwen2moe,\n"
          "                 qwen3, qwen3moe, gemma2, gemma3, phi3, granite,\n"
          "                 granitemoe, gpt-oss, deepseek2, mistral3)\n"
          "  -p PROMPT      prompt text (default: empty, BOS only)\n"
          "  --chat         wrap the prompt as one user message in the\n"
          "                 model's chat template\n"
          "  -n N           tokens to generate (default 64)\n"
          "  --temp T       temperature; 0 is greedy (default 0.8)\n"
          "  --top-k K      (default 40)   --top-p P  (default 0.95)\n"
          "  --min-p P      (default 0.05) --repeat-penalty R (default 1)\n"
          "  --seed S       random seed (default: from the clock)\n"
          "  --threads N    compute threads (default 1)\n"
          "  --ctx N        context window (default: the model's, <= 4096)\n"
          "  --echo         print the prompt before the generated text\n"
          "  --kv-type T    KV cache f16 (default) or q8_0\n"
          "  --batch N      prompt tokens per forward pass (default 128)\n"
          "  --no-mmap      read the file into memory instead of mapping\n"
          "  --mlock        lock the weights in memory\n",
          f);
}

static int
run_cb(void *ud, int32_t id, const char *text, size_t len)
{
    (void)id;
    *(size_t *)ud += len;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

int
le_cli_run(int argc, char **argv)
{
    const char *model = NULL, *prompt = "";
    int chat = 0, echo = 0;
    struct le_model_params mp;
    struct le_sampling sp;
    le_model_params_default(&mp);
    le_sampling_default(&sp);
    sp.max_tokens = 64;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        int mo = model_opt(argc, argv, &i, &mp);
        if (mo < 0) {
            fprintf(stderr, "llmux run: bad or missing value for '%s'\n\n",
                    opt);
            run_usage(stderr);
            return 2;
        }
        if (mo > 0)
            continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0, takes = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
            takes = 0;
        } else if (!strcmp(a, "--echo")) {
            echo = 1;
            takes = 0;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            bad = parse_int(v, 1, 1 << 20, &sp.max_tokens);
        } else if (!strcmp(a, "--temp")) {
            bad = parse_float(v, 0, 100, &sp.temperature);
        } else if (!strcmp(a, "--top-k")) {
            bad = parse_int(v, 0, INT_MAX, &sp.top_k);
        } else if (!strcmp(a, "--top-p")) {
            bad = parse_float(v, 0, 1, &sp.top_p);
        } else if (!strcmp(a, "--min-p")) {
            bad = parse_float(v, 0, 1, &sp.min_p);
        } else if (!strcmp(a, "--repeat-penalty")) {
            bad = parse_float(v, 0, 100, &sp.repeat_penalty);
        } else if (!strcmp(a, "--seed")) {
            bad = parse_u64(v, &sp.seed);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            bad = parse_int(v, 1, 256, &mp.n_threads);
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            bad = parse_int(v, 1, 1 << 20, &mp.n_ctx);
        } else {
            fprintf(stderr, "llmux run: unknown option '%s'\n\n", a);
            run_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "llmux run: bad or missing value for '%s'\n\n",
                    a);
            run_usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (!model) {
        fprintf(stderr, "llmux run: --model is required\n\n");
        run_usage(stderr);
        return 2;
    }

    char err[512] = "";
    int rc = 1;
    struct le_model *m = NULL;
    struct le_session *s = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    double t0 = le_now_ms();
    enum le_status st = le_model_open(model, &mp, &m, err, sizeof(err));
    if (st != LE_OK) {
        fprintf(stderr, "llmux run: %s\n", err);
        goto out;
    }
    double t_load = le_now_ms() - t0;
    const char *ptext = prompt;
    if (chat) {
        struct le_chat_msg msg = {"user", prompt};
        st = le_chat_apply(le_model_chat_template(m), &msg, 1, 1, &text, NULL);
        if (st != LE_OK) {
            fprintf(stderr, "llmux run: %s\n", le_status_str(st));
            goto out;
        }
        ptext = text;
    }
    ids = tokenize_all(m, ptext, strlen(ptext), 1, chat, &n_ids);
    if (!ids) {
        fprintf(stderr, "llmux run: the prompt could not be tokenized\n");
        goto out;
    }
    if (n_ids == 0) {
        /* no BOS in this vocabulary and an empty prompt: start from EOS
         * would be wrong; ask for text instead */
        fprintf(stderr, "llmux run: the prompt is empty and the model has "
                        "no BOS token; give -p\n");
        goto out;
    }
    st = le_session_new(m, &s, err, sizeof(err));
    if (st != LE_OK) {
        fprintf(stderr, "llmux run: %s\n", err);
        goto out;
    }
    if (echo) {
        fputs(ptext, stdout);
        fflush(stdout);
    }
    struct le_gen_result res;
    size_t emitted = 0;
    st = le_session_generate(s, ids, n_ids, &sp, run_cb, &emitted, &res, err,
                             sizeof(err));
    if (st == LE_OK || emitted || echo) {
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (st != LE_OK) {
        fprintf(stderr, "llmux run: %s\n", err);
        goto out;
    }
    fprintf(stderr,
            "llmux run: %s\n"
            "llmux run: load %.1f ms; prompt %d tokens in %.1f ms (%.1f "
            "tok/s); generated %d tokens in %.1f ms (%.1f tok/s); %s; "
            "%d threads\n",
            le_model_desc(m), t_load, res.prompt_tokens, res.prompt_ms,
            res.prompt_ms > 0 ? res.prompt_tokens * 1e3 / res.prompt_ms : 0,
            res.completion_tokens, res.gen_ms,
            res.gen_ms > 0 ? res.completion_tokens * 1e3 / res.gen_ms : 0,
            res.finish == LE_FINISH_STOP ? "stopped" : "length limit",
            le_model_n_threads(m));
    rc = 0;
out:
    free(ids);
    free(text);
    le_session_free(s);
    le_model_free(m);
    return rc;
}

/* ------------------------------------------------------------------ */
/* bench                                                                */

static void
bench_usage(FILE *f)
{
    fputs("usage: llmux bench --model FILE.gguf [-p 128] [-n 64] [-r 1]\n"
          "                   [--threads N] [--json] [--kv-type f16|q8_0]\n"
          "                   [--batch N] [--no-mmap] [--mlock]\n"
          "\n"
          "Prefill (pp: -p prompt tokens in batches) and generation (tg: -n\n"
          "tokens one at a time) speed in tokens/s, like llama-bench; -r\n"
          "repeats each and reports the mean.  As llama-bench, one untimed\n"
          "warm-up pass of each goes first.\n",
          f);
}

int
le_cli_bench(int argc, char **argv)
{
    const char *model = NULL;
    int n_p = 128, n_g = 64, reps = 1, json = 0;
    struct le_model_params mp;
    le_model_params_default(&mp);
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        int mo = model_opt(argc, argv, &i, &mp);
        if (mo < 0) {
            fprintf(stderr, "llmux bench: bad or missing value for '%s'\n\n",
                    opt);
            bench_usage(stderr);
            return 2;
        }
        if (mo > 0)
            continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0, takes = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            takes = 0;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            model = v;
        } else if (!strcmp(a, "-p")) {
            bad = parse_int(v, 0, 1 << 16, &n_p);
        } else if (!strcmp(a, "-n")) {
            bad = parse_int(v, 0, 1 << 16, &n_g);
        } else if (!strcmp(a, "-r")) {
            bad = parse_int(v, 1, 1000, &reps);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            bad = parse_int(v, 1, 256, &mp.n_threads);
        } else {
            fprintf(stderr, "llmux bench: unknown option '%s'\n\n", a);
            bench_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "llmux bench: bad or missing value for '%s'\n\n",
                    a);
            bench_usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (!model || n_p + n_g == 0) {
        fprintf(stderr, "llmux bench: --model is required (and -p or -n "
                        "above 0)\n\n");
        bench_usage(stderr);
        return 2;
    }
    mp.n_ctx = n_p > n_g ? n_p : n_g;
    if (mp.n_ctx < 1)
        mp.n_ctx = 1;
    char err[512] = "";
    int rc = 1;
    struct le_model *m = NULL;
    struct le_session *s = NULL;
    int32_t *ids = NULL;
    enum le_status st = le_model_open(model, &mp, &m, err, sizeof(err));
    if (st == LE_OK)
        st = le_session_new(m, &s, err, sizeof(err));
    if (st != LE_OK) {
        fprintf(stderr, "llmux bench: %s\n", err);
        goto out;
    }
    int nmax = n_p > n_g ? n_p : n_g;
    ids = malloc((size_t)(nmax > 0 ? nmax : 1) * sizeof(*ids));
    if (!ids)
        goto out;
    /* token ids spread over the vocabulary (content does not change the
     * cost of a dense model) */
    int32_t nv = le_model_n_vocab(m);
    for (int i = 0; i < nmax; i++)
        ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % nv);
    /* Untimed warm-up, as llama-bench does: the first pass pays for
     * first-touch page faults of the session's scratch and KV cache (tens
     * of MB at --batch 512), the kernels' per-thread buffers and the
     * first AMX use; in a single timed pass that was 5-10% of pp128 and
     * varied between runs. */
    if (n_p > 0) {
        le_session_reset(s);
        st = le_session_decode(s, ids, (size_t)n_p, err, sizeof(err));
    }
    if (n_g > 0 && st == LE_OK) {
        le_session_reset(s);
        st = le_session_decode(s, ids, 1, err, sizeof(err));
    }
    double pp_ms = 0, tg_ms = 0;
    for (int r = 0; r < reps && st == LE_OK; r++) {
        if (n_p > 0) {
            le_session_reset(s);
            double t0 = le_now_ms();
            st = le_session_decode(s, ids, (size_t)n_p, err, sizeof(err));
            pp_ms += le_now_ms() - t0;
        }
        if (n_g > 0 && st == LE_OK) {
            le_session_reset(s);
            double t0 = le_now_ms();
            for (int i = 0; i < n_g && st == LE_OK; i++) {
                int32_t id = i ? le_samp_argmax(le_session_logits(s), nv)
                               : ids[0];
                st = le_session_decode(s, &id, 1, err, sizeof(err));
            }
            tg_ms += le_now_ms() - t0;
        }
    }
    if (st != LE_OK) {
        fprintf(stderr, "llmux bench: %s\n", err);
        goto out;
    }
    pp_ms /= reps;
    tg_ms /= reps;
    double pp_tps = pp_ms > 0 ? n_p * 1e3 / pp_ms : 0;
    double tg_tps = tg_ms > 0 ? n_g * 1e3 / tg_ms : 0;
    if (json) {
        printf("{\"model\":\"%s\",\"desc\":\"%s\",\"threads\":%d,"
               "\"reps\":%d,\"pp\":{\"n_tokens\":%d,\"ms\":%.3f,"
               "\"tokens_per_s\":%.2f},\"tg\":{\"n_tokens\":%d,\"ms\":%.3f,"
               "\"tokens_per_s\":%.2f}}\n",
               strrchr(model, '/') ? strrchr(model, '/') + 1 : model,
               le_model_desc(m), le_model_n_threads(m), reps, n_p, pp_ms,
               pp_tps, n_g, tg_ms, tg_tps);
    } else {
        printf("model: %s (%s)\nthreads: %d\n", model, le_model_desc(m),
               le_model_n_threads(m));
        printf("| test  | tokens/s |\n|-------|----------|\n");
        if (n_p > 0)
            printf("| pp%-3d | %8.2f |\n", n_p, pp_tps);
        if (n_g > 0)
            printf("| tg%-3d | %8.2f |\n", n_g, tg_tps);
    }
    rc = 0;
out:
    free(ids);
    le_session_free(s);
    le_model_free(m);
    return rc;
}

/* ------------------------------------------------------------------ */
/* tokenize                                                             */

static void
tok_usage(FILE *f)
{
    fputs("usage: llmux tokenize --model FILE.gguf [--no-bos] [--special] "
          "[TEXT | -]\n"
          "\n"
          "Prints the token ids of TEXT (or of stdin, byte for byte, when "
          "TEXT\nis - or absent), space-separated.  Works on vocabulary-only "
          "GGUF\nfiles.  --no-bos: no BOS/EOS; --special: special-token "
          "text is\nparsed as those tokens.\n",
          f);
}

int
le_cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    int bos = 1, special = 0, n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tok_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-bos")) {
            bos = 0;
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "llmux tokenize: --model needs a file\n\n");
                tok_usage(stderr);
                return 2;
            }
            model = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "llmux tokenize: unknown option '%s'\n\n", a);
            tok_usage(stderr);
            return 2;
        } else {
            text = a;
            n_pos++;
        }
    }
    if (!model || n_pos > 1) {
        fprintf(stderr, "llmux tokenize: %s\n\n",
                model ? "give one TEXT (quote it)" : "--model is required");
        tok_usage(stderr);
        return 2;
    }
    char err[512] = "";
    int rc = 1;
    char *buf = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    struct le_model *m = NULL;
    enum le_status st = le_model_open_vocab(model, &m, err, sizeof(err));
    if (st != LE_OK) {
        fprintf(stderr, "llmux tokenize: %s\n", err);
        goto out;
    }
    if (!text || !strcmp(text, "-")) {
        buf = read_all(stdin, &len);
        if (!buf) {
            fprintf(stderr, "llmux tokenize: out of memory\n");
            goto out;
        }
        text = buf;
    } else {
        len = strlen(text);
    }
    ids = tokenize_all(m, text, len, bos, special, &n);
    if (!ids) {
        fprintf(stderr, "llmux tokenize: the text could not be tokenized\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    rc = 0;
out:
    free(ids);
    free(buf);
    le_model_free(m);
    return rc;
}
