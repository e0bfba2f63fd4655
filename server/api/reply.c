/*
 * reply — a chat choice's message parts (see reply.h).
 *
 * Everything parsed is kept in full (content, reasoning, each call's name and arguments) for
 * the whole response and the usage count; a stream additionally records events, each a kind,
 * a call index and a slice of ev_text, which reply_sse turns into chunks and forgets. Adjacent
 * events of one kind merge, so a burst of text becomes one chunk.
 *
 * Tool-call ids are "call_" and 24 random alphanumerics, as OpenAI's look.
 *
 * Thread safety: one owner (the connection thread of the request).
 */
#include "reply.h" // defines: reply_create, reply_sse

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine/util.h" // defines: xcalloc, xrealloc
#include "reasoning.h"   // defines: reasoning_feed
#include "toolcall.h"    // defines: toolcall_feed

enum ev_kind { EV_CONTENT, EV_REASONING, EV_CALL_START, EV_CALL_ARGS };

struct event {
    enum ev_kind kind;
    int call;        /* tool-call index (call events) */
    size_t off, len; /* slice of ev_text */
};

struct call {
    char id[32];
    char *name;
    struct dd_buf args;
};

struct reply {
    struct reply_opts o;
    struct reasoning rs;
    struct toolcall tc;
    struct dd_buf content, reasoning;
    struct call *calls; /* [n_calls] */
    int n_calls, cap_calls;
    struct resp_call *views; /* [n_calls], built by reply_choice */
    struct event *ev;        /* [n_ev] pending stream events */
    int n_ev, cap_ev;
    struct dd_buf ev_text;
};

/* ---- parts and events ------------------------------------------------------------------ */

/* Record a stream event, merging with the previous one of the same kind and call. */
static void event(reply_t *r, enum ev_kind kind, int call, const char *s, size_t n)
{
    if (!r->o.stream || (n == 0 && kind != EV_CALL_START))
        return;
    struct event *last = r->n_ev ? &r->ev[r->n_ev - 1] : NULL;
    bool merge = last && last->kind == kind && last->call == call && kind != EV_CALL_START;
    if (!merge) {
        if (r->n_ev == r->cap_ev) {
            r->cap_ev = r->cap_ev ? 2 * r->cap_ev : 8;
            r->ev = xrealloc(r->ev, (size_t)r->cap_ev * sizeof *r->ev);
        }
        r->ev[r->n_ev++] = (struct event){kind, call, r->ev_text.len, 0};
        last = &r->ev[r->n_ev - 1];
    }
    dd_buf_put(&r->ev_text, s, n);
    last->len += n;
}

/* A random call id. */
static void call_id(char *out, size_t cap)
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (unsigned char)((uint64_t)(dd_now() * 1e9) >> (i % 8));
    size_t n = snprintf(out, cap, "call_");
    for (size_t i = 0; i < sizeof rnd && n + 1 < cap; i++)
        out[n++] = abc[rnd[i] % (sizeof abc - 1)];
    out[n] = '\0';
}

/* The tool-call parser's output. */
static void on_toolcall(void *ud, enum toolcall_ev ev, const char *s, size_t n)
{
    reply_t *r = ud;
    if (ev == TOOLCALL_TEXT) {
        dd_buf_put(&r->content, s, n);
        event(r, EV_CONTENT, 0, s, n);
        return;
    }
    if (ev == TOOLCALL_START) {
        if (r->n_calls == r->cap_calls) {
            r->cap_calls = r->cap_calls ? 2 * r->cap_calls : 4;
            r->calls = xrealloc(r->calls, (size_t)r->cap_calls * sizeof *r->calls);
        }
        struct call *c = &r->calls[r->n_calls++];
        memset(c, 0, sizeof *c);
        call_id(c->id, sizeof c->id);
        c->name = xmalloc(n + 1);
        memcpy(c->name, s, n);
        c->name[n] = '\0';
        event(r, EV_CALL_START, r->n_calls - 1, "", 0);
        return;
    }
    if (ALWAYS(r->n_calls > 0)) {
        dd_buf_put(&r->calls[r->n_calls - 1].args, s, n);
        event(r, EV_CALL_ARGS, r->n_calls - 1, s, n);
    }
}

/* Content goes through the tool-call parser when it is on. */
static void to_content(reply_t *r, const char *s, size_t n)
{
    if (r->o.tool_calls)
        toolcall_feed(&r->tc, s, n);
    else
        on_toolcall(r, TOOLCALL_TEXT, s, n);
}

/* The <think> splitter's output. */
static void on_reasoning(void *ud, bool reasoning, const char *s, size_t n)
{
    reply_t *r = ud;
    if (!reasoning) {
        to_content(r, s, n);
        return;
    }
    dd_buf_put(&r->reasoning, s, n);
    event(r, EV_REASONING, 0, s, n);
}

/* ---- life cycle ------------------------------------------------------------------------ */

reply_t *reply_create(const struct reply_opts *o)
{
    reply_t *r = xcalloc(1, sizeof *r);
    r->o = *o;
    reasoning_init(&r->rs, o->think_open, on_reasoning, r);
    toolcall_init(&r->tc, o->tools, o->max_calls, on_toolcall, r);
    return r;
}

void reply_feed(reply_t *r, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (r->o.reasoning)
        reasoning_feed(&r->rs, s, n);
    else
        to_content(r, s, n);
}

void reply_finish(reply_t *r)
{
    if (r->o.reasoning)
        reasoning_finish(&r->rs);
    if (r->o.tool_calls)
        toolcall_finish(&r->tc);
}

void reply_destroy(reply_t *r)
{
    if (!r)
        return;
    reasoning_deinit(&r->rs);
    toolcall_deinit(&r->tc);
    dd_buf_free(&r->content);
    dd_buf_free(&r->reasoning);
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        dd_buf_free(&r->calls[i].args);
    }
    free(r->calls);
    free(r->views);
    free(r->ev);
    dd_buf_free(&r->ev_text);
    free(r);
}

/* ---- output ---------------------------------------------------------------------------- */

bool reply_sse(reply_t *r, struct dd_buf *b, const struct resp_meta *m, int64_t index,
               const struct resp_toks *toks)
{
    for (int i = 0; i < r->n_ev; i++) {
        const struct event *e = &r->ev[i];
        const char *s = r->ev_text.p + e->off;
        const struct resp_toks *k = i == 0 ? toks : NULL;
        const struct call *c = e->kind >= EV_CALL_START ? &r->calls[e->call] : NULL;
        if (e->kind == EV_CONTENT)
            resp_sse_text(b, m, index, s, e->len, k);
        else if (e->kind == EV_REASONING)
            resp_sse_reasoning(b, m, index, s, e->len, k);
        else if (e->kind == EV_CALL_START)
            resp_sse_tool_call(b, m, index, e->call, c->id, c->name, "", 0, k);
        else
            resp_sse_tool_call(b, m, index, e->call, NULL, NULL, s, e->len, k);
    }
    bool any = r->n_ev > 0;
    r->n_ev = 0;
    dd_buf_truncate(&r->ev_text, 0);
    return any;
}

void reply_parts(reply_t *r, reply_part_fn fn, void *ud)
{
    static const enum resp_part kinds[] = {RESP_PART_CONTENT, RESP_PART_REASONING,
                                           RESP_PART_CALL_START, RESP_PART_CALL_ARGS};
    for (int i = 0; i < r->n_ev; i++) {
        const struct event *e = &r->ev[i];
        const struct call *c = e->kind == EV_CALL_START ? &r->calls[e->call] : NULL;
        fn(ud, kinds[e->kind], c ? c->id : NULL, c ? c->name : NULL, r->ev_text.p + e->off, e->len);
    }
    r->n_ev = 0;
    dd_buf_truncate(&r->ev_text, 0);
}

void reply_choice(reply_t *r, struct resp_choice *c)
{
    free(r->views);
    r->views = r->n_calls ? xcalloc((size_t)r->n_calls, sizeof *r->views) : NULL;
    for (int i = 0; i < r->n_calls; i++) {
        struct call *k = &r->calls[i];
        r->views[i] = (struct resp_call){k->id, k->name, k->args.p ? k->args.p : "", k->args.len};
    }
    c->text = r->content.p ? r->content.p : "";
    c->len = r->content.len;
    c->reasoning = r->reasoning.len ? r->reasoning.p : NULL;
    c->reasoning_len = r->reasoning.len;
    c->calls = r->views;
    c->n_calls = r->n_calls;
    c->content_null = r->n_calls > 0 && r->content.len == 0;
}

int reply_n_calls(const reply_t *r)
{
    return r->n_calls;
}

int64_t reply_reasoning_tokens(const reply_t *r, const tok_t *tok)
{
    int64_t n = r->rs.opened + r->rs.closed;
    if (r->reasoning.len)
        n += tok_encode(tok, r->reasoning.p, r->reasoning.len, false, NULL, 0);
    return n > 0 && (r->reasoning.len || r->rs.closed) ? n : 0;
}
