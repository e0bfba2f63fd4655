/*
 * test_golden — the engine's logits against the independent NumPy reference (tools/reference),
 * for every arch on the tiny models `mkmodel --tiny-all` generates:
 *   - all positions in one batch vs the committed fixture: max relative error <= 1e-4, argmax
 *     equal at every position; the MTP head's logits likewise;
 *   - the same tokens in chunks of 7 and one by one give the batch logits within 1e-5;
 *   - a verify-sized batch followed by a partial rollback through the GDN snapshot groups gives
 *     the logits of a sequence that never saw the rejected tokens;
 *   - quantised variants of the same weights stay close to the F32 model.
 * Fixture format (written by tools/reference/make_fixtures.py): magic "DDGL", version 1,
 * n_tokens, n_vocab, flags (bit 0: MTP rows), FNV-1a 64 of the model file, tokens, logits,
 * [mtp logits].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "engine/compute/device.h"  // defines: dev_destroy
#include "engine/compute/fwd.h" // defines: fwd_decode, fwd_mtp
#include "engine/model/model.h"   // defines: model_load
#include "tests/unit/testutil.h"  // defines: testutil_dev_cpu

static const char *build_dir = "build/cpu";

struct fixture {
    uint32_t n_tokens, n_vocab, flags;
    uint64_t fnv;
    int32_t *tokens;
    float *logits, *mtp;
};

static uint64_t fnv_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    fclose(f);
    return h;
}

static int load_fixture(const char *path, struct fixture *fx)
{
    FILE *f = fopen(path, "rb");
    uint32_t hdr[5];
    memset(fx, 0, sizeof *fx);
    if (!f)
        return -1;
    int ok = fread(hdr, 4, 5, f) == 5 && hdr[0] == 0x4C474444u && hdr[1] == 1 &&
             fread(&fx->fnv, 8, 1, f) == 1 && hdr[2] > 0 && hdr[2] < 100000 && hdr[3] > 0 &&
             hdr[3] < 10000000;
    if (ok) {
        fx->n_tokens = hdr[2];
        fx->n_vocab = hdr[3];
        fx->flags = hdr[4];
        size_t nl = (size_t)fx->n_tokens * fx->n_vocab;
        fx->tokens = malloc(fx->n_tokens * sizeof(int32_t));
        fx->logits = malloc(nl * sizeof(float));
        fx->mtp = (fx->flags & 1) ? malloc(nl * sizeof(float)) : NULL;
        ok = fread(fx->tokens, 4, fx->n_tokens, f) == fx->n_tokens &&
             fread(fx->logits, 4, nl, f) == nl && (!fx->mtp || fread(fx->mtp, 4, nl, f) == nl);
    }
    fclose(f);
    return ok ? 0 : -1;
}

static void free_fixture(struct fixture *fx)
{
    free(fx->tokens);
    free(fx->logits);
    free(fx->mtp);
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, size_t n)
{
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md ? d : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return md / (mb > 0 ? mb : 1.0);
}

static int64_t argmax(const float *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* ---- an engine on one model ----------------------------------------------------------------- */

struct eng {
    struct model *m;
    struct dev *d;
    struct fwd_ctx *f;
};

static int eng_open(struct eng *e, const char *path)
{
    char err[512];
    memset(e, 0, sizeof *e);
    if (model_load(path, &e->m, err, sizeof err)) {
        printf("  %s\n", err);
        return -1;
    }
    struct fwd_params p = {.max_tokens = 128, .n_seq = 3, .n_ctx = 256, .draft_max = 4};
    if (testutil_dev_cpu(2, &e->d, err, sizeof err) ||
        fwd_create(e->m, e->d, &p, &e->f, err, sizeof err)) {
        printf("  %s\n", err);
        return -1;
    }
    return 0;
}

static void eng_close(struct eng *e)
{
    fwd_destroy(e->f);
    dev_destroy(e->d);
    model_free(e->m);
}

/* Feed tok[0..n) of seq s from position pos0 in chunks of `chunk`, all logits into out
 * [n][V] (out may be NULL), hidden rows into hid [n][E] (may be NULL). */
static int feed(struct eng *e, int32_t s, const int32_t *tok, int64_t n, int64_t pos0,
                int64_t chunk, float *out, float *hid)
{
    const int64_t V = e->m->hp.n_vocab, E = e->m->hp.n_embd;
    int64_t pos[128];
    int32_t seq[128];
    uint8_t want[128];
    char err[256];
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t m = n - i < chunk ? n - i : chunk;
        for (int64_t j = 0; j < m; j++) {
            pos[j] = pos0 + i + j;
            seq[j] = s;
            want[j] = 1;
        }
        struct fwd_batch b = {.n_tokens = m, .token = tok + i, .pos = pos, .seq = seq,
                              .logits = want};
        if (fwd_decode(e->f, &b, err, sizeof err)) {
            printf("  forward: %s\n", err);
            return -1;
        }
        if (out)
            memcpy(out + i * V, fwd_logits(e->f), (size_t)(m * V) * sizeof(float));
        if (hid)
            memcpy(hid + i * E, fwd_hidden(e->f), (size_t)(m * E) * sizeof(float));
    }
    return 0;
}

/* ---- the checks per arch ------------------------------------------------------------------- */

static void check_mtp(struct eng *e, const struct fixture *fx, const float *hid)
{
    const int64_t n = fx->n_tokens, V = fx->n_vocab, E = e->m->hp.n_embd;
    float *hprev = calloc((size_t)(n * E), sizeof(float));
    memcpy(hprev + E, hid, (size_t)((n - 1) * E) * sizeof(float));
    int64_t pos[128];
    int32_t seq[128];
    for (int64_t i = 0; i < n; i++) {
        pos[i] = i;
        seq[i] = 0;
    }
    uint8_t want[128];
    memset(want, 1, sizeof want);
    struct fwd_batch b = {.n_tokens = n, .token = fx->tokens, .pos = pos, .seq = seq,
                          .logits = want};
    char err[256];
    CHECK(fwd_mtp(e->f, &b, hprev, err, sizeof err) == 0);
    double re = rel_err(fwd_logits(e->f), fx->mtp, (size_t)(n * V));
    int64_t agree = 0;
    for (int64_t t = 0; t < n; t++)
        agree += argmax(fwd_logits(e->f) + t * V, V) == argmax(fx->mtp + t * V, V);
    printf("  mtp: max rel err %.3g, argmax agreement %lld/%lld\n", re, (long long)agree,
           (long long)n);
    CHECK(re <= 1e-4);
    CHECK_EQ(agree, n);
    free(hprev);
}

static void check_chunks(struct eng *e, const struct fixture *fx, const float *batch_logits)
{
    const int64_t n = fx->n_tokens, V = fx->n_vocab;
    float *out = malloc((size_t)(n * V) * sizeof(float));
    const int64_t chunks[] = {7, 1};
    for (int c = 0; c < 2; c++) {
        fwd_seq_clear(e->f, 1);
        CHECK(feed(e, 1, fx->tokens, n, 0, chunks[c], out, NULL) == 0);
        double re = rel_err(out, batch_logits, (size_t)(n * V));
        printf("  chunks of %lld vs one batch: max rel err %.3g\n", (long long)chunks[c], re);
        CHECK(re <= 1e-5);
    }
    free(out);
}

/* Verify batch of 4 draft tokens, accept 2 (roll back 2), continue with another token: the
 * logits must match a sequence that only ever saw the accepted tokens. */
static void check_rollback(struct eng *e, const struct fixture *fx)
{
    const int64_t V = fx->n_vocab, base = 40;
    float *a = malloc((size_t)(4 * V) * sizeof(float)), *b = malloc((size_t)(base + 3) * V * sizeof(float));
    int32_t alt = (fx->tokens[base + 2] + 5) % 256;
    fwd_seq_clear(e->f, 1);
    CHECK(feed(e, 1, fx->tokens, base, 0, 64, NULL, NULL) == 0);
    CHECK(feed(e, 1, fx->tokens + base, 4, base, 4, a, NULL) == 0); /* verify batch */
    CHECK(fwd_seq_rollback(e->f, 1, 2));                             /* keep base, base+1 */
    CHECK(feed(e, 1, &alt, 1, base + 2, 1, a, NULL) == 0);
    fwd_seq_clear(e->f, 2);
    int32_t ref_toks[128];
    memcpy(ref_toks, fx->tokens, (size_t)(base + 2) * sizeof(int32_t));
    ref_toks[base + 2] = alt;
    CHECK(feed(e, 2, ref_toks, base + 3, 0, 1, b, NULL) == 0);
    double re = rel_err(a, b + (base + 2) * V, (size_t)V);
    printf("  rollback 2 of 4 then continue vs never-drafted sequence: max rel err %.3g\n", re);
    CHECK(re <= 1e-5);
    free(a);
    free(b);
}

static void golden_arch(const char *arch)
{
    char mpath[512], fpath[512];
    snprintf(mpath, sizeof mpath, "%s/models/tiny-%s.gguf", build_dir, arch);
    snprintf(fpath, sizeof fpath, "tests/fixtures/golden-%s.bin", arch);
    struct fixture fx;
    printf("%s:\n", arch);
    if (load_fixture(fpath, &fx) != 0) {
        printf("  cannot read fixture %s\n", fpath);
        CHECK(0);
        return;
    }
    if (fnv_file(mpath) != fx.fnv) {
        printf("  %s differs from the model the fixture was made from: regenerate with "
               "tools/reference/make_fixtures.py\n", mpath);
        CHECK(0);
        free_fixture(&fx);
        return;
    }
    struct eng e;
    if (eng_open(&e, mpath) != 0) {
        CHECK(0);
        free_fixture(&fx);
        return;
    }
    const int64_t n = fx.n_tokens, V = fx.n_vocab;
    CHECK_EQ(V, e.m->hp.n_vocab);
    float *out = malloc((size_t)(n * V) * sizeof(float));
    float *hid = malloc((size_t)(n * e.m->hp.n_embd) * sizeof(float));
    fwd_seq_clear(e.f, 0);
    CHECK(feed(&e, 0, fx.tokens, n, 0, 128, out, hid) == 0);
    double re = rel_err(out, fx.logits, (size_t)(n * V));
    int64_t agree = 0;
    for (int64_t t = 0; t < n; t++)
        agree += argmax(out + t * V, V) == argmax(fx.logits + t * V, V);
    printf("  trunk: max rel err %.3g, argmax agreement %lld/%lld\n", re, (long long)agree,
           (long long)n);
    CHECK(re <= 1e-4);
    CHECK_EQ(agree, n);
    if (fx.mtp)
        check_mtp(&e, &fx, hid);
    check_chunks(&e, &fx, out);
    if (e.m->hp.arch != ARCH_QWEN3)
        check_rollback(&e, &fx);
    free(out);
    free(hid);
    eng_close(&e);
    free_fixture(&fx);
}

TEST(qwen3)
{
    golden_arch("qwen3");
}
TEST(qwen35)
{
    golden_arch("qwen35");
}
TEST(qwen35moe)
{
    golden_arch("qwen35moe");
}
TEST(qwen3next)
{
    golden_arch("qwen3next");
}

/* Quantised variants of the same weights: close to the F32 model, same argmax almost always. */
static void quant_variant(const char *base, const char *variant, double max_re, double min_agree)
{
    char p0[512], p1[512];
    snprintf(p0, sizeof p0, "%s/models/%s.gguf", build_dir, base);
    snprintf(p1, sizeof p1, "%s/models/%s.gguf", build_dir, variant);
    struct eng e0, e1;
    if (eng_open(&e0, p0) != 0 || eng_open(&e1, p1) != 0) {
        CHECK(0);
        return;
    }
    const int64_t n = 64, V = e0.m->hp.n_vocab;
    int32_t tok[64];
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 37 + 11) % 256);
    float *a = malloc((size_t)(n * V) * sizeof(float)), *b = malloc((size_t)(n * V) * sizeof(float));
    CHECK(feed(&e0, 0, tok, n, 0, 64, a, NULL) == 0);
    CHECK(feed(&e1, 0, tok, n, 0, 64, b, NULL) == 0);
    double re = rel_err(b, a, (size_t)(n * V));
    int64_t agree = 0;
    for (int64_t t = 0; t < n; t++)
        agree += argmax(a + t * V, V) == argmax(b + t * V, V);
    printf("  %s vs %s: max rel err %.3g, argmax agreement %lld/%lld\n", variant, base, re,
           (long long)agree, (long long)n);
    CHECK(re <= max_re);
    CHECK(agree >= min_agree * n);
    free(a);
    free(b);
    eng_close(&e0);
    eng_close(&e1);
}

/* Tolerances: these random-weight models amplify weight noise about tenfold (F16 weights move
 * the logits by ~0.4 %), so a sound quantised path stays within tens of percent and keeps most
 * argmaxes, while a broken kernel gives O(1) errors and chance-level (1/272) agreement. */
TEST(quantised)
{
    quant_variant("tiny-qwen35", "tiny-qwen35-q8_0", 0.3, 0.85);
    quant_variant("tiny-qwen35moe", "tiny-qwen35moe-q8_0", 0.6, 0.75);
    quant_variant("tiny-qwen35", "tiny-qwen35-q4_0", 1.2, 0.4);
    quant_variant("small-qwen35-f32", "small-qwen35-f16", 0.02, 0.95);
    quant_variant("small-qwen35-f32", "small-qwen35-bf16", 0.06, 0.9);
    quant_variant("small-qwen35-f32", "small-qwen35-q6_k", 0.5, 0.75);
    quant_variant("small-qwen35-f32", "small-qwen35-q5_k", 0.7, 0.6);
    quant_variant("small-qwen35-f32", "small-qwen35-q4_k", 1.0, 0.45);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        build_dir = argv[1];
    RUN(qwen3);
    RUN(qwen35);
    RUN(qwen35moe);
    RUN(qwen3next);
    RUN(quantised);
    TEST_MAIN_END("test_golden");
}
