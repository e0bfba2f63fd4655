/*
 * tok_cache — a cache of long texts' encodings (contract in tok_cache.h).
 *
 * A small array of entries (a handful of system prompts is the use), searched linearly by
 * hash; `used` is the LRU clock. Each entry is one allocation: the struct, then the ids, then
 * the text. Lookups copy the ids out under the mutex; a miss encodes outside it and inserts the
 * result (two threads missing on the same text both encode; the second insert finds the first).
 */
#include "tok_cache.h" // defines: tok_cache_*

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, xcalloc, xrealloc

struct tc_ent {
    uint64_t hash;
    size_t len;      /* text bytes */
    bool special;    /* parse_special */
    int64_t n_ids;   /* ids [n_ids] */
    uint64_t used;   /* LRU clock */
    size_t bytes;    /* of the allocation */
    int32_t *ids;    /* after the struct */
    const char *txt; /* after the ids */
};

struct tok_cache {
    pthread_mutex_t mu;
    size_t min_bytes, max_bytes, bytes;
    struct tc_ent **e; /* [n] */
    int64_t n, cap;
    uint64_t clock;
    int64_t hits, lookups;
};

static uint64_t text_hash(const char *s, size_t n, bool special)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)special;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

tok_cache_t *tok_cache_create(size_t min_bytes, size_t max_bytes)
{
    tok_cache_t *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->min_bytes = min_bytes > 0 ? min_bytes : 1;
    c->max_bytes = max_bytes;
    return c;
}

void tok_cache_destroy(tok_cache_t *c)
{
    if (!c)
        return;
    for (int64_t i = 0; i < c->n; i++)
        free(c->e[i]);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The entry of (s, n, special), or -1. Under the mutex. */
static int64_t find(const tok_cache_t *c, uint64_t h, const char *s, size_t n, bool special)
{
    for (int64_t i = 0; i < c->n; i++) {
        const struct tc_ent *e = c->e[i];
        if (e->hash == h && e->len == n && e->special == special && memcmp(e->txt, s, n) == 0)
            return i;
    }
    return -1;
}

/* Keep (s, ids) unless it is there already; the least recently used go beyond max_bytes.
 * Under the mutex. */
static void insert(tok_cache_t *c, uint64_t h, const char *s, size_t n, bool special,
                   const int32_t *ids, int64_t n_ids)
{
    const size_t bytes = sizeof(struct tc_ent) + (size_t)n_ids * sizeof *ids + n;
    if (bytes > c->max_bytes || find(c, h, s, n, special) >= 0)
        return;
    while (c->n && c->bytes + bytes > c->max_bytes) {
        int64_t lru = 0;
        for (int64_t i = 1; i < c->n; i++)
            if (c->e[i]->used < c->e[lru]->used)
                lru = i;
        c->bytes -= c->e[lru]->bytes;
        free(c->e[lru]);
        c->e[lru] = c->e[--c->n];
    }
    struct tc_ent *e = xmalloc(bytes);
    *e = (struct tc_ent){.hash = h,
                         .len = n,
                         .special = special,
                         .n_ids = n_ids,
                         .used = ++c->clock,
                         .bytes = bytes};
    e->ids = (int32_t *)(e + 1);
    memcpy(e->ids, ids, (size_t)n_ids * sizeof *ids);
    e->txt = (const char *)(e->ids + n_ids);
    memcpy((char *)(e->ids + n_ids), s, n);
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->e = xrealloc(c->e, (size_t)c->cap * sizeof *c->e);
    }
    c->e[c->n++] = e;
    c->bytes += bytes;
}

int64_t tok_cache_encode(tok_cache_t *c, const tok_t *t, const char *text, size_t len,
                         bool parse_special, int32_t *ids, int64_t max_ids)
{
    if (!c || len < c->min_bytes || !text)
        return tok_encode(t, text, len, parse_special, ids, max_ids);
    const uint64_t h = text_hash(text, len, parse_special);
    pthread_mutex_lock(&c->mu);
    c->lookups++;
    int64_t i = find(c, h, text, len, parse_special);
    if (i >= 0) {
        struct tc_ent *e = c->e[i];
        e->used = ++c->clock;
        c->hits++;
        int64_t n = e->n_ids;
        if (ids && max_ids > 0)
            memcpy(ids, e->ids, (size_t)(n < max_ids ? n : max_ids) * sizeof *ids);
        pthread_mutex_unlock(&c->mu);
        return n;
    }
    pthread_mutex_unlock(&c->mu);
    int64_t n = tok_encode(t, text, len, parse_special, ids, max_ids);
    if (n < 0 || n > max_ids)
        return n; /* an error, or the ids did not fit: nothing whole to keep */
    pthread_mutex_lock(&c->mu);
    insert(c, h, text, len, parse_special, ids, n);
    pthread_mutex_unlock(&c->mu);
    return n;
}

void tok_cache_stats(tok_cache_t *c, int64_t *hits, int64_t *lookups)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *lookups = c->lookups;
    pthread_mutex_unlock(&c->mu);
}
