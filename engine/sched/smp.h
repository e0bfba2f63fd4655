/*
 * smp — the sampler: turn a logits row into a token. Everything that shapes the distribution
 * lives here: logit bias, the presence / frequency / repetition penalties, temperature, top-k,
 * top-p, min-p, and the per-request seeded RNG (STYLE rule 29).
 *
 * One parameter type, struct smp_params, travels unchanged from the API layer (api.c fills
 * it) through the engine request (eng_req_params.s) to the sampler.
 *
 * The pipeline of one draw, in this order:
 *   1. l = logits + logit bias (entries applied in order; a repeated id adds up);
 *   2. for every token t that occurs c > 0 times in the history (the request's generated
 *      tokens, given by the caller): l[t] = l[t] > 0 ? l[t] / rep : l[t] * rep (repetition,
 *      when rep != 1), then l[t] -= presence + frequency * c;
 *   3. temperature 0: the argmax of l (the lowest id among ties), no RNG draw;
 *   4. otherwise p = softmax(l / temperature); when any of top-k / top-p / min-p is on: keep
 *      the top_k most probable (probability descending, id ascending), then the shortest
 *      prefix of those whose mass under p (not renormalised after top-k) reaches top_p, then
 *      drop the ones below min_p * the best (the best one always stays); renormalise over
 *      what is left;
 *   5. one uniform draw from the RNG picks the token (candidates walked in id order when no
 *      filter is on, in the sorted order otherwise).
 * smp_probs writes the distribution of step 4 (one-hot for step 3) from the same code that
 * smp_sample draws with, so tests can compare it with an independent reference.
 *
 * Memory: smp_init allocates the per-slot scratch once (n_vocab entries); sampling allocates
 * nothing. Thread: a sampler belongs to one slot and is driven by one thread at a time (the
 * engine thread in the daemon).
 */
#ifndef DELTAD_SAMPLER_H
#define DELTAD_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct smp_logit_bias {
    int32_t id; /* 0 .. n_vocab - 1 (the API layer checks) */
    float bias; /* added to the logit before the penalties */
};

/* Sampling parameters of one request. A plain value; the logit_bias array is owned by whoever
 * holds the struct said to own it (the api_req, then the engine request) and only borrowed by
 * struct smp. */
struct smp_params {
    float temperature;        /* 0 = greedy */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float presence_penalty;   /* OpenAI: subtracted once from every token in the history */
    float frequency_penalty;  /* OpenAI: subtracted once per occurrence in the history */
    float repetition_penalty; /* multiplicative (llama.cpp), 1 = off; 0 is treated as off too,
                               * so zero-initialised parameters apply no penalty */
    int32_t n_logit_bias;
    struct smp_logit_bias *logit_bias; /* [n_logit_bias] */
    uint64_t seed;                     /* the RNG restarts from it in smp_init / smp_set */
};

struct smp_cand {
    float p;
    int32_t id;
};

struct smp {
    struct smp_params p; /* logit_bias borrowed: valid until the next smp_set */
    uint64_t rng;        /* xorshift64* state, never 0 */
    int64_t n_vocab;
    float *logits;         /* [n_vocab] the last row after bias and penalties (logprobs read it) */
    int32_t *count;        /* [n_vocab] scratch occurrence counts, all zero between calls */
    struct smp_cand *cand; /* [n_vocab] candidates */
};

/* Allocate the scratch for a vocabulary of n_vocab and take parameters p (see smp_set). */
void smp_init(struct smp *s, int64_t n_vocab, const struct smp_params *p);
/* New parameters (copied; p->logit_bias borrowed) and the RNG restarted from p->seed: a new
 * request on a reused slot. */
void smp_set(struct smp *s, const struct smp_params *p);
/* Index of the largest logit (the lowest index among ties). */
int32_t smp_argmax(const float *logits, int64_t n);
/* Is smp_sample the plain argmax of the row it is given (temperature 0, no logit bias, no
 * penalty: step 3 on an unchanged row)? Then a caller may take the argmax elsewhere (on the
 * device) and skip the row; s->logits is then not written. */
bool smp_is_argmax(const struct smp *s);
/* Sample one token from logits [n_vocab] (not modified), penalising the tokens of
 * hist[0 .. n_hist) (borrowed for the call; each id in 0 .. n_vocab - 1; NULL when n_hist is 0).
 * Uses one RNG draw unless the temperature is 0. Leaves the adjusted row in s->logits. */
int32_t smp_sample(struct smp *s, const float *logits, const int32_t *hist, int64_t n_hist);
/* The distribution smp_sample would draw from for the same arguments: probs [n_vocab] gets
 * every token's probability (0 for the filtered-out ones). Does not touch the RNG. */
void smp_probs(struct smp *s, const float *logits, const int32_t *hist, int64_t n_hist,
               double *probs);
/* Uniform double in [0, 1) from the sampler's RNG. */
double smp_uniform(struct smp *s);
void smp_deinit(struct smp *s);

#endif
