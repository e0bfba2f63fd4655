/*
 * reasoning — the <think> splitter (see reasoning.h).
 *
 * States: START (the output may still open with <think>), LEAD (just inside the block:
 * leading whitespace is dropped), THINK (inside), AFTER (just past </think>: leading whitespace
 * is dropped), CONTENT (everything else passes through). Every state works on `hold`, the bytes
 * not yet emitted, and decides only from what it has seen, which is what makes the output
 * independent of how the text was cut into deltas.
 *
 * Thread safety: one owner (the connection thread of the request).
 */
#include "reasoning.h" // defines: reasoning_feed

#include <string.h>

enum { RS_START, RS_LEAD, RS_THINK, RS_AFTER, RS_CONTENT };

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

void reasoning_init(struct reasoning *r, bool inside, reasoning_emit_fn emit_fn, void *ud)
{
    memset(r, 0, sizeof *r);
    r->state = inside ? RS_LEAD : RS_START;
    r->emit = emit_fn;
    r->ud = ud;
}

void reasoning_deinit(struct reasoning *r)
{
    dd_buf_free(&r->hold);
}

static bool rs_is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Drop the first n held bytes. */
static void rs_consume(struct reasoning *r, size_t n)
{
    if (n == 0)
        return;
    memmove(r->hold.p, r->hold.p + n, r->hold.len - n);
    r->hold.len -= n;
}

/* Emit the first n held bytes (nothing for n == 0) and drop them. */
static void rs_emit(struct reasoning *r, bool reasoning, size_t n)
{
    if (n)
        r->emit(r->ud, reasoning, r->hold.p, n);
    rs_consume(r, n);
}

/* Index of the first non-whitespace byte at or after i. */
static size_t rs_skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && rs_is_ws(s[i]))
        i++;
    return i;
}

/* Start of the whitespace run that ends at i. */
static size_t rs_back_ws(const char *s, size_t i)
{
    while (i > 0 && rs_is_ws(s[i - 1]))
        i--;
    return i;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t rs_partial(const char *s, size_t n, const char *tag)
{
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0)
            return k;
    return 0;
}

/* START: whitespace then <think> opens the block; anything else is content from here on.
 * Returns false while undecided. */
static bool step_start(struct reasoning *r, bool final)
{
    size_t p = rs_skip_ws(r->hold.p, r->hold.len, 0), rest = r->hold.len - p;
    size_t t = strlen(THINK_OPEN);
    if (rest >= t && memcmp(r->hold.p + p, THINK_OPEN, t) == 0) {
        rs_consume(r, p + t);
        r->opened = true;
        r->state = RS_LEAD;
        return true;
    }
    bool maybe = rest < t && (rest == 0 || memcmp(r->hold.p + p, THINK_OPEN, rest) == 0);
    if (maybe && !final)
        return false;
    r->state = RS_CONTENT;
    return true;
}

/* THINK: reasoning up to </think>, holding back trailing whitespace and a partial tag. */
static bool step_think(struct reasoning *r, bool final)
{
    const char *s = r->hold.p;
    size_t n = r->hold.len;
    size_t k = strlen(THINK_CLOSE);
    const char *hit = n >= k ? memmem(s, n, THINK_CLOSE, k) : NULL;
    if (hit) {
        size_t i = (size_t)(hit - s), w = rs_back_ws(s, i);
        rs_emit(r, true, w);
        rs_consume(r, i - w + strlen(THINK_CLOSE)); /* the dropped whitespace and the tag */
        r->closed = true;
        r->state = RS_AFTER;
        return true;
    }
    size_t keep = final ? 0 : rs_partial(s, n, THINK_CLOSE);
    rs_emit(r, true, rs_back_ws(s, n - keep));
    if (final)
        dd_buf_truncate(&r->hold, 0); /* only trailing whitespace was left */
    return false;
}

/* Run the state machine over everything held; final = no more text will come. */
static void rs_run(struct reasoning *r, bool final)
{
    for (;;) {
        switch (r->state) {
        case RS_START:
            if (!step_start(r, final))
                return;
            break;
        case RS_LEAD:
        case RS_AFTER: {
            size_t p = rs_skip_ws(r->hold.p, r->hold.len, 0);
            rs_consume(r, p);
            if (r->hold.len == 0)
                return;
            r->state = r->state == RS_LEAD ? RS_THINK : RS_CONTENT;
            break;
        }
        case RS_THINK:
            if (!step_think(r, final))
                return;
            break;
        default:
            rs_emit(r, false, r->hold.len);
            return;
        }
    }
}

void reasoning_feed(struct reasoning *r, const char *s, size_t n)
{
    if (n == 0)
        return;
    dd_buf_put(&r->hold, s, n);
    rs_run(r, false);
}

void reasoning_finish(struct reasoning *r)
{
    rs_run(r, true);
}
