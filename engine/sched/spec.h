/*
 * spec — draft sources that need no model: n-gram lookup over a sequence's own history
 * (prompt + output). The MTP drafter runs the model and lives with the engine (eng_spec.c).
 *
 * Thread safety: pure functions.
 */
#ifndef DELTAD_SPEC_H
#define DELTAD_SPEC_H

#include <stdint.h>

/*
 * Find the most recent earlier occurrence of the last k tokens of hist[0 .. n) for k from k_max
 * down to k_min, and propose the tokens that followed it (at most max_draft, never past the end
 * of hist). Writes the draft to out and returns its length (0 = no match).
 */
int64_t spec_ngram_draft(const int32_t *hist, int64_t n, int64_t k_max, int64_t k_min,
                         int64_t max_draft, int32_t *out);

#endif
