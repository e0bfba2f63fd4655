/*
 * gram_match — the matcher, the vocabulary trie and the token masks (contract in gram.h).
 *
 * A matcher state is a set of stacks plus the bytes of a pending UTF-8 character. A stack is
 * the id of its top node; a node (pos, parent) says "match element pos, and when its
 * alternative ends continue with node parent" (NONE: the grammar is complete). Nodes are never
 * modified, so stacks share their tails and a state is copied by copying its top ids; every
 * node carries a hash of its content (pos and the parent chain), so equal stacks are merged
 * without walking them and equal states of different matchers find the same cached mask.
 * Tops always point at a character element (the closure expands references eagerly, with the
 * return node dropped when the reference ends its alternative, so right recursion does not
 * grow the stacks).
 *
 * Node pool discipline: nodes live in one array per matcher; whatever a step creates beyond
 * what the resulting state references is garbage until a truncation: a failed accept, a pop and
 * every branch of a mask walk cut the array back to where it was (the state they return to
 * never references the newer nodes). An accepted token's nodes stay (a few per token).
 *
 * UTF-8: a lead byte is accepted only when some top's class contains a character that the lead
 * byte can start (overlong forms and surrogates excluded), each continuation byte likewise, and
 * the last byte feeds the character to the stacks. So a token may end inside a character only
 * if the character can still complete.
 *
 * Thread: a matcher is used by one thread at a time; the mask cache inside the gram_t is
 * shared (its mutex).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, xrealloc, dd_now
#include "gram.h"        // defines: gram_m_mask
#include "gram_impl.h"   // defines: struct gram, GEL_*

#define NONE UINT32_MAX

static atomic_llong st_walks, st_hits, st_walk_ns, st_matchers, st_compiles, st_compile_err;

/* ---- statistics ----------------------------------------------------------------------------- */

/* 10 us .. 1 s: a cached mask is a copy (microseconds), a walk of a large vocabulary
 * milliseconds, a compile of a big schema tens of milliseconds. */
const double gram_hist_bound[GRAM_HIST_BUCKETS] = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3,
                                                   3e-3, 1e-2, 3e-2, 1e-1, 1};

struct ahist {
    atomic_llong count[GRAM_HIST_BUCKETS + 1], n, sum_ns;
};
static struct ahist h_compile, h_mask;

static void observe(struct ahist *h, double v)
{
    int b = 0;
    while (b < GRAM_HIST_BUCKETS && v > gram_hist_bound[b])
        b++;
    atomic_fetch_add_explicit(&h->count[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->n, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (long long)(v * 1e9), memory_order_relaxed);
}

static void read_hist(struct ahist *h, struct gram_hist *out)
{
    for (int b = 0; b <= GRAM_HIST_BUCKETS; b++)
        out->count[b] = atomic_load_explicit(&h->count[b], memory_order_relaxed);
    out->n = atomic_load_explicit(&h->n, memory_order_relaxed);
    out->sum = (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) * 1e-9;
}

void gram__note_compile(double seconds, bool ok)
{
    atomic_fetch_add_explicit(ok ? &st_compiles : &st_compile_err, 1, memory_order_relaxed);
    if (ok)
        observe(&h_compile, seconds);
}

/* ---- vocabulary trie ---------------------------------------------------------------------- */

struct gram_vocab {
    int32_t n_vocab;
    uint8_t *kind;     /* [n_vocab] enum gram_tok_kind */
    char *text;        /* the pieces, concatenated */
    size_t *off;       /* [n_vocab + 1] piece i is text[off[i] .. off[i + 1]) */
    uint32_t *first;   /* [n_nodes] first child, NONE = leaf */
    uint32_t *next;    /* [n_nodes] next sibling */
    uint8_t *byte;     /* [n_nodes] the byte that leads here */
    uint32_t *tok;     /* [n_nodes] first token whose bytes end here, NONE = none */
    uint32_t *tok_nxt; /* [n_vocab] next token with the same bytes */
    uint32_t n_nodes, cap;
    int32_t *eog; /* [n_eog] */
    int32_t n_eog;
    uint32_t max_len;
    uint64_t id; /* hash of every piece and kind: equal vocabularies share cached masks */
};

static uint32_t trie_node(gram_vocab_t *v, uint32_t parent, uint8_t b)
{
    for (uint32_t c = v->first[parent]; c != NONE; c = v->next[c])
        if (v->byte[c] == b)
            return c;
    if (v->n_nodes == v->cap) {
        v->cap *= 2;
        v->first = xrealloc(v->first, v->cap * sizeof *v->first);
        v->next = xrealloc(v->next, v->cap * sizeof *v->next);
        v->byte = xrealloc(v->byte, v->cap);
        v->tok = xrealloc(v->tok, v->cap * sizeof *v->tok);
    }
    uint32_t c = v->n_nodes++;
    v->first[c] = v->tok[c] = NONE;
    v->byte[c] = b;
    v->next[c] = v->first[parent];
    v->first[parent] = c;
    return c;
}

gram_vocab_t *gram_vocab_create(int32_t n_vocab, const char *const *piece, const size_t *len,
                                const uint8_t *kind)
{
    gram_vocab_t *v = xcalloc(1, sizeof *v);
    v->n_vocab = n_vocab;
    v->kind = xmalloc((size_t)n_vocab + 1);
    v->off = xmalloc(((size_t)n_vocab + 1) * sizeof *v->off);
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        total += len[i];
    v->text = xmalloc(total + 1);
    v->tok_nxt = xmalloc(((size_t)n_vocab + 1) * sizeof *v->tok_nxt);
    v->eog = xmalloc(((size_t)n_vocab + 1) * sizeof *v->eog);
    v->cap = 1024;
    v->first = xmalloc(v->cap * sizeof *v->first);
    v->next = xmalloc(v->cap * sizeof *v->next);
    v->byte = xmalloc(v->cap);
    v->tok = xmalloc(v->cap * sizeof *v->tok);
    v->n_nodes = 1;
    v->first[0] = v->next[0] = v->tok[0] = NONE;
    size_t at = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint8_t k = len[i] == 0 && kind[i] == GRAM_TOK_TEXT ? GRAM_TOK_NEVER : kind[i];
        v->kind[i] = k;
        v->off[i] = at;
        if (len[i])
            memcpy(v->text + at, piece[i], len[i]);
        at += len[i];
        v->tok_nxt[i] = NONE;
        if (k == GRAM_TOK_EOG)
            v->eog[v->n_eog++] = i;
        if (k != GRAM_TOK_TEXT)
            continue;
        uint32_t nd = 0;
        for (size_t b = 0; b < len[i]; b++)
            nd = trie_node(v, nd, (uint8_t)piece[i][b]);
        v->tok_nxt[i] = v->tok[nd];
        v->tok[nd] = (uint32_t)i;
        if (len[i] > v->max_len)
            v->max_len = (uint32_t)len[i];
    }
    v->off[n_vocab] = at;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n_vocab;
    for (size_t k = 0; k < at; k++)
        h = (h ^ (unsigned char)v->text[k]) * 1099511628211ull;
    for (int32_t i = 0; i <= n_vocab; i++)
        h = (h ^ (v->off[i] * 4 + (i < n_vocab ? v->kind[i] : 0))) * 1099511628211ull;
    v->id = h;
    return v;
}

gram_vocab_t *gram_vocab_from_tok(const tok_t *t)
{
    int32_t n = tok_n_vocab(t);
    const char **piece = xmalloc((size_t)n * sizeof *piece);
    size_t *len = xmalloc((size_t)n * sizeof *len);
    uint8_t *kind = xmalloc((size_t)n);
    for (int32_t i = 0; i < n; i++) {
        enum tok_type ty = tok_token_type(t, i);
        piece[i] = tok_piece(t, i, &len[i]);
        if (!piece[i]) {
            piece[i] = "";
            len[i] = 0;
        }
        kind[i] = tok_is_eog(t, i)                                   ? GRAM_TOK_EOG
                  : ty == TOK_CONTROL || ty == TOK_UNUSED || !len[i] ? GRAM_TOK_NEVER
                                                                     : GRAM_TOK_TEXT;
    }
    gram_vocab_t *v = gram_vocab_create(n, piece, len, kind);
    free(piece);
    free(len);
    free(kind);
    return v;
}

int32_t gram_vocab_n(const gram_vocab_t *v)
{
    return v->n_vocab;
}

int64_t gram_vocab_words(const gram_vocab_t *v)
{
    return ((int64_t)v->n_vocab + 31) / 32;
}

void gram_vocab_destroy(gram_vocab_t *v)
{
    if (!v)
        return;
    free(v->kind);
    free(v->text);
    free(v->off);
    free(v->first);
    free(v->next);
    free(v->byte);
    free(v->tok);
    free(v->tok_nxt);
    free(v->eog);
    free(v);
}

/* ---- matcher state ------------------------------------------------------------------------ */

struct gnode {
    uint32_t pos, parent;
    uint64_t h; /* content hash: pos and the parent chain */
};

struct gstate {
    uint32_t *leaf; /* [n] top node of each stack */
    uint32_t n, cap;
    bool acc;     /* an empty stack: the text so far is a sentence */
    uint8_t need; /* continuation bytes the pending character still needs */
    uint8_t len;  /* the pending character's length */
    uint32_t cp;  /* its bits so far */
};

struct gsave {
    struct gstate st;
    uint32_t n_nd;
    bool finished;
};

struct gram_m {
    gram_t *g;
    struct gnode *nd;
    uint32_t n_nd, cap_nd;
    struct gstate cur, tmp[2];
    struct gsave *save;
    int n_save, cap_save;
    struct gstate *lvl; /* [n_lvl] one state per trie depth during a walk */
    uint32_t n_lvl;
    uint32_t *work; /* closure work stack */
    uint32_t cap_work;
    uint32_t steps; /* closure steps of the current character (GRAM_MAX_CLOSURE) */
    bool failed, finished;
};

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t node_new(struct gram_m *m, uint32_t pos, uint32_t parent)
{
    if (m->n_nd == m->cap_nd) {
        m->cap_nd = m->cap_nd ? 2 * m->cap_nd : 1024;
        m->nd = xrealloc(m->nd, m->cap_nd * sizeof *m->nd);
    }
    uint64_t ph = parent == NONE ? 0x51ED2701u : m->nd[parent].h;
    m->nd[m->n_nd] = (struct gnode){pos, parent, mix64(ph * 0x9E3779B97F4A7C15ull + pos + 1)};
    return m->n_nd++;
}

static void st_reserve(struct gstate *s, uint32_t n)
{
    if (n <= s->cap)
        return;
    s->cap = n < 16 ? 16 : 2 * n;
    s->leaf = xrealloc(s->leaf, s->cap * sizeof *s->leaf);
}

static void st_copy(struct gstate *d, const struct gstate *s)
{
    st_reserve(d, s->n);
    if (s->n)
        memcpy(d->leaf, s->leaf, s->n * sizeof *s->leaf);
    d->n = s->n;
    d->acc = s->acc;
    d->need = s->need;
    d->len = s->len;
    d->cp = s->cp;
}

static bool add_leaf(struct gram_m *m, struct gstate *st, uint32_t id)
{
    uint64_t h = m->nd[id].h;
    for (uint32_t k = 0; k < st->n; k++)
        if (m->nd[st->leaf[k]].h == h)
            return true;
    if (st->n >= GRAM_MAX_STACKS) {
        m->failed = true;
        return false;
    }
    st_reserve(st, st->n + 1);
    st->leaf[st->n++] = id;
    return true;
}

static void work_push(struct gram_m *m, uint32_t *n, uint32_t id)
{
    if (*n == m->cap_work) {
        m->cap_work = m->cap_work ? 2 * m->cap_work : 256;
        m->work = xrealloc(m->work, m->cap_work * sizeof *m->work);
    }
    m->work[(*n)++] = id;
}

/* Push an alternative's start (or, for an empty one, what follows it). */
static void push_alt(struct gram_m *m, struct gstate *st, uint32_t *n, uint32_t first, uint32_t ret)
{
    if (m->g->el[first].kind != GEL_END)
        work_push(m, n, node_new(m, first, ret));
    else if (ret == NONE)
        st->acc = true;
    else
        work_push(m, n, ret);
}

/* Expand node `start` into character-element tops of st. False when a limit was hit. */
static bool closure(struct gram_m *m, struct gstate *st, uint32_t start)
{
    const gram_t *g = m->g;
    uint32_t n = 0;
    work_push(m, &n, start);
    while (n) {
        uint32_t id = m->work[--n];
        if (++m->steps > GRAM_MAX_CLOSURE) {
            m->failed = true;
            return false;
        }
        uint32_t pos = m->nd[id].pos, parent = m->nd[id].parent;
        struct gram_el e = g->el[pos];
        if (e.kind == GEL_CHAR) {
            if (!add_leaf(m, st, id))
                return false;
        } else if (e.kind == GEL_END) {
            if (parent == NONE)
                st->acc = true;
            else
                work_push(m, &n, parent);
        } else {
            uint32_t ret = g->el[pos + 1].kind == GEL_END ? parent : node_new(m, pos + 1, parent);
            uint32_t a0 = g->rule_alt0[e.arg];
            for (uint32_t a = g->rule_nalt[e.arg]; a-- > 0;)
                push_alt(m, st, &n, g->alt[a0 + a], ret);
        }
    }
    return true;
}

/* ---- classes and steps -------------------------------------------------------------------- */

static bool cls_has(const gram_t *g, uint32_t c, uint32_t cp)
{
    const struct gram_cls *k = &g->cls[c];
    if (cp < 128)
        return k->ascii[cp / 32] >> (cp % 32) & 1;
    const uint32_t *r = g->ranges + 2 * k->r0;
    uint32_t lo = 0, hi = k->nr;
    while (lo < hi) { /* the first range whose end is >= cp */
        uint32_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < k->nr && r[2 * lo] <= cp;
}

/* Does class c contain a code point in [lo, hi]? */
static bool cls_meets(const gram_t *g, uint32_t c, uint32_t lo, uint32_t hi)
{
    const struct gram_cls *k = &g->cls[c];
    const uint32_t *r = g->ranges + 2 * k->r0;
    uint32_t a = 0, b = k->nr;
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        if (r[2 * mid + 1] < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < k->nr && r[2 * a] <= hi;
}

/* Feed one complete character to from's stacks, into to. */
static bool advance_cp(struct gram_m *m, const struct gstate *from, struct gstate *to, uint32_t cp)
{
    const gram_t *g = m->g;
    m->steps = 0; /* the limit bounds the work of one character, all stacks together */
    to->n = 0;
    to->acc = false;
    to->need = to->len = 0;
    to->cp = 0;
    for (uint32_t k = 0; k < from->n; k++) {
        uint32_t id = from->leaf[k], pos = m->nd[id].pos, parent = m->nd[id].parent;
        if (!cls_has(g, g->el[pos].arg, cp))
            continue;
        bool ok;
        if (g->el[pos + 1].kind != GEL_END)
            ok = closure(m, to, node_new(m, pos + 1, parent));
        else if (parent != NONE)
            ok = closure(m, to, parent);
        else
            ok = to->acc = true;
        if (!ok)
            return false;
    }
    return to->n > 0 || to->acc;
}

static const uint32_t utf8_min[5] = {0, 0, 0x80, 0x800, 0x10000};

/* Can the pending character of st still become one that some top accepts? */
static bool viable(const struct gram_m *m, const struct gstate *st)
{
    uint32_t sh = 6u * st->need;
    uint32_t lo = st->cp << sh, hi = lo | ((1u << sh) - 1);
    if (lo < utf8_min[st->len])
        lo = utf8_min[st->len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return false;
    for (uint32_t k = 0; k < st->n; k++) {
        uint32_t c = m->g->el[m->nd[st->leaf[k]].pos].arg;
        if ((lo <= 0xD7FF && cls_meets(m->g, c, lo, hi < 0xD7FF ? hi : 0xD7FF)) ||
            (hi >= 0xE000 && cls_meets(m->g, c, lo > 0xE000 ? lo : 0xE000, hi)))
            return true;
    }
    return false;
}

/* One byte: from -> to (distinct states). */
static bool advance_byte(struct gram_m *m, const struct gstate *from, struct gstate *to, uint8_t b)
{
    if (m->failed)
        return false;
    if (from->need == 0) {
        if (b < 0x80)
            return advance_cp(m, from, to, b);
        int len = b >= 0xC2 && b <= 0xDF   ? 2
                  : b >= 0xE0 && b <= 0xEF ? 3
                  : b >= 0xF0 && b <= 0xF4 ? 4
                                           : 0;
        if (!len)
            return false;
        st_copy(to, from);
        to->acc = false;
        to->len = (uint8_t)len;
        to->need = (uint8_t)(len - 1);
        to->cp = b & (0x7Fu >> len);
        return viable(m, to);
    }
    if ((b & 0xC0) != 0x80)
        return false;
    uint32_t cp = from->cp << 6 | (b & 0x3Fu);
    if (from->need == 1) {
        if (cp < utf8_min[from->len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        return advance_cp(m, from, to, cp);
    }
    st_copy(to, from);
    to->need = (uint8_t)(from->need - 1);
    to->cp = cp;
    return viable(m, to);
}

/* ---- the matcher -------------------------------------------------------------------------- */

gram_m_t *gram_m_create(gram_t *g)
{
    gram_m_t *m = xcalloc(1, sizeof *m);
    atomic_fetch_add_explicit(&st_matchers, 1, memory_order_relaxed);
    gram_retain(g);
    m->g = g;
    uint32_t n = 0;
    uint32_t a0 = g->rule_alt0[g->root];
    for (uint32_t a = g->rule_nalt[g->root]; a-- > 0;)
        push_alt(m, &m->cur, &n, g->alt[a0 + a], NONE);
    /* run the pushed alternatives through the closure (one work list per start) */
    uint32_t *starts = xmalloc((n + 1) * sizeof *starts);
    if (n)
        memcpy(starts, m->work, n * sizeof *starts);
    for (uint32_t k = 0; k < n; k++)
        if (!closure(m, &m->cur, starts[k]))
            break;
    free(starts);
    return m;
}

bool gram_m_accept_bytes(gram_m_t *m, const char *p, size_t n)
{
    if (m->finished || m->failed)
        return false;
    uint32_t mark = m->n_nd;
    const struct gstate *from = &m->cur;
    for (size_t k = 0; k < n; k++) {
        struct gstate *to = &m->tmp[k & 1];
        if (!advance_byte(m, from, to, (uint8_t)p[k])) {
            m->n_nd = mark;
            return false;
        }
        from = to;
    }
    if (n)
        st_copy(&m->cur, from);
    return true;
}

bool gram_m_accept_token(gram_m_t *m, const gram_vocab_t *v, int32_t id)
{
    if (m->finished || id < 0 || id >= v->n_vocab || v->kind[id] == GRAM_TOK_NEVER)
        return false;
    if (v->kind[id] == GRAM_TOK_EOG) {
        if (!gram_m_accepting(m))
            return false;
        m->finished = true;
        return true;
    }
    return gram_m_accept_bytes(m, v->text + v->off[id], v->off[id + 1] - v->off[id]);
}

bool gram_m_accepting(const gram_m_t *m)
{
    return !m->finished && m->cur.acc && m->cur.need == 0;
}

bool gram_m_finished(const gram_m_t *m)
{
    return m->finished;
}

bool gram_m_failed(const gram_m_t *m)
{
    return m->failed;
}

void gram_m_push(gram_m_t *m)
{
    if (m->n_save == m->cap_save) {
        m->cap_save = m->cap_save ? 2 * m->cap_save : 4;
        m->save = xrealloc(m->save, (size_t)m->cap_save * sizeof *m->save);
        memset(m->save + m->n_save, 0, (size_t)(m->cap_save - m->n_save) * sizeof *m->save);
    }
    struct gsave *s = &m->save[m->n_save++];
    st_copy(&s->st, &m->cur);
    s->n_nd = m->n_nd;
    s->finished = m->finished;
}

void gram_m_pop(gram_m_t *m)
{
    ASSERT(m->n_save > 0);
    struct gsave *s = &m->save[--m->n_save];
    st_copy(&m->cur, &s->st);
    m->n_nd = s->n_nd;
    m->finished = s->finished;
}

void gram_m_drop(gram_m_t *m)
{
    ASSERT(m->n_save > 0);
    m->n_save--;
}

void gram_m_destroy(gram_m_t *m)
{
    if (!m)
        return;
    free(m->nd);
    free(m->cur.leaf);
    free(m->tmp[0].leaf);
    free(m->tmp[1].leaf);
    for (int k = 0; k < m->cap_save; k++)
        free(m->save[k].st.leaf);
    free(m->save);
    for (uint32_t k = 0; k < m->n_lvl; k++)
        free(m->lvl[k].leaf);
    free(m->lvl);
    free(m->work);
    gram_release(m->g);
    free(m);
}

/* ---- masks -------------------------------------------------------------------------------- */

/* What a walk from the matcher's own state may skip: a character that leads back to that very
 * state (the character loop of a JSON string, where almost every token of a large vocabulary
 * stays) is not expanded again, the walk goes on from the state itself. ascii[b]: byte b loops;
 * high: every non-ASCII character loops (each top's class holds all of them or none, and one
 * of them loops). Equal states are recognised by their content key, as the mask cache does. */
struct loops {
    const struct gstate *root;
    bool ascii[128];
    bool high;
};

static uint64_t key_of(const gram_m_t *m, const struct gstate *s)
{
    uint64_t h = mix64(((uint64_t)s->cp << 8 | (uint64_t)s->need << 4 | s->len) * 2 + s->acc);
    for (uint32_t k = 0; k < s->n; k++)
        h += mix64(m->nd[s->leaf[k]].h); /* order-free: the tops are distinct */
    return h | 1;
}

/* Does class c contain every code point of [lo, hi]? (Its ranges are merged.) */
static bool cls_covers(const gram_t *g, uint32_t c, uint32_t lo, uint32_t hi)
{
    const struct gram_cls *k = &g->cls[c];
    const uint32_t *r = g->ranges + 2 * k->r0;
    for (uint32_t i = 0; i < k->nr; i++)
        if (r[2 * i] <= lo && r[2 * i + 1] >= hi)
            return true;
    return false;
}

static void find_loops(gram_m_t *m, struct loops *L, struct gstate *scratch)
{
    const struct gstate *r = &m->cur;
    memset(L, 0, sizeof *L);
    L->root = r;
    if (r->need)
        return;
    uint64_t k0 = key_of(m, r);
    for (uint32_t b = 0; b < 128; b++) {
        uint32_t mark = m->n_nd;
        L->ascii[b] = advance_cp(m, r, scratch, b) && key_of(m, scratch) == k0;
        m->n_nd = mark;
        m->failed = false;
    }
    bool uniform = true;
    for (uint32_t k = 0; k < r->n && uniform; k++) {
        uint32_t c = m->g->el[m->nd[r->leaf[k]].pos].arg;
        bool full = cls_covers(m->g, c, 0x80, 0xD7FF) && cls_covers(m->g, c, 0xE000, 0x10FFFF);
        bool none = !cls_meets(m->g, c, 0x80, 0xD7FF) && !cls_meets(m->g, c, 0xE000, 0x10FFFF);
        uniform = full || none;
    }
    if (uniform) {
        uint32_t mark = m->n_nd;
        L->high = advance_cp(m, r, scratch, 0xE9) && key_of(m, scratch) == k0;
        m->n_nd = mark;
        m->failed = false;
    }
}

/* Depth-first over the children of trie node tn, from state st (from_root: st is the root or a
 * pending character begun at it); lvl[d] receives each child's state. Every branch cuts the node
 * pool back (see the file comment). */
static void walk(gram_m_t *m, const gram_vocab_t *v, const struct loops *L, uint32_t tn, uint32_t d,
                 const struct gstate *st, bool from_root, uint32_t *bits, int64_t *cnt)
{
    struct gstate *ns = &m->lvl[d];
    for (uint32_t c = v->first[tn]; c != NONE; c = v->next[c]) {
        uint8_t b = v->byte[c];
        uint32_t mark = m->n_nd;
        const struct gstate *next = NULL;
        if (from_root && st == L->root && b < 0x80 && L->ascii[b]) {
            next = L->root;
        } else if (from_root && L->high && st->need == 1 && (b & 0xC0) == 0x80) {
            uint32_t cp = st->cp << 6 | (b & 0x3Fu);
            if (cp >= utf8_min[st->len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF))
                next = L->root;
        }
        if (!next && advance_byte(m, st, ns, b))
            next = ns;
        if (next) {
            for (uint32_t t = v->tok[c]; t != NONE; t = v->tok_nxt[t]) {
                bits[t / 32] |= 1u << (t % 32);
                (*cnt)++;
            }
            bool root_side = next == L->root || (from_root && next->need > 0);
            if (v->first[c] != NONE)
                walk(m, v, L, c, d + 1, next, root_side, bits, cnt);
        }
        m->n_nd = mark;
        m->failed = false; /* a limit hit inside one token's bytes only rules that token out */
    }
}

struct gram_mcache {
    uint64_t vid; /* the vocabulary's id */
    int64_t words;
    uint32_t cap, n, max_n; /* table slots, entries, entries before a clear */
    uint64_t *key;          /* [cap] 0 = empty */
    uint32_t **mask;        /* [cap] words + 2 (the count in the last two) */
};

void gram__mcache_free(struct gram_mcache *mc)
{
    if (!mc)
        return;
    for (uint32_t k = 0; k < mc->cap; k++)
        free(mc->mask[k]);
    free(mc->key);
    free(mc->mask);
    free(mc);
}

static struct gram_mcache *mcache_new(const gram_vocab_t *v)
{
    struct gram_mcache *mc = xcalloc(1, sizeof *mc);
    mc->vid = v->id;
    mc->words = gram_vocab_words(v);
    uint64_t per = (uint64_t)(mc->words + 2) * 4;
    mc->max_n = (uint32_t)(GRAM_CACHE_BYTES / per > 16 ? GRAM_CACHE_BYTES / per : 16);
    if (mc->max_n > 65536)
        mc->max_n = 65536;
    mc->cap = 1;
    while (mc->cap < 2 * mc->max_n)
        mc->cap *= 2;
    mc->key = xcalloc(mc->cap, sizeof *mc->key);
    mc->mask = xcalloc(mc->cap, sizeof *mc->mask);
    return mc;
}

static uint32_t mcache_slot(const struct gram_mcache *mc, uint64_t key)
{
    uint32_t k = (uint32_t)key & (mc->cap - 1);
    while (mc->key[k] && mc->key[k] != key)
        k = (k + 1) & (mc->cap - 1);
    return k;
}

static uint64_t state_key(const gram_m_t *m)
{
    return key_of(m, &m->cur);
}

/* A cached mask for key: copied into bits, its count returned; -1 when absent. */
static int64_t mcache_get(gram_t *g, const gram_vocab_t *v, uint64_t key, uint32_t *bits)
{
    int64_t cnt = -1;
    pthread_mutex_lock(&g->mu);
    struct gram_mcache *mc = g->mc;
    if (mc && mc->vid == v->id) {
        uint32_t k = mcache_slot(mc, key);
        if (mc->key[k]) {
            memcpy(bits, mc->mask[k], (size_t)mc->words * 4);
            memcpy(&cnt, mc->mask[k] + mc->words, sizeof cnt);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return cnt;
}

static void mcache_put(gram_t *g, const gram_vocab_t *v, uint64_t key, const uint32_t *bits,
                       int64_t cnt)
{
    pthread_mutex_lock(&g->mu);
    if (!g->mc || g->mc->vid != v->id || g->mc->n >= g->mc->max_n) {
        gram__mcache_free(g->mc); /* a full cache starts over: simple, and states recur */
        g->mc = mcache_new(v);
    }
    struct gram_mcache *mc = g->mc;
    uint32_t k = mcache_slot(mc, key);
    if (!mc->key[k]) {
        mc->key[k] = key;
        mc->mask[k] = xmalloc(((size_t)mc->words + 2) * 4);
        memcpy(mc->mask[k], bits, (size_t)mc->words * 4);
        memcpy(mc->mask[k] + mc->words, &cnt, sizeof cnt);
        mc->n++;
    }
    pthread_mutex_unlock(&g->mu);
}

int64_t gram_m_mask(gram_m_t *m, const gram_vocab_t *v, uint32_t *bits)
{
    memset(bits, 0, (size_t)gram_vocab_words(v) * 4);
    if (m->finished || m->failed)
        return 0;
    double t0 = dd_now();
    uint64_t key = state_key(m);
    int64_t cnt = mcache_get(m->g, v, key, bits);
    if (cnt >= 0) {
        atomic_fetch_add_explicit(&st_hits, 1, memory_order_relaxed);
        observe(&h_mask, dd_now() - t0);
        return cnt;
    }
    if (m->n_lvl < v->max_len + 1) {
        m->lvl = xrealloc(m->lvl, (v->max_len + 1) * sizeof *m->lvl);
        memset(m->lvl + m->n_lvl, 0, (v->max_len + 1 - m->n_lvl) * sizeof *m->lvl);
        m->n_lvl = v->max_len + 1;
    }
    cnt = 0;
    struct loops L;
    struct gstate scratch = {0};
    find_loops(m, &L, &scratch);
    free(scratch.leaf);
    walk(m, v, &L, 0, 0, &m->cur, true, bits, &cnt);
    if (gram_m_accepting(m))
        for (int32_t k = 0; k < v->n_eog; k++) {
            bits[v->eog[k] / 32] |= 1u << (v->eog[k] % 32);
            cnt++;
        }
    mcache_put(m->g, v, key, bits, cnt);
    atomic_fetch_add_explicit(&st_walks, 1, memory_order_relaxed);
    double dt = dd_now() - t0;
    atomic_fetch_add_explicit(&st_walk_ns, (long long)(dt * 1e9), memory_order_relaxed);
    observe(&h_mask, dt);
    return cnt;
}

void gram_get_stats(struct gram_stats *s)
{
    s->walks = atomic_load_explicit(&st_walks, memory_order_relaxed);
    s->hits = atomic_load_explicit(&st_hits, memory_order_relaxed);
    s->matchers = atomic_load_explicit(&st_matchers, memory_order_relaxed);
    s->compiles = atomic_load_explicit(&st_compiles, memory_order_relaxed);
    s->compile_errors = atomic_load_explicit(&st_compile_err, memory_order_relaxed);
    s->walk_seconds = (double)atomic_load_explicit(&st_walk_ns, memory_order_relaxed) * 1e-9;
    read_hist(&h_compile, &s->compile);
    read_hist(&h_mask, &s->mask);
}
