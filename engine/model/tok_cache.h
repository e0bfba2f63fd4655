/*
 * tok_cache — encodings of long texts kept for the next request that sends the same text: a
 * chat application sends its system prompt, thousands of tokens, with every request, and
 * encoding it again costs about a microsecond per token (4 ms for 3,500 on the demo model's
 * host), as much as the prompt cache leaves of that request's time to first token (issue 36).
 *
 * An entry is (text bytes, parse_special) -> ids; tok_encode is a pure function of those, so
 * a hit is exact: found by a hash, confirmed by comparing the bytes. Texts shorter than
 * min_bytes are not kept (encoding them is cheap); at most max_bytes of texts and ids are, the
 * least recently used dropped first.
 *
 * Thread safety: every call may run on any thread (one mutex; encoding happens outside it).
 */
#ifndef DELTAD_TOK_CACHE_H
#define DELTAD_TOK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok.h" // defines: tok_t

typedef struct tok_cache tok_cache_t;

tok_cache_t *tok_cache_create(size_t min_bytes, size_t max_bytes);
/* tok_encode through the cache (the same contract, t the same tokenizer every call). */
int64_t tok_cache_encode(tok_cache_t *c, const tok_t *t, const char *text, size_t len,
                         bool parse_special, int32_t *ids, int64_t max_ids);
/* Lookups that were answered from the cache, and all lookups of texts long enough to keep. */
void tok_cache_stats(tok_cache_t *c, int64_t *hits, int64_t *lookups);
void tok_cache_destroy(tok_cache_t *c);

#endif
