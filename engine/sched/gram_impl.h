/*
 * gram_impl — the compiled grammar as gram.c builds it and gram_match.c walks it. Users include
 * gram.h only.
 *
 * Layout: every alternative of every rule is a run of elements in el[] closed by a GEL_END;
 * alt[] gives each alternative's first element, rule r owns alt[rule_alt0[r] .. + rule_nalt[r]).
 * Repetitions were expanded into generated rules, literals into one GEL_CHAR per character.
 */
#ifndef DELTAD_GRAM_IMPL_H
#define DELTAD_GRAM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "gram.h" // defines: gram_t

enum { GEL_END = 0, GEL_CHAR = 1, GEL_REF = 2 };

struct gram_el {
    uint8_t kind; /* GEL_* */
    uint32_t arg; /* GEL_CHAR: class index; GEL_REF: rule index */
};

/* A character class: a bitmap of its ASCII members and its sorted, disjoint code point ranges
 * (all members, ASCII included): ranges[r0 .. r0 + 2 * nr) as (lo, hi) pairs. */
struct gram_cls {
    uint32_t ascii[4];
    uint32_t r0, nr;
};

struct gram_mcache; /* gram_match.c */

struct gram {
    atomic_int refs;
    struct gram_el *el; /* [n_el] */
    uint32_t n_el;
    uint32_t *alt; /* [n_alt] first element of each alternative */
    uint32_t n_alt;
    uint32_t *rule_alt0, *rule_nalt; /* [n_rule] */
    uint32_t n_rule, root;
    struct gram_cls *cls; /* [n_cls] */
    uint32_t n_cls;
    uint32_t *ranges; /* [2 * n_ranges] */
    uint32_t n_ranges;
    /* the mask cache (gram_match.c), guarded by mu */
    pthread_mutex_t mu;
    struct gram_mcache *mc;
};

/* Count a compilation that took `seconds` (gram.c -> the statistics in gram_match.c). */
void gram__note_compile(double seconds, bool ok);

/* Free the mask cache (gram_release). */
void gram__mcache_free(struct gram_mcache *mc);

#endif
