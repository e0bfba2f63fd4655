/*
 * test_util — engine/util.c: the growable byte buffer (struct dd_buf): empty and zeroed
 * buffers, NUL termination after every operation, doubling growth across many appends,
 * formatted appends longer than the spare room, truncate / consume, take and free.
 */
#include <stdint.h>

#include "engine/util.h" // defines: struct dd_buf, dd_buf_*
#include "test.h"

/* The invariant every operation keeps: p[len] == '\0' once p exists, len < cap. */
static int terminated(const struct dd_buf *b)
{
    return b->p && b->len < b->cap && b->p[b->len] == '\0';
}

TEST(empty_take_is_empty_string)
{
    struct dd_buf b = {0};
    size_t len = 99;
    char *s = dd_buf_take(&b, &len);
    CHECK(s != NULL);
    CHECK_STR_EQ(s, "");
    CHECK_EQ(len, 0);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    free(s);
    dd_buf_free(&b); /* freeing an empty buffer is harmless */
    dd_buf_free(&b);
}

TEST(put_putc_puts)
{
    struct dd_buf b = {0};
    dd_buf_put(&b, "ab", 2);
    CHECK(terminated(&b));
    dd_buf_putc(&b, 'c');
    dd_buf_puts(&b, "def");
    dd_buf_put(&b, "xyz", 0); /* zero bytes: nothing changes */
    CHECK(terminated(&b));
    CHECK_EQ(b.len, 6);
    CHECK_STR_EQ(b.p, "abcdef");
    /* embedded NULs are bytes like any other */
    dd_buf_put(&b, "g\0h", 3);
    CHECK_EQ(b.len, 9);
    CHECK(memcmp(b.p, "abcdefg\0h", 10) == 0);
    dd_buf_free(&b);
    CHECK(b.p == NULL && b.len == 0);
}

TEST(growth_doubles)
{
    struct dd_buf b = {0};
    size_t reallocs = 0, cap = 0;
    for (int i = 0; i < 100000; i++) {
        dd_buf_putc(&b, (char)('a' + i % 26));
        if (b.cap != cap) {
            CHECK(cap == 0 || b.cap == 2 * cap);
            cap = b.cap;
            reallocs++;
        }
    }
    CHECK(terminated(&b));
    CHECK_EQ(b.len, 100000);
    CHECK(reallocs < 20); /* 256 .. 128 Ki: doubling, not one step per append */
    int ok = 1;
    for (int i = 0; i < 100000; i++)
        ok &= b.p[i] == (char)('a' + i % 26);
    CHECK(ok);
    dd_buf_free(&b);
}

TEST(printf_short_and_long)
{
    struct dd_buf b = {0};
    dd_buf_printf(&b, "%d-%s", 42, "x");
    CHECK_STR_EQ(b.p, "42-x");
    /* longer than the spare room: formatted again after growing */
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dd_buf_printf(&b, "[%s]", big);
    CHECK(terminated(&b));
    CHECK_EQ(b.len, 4 + 2 + sizeof big - 1);
    CHECK(b.p[4] == '[' && b.p[5] == 'q' && b.p[b.len - 1] == ']');
    dd_buf_printf(&b, "%s", ""); /* empty output: nothing changes */
    CHECK_EQ(b.len, 4 + 2 + sizeof big - 1);
    dd_buf_free(&b);
}

TEST(reserve_keeps_allocation)
{
    struct dd_buf b = {0};
    dd_buf_reserve(&b, 1000);
    CHECK(terminated(&b));
    CHECK_EQ(b.len, 0);
    CHECK(b.cap >= 1001);
    char *p = b.p;
    for (int i = 0; i < 1000; i++)
        dd_buf_putc(&b, 'z');
    CHECK(b.p == p); /* no reallocation within the reserved room */
    dd_buf_free(&b);
}

TEST(truncate_and_consume)
{
    struct dd_buf b = {0};
    dd_buf_puts(&b, "hello world");
    dd_buf_consume(&b, 6);
    CHECK_STR_EQ(b.p, "world");
    CHECK_EQ(b.len, 5);
    dd_buf_consume(&b, 0);
    CHECK_STR_EQ(b.p, "world");
    dd_buf_truncate(&b, 3);
    CHECK_STR_EQ(b.p, "wor");
    size_t cap = b.cap;
    dd_buf_truncate(&b, 0);
    CHECK(terminated(&b) && b.len == 0 && b.cap == cap); /* the allocation stays */
    dd_buf_puts(&b, "again");
    CHECK_STR_EQ(b.p, "again");
    dd_buf_consume(&b, 5);
    CHECK(terminated(&b) && b.len == 0);
    dd_buf_free(&b);
    struct dd_buf z = {0};
    dd_buf_truncate(&z, 0); /* on a zeroed buffer: still empty, nothing allocated */
    CHECK(z.p == NULL && z.len == 0);
}

TEST(take_hands_over_and_resets)
{
    struct dd_buf b = {0};
    dd_buf_puts(&b, "abc");
    size_t len = 0;
    char *s = dd_buf_take(&b, &len);
    CHECK_STR_EQ(s, "abc");
    CHECK_EQ(len, 3);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    dd_buf_puts(&b, "d"); /* the buffer is reusable after a take */
    char *t = dd_buf_take(&b, NULL);
    CHECK_STR_EQ(t, "d");
    free(s);
    free(t);
}

int main(void)
{
    RUN(empty_take_is_empty_string);
    RUN(put_putc_puts);
    RUN(growth_doubles);
    RUN(printf_short_and_long);
    RUN(reserve_keeps_allocation);
    RUN(truncate_and_consume);
    RUN(take_hands_over_and_resets);
    TEST_MAIN_END("test_util");
}
