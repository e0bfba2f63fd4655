/*
 * test_tok_cache — the cache of long texts' encodings (engine/model/tok_cache.c): every answer
 * equals tok_encode's (hits included, with and without special-token parsing, from several
 * threads at once), a repeated long text is a hit, short texts are not kept, and the bytes
 * stay within the limit, least recently used out first. Uses the tiny qwen35 model's
 * tokenizer from BUILD_DIR/models.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"      // defines: gguf_open, gguf_close
#include "engine/model/tok.h"       // defines: tok_create, tok_encode
#include "engine/model/tok_cache.h" // defines: tok_cache_*
#include "test.h"                   // defines: TEST, RUN, CHECK*, TEST_MAIN_END

static tok_t *g_tok;

/* A text of about n bytes, different for each seed, with a special token's text inside. */
static char *text_of(int seed, size_t n)
{
    static const char *w[] = {"alpha ",  "bravo ", "charlie ",  "<|im_end|>",
                              "delta\n", "echo, ", "foxtrot. ", "golf "};
    char *s = malloc(n + 16);
    size_t at = 0;
    for (int i = 0; at < n; i++) {
        const char *p = w[(i * 5 + seed * 3 + i / 7) % 8];
        memcpy(s + at, p, strlen(p));
        at += strlen(p);
    }
    s[at] = '\0';
    return s;
}

/* Does the cache's answer for s equal tok_encode's? */
static bool same(tok_cache_t *c, const char *s, bool special)
{
    size_t n = strlen(s);
    int32_t *a = malloc((n + 1) * sizeof *a), *b = malloc((n + 1) * sizeof *b);
    int64_t na = tok_cache_encode(c, g_tok, s, n, special, a, (int64_t)n + 1);
    int64_t nb = tok_encode(g_tok, s, n, special, b, (int64_t)n + 1);
    bool ok = na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0;
    free(a);
    free(b);
    return ok;
}

TEST(hits_equal_encoding)
{
    tok_cache_t *c = tok_cache_create(1024, 1 << 20);
    char *long1 = text_of(1, 5000), *long2 = text_of(2, 5000), *shorts = text_of(3, 200);
    int64_t hits, lookups;
    CHECK(same(c, long1, false)); /* miss, kept */
    CHECK(same(c, long1, false)); /* hit */
    CHECK(same(c, long1, true));  /* parse_special: another entry (<|im_end|> is one id) */
    CHECK(same(c, long1, true));
    CHECK(same(c, long2, false));
    CHECK(same(c, shorts, false)); /* too short to keep: not even looked up */
    CHECK(same(c, shorts, false));
    tok_cache_stats(c, &hits, &lookups);
    CHECK_EQ(lookups, 5);
    CHECK_EQ(hits, 2);
    /* the special-token parse differs, so the two entries of long1 really are two */
    size_t n = strlen(long1);
    int32_t *a = malloc((n + 1) * sizeof *a), *b = malloc((n + 1) * sizeof *b);
    int64_t na = tok_cache_encode(c, g_tok, long1, n, false, a, (int64_t)n + 1);
    int64_t nb = tok_cache_encode(c, g_tok, long1, n, true, b, (int64_t)n + 1);
    CHECK(na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0);
    free(a);
    free(b);
    tok_cache_destroy(c);
    free(long1);
    free(long2);
    free(shorts);
}

TEST(bytes_within_limit_lru)
{
    /* room for two and a half entries (an entry: its text, its ids and a small header) */
    char *t[3] = {text_of(4, 5000), text_of(5, 5000), text_of(6, 5000)};
    size_t most = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(t[i]),
               e = 128 + n + 4 * (size_t)tok_encode(g_tok, t[i], n, false, NULL, 0);
        most = e > most ? e : most;
    }
    tok_cache_t *c = tok_cache_create(1024, most * 5 / 2);
    int64_t hits, lookups;
    CHECK(same(c, t[0], false));
    CHECK(same(c, t[1], false));
    CHECK(same(c, t[0], false)); /* hit: t[0] is now the most recently used */
    CHECK(same(c, t[2], false)); /* t[1] goes */
    CHECK(same(c, t[0], false)); /* hit */
    CHECK(same(c, t[1], false)); /* miss (t[2] goes) */
    tok_cache_stats(c, &hits, &lookups);
    CHECK_EQ(hits, 2);
    CHECK_EQ(lookups, 6);
    /* a text larger than the whole cache is encoded, not kept */
    char *big = text_of(7, 3 * most);
    CHECK(same(c, big, false));
    CHECK(same(c, big, false));
    tok_cache_stats(c, &hits, &lookups);
    CHECK_EQ(hits, 2);
    for (int i = 0; i < 3; i++)
        free(t[i]);
    free(big);
    tok_cache_destroy(c);
}

struct worker {
    tok_cache_t *c;
    int ok;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 40; i++) {
        char *s = text_of(i % 4, 3000);
        w->ok += same(w->c, s, i % 2 == 0);
        free(s);
    }
    return NULL;
}

TEST(threads)
{
    tok_cache_t *c = tok_cache_create(1024, 1 << 20);
    struct worker w[4] = {{c, 0}, {c, 0}, {c, 0}, {c, 0}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, work, &w[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(w[i].ok, 40);
    }
    int64_t hits, lookups;
    tok_cache_stats(c, &hits, &lookups);
    CHECK_EQ(lookups, 160);
    CHECK(hits >= 160 - 4 * 8); /* 8 distinct texts: each missed at most once per thread */
    tok_cache_destroy(c);
}

int main(int argc, char **argv)
{
    const char *env = getenv("DELTAD_TEST_BUILD");
    const char *b = argc > 1 ? argv[1] : env ? env : "build/cpu";
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/models/tiny-qwen35.gguf", b);
    gguf_t *g;
    if (gguf_open(path, &g, err, sizeof err) != 0)
        TEST_SKIP("%s: %s", path, err);
    if (tok_create(g, &g_tok, err, sizeof err) != 0) {
        gguf_close(g);
        TEST_SKIP("tokenizer of %s: %s", path, err);
    }
    gguf_close(g);
    RUN(hits_equal_encoding);
    RUN(bytes_within_limit_lru);
    RUN(threads);
    tok_destroy(g_tok);
    TEST_MAIN_END("test_tok_cache");
}
