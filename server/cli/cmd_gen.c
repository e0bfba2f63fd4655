/*
 * cmd_gen — `deltad generate` (one completion to stdout, streamed, UTF-8 safe) and
 * `deltad logits` (all-position logits as float32 rows, optionally with the MTP head's).
 *
 * generate runs the daemon's engine (engine/sched/eng.h) with one slot and submits one request,
 * as the daemon's job path does, so it has the daemon's sampler, penalties, stop strings and
 * speculation; the engine parameters come from the same function as the daemon's
 * (serve_eng_params). Threads: the main thread waits on the request's notify callback, which
 * the engine thread calls.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"               // defines: cmd_engine_open, cmd_feed
#include "engine/sched/eng.h"  // defines: eng_create_group, eng_submit, eng_req_take
#include "engine/util.h"       // defines: xstrdup, xmalloc
#include "serve.h"             // defines: serve_eng_params
#include "server/config/cfg.h" // defines: cfg_init, struct cfg

_Static_assert(CMD_MAX_STOP == ENG_MAX_STOP, "--stop holds as many strings as a request");

/* ============================================================================================
 * generate: one request through the engine, exactly like a request of the daemon
 * ========================================================================================== */

/* The engine thread's notify callback wakes the main thread, which drains the outbox. */
struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ready; /* new output since the last look */
};

static void on_notify(void *ud)
{
    struct waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->ready = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wait_ready(struct waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->ready)
        pthread_cond_wait(&w->cv, &w->mu);
    w->ready = false;
    pthread_mutex_unlock(&w->mu);
}

/* The request: the prompt (transferred), max tokens, stop strings and the sampler's fields,
 * set by name. */
static eng_req_t *make_request(const struct cmd_opts *o, int32_t *toks, int64_t n, struct waiter *w)
{
    struct eng_req_params p = {.prompt = toks, .n_prompt = n, .max_tokens = o->n_predict};
    p.s.temperature = (float)o->temp;
    p.s.top_k = (int32_t)o->top_k;
    p.s.top_p = (float)o->top_p;
    p.s.min_p = (float)o->min_p;
    p.s.presence_penalty = (float)o->presence_penalty;
    p.s.frequency_penalty = (float)o->frequency_penalty;
    p.s.repetition_penalty = (float)o->repetition_penalty;
    p.s.seed = (uint64_t)o->seed;
    for (int i = 0; i < o->n_stop; i++)
        p.stop[i] = xstrdup(o->stop[i]);
    p.n_stop = o->n_stop;
    return eng_req_create(&p, on_notify, w);
}

/* Print the text as it arrives until the request is done; *last gets the final delta's
 * counters. Returns 0, or 1 when the engine reported an error. */
static int stream_out(eng_req_t *r, struct waiter *w, struct eng_delta *last)
{
    for (;;) {
        struct eng_delta d;
        bool any = eng_req_take(r, &d);
        if (d.len) {
            fwrite(d.text, 1, d.len, stdout);
            fflush(stdout);
        }
        if (d.done) {
            *last = d;
            last->text = NULL, last->toks = NULL; /* freed below */
            eng_delta_free(&d);
            if (last->finish == ENG_FINISH_ERROR)
                fprintf(stderr, "error: %s\n", last->error);
            return last->finish == ENG_FINISH_ERROR;
        }
        eng_delta_free(&d);
        if (!any)
            wait_ready(w);
    }
}

/* One slot holding the prompt and the completion, the daemon's other engine parameters. */
static int run_engine(struct cmd_engine *e, const struct cmd_opts *o, int32_t *toks, int64_t n)
{
    struct cfg c;
    cfg_init(&c); /* the daemon's defaults for the keys generate has no flag for */
    c.ctx = n + o->n_predict + 1 < 16 ? 16 : n + o->n_predict + 1; /* the engine's least */
    c.max_batch_tokens = o->batch;
    c.spec_type = o->spec_type;
    c.spec_draft_max = o->draft_max;
    c.spec_p_min = o->p_min;
    c.cuda_graphs = o->cuda_graphs;
    struct eng_params p;
    serve_eng_params(&c, &p);
    cfg_free(&c);
    p.cache_dir = NULL; /* pointed into c; one request has no prefix to save anyway */
    p.cache_ram_max = 0;
    p.n_slots = 1;
    p.queue_max = 1;
    char err[512];
    eng_t *eng = NULL;
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    eng_req_t *r = make_request(o, toks, n, &w);
    if (eng_create_group(e->model, e->devs, e->n_dev, &p, &eng, err, sizeof err) ||
        eng_start(eng, err, sizeof err) || eng_submit(eng, r, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        eng_req_release(r);
        eng_destroy(eng);
        return 1;
    }
    struct eng_delta d;
    int rc = stream_out(r, &w, &d);
    fputc('\n', stdout);
    eng_req_release(r);
    eng_stop(eng, 0);
    eng_destroy(eng);
    double pp = d.t_first_token - d.t_queued, tg = d.t_done - d.t_first_token;
    int64_t gen = d.completion_tokens;
    fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generated: %lld tokens, %.1f tok/s",
            (long long)n, pp > 0 ? n / pp : 0.0, (long long)gen, gen > 1 ? (gen - 1) / tg : 0.0);
    if (d.drafted_tokens)
        fprintf(stderr, "; drafted %lld, accepted %lld", (long long)d.drafted_tokens,
                (long long)d.accepted_tokens);
    fputc('\n', stderr);
    return rc;
}

int cmd_generate(const struct cmd_opts *o)
{
    struct cmd_engine e;
    int32_t *toks = NULL;
    int rc = cmd_engine_open(&e, o);
    int64_t n = rc ? -1 : cmd_prompt_tokens(&e, o, &toks);
    if (n == 0)
        fprintf(stderr, "error: the prompt is empty\n");
    if (n > 0 && n + o->n_predict > o->ctx) { /* --ctx bounds the prompt and the completion */
        fprintf(stderr, "error: prompt (%lld tokens) + n-predict (%lld) exceed --ctx %lld\n",
                (long long)n, (long long)o->n_predict, (long long)o->ctx);
        n = 0;
    }
    if (n <= 0) {
        rc = rc ? rc : 2;
    } else if (o->n_predict == 0) { /* nothing to generate (max_tokens 0 means no limit) */
        fputc('\n', stdout);
    } else {
        rc = run_engine(&e, o, toks, n); /* toks transferred */
        toks = NULL;
    }
    free(toks);
    cmd_engine_close(&e);
    return rc;
}

/* MTP logits of every position p: token x_p with the trunk hidden of p-1 (zeros at p = 0). */
static int mtp_rows(struct cmd_engine *e, const int32_t *toks, int64_t n, int64_t batch,
                    const float *hidden, float *out)
{
    const int64_t E = e->model->hp.n_embd, V = e->model->hp.n_vocab;
    float *hprev = xcalloc((size_t)(batch * E), sizeof(float));
    int64_t *pos = xmalloc((size_t)batch * sizeof *pos);
    int32_t *seq = xcalloc((size_t)batch, sizeof *seq);
    uint8_t *want = xmalloc((size_t)batch);
    memset(want, 1, (size_t)batch);
    char err[512];
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i += batch) {
        int64_t m = n - i < batch ? n - i : batch;
        for (int64_t j = 0; j < m; j++) {
            pos[j] = i + j;
            if (i + j == 0)
                memset(hprev, 0, (size_t)E * sizeof(float));
            else
                memcpy(hprev + j * E, hidden + (i + j - 1) * E, (size_t)E * sizeof(float));
        }
        struct fwd_batch b = {
            .n_tokens = m, .token = toks + i, .pos = pos, .seq = seq, .logits = want};
        if (fwd_mtp(e->fwd, &b, hprev, err, sizeof err)) {
            fprintf(stderr, "error: mtp: %s\n", err);
            rc = 1;
        } else {
            memcpy(out + i * V, fwd_logits(e->fwd), (size_t)(m * V) * sizeof(float));
        }
    }
    free(hprev);
    free(pos);
    free(seq);
    free(want);
    return rc;
}

int cmd_logits(const struct cmd_opts *o)
{
    if (!*o->out) {
        fprintf(stderr, "error: logits needs -o OUT.f32\n");
        return 2;
    }
    if (!*o->tokens == !*o->prompt) {
        fprintf(stderr, "error: logits needs exactly one of --tokens and -p\n");
        return 2;
    }
    struct cmd_engine e;
    int32_t *toks = NULL;
    if (cmd_engine_open(&e, o)) {
        cmd_engine_close(&e);
        return 1;
    }
    int64_t n = cmd_prompt_tokens(&e, o, &toks);
    int rc = n <= 0 ? 2 : 0;
    if (n == 0)
        fprintf(stderr, "error: no tokens\n");
    if (!rc && n > o->ctx) {
        fprintf(stderr, "error: %lld tokens exceed --ctx %lld\n", (long long)n, (long long)o->ctx);
        rc = 2;
    }
    if (!rc && cmd_engine_ready(&e, 1, n, o->batch))
        rc = 1;
    const int64_t V = e.model->hp.n_vocab, E = e.model->hp.n_embd;
    int rows = o->mtp ? 2 : 1;
    float *logits = rc ? NULL : xmalloc((size_t)(rows * n * V) * sizeof(float));
    float *hidden = rc ? NULL : xmalloc((size_t)(n * E) * sizeof(float));
    if (!rc)
        rc = cmd_feed(&e, toks, n, 0, o->batch, logits, hidden);
    if (!rc && o->mtp)
        rc = mtp_rows(&e, toks, n, o->batch, hidden, logits + n * V);
    if (!rc) {
        FILE *f = fopen(o->out, "wb");
        if (!f ||
            fwrite(logits, sizeof(float), (size_t)(rows * n * V), f) != (size_t)(rows * n * V) ||
            fclose(f) != 0) {
            fprintf(stderr, "error: cannot write %s\n", o->out);
            rc = 1;
        } else {
            fprintf(stderr, "wrote %lld x %lld float32 logits to %s\n", (long long)(rows * n),
                    (long long)V, o->out);
        }
    }
    free(logits);
    free(hidden);
    free(toks);
    cmd_engine_close(&e);
    return rc;
}
