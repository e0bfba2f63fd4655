/*
 * spec — n-gram drafts (contract in spec.h).
 *
 * The search scans backwards so the most recent match wins: recent context is the best predictor
 * in echo / edit workloads (code refactors, quoting the prompt). Cost O(n * k) per call, which is
 * small next to a forward step for contexts of a few thousand tokens.
 */
#include "spec.h" // defines: spec_ngram_draft

#include <string.h>

int64_t spec_ngram_draft(const int32_t *hist, int64_t n, int64_t k_max, int64_t k_min,
                         int64_t max_draft, int32_t *out)
{
    if (k_min < 1)
        k_min = 1;
    for (int64_t k = k_max; k >= k_min; k--) {
        if (k >= n)
            continue;
        const int32_t *key = hist + n - k;
        /* candidate starts i: the match hist[i .. i+k) must end before the key starts */
        for (int64_t i = n - k - 1; i >= 0; i--) {
            if (memcmp(hist + i, key, (size_t)k * sizeof *hist) != 0)
                continue;
            int64_t avail = n - (i + k), len = avail < max_draft ? avail : max_draft;
            memcpy(out, hist + i + k, (size_t)len * sizeof *out);
            return len;
        }
    }
    return 0;
}
