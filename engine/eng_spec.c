/*
 * eng_spec — speculative decoding inside the engine step (docs/parallelism-and-speculation.md
 * section 3): drafting (n-gram first, then the model's MTP head chained on its own hidden
 * state), the MTP KV sync after every target batch, and verification with rollback.
 *
 * Lossless by construction: every emitted token is sampled by the slot's own sampler from the
 * target logits of its row, in order, with one RNG draw per token exactly as without
 * speculation; a draft token only decides whether the next row's logits are usable. Rejected
 * rows are rolled back by selecting a GDN snapshot group (fwd_seq_rollback: an index change,
 * no copy, no recomputation) and, for attention, by simply writing later positions over them.
 * A draft longer than the snapshot depth (a long n-gram) is covered by a checkpoint taken before
 * the verification; a rejection beyond the depth restores it and replays the accepted tokens.
 *
 * Thread: the engine thread only.
 */
#include <math.h>
#include <string.h>

#include "eng_impl.h" // defines: struct eng, struct slot, eng__*
#include "sampler.h"  // defines: smp_argmax
#include "spec.h"     // defines: spec_ngram_draft
#include "util.h"     // defines: ASSERT

/* Longest draft slot s may take now: room in the context and in max_tokens. */
static int64_t draft_room(const eng_t *e, const struct slot *s, int64_t cap)
{
    int64_t room = e->p.n_ctx - s->n_cached - 2;
    if (s->req->p.max_tokens > 0 && s->req->p.max_tokens - s->n_gen - 1 < room)
        room = s->req->p.max_tokens - s->n_gen - 1;
    return room < cap ? room : cap;
}

static void ngram_round(eng_t *e, struct slot *s)
{
    int64_t room = draft_room(e, s, e->p.ngram_max_draft);
    if (room < 1)
        return;
    s->tokens[s->n_cached] = s->last; /* history = cached tokens + the pending one */
    s->n_draft = spec_ngram_draft(s->tokens, s->n_cached + 1, e->p.ngram_n, e->p.ngram_min,
                                  room, s->draft);
}

/* Probability of the argmax token under softmax(logits): the MTP head's confidence. */
static float top_prob(const float *l, int64_t V, int32_t *id)
{
    *id = smp_argmax(l, V);
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++)
        sum += exp((double)l[v] - l[*id]);
    return (float)(1.0 / sum);
}

/* Chained MTP drafting, one token per drafting slot per call, all slots in one batch. */
static void mtp_rounds(eng_t *e)
{
    const int64_t E = e->m->hp.n_embd;
    int64_t goal = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        bool want = s->state == SLOT_DECODE && (s->spec & ENG_SPEC_MTP) && s->n_draft == 0 &&
                    s->n_replay == 0 && s->draft_goal >= 0;
        s->draft_goal = want ? draft_room(e, s, e->p.draft_max) : 0;
        goal = s->draft_goal > goal ? s->draft_goal : goal;
    }
    char err[256];
    for (int64_t step = 0; step < goal; step++) {
        int64_t n = 0;
        for (int64_t i = 0; i < e->p.n_slots; i++) {
            struct slot *s = &e->slots[i];
            if (s->draft_goal <= step || s->n_draft != step)
                continue;
            e->b_tok[n] = step == 0 ? s->last : s->draft[step - 1];
            e->b_pos[n] = s->n_cached + step;
            e->b_seq[n] = (int32_t)s->id;
            e->b_want[n] = 1;
            memcpy(e->h_prev + n * E, step == 0 ? s->pending_h : s->draft_h,
                   (size_t)E * sizeof(float));
            n++;
        }
        if (n == 0)
            return;
        struct fwd_batch b = {.n_tokens = n, .token = e->b_tok, .pos = e->b_pos, .seq = e->b_seq,
                              .logits = e->b_want};
        ASSERT(fwd_mtp(e->fwd, &b, e->h_prev, err, sizeof err) == 0);
        const float *logits = fwd_logits(e->fwd), *hid = fwd_hidden(e->fwd);
        for (int64_t r = 0; r < n; r++) {
            struct slot *s = &e->slots[e->b_seq[r]];
            int32_t id;
            float p = top_prob(logits + r * e->m->hp.n_vocab, e->m->hp.n_vocab, &id);
            if (p < e->p.mtp_p_min) {
                s->draft_goal = s->n_draft; /* not confident: stop this chain here */
                continue;
            }
            s->draft[s->n_draft++] = id;
            memcpy(s->draft_h, hid + r * E, (size_t)E * sizeof(float));
        }
    }
}

static void external_round(eng_t *e, struct slot *s)
{
    int64_t room = draft_room(e, s, e->draft_cap);
    if (room < 1)
        return;
    s->tokens[s->n_cached] = s->last;
    int64_t n = e->p.draft_fn(e->p.draft_ud, s->id, s->tokens, s->n_cached + 1, room, s->draft);
    s->n_draft = n < 0 ? 0 : n > room ? room : n;
}

/* Back-off: after k verifications in a row that accepted nothing, skip 2^k - 1 rounds (at most
 * 31), so a stream where drafts never hit costs almost nothing over plain decoding. */
static bool backing_off(struct slot *s)
{
    if (s->skip_rounds > 0) {
        s->skip_rounds--;
        return true;
    }
    return false;
}

void eng__spec_draft(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->n_draft = 0;
        s->draft_goal = 0;
        if (s->state != SLOT_DECODE || s->n_replay != 0)
            continue;
        if (backing_off(s)) {
            s->draft_goal = -1; /* no drafter this round */
            continue;
        }
        if ((s->spec & ENG_SPEC_EXTERNAL) && e->p.draft_fn)
            external_round(e, s);
        if (s->n_draft == 0 && (s->spec & ENG_SPEC_NGRAM))
            ngram_round(e, s);
    }
    if (e->mtp)
        mtp_rounds(e);
}

void eng__spec_sync(eng_t *e, int64_t n_batch)
{
    if (!e->mtp)
        return;
    /* e->h_prev was filled by the caller before pending_h moved on (see eng.c) */
    struct fwd_batch b = {.n_tokens = n_batch, .token = e->b_tok, .pos = e->b_pos,
                          .seq = e->b_seq, .logits = e->b_none};
    char err[256];
    ASSERT(fwd_mtp(e->fwd, &b, e->h_prev, err, sizeof err) == 0);
}

/* Restore the state saved before this verification and queue the accepted tokens for replay. */
static void restore_and_replay(eng_t *e, struct slot *s, int64_t p0, int64_t kept)
{
    fwd_seq_restore(e->fwd, s->id, s->spec_ckpt.state);
    memcpy(s->pending_h, s->spec_ckpt.h, (size_t)e->m->hp.n_embd * sizeof(float));
    memcpy(s->replay, s->tokens + p0, (size_t)kept * sizeof *s->replay);
    s->n_replay = kept;
    s->n_cached = p0;
}

void eng__spec_verify(eng_t *e, struct slot *s, const float *logits)
{
    const int64_t V = e->m->hp.n_vocab, E = e->m->hp.n_embd, n = s->run_len - 1;
    const int64_t p0 = s->n_cached;
    int64_t kept = 0, matched = 0;
    bool alive = true;
    s->drafted += n; /* counted before accepting: a request may finish inside the loop */
    for (int64_t i = 0; i <= n && alive; i++) {
        int32_t t = eng__sample_row(e, s, logits + (s->row0 + i) * V);
        s->tokens[s->n_cached++] = e->b_tok[s->row0 + i]; /* the fed token of this row stays */
        kept++;
        alive = eng__accept(e, s, t);
        if (i == n || t != s->draft[i])
            break;
        matched++;
        s->accepted++;
        atomic_fetch_add(&e->st_accepted_at[i < ENG_MAX_DRAFT ? i : ENG_MAX_DRAFT - 1], 1);
    }
    for (int64_t i = 0; i < n && i < ENG_MAX_DRAFT; i++)
        atomic_fetch_add(&e->st_drafted_at[i], 1);
    s->miss_streak = matched ? 0 : s->miss_streak + 1;
    s->skip_rounds = matched ? 0 : (1 << (s->miss_streak < 5 ? s->miss_streak : 5)) - 1;
    atomic_fetch_add(&e->st_drafted, n);
    atomic_fetch_add(&e->st_accepted, matched);
    atomic_fetch_add(&e->st_verify_steps, 1);
    memcpy(s->pending_h, e->h_trunk + (s->row0 + kept - 1) * E, (size_t)E * sizeof(float));
    int64_t reject = s->run_len - kept;
    if (reject > 0 && !fwd_seq_rollback(e->fwd, s->id, reject)) {
        ASSERT(s->spec_ckpt.pos == p0); /* planned: drafts beyond the depth carry a checkpoint */
        restore_and_replay(e, s, p0, kept);
    }
    s->n_draft = 0;
}
