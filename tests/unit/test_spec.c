/*
 * test_spec — speculative decoding is lossless and its rollback rules hold:
 *   - n-gram lookup proposes the continuation of the most recent match;
 *   - for every hybrid arch, with n-gram, MTP and both, with 1 and 8 concurrent slots, greedy and
 *     seeded sampling give exactly the tokens of decoding without speculation (sample-and-match
 *     draws one RNG value per emitted token, like plain decoding);
 *   - n-gram drafts longer than the snapshot depth go through the checkpoint + replay path and
 *     stay lossless;
 *   - rollback by recomputation (the debug mode: no snapshots, a checkpoint before every
 *     verification, restore + replay on a rejection) is lossless too, and really replays;
 *   - cache rules: rollback bounded by the snapshots of the last batch, never twice without a
 *     forward step (asserted: the process aborts), reset by clear;
 *   - the memory estimate matches the cache's own sizing, and an engine whose caches exceed
 *     mem_max is refused with the numbers.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/compute/device.h" // defines: dev_destroy
#include "engine/compute/fwd.h"    // defines: fwd_create
#include "engine/model/model.h"    // defines: model_load
#include "engine/sched/cache.h"    // defines: cache_bytes_needed
#include "engine/sched/eng.h"      // defines: eng_*
#include "engine/sched/spec.h"     // defines: spec_ngram_draft
#include "engine/util.h"           // defines: DD_EFULL
#include "test.h"                  // defines: TEST, RUN, CHECK*, TEST_MAIN_END
#include "testutil.h"              // defines: testutil_*

static char models[512];

TEST(ngram_lookup)
{
    int32_t h[] = {1, 2, 3, 4, 5, 9, 9, 1, 2, 3};
    int32_t out[8];
    CHECK_EQ(spec_ngram_draft(h, 10, 3, 1, 4, out), 4); /* "1 2 3" matched at 0 -> 4 5 9 9 */
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 9 && out[3] == 9);
    CHECK_EQ(spec_ngram_draft(h, 10, 3, 1, 2, out), 2); /* capped */
    int32_t g[] = {7, 8, 7, 8, 7};
    CHECK_EQ(spec_ngram_draft(g, 5, 2, 1, 5, out), 2); /* most recent "8 7" at 1 -> 8 7 */
    CHECK(out[0] == 8 && out[1] == 7);
    int32_t u[] = {1, 2, 3, 4};
    CHECK_EQ(spec_ngram_draft(u, 4, 3, 1, 5, out), 0); /* no repeat, no draft */
}

/* ---- the draft throttle (spec.h), fed synthetic acceptance sequences ------------------------ */

/* Run the throttle for `rounds` rounds; draft token i of a round is accepted when accept(r, i)
 * says so (and every token before it was). Returns the draft tokens verified; *tokens gets
 * the tokens gained (accepted drafts + the one every round makes); *cost the cost of the
 * drafts in plain-step units; first_off the first throttled round (-1 = none); n_probes the
 * probes and probes[] the rounds of the first 16. */
struct thr_run {
    int64_t drafted, tokens, first_off, n_probes, probes[16], last_k;
    double cost;
};

static struct thr_run thr_drive(struct spec_thr *t, const struct spec_cost *c, int64_t k_max,
                                int64_t rounds, bool (*accept)(int64_t r, int64_t i))
{
    struct thr_run o = {.first_off = -1};
    for (int64_t r = 0; r < rounds; r++) {
        int64_t k = spec_thr_plan(t, c, k_max, r), m = 0;
        o.last_k = k;
        if (t->mode == SPEC_MODE_THROTTLED && o.first_off < 0)
            o.first_off = r;
        if (t->mode == SPEC_MODE_PROBE && o.n_probes++ < 16)
            o.probes[o.n_probes - 1] = r;
        while (m < k && accept(r, m))
            m++;
        if (k > 0)
            spec_thr_observe(t, k, m);
        o.drafted += k;
        o.tokens += 1 + m;
        o.cost += 1.0 + (double)k * (c->row + c->mtp);
    }
    return o;
}

static bool acc_never(int64_t r, int64_t i)
{
    (void)r, (void)i;
    return false;
}

static bool acc_always(int64_t r, int64_t i)
{
    (void)r, (void)i;
    return true;
}

/* Each draft token accepted with probability 0.65, from a fixed hash of (round, position). */
static bool acc_65(int64_t r, int64_t i)
{
    uint64_t h = (uint64_t)(r * 8 + i + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (h % 1000) < 650;
}

static bool acc_late(int64_t r, int64_t i) /* nothing for 300 rounds, then everything */
{
    (void)i;
    return r >= 300;
}

TEST(throttle_gain)
{
    struct spec_cost c = {.row = 0.1, .mtp = 0.1};
    CHECK_NEAR(spec_thr_gain(1.0, 3, &c), 4.0 / 1.6, 1e-12); /* every draft accepted */
    CHECK_NEAR(spec_thr_gain(0.0, 1, &c), 1.0 / 1.2, 1e-12); /* none */
    CHECK_NEAR(spec_thr_gain(0.5, 2, &c), 1.75 / 1.4, 1e-12);
    CHECK_NEAR(spec_thr_gain(0.7, 0, &c), 1.0, 1e-12);
}

/* A head that never agrees (a random MTP head): drafting stops after a few rounds and then
 * costs only probes, 4, 16, then 64 rounds apart: under 1 % of the decode over 2000 rounds at
 * batch-1 costs, under 3 % at the costs of a batch of 8 (a larger share of an extra row). */
TEST(throttle_never_accepted)
{
    const struct spec_cost costs[2] = {{.row = 0.03, .mtp = 0.15}, {.row = 0.1, .mtp = 0.05}};
    for (int b = 0; b < 2; b++) {
        struct spec_thr t;
        spec_thr_reset(&t);
        struct thr_run o = thr_drive(&t, &costs[b], 3, 2000, acc_never);
        CHECK(o.first_off >= 1 && o.first_off <= 10); /* the prior weighs 4 tokens */
        CHECK_EQ(o.tokens, 2000);
        CHECK(o.cost / 2000.0 - 1.0 < (b == 0 ? 0.01 : 0.03));
        CHECK(o.n_probes >= 32 && o.n_probes <= 34); /* 2 + 2000 / 64 */
        /* probe i comes at a multiple of its wait (4, 16, then 64 rounds): the common clock */
        for (int64_t i = 0; i < o.n_probes && i < 16; i++) {
            int64_t w = i == 0 ? 4 : i == 1 ? 16 : 64;
            CHECK_EQ(o.probes[i] % w, 0);
            if (i > 0)
                CHECK(o.probes[i] - o.probes[i - 1] <= w && o.probes[i] - o.probes[i - 1] >= 1);
            if (i >= 3)
                CHECK_EQ(o.probes[i] - o.probes[i - 1], 64);
        }
        CHECK_EQ(t.mode, SPEC_MODE_THROTTLED);
        CHECK(t.acc < 0.1);
    }
}

/* A head that always agrees: full-length drafts every round, never throttled. */
TEST(throttle_always_accepted)
{
    struct spec_cost c = {.row = 0.03, .mtp = 0.15};
    struct spec_thr t;
    spec_thr_reset(&t);
    struct thr_run o = thr_drive(&t, &c, 3, 500, acc_always);
    CHECK_EQ(o.first_off, -1);
    CHECK_EQ(o.n_probes, 0);
    CHECK(o.drafted >= 1490); /* the first rounds may draft less: the estimate starts at 0.5 */
    CHECK_EQ(o.tokens, 500 + o.drafted);
    CHECK(t.acc > 0.99);
}

/* 65 % per token: drafting pays at batch-1 costs (it stays on, gains well over 1x), still pays
 * at middling costs, and not at costs where an extra row and an MTP step are dear (it
 * throttles); the estimate tracks 0.65. */
TEST(throttle_partial)
{
    struct spec_cost cheap = {.row = 0.03, .mtp = 0.15}, dear = {.row = 0.4, .mtp = 0.5};
    struct spec_thr t;
    spec_thr_reset(&t);
    struct thr_run o = thr_drive(&t, &cheap, 3, 2000, acc_65);
    CHECK(o.drafted > 2000);
    CHECK((double)o.tokens / o.cost > 1.2);
    CHECK(t.acc > 0.4 && t.acc < 0.9);
    /* at the costs measured on the 1 GB proof model (a draft token 0.36 of a step), 65 % still
     * pays (k = 1: 1.65 / 1.36): the estimate's noise must not throttle it */
    struct spec_cost mid = {.row = 0.2, .mtp = 0.16};
    spec_thr_reset(&t);
    o = thr_drive(&t, &mid, 3, 2000, acc_65);
    CHECK(t.n_throttles <= 1);
    CHECK((double)o.tokens / o.cost > 1.1);
    spec_thr_reset(&t);
    o = thr_drive(&t, &dear, 3, 2000, acc_65);
    CHECK(o.first_off >= 0);
    CHECK(o.drafted < 100);
    CHECK((double)o.tokens / o.cost > 0.97); /* loses under 3 % against no drafts */
}

/* A slot throttled for a long run comes back within one longest wait once drafts hit. */
TEST(throttle_recovers)
{
    struct spec_cost c = {.row = 0.03, .mtp = 0.15};
    struct spec_thr t;
    spec_thr_reset(&t);
    struct thr_run o = thr_drive(&t, &c, 3, 300, acc_late);
    CHECK_EQ(t.mode, SPEC_MODE_THROTTLED);
    int64_t r;
    for (r = 300; r < 500 && t.mode != SPEC_MODE_ON; r++) {
        int64_t k = spec_thr_plan(&t, &c, 3, r);
        if (k > 0)
            spec_thr_observe(&t, k, k);
    }
    CHECK(r - 300 <= 2 * SPEC_THR_MAX_WAIT + 2); /* two accepted probes bring it back */
    CHECK_EQ(t.mode, SPEC_MODE_ON);
    (void)o;
}

/* Eight slots sharing a pool (the engine's estimate over all slots), a head that never agrees
 * and costs of a batch of 8: every slot is throttled after one round (the last ones before
 * drafting at all); a slot that joins later does not draft before a probe. */
TEST(throttle_pool)
{
    struct spec_cost c = {.row = 0.06, .mtp = 0.06}; /* pays from 12 % acceptance on */
    struct spec_thr pool, t[9];
    spec_thr_reset(&pool);
    for (int i = 0; i < 9; i++) {
        spec_thr_reset(&t[i]);
        t[i].pool = &pool;
    }
    for (int64_t r = 0; r < 3; r++)
        for (int i = 0; i < 8; i++) {
            int64_t k = spec_thr_plan(&t[i], &c, 3, r);
            if (k > 0)
                spec_thr_observe(&t[i], k, 0);
            if (r > 0)
                CHECK_EQ(t[i].mode, SPEC_MODE_THROTTLED);
        }
    CHECK(spec_thr_estimate(&t[8]) < 0.12); /* the pool: the prior and 7 or 8 misses */
    CHECK_EQ(spec_thr_plan(&t[8], &c, 3, 3), 0);
    CHECK_EQ(t[8].mode, SPEC_MODE_THROTTLED);
}

/* A concave cost curve (the first extra row dear, the next ones cheap, as on a CPU at batch 1):
 * the longest draft wins at 80 % although one row alone costs 37 % of a step; and the measured
 * times by size, interpolated between sizes and flat beyond the largest. */
TEST(throttle_concave)
{
    struct spec_cost c = {.row = 0.37, .mtp = 0.15, .n_extra = 3, .extra = {0, 0.37, 0.5, 0.64}};
    struct spec_thr t;
    spec_thr_reset(&t);
    t.acc = 0.8;
    CHECK_EQ(spec_thr_plan(&t, &c, 3, 0), 3);
    CHECK_NEAR(spec_thr_gain(0.8, 3, &c), 2.952 / 2.09, 1e-9);
    CHECK_NEAR(spec_thr_gain(0.8, 5, &c), (1 + 0.8 + 0.64 + 0.512 + 0.4096 + 0.32768) / 3.13, 1e-9);
    struct spec_fit f;
    spec_fit_init(&f, 0.25);
    spec_fit_add(&f, 1, 0.1);
    spec_fit_add(&f, 4, 0.16);
    CHECK_NEAR(spec_fit_time(&f, 1), 0.1, 1e-12);
    CHECK_NEAR(spec_fit_time(&f, 2), 0.12, 1e-12);
    CHECK_NEAR(spec_fit_time(&f, 8), 0.16, 1e-12);
}

/* The cost model fit: exact on a linear series, the prior ratio when the sizes never vary. */
TEST(throttle_fit)
{
    struct spec_fit f;
    double w, c;
    spec_fit_init(&f, 0.05);
    CHECK(!spec_fit_get(&f, &w, &c));
    for (int i = 0; i < 400; i++)
        spec_fit_add(&f, (double)(1 + i % 8), 0.1 + 0.01 * (double)(1 + i % 8));
    CHECK(spec_fit_get(&f, &w, &c));
    CHECK_NEAR(w, 0.1, 1e-9);
    CHECK_NEAR(c, 0.01, 1e-9);
    spec_fit_init(&f, 0.05);
    for (int i = 0; i < 50; i++)
        spec_fit_add(&f, 1.0, 0.105);
    CHECK(spec_fit_get(&f, &w, &c));
    CHECK_NEAR(w, 0.1, 1e-9);
    CHECK_NEAR(c, 0.005, 1e-9);
}

/* ---- engine runs ---------------------------------------------------------------------------- */

struct run_out {
    int32_t ids[64]; /* with logprobs only */
    int64_t n;
    int64_t drafted, accepted;
    char text[1024];
    size_t len;
    int64_t completion;
};

/* Records one delta's tokens and the speculation counters (a testutil_req_drain callback). */
static void take_delta(const struct eng_delta *d, void *ud)
{
    struct run_out *o = ud;
    for (int64_t i = 0; i < d->n_toks && o->n < 64; i++)
        o->ids[o->n++] = d->toks[i].id;
    if (d->len && o->len + d->len <= sizeof o->text) {
        memcpy(o->text + o->len, d->text, d->len);
        o->len += d->len;
    }
    o->completion = d->completion_tokens;
    o->drafted = d->drafted_tokens;
    o->accepted = d->accepted_tokens;
}

static void drain(eng_req_t *r, struct run_out *o)
{
    memset(o, 0, sizeof *o);
    if (!testutil_req_drain(r, 120000, take_delta, o))
        CHECK(!"request did not finish");
}

/* Prompts with repetition so that n-gram drafts fire. */
static int64_t make_prompt(int32_t *p, int i)
{
    int64_t n = 0;
    for (int rep = 0; rep < 3; rep++)
        for (int k = 0; k < 12 + i; k++)
            p[n++] = (int32_t)((k * 13 + i * 7 + 3) % 256);
    return n;
}

/* Draft hook of sample_runs. */
static int64_t (*second_tokens_fn)(void *, int64_t, const int32_t *, int64_t, int64_t, int32_t *);

/* The oracle drafter: proposes the non-speculative continuation (recorded beforehand) with a
 * deliberate mistake in most rounds, so that acceptance lengths 0 .. max all occur. */
static struct {
    const struct run_out *truth; /* [n_req] */
    int n_req;
    int64_t calls;
} oracle;

static int64_t oracle_draft(void *ud, int64_t slot, const int32_t *hist, int64_t n, int64_t max,
                            int32_t *out)
{
    (void)ud;
    (void)slot;
    for (int i = 0; i < oracle.n_req; i++) {
        int32_t p[64];
        int64_t np = make_prompt(p, i);
        if (n <= np || memcmp(hist, p, (size_t)np * sizeof *p) != 0)
            continue;
        const struct run_out *t = &oracle.truth[i];
        int64_t gen = n - np, c = oracle.calls++;
        int64_t len = 1 + c % max, k = 0;
        for (; k < len && gen + k < t->n; k++)
            out[k] = t->ids[gen + k];
        if (c % 4 != 0 && k > 0)
            out[c % k] = (out[c % k] + 1) % 256; /* one wrong token */
        return k;
    }
    return 0;
}

/* Rollback mode of the next run_all, and the engine statistics of the last one. */
static int rollback_mode = ENG_ROLLBACK_SNAPSHOT;
static bool penalised;   /* run_all's requests add penalties and a logit bias */
static bool no_logprobs; /* run_all's requests ask for no logprobs: greedy ones then take the
                          * devices' argmax (no logits row downloaded; no ids either) */
static struct eng_stats last_stats;

/* Run n_req requests concurrently on a fresh engine with the given speculation settings. */
static void run_all(const char *file, unsigned spec, int64_t ngram_max, int n_req, float temp,
                    struct run_out *out)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%s", models, file);
    struct model *m = NULL;
    struct dev *d = NULL;
    eng_t *e = NULL;
    struct eng_params p = {.n_slots = n_req,
                           .n_ctx = 192,
                           .max_batch_tokens = 64,
                           .queue_max = 16,
                           .n_checkpoints = 2,
                           .checkpoint_every = 64,
                           .draft_max = 3,
                           .spec_types = spec,
                           .ngram_n = 3,
                           .ngram_min = 1,
                           .ngram_max_draft = ngram_max,
                           .draft_fn = oracle_draft,
                           .spec_rollback = rollback_mode,
                           .spec_prior_costs = true};
    memset(&last_stats, 0, sizeof last_stats);
    if (model_load(path, &m, err, sizeof err) || testutil_dev_cpu(2, &d, err, sizeof err) ||
        eng_create(m, d, &p, &e, err, sizeof err) || eng_start(e, err, sizeof err)) {
        printf("  %s\n", err);
        CHECK(0);
        goto out;
    }
    eng_req_t *r[8];
    for (int i = 0; i < n_req; i++) {
        struct eng_req_params rp = {.max_tokens = 24, .cache_prompt = true};
        rp.prompt = malloc(64 * sizeof(int32_t));
        rp.n_prompt = make_prompt(rp.prompt, i);
        rp.s = (struct smp_params){.temperature = temp,
                                   .top_p = 0.95f,
                                   .repetition_penalty = 1.0f,
                                   .seed = 1000 + (uint64_t)i};
        if (penalised) {
            rp.s.presence_penalty = 0.4f;
            rp.s.frequency_penalty = 0.3f;
            rp.s.repetition_penalty = 1.2f;
            rp.s.n_logit_bias = 1;
            rp.s.logit_bias = malloc(sizeof *rp.s.logit_bias); /* transferred */
            rp.s.logit_bias[0] = (struct smp_logit_bias){.id = 7, .bias = 1.5f};
        }
        rp.logprobs = !no_logprobs;
        r[i] = eng_req_create(&rp, NULL, NULL);
        CHECK_EQ(eng_submit(e, r[i], err, sizeof err), 0);
    }
    for (int i = 0; i < n_req; i++) {
        drain(r[i], &out[i]);
        eng_req_release(r[i]);
    }
    eng_get_stats(e, &last_stats);
out:
    eng_destroy(e);
    dev_destroy(d);
    model_free(m);
}

static void lossless_case(const char *file, int n_req, float temp)
{
    static const struct {
        const char *name;
        unsigned spec;
        int64_t ngram_max;
        int rollback;
    } modes[] = {{"ngram", ENG_SPEC_NGRAM, 3, ENG_ROLLBACK_SNAPSHOT},
                 {"mtp", ENG_SPEC_MTP, 3, ENG_ROLLBACK_SNAPSHOT},
                 {"ngram+mtp", ENG_SPEC_NGRAM | ENG_SPEC_MTP, 3, ENG_ROLLBACK_SNAPSHOT},
                 {"long-ngram", ENG_SPEC_NGRAM, 12, ENG_ROLLBACK_SNAPSHOT},
                 {"ngram+mtp/recomp", ENG_SPEC_NGRAM | ENG_SPEC_MTP, 3, ENG_ROLLBACK_RECOMPUTE},
                 {"long-ngram/recomp", ENG_SPEC_NGRAM, 12, ENG_ROLLBACK_RECOMPUTE}};
    struct run_out base[8], spec[8];
    run_all(file, 0, 0, n_req, temp, base);
    /* DELTAD_TEST_QUICK (the CUDA device under emulation, tests/cuda/test_cuda_forward.sh):
     * the three kinds of drafts only; the other modes vary engine logic, not the device */
    const size_t n_modes = getenv("DELTAD_TEST_QUICK") ? 3 : sizeof modes / sizeof modes[0];
    for (size_t k = 0; k < n_modes; k++) {
        rollback_mode = modes[k].rollback;
        /* greedy: every other mode takes the devices' argmax (no logprobs, so no ids: the
         * text and the token count are compared), the others sample the downloaded rows */
        no_logprobs = temp == 0.0f && k % 2 == 0;
        run_all(file, modes[k].spec, modes[k].ngram_max, n_req, temp, spec);
        rollback_mode = ENG_ROLLBACK_SNAPSHOT;
        int64_t drafted = 0, accepted = 0, same = 0;
        for (int i = 0; i < n_req; i++) {
            drafted += spec[i].drafted;
            accepted += spec[i].accepted;
            bool eq =
                no_logprobs
                    ? spec[i].completion == base[i].completion && spec[i].len == base[i].len &&
                          memcmp(spec[i].text, base[i].text, base[i].len) == 0
                    : spec[i].n == base[i].n && memcmp(spec[i].ids, base[i].ids,
                                                       (size_t)base[i].n * sizeof(int32_t)) == 0;
            same += eq;
            CHECK(eq);
        }
        printf("  %-20s %-17s slots %d temp %.1f%s: identical %lld/%d, drafted %lld, accepted "
               "%lld\n",
               file, modes[k].name, n_req, temp, no_logprobs ? " argmax" : "", (long long)same,
               n_req, (long long)drafted, (long long)accepted);
        no_logprobs = false;
        CHECK(drafted > 0);
    }
}

TEST(lossless_greedy)
{
    lossless_case("tiny-qwen35.gguf", 1, 0.0f);
    lossless_case("tiny-qwen35.gguf", 8, 0.0f);
    lossless_case("tiny-qwen35moe.gguf", 8, 0.0f);
    lossless_case("tiny-qwen3next.gguf", 1, 0.0f);
}

/* The MTP proof model (mkmodel --mtp-agree 1): by construction its MTP head predicts what the
 * trunk will, so every MTP draft must be accepted, at 1 and 4 slots, and the text is the same
 * with and without drafts. */
TEST(mtp_proof_model)
{
    for (int n_req = 1; n_req <= 4; n_req += 3) {
        struct run_out base[4], spec[4];
        run_all("tiny-qwen35-mtp1.gguf", 0, 0, n_req, 0.0f, base);
        run_all("tiny-qwen35-mtp1.gguf", ENG_SPEC_MTP, 0, n_req, 0.0f, spec);
        int64_t drafted = 0, accepted = 0;
        for (int i = 0; i < n_req; i++) {
            drafted += spec[i].drafted;
            accepted += spec[i].accepted;
            CHECK(spec[i].n == base[i].n && spec[i].n > 8 &&
                  memcmp(spec[i].ids, base[i].ids, (size_t)base[i].n * sizeof(int32_t)) == 0);
        }
        printf("  tiny-qwen35-mtp1.gguf slots %d: drafted %lld, accepted %lld\n", n_req,
               (long long)drafted, (long long)accepted);
        CHECK(drafted > 0);
        CHECK_EQ(accepted, drafted);
    }
}

TEST(lossless_sampling)
{
    lossless_case("tiny-qwen35.gguf", 8, 0.9f);
    lossless_case("tiny-qwen3next.gguf", 2, 0.7f);
}

/* Drafts that are mostly right: long accepted runs, partial rollbacks through the snapshot
 * groups, and (with drafts longer than the snapshot depth) checkpoint restores with replay. */
static void oracle_case(const char *file, int n_req, float temp, int64_t max_draft)
{
    struct run_out base[8], spec[8];
    run_all(file, 0, 0, n_req, temp, base);
    oracle.truth = base;
    oracle.n_req = n_req;
    oracle.calls = 0;
    run_all(file, ENG_SPEC_EXTERNAL, max_draft, n_req, temp, spec);
    int64_t drafted = 0, accepted = 0, same = 0;
    for (int i = 0; i < n_req; i++) {
        drafted += spec[i].drafted;
        accepted += spec[i].accepted;
        bool eq = spec[i].n == base[i].n &&
                  memcmp(spec[i].ids, base[i].ids, (size_t)base[i].n * sizeof(int32_t)) == 0;
        same += eq;
        CHECK(eq);
    }
    printf("  %-20s oracle max %2lld slots %d temp %.1f: identical %lld/%d, drafted %lld, "
           "accepted %lld\n",
           file, (long long)max_draft, n_req, temp, (long long)same, n_req, (long long)drafted,
           (long long)accepted);
    CHECK(accepted > drafted / 4);
}

TEST(oracle_drafts)
{
    oracle_case("tiny-qwen35.gguf", 1, 0.0f, 3);
    oracle_case("tiny-qwen35.gguf", 8, 0.0f, 3);
    oracle_case("tiny-qwen35.gguf", 8, 0.0f, 10); /* beyond the 3 snapshots: checkpoints */
    oracle_case("tiny-qwen3next.gguf", 4, 0.8f, 3);
    oracle_case("tiny-qwen35moe.gguf", 4, 0.8f, 8);
    oracle_case("tiny-qwen3.gguf", 2, 0.0f, 8);
}

/* Penalties and logit bias: verification samples each row with the history of the tokens
 * accepted before it, exactly as plain decoding does. The oracle's long accepted runs put
 * penalised tokens inside one verification. */
TEST(lossless_penalties)
{
    penalised = true;
    lossless_case("tiny-qwen35.gguf", 4, 0.9f);
    oracle_case("tiny-qwen35.gguf", 4, 0.8f, 3);
    oracle_case("tiny-qwen35.gguf", 2, 0.0f, 10);
    penalised = false;
}

/* Rollback by recomputation under the oracle's mixed acceptance: every rejection restores the
 * pre-verification checkpoint and replays, and the tokens stay those of plain decoding. */
TEST(recompute_rollback)
{
    oracle_case("tiny-qwen35.gguf", 8, 0.0f, 3);
    CHECK_EQ(last_stats.restores_total, 0); /* snapshots cover drafts up to their depth */
    CHECK(last_stats.rollbacks_total > 0);
    rollback_mode = ENG_ROLLBACK_RECOMPUTE;
    oracle_case("tiny-qwen35.gguf", 8, 0.0f, 3);
    CHECK(last_stats.restores_total > 0);
    CHECK_EQ(last_stats.restores_total, last_stats.rollbacks_total);
    CHECK(last_stats.replayed_total >= last_stats.restores_total);
    oracle_case("tiny-qwen3next.gguf", 4, 0.8f, 3);
    CHECK(last_stats.restores_total > 0);
    rollback_mode = ENG_ROLLBACK_SNAPSHOT;
}

/* ---- start-up memory budget --------------------------------------------------------------- */

TEST(mem_budget)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/tiny-qwen35.gguf", models);
    struct model *m = NULL;
    struct dev *d = NULL;
    eng_t *e = NULL;
    if (model_load(path, &m, err, sizeof err) || testutil_dev_cpu(1, &d, err, sizeof err)) {
        CHECK(0);
        return;
    }
    struct eng_params p = {.n_slots = 4,
                           .n_ctx = 192,
                           .max_batch_tokens = 64,
                           .queue_max = 4,
                           .n_checkpoints = 2,
                           .checkpoint_every = 64,
                           .draft_max = 3,
                           .spec_types = ENG_SPEC_NGRAM | ENG_SPEC_MTP,
                           .ngram_n = 3,
                           .ngram_min = 2,
                           .ngram_max_draft = 3};
    struct eng_mem u;
    eng_mem_estimate(m, &p, &u);
    CHECK_EQ(u.kv + u.mtp_kv + u.gdn + u.snapshots, cache_bytes_needed(m, 4, 192, 3));
    CHECK(u.mtp_kv > 0 && u.gdn > 0 && u.ckpts > 0);
    CHECK_EQ(u.snapshots, 3 * u.gdn);
    p.spec_rollback = ENG_ROLLBACK_RECOMPUTE; /* no snapshot groups, one more checkpoint */
    struct eng_mem r;
    eng_mem_estimate(m, &p, &r);
    CHECK_EQ(r.snapshots, 0);
    CHECK(r.ckpts > u.ckpts);
    p.spec_rollback = ENG_ROLLBACK_SNAPSHOT;
    p.mem_max = (int64_t)u.total - 1;
    err[0] = 0;
    CHECK_EQ(eng_create(m, d, &p, &e, err, sizeof err), DD_EFULL);
    CHECK(e == NULL);
    CHECK(strstr(err, "MiB") && strstr(err, "snapshot groups") && strstr(err, "MTP layer KV"));
    printf("  refused: %s\n", err);
    p.mem_max = (int64_t)u.total;
    CHECK_EQ(eng_create(m, d, &p, &e, err, sizeof err), 0);
    p.spec_rollback = 7;
    eng_t *bad = NULL;
    CHECK_EQ(eng_create(m, d, &p, &bad, err, sizeof err), DD_EINVAL);
    eng_destroy(e);
    dev_destroy(d);
    model_free(m);
}

/* ---- distribution at temperature > 0 ----------------------------------------------------- */

/* Tokens 2 and 3 of many independently seeded requests on one fixed prompt. */
static void sample_runs(unsigned spec, uint64_t seed0, int n, int32_t (*out)[3])
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/tiny-qwen35.gguf", models);
    struct model *m = NULL;
    struct dev *d = NULL;
    eng_t *e = NULL;
    struct eng_params p = {.n_slots = 8,
                           .n_ctx = 64,
                           .max_batch_tokens = 64,
                           .queue_max = 1024,
                           .checkpoint_every = 64,
                           .draft_max = 3,
                           .spec_types = spec,
                           .draft_fn = second_tokens_fn};
    if (model_load(path, &m, err, sizeof err) || testutil_dev_cpu(2, &d, err, sizeof err) ||
        eng_create(m, d, &p, &e, err, sizeof err) || eng_start(e, err, sizeof err)) {
        CHECK(0);
        return;
    }
    for (int i = 0; i < n; i += 64) {
        eng_req_t *r[64];
        int k = n - i < 64 ? n - i : 64;
        for (int j = 0; j < k; j++) {
            struct eng_req_params rp = {.max_tokens = 3, .n_prompt = 12};
            rp.prompt = malloc(12 * sizeof(int32_t));
            for (int t = 0; t < 12; t++)
                rp.prompt[t] = (int32_t)(t * 5 + 7);
            rp.s = (struct smp_params){.temperature = 0.2f,
                                       .top_p = 1.0f,
                                       .repetition_penalty = 1.0f,
                                       .seed = seed0 + (uint64_t)(i + j)};
            rp.logprobs = true;
            r[j] = eng_req_create(&rp, NULL, NULL);
            CHECK_EQ(eng_submit(e, r[j], err, sizeof err), 0);
        }
        for (int j = 0; j < k; j++) {
            struct run_out o;
            drain(r[j], &o);
            for (int t = 0; t < 3; t++)
                out[i + j][t] = o.n > t ? o.ids[t] : -1;
            eng_req_release(r[j]);
        }
    }
    eng_destroy(e);
    dev_destroy(d);
    model_free(m);
}

/* Most frequent second token after each first token, learnt from the plain run. */
static int32_t mode2[272];

static int64_t mode_oracle(void *ud, int64_t slot, const int32_t *hist, int64_t n, int64_t max,
                           int32_t *out)
{
    (void)ud;
    (void)slot;
    (void)max;
    int32_t last = hist[n - 1];
    if (last < 0 || last >= 272 || mode2[last] < 0)
        return 0;
    out[0] = mode2[last];
    return 1;
}

/* Two independent samples (different seeds), without and with drafts that are usually right:
 * the third token is sampled from a verification row whenever the draft of the second one was
 * accepted, so its distribution must still match plain sampling. Two-sample chi-square over
 * the categories with enough counts (Wilson-Hilferty z < 4). */
TEST(distribution_with_drafts)
{
    enum { N = 1200 };
    static int32_t a[N][3], b[N][3];
    second_tokens_fn = NULL;
    sample_runs(0, 1, N, a);
    static int cnt[272][272];
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < N; i++)
        if (a[i][0] >= 0 && a[i][1] >= 0)
            cnt[a[i][0]][a[i][1]]++;
    for (int t = 0; t < 272; t++) {
        mode2[t] = -1;
        for (int u = 0, best = 0; u < 272; u++)
            if (cnt[t][u] > best) {
                best = cnt[t][u];
                mode2[t] = u;
            }
    }
    second_tokens_fn = mode_oracle;
    sample_runs(ENG_SPEC_EXTERNAL, 1000003, N, b);
    second_tokens_fn = NULL;
    static int ca[272], cb[272];
    memset(ca, 0, sizeof ca);
    memset(cb, 0, sizeof cb);
    int hits = 0;
    for (int i = 0; i < N; i++) {
        if (a[i][2] >= 0)
            ca[a[i][2]]++;
        if (b[i][2] >= 0)
            cb[b[i][2]]++;
        hits += b[i][0] >= 0 && b[i][1] == mode2[b[i][0]];
    }
    double chi = 0.0;
    int df = -1, rest_a = 0, rest_b = 0;
    for (int v = 0; v < 272; v++) {
        if (ca[v] + cb[v] < 20) {
            rest_a += ca[v];
            rest_b += cb[v];
            continue;
        }
        double e = (ca[v] + cb[v]) / 2.0;
        chi += (ca[v] - e) * (ca[v] - e) / e + (cb[v] - e) * (cb[v] - e) / e;
        df++;
    }
    if (rest_a + rest_b > 0) {
        double e = (rest_a + rest_b) / 2.0;
        chi += (rest_a - e) * (rest_a - e) / e + (rest_b - e) * (rest_b - e) / e;
        df++;
    }
    double z = df > 0 ? (pow(chi / df, 1.0 / 3) - (1 - 2.0 / (9 * df))) / sqrt(2.0 / (9 * df)) : 0;
    printf("  third-token distribution, %d samples each, %d drafts accepted: chi2 %.1f on %d df "
           "(z %.2f)\n",
           N, hits, chi, df, z);
    CHECK(hits > N / 10); /* the verification rows really were used */
    CHECK(df >= 3);
    CHECK(z < 4.0);
}

TEST(ngram_on_pure_kv_model)
{
    struct run_out base[2], spec[2];
    run_all("tiny-qwen3.gguf", 0, 0, 2, 0.0f, base);
    run_all("tiny-qwen3.gguf", ENG_SPEC_NGRAM, 8, 2, 0.0f, spec);
    for (int i = 0; i < 2; i++)
        CHECK(spec[i].n == base[i].n &&
              memcmp(spec[i].ids, base[i].ids, (size_t)base[i].n * sizeof(int32_t)) == 0);
}

/* ---- cache rollback rules ----------------------------------------------------------------- */

TEST(rollback_rules)
{
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/tiny-qwen35.gguf", models);
    struct model *m;
    struct dev *d;
    struct fwd_ctx *f;
    struct fwd_params fp = {.max_tokens = 16, .n_seq = 1, .n_ctx = 64, .draft_max = 3};
    if (model_load(path, &m, err, sizeof err) || testutil_dev_cpu(1, &d, err, sizeof err) ||
        fwd_create(m, d, &fp, &f, err, sizeof err)) {
        CHECK(0);
        return;
    }
    struct cache *c = fwd_cache(f);
    int32_t tok[6] = {5, 6, 7, 8, 9, 10}, seq[6] = {0};
    int64_t pos[6] = {0, 1, 2, 3, 4, 5};
    struct fwd_batch b = {.n_tokens = 3, .token = tok, .pos = pos, .seq = seq};
    CHECK(fwd_decode(f, &b, err, sizeof err) == 0);
    CHECK_EQ(c->valid[0], 2);            /* 3 tokens -> 2 usable snapshots */
    CHECK(!cache_seq_rollback(c, 0, 3)); /* beyond the batch */
    CHECK(cache_seq_rollback(c, 0, 2));
    CHECK_EQ(c->rs_idx[0], 2);
    cache_seq_clear(c, 0);
    CHECK_EQ(c->rs_idx[0], 0);
    CHECK_EQ(c->valid[0], 0);
    b.n_tokens = 6;
    CHECK(fwd_decode(f, &b, err, sizeof err) == 0);
    CHECK_EQ(c->valid[0], 3); /* capped by the 1 + draft_max groups */
    CHECK(!cache_seq_rollback(c, 0, 4));
    CHECK(cache_seq_rollback(c, 0, 1));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* a second rollback before a forward step must abort (rs_idx is absolute) */
        close(2);
        cache_seq_rollback(c, 0, 1);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    fwd_destroy(f);
    dev_destroy(d);
    model_free(m);
}

int main(int argc, char **argv)
{
    if (!testutil_models_dir(argc, argv, models, sizeof models))
        return TESTUTIL_SKIP_RC;
    RUN(ngram_lookup);
    RUN(throttle_gain);
    RUN(throttle_never_accepted);
    RUN(throttle_always_accepted);
    RUN(throttle_partial);
    RUN(throttle_recovers);
    RUN(throttle_pool);
    RUN(throttle_concave);
    RUN(throttle_fit);
    RUN(rollback_rules);
    RUN(lossless_greedy);
    RUN(lossless_sampling);
    RUN(mtp_proof_model);
    RUN(ngram_on_pure_kv_model);
    RUN(oracle_drafts);
    RUN(lossless_penalties);
    RUN(recompute_rollback);
    RUN(mem_budget);
    RUN(distribution_with_drafts);
    TEST_MAIN_END("test_spec");
}
