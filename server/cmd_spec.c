/*
 * cmd_spec — `deltad bench --spec TYPES`: single-stream decode through the engine with and
 * without speculation on the same prompt (greedy, so the outputs must be identical), reporting
 * decode tokens/s, the speed-up, the acceptance rate and the accepted length per verification.
 * Medians over --reps runs; a fresh engine per run so the prompt cache never helps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"       // defines: cmd_engine_open, struct cmd_opts
#include "eng.h"       // defines: eng_create_group
#include "tokenizer.h" // defines: tok_encode
#include "util.h"      // defines: xmalloc, dd_now

struct spec_run {
    double tok_s;
    int64_t generated, drafted, accepted;
    uint64_t hash; /* of the generated text: must not depend on speculation */
};

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

/* Generate with speculation types `spec` on a fresh engine; fills *out. */
static int run_once(struct cmd_engine *e, const struct cmd_opts *o, unsigned spec,
                    const int32_t *prompt, int64_t n_prompt, struct spec_run *out)
{
    char err[512];
    eng_t *eng;
    struct eng_params p = {.n_slots = 1, .n_ctx = n_prompt + o->n_gen + 8,
                           .max_batch_tokens = o->batch, .queue_max = 1, .n_checkpoints = 0,
                           .checkpoint_every = 1 << 20, .draft_max = o->draft_max,
                           .spec_types = spec, .ngram_n = 3, .ngram_min = 2,
                           .ngram_max_draft = o->draft_max};
    if (eng_create_group(e->model, e->devs, e->n_dev, &p, &eng, err, sizeof err) ||
        eng_start(eng, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    struct eng_req_params rp = {.n_prompt = n_prompt, .max_tokens = o->n_gen};
    rp.prompt = xmalloc((size_t)n_prompt * sizeof *rp.prompt);
    memcpy(rp.prompt, prompt, (size_t)n_prompt * sizeof *rp.prompt);
    rp.s = (struct eng_sampling){.top_p = 1.0f, .repetition_penalty = 1.0f};
    eng_req_t *r = eng_req_create(&rp, NULL, NULL);
    int rc = eng_submit(eng, r, err, sizeof err);
    uint64_t h = 1469598103934665603ull;
    struct eng_delta d = {0};
    while (!rc) {
        bool any = eng_req_take(r, &d);
        for (size_t i = 0; i < d.len; i++)
            h = (h ^ (unsigned char)d.text[i]) * 1099511628211ull;
        bool done = d.done;
        if (done) {
            double dt = d.t_done - d.t_first_token;
            *out = (struct spec_run){.tok_s = dt > 0 ? (d.completion_tokens - 1) / dt : 0,
                                     .generated = d.completion_tokens, .drafted = d.drafted_tokens,
                                     .accepted = d.accepted_tokens, .hash = h};
        }
        eng_delta_free(&d);
        if (done)
            break;
        if (!any)
            sleep_us(200);
    }
    eng_req_release(r);
    eng_destroy(eng);
    return rc;
}

static int cmp_run(const void *a, const void *b)
{
    double x = ((const struct spec_run *)a)->tok_s, y = ((const struct spec_run *)b)->tok_s;
    return (x > y) - (x < y);
}

/* Median run (by tokens/s) of reps runs. */
static int median_run(struct cmd_engine *e, const struct cmd_opts *o, unsigned spec,
                      const int32_t *prompt, int64_t n, struct spec_run *med)
{
    struct spec_run runs[64];
    int64_t reps = o->reps < 64 ? o->reps : 64;
    for (int64_t i = 0; i < reps; i++)
        if (run_once(e, o, spec, prompt, n, &runs[i]))
            return 1;
    qsort(runs, (size_t)reps, sizeof runs[0], cmp_run);
    *med = runs[reps / 2];
    for (int64_t i = 1; i < reps; i++)
        if (runs[i].hash != runs[0].hash)
            fprintf(stderr, "warning: greedy output differs between repetitions\n");
    return 0;
}

static unsigned parse_spec(const char *s)
{
    unsigned m = 0;
    if (strstr(s, "ngram"))
        m |= ENG_SPEC_NGRAM;
    if (strstr(s, "mtp"))
        m |= ENG_SPEC_MTP;
    return m;
}

int cmd_bench_spec(const struct cmd_opts *o)
{
    unsigned spec = parse_spec(o->spec);
    if (!spec || strspn(o->spec, "ngram,mtp") != strlen(o->spec)) {
        fprintf(stderr, "error: --spec expects ngram, mtp or ngram,mtp, got '%s'\n", o->spec);
        return 2;
    }
    struct cmd_engine e;
    if (cmd_engine_open(&e, o)) {
        cmd_engine_close(&e);
        return 1;
    }
    int32_t *prompt = NULL;
    int64_t n = 0;
    if (o->text) {
        n = tok_encode(e.model->tok, o->text, strlen(o->text), true, NULL, 0);
        prompt = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *prompt);
        tok_encode(e.model->tok, o->text, strlen(o->text), true, prompt, n);
    } else { /* synthetic, repetitive: an echo-style prompt for n-gram lookup */
        n = o->n_prompt;
        prompt = xmalloc((size_t)n * sizeof *prompt);
        for (int64_t i = 0; i < n; i++)
            prompt[i] = (int32_t)((i % 37) * 7 + 3) % (int32_t)e.model->hp.n_vocab;
    }
    struct spec_run base, sp;
    int rc = n > 0 ? median_run(&e, o, 0, prompt, n, &base) : 2;
    rc = rc ? rc : median_run(&e, o, spec, prompt, n, &sp);
    if (!rc) {
        printf("prompt       %lld tokens; %lld generated (greedy), reps %lld (medians)\n",
               (long long)n, (long long)base.generated, (long long)o->reps);
        printf("no spec      %.2f tok/s\n", base.tok_s);
        printf("spec %-7s %.2f tok/s (x%.2f); drafted %lld, accepted %lld (%.1f%%)\n", o->spec,
               sp.tok_s, base.tok_s > 0 ? sp.tok_s / base.tok_s : 0.0, (long long)sp.drafted,
               (long long)sp.accepted, sp.drafted ? 100.0 * sp.accepted / sp.drafted : 0.0);
        printf("lossless     %s\n", sp.hash == base.hash && sp.generated == base.generated
                                        ? "yes (identical text)"
                                        : "NO: outputs differ");
    }
    free(prompt);
    cmd_engine_close(&e);
    return rc;
}
