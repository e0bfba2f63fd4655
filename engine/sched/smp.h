/*
 * smp — turn a logits row into a token: greedy fast path, temperature, top-k, top-p,
 * min-p, with a per-request seeded RNG (STYLE rule 29). Penalties and logit bias arrive with
 * the daemon (issue "The daemon").
 *
 * Memory: smp_init allocates the per-slot scratch once (n_vocab entries); sampling allocates
 * nothing. Thread: a sampler belongs to one slot, driven by the engine thread.
 */
#ifndef DELTAD_SAMPLER_H
#define DELTAD_SAMPLER_H

#include <stdint.h>

struct smp_cand {
    float p;
    int32_t id;
};

struct smp_params {
    float temperature; /* 0 = greedy */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
};

struct smp {
    struct smp_params p;
    uint64_t rng; /* xorshift64* state, never 0 */
    int64_t n_vocab;
    struct smp_cand *cand; /* [n_vocab] candidates */
};

void smp_init(struct smp *s, int64_t n_vocab, const struct smp_params *p);
void smp_deinit(struct smp *s);
/* Restart the RNG from a seed (a new request on a reused slot). */
void smp_reseed(struct smp *s, uint64_t seed);
/* Index of the largest logit (the lowest index among ties). */
int32_t smp_argmax(const float *logits, int64_t n);
/* Sample one token from logits [n_vocab] (not modified). */
int32_t smp_sample(struct smp *s, const float *logits);
/* Uniform double in [0, 1) from the sampler's RNG. */
double smp_uniform(struct smp *s);

#endif
