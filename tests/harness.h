/*
 * A tiny in-tree test harness.  Each test file defines test functions and
 * a main that calls T_RUN(fn) for each, then returns T_END().  T_END prints
 * "N passed, M failed" (checks, not functions) and returns the exit code.
 */
#ifndef LLMUX_TEST_HARNESS_H
#define LLMUX_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int t_pass, t_fail;
static const char *t_name = "";

#define T_CHECK(cond)                                                        \
    do {                                                                     \
        if (cond) {                                                          \
            t_pass++;                                                        \
        } else {                                                             \
            t_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d %s: %s\n", __FILE__, __LINE__,       \
                    t_name, #cond);                                          \
        }                                                                    \
    } while (0)

#define T_EQ_INT(a, b)                                                       \
    do {                                                                     \
        long long t_a = (long long)(a), t_b = (long long)(b);                \
        if (t_a == t_b) {                                                    \
            t_pass++;                                                        \
        } else {                                                             \
            t_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d %s: %s == %s (%lld vs %lld)\n",      \
                    __FILE__, __LINE__, t_name, #a, #b, t_a, t_b);           \
        }                                                                    \
    } while (0)

#define T_EQ_STR(a, b)                                                       \
    do {                                                                     \
        const char *t_a = (a), *t_b = (b);                                   \
        if (t_a && t_b && strcmp(t_a, t_b) == 0) {                           \
            t_pass++;                                                        \
        } else {                                                             \
            t_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d %s: %s == %s (\"%s\" vs \"%s\")\n",  \
                    __FILE__, __LINE__, t_name, #a, #b,                      \
                    t_a ? t_a : "(null)", t_b ? t_b : "(null)");             \
        }                                                                    \
    } while (0)

#define T_NEAR(a, b, tol)                                                    \
    do {                                                                     \
        double t_a = (double)(a), t_b = (double)(b);                         \
        if (fabs(t_a - t_b) <= (tol)) {                                      \
            t_pass++;                                                        \
        } else {                                                             \
            t_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d %s: |%s - %s| <= %g (%g vs %g)\n",   \
                    __FILE__, __LINE__, t_name, #a, #b, (double)(tol), t_a,  \
                    t_b);                                                    \
        }                                                                    \
    } while (0)

#define T_RUN(fn)                                                            \
    do {                                                                     \
        t_name = #fn;                                                        \
        int t_before = t_fail;                                               \
        fn();                                                                \
        fprintf(stderr, "%s %s\n", t_fail == t_before ? "ok  " : "FAIL",     \
                #fn);                                                        \
    } while (0)

#define T_END()                                                              \
    (printf("%d passed, %d failed\n", t_pass, t_fail), t_fail ? 1 : 0)

#endif
