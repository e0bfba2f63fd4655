/*
 * smp — greedy / temperature / top-k / top-p / min-p sampling (contract in smp.h).
 *
 * Order of the filters: temperature-scaled softmax, top-k, top-p (smallest prefix of the sorted
 * candidates whose mass reaches top_p), min-p (drop candidates below min_p * best), renormalise,
 * draw. Ties in sorting break towards the lower id, so results are reproducible.
 */
#include "smp.h" // defines: smp_sample

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "engine/util.h" // defines: xmalloc

void smp_init(struct smp *s, int64_t n_vocab, const struct smp_params *p)
{
    s->p = *p;
    s->n_vocab = n_vocab;
    smp_reseed(s, p->seed);
    s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
}

void smp_reseed(struct smp *s, uint64_t seed)
{
    /* splitmix64 of the seed gives a well-mixed, non-zero xorshift state */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s->rng = (z ^ (z >> 31)) | 1;
}

void smp_deinit(struct smp *s)
{
    free(s->cand);
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

/* Number of leading sorted candidates that survive top-p and min-p. */
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

int32_t smp_sample(struct smp *s, const float *logits)
{
    const int64_t n = s->n_vocab;
    if (s->p.temperature <= 0.0f)
        return smp_argmax(logits, n);
    const float mx = logits[smp_argmax(logits, n)];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->cand[i].id = (int32_t)i;
        s->cand[i].p = expf((logits[i] - mx) / s->p.temperature);
        sum += s->cand[i].p;
    }
    int64_t m = n;
    bool filtered = s->p.top_k > 0 || s->p.top_p < 1.0f || s->p.min_p > 0.0f;
    if (filtered) {
        m = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
        select_top(s->cand, n, m);
        for (int64_t i = 0; i < m; i++)
            s->cand[i].p = (float)(s->cand[i].p / sum);
        m = cut_tail(s, m);
        sum = 0.0;
        for (int64_t i = 0; i < m; i++)
            sum += s->cand[i].p;
    }
    double r = smp_uniform(s) * sum;
    for (int64_t i = 0; i < m; i++) {
        r -= s->cand[i].p;
        if (r < 0.0)
            return s->cand[i].id;
    }
    return s->cand[m - 1].id;
}
