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
 * Sharing: a new request gets the longest cached prefix of its prompt wherever it is (admit):
 * a free slot's own state or checkpoint is used in place; a checkpoint of another slot (busy or
 * not) is copied, with its KV rows, into the request's slot on the device (fwd_seq_kv_copy); a
 * prefix of the RAM or disk tier (pcache.h) is uploaded. Only the rows the slot does not hold
 * already are moved: a slot's rows below its common prefix with the prompt stay.
 *
 * Saving below the slots (write-behind): every checkpoint goes to the RAM tier (and through
 * it to disk), KV rows included, without holding up a request's first token by more than a
 * few per cent. A save (struct save) copies the checkpoint's state and tokens when it starts
 * and downloads its KV rows [0, pos) top down between steps (eng__cache_background): a piece
 * of SAVE_PIECE_BYTES when no prompt is being prefilled (decode steps, idle), else
 * SYNC_ROWS_PER_TOKEN rows per prompt row the step computed (copying a row costs about a
 * hundredth of computing one). The disk write happens on pcache's writer thread. A save reads
 * rows the slot still holds: before admission changes a slot's rows from `keep` on (a new
 * request prefills, copies or uploads there), every save of that slot takes its rows
 * [keep, lo) at once, within the same budget of SYNC_ROWS_PER_TOKEN rows per prompt token the
 * request computes itself; a save that needs more is given up (pc_abandoned). In practice:
 * the few message tokens of a conversation that goes on are taken, a whole prefix only by a
 * request that prefills a long prompt itself, and a prefix is lost only when requests come
 * faster than the saves. A checkpoint a slot drops (budget, or a new request overwriting its
 * rows) that is not below yet starts its save then. Finished saves enter the tiers at safe
 * points (saves_commit: a borrowed tier entry may be in use during admission).
 *
 * Invariants (with eng.c): every used checkpoint of a slot has 0 < pos <= n_cached and holds
 * the state after the slot's tokens[0 .. pos). Every save's rows [0, lo) are rows of its
 * slot, unchanged since the save started.
 *
 * Thread: the engine thread only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"           // defines: struct slot, struct eng, struct ckpt
#include "engine/compute/fwd.h" // defines: fwd_seq_save, fwd_seq_restore, fwd_cache
#include "engine/util.h"        // defines: LOG_D, xcalloc, ASSERT
#include "pcache.h"             // defines: pcache_*

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
 * Saves to the RAM and disk tiers (write-behind)
 * ========================================================================================== */

/* KV bytes a background save downloads per engine step (eng_params.cache_save_piece when
 * set): about a millisecond of copying into fresh pages (page faults included) on a loaded
 * two-core machine; a request that arrives meanwhile waits for one piece at most. */
#define SAVE_PIECE_BYTES ((int64_t)1 << 20)

/* The save of tokens[0 .. pos) with this hash, under way or finished, or NULL. */
static struct save *save_find(eng_t *e, uint64_t hash, int64_t pos)
{
    for (int64_t i = 0; i < e->n_saves; i++)
        if (e->saves[i].pe && e->saves[i].pe->hash == hash && e->saves[i].pe->pos == pos)
            return &e->saves[i];
    return NULL;
}

/* Download rows [r0, sv->lo) of the save: its rows are then [r0, pos). */
static void save_rows(eng_t *e, struct save *sv, int64_t r0)
{
    if (r0 >= sv->lo)
        return;
    fwd_seq_kv_download(e->fwd, sv->s->id, r0, sv->lo, sv->pe->pos, sv->pe->kv);
    sv->lo = r0;
}

/* Finished saves into the tiers (wait: for room in the write queue, at shutdown). Not while
 * a tier entry is borrowed: inserting may drop RAM entries. */
static void saves_commit(eng_t *e, bool wait)
{
    for (int64_t i = 0; i < e->n_saves; i++) {
        struct save *sv = &e->saves[i];
        if (!sv->pe || sv->lo > 0)
            continue;
        LOG_D("slot %lld: checkpoint at %lld saved below the slots", (long long)sv->s->id,
              (long long)sv->pe->pos);
        pcache_insert(e->pc, sv->pe, wait);
        sv->pe = NULL;
        atomic_fetch_add_explicit(&e->st_pc_demoted, 1, memory_order_relaxed);
    }
}

/* Start saving checkpoint k of slot s (valid: its rows are rows [0, k->pos) of s) unless the
 * tiers have it or a save of it is under way. Copies the state, hidden row and tokens now;
 * the KV rows follow (save_rows). A full save list drops the checkpoint instead (counted by
 * its absence from pc_demoted): only when saves fall far behind. */
static void save_start(eng_t *e, struct slot *s, struct ckpt *k)
{
    k->saved = true;
    if (!e->pc || k->pos <= 0)
        return;
    const int64_t pos = k->pos;
    const uint64_t hash = pcache_hash(s->tokens, pos);
    if (save_find(e, hash, pos) || pcache_has(e->pc, hash, pos))
        return;
    struct save *sv = NULL;
    for (int64_t i = 0; i < e->n_saves && !sv; i++)
        if (!e->saves[i].pe)
            sv = &e->saves[i];
    struct pcache_entry *pe = sv ? pcache_entry_new(e->pc, pos) : NULL;
    if (!pe)
        return;
    pe->hash = hash;
    memcpy(pe->tokens, s->tokens, (size_t)pos * sizeof *pe->tokens);
    memcpy(pe->state, k->state, fwd_ckpt_floats(e->fwd) * sizeof(float));
    memcpy(pe->h, k->h, (size_t)e->m->hp.n_embd * sizeof(float));
    *sv = (struct save){.pe = pe, .s = s, .lo = pos, .seq = ++e->save_clock};
}

/* Rows a request may copy for saves on its way, per prompt token it prefills itself: copying
 * a row costs about 3 us here, computing a token 0.3-1 ms, so a few per cent of its prefill. */
#define SYNC_ROWS_PER_TOKEN 8

/* Slot t's rows from keep on are about to change, and the request that changes them prefills
 * n_fill tokens itself: every save reading those rows takes its rows [keep, lo) now, oldest
 * first, within SYNC_ROWS_PER_TOKEN * n_fill rows; the saves beyond are given up. */
static void release_rows(eng_t *e, struct slot *t, int64_t keep, int64_t n_fill)
{
    int64_t budget = SYNC_ROWS_PER_TOKEN * n_fill;
    for (;;) {
        struct save *sv = NULL;
        for (int64_t i = 0; i < e->n_saves; i++) {
            struct save *c = &e->saves[i];
            if (c->pe && c->s == t && c->lo > keep && (!sv || c->seq < sv->seq))
                sv = c;
        }
        if (!sv)
            return;
        if (sv->lo - keep <= budget) {
            budget -= sv->lo - keep;
            save_rows(e, sv, keep);
            continue;
        }
        LOG_D("slot %lld: checkpoint at %lld not saved: %lld rows left, the request allows %lld",
              (long long)t->id, (long long)sv->pe->pos, (long long)(sv->lo - keep),
              (long long)budget);
        pcache_entry_drop(sv->pe);
        sv->pe = NULL;
        atomic_fetch_add_explicit(&e->st_pc_abandoned, 1, memory_order_relaxed);
    }
}

/* Checkpoint k of slot s is dropped: it goes below (save_start), then k is free. */
static void demote(eng_t *e, struct slot *s, struct ckpt *k)
{
    if (k->pos <= 0)
        return;
    save_start(e, s, k);
    k->pos = -1;
}

/* The oldest save under way, or NULL. */
static struct save *oldest_save(eng_t *e, int64_t *n_busy)
{
    struct save *o = NULL;
    *n_busy = 0;
    for (int64_t i = 0; i < e->n_saves; i++) {
        struct save *sv = &e->saves[i];
        if (!sv->pe || sv->lo == 0)
            continue;
        (*n_busy)++;
        if (!o || sv->seq < o->seq)
            o = sv;
    }
    return o;
}

/* A checkpoint not saved yet of a slot past its prefill, or NULL. */
static struct ckpt *unsaved(eng_t *e, struct slot **owner)
{
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        for (int64_t j = 0; j < e->n_ckpt && s->state != SLOT_PREFILL; j++)
            if (s->ckpts[j].pos > 0 && !s->ckpts[j].saved) {
                *owner = s;
                return &s->ckpts[j];
            }
    }
    return NULL;
}

/* Rows this call of eng__cache_background may copy: SYNC_ROWS_PER_TOKEN per prompt row the
 * last step computed (a few per cent of that step, however close a request is to its first
 * token), and a whole piece when no prompt is being prefilled (decode steps, idle) or the saves
 * fall behind. */
static int64_t background_rows(eng_t *e, int64_t n_busy)
{
    const int64_t piece = e->p.cache_save_piece > 0 ? e->p.cache_save_piece : SAVE_PIECE_BYTES;
    int64_t rows = piece / (int64_t)(fwd_kv_floats(e->fwd) * sizeof(float));
    rows = rows > 1 ? rows : 1;
    const int64_t prop = SYNC_ROWS_PER_TOKEN * e->step_prompt_rows;
    bool prefill = false;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        prefill |= e->slots[i].state == SLOT_PREFILL;
    if (prefill && 2 * n_busy < e->n_saves)
        return prop;
    return prop > rows ? prop : rows;
}

bool eng__cache_background(eng_t *e)
{
    if (!e->pc)
        return false;
    pcache_poll(e->pc);
    saves_commit(e, false);
    int64_t n_busy;
    struct save *sv = oldest_save(e, &n_busy);
    int64_t budget = background_rows(e, n_busy);
    bool worked = false;
    while (budget > 0) {
        struct slot *s;
        struct ckpt *k;
        while (!sv && (k = unsaved(e, &s))) {
            save_start(e, s, k);
            sv = oldest_save(e, &n_busy);
        }
        if (!sv)
            break;
        const int64_t n = budget < sv->lo ? budget : sv->lo;
        save_rows(e, sv, sv->lo - n);
        budget -= n;
        worked = true;
        sv = oldest_save(e, &n_busy);
    }
    saves_commit(e, false);
    return worked;
}

void eng__cache_persist(eng_t *e)
{
    if (!pcache_has_disk(e->pc))
        return;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        for (int64_t j = 0; j < e->n_ckpt; j++)
            demote(e, &e->slots[i], &e->slots[i].ckpts[j]);
    for (int64_t i = 0; i < e->n_saves; i++)
        if (e->saves[i].pe)
            save_rows(e, &e->saves[i], 0);
    saves_commit(e, true);
    pcache_flush(e->pc);
}

/* ============================================================================================
 * Saving
 * ========================================================================================== */

/* The checkpoint a new one replaces (demoted first): an unused one, else the oldest ordinary
 * one, else the oldest system-prompt one. */
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
    demote(e, s, v);
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
    eng__hsave(e, s, c->h);
    c->pos = pos;
    c->age = ++e->ckpt_clock;
    c->keep = p->n_bounds > 0 && pos == p->bounds[0];
    c->saved = false;
    LOG_D("slot %lld: checkpoint at %lld%s", (long long)s->id, (long long)pos,
          c->keep ? " (system prompt)" : "");
}

/* ============================================================================================
 * Admission: the longest cached prefix, wherever it is
 * ========================================================================================== */

/* Where a reusable prefix is. HERE: a free slot's own (used in place); SLOT: another slot's
 * checkpoint, or KV rows on a model without GDN layers (copied); RAM, DISK: pcache. */
enum src_kind { SRC_NONE = 0, SRC_HERE, SRC_SLOT, SRC_RAM, SRC_DISK };

struct src {
    enum src_kind kind;
    int64_t pos;
    struct slot *s;        /* HERE, SLOT */
    struct ckpt *k;        /* HERE, SLOT: the checkpoint; NULL: the live state / KV rows only */
    struct pcache_hit hit; /* RAM, DISK */
};

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

/* Offer a candidate: longer wins; on a tie, in place beats a copy. */
static void offer(struct src *best, enum src_kind kind, struct slot *s, struct ckpt *k, int64_t pos)
{
    if (pos > best->pos ||
        (pos == best->pos && pos > 0 && kind == SRC_HERE && best->kind != SRC_HERE))
        *best = (struct src){.kind = kind, .pos = pos, .s = s, .k = k};
}

/* The best prefix of the slots for a prompt of which limit tokens may be reused. */
static struct src find_in_slots(eng_t *e, const eng_req_t *r, int64_t limit)
{
    const bool gdn = fwd_cache(e->fwd)->n_gdn_layers > 0;
    struct src best = {0};
    for (int64_t i = 0; i < e->p.n_slots && limit > 0; i++) {
        struct slot *s = &e->slots[i];
        const bool free_ = s->state == SLOT_FREE;
        const enum src_kind kind = free_ ? SRC_HERE : SRC_SLOT;
        int64_t cp = common_prefix(s->tokens, s->n_cached, r->p.prompt, r->p.n_prompt);
        cp = cp < limit ? cp : limit;
        if (!gdn) {
            offer(&best, kind, s, NULL, cp); /* KV rows below n_cached: truncation */
            continue;
        }
        if (free_ && s->n_cached > 0 && s->n_cached <= cp)
            offer(&best, kind, s, NULL, s->n_cached); /* the live state is a prefix */
        struct ckpt *k = best_ckpt(e, s, cp);
        if (k)
            offer(&best, kind, s, k, k->pos);
    }
    return best;
}

/* The free slot a request without an in-place prefix takes: the least recently used. */
static struct slot *lru_free(eng_t *e)
{
    struct slot *t = NULL;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state == SLOT_FREE && (!t || s->last_used < t->last_used))
            t = s;
    }
    ASSERT(t);
    return t;
}

/* Slot t keeps its rows [0, keep) and no more (the new request writes from there and computes
 * n_fill prompt tokens itself): its other checkpoints go below, and its saves take the rows
 * that will change (release_rows). */
static void drop_beyond(eng_t *e, struct slot *t, int64_t keep, int64_t n_fill)
{
    for (int64_t i = 0; i < e->n_ckpt; i++)
        if (t->ckpts[i].pos > keep)
            demote(e, t, &t->ckpts[i]);
    release_rows(e, t, keep, n_fill);
}

/* Checkpoint c becomes a copy of (state, h) at pos; saved: the tiers have it already. */
static void fill_ckpt(eng_t *e, struct ckpt *c, int64_t pos, const float *state, const float *h,
                      bool keep, bool saved)
{
    memcpy(c->state, state, fwd_ckpt_floats(e->fwd) * sizeof(float));
    memcpy(c->h, h, (size_t)e->m->hp.n_embd * sizeof(float));
    c->pos = pos;
    c->age = ++e->ckpt_clock;
    c->keep = keep;
    c->saved = saved;
}

/* Slot t takes src's prefix: in place, or copied from another slot or uploaded from a tier
 * (the rows t holds already stay). Returns the prefix length in effect (0 when a tier entry
 * did not check out). */
static int64_t take(eng_t *e, struct slot *t, const eng_req_t *r, struct src *b)
{
    const bool gdn = fwd_cache(e->fwd)->n_gdn_layers > 0;
    if (b->kind == SRC_HERE) {
        drop_beyond(e, t, b->pos, r->p.n_prompt - b->pos);
        if (b->k) {
            fwd_seq_restore(e->fwd, t->id, b->k->state);
            eng__hload(e, t, b->k->h);
            b->k->age = ++e->ckpt_clock;
        } else if (!gdn && b->pos != t->n_cached) {
            eng__hload(e, t, NULL); /* unknown: zeros */
        }
        return b->pos;
    }
    /* rows [0, here) of t are the prompt's already: only [here, pos) move */
    int64_t here = common_prefix(t->tokens, t->n_cached, r->p.prompt, r->p.n_prompt);
    here = here < b->pos ? here : b->pos;
    drop_beyond(e, t, here, r->p.n_prompt - b->pos);
    if (b->kind == SRC_SLOT) {
        fwd_seq_kv_copy(e->fwd, t->id, b->s->id, here, b->pos);
        atomic_fetch_add_explicit(&e->st_pc_copies, 1, memory_order_relaxed);
        if (!b->k) {
            eng__hload(e, t, NULL);
            return b->pos;
        }
        fill_ckpt(e, victim(e, t), b->pos, b->k->state, b->k->h, b->k->keep, b->k->saved);
        fwd_seq_restore(e->fwd, t->id, b->k->state);
        eng__hload(e, t, b->k->h);
        return b->pos;
    }
    /* the checkpoint's place first: freeing it starts a save, which may allocate */
    struct ckpt *c = gdn && e->n_ckpt ? victim(e, t) : NULL;
    const struct pcache_entry *pe = pcache_load(e->pc, &b->hit, r->p.prompt);
    if (!pe)
        return 0;
    fwd_seq_kv_upload(e->fwd, t->id, here, pe->pos, pe->pos, pe->kv);
    if (gdn)
        fwd_seq_restore(e->fwd, t->id, pe->state);
    if (c)
        fill_ckpt(e, c, pe->pos, pe->state, pe->h, false, true);
    eng__hload(e, t, pe->h);
    return pe->pos;
}

/* The best prefix: the slots', or a longer one of the tiers below. */
static struct src find(eng_t *e, const eng_req_t *r, int64_t limit, bool hashed)
{
    struct src b = find_in_slots(e, r, limit);
    if (!e->pc || limit <= b.pos)
        return b;
    if (!hashed) {
        e->ph[0] = PCACHE_HASH0;
        for (int64_t i = 0; i < limit; i++)
            e->ph[i + 1] = pcache_hash_step(e->ph[i], r->p.prompt[i]);
    }
    struct pcache_hit hit;
    if (pcache_find(e->pc, r->p.prompt, e->ph, limit, &hit) && hit.pos > b.pos)
        b = (struct src){
            .kind = hit.tier == PCACHE_RAM ? SRC_RAM : SRC_DISK, .pos = hit.pos, .hit = hit};
    return b;
}

struct slot *eng__cache_admit(eng_t *e, const eng_req_t *r, int64_t *reuse)
{
    const int64_t limit = r->p.cache_prompt ? r->p.n_prompt - 1 : 0;
    if (r->p.cache_prompt)
        atomic_fetch_add_explicit(&e->st_pc_queries, 1, memory_order_relaxed);
    struct src b;
    struct slot *t;
    int64_t n = 0;
    for (int tries = 0; tries < 8; tries++) { /* a file that does not check out is forgotten:
                                               * look again */
        b = find(e, r, limit, tries > 0);
        t = b.kind == SRC_HERE ? b.s : lru_free(e);
        n = b.kind == SRC_NONE ? 0 : take(e, t, r, &b);
        if (n > 0 || (b.kind != SRC_RAM && b.kind != SRC_DISK))
            break;
    }
    if (n == 0) {
        drop_beyond(e, t, 0, r->p.n_prompt);
        fwd_seq_clear(e->fwd, t->id);
        eng__hload(e, t, NULL);
    } else {
        int tier = b.kind == SRC_RAM ? 1 : b.kind == SRC_DISK ? 2 : 0;
        atomic_fetch_add_explicit(&e->st_pc_hit[tier], n, memory_order_relaxed);
    }
    LOG_D("slot %lld: prefix of %lld tokens from %s", (long long)t->id, (long long)n,
          (const char *[]){"nowhere", "the slot", "another slot", "RAM", "disk"}[b.kind]);
    if (e->pc)
        saves_commit(e, false); /* no tier entry is borrowed any more */
    *reuse = n;
    return t;
}

/* ============================================================================================
 * Lifecycle
 * ========================================================================================== */

int eng__cache_init(eng_t *e, char *err, size_t errlen)
{
    struct pcache_params pp = {.geom = {.model_id = pcache_model_id(e->m->path),
                                        .state_floats = fwd_ckpt_floats(e->fwd),
                                        .h_floats = (uint64_t)e->m->hp.n_embd,
                                        .kv_floats = fwd_kv_floats(e->fwd)},
                               .ram_max = e->p.cache_ram_max,
                               .dir = e->p.cache_dir,
                               .disk_max = e->p.cache_disk_max};
    int rc = pcache_create(&pp, &e->pc, err, errlen);
    if (rc == 0 && e->pc) {
        e->ph = xcalloc((size_t)e->p.n_ctx + 1, sizeof *e->ph);
        e->n_saves = 2 * e->p.n_slots * (e->n_ckpt + 1);
        e->saves = xcalloc((size_t)e->n_saves, sizeof *e->saves);
    }
    return rc;
}

void eng__cache_deinit(eng_t *e)
{
    for (int64_t i = 0; i < e->n_saves; i++)
        pcache_entry_drop(e->saves[i].pe);
    pcache_destroy(e->pc);
    free(e->saves);
    free(e->ph);
    e->pc = NULL;
    e->ph = NULL;
    e->saves = NULL;
    e->n_saves = 0;
}
