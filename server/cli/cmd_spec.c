/*
 * cmd_spec — `deltad bench --spec ngram|mtp|ngram,mtp|all [--rollback snapshot|recompute|both]`
 * (all = the three draft-source sets in one interleaved comparison): single-stream
 * decode through the engine without speculation and with it, on the same prompt (greedy, so
 * the outputs should be identical), reporting decode tokens/s, the speed-up, the acceptance
 * rate and the accepted length per verification; with --rollback recompute or both, also the
 * debug rollback by recomputation and what a rollback costs each way.
 *
 * Method: a fresh engine per run, so the prompt cache never helps; the configurations are run
 * in turn within each repetition (base, spec, base, spec, ...), so slow drift of a shared
 * machine's load hits all of them alike; the median run (by tokens/s) of each is reported.
 * Decode time runs from the first token to the last (prefill excluded). The same rate by
 * process CPU time (the waiting thread sleeps on the engine's notify, so that is the engine's
 * work) is reported too: on a machine shared with other jobs it leaves out the time the engine
 * waited for a core, and is the steadier measure of what speculation costs.
 *
 * --parallel N: N concurrent streams of the same prompt (N slots), the tokens/s summed over
 * them: what speculation costs or gains at batch N.
 *
 * Output: human-readable lines, then one `result key=value ...` line for tools/bench_spec.sh.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"              // defines: cmd_engine_open, struct cmd_opts
#include "engine/model/tok.h" // defines: tok_encode
#include "engine/sched/eng.h" // defines: eng_create_group, eng_get_stats
#include "engine/util.h"      // defines: xmalloc, dd_now

#define MAX_REPS 64

struct spec_run {
    double tok_s, decode_s;
    double cpu_tok_s, cpu_s; /* the same by process CPU time: steadier on a shared machine */
    int64_t generated, drafted, accepted, verify_steps;
    int64_t rollbacks, restores, replayed;
    double ckpt_s, draft_s, sync_s;
    int64_t mtp_rows;
    int64_t throttles, probes; /* the draft throttle's counters */
    int64_t steps;             /* forward steps of the target (all slots' rows in each) */
    uint64_t hash;             /* of the generated text: must not depend on speculation */
};

#define MAX_CFG 7 /* no spec, then (snapshot, recompute) for up to 3 draft-source sets */

/* One configuration under test. */
struct spec_cfg {
    char name[24];
    const char *types; /* ngram | mtp | ngram,mtp */
    unsigned spec;
    int rollback;
    struct spec_run runs[MAX_REPS], med;
};

/* The waiting side sleeps on a condition variable the engine's notify signals: no polling,
 * so the process CPU time is the engine's work. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ready;
} wake = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void on_notify(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&wake.mu);
    wake.ready = true;
    pthread_cond_signal(&wake.cv);
    pthread_mutex_unlock(&wake.mu);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define MAX_STREAMS 64

/* Drain requests r[0 .. n) to their ends; fills the per-request part of *out, summed over the
 * streams. Decode time and CPU time are counted from the first delta with text (the first
 * token: prefill excluded, all of it with one stream) to the last stream's end. */
static void drain(eng_req_t **r, int64_t n, struct spec_run *out)
{
    uint64_t hs[MAX_STREAMS];
    bool done[MAX_STREAMS] = {0};
    for (int64_t i = 0; i < n; i++)
        hs[i] = 1469598103934665603ull;
    struct eng_delta d = {0};
    double cpu0 = -1.0, t_first = 1e300, t_done = 0.0;
    int64_t left = n;
    *out = (struct spec_run){0};
    while (left > 0) {
        pthread_mutex_lock(&wake.mu);
        while (!wake.ready)
            pthread_cond_wait(&wake.cv, &wake.mu);
        wake.ready = false;
        pthread_mutex_unlock(&wake.mu);
        for (int64_t i = 0; i < n; i++) {
            if (done[i])
                continue;
            eng_req_take(r[i], &d);
            if (cpu0 < 0 && d.len > 0)
                cpu0 = cpu_now();
            for (size_t k = 0; k < d.len; k++)
                hs[i] = (hs[i] ^ (unsigned char)d.text[k]) * 1099511628211ull;
            if (d.done) {
                done[i] = true;
                left--;
                t_first = d.t_first_token < t_first ? d.t_first_token : t_first;
                t_done = d.t_done > t_done ? d.t_done : t_done;
                out->generated += d.completion_tokens;
                out->drafted += d.drafted_tokens;
                out->accepted += d.accepted_tokens;
            }
            eng_delta_free(&d);
        }
    }
    double dt = t_done - t_first, cpu = cpu0 < 0 ? 0 : cpu_now() - cpu0;
    int64_t tok = out->generated - n; /* the first token of each stream is prefill's */
    out->tok_s = dt > 0 ? (double)tok / dt : 0;
    out->decode_s = dt;
    out->cpu_tok_s = cpu > 0 ? (double)tok / cpu : 0;
    out->cpu_s = cpu;
    out->hash = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++)
        out->hash = (out->hash ^ hs[i]) * 1099511628211ull;
}

/* Generate with configuration c on a fresh engine; fills *out. */
static int run_once(struct cmd_engine *e, const struct cmd_opts *o, const struct spec_cfg *c,
                    const int32_t *prompt, int64_t n_prompt, int64_t n_streams,
                    struct spec_run *out)
{
    char err[512];
    eng_t *eng;
    struct eng_params p = {.n_slots = n_streams,
                           .n_ctx = n_prompt + o->n_gen + 8,
                           .max_batch_tokens = o->batch,
                           .queue_max = n_streams,
                           .n_checkpoints = 0,
                           .checkpoint_every = 1 << 20,
                           .draft_max = o->draft_max,
                           .spec_types = c->spec,
                           .ngram_n = 3,
                           .ngram_min = 2,
                           .ngram_max_draft = o->draft_max,
                           .mtp_p_min = (float)o->p_min,
                           .spec_rollback = c->rollback};
    if (eng_create_group(e->model, e->devs, e->n_dev, &p, &eng, err, sizeof err) ||
        eng_start(eng, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    struct eng_req_params rp = {.n_prompt = n_prompt, .max_tokens = o->n_gen};
    rp.prompt = xmalloc((size_t)n_prompt * sizeof *rp.prompt);
    memcpy(rp.prompt, prompt, (size_t)n_prompt * sizeof *rp.prompt);
    rp.s = (struct smp_params){.top_p = 1.0f, .repetition_penalty = 1.0f};
    wake.ready = false;
    eng_req_t *r[MAX_STREAMS];
    int rc = 0;
    for (int64_t i = 0; i < n_streams; i++) {
        struct eng_req_params q = rp;
        q.prompt = xmalloc((size_t)n_prompt * sizeof *q.prompt);
        memcpy(q.prompt, prompt, (size_t)n_prompt * sizeof *q.prompt);
        r[i] = eng_req_create(&q, on_notify, NULL);
        if (!rc && (rc = eng_submit(eng, r[i], err, sizeof err)) != 0)
            fprintf(stderr, "error: %s\n", err);
    }
    free(rp.prompt);
    if (!rc)
        drain(r, n_streams, out);
    struct eng_stats st;
    eng_get_stats(eng, &st);
    out->verify_steps = st.verify_steps_total;
    out->rollbacks = st.rollbacks_total;
    out->restores = st.restores_total;
    out->replayed = st.replayed_total;
    out->ckpt_s = st.ckpt_seconds;
    out->draft_s = st.draft_seconds;
    out->sync_s = st.sync_seconds;
    out->mtp_rows = st.mtp_rows_total;
    out->throttles = st.spec_throttles_total;
    out->steps = st.steps_total;
    out->probes = st.spec_probes_total;
    for (int64_t i = 0; i < n_streams; i++)
        eng_req_release(r[i]);
    eng_destroy(eng);
    return rc ? 1 : 0;
}

static int cmp_run(const void *a, const void *b)
{
    double x = ((const struct spec_run *)a)->tok_s, y = ((const struct spec_run *)b)->tok_s;
    return (x > y) - (x < y);
}

static int cmp_cpu(const void *a, const void *b)
{
    double x = ((const struct spec_run *)a)->cpu_tok_s, y = ((const struct spec_run *)b)->cpu_tok_s;
    return (x > y) - (x < y);
}

/* Run every configuration reps times, in turn, and keep each one's median run. */
static int run_all(struct cmd_engine *e, const struct cmd_opts *o, struct spec_cfg *cfgs, int n_cfg,
                   const int32_t *prompt, int64_t n, int64_t n_streams)
{
    int64_t reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
    for (int64_t i = 0; i < reps; i++)
        for (int k = 0; k < n_cfg; k++)
            if (run_once(e, o, &cfgs[k], prompt, n, n_streams, &cfgs[k].runs[i]))
                return 1;
    for (int k = 0; k < n_cfg; k++) {
        struct spec_cfg *c = &cfgs[k];
        for (int64_t i = 1; i < reps; i++)
            if (c->runs[i].hash != c->runs[0].hash)
                fprintf(stderr, "warning: %s: greedy output differs between repetitions\n",
                        c->name);
        qsort(c->runs, (size_t)reps, sizeof c->runs[0], cmp_cpu);
        double cpu_med = c->runs[reps / 2].cpu_tok_s, cpu_s = c->runs[reps / 2].cpu_s;
        qsort(c->runs, (size_t)reps, sizeof c->runs[0], cmp_run);
        c->med = c->runs[reps / 2]; /* the median run by wall time; CPU rate: its own median */
        c->med.cpu_tok_s = cpu_med;
        c->med.cpu_s = cpu_s;
    }
    return 0;
}

/* The prompt: --text, or a synthetic repetitive one (echo-style, for n-gram lookup). */
static int64_t make_prompt(const struct cmd_engine *e, const struct cmd_opts *o, int32_t **out)
{
    int64_t n;
    int32_t *p;
    if (*o->text) {
        n = tok_encode(e->model->tok, o->text, strlen(o->text), true, NULL, 0);
        p = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *p);
        tok_encode(e->model->tok, o->text, strlen(o->text), true, p, n);
    } else {
        n = o->n_prompt;
        p = xmalloc((size_t)n * sizeof *p);
        for (int64_t i = 0; i < n; i++)
            p[i] = (int32_t)((i % 37) * 7 + 3) % (int32_t)e->model->hp.n_vocab;
    }
    *out = p;
    return n;
}

static double per_verify(const struct spec_run *r, int64_t x)
{
    return r->verify_steps ? (double)x / (double)r->verify_steps : 0.0;
}

static void print_cfg(const struct spec_cfg *c, const struct spec_run *b)
{
    const struct spec_run *r = &c->med;
    printf("%-16s %.2f tok/s (x%.2f), by CPU time %.2f tok/s (x%.2f); drafted %lld, accepted %lld "
           "(%.1f%%), %.2f accepted per "
           "verification; %lld rollbacks (%lld by restore + replay of %lld tokens); checkpoint "
           "copies %.3f ms; drafting %.1f ms, MTP KV sync %.1f ms, %lld MTP rows; throttled %lld "
           "times, %lld probes; %lld slot verifications in %lld forward steps; text %s\n",
           c->name, r->tok_s, b->tok_s > 0 ? r->tok_s / b->tok_s : 0.0, r->cpu_tok_s,
           b->cpu_tok_s > 0 ? r->cpu_tok_s / b->cpu_tok_s : 0.0, (long long)r->drafted,
           (long long)r->accepted, r->drafted ? 100.0 * r->accepted / r->drafted : 0.0,
           per_verify(r, r->accepted), (long long)r->rollbacks, (long long)r->restores,
           (long long)r->replayed, r->ckpt_s * 1e3, r->draft_s * 1e3, r->sync_s * 1e3,
           (long long)r->mtp_rows, (long long)r->throttles, (long long)r->probes,
           (long long)r->verify_steps, (long long)r->steps,
           r->hash == b->hash && r->generated == b->generated ? "identical" : "DIFFERS");
}

/* The result line of draft sources `types`: s = its snapshot run, rc = its recompute run. */
static void print_result(const struct spec_run *b, const char *types, const struct spec_run *s,
                         const struct spec_run *rc)
{
    const struct spec_run *x = s ? s : rc;
    printf("result spec=%s base_tok_s=%.3f spec_tok_s=%.3f speedup=%.4f base_cpu_tok_s=%.3f "
           "spec_cpu_tok_s=%.3f cpu_speedup=%.4f drafted=%lld accepted=%lld verify=%lld "
           "accept_len=%.3f rollbacks=%lld spec_work_pct=%.2f throttles=%lld probes=%lld "
           "lossless=%d",
           types, b->tok_s, x->tok_s, b->tok_s > 0 ? x->tok_s / b->tok_s : 0.0, b->cpu_tok_s,
           x->cpu_tok_s, b->cpu_tok_s > 0 ? x->cpu_tok_s / b->cpu_tok_s : 0.0,
           (long long)x->drafted, (long long)x->accepted, (long long)x->verify_steps,
           per_verify(x, x->accepted), (long long)x->rollbacks,
           x->decode_s > 0 ? 100.0 * (x->draft_s + x->sync_s + x->ckpt_s) / x->decode_s : 0.0,
           (long long)x->throttles, (long long)x->probes,
           x->hash == b->hash && x->generated == b->generated);
    if (s && rc) {
        double per =
            rc->rollbacks ? (rc->decode_s - s->decode_s) * 1e3 / (double)rc->rollbacks : 0.0;
        printf(" rec_tok_s=%.3f rec_rollbacks=%lld rec_ms_per_rollback=%.3f "
               "rec_ckpt_ms_per_rollback=%.4f",
               rc->tok_s, (long long)rc->rollbacks, per,
               rc->rollbacks ? rc->ckpt_s * 1e3 / (double)rc->rollbacks : 0.0);
        printf("\n%-16s recompute vs snapshot: %+.2f ms per rollback (decode time difference / "
               "recompute rollbacks), of which checkpoint copies %.3f ms",
               "rollback", per, rc->rollbacks ? rc->ckpt_s * 1e3 / (double)rc->rollbacks : 0.0);
    }
    printf("\n");
}

static void report(const struct cmd_opts *o, const struct spec_cfg *cfgs, int n_cfg, int64_t n,
                   int64_t n_streams)
{
    const struct spec_run *b = &cfgs[0].med;
    bool lossless = true;
    printf("prompt           %lld tokens; %lld generated (greedy) by %lld stream(s), reps %lld "
           "(medians, runs interleaved)\n",
           (long long)n, (long long)b->generated, (long long)n_streams, (long long)o->reps);
    printf("%-16s %.2f tok/s, by CPU time %.2f tok/s\n", "no spec", b->tok_s, b->cpu_tok_s);
    for (int k = 1; k < n_cfg; k++) {
        print_cfg(&cfgs[k], b);
        lossless &= cfgs[k].med.hash == b->hash && cfgs[k].med.generated == b->generated;
    }
    printf("%-16s %s\n", "lossless", lossless ? "yes (identical text)" : "NO: outputs differ");
    for (int k = 1; k < n_cfg; k++) {
        const struct spec_cfg *c = &cfgs[k], *d = k + 1 < n_cfg ? &cfgs[k + 1] : NULL;
        bool pair = d && strcmp(c->types, d->types) == 0;
        print_result(b, c->types, c->rollback == ENG_ROLLBACK_SNAPSHOT ? &c->med : NULL,
                     c->rollback == ENG_ROLLBACK_RECOMPUTE ? &c->med
                     : pair                                ? &d->med
                                                           : NULL);
        k += pair;
    }
}

/* Add the configurations of draft sources `types` (CMD_SPEC_NGRAM, _MTP or _BOTH). */
static void add_cfgs(struct spec_cfg *cfgs, int *n, int types, bool snap, bool rec)
{
    static const char *const names[] = {"ngram", "mtp", "ngram,mtp"};
    static const unsigned masks[] = {ENG_SPEC_NGRAM, ENG_SPEC_MTP, ENG_SPEC_NGRAM | ENG_SPEC_MTP};
    int i = types - CMD_SPEC_NGRAM;
    for (int r = 0; r < 2; r++) {
        if (!(r ? rec : snap))
            continue;
        struct spec_cfg *c = &cfgs[(*n)++];
        *c = (struct spec_cfg){.types = names[i],
                               .spec = masks[i],
                               .rollback = r ? ENG_ROLLBACK_RECOMPUTE : ENG_ROLLBACK_SNAPSHOT};
        snprintf(c->name, sizeof c->name, "%s/%s", names[i], r ? "recompute" : "snapshot");
    }
}

int cmd_bench_spec(const struct cmd_opts *o)
{
    int64_t n_streams = 1; /* --parallel N: N concurrent streams of the same prompt */
    if (*o->parallel) {
        char *end;
        n_streams = strtoll(o->parallel, &end, 10);
        if (*end != '\0' || n_streams < 1 || n_streams > MAX_STREAMS) {
            fprintf(stderr,
                    "error: --parallel with --spec: one number of concurrent streams, 1..%d "
                    "(got '%s')\n",
                    MAX_STREAMS, o->parallel);
            return 2;
        }
    }
    bool snap = o->rollback != CMD_ROLLBACK_RECOMPUTE, rec = o->rollback != CMD_ROLLBACK_SNAPSHOT;
    static struct spec_cfg cfgs[MAX_CFG]; /* large: kept off the stack */
    int n_cfg = 1, rc = 0;
    cfgs[0] = (struct spec_cfg){.name = "no spec"};
    for (int t = CMD_SPEC_NGRAM; t <= CMD_SPEC_BOTH; t++)
        if (o->spec == t || o->spec == CMD_SPEC_ALL)
            add_cfgs(cfgs, &n_cfg, t, snap, rec);
    struct cmd_engine e;
    if (cmd_engine_open(&e, o)) {
        cmd_engine_close(&e);
        return 1;
    }
    int32_t *prompt = NULL;
    int64_t n = make_prompt(&e, o, &prompt);
    rc = n > 0 ? run_all(&e, o, cfgs, n_cfg, prompt, n, n_streams) : 2;
    if (!rc)
        report(o, cfgs, n_cfg, n, n_streams);
    free(prompt);
    cmd_engine_close(&e);
    return rc;
}
