/*
 * test.h — the tiny unit-test harness every test program includes (STYLE rule 31).
 *
 * A test program defines TEST(name) functions and lists them in main with RUN(name). Each
 * failed check prints the expression, both values and file:line, and marks the current test
 * failed (the test continues to its end). TEST_MAIN_END prints "name: N passed, N failed" and
 * returns 1 on any failure. A program with nothing to test here prints "SKIP: reason" and
 * returns 77 (tests/run.sh counts it as skipped). DELTAD_TEST_ONLY=name[,name...] in the
 * environment runs only those tests (the others are neither run nor counted).
 */
#ifndef DELTAD_TEST_H
#define DELTAD_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test__failed_checks;
static int test__passed, test__failed;

/* Whether DELTAD_TEST_ONLY (unset: every test) names test `name`. */
static inline int test__selected(const char *name)
{
    const char *only = getenv("DELTAD_TEST_ONLY");
    const size_t n = strlen(name);
    for (const char *p = only; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return !only || !*only;
}

#define TEST(name) static void test_##name(void)
#define RUN(name)                                                                                  \
    do {                                                                                           \
        if (!test__selected(#name))                                                                \
            break;                                                                                 \
        int before_ = test__failed_checks;                                                         \
        test_##name();                                                                             \
        if (test__failed_checks == before_) {                                                      \
            test__passed++;                                                                        \
        } else {                                                                                   \
            test__failed++;                                                                        \
            printf("FAIL %s\n", #name);                                                            \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)
#define TEST_MAIN_END(prog)                                                                        \
    do {                                                                                           \
        printf("%s: %d passed, %d failed\n", (prog), test__passed, test__failed);                  \
        return test__failed ? 1 : 0;                                                               \
    } while (0)
#define TEST_SKIP(...)                                                                             \
    do {                                                                                           \
        printf("SKIP: ");                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        return 77;                                                                                 \
    } while (0)

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #x);                         \
            test__failed_checks++;                                                                 \
        }                                                                                          \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            printf("  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
                   a_, b_);                                                                        \
            test__failed_checks++;                                                                 \
        }                                                                                          \
    } while (0)
#define CHECK_STR_EQ(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                   \
            printf("  %s:%d: CHECK_STR_EQ(%s, %s) failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, \
                   #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                \
            test__failed_checks++;                                                                 \
        }                                                                                          \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            printf("  %s:%d: CHECK_NEAR(%s, %s, %g) failed: %.9g vs %.9g\n", __FILE__, __LINE__,   \
                   #a, #b, (double)(tol), a_, b_);                                                 \
            test__failed_checks++;                                                                 \
        }                                                                                          \
    } while (0)

/* Deterministic xorshift RNG for test data. */
static inline unsigned long long test_rng_next(unsigned long long *s)
{
    unsigned long long x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}
/* Uniform in [-1, 1). */
static inline float test_rng_uniform(unsigned long long *s)
{
    return (float)((test_rng_next(s) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#endif
