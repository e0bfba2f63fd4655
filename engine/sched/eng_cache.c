/*
 * eng_cache — the prompt cache inside the engine (issue 36): which slot a new request goes to
 * and how much of its prompt is already computed there, and where prefill saves the state.
 *
 * Attention layers need nothing to reuse a prefix: their KV rows stay valid below any
 * position (truncation). The GDN state cannot be truncated, so a prefix of a hybrid model is
 * reusable only where its state was saved: a checkpoint (struct ckpt) holds the GDN conv + SSM
 * state after tokens[0 .. pos) and the trunk hidden row of pos - 1 (the MTP layer's input; its
 * KV rows are attention rows like the others). Two prompts diverge, in chat traffic, at a
 * message boundary, so prefill saves the state exactly there: the request carries the
 * positions where its messages end (eng_req_params.bounds), and prefill chunks end at them,
 * which costs no forward work. Raw prompts get a checkpoint every checkpoint_every tokens and
 * one a token before the prompt's end (an identical prompt sent again reuses all but that one).
 *
 * Budget: n_ckpt checkpoints per slot. A new one replaces an unused one, else the oldest that
 * is not a system-prompt boundary (the first message end of a chat request, kept longest since
 * every conversation of an application shares it), else the oldest.
 *
 * Invariant (with eng.c): every used checkpoint of a slot has 0 < pos <= n_cached and holds
 * the state after the slot's tokens[0 .. pos).
 *
 * Thread: the engine thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"           // defines: struct slot, struct eng, struct ckpt
#include "engine/compute/fwd.h" // defines: fwd_seq_save, fwd_seq_restore, fwd_cache
#include "engine/util.h"        // defines: LOG_D

/* ============================================================================================
 * Where checkpoints are due
 * ========================================================================================== */

/* The first checkpoint position of slot s's request after pos, or n_prompt when none. */
static int64_t next_due(const eng_t *e, const struct slot *s, int64_t pos)
{
    const struct eng_req_params *p = &s->req->p;
    if (e->n_ckpt == 0)
        return p->n_prompt;
    if (p->n_bounds > 0) {
        for (int64_t i = 0; i < p->n_bounds; i++)
            if (p->bounds[i] > pos)
                return p->bounds[i];
        return p->n_prompt;
    }
    const int64_t every = e->p.checkpoint_every;
    int64_t next = (pos / every + 1) * every;
    if (pos < p->n_prompt - 1 && next > p->n_prompt - 1)
        next = p->n_prompt - 1;
    return next < p->n_prompt ? next : p->n_prompt;
}

int64_t eng__cache_chunk_end(const eng_t *e, const struct slot *s, int64_t want)
{
    const int64_t due = next_due(e, s, s->n_prompt_done);
    return want < due ? want : due;
}

/* ============================================================================================
 * Saving
 * ========================================================================================== */

/* The checkpoint a new one replaces: an unused one, else the oldest ordinary one, else the
 * oldest system-prompt one. */
static struct ckpt *victim(eng_t *e, struct slot *s)
{
    struct ckpt *v = NULL;
    for (int64_t i = 0; i < e->n_ckpt; i++) {
        struct ckpt *c = &s->ckpts[i];
        if (c->pos < 0)
            return c;
        if (!v || (v->keep && !c->keep) || (v->keep == c->keep && c->age < v->age))
            v = c;
    }
    return v;
}

void eng__cache_after_prefill(eng_t *e, struct slot *s)
{
    const struct eng_req_params *p = &s->req->p;
    const int64_t pos = s->n_cached;
    if (e->n_ckpt == 0 || pos <= 0 || next_due(e, s, pos - 1) != pos || pos >= p->n_prompt)
        return;
    for (int64_t i = 0; i < e->n_ckpt; i++)
        if (s->ckpts[i].pos == pos) { /* the same tokens: the same state */
            s->ckpts[i].age = ++e->ckpt_clock;
            return;
        }
    struct ckpt *c = victim(e, s);
    fwd_seq_save(e->fwd, s->id, c->state);
    memcpy(c->h, s->pending_h, (size_t)e->m->hp.n_embd * sizeof(float));
    c->pos = pos;
    c->age = ++e->ckpt_clock;
    c->keep = p->n_bounds > 0 && pos == p->bounds[0];
    LOG_D("slot %lld: checkpoint at %lld%s", (long long)s->id, (long long)pos,
          c->keep ? " (system prompt)" : "");
}

/* ============================================================================================
 * Reuse
 * ========================================================================================== */

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t n = 0;
    while (n < na && n < nb && a[n] == b[n])
        n++;
    return n;
}

/* Newest checkpoint with pos <= limit, or NULL. */
static struct ckpt *best_ckpt(eng_t *e, struct slot *s, int64_t limit)
{
    struct ckpt *best = NULL;
    for (int64_t i = 0; i < e->n_ckpt; i++) {
        struct ckpt *c = &s->ckpts[i];
        if (c->pos > 0 && c->pos <= limit && (!best || c->pos > best->pos))
            best = c;
    }
    return best;
}

/* How many prompt tokens the slot's cache can serve, restoring a checkpoint when needed.
 * At least one prompt token is always re-evaluated so that logits exist. */
static int64_t reuse_prefix(eng_t *e, struct slot *s, const eng_req_t *r)
{
    struct cache *c = fwd_cache(e->fwd);
    int64_t limit = common_prefix(s->tokens, s->n_cached, r->p.prompt, r->p.n_prompt);
    if (limit > r->p.n_prompt - 1)
        limit = r->p.n_prompt - 1;
    if (!r->p.cache_prompt)
        limit = 0;
    int64_t reuse = 0;
    if (c->n_gdn_layers == 0) {
        reuse = limit; /* pure KV: truncation is free */
    } else if (s->n_cached <= limit && s->n_cached > 0) {
        reuse = s->n_cached; /* the whole cached sequence is a prefix: current state serves */
    } else {
        struct ckpt *k = best_ckpt(e, s, limit);
        if (k) {
            fwd_seq_restore(e->fwd, s->id, k->state);
            memcpy(s->pending_h, k->h, (size_t)e->m->hp.n_embd * sizeof(float));
            k->age = ++e->ckpt_clock;
            reuse = k->pos;
        }
    }
    for (int64_t i = 0; i < e->n_ckpt; i++)
        if (s->ckpts[i].pos > reuse)
            s->ckpts[i].pos = -1; /* beyond the reuse point: stale */
    if (reuse == 0)
        fwd_seq_clear(e->fwd, s->id);
    if (reuse == 0 || (c->n_gdn_layers == 0 && reuse != s->n_cached))
        memset(s->pending_h, 0, (size_t)e->m->hp.n_embd * sizeof(float)); /* unknown: zeros */
    return reuse;
}

struct slot *eng__cache_admit(eng_t *e, const eng_req_t *r, int64_t *reuse)
{
    struct slot *best = NULL;
    int64_t best_common = -1;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state != SLOT_FREE)
            continue;
        int64_t cp = common_prefix(s->tokens, s->n_cached, r->p.prompt, r->p.n_prompt);
        if (cp > best_common || (cp == best_common && s->last_used < best->last_used)) {
            best = s;
            best_common = cp;
        }
    }
    ASSERT(best);
    *reuse = reuse_prefix(e, best, r);
    return best;
}
