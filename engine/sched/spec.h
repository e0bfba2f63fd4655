/*
 * spec — draft sources that need no model: n-gram lookup over a sequence's own history
 * (prompt + output); and the draft throttle: per slot, how many tokens to draft this round
 * given the measured acceptance and what verification costs at the current batch size. The
 * MTP drafter runs the model and lives with the engine (eng_spec.c).
 *
 * Thread safety: pure functions, or functions of the caller's structs only (one thread each).
 */
#ifndef DELTAD_SPEC_H
#define DELTAD_SPEC_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Find the most recent earlier occurrence of the last k tokens of hist[0 .. n) for k from k_max
 * down to k_min, and propose the tokens that followed it (at most max_draft, never past the end
 * of hist). Writes the draft to out and returns its length (0 = no match).
 */
int64_t spec_ngram_draft(const int32_t *hist, int64_t n, int64_t k_max, int64_t k_min,
                         int64_t max_draft, int32_t *out);

/* ---- the draft throttle ------------------------------------------------------------------- */

/* A linear cost model of one forward pass, t(n) = fixed + per_row * n seconds for n rows, fitted
 * to measured passes by least squares with exponentially decaying weights (the newest pass
 * weighs most; about the last 200 count). Until the passes seen differ enough in n to fit the
 * slope, per_row is taken as prior_ratio * fixed. */
#define SPEC_FIT_N 64 /* passes of up to this many rows are also timed by their size */

struct spec_fit {
    double s0, s1, s2, st, snt; /* decayed sums of 1, n, n^2, t, n t */
    double prior_ratio;
    double tn[SPEC_FIT_N + 1]; /* EWMA of the seconds of a pass of n rows (0 = none seen) */
};
void spec_fit_init(struct spec_fit *f, double prior_ratio);
void spec_fit_add(struct spec_fit *f, double n, double seconds);
/* The fitted model; false (and zeros) while no pass was seen. */
bool spec_fit_get(const struct spec_fit *f, double *fixed, double *per_row);
/* Seconds of a pass of n rows: as measured at that size (a CPU's cost grows unevenly with the
 * rows: the second may cost more than the third and fourth together); else interpolated
 * between the nearest measured sizes; else, beyond the largest measured size, as that one
 * (optimistic, so that longer drafts get tried and measured); else the linear model's; 0 when
 * nothing was seen. */
double spec_fit_time(const struct spec_fit *f, int64_t n);

/* What drafting costs a slot now, in units of one plain decode step at the current batch: */
#define SPEC_COST_K 16 /* draft lengths with a measured step cost (spec_cost.extra) */

struct spec_cost {
    double row; /* one more row in the target step (verification of one draft token) */
    double mtp; /* one MTP draft step (0 for drafters that run no model, e.g. n-gram) */
    /* with n_extra > 0: extra[k] = what k more rows add to the target step (k <= n_extra;
     * beyond, row per row more), instead of k * row */
    int64_t n_extra;
    double extra[SPEC_COST_K + 1];
};

/* Throttle states, as /slots shows them. */
enum spec_mode {
    SPEC_MODE_ON = 0,        /* drafting: the estimate says it pays */
    SPEC_MODE_THROTTLED = 1, /* not drafting: waiting for the next probe */
    SPEC_MODE_PROBE = 2,     /* one short draft to measure acceptance again */
};
const char *spec_mode_name(enum spec_mode m);

/* Per slot (owned by the engine thread). The acceptance estimate is an EWMA over draft tokens
 * of "this token was accepted, given that the tokens before it were" (the chance that each
 * next draft token survives), so its expected accepted length for a draft of k tokens is
 * a + a^2 + ... + a^k. Over the first tokens it is their running mean (with the prior worth
 * SPEC_THR_PRIOR_N tokens; with a pool, the pool holds the prior), so a new slot learns its
 * head fast without one unlucky draft throttling it. */
struct spec_thr {
    double acc;            /* the acceptance estimate, in [0, 1] */
    enum spec_mode mode;   /* after the last decision */
    int32_t wait;          /* rounds still to wait before the next probe (THROTTLED) */
    int32_t backoff;       /* log2 of the current wait between probes */
    int64_t n_obs;         /* draft tokens observed (a running mean over the first ones) */
    bool probe_hit;        /* the last probe's draft was accepted */
    struct spec_thr *pool; /* the engine's estimate over all slots (its acc and n_obs only),
                            * or NULL; borrowed */
    int64_t rounds_off;    /* rounds throttled (for monitoring) */
    int64_t n_throttles;   /* ON -> THROTTLED transitions */
    int64_t n_probes;
};

#define SPEC_THR_ACC0 0.5    /* the estimate of a new slot */
#define SPEC_THR_PRIOR_N 2   /* ... worth this many draft tokens */
#define SPEC_THR_POOL_N 4    /* the pool's estimate weighs like this many of the slot's tokens */
#define SPEC_THR_ALPHA 0.05  /* EWMA weight of one draft token */
#define SPEC_THR_MARGIN 0.02 /* drafting must promise at least this relative speed-up */
#define SPEC_THR_MAX_WAIT 64 /* longest wait between probes, in rounds */

void spec_thr_reset(struct spec_thr *t); /* pool: NULL */
/* The acceptance a decision uses: with a pool, the slot's estimate (worth as many tokens as it
 * has seen, at most 1 / SPEC_THR_ALPHA) shrunk towards the pool's (worth SPEC_THR_POOL_N): a
 * slot starts from what the other slots learnt of the same drafter, e.g. a random MTP head. */
double spec_thr_estimate(const struct spec_thr *t);
/* Expected speed of drafting k tokens relative to plain decoding (1 = the same), at
 * acceptance a under costs c: (1 + a + ... + a^k) / (1 + k (c->row + c->mtp)), with the
 * measured extra[k] in place of k * c->row where c has it. */
double spec_thr_gain(double a, int64_t k, const struct spec_cost *c);
/* This round's draft length for the slot, at most k_max (0 = none): the k that maximises
 * spec_thr_gain, while that beats plain decoding (by SPEC_THR_MARGIN to turn drafting back
 * on); else the slot is throttled and drafts nothing until its wait is over, then probes with
 * one token. The wait is 4 rounds, then 16 and 64 (SPEC_THR_MAX_WAIT) after probes that were
 * rejected, and ends at a round (the caller's count, the same for every slot) that is a
 * multiple of it, so that slots at the same back-off probe together. */
int64_t spec_thr_plan(struct spec_thr *t, const struct spec_cost *c, int64_t k_max, int64_t round);
/* After verifying n draft tokens of which the first m were accepted (a probe's token weighs
 * like 4 draft tokens: accepted probes can bring a slot back within two waits). */
void spec_thr_observe(struct spec_thr *t, int64_t n, int64_t m);
/* A draft attempt that gave no token (an MTP head too unsure to propose one): it cost a pass
 * for nothing, and weighs like 2 rejected draft tokens. */
void spec_thr_miss(struct spec_thr *t);

#endif
