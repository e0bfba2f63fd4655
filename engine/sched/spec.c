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

/* ---- the draft throttle ------------------------------------------------------------------- */

#define FIT_DECAY 0.995 /* weight of a pass after 200 newer ones: 0.37 */

void spec_fit_init(struct spec_fit *f, double prior_ratio)
{
    *f = (struct spec_fit){.prior_ratio = prior_ratio};
}

void spec_fit_add(struct spec_fit *f, double n, double seconds)
{
    f->s0 = FIT_DECAY * f->s0 + 1.0;
    f->s1 = FIT_DECAY * f->s1 + n;
    f->s2 = FIT_DECAY * f->s2 + n * n;
    f->st = FIT_DECAY * f->st + seconds;
    f->snt = FIT_DECAY * f->snt + n * seconds;
    int64_t i = (int64_t)n;
    if (i >= 1 && i <= SPEC_FIT_N)
        f->tn[i] = f->tn[i] > 0.0 ? f->tn[i] + 0.1 * (seconds - f->tn[i]) : seconds;
}

double spec_fit_time(const struct spec_fit *f, int64_t n)
{
    int64_t lo = n < SPEC_FIT_N ? n : SPEC_FIT_N, hi = lo + 1;
    while (lo >= 1 && f->tn[lo] <= 0.0)
        lo--;
    if (lo == n)
        return f->tn[n];
    while (hi <= SPEC_FIT_N && f->tn[hi] <= 0.0)
        hi++;
    if (lo >= 1 && hi <= SPEC_FIT_N) /* between two measured sizes */
        return f->tn[lo] + (f->tn[hi] - f->tn[lo]) * (double)(n - lo) / (double)(hi - lo);
    if (lo >= 1) /* beyond the largest measured: as that one (optimistic) */
        return f->tn[lo];
    double w, c;
    return spec_fit_get(f, &w, &c) ? w + c * (double)n : 0.0;
}

bool spec_fit_get(const struct spec_fit *f, double *fixed, double *per_row)
{
    *fixed = *per_row = 0.0;
    if (f->s0 <= 0.0)
        return false;
    double mn = f->s1 / f->s0, mt = f->st / f->s0;
    double var = f->s2 / f->s0 - mn * mn;
    double slope = -1.0;
    if (var > 0.1) /* the passes differ enough in size to see the slope */
        slope = (f->snt / f->s0 - mn * mt) / var;
    if (slope >= 0.0 && mt - slope * mn > 0.0) {
        *per_row = slope;
        *fixed = mt - slope * mn;
    } else { /* mt = fixed (1 + ratio mn) */
        *fixed = mt / (1.0 + f->prior_ratio * mn);
        *per_row = f->prior_ratio * *fixed;
    }
    return true;
}

const char *spec_mode_name(enum spec_mode m)
{
    return m == SPEC_MODE_ON ? "on" : m == SPEC_MODE_THROTTLED ? "throttled" : "probe";
}

void spec_thr_reset(struct spec_thr *t)
{
    *t = (struct spec_thr){.acc = SPEC_THR_ACC0, .mode = SPEC_MODE_ON};
}

double spec_thr_gain(double a, int64_t k, const struct spec_cost *c)
{
    double tokens = 1.0, p = 1.0;
    for (int64_t i = 0; i < k; i++)
        tokens += p *= a;
    double rows = (double)k * c->row;
    if (c->n_extra > 0) {
        int64_t j = k < c->n_extra ? k : c->n_extra;
        rows = c->extra[j] + (double)(k - j) * c->row;
    }
    return tokens / (1.0 + rows + (double)k * c->mtp);
}

/* The best draft length up to k_max and its gain. */
static int64_t best_k(double a, const struct spec_cost *c, int64_t k_max, double *gain)
{
    int64_t k = 0;
    *gain = 1.0;
    for (int64_t i = 1; i <= k_max; i++) {
        double g = spec_thr_gain(a, i, c);
        if (g > *gain)
            *gain = g, k = i;
    }
    return k;
}

/* Wait until the next round that is a multiple of 2^backoff (at least one round away), so that
 * the throttled slots of an engine at the same back-off probe in the same round: one MTP pass
 * for all of them. */
static void set_wait(struct spec_thr *t, int64_t round)
{
    int64_t w = (int64_t)1 << t->backoff;
    w = w < SPEC_THR_MAX_WAIT ? w : SPEC_THR_MAX_WAIT;
    t->wait = (int32_t)((round / w + 1) * w - round); /* this round and the ones before next */
}

int64_t spec_thr_plan(struct spec_thr *t, const struct spec_cost *c, int64_t k_max, int64_t round)
{
    if (k_max < 1)
        return 0;
    double gain;
    int64_t k = best_k(spec_thr_estimate(t), c, k_max, &gain);
    /* hysteresis: drafting stays on while it pays at all, and comes back with a margin */
    if (k > 0 && gain >= (t->mode == SPEC_MODE_ON ? 1.0 : 1.0 + SPEC_THR_MARGIN)) {
        t->mode = SPEC_MODE_ON;
        t->backoff = 0;
        return k;
    }
    if (t->mode == SPEC_MODE_ON) { /* it stopped paying: probe within 4 rounds */
        t->n_throttles++;
        t->backoff = 2;
        set_wait(t, round);
    } else if (t->mode == SPEC_MODE_PROBE) { /* a probe that did not bring drafting back: */
        if (!t->probe_hit) /* the wait grows, 4, 16, 64 rounds, unless the probe was accepted */
            t->backoff = t->backoff < 4 ? t->backoff + 2 : 6;
        set_wait(t, round);
    }
    if (t->wait > 0) {
        t->wait--;
        t->mode = SPEC_MODE_THROTTLED;
        t->rounds_off++;
        return 0;
    }
    t->mode = SPEC_MODE_PROBE;
    t->probe_hit = false;
    t->n_probes++;
    return 1;
}

/* Fold one draft token's outcome into the estimate with weight w (in units of SPEC_THR_ALPHA):
 * a running mean over the first tokens (the prior counts as SPEC_THR_PRIOR_N of them, unless
 * a pool holds it), an EWMA after them. */
static void fold_one(struct spec_thr *t, double x, double w)
{
    /* with a pool, the pool carries the prior: the slot's own part is its tokens' mean */
    double prior = t->pool ? 0.0 : SPEC_THR_PRIOR_N;
    double a = w * SPEC_THR_ALPHA, mean = 1.0 / ((double)t->n_obs + prior + 1.0);
    a = a > mean ? a : mean;
    t->acc += (a < 1.0 ? a : 1.0) * (x - t->acc);
    t->n_obs++;
}

/* ... into the slot's estimate and the engine's pool. */
static void fold(struct spec_thr *t, double x, double w)
{
    fold_one(t, x, w);
    if (t->pool)
        fold_one(t->pool, x, w);
}

double spec_thr_estimate(const struct spec_thr *t)
{
    if (!t->pool)
        return t->acc;
    double n = (double)t->n_obs < 1.0 / SPEC_THR_ALPHA ? (double)t->n_obs : 1.0 / SPEC_THR_ALPHA;
    return (n * t->acc + SPEC_THR_POOL_N * t->pool->acc) / (n + SPEC_THR_POOL_N);
}

void spec_thr_miss(struct spec_thr *t)
{
    fold(t, 0.0, 1.0);
    fold(t, 0.0, 1.0);
}

void spec_thr_observe(struct spec_thr *t, int64_t n, int64_t m)
{
    /* a probe is the only evidence for a while: it weighs four tokens */
    double w = t->mode == SPEC_MODE_PROBE ? 4.0 : 1.0;
    for (int64_t i = 0; i < n && i <= m; i++) /* the accepted tokens, then the first rejected */
        fold(t, i < m ? 1.0 : 0.0, w);
    if (t->mode == SPEC_MODE_PROBE && m > 0)
        t->probe_hit = true;
}
