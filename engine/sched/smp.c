/*
 * smp — logit bias, penalties, greedy / temperature / top-k / top-p / min-p sampling with a
 * seeded RNG (contract and the order of the steps in smp.h).
 *
 * smp_sample and smp_probs share every step but the last: adjust() writes the biased and
 * penalised row into s->logits, filter() turns it into weighted candidates, and only then does
 * smp_sample draw while smp_probs normalises. So the distribution a test reads is, bit for
 * bit, the one the engine draws from (plain decoding and speculative verification alike: both
 * go through smp_sample).
 *
 * Invariants: s->count is all zero between calls (adjust() clears what it set); ties in
 * sorting break towards the lower id, so results are reproducible. Thread: the caller's (one
 * at a time per sampler).
 */
#include "smp.h" // defines: smp_sample

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, ASSERT

void smp_init(struct smp *s, int64_t n_vocab, const struct smp_params *p)
{
    s->n_vocab = n_vocab;
    s->logits = xmalloc((size_t)n_vocab * sizeof *s->logits);
    s->count = xcalloc((size_t)n_vocab, sizeof *s->count);
    s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
    smp_set(s, p);
}

void smp_set(struct smp *s, const struct smp_params *p)
{
    s->p = *p;
    /* splitmix64 of the seed gives a well-mixed, non-zero xorshift state */
    uint64_t z = p->seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s->rng = (z ^ (z >> 31)) | 1;
}

void smp_deinit(struct smp *s)
{
    free(s->logits);
    free(s->count);
    free(s->cand);
    s->logits = NULL;
    s->count = NULL;
    s->cand = NULL;
}

double smp_uniform(struct smp *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (double)((s->rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

int32_t smp_argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

/* ---- step 1-2: logit bias and penalties ------------------------------------------------- */

/* The penalties of one token that occurs c > 0 times in the history. */
static float penalise(const struct smp_params *p, float l, int32_t c)
{
    if (p->repetition_penalty != 1 && p->repetition_penalty != 0)
        l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
    return l - (p->presence_penalty + p->frequency_penalty * (float)c);
}

/* Is adjust() the identity for parameters p? */
static bool adjust_is_identity(const struct smp_params *p)
{
    bool rep = p->repetition_penalty != 1 && p->repetition_penalty != 0;
    return p->n_logit_bias == 0 && p->presence_penalty == 0 && p->frequency_penalty == 0 && !rep;
}

bool smp_is_argmax(const struct smp *s)
{
    return s->p.temperature <= 0.0f && adjust_is_identity(&s->p);
}

/* logits + bias, then penalties over hist, into s->logits. Counting first and applying once
 * per distinct token costs O(n_hist), not O(n_vocab); each token's result depends only on its
 * own count, so the order of the tokens does not matter. */
static void adjust(struct smp *s, const float *logits, const int32_t *hist, int64_t n_hist)
{
    const struct smp_params *p = &s->p;
    memcpy(s->logits, logits, (size_t)s->n_vocab * sizeof *s->logits);
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        s->logits[p->logit_bias[i].id] += p->logit_bias[i].bias;
    bool rep = p->repetition_penalty != 1 && p->repetition_penalty != 0;
    if (p->presence_penalty == 0 && p->frequency_penalty == 0 && !rep)
        return;
    for (int64_t i = 0; i < n_hist; i++) {
        ASSERT(hist[i] >= 0 && hist[i] < s->n_vocab);
        s->count[hist[i]]++;
    }
    for (int64_t i = 0; i < n_hist; i++) {
        int32_t t = hist[i];
        if (s->count[t] == 0)
            continue; /* already applied */
        s->logits[t] = penalise(p, s->logits[t], s->count[t]);
        s->count[t] = 0;
    }
}

/* ---- step 4: temperature, top-k, top-p, min-p ------------------------------------------- */

/* Probability descending, then id ascending: a total order, so sampling is reproducible. */
static int cand_cmp(const void *a, const void *b)
{
    const struct smp_cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Move the k best candidates to the front, sorted. Small k: selection; large k: full sort. */
static void select_top(struct smp_cand *c, int64_t n, int64_t k)
{
    if (k > 64) {
        qsort(c, (size_t)n, sizeof *c, cand_cmp);
        return;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t best = i;
        for (int64_t j = i + 1; j < n; j++)
            if (cand_cmp(&c[j], &c[best]) < 0)
                best = j;
        struct smp_cand t = c[i];
        c[i] = c[best];
        c[best] = t;
    }
}

/* Number of leading sorted candidates that survive top-p and min-p (both cut a prefix; the
 * shorter one wins). */
static int64_t cut_tail(const struct smp *s, int64_t m)
{
    double cum = 0.0;
    for (int64_t i = 0; i < m; i++) {
        if (s->p.min_p > 0.0f && s->cand[i].p < s->p.min_p * s->cand[0].p)
            return i > 0 ? i : 1;
        cum += s->cand[i].p;
        if (s->p.top_p < 1.0f && cum >= s->p.top_p)
            return i + 1;
    }
    return m;
}

/* Weighted candidates of s->logits (temperature > 0): s->cand[0 .. m) with weights summing to
 * *sum; returns m. Unfiltered, the candidates are every token in id order with unnormalised
 * weights; filtered, the survivors in sorted order. */
static int64_t filter(struct smp *s, double *sum)
{
    const int64_t n = s->n_vocab;
    const float *l = s->logits;
    const float mx = l[smp_argmax(l, n)];
    *sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->cand[i].id = (int32_t)i;
        s->cand[i].p = expf((l[i] - mx) / s->p.temperature);
        *sum += s->cand[i].p;
    }
    if (s->p.top_k <= 0 && s->p.top_p >= 1.0f && s->p.min_p <= 0.0f)
        return n;
    int64_t m = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    select_top(s->cand, n, m);
    for (int64_t i = 0; i < m; i++)
        s->cand[i].p = (float)(s->cand[i].p / *sum);
    m = cut_tail(s, m);
    *sum = 0.0;
    for (int64_t i = 0; i < m; i++)
        *sum += s->cand[i].p;
    return m;
}

/* ---- step 3 and 5: greedy or one draw --------------------------------------------------- */

int32_t smp_sample(struct smp *s, const float *logits, const int32_t *hist, int64_t n_hist)
{
    adjust(s, logits, hist, n_hist);
    if (s->p.temperature <= 0.0f)
        return smp_argmax(s->logits, s->n_vocab);
    double sum;
    int64_t m = filter(s, &sum);
    double r = smp_uniform(s) * sum;
    for (int64_t i = 0; i < m; i++) {
        r -= s->cand[i].p;
        if (r < 0.0)
            return s->cand[i].id;
    }
    return s->cand[m - 1].id;
}

void smp_probs(struct smp *s, const float *logits, const int32_t *hist, int64_t n_hist,
               double *probs)
{
    adjust(s, logits, hist, n_hist);
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (s->p.temperature <= 0.0f) {
        probs[smp_argmax(s->logits, s->n_vocab)] = 1.0;
        return;
    }
    double sum;
    int64_t m = filter(s, &sum);
    for (int64_t i = 0; i < m; i++)
        probs[s->cand[i].id] = s->cand[i].p / sum;
}
