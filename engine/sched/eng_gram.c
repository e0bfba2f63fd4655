/*
 * eng_gram — constrained decoding inside the engine step (docs/structured-output.md): a
 * request with a grammar (eng_req_params.gram) gets a matcher in its slot; every row the slot
 * samples — plain decoding and each verified draft row alike — is masked first (disallowed
 * logits set to -1e30, so every sampler step, greedy or not, skips them), and every emitted
 * token advances the matcher. End-of-generation tokens are in the mask only where the grammar
 * accepts.
 *
 * Speculation stays lossless: drafts are cut at their first token the grammar refuses (walked
 * through the matcher, then the matcher is restored), and since verification samples each row
 * from the masked row at the matcher state of the tokens accepted before it, the emitted text
 * is exactly what decoding without drafts produces. The matcher only ever advances by emitted
 * tokens, so a rejected draft needs no grammar rollback: the KV / GDN rollback of eng_spec.c is
 * the whole of it.
 *
 * Memory: the vocabulary trie is built on the engine thread with the first constrained request
 * (about 0.3 s for the 151,936-token Qwen3 vocabulary), a slot's mask and masked row the first
 * time it serves one; the matcher's node pool grows with the request (STYLE rule 12's "no
 * malloc in the step" does not hold for constrained requests).
 *
 * Thread: the engine thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"    // defines: struct slot, struct eng
#include "engine/util.h" // defines: xmalloc, LOG_I
#include "gram.h"        // defines: gram_m_*, gram_vocab_*

void eng__gram_start(eng_t *e, struct slot *s)
{
    eng__gram_stop(s);
    gram_t *g = s->req->p.gram;
    if (!g)
        return;
    if (!e->gvocab) {
        double t0 = dd_now();
        e->gvocab = gram_vocab_from_tok(e->m->tok);
        LOG_I("constrained decoding: vocabulary trie of %d tokens built in %.0f ms",
              (int)gram_vocab_n(e->gvocab), (dd_now() - t0) * 1e3);
    }
    if (!s->gbits) {
        s->gbits = xmalloc((size_t)gram_vocab_words(e->gvocab) * sizeof *s->gbits);
        s->grow = xmalloc((size_t)e->m->hp.n_vocab * sizeof *s->grow);
    }
    s->gm = gram_m_create(g);
}

void eng__gram_stop(struct slot *s)
{
    gram_m_destroy(s->gm);
    s->gm = NULL;
}

void eng__gram_deinit(eng_t *e, struct slot *s)
{
    if (!s) {
        gram_vocab_destroy(e->gvocab);
        e->gvocab = NULL;
        return;
    }
    eng__gram_stop(s);
    free(s->gbits);
    free(s->grow);
}

/* The masked row, a word of the mask at a time: a full word copies 32 logits, an empty one
 * writes 32 -1e30s (masks are mostly one or the other: almost every token inside a string,
 * a handful at a structural place), so the row costs about a copy of the logits. */
const float *eng__gram_row(eng_t *e, struct slot *s, const float *logits)
{
    if (!s->gm)
        return logits;
    const int64_t V = e->m->hp.n_vocab, T = gram_vocab_n(e->gvocab);
    if (gram_m_mask(s->gm, e->gvocab, s->gbits) == 0)
        return NULL;
    float *row = s->grow;
    for (int64_t v0 = 0; v0 < V; v0 += 32) {
        int64_t n = V - v0 < 32 ? V - v0 : 32, valid = T - v0 < n ? T - v0 : n;
        uint32_t bits = valid <= 0 ? 0 : s->gbits[v0 / 32];
        if (valid < 32)
            bits &= valid <= 0 ? 0 : (1u << valid) - 1; /* tokens the vocabulary lacks */
        if (bits == 0xffffffffu) {
            memcpy(row + v0, logits + v0, 32 * sizeof *row);
        } else if (bits == 0) {
            for (int64_t k = 0; k < n; k++)
                row[v0 + k] = -1e30f;
        } else {
            for (int64_t k = 0; k < n; k++)
                row[v0 + k] = bits >> k & 1 ? logits[v0 + k] : -1e30f;
        }
    }
    return row;
}

bool eng__gram_accept(eng_t *e, struct slot *s, int32_t id)
{
    return !s->gm || gram_m_accept_token(s->gm, e->gvocab, id);
}

void eng__gram_check_drafts(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->gm || s->n_draft == 0)
            continue;
        gram_m_push(s->gm);
        /* the pending token (s->last) is emitted already: drafts continue after it */
        int64_t k = 0;
        while (k < s->n_draft && gram_m_accept_token(s->gm, e->gvocab, s->draft[k])) {
            k++;
            if (gram_m_finished(s->gm))
                break;
        }
        gram_m_pop(s->gm);
        s->n_draft = k;
    }
}
