/*
 * eng_emit — the per-token end of an engine step (DESIGN.md phases 5 and 7): sampling (the
 * slot's sampler, given the request's generated tokens for its penalties), logprobs,
 * incremental detokenisation with stop strings held back until decided, and the end-of-request
 * decisions (end-of-generation token, stop string, max_tokens, context full).
 *
 * Invariant: text reaches the outbox only once it cannot be part of a stop string, and always
 * as whole UTF-8 characters (tok_stream). Thread: the engine thread.
 */
#include <math.h>
#include <string.h>

#include "eng_impl.h"         // defines: struct slot, eng__finish, fwd_argmax (fwd.h)
#include "engine/model/tok.h" // defines: tok_stream_push, tok_is_eog
#include "engine/util.h"      // defines: dd_buf_put, ASSERT
#include "smp.h"              // defines: smp_sample, smp_argmax, struct smp

/* Log-probability of the sampled token and the top alternatives, over the row the sampler
 * just used (after logit bias and penalties, before temperature and the filters). */
static void token_info(const eng_t *e, const struct slot *s, int32_t id, struct eng_tok_info *ti)
{
    const int64_t V = e->m->hp.n_vocab;
    const float *l = s->smp.logits;
    float mx = l[smp_argmax(l, V)];
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++)
        sum += exp((double)l[v] - mx);
    const float lse = mx + (float)log(sum);
    memset(ti, 0, sizeof *ti);
    ti->id = id;
    ti->logprob = l[id] - lse;
    ti->n_top = s->req->p.top_logprobs;
    for (int32_t k = 0; k < ti->n_top; k++) {
        int64_t best = -1;
        for (int64_t v = 0; v < V; v++) {
            bool taken = false;
            for (int32_t j = 0; j < k; j++)
                taken |= ti->top_id[j] == v;
            if (!taken && (best < 0 || l[v] > l[best]))
                best = v;
        }
        ti->top_id[k] = (int32_t)best;
        ti->top_logprob[k] = l[best] - lse;
    }
}

/* Append text to the held-back buffer, release what cannot start a stop string. Returns true
 * when a stop string was found (text up to it released, the rest dropped). */
static bool emit_text(struct slot *s, const char *text, size_t len, const struct eng_tok_info *ti)
{
    const struct eng_req_params *p = &s->req->p;
    struct dd_buf *pend = &s->pend;
    dd_buf_put(pend, text, len);
    size_t cut = pend->len, hold = 0;
    bool stopped = false;
    for (int i = 0; i < p->n_stop; i++) {
        const char *hit = memmem(pend->p, pend->len, p->stop[i], strlen(p->stop[i]));
        if (hit && (size_t)(hit - pend->p) < cut) {
            cut = (size_t)(hit - pend->p);
            stopped = true;
        }
    }
    if (!stopped) {
        /* hold back the longest tail that is a proper prefix of some stop string */
        for (int i = 0; i < p->n_stop; i++) {
            size_t sl = strlen(p->stop[i]);
            for (size_t k = sl - 1; k > hold; k--)
                if (k <= pend->len && memcmp(pend->p + pend->len - k, p->stop[i], k) == 0) {
                    hold = k;
                    break;
                }
        }
        cut = pend->len - hold;
    }
    eng__req_append(s->req, pend->p, cut, ti);
    if (stopped)
        dd_buf_truncate(pend, 0);
    else
        dd_buf_consume(pend, pend->len - hold);
    return stopped;
}

/* Release everything held back (end of generation without a stop string). */
static void flush_text(struct slot *s)
{
    char buf[64];
    size_t n = tok_stream_flush(&s->ts, buf, sizeof buf);
    if (n)
        emit_text(s, buf, n, NULL);
    eng__req_append(s->req, s->pend.p, s->pend.len, NULL);
    dd_buf_truncate(&s->pend, 0);
}

/* One sampled token: account, emit, decide whether the request is finished. */
static void accept_token(eng_t *e, struct slot *s, int32_t id)
{
    const tok_t *tok = e->m->tok;
    eng_req_t *r = s->req;
    struct eng_tok_info ti, *tip = NULL;
    if (id < 0 || !eng__gram_accept(e, s, id)) { /* the mask left nothing, or a broken mask */
        flush_text(s);
        eng__finish(e, s, ENG_FINISH_ERROR,
                    gram_m_failed(s->gm) ? "the grammar is too ambiguous to follow"
                                         : "the grammar allows no token here");
        return;
    }
    if (r->p.logprobs) {
        token_info(e, s, id, &ti);
        tip = &ti;
    }
    ASSERT(s->n_gen <= e->p.n_ctx); /* s->gen holds n_ctx + 1 */
    s->gen[s->n_gen++] = id;
    atomic_fetch_add(&e->st_gen, 1);
    if (tok_is_eog(tok, id)) {
        if (tip)
            eng__req_append(r, NULL, 0, tip);
        flush_text(s);
        eng__finish(e, s, ENG_FINISH_STOP, NULL);
        return;
    }
    char buf[512];
    size_t n = tok_stream_push(tok, &s->ts, id, buf, sizeof buf);
    if (emit_text(s, buf, n, tip)) {
        eng__finish(e, s, ENG_FINISH_STOP, NULL);
        return;
    }
    bool full = s->n_cached + 1 >= e->p.n_ctx;
    if ((r->p.max_tokens > 0 && s->n_gen >= r->p.max_tokens) || full) {
        flush_text(s);
        eng__finish(e, s, ENG_FINISH_LENGTH, NULL);
        return;
    }
    s->last = id;
    eng__req_usage(r, s->n_reused, s->n_gen);
    eng__req_notify(r);
}

int32_t eng__sample_row(eng_t *e, struct slot *s, const float *logits)
{
    const float *row = eng__gram_row(e, s, logits);
    return row ? smp_sample(&s->smp, row, s->gen, s->n_gen) : -1;
}

/* Greedy without logprobs, bias, penalties or grammar: the argmax of the raw row, which the
 * devices compute (fwd_argmax: 4 bytes per row come back instead of the row). */
static bool argmax_on_device(const struct slot *s)
{
    return smp_is_argmax(&s->smp) && !s->gm && !s->req->p.logprobs;
}

int32_t eng__sample_out(eng_t *e, struct slot *s, int64_t o)
{
    if (argmax_on_device(s))
        return fwd_argmax(e->fwd)[o];
    return eng__sample_row(e, s, fwd_logits(e->fwd) + o * e->m->hp.n_vocab);
}

bool eng__accept(eng_t *e, struct slot *s, int32_t id)
{
    accept_token(e, s, id);
    return s->state != SLOT_FREE;
}
