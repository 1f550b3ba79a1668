/* mt_test.h - a minimal test harness: every CHECK that fails is counted and printed,
 * and mt_test_done() turns the count into the exit status (0 only if none failed). */
#ifndef MT_TEST_H
#define MT_TEST_H

#include <math.h>
#include <stdio.h>

static int mt_test_failures = 0;
static int mt_test_checks = 0;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        mt_test_checks++;                                                  \
        if (!(cond)) {                                                     \
            mt_test_failures++;                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, rtol, atol, what)                                           \
    do {                                                                              \
        double mt_a_ = (a), mt_b_ = (b);                                              \
        CHECK(fabs(mt_a_ - mt_b_) <= (atol) + (rtol)*fabs(mt_b_) && !isnan(mt_a_),     \
              "%s: got %.9g want %.9g", (what), mt_a_, mt_b_);                        \
    } while (0)

/* 1 when files a and b exist and hold the same bytes */
static inline int mt_test_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static inline int mt_test_done(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, mt_test_checks, mt_test_failures);
    return mt_test_failures ? 1 : 0;
}

#endif
