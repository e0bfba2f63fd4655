/*
 * eng_req — requests and their outboxes (contract in eng.h).
 *
 * Invariants: refs counts the holders (creator + engine while submitted); the last release
 * frees everything. The outbox is appended to by the engine thread only and drained by the
 * holder of the HTTP side; `done` is set once and never cleared.
 */
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"    // defines: struct eng_req
#include "engine/util.h" // defines: xcalloc, dd_buf_put, dd_buf_reserve, dd_now

eng_req_t *eng_req_create(struct eng_req_params *p, void (*notify)(void *ud), void *ud)
{
    eng_req_t *r = xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, false);
    r->p = *p;
    memset(p, 0, sizeof *p); /* ownership moved into the request */
    r->notify = notify;
    r->ud = ud;
    pthread_mutex_init(&r->mu, NULL);
    r->prompt_tokens = r->p.n_prompt;
    r->t_queued = dd_now();
    /* The outbox is sized here, on the submitting thread, for what a client that keeps up
     * leaves in it between two takes, so the engine thread's appends (eng__req_append) do not
     * allocate; it grows there only while a client falls behind. */
    dd_buf_reserve(&r->out, ENG_OUTBOX_RESERVE);
    if (r->p.logprobs) {
        r->toks_cap = 64;
        r->toks = xmalloc((size_t)r->toks_cap * sizeof *r->toks);
    }
    return r;
}

void eng__req_retain(eng_req_t *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void eng_req_release(eng_req_t *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free(r->p.prompt);
    free(r->p.bounds);
    for (int i = 0; i < r->p.n_stop; i++)
        free(r->p.stop[i]);
    free(r->p.s.logit_bias);
    gram_release(r->p.gram);
    dd_buf_free(&r->out);
    free(r->toks);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void eng_req_cancel(eng_req_t *r)
{
    atomic_store(&r->cancelled, true);
}

void eng__req_append(eng_req_t *r, const char *text, size_t len, const struct eng_tok_info *ti)
{
    pthread_mutex_lock(&r->mu);
    if (len)
        dd_buf_put(&r->out, text, len);
    if (ti) {
        if (r->n_toks == r->toks_cap) {
            r->toks_cap = r->toks_cap ? r->toks_cap * 2 : 16;
            r->toks = xrealloc(r->toks, (size_t)r->toks_cap * sizeof *r->toks);
        }
        r->toks[r->n_toks++] = *ti;
    }
    if (r->t_first_token == 0.0 && (len || ti))
        r->t_first_token = dd_now();
    pthread_mutex_unlock(&r->mu);
}

void eng__req_finish(eng_req_t *r, enum eng_finish why, const char *error)
{
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        r->done = true;
        r->finish = why;
        r->t_done = dd_now();
        if (error)
            snprintf(r->error, sizeof r->error, "%s", error);
    }
    pthread_mutex_unlock(&r->mu);
}

void eng__req_usage(eng_req_t *r, int64_t cached, int64_t completion)
{
    pthread_mutex_lock(&r->mu);
    r->cached_tokens = cached;
    r->completion_tokens = completion;
    pthread_mutex_unlock(&r->mu);
}

void eng__req_spec(eng_req_t *r, int64_t drafted, int64_t accepted)
{
    pthread_mutex_lock(&r->mu);
    r->drafted_tokens = drafted;
    r->accepted_tokens = accepted;
    pthread_mutex_unlock(&r->mu);
}

void eng__req_notify(eng_req_t *r)
{
    if (r->notify)
        r->notify(r->ud);
}

bool eng_req_take(eng_req_t *r, struct eng_delta *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_lock(&r->mu);
    if (r->out.len) {
        /* a copy, so the engine thread's appends reuse the grown buffer */
        d->len = r->out.len;
        d->text = memcpy(xmalloc(d->len + 1), r->out.p, d->len + 1);
        dd_buf_truncate(&r->out, 0);
    }
    if (r->n_toks) { /* a copy too, for the same reason */
        d->n_toks = r->n_toks;
        d->toks = memcpy(xmalloc((size_t)d->n_toks * sizeof *d->toks), r->toks,
                         (size_t)d->n_toks * sizeof *d->toks);
        r->n_toks = 0;
    }
    d->done = r->done;
    d->finish = r->finish;
    memcpy(d->error, r->error, sizeof d->error);
    d->prompt_tokens = r->prompt_tokens;
    d->cached_tokens = r->cached_tokens;
    d->completion_tokens = r->completion_tokens;
    d->drafted_tokens = r->drafted_tokens;
    d->accepted_tokens = r->accepted_tokens;
    d->t_queued = r->t_queued;
    d->t_first_token = r->t_first_token;
    d->t_done = r->t_done;
    pthread_mutex_unlock(&r->mu);
    return d->len || d->n_toks || d->done;
}

void eng_delta_free(struct eng_delta *d)
{
    free(d->text);
    free(d->toks);
    d->text = NULL;
    d->toks = NULL;
}
