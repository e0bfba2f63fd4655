/*
 * cmd_gen — `deltad generate` (one completion to stdout, streamed, UTF-8 safe) and
 * `deltad logits` (all-position logits as float32 rows, optionally with the MTP head's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"              // defines: cmd_engine_open, cmd_feed
#include "engine/model/tok.h" // defines: tok_stream_push
#include "engine/sched/smp.h" // defines: smp_sample
#include "engine/util.h"      // defines: dd_now

static int decode_loop(struct cmd_engine *e, const struct cmd_opts *o, int64_t pos, int64_t *n_out)
{
    const tok_t *tok = e->model->tok;
    struct smp_params sp = {.temperature = (float)o->temp,
                            .top_k = (int32_t)o->top_k,
                            .top_p = (float)o->top_p,
                            .seed = (uint64_t)o->seed};
    struct smp s;
    smp_init(&s, e->model->hp.n_vocab, &sp);
    struct tok_stream ts;
    tok_stream_init(&ts);
    char buf[1024];
    int rc = 0;
    *n_out = 0;
    int32_t cur = smp_sample(&s, fwd_logits(e->fwd), NULL, 0);
    while (*n_out < o->n_predict && !tok_is_eog(tok, cur)) {
        fwrite(buf, 1, tok_stream_push(tok, &ts, cur, buf, sizeof buf), stdout);
        fflush(stdout);
        ++*n_out;
        if (*n_out == o->n_predict)
            break;
        if ((rc = cmd_feed(e, &cur, 1, pos++, 1, NULL, NULL)))
            break;
        cur = smp_sample(&s, fwd_logits(e->fwd), NULL, 0);
    }
    fwrite(buf, 1, tok_stream_flush(&ts, buf, sizeof buf), stdout);
    fputc('\n', stdout);
    smp_deinit(&s);
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
    /* the context must hold the prompt and the completion */
    int64_t n_ctx = o->ctx ? o->ctx : n + o->n_predict + 1;
    if (n > 0 && n + o->n_predict > n_ctx) {
        fprintf(stderr, "error: prompt (%lld tokens) + n-predict (%lld) exceed --ctx %lld\n",
                (long long)n, (long long)o->n_predict, (long long)n_ctx);
        n = 0;
    }
    if (n <= 0 || cmd_engine_ready(&e, 1, n_ctx, o->batch)) {
        free(toks);
        cmd_engine_close(&e);
        return rc ? rc : 2;
    }
    double t0 = dd_now();
    rc = cmd_feed(&e, toks, n, 0, o->batch, NULL, NULL);
    double t1 = dd_now();
    int64_t gen = 0;
    if (!rc)
        rc = decode_loop(&e, o, n, &gen);
    double t2 = dd_now();
    fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generated: %lld tokens, %.1f tok/s\n",
            (long long)n, n / (t1 - t0), (long long)gen, gen > 1 ? (gen - 1) / (t2 - t1) : 0.0);
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
    if (!o->out) {
        fprintf(stderr, "error: logits needs -o OUT.f32\n");
        return 2;
    }
    if (!o->tokens == !o->prompt) {
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
    if (!rc && o->ctx && n > o->ctx) {
        fprintf(stderr, "error: %lld tokens exceed --ctx %lld\n", (long long)n, (long long)o->ctx);
        rc = 2;
    }
    if (!rc && cmd_engine_ready(&e, 1, o->ctx ? o->ctx : n, o->batch))
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
