/*
 * gram — constrained decoding: a GBNF-style grammar compiled into a byte-level pushdown
 * matcher, and the token masks that keep sampling inside it.
 *
 * The notation (llama.cpp's GBNF, docs/structured-output.md): `name ::= alternatives`, rules
 * separated by nothing but the next `name ::=`; alternatives `a | b`, sequences `a b`, groups
 * `( ... )`, string literals `"..."` with escapes (\n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH
 * \UHHHHHHHH), character classes `[a-z_]` with negation `[^"\\]`, `.` (any character), the
 * postfix operators `* + ? {m} {m,} {m,n}`, and `#` comments. The start rule is `root`.
 * Characters are Unicode code points; the matcher reads UTF-8 bytes (a token may end inside a
 * character; the pending bytes must still be able to complete a character the grammar allows).
 *
 * Matching is a set of persistent stacks (llama.cpp's design): a stack is a chain of nodes
 * (element position, return node), shared between stacks and never modified, so saving and
 * restoring a matcher's state copies a few node ids (speculation rolls back this way).
 * Left-recursive grammars are refused at compile time; a state with more than GRAM_MAX_STACKS
 * stacks (a grammar too ambiguous to follow) fails the matcher (gram_m_failed).
 *
 * Token masks: the vocabulary's byte strings form a trie (gram_vocab, built once per
 * tokenizer); a mask is one depth-first walk of it, pruned where the matcher dies, and cached
 * in the compiled grammar by a hash of the state's content (the stacks' element chains and the
 * pending UTF-8 bytes), so a state seen again — every character of a string value at the same
 * place in a schema — costs a copy; a walk does not expand again the characters that lead back
 * to the state it starts from (a string's character loop). End-of-generation tokens are allowed
 * only in accepting states; control tokens never.
 *
 * Ownership and threads: gram_t is immutable after gram_compile except for its mask cache
 * (behind its own mutex) and refcounted (gram_retain / gram_release, any thread). A gram_vocab_t
 * is immutable (any thread). A gram_m_t belongs to one thread at a time.
 */
#ifndef DELTAD_GRAM_H
#define DELTAD_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/tok.h" // defines: tok_t

#define GRAM_MAX_TEXT (1u << 20)     /* bytes of grammar text */
#define GRAM_MAX_RULES 65536         /* rules, the generated ones included */
#define GRAM_MAX_ELEMS (1u << 21)    /* elements after expanding repetitions */
#define GRAM_MAX_REPEAT 10000        /* m and n of {m,n} */
#define GRAM_MAX_NEST 128            /* nested groups */
#define GRAM_MAX_STACKS 4096         /* stacks in one matcher state */
#define GRAM_MAX_CLOSURE 200000      /* expansion steps of one character */
#define GRAM_CACHE_BYTES (16u << 20) /* mask cache of one grammar */

typedef struct gram gram_t;
typedef struct gram_vocab gram_vocab_t;
typedef struct gram_m gram_m_t;

/* Token kinds of a vocabulary. */
enum gram_tok_kind {
    GRAM_TOK_TEXT = 0, /* its bytes are grammar text */
    GRAM_TOK_EOG,      /* end of generation: allowed only in an accepting state */
    GRAM_TOK_NEVER,    /* control, unused, empty: never allowed */
};

/* Compile text[0 .. len) (need not be NUL-terminated) with start rule `start` (NULL = "root").
 * Returns 0 and *out (one reference, transferred) or DD_EINVAL with "line L, column C: what"
 * in err. */
int gram_compile(const char *text, size_t len, const char *start, gram_t **out, char *err,
                 size_t errlen);
void gram_retain(gram_t *g);
void gram_release(gram_t *g);
/* The 64-bit hash of a grammar text (the compile cache's key). */
uint64_t gram_hash(const char *text, size_t len);

/* A cache of compiled grammars keyed by the hash of their text (and the text itself), at most
 * cap entries, least recently used evicted. Thread-safe. */
typedef struct gram_cache gram_cache_t;
gram_cache_t *gram_cache_create(int cap);
/* gram_compile through the cache; *out is a new reference (gram_release). */
int gram_cache_get(gram_cache_t *c, const char *text, size_t len, const char *start, gram_t **out,
                   char *err, size_t errlen);
void gram_cache_destroy(gram_cache_t *c);

/* The vocabulary trie: piece[i][0 .. len[i]) are token i's bytes (copied), kind[i] its kind. */
gram_vocab_t *gram_vocab_create(int32_t n_vocab, const char *const *piece, const size_t *len,
                                const uint8_t *kind);
/* The same from a tokenizer: end-of-generation tokens EOG; control, unused and empty tokens
 * NEVER; the rest (user-defined ones such as </think> included) TEXT. */
gram_vocab_t *gram_vocab_from_tok(const tok_t *t);
int32_t gram_vocab_n(const gram_vocab_t *v);
/* uint32 words of a mask: ceil(n_vocab / 32). */
int64_t gram_vocab_words(const gram_vocab_t *v);
void gram_vocab_destroy(gram_vocab_t *v);

/* A matcher at the start of g (retains g). */
gram_m_t *gram_m_create(gram_t *g);
/* Feed bytes: all or nothing (false leaves the state unchanged). */
bool gram_m_accept_bytes(gram_m_t *m, const char *p, size_t n);
/* Feed token id's bytes (an EOG token: allowed in an accepting state, then nothing more is).
 * All or nothing, like gram_m_accept_bytes. */
bool gram_m_accept_token(gram_m_t *m, const gram_vocab_t *v, int32_t id);
/* The text so far is a complete sentence of the grammar (no UTF-8 character pending). */
bool gram_m_accepting(const gram_m_t *m);
/* An EOG token was accepted. */
bool gram_m_finished(const gram_m_t *m);
/* The grammar outgrew GRAM_MAX_STACKS or GRAM_MAX_CLOSURE somewhere (every later byte fails). */
bool gram_m_failed(const gram_m_t *m);
/* Save the state (a stack of saves); restore the last save; or forget it, keeping the state. */
void gram_m_push(gram_m_t *m);
void gram_m_pop(gram_m_t *m);
void gram_m_drop(gram_m_t *m);
/* The tokens allowed next: bit i of bits[i / 32] (bits [gram_vocab_words(v)]). Returns their
 * number. */
int64_t gram_m_mask(gram_m_t *m, const gram_vocab_t *v, uint32_t *bits);
void gram_m_destroy(gram_m_t *m);

/* Statistics since start-up (relaxed counters, any thread; the process's only grammar state):
 * histograms of compile time (gram_compile) and of the time of each gram_m_mask call (served
 * from the cache or walked), in seconds over the fixed bounds gram_hist_bound; the masks
 * computed by a trie walk and those served from a cache; matchers created (one per constrained
 * request in the engine). */
#define GRAM_HIST_BUCKETS 10
extern const double gram_hist_bound[GRAM_HIST_BUCKETS];
struct gram_hist {
    int64_t count[GRAM_HIST_BUCKETS + 1]; /* per bucket, not cumulative; the last is +Inf */
    int64_t n;
    double sum; /* seconds */
};
struct gram_stats {
    int64_t walks, hits, matchers, compiles, compile_errors;
    double walk_seconds;
    struct gram_hist compile, mask;
};
void gram_get_stats(struct gram_stats *s);

#endif
