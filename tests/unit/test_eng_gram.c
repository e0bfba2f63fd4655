/*
 * test_eng_gram — constrained decoding in the engine (engine/sched/eng_gram.c): with a grammar,
 * every output of the tiny random models is a prefix of a sentence (a whole one when it ended
 * with end-of-generation), and speculation does not change the text: without drafts, with
 * n-gram, MTP, both, and an oracle drafter that proposes the true continuation with mistakes
 * (drafts the grammar refuses included), at temperature 0 and with a seeded temperature, 1 to 4
 * slots, on every arch (qwen35, qwen3next, qwen35moe, qwen3), the tokens are identical.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/device.h" // defines: dev_cpu_create
#include "engine/model/model.h"    // defines: model_load
#include "engine/model/tok.h"      // defines: tok_encode
#include "engine/sched/eng.h"      // defines: eng_*
#include "engine/sched/gram.h"     // defines: gram_*
#include "engine/util.h"           // defines: xmalloc
#include "server/api/schema.h"     // defines: schema_json_object_gbnf
#include "test.h"                  // defines: TEST, RUN, CHECK*
#include "testutil.h"              // defines: testutil_*

static char models[512];

#define MAXT 96

struct run_out {
    int32_t ids[MAXT];
    int64_t n;
    int64_t drafted, accepted;
    enum eng_finish finish;
    char text[4096];
    size_t len;
};

static void take_delta(const struct eng_delta *d, void *ud)
{
    struct run_out *o = ud;
    for (int64_t i = 0; i < d->n_toks && o->n < MAXT; i++)
        o->ids[o->n++] = d->toks[i].id;
    if (d->len && o->len + d->len < sizeof o->text) {
        memcpy(o->text + o->len, d->text, d->len);
        o->len += d->len;
    }
    o->drafted = d->drafted_tokens;
    o->accepted = d->accepted_tokens;
    if (d->done)
        o->finish = d->finish;
}

static const char *const grammars[] = {
    NULL, /* the JSON object grammar */
    "root ::= \"{\\\"k\\\": [\" item ( \", \" item ){0,6} \"]}\"\n"
    "item ::= [0-9]{1,3} | \"\\\"\" [a-z ]{0,8} \"\\\"\" | \"true\"\n",
};

/* The oracle: the grammar-constrained truth with a wrong token in most rounds. */
static struct {
    const struct run_out *truth;
    const int32_t *prompts[4];
    int64_t n_prompt[4];
    int n_req;
    int64_t calls;
} oracle;

static int64_t oracle_draft(void *ud, int64_t slot, const int32_t *hist, int64_t n, int64_t max,
                            int32_t *out)
{
    for (int i = 0; i < oracle.n_req && oracle.truth; i++) {
        int64_t np = oracle.n_prompt[i];
        if (n <= np || memcmp(hist, oracle.prompts[i], (size_t)np * sizeof *hist) != 0)
            continue;
        const struct run_out *t = &oracle.truth[i];
        int64_t gen = n - np, c = oracle.calls++, len = 1 + c % max, k = 0;
        for (; k < len && gen + k < t->n; k++)
            out[k] = t->ids[gen + k];
        if (c % 3 != 0 && k > 0)
            out[c % k] = (out[c % k] + 1 + (int32_t)(c % 5)) % 200; /* often refused */
        return k;
    }
    return 0;
}

static void run_all(struct model *m, gram_t *g, unsigned spec, int n_req, float temp,
                    struct run_out *out)
{
    char err[256];
    struct dev *d = NULL;
    eng_t *e = NULL;
    struct eng_params p = {.n_slots = n_req,
                           .n_ctx = 256,
                           .max_batch_tokens = 64,
                           .queue_max = 16,
                           .n_checkpoints = 2,
                           .checkpoint_every = 64,
                           .draft_max = 3,
                           .spec_types = spec,
                           .ngram_n = 3,
                           .ngram_min = 1,
                           .ngram_max_draft = 6,
                           .draft_fn = oracle_draft};
    if (dev_cpu_create(2, NULL, &d, err, sizeof err) || eng_create(m, d, &p, &e, err, sizeof err) ||
        eng_start(e, err, sizeof err)) {
        printf("  %s\n", err);
        CHECK(0);
        goto out;
    }
    eng_req_t *r[4];
    for (int i = 0; i < n_req; i++) {
        struct eng_req_params rp = {.max_tokens = MAXT, .cache_prompt = true, .logprobs = true};
        rp.prompt = xmalloc((size_t)oracle.n_prompt[i] * sizeof *rp.prompt);
        memcpy(rp.prompt, oracle.prompts[i], (size_t)oracle.n_prompt[i] * sizeof *rp.prompt);
        rp.n_prompt = oracle.n_prompt[i];
        rp.s = (struct smp_params){
            .temperature = temp, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = 7 + i};
        gram_retain(g);
        rp.gram = g;
        r[i] = eng_req_create(&rp, NULL, NULL);
        CHECK_EQ(eng_submit(e, r[i], err, sizeof err), 0);
    }
    for (int i = 0; i < n_req; i++) {
        memset(&out[i], 0, sizeof out[i]);
        CHECK(testutil_req_drain(r[i], 200000, take_delta, &out[i]));
        eng_req_release(r[i]);
    }
out:
    eng_destroy(e);
    dev_destroy(d);
}

/* The text is in the grammar: a whole sentence after a stop, a prefix after length. */
static void check_text(gram_t *g, const struct run_out *o)
{
    gram_m_t *gm = gram_m_create(g);
    bool ok = gram_m_accept_bytes(gm, o->text, o->len);
    if (o->finish == ENG_FINISH_STOP)
        ok = ok && gram_m_accepting(gm);
    else
        ok = ok && o->finish == ENG_FINISH_LENGTH;
    if (!ok)
        printf("  not in the grammar (finish %d): %.*s\n", o->finish, (int)o->len, o->text);
    CHECK(ok);
    gram_m_destroy(gm);
}

static void lossless(const char *file, int n_req, float temp)
{
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/%s", models, file);
    struct model *m = NULL;
    if (model_load(path, &m, err, sizeof err)) {
        printf("  %s\n", err);
        CHECK(0);
        return;
    }
    static const char *const texts[] = {"{\"k\": [1, 2, 3]} {\"k\": [1, 2, 3]} {\"k\": [1, 2",
                                        "{\"a\": true, \"b\": [1, 2]} {\"a\": true",
                                        "hello {\"k\": [\"ab\", 12]} {\"k\": [\"ab\"",
                                        "[1, 2] [1, 2] [1"};
    int32_t *prompts[4];
    for (int i = 0; i < 4; i++) {
        prompts[i] = xmalloc(256 * sizeof **prompts);
        oracle.n_prompt[i] = tok_encode(m->tok, texts[i], strlen(texts[i]), false, prompts[i], 256);
        oracle.prompts[i] = prompts[i];
    }
    static const struct {
        const char *name;
        unsigned spec;
    } modes[] = {{"ngram", ENG_SPEC_NGRAM},
                 {"mtp", ENG_SPEC_MTP},
                 {"ngram+mtp", ENG_SPEC_NGRAM | ENG_SPEC_MTP},
                 {"oracle", ENG_SPEC_EXTERNAL}};
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        const char *text = grammars[gi] ? grammars[gi] : schema_json_object_gbnf();
        gram_t *g = NULL;
        CHECK_EQ(gram_compile(text, strlen(text), NULL, &g, err, sizeof err), 0);
        struct run_out base[4], spec[4];
        oracle.n_req = n_req;
        oracle.truth = NULL;
        run_all(m, g, 0, n_req, temp, base);
        for (int i = 0; i < n_req; i++)
            check_text(g, &base[i]);
        for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
            oracle.truth = base;
            oracle.calls = 0;
            run_all(m, g, modes[k].spec, n_req, temp, spec);
            int same = 0;
            int64_t drafted = 0, accepted = 0;
            for (int i = 0; i < n_req; i++) {
                bool eq = spec[i].n == base[i].n &&
                          memcmp(spec[i].ids, base[i].ids, (size_t)base[i].n * 4) == 0;
                same += eq;
                drafted += spec[i].drafted;
                accepted += spec[i].accepted;
                CHECK(eq);
                check_text(g, &spec[i]);
            }
            printf("  %-18s grammar %zu %-9s slots %d temp %.1f: identical %d/%d, drafted %lld, "
                   "accepted %lld\n",
                   file, gi, modes[k].name, n_req, temp, same, n_req, (long long)drafted,
                   (long long)accepted);
            if (modes[k].spec == ENG_SPEC_EXTERNAL)
                CHECK(accepted > 0); /* verification really ran on grammar-checked drafts */
        }
        gram_release(g);
    }
    for (int i = 0; i < 4; i++)
        free(prompts[i]);
    model_free(m);
}

TEST(lossless_with_grammar)
{
    lossless("tiny-qwen35.gguf", 1, 0.0f);
    lossless("tiny-qwen35.gguf", 4, 0.0f);
    lossless("tiny-qwen35.gguf", 4, 0.8f);
    lossless("tiny-qwen3next.gguf", 2, 0.0f);
    lossless("tiny-qwen35moe.gguf", 2, 0.0f);
    lossless("tiny-qwen3.gguf", 2, 0.7f); /* pure attention: rollback by KV truncation only */
}

int main(int argc, char **argv)
{
    if (!testutil_models_dir(argc, argv, models, sizeof models))
        return TESTUTIL_SKIP_RC;
    RUN(lossless_with_grammar);
    TEST_MAIN_END("test_eng_gram");
}
