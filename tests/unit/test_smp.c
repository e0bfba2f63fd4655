/*
 * test_smp — engine/sched/smp.c against a reference written here, independently, in plain
 * double precision: logit bias, presence / frequency / repetition penalties over a token
 * history, temperature, top-k, top-p, min-p and their combinations, on small vocabularies with
 * hand-chosen logits.
 *
 * Each case is checked twice: (a) smp_probs, the distribution the sampler draws from, must
 * match the reference to 1e-5; (b) N seeded smp_sample draws must fit the reference by a
 * chi-square bound far looser than any honest deviation (fixed seeds, so the test is
 * deterministic anyway), and a token the reference gives no mass must never be drawn. A few
 * cases have exact answers worked out by hand (logits {0, ln 2, ln 3} give {1/6, 2/6, 3/6}).
 * Also: greedy is the argmax with ties to the lowest id and draws nothing from the RNG, top_k
 * = 1 is greedy, the same seed gives the same tokens, and the scratch counts are left zeroed.
 */
#include <math.h>
#include <stdint.h>

#include "engine/sched/smp.h" // defines: smp_init, smp_sample, smp_probs, smp_set
#include "test.h"

#define MAXV 128
#define N_DRAWS 200000
#define NEVER 1e-9 /* reference mass below this: the token must never be drawn */

/* ---- the reference ------------------------------------------------------------------------ */

/* Logit bias, then the penalties of every token that occurs in hist, in double. */
static void ref_adjust(const struct smp_params *p, const float *logits, int V, const int32_t *hist,
                       int n_hist, double *l)
{
    for (int v = 0; v < V; v++)
        l[v] = logits[v];
    for (int i = 0; i < p->n_logit_bias; i++)
        l[p->logit_bias[i].id] += p->logit_bias[i].bias;
    for (int v = 0; v < V; v++) {
        int c = 0;
        for (int i = 0; i < n_hist; i++)
            c += hist[i] == v;
        if (c == 0)
            continue;
        double rep = p->repetition_penalty;
        if (rep != 1 && rep != 0)
            l[v] = l[v] > 0 ? l[v] / rep : l[v] * rep;
        l[v] -= p->presence_penalty + (double)p->frequency_penalty * c;
    }
}

/* The distribution the sampler should draw from. Also checks that the case keeps clear of the
 * top-p and min-p thresholds, where float and double could honestly disagree. */
static void ref_dist(const struct smp_params *p, const float *logits, int V, const int32_t *hist,
                     int n_hist, double *out)
{
    double l[MAXV], w[MAXV], sum = 0;
    ref_adjust(p, logits, V, hist, n_hist, l);
    int best = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[best])
            best = v;
    for (int v = 0; v < V; v++)
        out[v] = v == best;
    if (p->temperature <= 0)
        return;
    for (int v = 0; v < V; v++)
        sum += w[v] = exp((l[v] - l[best]) / p->temperature);
    /* order: probability descending, id ascending (insertion sort) */
    int ord[MAXV];
    for (int v = 0; v < V; v++) {
        int i = v;
        while (i > 0 && (w[ord[i - 1]] < w[v] || (w[ord[i - 1]] == w[v] && ord[i - 1] > v))) {
            ord[i] = ord[i - 1];
            i--;
        }
        ord[i] = v;
    }
    int keep = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    double cum = 0;
    for (int i = 0; i < keep && p->top_p < 1; i++) {
        cum += w[ord[i]] / sum;
        CHECK(fabs(cum - p->top_p) > 1e-4);
        if (cum >= p->top_p)
            keep = i + 1;
    }
    for (int i = 1; i < keep && p->min_p > 0; i++) {
        CHECK(fabs(w[ord[i]] - p->min_p * w[ord[0]]) > 1e-4 * w[ord[0]]);
        if (w[ord[i]] < p->min_p * w[ord[0]])
            keep = i;
    }
    double kept = 0;
    for (int i = 0; i < keep; i++)
        kept += w[ord[i]];
    for (int v = 0; v < V; v++)
        out[v] = 0;
    for (int i = 0; i < keep; i++)
        out[ord[i]] = w[ord[i]] / kept;
}

/* ---- checks against it -------------------------------------------------------------------- */

/* Pearson's statistic of N draws against ref; tokens with no reference mass must not appear. */
static double chi_square(const int64_t *obs, const double *ref, int V, int64_t n, int *df)
{
    double x2 = 0;
    *df = -1;
    for (int v = 0; v < V; v++) {
        if (ref[v] < NEVER) {
            CHECK_EQ(obs[v], 0);
            continue;
        }
        double e = (double)n * ref[v];
        x2 += (obs[v] - e) * (obs[v] - e) / e;
        ++*df;
    }
    return x2;
}

/* A bound no honest sampler reaches: the mean plus about 8 standard deviations. */
static double chi_bound(int df)
{
    return df + 8 * sqrt(2.0 * (df > 0 ? df : 1)) + 8;
}

/* Compare the sampler with the reference for one case: (a) smp_probs, (b) seeded draws. Returns
 * the reference in ref (may be NULL). */
static void check_case(const char *name, const struct smp_params *p, const float *logits, int V,
                       const int32_t *hist, int n_hist, double *ref_out)
{
    double ref[MAXV], got[MAXV];
    ref_dist(p, logits, V, hist, n_hist, ref);
    struct smp s;
    smp_init(&s, V, p);
    smp_probs(&s, logits, hist, n_hist, got);
    double sum = 0;
    for (int v = 0; v < V; v++) {
        CHECK_NEAR(got[v], ref[v], 1e-5);
        sum += got[v];
    }
    CHECK_NEAR(sum, 1.0, 1e-9);
    int64_t obs[MAXV] = {0};
    for (int i = 0; i < N_DRAWS; i++) {
        int32_t t = smp_sample(&s, logits, hist, n_hist);
        CHECK(t >= 0 && t < V);
        obs[t >= 0 && t < V ? t : 0]++;
    }
    for (int v = 0; v < V; v++)
        CHECK_EQ(s.count[v], 0); /* the scratch is left zeroed */
    int df;
    double x2 = chi_square(obs, ref, V, N_DRAWS, &df);
    printf("  %-22s chi2 %7.2f (df %d, bound %.1f)\n", name, x2, df, chi_bound(df));
    CHECK(x2 < chi_bound(df));
    smp_deinit(&s);
    if (ref_out)
        for (int v = 0; v < V; v++)
            ref_out[v] = ref[v];
}

/* Parameters with everything off but the temperature. */
static struct smp_params plain(float temperature, uint64_t seed)
{
    return (struct smp_params){
        .temperature = temperature, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = seed};
}

/* ln 1 .. ln 6: probabilities proportional to 1 .. 6 at temperature 1. */
static const float LN6[6] = {0.0f, 0.69314718f, 1.09861229f, 1.38629436f, 1.60943791f, 1.79175947f};

/* ---- hand-computed cases ------------------------------------------------------------------ */

TEST(exact_softmax)
{
    const float l[3] = {0.0f, 0.69314718f, 1.09861229f};
    struct smp_params p = plain(1.0f, 1);
    double r[MAXV];
    check_case("softmax {0,ln2,ln3}", &p, l, 3, NULL, 0, r);
    CHECK_NEAR(r[0], 1.0 / 6, 1e-6);
    CHECK_NEAR(r[1], 2.0 / 6, 1e-6);
    CHECK_NEAR(r[2], 3.0 / 6, 1e-6);
}

TEST(exact_temperature)
{
    /* ln {1, 2, 4} at T = 0.5: weights {1, 4, 16}; at T = 2: {1, sqrt 2, 2} */
    const float l[3] = {0.0f, 0.69314718f, 1.38629436f};
    struct smp_params p = plain(0.5f, 2);
    double r[MAXV];
    check_case("temperature 0.5", &p, l, 3, NULL, 0, r);
    CHECK_NEAR(r[0], 1.0 / 21, 1e-6);
    CHECK_NEAR(r[1], 4.0 / 21, 1e-6);
    CHECK_NEAR(r[2], 16.0 / 21, 1e-6);
    p = plain(2.0f, 3);
    check_case("temperature 2", &p, l, 3, NULL, 0, r);
    CHECK_NEAR(r[0], 1 / (3 + sqrt(2.0)), 1e-6);
    CHECK_NEAR(r[1], sqrt(2.0) / (3 + sqrt(2.0)), 1e-6);
    CHECK_NEAR(r[2], 2 / (3 + sqrt(2.0)), 1e-6);
}

TEST(exact_top_k)
{
    struct smp_params p = plain(1.0f, 4);
    p.top_k = 3; /* {1..6}: keep 4, 5, 6 of 15 */
    double r[MAXV];
    check_case("top_k 3", &p, LN6, 6, NULL, 0, r);
    for (int v = 0; v < 3; v++)
        CHECK(r[v] == 0);
    for (int v = 3; v < 6; v++)
        CHECK_NEAR(r[v], (v + 1) / 15.0, 1e-6);
}

TEST(exact_top_p)
{
    /* {1..6}/21 sorted: 6, 5, 4 ... cumulative .286, .524, .714: top_p .6 keeps three,
     * .5 keeps two */
    struct smp_params p = plain(1.0f, 5);
    p.top_p = 0.6f;
    double r[MAXV];
    check_case("top_p 0.6", &p, LN6, 6, NULL, 0, r);
    CHECK_NEAR(r[3], 4 / 15.0, 1e-6);
    CHECK_NEAR(r[5], 6 / 15.0, 1e-6);
    CHECK(r[2] == 0);
    p.top_p = 0.5f;
    check_case("top_p 0.5", &p, LN6, 6, NULL, 0, r);
    CHECK_NEAR(r[4], 5 / 11.0, 1e-6);
    CHECK_NEAR(r[5], 6 / 11.0, 1e-6);
    CHECK(r[3] == 0);
}

TEST(exact_min_p)
{
    /* threshold 0.45 * 6 = 2.7: keep the weights 3, 4, 5, 6 of 18 */
    struct smp_params p = plain(1.0f, 6);
    p.min_p = 0.45f;
    double r[MAXV];
    check_case("min_p 0.45", &p, LN6, 6, NULL, 0, r);
    CHECK(r[0] == 0);
    CHECK(r[1] == 0);
    for (int v = 2; v < 6; v++)
        CHECK_NEAR(r[v], (v + 1) / 18.0, 1e-6);
}

TEST(exact_penalties)
{
    /* {0, ln2, ln3}, history {2, 2}: frequency ln 1.5 per occurrence takes token 2 from weight
     * 3 to 3 / 2.25; presence ln 3 takes it to 1 */
    const float l[3] = {0.0f, 0.69314718f, 1.09861229f};
    const int32_t hist[2] = {2, 2};
    struct smp_params p = plain(1.0f, 7);
    p.frequency_penalty = 0.40546511f;
    double r[MAXV];
    check_case("frequency ln1.5", &p, l, 3, hist, 2, r);
    CHECK_NEAR(r[2], (3 / 2.25) / (3 + 3 / 2.25), 1e-6);
    p = plain(1.0f, 8);
    p.presence_penalty = 1.09861229f;
    check_case("presence ln3", &p, l, 3, hist, 2, r);
    CHECK_NEAR(r[0], 0.25, 1e-6);
    CHECK_NEAR(r[1], 0.5, 1e-6);
    CHECK_NEAR(r[2], 0.25, 1e-6);
}

/* ---- each filter and penalty against the reference ---------------------------------------- */

static const float L8[8] = {1.2f, -0.4f, 2.5f, 0.3f, -1.7f, 2.1f, 0.9f, -0.2f};
static const float L5[5] = {1.5f, -1.0f, 0.5f, 2.0f, -0.5f};

TEST(filters)
{
    struct smp_params p = plain(0.8f, 11);
    check_case("T 0.8", &p, L8, 8, NULL, 0, NULL);
    p.top_k = 4;
    check_case("T 0.8 top_k 4", &p, L8, 8, NULL, 0, NULL);
    p = plain(1.3f, 12);
    p.top_p = 0.7f;
    check_case("T 1.3 top_p 0.7", &p, L8, 8, NULL, 0, NULL);
    p = plain(1.0f, 13);
    p.min_p = 0.15f;
    check_case("min_p 0.15", &p, L8, 8, NULL, 0, NULL);
    p = plain(0.9f, 14);
    p.top_k = 6;
    p.top_p = 0.9f;
    p.min_p = 0.1f;
    check_case("top_k+top_p+min_p", &p, L8, 8, NULL, 0, NULL);
}

TEST(penalties)
{
    const int32_t hist[6] = {3, 0, 3, 1, 3, 0}; /* 3 three times, 0 twice, 1 once */
    struct smp_params p = plain(1.0f, 21);
    p.presence_penalty = 0.6f;
    check_case("presence 0.6", &p, L5, 5, hist, 6, NULL);
    p = plain(1.0f, 22);
    p.frequency_penalty = 0.35f;
    check_case("frequency 0.35", &p, L5, 5, hist, 6, NULL);
    p = plain(1.0f, 23);
    p.presence_penalty = -0.5f; /* negative: encourages repeats */
    p.frequency_penalty = -0.2f;
    check_case("negative pres/freq", &p, L5, 5, hist, 6, NULL);
    p = plain(1.0f, 24);
    p.repetition_penalty = 1.5f; /* 1.5 -> 1.0, 2.0 -> 1.33, -1.0 -> -1.5 */
    check_case("repetition 1.5", &p, L5, 5, hist, 6, NULL);
    p = plain(1.0f, 25);
    p.repetition_penalty = 0.7f;
    check_case("repetition 0.7", &p, L5, 5, hist, 6, NULL);
}

TEST(logit_bias)
{
    /* a repeated id adds up; -100 bans a token */
    struct smp_logit_bias lb[3] = {{1, 2.0f}, {4, -100.0f}, {1, 0.5f}};
    struct smp_params p = plain(1.0f, 31);
    p.n_logit_bias = 3;
    p.logit_bias = lb;
    double r[MAXV];
    check_case("logit_bias", &p, L5, 5, NULL, 0, r);
    CHECK(r[4] < NEVER);
}

TEST(everything)
{
    struct smp_logit_bias lb[2] = {{2, -1.5f}, {6, 0.8f}};
    const int32_t hist[5] = {5, 2, 5, 7, 5};
    struct smp_params p = {.temperature = 0.7f,
                           .top_k = 6,
                           .top_p = 0.95f,
                           .min_p = 0.02f,
                           .presence_penalty = 0.3f,
                           .frequency_penalty = 0.2f,
                           .repetition_penalty = 1.2f,
                           .n_logit_bias = 2,
                           .logit_bias = lb,
                           .seed = 41};
    check_case("everything", &p, L8, 8, hist, 5, NULL);
}

/* Over 64 candidates the sampler sorts instead of selecting: same reference. */
TEST(large_vocab)
{
    float l[100];
    unsigned long long rng = 77;
    for (int v = 0; v < 100; v++)
        l[v] = 2.0f * test_rng_uniform(&rng);
    struct smp_params p = plain(1.0f, 51);
    p.top_p = 0.8f;
    check_case("V 100 top_p 0.8", &p, l, 100, NULL, 0, NULL);
    p = plain(0.6f, 52);
    p.top_k = 80;
    p.min_p = 0.2f;
    check_case("V 100 top_k 80 min_p", &p, l, 100, NULL, 0, NULL);
}

/* The chi-square check is not vacuous: draws filtered by top-k fail against the unfiltered
 * distribution. */
TEST(chi_square_has_power)
{
    struct smp_params p = plain(1.0f, 61);
    double full[MAXV];
    ref_dist(&p, LN6, 6, NULL, 0, full);
    p.top_k = 5;
    struct smp s;
    smp_init(&s, 6, &p);
    int64_t obs[6] = {0};
    for (int i = 0; i < N_DRAWS; i++)
        obs[smp_sample(&s, LN6, NULL, 0)]++;
    CHECK_EQ(obs[0], 0);
    double e = (double)N_DRAWS * full[0];
    double x2 = e; /* token 0's term: (0 - e)^2 / e */
    for (int v = 1; v < 6; v++)
        x2 += (obs[v] - N_DRAWS * full[v]) * (obs[v] - N_DRAWS * full[v]) / (N_DRAWS * full[v]);
    CHECK(x2 > chi_bound(5));
    smp_deinit(&s);
}

/* ---- greedy, top_k = 1, seeds --------------------------------------------------------------- */

TEST(greedy)
{
    const float l[5] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f}; /* ties: the lowest id, 1 */
    struct smp_params p = plain(0.0f, 71);
    struct smp s;
    smp_init(&s, 5, &p);
    uint64_t rng = s.rng;
    CHECK_EQ(smp_sample(&s, l, NULL, 0), 1);
    CHECK_EQ(smp_argmax(l, 5), 1);
    CHECK(s.rng == rng); /* greedy draws nothing */
    double probs[5];
    smp_probs(&s, l, NULL, 0, probs);
    CHECK(probs[1] == 1);
    CHECK(probs[0] + probs[2] + probs[3] + probs[4] == 0);
    /* penalties apply before the argmax: token 1 repeated loses to 2 */
    const int32_t hist[1] = {1};
    p.presence_penalty = 0.5f;
    smp_set(&s, &p);
    CHECK_EQ(smp_sample(&s, l, hist, 1), 2);
    CHECK_NEAR(s.logits[1], 2.5, 1e-6); /* the adjusted row stays for logprobs */
    smp_deinit(&s);
}

TEST(top_k_1_is_greedy)
{
    float l[50];
    unsigned long long rng = 5;
    struct smp_params p = plain(0.7f, 81);
    p.top_k = 1;
    struct smp s;
    smp_init(&s, 50, &p);
    for (int row = 0; row < 500; row++) {
        for (int v = 0; v < 50; v++)
            l[v] = 4.0f * test_rng_uniform(&rng);
        int32_t hi = smp_argmax(l, 50);
        if (row % 3 == 0) /* a tie with a lower and a higher id */
            l[row % 50] = l[(row + 17) % 50] = l[hi];
        CHECK_EQ(smp_sample(&s, l, NULL, 0), smp_argmax(l, 50));
    }
    smp_deinit(&s);
}

TEST(seeded_reproducible)
{
    struct smp_params p = plain(1.0f, 91);
    p.top_p = 0.9f;
    p.frequency_penalty = 0.3f;
    struct smp a, b;
    smp_init(&a, 8, &p);
    smp_init(&b, 8, &p);
    int32_t ha[400], hb[400];
    int same_other = 0;
    for (int i = 0; i < 400; i++) {
        ha[i] = smp_sample(&a, L8, ha, i);
        hb[i] = smp_sample(&b, L8, hb, i);
        CHECK_EQ(ha[i], hb[i]);
    }
    p.seed = 92; /* another seed: another sequence */
    smp_set(&b, &p);
    for (int i = 0; i < 400; i++) {
        hb[i] = smp_sample(&b, L8, hb, i);
        same_other += ha[i] == hb[i];
    }
    CHECK(same_other < 400);
    p.seed = 91; /* smp_set restarts the stream */
    smp_set(&b, &p);
    for (int i = 0; i < 400; i++)
        CHECK_EQ(smp_sample(&b, L8, ha, i), ha[i]);
    smp_deinit(&a);
    smp_deinit(&b);
}

int main(void)
{
    RUN(exact_softmax);
    RUN(exact_temperature);
    RUN(exact_top_k);
    RUN(exact_top_p);
    RUN(exact_min_p);
    RUN(exact_penalties);
    RUN(filters);
    RUN(penalties);
    RUN(logit_bias);
    RUN(everything);
    RUN(large_vocab);
    RUN(chi_square_has_power);
    RUN(greedy);
    RUN(top_k_1_is_greedy);
    RUN(seeded_reproducible);
    TEST_MAIN_END("test_smp");
}
