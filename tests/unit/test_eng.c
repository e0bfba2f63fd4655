/*
 * test_eng — the engine thread end to end on the tiny models (no HTTP):
 *   - a greedy request gives the same tokens as a plain token-by-token forward loop;
 *   - without logprobs it takes the devices' argmax: the same text, 4 bytes per sampled row;
 *   - 8 concurrent requests (continuous batching, chunked prefill) give exactly what each gives
 *     alone, for seeded sampling too;
 *   - the prompt cache: a second request sharing a long prefix reuses cached tokens (a GDN
 *     checkpoint on hybrid models) and produces identical output;
 *   - stop strings are never emitted; cancel frees the slot; a full queue and an over-long
 *     prompt are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/device.h" // defines: dev_destroy
#include "engine/compute/fwd.h"    // defines: fwd_decode
#include "engine/model/model.h"    // defines: model_load
#include "engine/sched/eng.h"      // defines: eng_*
#include "engine/util.h"           // defines: DD_EINVAL, DD_EFULL
#include "test.h"                  // defines: TEST, RUN, CHECK*, TEST_MAIN_END
#include "testutil.h"              // defines: testutil_*

static char models[512];
static bool g_no_logprobs; /* make_req asks for no logprobs (then no token ids come back) */

struct result {
    char text[4096];
    size_t len;
    int32_t ids[512];
    int64_t n_ids;
    enum eng_finish finish;
    int64_t cached, completion;
};

/* Appends one delta's text and token ids to the result (a testutil_req_drain callback). */
static void take_delta(const struct eng_delta *d, void *ud)
{
    struct result *res = ud;
    if (d->len && res->len + d->len < sizeof res->text) {
        memcpy(res->text + res->len, d->text, d->len);
        res->len += d->len;
    }
    for (int64_t i = 0; i < d->n_toks && res->n_ids < 512; i++)
        res->ids[res->n_ids++] = d->toks[i].id;
    res->finish = d->finish;
    res->cached = d->cached_tokens;
    res->completion = d->completion_tokens;
}

/* Drain a request until done (polling: the test has no event loop). */
static void wait_done(eng_req_t *r, struct result *res)
{
    memset(res, 0, sizeof *res);
    if (!testutil_req_drain(r, 60000, take_delta, res))
        CHECK(!"request did not finish in time");
}

static eng_req_t *make_req(const int32_t *prompt, int64_t n, int64_t max_tokens, float temp,
                           uint64_t seed, const char *stop)
{
    struct eng_req_params p = {.n_prompt = n, .max_tokens = max_tokens, .cache_prompt = true};
    p.prompt = malloc((size_t)n * sizeof *p.prompt);
    memcpy(p.prompt, prompt, (size_t)n * sizeof *p.prompt);
    p.s = (struct smp_params){
        .temperature = temp, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = seed};
    p.logprobs = !g_no_logprobs;
    if (stop) {
        p.stop[0] = strdup(stop);
        p.n_stop = 1;
    }
    return eng_req_create(&p, NULL, NULL);
}

static void run_one(eng_t *e, const int32_t *prompt, int64_t n, int64_t max_tokens, float temp,
                    uint64_t seed, const char *stop, struct result *res)
{
    char err[256];
    eng_req_t *r = make_req(prompt, n, max_tokens, temp, seed, stop);
    CHECK_EQ(eng_submit(e, r, err, sizeof err), 0);
    wait_done(r, res);
    eng_req_release(r);
}

struct setup {
    struct model *m;
    struct dev *d;
    eng_t *e;
};

static int64_t g_ram_max;    /* cache_ram_max of the next setup_open */
static int64_t g_save_piece; /* cache_save_piece of the next setup_open */

static int setup_open(struct setup *s, const char *file, int64_t slots, int64_t batch,
                      int64_t queue_max, bool start)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%s", models, file);
    memset(s, 0, sizeof *s);
    struct eng_params p = {.n_slots = slots,
                           .n_ctx = 256,
                           .max_batch_tokens = batch,
                           .queue_max = queue_max,
                           .n_checkpoints = 4,
                           .checkpoint_every = 64,
                           .cache_ram_max = g_ram_max,
                           .cache_save_piece = g_save_piece};
    if (model_load(path, &s->m, err, sizeof err) || testutil_dev_cpu(2, &s->d, err, sizeof err) ||
        eng_create(s->m, s->d, &p, &s->e, err, sizeof err) ||
        (start && eng_start(s->e, err, sizeof err))) {
        printf("  setup: %s\n", err);
        return -1;
    }
    return 0;
}

static void setup_close(struct setup *s)
{
    eng_destroy(s->e);
    dev_destroy(s->d);
    model_free(s->m);
}

static void make_prompt(int32_t *p, int64_t n, int salt)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)((i * 31 + salt * 17 + 5) % 256);
}

/* Greedy tokens from a plain forward loop, as the reference for the engine. */
static int64_t greedy_reference(const struct model *m, struct dev *d, const int32_t *prompt,
                                int64_t n, int64_t max_tokens, int32_t *out)
{
    struct fwd_params fp = {.max_tokens = 64, .n_seq = 1, .n_ctx = 256};
    struct fwd_ctx *f;
    char err[256];
    if (fwd_create(m, d, &fp, &f, err, sizeof err))
        return -1;
    int64_t pos[64] = {0}, k = 0;
    int32_t seq[64] = {0};
    int32_t cur = 0;
    for (int64_t i = 0; i < n + max_tokens - 1; i++) {
        int32_t t = i < n ? prompt[i] : cur;
        pos[0] = i;
        struct fwd_batch b = {.n_tokens = 1, .token = &t, .pos = pos, .seq = seq};
        fwd_decode(f, &b, err, sizeof err);
        if (i >= n - 1) {
            const float *l = fwd_logits(f);
            int32_t best = 0;
            for (int64_t v = 1; v < m->hp.n_vocab; v++)
                best = l[v] > l[best] ? (int32_t)v : best;
            out[k++] = cur = best;
        }
    }
    fwd_destroy(f);
    return k;
}

TEST(greedy_matches_forward_loop)
{
    const char *files[] = {"tiny-qwen35.gguf", "tiny-qwen3next.gguf", "tiny-qwen35moe.gguf",
                           "tiny-qwen3.gguf"};
    for (size_t f = 0; f < 4; f++) {
        struct setup s;
        if (setup_open(&s, files[f], 2, 32, 8, true) != 0) {
            CHECK(0);
            continue;
        }
        int32_t prompt[70], ref[16];
        make_prompt(prompt, 70, 1);
        int64_t nref = greedy_reference(s.m, s.d, prompt, 70, 16, ref);
        struct result res;
        run_one(s.e, prompt, 70, 16, 0.0f, 0, NULL, &res);
        /* the engine stops early on an end-of-generation token; compare what it produced */
        printf("  %s: %lld tokens, finish %d\n", files[f], (long long)res.n_ids, res.finish);
        CHECK(res.n_ids >= 1 && res.n_ids <= nref);
        for (int64_t i = 0; i < res.n_ids; i++)
            CHECK_EQ(res.ids[i], ref[i]);
        setup_close(&s);
    }
}

/* A greedy request without logprobs, penalties, bias or grammar takes the devices' argmax: the
 * same text as with logprobs (the host sampler over downloaded rows), and exactly 4 bytes come
 * back per sampled row instead of the row's n_vocab floats. */
TEST(greedy_argmax_on_device)
{
    const char *files[] = {"tiny-qwen35.gguf", "tiny-qwen35moe.gguf"};
    for (size_t f = 0; f < 2; f++) {
        struct setup s;
        if (setup_open(&s, files[f], 2, 32, 8, true) != 0) {
            CHECK(0);
            continue;
        }
        const int64_t V = s.m->hp.n_vocab;
        int32_t prompt[50];
        make_prompt(prompt, 50, 4);
        struct eng_stats st0, st1, st2;
        struct result rows, amax;
        eng_get_stats(s.e, &st0);
        run_one(s.e, prompt, 50, 12, 0.0f, 0, NULL, &rows);
        eng_get_stats(s.e, &st1);
        g_no_logprobs = true;
        run_one(s.e, prompt, 50, 12, 0.0f, 0, NULL, &amax);
        g_no_logprobs = false;
        eng_get_stats(s.e, &st2);
        printf("  %s: %lld tokens; bytes per sampled row %lld with logprobs, %lld without\n",
               files[f], (long long)amax.completion,
               (long long)((st1.sample_bytes_total - st0.sample_bytes_total) / rows.completion),
               (long long)((st2.sample_bytes_total - st1.sample_bytes_total) / amax.completion));
        CHECK(rows.completion >= 1 && amax.completion == rows.completion);
        CHECK(amax.len == rows.len && memcmp(amax.text, rows.text, rows.len) == 0);
        CHECK_EQ(amax.n_ids, 0); /* no logprobs: no token records */
        CHECK_EQ(st1.sample_bytes_total - st0.sample_bytes_total, rows.completion * V * 4);
        CHECK_EQ(st2.sample_bytes_total - st1.sample_bytes_total, amax.completion * 4);
        setup_close(&s);
    }
}

TEST(concurrent_equals_alone)
{
    struct setup s;
    if (setup_open(&s, "tiny-qwen35.gguf", 8, 48, 16, true) != 0) {
        CHECK(0);
        return;
    }
    enum { N = 8 };
    int32_t prompts[N][90];
    struct result alone[N], together[N];
    for (int i = 0; i < N; i++) {
        make_prompt(prompts[i], 30 + 7 * i, i + 3);
        run_one(s.e, prompts[i], 30 + 7 * i, 12, i % 2 ? 0.8f : 0.0f, 100 + i, NULL, &alone[i]);
    }
    /* a fresh engine so that nothing is served from the prompt cache */
    setup_close(&s);
    CHECK(setup_open(&s, "tiny-qwen35.gguf", 8, 48, 16, true) == 0);
    eng_req_t *r[N];
    char err[256];
    for (int i = 0; i < N; i++) {
        r[i] = make_req(prompts[i], 30 + 7 * i, 12, i % 2 ? 0.8f : 0.0f, 100 + i, NULL);
        CHECK_EQ(eng_submit(s.e, r[i], err, sizeof err), 0);
    }
    for (int i = 0; i < N; i++) {
        wait_done(r[i], &together[i]);
        eng_req_release(r[i]);
        CHECK_EQ(together[i].n_ids, alone[i].n_ids);
        CHECK(together[i].len == alone[i].len &&
              memcmp(together[i].text, alone[i].text, alone[i].len) == 0);
        for (int64_t k = 0; k < alone[i].n_ids && k < together[i].n_ids; k++)
            CHECK_EQ(together[i].ids[k], alone[i].ids[k]);
    }
    setup_close(&s);
}

TEST(prompt_cache_reuses_prefix)
{
    const char *files[] = {"tiny-qwen35.gguf", "tiny-qwen3.gguf"};
    for (size_t f = 0; f < 2; f++) {
        struct setup s, fresh;
        if (setup_open(&s, files[f], 1, 32, 8, true) ||
            setup_open(&fresh, files[f], 1, 32, 8, true)) {
            CHECK(0);
            return;
        }
        int32_t a[150], b[170];
        make_prompt(a, 150, 9);
        memcpy(b, a, sizeof a);
        make_prompt(b + 150, 20, 4);
        struct result r1, r2, r3;
        run_one(s.e, a, 150, 6, 0.0f, 0, NULL, &r1);
        run_one(s.e, b, 170, 10, 0.0f, 0, NULL, &r2);
        run_one(fresh.e, b, 170, 10, 0.0f, 0, NULL, &r3);
        printf("  %s: second request cached %lld of 170 prompt tokens (fresh: %lld)\n", files[f],
               (long long)r2.cached, (long long)r3.cached);
        CHECK_EQ(r1.cached, 0);
        CHECK(r2.cached >= 140);
        CHECK_EQ(r3.cached, 0);
        CHECK_EQ(r2.n_ids, r3.n_ids);
        for (int64_t k = 0; k < r2.n_ids && k < r3.n_ids; k++)
            CHECK_EQ(r2.ids[k], r3.ids[k]);
        /* the identical prompt again: everything but one token comes from the cache */
        struct result r4;
        run_one(s.e, b, 170, 10, 0.0f, 0, NULL, &r4);
        CHECK(r4.cached >= 140);
        CHECK(r4.len == r3.len && memcmp(r4.text, r3.text, r3.len) == 0);
        setup_close(&s);
        setup_close(&fresh);
    }
}

/* A chat-like request: prompt[0 .. n) with a message end at bound (0: none). */
static eng_req_t *submit_bound(eng_t *e, const int32_t *prompt, int64_t n, int64_t bound,
                               int64_t max_tokens, bool cache)
{
    struct eng_req_params p = {.n_prompt = n, .max_tokens = max_tokens, .cache_prompt = cache};
    p.prompt = malloc((size_t)n * sizeof *p.prompt);
    memcpy(p.prompt, prompt, (size_t)n * sizeof *p.prompt);
    if (bound) {
        p.bounds = malloc(sizeof *p.bounds);
        p.bounds[0] = bound;
        p.n_bounds = 1;
    }
    p.s = (struct smp_params){.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    p.logprobs = true;
    eng_req_t *r = eng_req_create(&p, NULL, NULL);
    char err[256];
    CHECK_EQ(eng_submit(e, r, err, sizeof err), 0);
    return r;
}

static void finish_req(eng_req_t *r, struct result *res)
{
    wait_done(r, res);
    eng_req_release(r);
}

static bool same_output(const struct result *a, const struct result *b)
{
    return a->n_ids == b->n_ids && memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof *a->ids) == 0;
}

/* Issue 36: a prefix that ends at a message boundary is reused from another slot while that
 * slot is busy (a device copy of its KV rows and checkpoint), and from the RAM tier after the
 * slot that held it moved on; the answers equal those computed without the cache. */
TEST(prompt_cache_across_slots_and_ram)
{
    const char *files[] = {"tiny-qwen35.gguf", "tiny-qwen3next.gguf"};
    for (size_t f = 0; f < 2; f++) {
        int32_t px[120], py[120], pz[120], pq[130];
        make_prompt(px, 100, 3);
        memcpy(py, px, 100 * sizeof *px);
        memcpy(pz, px, 100 * sizeof *px);
        make_prompt(px + 100, 20, 5);
        make_prompt(py + 100, 20, 6);
        make_prompt(pz + 100, 20, 8);
        make_prompt(pq, 130, 7);
        struct setup ref, two, one;
        g_ram_max = 64 << 20;
        int rc = setup_open(&ref, files[f], 1, 32, 8, true) |
                 setup_open(&two, files[f], 2, 32, 8, true) |
                 setup_open(&one, files[f], 1, 32, 8, true);
        g_ram_max = 0;
        if (rc) {
            CHECK(0);
            return;
        }
        struct result want, a, busy, copied, c, from_ram, q;
        finish_req(submit_bound(ref.e, py, 120, 100, 10, false), &want);
        /* two slots: z keeps slot 0 busy (reusing x's prefix in place) while y copies it */
        finish_req(submit_bound(two.e, px, 120, 100, 6, true), &a);
        eng_req_t *rz = submit_bound(two.e, pz, 120, 100, 120, true);
        eng_req_t *ry = submit_bound(two.e, py, 120, 100, 10, true);
        finish_req(ry, &copied);
        finish_req(rz, &busy);
        struct eng_stats st;
        eng_get_stats(two.e, &st);
        printf("  %s: copied prefix %lld tokens, %lld slot copies\n", files[f],
               (long long)copied.cached, (long long)st.pc_copies);
        CHECK_EQ(a.cached, 0);
        CHECK_EQ(busy.cached, 100);
        CHECK_EQ(copied.cached, 100);
        CHECK(st.pc_copies >= 1);
        CHECK(same_output(&copied, &want));
        /* one slot: q evicts x's prefix to RAM; y gets it back from there */
        finish_req(submit_bound(one.e, px, 120, 100, 6, true), &c);
        finish_req(submit_bound(one.e, pq, 130, 0, 6, true), &q);
        finish_req(submit_bound(one.e, py, 120, 100, 10, true), &from_ram);
        eng_get_stats(one.e, &st);
        printf("  %s: prefix from RAM %lld tokens (%lld saved, %lld RAM bytes)\n", files[f],
               (long long)from_ram.cached, (long long)st.pc_demoted, (long long)st.pc_ram_bytes);
        CHECK_EQ(from_ram.cached, 100);
        CHECK_EQ(st.pc_hit_ram, 100);
        CHECK(st.pc_demoted >= 1 && st.pc_ram_bytes > 0 && st.pc_ram_bytes <= (64 << 20));
        CHECK(same_output(&from_ram, &want));
        setup_close(&ref);
        setup_close(&two);
        setup_close(&one);
    }
}

/* Wait (a hang guard of 60 s, not a timing) until the engine has saved n checkpoints below the
 * slots; returns the count. */
static int64_t wait_saved(eng_t *e, int64_t n)
{
    struct eng_stats st;
    for (int i = 0; i < 6000; i++) {
        eng_get_stats(e, &st);
        if (st.pc_demoted >= n)
            break;
        testutil_sleep_ms(10);
    }
    return st.pc_demoted;
}

/* Saves below the slots happen off the requests' path (eng_cache.c): a checkpoint goes to RAM
 * in the background while its slot still holds it; a request that overwrites a slot's rows
 * before their save is done copies them first only within its budget (8 rows per prompt token
 * it computes), else the save is given up. Background saves copy one KV row per step here
 * (cache_save_piece 1), and requests are queued before the engine starts, so the order of
 * events is fixed. */
TEST(prompt_cache_write_behind)
{
    int32_t px[120], py[120], pq[130], one[1] = {7};
    make_prompt(px, 100, 3);
    memcpy(py, px, 100 * sizeof *px);
    make_prompt(px + 100, 20, 5);
    make_prompt(py + 100, 20, 6);
    make_prompt(pq, 130, 7);
    struct setup ref, s1, s2, s3;
    g_ram_max = 64 << 20;
    g_save_piece = 1;
    int rc = setup_open(&ref, "tiny-qwen35.gguf", 1, 32, 8, true) |
             setup_open(&s1, "tiny-qwen35.gguf", 1, 32, 8, false) |
             setup_open(&s2, "tiny-qwen35.gguf", 1, 32, 8, false) |
             setup_open(&s3, "tiny-qwen35.gguf", 1, 32, 8, true);
    g_ram_max = 0;
    g_save_piece = 0;
    if (rc) {
        CHECK(0);
        return;
    }
    char err[256];
    struct result want, a, b, y, q;
    struct eng_stats st;
    finish_req(submit_bound(ref.e, py, 120, 100, 10, false), &want);
    /* 1: a one-token request right behind x (101 tokens: its last prefill step computes one,
     * which lets the saves copy 8 rows) may not copy x's 100 rows: the save is given up, and y
     * finds nothing below the slots */
    eng_req_t *ra = submit_bound(s1.e, px, 101, 100, 2, true);
    eng_req_t *rb = submit_bound(s1.e, one, 1, 0, 2, true);
    CHECK_EQ(eng_start(s1.e, err, sizeof err), 0);
    finish_req(ra, &a);
    finish_req(rb, &b);
    finish_req(submit_bound(s1.e, py, 120, 100, 10, true), &y);
    eng_get_stats(s1.e, &st);
    printf("  given up: %lld saves, y cached %lld\n", (long long)st.pc_abandoned,
           (long long)y.cached);
    CHECK_EQ(st.pc_abandoned, 1);
    CHECK_EQ(y.cached, 0);
    CHECK(same_output(&y, &want));
    /* 2: a 130-token request behind x computes enough to take x's rows on its way: saved, and
     * y gets the prefix back from RAM */
    ra = submit_bound(s2.e, px, 120, 100, 2, true);
    eng_req_t *rq = submit_bound(s2.e, pq, 130, 0, 2, true);
    CHECK_EQ(eng_start(s2.e, err, sizeof err), 0);
    finish_req(ra, &a);
    finish_req(rq, &q);
    eng_get_stats(s2.e, &st); /* (before y, which may give up q's own saves) */
    CHECK_EQ(st.pc_abandoned, 0);
    finish_req(submit_bound(s2.e, py, 120, 100, 10, true), &y);
    eng_get_stats(s2.e, &st);
    CHECK_EQ(y.cached, 100);
    CHECK_EQ(st.pc_hit_ram, 100);
    CHECK(same_output(&y, &want));
    /* 3: with time between requests, x's checkpoint is saved while the slot still holds it,
     * so the one-token request gives nothing up */
    finish_req(submit_bound(s3.e, px, 120, 100, 2, true), &a);
    CHECK(wait_saved(s3.e, 1) >= 1);
    finish_req(submit_bound(s3.e, one, 1, 0, 2, true), &b);
    finish_req(submit_bound(s3.e, py, 120, 100, 10, true), &y);
    eng_get_stats(s3.e, &st);
    CHECK_EQ(st.pc_abandoned, 0);
    CHECK_EQ(y.cached, 100);
    CHECK(same_output(&y, &want));
    setup_close(&ref);
    setup_close(&s1);
    setup_close(&s2);
    setup_close(&s3);
}

TEST(stop_string_not_emitted)
{
    struct setup s;
    if (setup_open(&s, "tiny-qwen35.gguf", 1, 32, 8, true) != 0) {
        CHECK(0);
        return;
    }
    int32_t prompt[40];
    make_prompt(prompt, 40, 2);
    struct result full, cut;
    run_one(s.e, prompt, 40, 24, 0.0f, 0, NULL, &full);
    CHECK(full.len >= 4);
    /* pick two bytes from the middle of the full text (ASCII-safe or not, memmem works on
     * bytes) as the stop string */
    size_t at = full.len / 2;
    char stop[3] = {full.text[at], full.text[at + 1], 0};
    if (stop[0] && stop[1]) {
        run_one(s.e, prompt, 40, 24, 0.0f, 0, stop, &cut);
        const char *first = memmem(full.text, full.len, stop, 2);
        CHECK(first != NULL);
        CHECK_EQ(cut.len, (size_t)(first - full.text));
        CHECK(memcmp(cut.text, full.text, cut.len) == 0);
        CHECK(memmem(cut.text, cut.len, stop, 2) == NULL);
        CHECK_EQ(cut.finish, ENG_FINISH_STOP);
    }
    setup_close(&s);
}

TEST(cancel_queue_and_limits)
{
    struct setup s;
    if (setup_open(&s, "tiny-qwen35.gguf", 1, 32, 1, false) != 0) {
        CHECK(0);
        return;
    }
    char err[256];
    int32_t prompt[300];
    make_prompt(prompt, 300, 5);
    eng_req_t *big = make_req(prompt, 300, 5, 0.0f, 0, NULL);
    CHECK_EQ(eng_submit(s.e, big, err, sizeof err), DD_EINVAL); /* 300 >= ctx 256 */
    CHECK(strstr(err, "256") != NULL);
    eng_req_release(big);
    eng_req_t *a = make_req(prompt, 20, 200, 0.0f, 0, NULL);
    eng_req_t *b = make_req(prompt, 20, 5, 0.0f, 0, NULL);
    CHECK_EQ(eng_submit(s.e, a, err, sizeof err), 0);
    CHECK_EQ(eng_submit(s.e, b, err, sizeof err), DD_EFULL); /* queue_max 1, not started */
    CHECK(eng_start(s.e, err, sizeof err) == 0);
    testutil_sleep_ms(20);
    eng_req_cancel(a);
    struct result res;
    wait_done(a, &res);
    CHECK(res.finish == ENG_FINISH_CANCELLED || res.finish == ENG_FINISH_STOP);
    eng_req_release(a);
    eng_req_release(b);
    struct eng_stats st;
    eng_get_stats(s.e, &st);
    CHECK_EQ(st.active_slots, 0);
    setup_close(&s);
}

int main(int argc, char **argv)
{
    if (!testutil_models_dir(argc, argv, models, sizeof models))
        return TESTUTIL_SKIP_RC;
    RUN(greedy_matches_forward_loop);
    RUN(greedy_argmax_on_device);
    RUN(concurrent_equals_alone);
    RUN(prompt_cache_reuses_prefix);
    RUN(prompt_cache_across_slots_and_ram);
    RUN(prompt_cache_write_behind);
    RUN(stop_string_not_emitted);
    RUN(cancel_queue_and_limits);
    TEST_MAIN_END("test_eng");
}
