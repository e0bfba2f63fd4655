/*
 * jinja_exec — runs a template's statements: output, if, for (with loop variables, else and
 * filter), set (names, tuples, namespace attributes, blocks), macros with defaults, varargs,
 * kwargs and caller(), call/filter/with blocks, break/continue; owns scopes, limits, errors
 * and jinja_render.
 *
 * Scopes follow jinja2: each for-loop iteration, macro call, caller() call and with block gets
 * a fresh scope, so a `set` inside a loop body is gone at the next iteration and after the loop
 * (namespaces carry state out); `if` bodies share their enclosing scope. Name lookup walks the
 * scopes outward, then the render context, then the globals. A macro body sees the template's
 * top-level scope (at call time), not its caller's locals.
 *
 * Invariants: every limit (output bytes, live value bytes, steps, macro depth, nesting) turns
 * into an error at the next step check, so no template can hang, exhaust memory or overflow the
 * C stack. The first error wins. A caller() value is invalidated when its call block ends.
 *
 * Threads: a render state belongs to the calling thread; the template is only read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xrealloc, dd_errf, DD_EINVAL, DD_EFULL
#include "jinja_impl.h"  // defines: jinja__rs, jinja__scope, jinja__node, value helpers

/*
 * Runs statements until one fails or a break/continue is pending (the enclosing loop consumes it).
 */
static int exec_body(struct jinja__rs *rs, const struct jinja__nodes *body);

/* ==== errors and limits ====================================================================== */

/*
 * Errors carry the position of the node that failed; only the first one is kept (later failures
 * are consequences of it).
 */
int jinja__fail(struct jinja__rs *rs, const struct jinja__node *node, const char *fmt, ...)
{
    if (rs->failed)
        return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (node)
        dd_errf(rs->err, rs->errlen, "%u:%u: %s", node->line, node->col, msg);
    else
        dd_errf(rs->err, rs->errlen, "%s", msg);
    rs->failed = 1;
    rs->code = DD_EINVAL;
    return -1;
}

/*
 * A render limit: DD_EFULL, so the server can tell "template too big for the limits" from
 * "template error".
 */
int jinja__fail_limit(struct jinja__rs *rs, const char *what)
{
    if (rs->failed)
        return -1;
    dd_errf(rs->err, rs->errlen, "template render limit exceeded: %s", what);
    rs->failed = 1;
    rs->code = DD_EFULL;
    return -1;
}

/*
 * raise_exception(): the template author's message, verbatim (transformers surfaces it the same
 * way).
 */
int jinja__raise(struct jinja__rs *rs, const char *msg)
{
    if (rs->failed)
        return -1;
    dd_errf(rs->err, rs->errlen, "%s", msg);
    rs->failed = 1;
    rs->code = DD_EINVAL;
    return -1;
}

/* Using an undefined where a value is needed raises the message it was created with. */
int jinja__fail_undef(struct jinja__rs *rs, const struct jinja__node *node, const jinja_value *u)
{
    if (u->u.s.p)
        return jinja__fail(rs, node, "%s", u->u.s.p);
    return jinja__fail(rs, node, "value is undefined");
}

/*
 * The single place where every limit is checked: steps, live memory, output size and value
 * nesting. Called for each evaluation, statement and loop iteration, and with n = the item count
 * when a list is built.
 */
int jinja__step(struct jinja__rs *rs, uint64_t n)
{
    if (rs->failed)
        return -1;
    rs->steps += n;
    if (rs->steps > rs->t->opts.max_steps)
        return jinja__fail_limit(rs, "max_steps");
    if (rs->acct.over)
        return jinja__fail_limit(rs, "max_memory");
    if (rs->out->over)
        return jinja__fail_limit(rs, "max_output");
    if (rs->acct.deep)
        return jinja__fail(rs, NULL, "values nested deeper than %d levels", JINJA__MAX_NEST);
    return 0;
}

/* The render keeps a reference to each namespace so that it can empty them all at the end. */
void jinja__track_ns(struct jinja__rs *rs, jinja_value *ns)
{
    if (rs->nns == rs->cap_ns) {
        rs->cap_ns = rs->cap_ns ? rs->cap_ns * 2 : 8;
        rs->ns = xrealloc(rs->ns, rs->cap_ns * sizeof(*rs->ns));
    }
    rs->ns[rs->nns++] = jinja_value_acquire(ns);
}

/* ==== scopes ================================================================================= */

/* Scopes live on the C stack of the statement that opens them. */
static void scope_init(struct jinja__scope *s, struct jinja__scope *parent)
{
    memset(s, 0, sizeof(*s));
    s->parent = parent;
}

/* Drops every binding, keeping the array for reuse. */
static void scope_clear(struct jinja__scope *s)
{
    size_t n = s->n;
    s->n = 0;
    for (size_t i = 0; i < n; i++)
        jinja_value_release(s->v[i].v);
}

/* Releases the bindings and the array. */
static void scope_free(struct jinja__scope *s)
{
    scope_clear(s);
    free(s->v);
    s->v = NULL;
    s->cap = 0;
}

/* Binds name in s (v transferred), replacing an earlier binding in the same scope. */
static void scope_set(struct jinja__scope *s, const char *name, size_t n, jinja_value *v)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].n == n && memcmp(s->v[i].name, name, n) == 0) {
            jinja_value_release(s->v[i].v);
            s->v[i].v = v;
            return;
        }
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
    }
    s->v[s->n++] = (struct jinja__var){name, n, v};
}

/* Binds a static name ("loop", "caller", "varargs", "kwargs"). */
static void scope_sets(struct jinja__scope *s, const char *name, jinja_value *v)
{
    scope_set(s, name, strlen(name), v);
}

/*
 * Innermost scope first; within a scope the latest binding wins. Then the render context, then the
 * builtin globals, which a template or the context can therefore shadow.
 */
jinja_value *jinja__lookup(struct jinja__rs *rs, const char *name, size_t n)
{
    for (const struct jinja__scope *s = rs->scope; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->v[i].n == n && memcmp(s->v[i].name, name, n) == 0)
                return s->v[i].v;
    jinja_value *v = rs->ctx ? jinja__dict_gets(rs->ctx, name, n) : NULL; /* render variables */
    return v ? v : jinja__global(name, n);
}

/* Binds an assignment target (NK_NAME or NK_TUPLE of names) to v (borrowed). */
static int bind_target(struct jinja__rs *rs, struct jinja__scope *s, const struct jinja__node *t,
                       jinja_value *v)
{
    if (t->kind == NK_NAME) {
        scope_set(s, t->s, t->n, jinja_value_acquire(v));
        return 0;
    }
    jinja_value *items = jinja__iter_list(rs, t, v);
    if (!items)
        return -1;
    int rc = 0;
    /* for a, b in pairs: each item must unpack to exactly as many values as names */
    if (items->u.l.n != t->kids.n)
        rc = jinja__fail(rs, t, "%s values to unpack (expected %zu, got %zu)",
                         items->u.l.n > t->kids.n ? "too many" : "not enough", t->kids.n,
                         items->u.l.n);
    for (size_t i = 0; rc == 0 && i < t->kids.n; i++)
        scope_set(s, t->kids.v[i]->s, t->kids.v[i]->n, jinja_value_acquire(items->u.l.v[i]));
    jinja_value_release(items);
    return rc;
}

/* ==== output capture ========================================================================= */

/* Runs body into a fresh buffer and returns the text as a string value. */
static jinja_value *capture(struct jinja__rs *rs, const struct jinja__nodes *body)
{
    struct jinja__buf b = {.limit = rs->t->opts.max_output}, *saved = rs->out;
    rs->out = &b;
    int rc = exec_body(rs, body);
    rs->out = saved;
    if (rc == 0 && b.over)
        rc = jinja__fail_limit(rs, "max_output");
    if (rc < 0) {
        jinja__buf_free(&b);
        return NULL;
    }
    size_t n;
    char *p = jinja__buf_take(&b, &n);
    return jinja__str_take(&rs->acct, p, n);
}

/* Applies a filter chain whose innermost operand is the block text. */
static jinja_value *filter_text(struct jinja__rs *rs, const struct jinja__node *chain,
                                jinja_value *text)
{
    jinja_value *saved = rs->block_input;
    rs->block_input = text;
    jinja_value *r = jinja__eval(rs, chain);
    rs->block_input = saved;
    return r;
}

/* Prints str(v) to the current output and releases v. */
static int emit_value(struct jinja__rs *rs, jinja_value *v)
{
    jinja__put_str(rs->out, v);
    jinja_value_release(v);
    return jinja__step(rs, 1);
}

/* ==== macros ================================================================================= */

enum { USES_VARARGS = 1, USES_KWARGS = 2 }; /* NK_MACRO / NK_CALLBLOCK op bits (parser) */

/* For messages: the macro's name, or "caller" for a call block's body. */
static const char *macro_name(const struct jinja__node *m, int *len)
{
    *len = m->kind == NK_MACRO ? (int)m->n : 6;
    return m->kind == NK_MACRO ? m->s : "caller";
}

/* Binds keyword argument k to its parameter, or into kwargs when the macro uses them. */
static int bind_keyword(struct jinja__rs *rs, const struct jinja__node *at,
                        const struct jinja__node *m, const struct jinja__args *a, size_t k,
                        struct jinja__scope *s, char *bound, jinja_value *kwargs)
{
    int nlen;
    const char *name = macro_name(m, &nlen);
    size_t np = m->kids.n, i = 0;
    while (i < np &&
           (m->kids.v[i]->n != a->klen[k] || memcmp(m->kids.v[i]->s, a->kname[k], a->klen[k]) != 0))
        i++;
    if (i < np && (i < a->npos || bound[i]))
        return jinja__fail(rs, at, "macro '%.*s' got multiple values for argument '%.*s'", nlen,
                           name, (int)a->klen[k], a->kname[k]);
    if (i < np) {
        bound[i] = 1;
        scope_set(s, m->kids.v[i]->s, m->kids.v[i]->n, jinja_value_acquire(a->kval[k]));
        return 0;
    }
    if (!(m->op & USES_KWARGS))
        return jinja__fail(rs, at, "macro '%.*s' takes no keyword argument '%.*s'", nlen, name,
                           (int)a->klen[k], a->kname[k]);
    jinja__dict_put(kwargs, jinja__str(&rs->acct, a->kname[k], a->klen[k]),
                    jinja_value_acquire(a->kval[k]));
    return 0;
}

/* Binds the call's arguments to the macro's parameters in s; defaults evaluate in s. */
static int bind_params(struct jinja__rs *rs, const struct jinja__node *at,
                       const struct jinja__node *m, const struct jinja__args *a,
                       struct jinja__scope *s)
{
    int nlen;
    const char *name = macro_name(m, &nlen);
    size_t np = m->kids.n;
    jinja_value *varargs = jinja__list(&rs->acct, 0, 1), *kwargs = jinja__dict(&rs->acct, JK_DICT);
    scope_sets(s, "varargs", varargs);
    scope_sets(s, "kwargs", kwargs);
    if (a->npos > np && !(m->op & USES_VARARGS))
        return jinja__fail(rs, at, "macro '%.*s' takes not more than %zu argument(s)", nlen, name,
                           np);
    for (size_t i = 0; i < a->npos; i++) {
        if (i < np)
            scope_set(s, m->kids.v[i]->s, m->kids.v[i]->n, jinja_value_acquire(a->pos[i]));
        else
            jinja__list_push(varargs, jinja_value_acquire(a->pos[i]));
    }
    char *bound = xcalloc(np + 1, 1);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < a->nkw; k++)
        rc = bind_keyword(rs, at, m, a, k, s, bound, kwargs);
    for (size_t i = a->npos; rc == 0 && i < np; i++) {
        if (bound[i])
            continue;
        const struct jinja__node *def = m->kids2.v[i], *p = m->kids.v[i];
        jinja_value *v =
            def ? jinja__eval(rs, def)
                : jinja__undef_msg(&rs->acct, "parameter '%.*s' was not provided", (int)p->n, p->s);
        if (!v)
            rc = -1;
        else
            scope_set(s, p->s, p->n, v);
    }
    free(bound);
    return rc;
}

/* Calls a macro (or a call block's caller) with an optional caller() for its body. */
static jinja_value *invoke(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *macro,
                           const struct jinja__args *a, jinja_value *caller)
{
    const struct jinja__node *m = macro->u.m.node;
    if (!m)
        return (jinja__fail(rs, at, "caller() called after its call block ended"), NULL);
    if (rs->depth >= rs->t->opts.max_depth)
        return (jinja__fail_limit(rs, "max_depth (macro calls nested too deeply)"), NULL);
    /* A macro sees the top-level scope, not its caller's locals; caller() sees the scope of
     * its call block. */
    struct jinja__scope s, *saved = rs->scope;
    scope_init(&s, macro->u.m.scope ? macro->u.m.scope : rs->root);
    if (caller)
        scope_sets(&s, "caller", jinja_value_acquire(caller));
    rs->scope = &s;
    rs->depth++;
    jinja_value *r = NULL;
    if (bind_params(rs, at, m, a, &s) == 0)
        r = capture(rs, &m->kids3);
    rs->ctl = 0; /* a break cannot leave a macro (the parser refuses it anyway) */
    rs->depth--;
    rs->scope = saved;
    scope_free(&s);
    return r;
}

/* Entry point for calls from expressions. */
jinja_value *jinja__macro_call(struct jinja__rs *rs, const struct jinja__node *at,
                               jinja_value *macro, const struct jinja__args *args)
{
    return invoke(rs, at, macro, args, NULL);
}

/* {% call(params) m(args) %}body{% endcall %}: m runs with caller() bound to the body. */
static int exec_callblock(struct jinja__rs *rs, const struct jinja__node *n)
{
    const struct jinja__node *call = n->a;
    jinja_value *fn = jinja__eval(rs, call->a);
    struct jinja__args a;
    if (!fn)
        return -1;
    int rc = -1;
    if (fn->kind != JK_MACRO) {
        fn->kind == JK_UNDEF ? jinja__fail_undef(rs, call, fn)
                             : jinja__fail(rs, call, "a call block needs a macro to call");
    } else if (jinja__args_eval(rs, call, &a) == 0) {
        jinja_value *caller = jinja__macro(&rs->acct, n, rs->scope);
        jinja_value *r = invoke(rs, n, fn, &a, caller);
        caller->u.m.node = NULL; /* its scope ends with this statement */
        jinja_value_release(caller);
        jinja__args_free(&a);
        rc = r ? emit_value(rs, r) : -1;
    }
    jinja_value_release(fn);
    return rc;
}

/* ==== for loops ============================================================================== */

/*
 * The attributes of jinja2's LoopContext, computed from the current index. previtem/nextitem are
 * undefined at the ends, as in jinja2; recursive loops are not supported, so depth is always 1.
 */
jinja_value *jinja__loop_attr(struct jinja__rs *rs, jinja_value *loop, const char *name, size_t n)
{
    static const char *const names[] = {"index",  "index0",   "revindex", "revindex0",
                                        "first",  "last",     "length",   "depth",
                                        "depth0", "previtem", "nextitem"};
    const jinja_value *items = loop->u.loop.items;
    int64_t i = (int64_t)loop->u.loop.i, len = (int64_t)items->u.l.n;
    int k = 0;
    while (k < 11 && (strlen(names[k]) != n || memcmp(names[k], name, n) != 0))
        k++;
    switch (k) {
    case 0:
        return jinja__int(&rs->acct, i + 1);
    case 1:
        return jinja__int(&rs->acct, i);
    case 2:
        return jinja__int(&rs->acct, len - i);
    case 3:
        return jinja__int(&rs->acct, len - i - 1);
    case 4:
        return jinja__bool(i == 0);
    case 5:
        return jinja__bool(i + 1 == len);
    case 6:
        return jinja__int(&rs->acct, len);
    case 7:
        return jinja__int(&rs->acct, 1); /* recursive loops do not exist here */
    case 8:
        return jinja__int(&rs->acct, 0);
    case 9:
        if (i > 0)
            return jinja_value_acquire(items->u.l.v[i - 1]);
        return jinja__undef_msg(&rs->acct, "there is no previous item");
    case 10:
        if (i + 1 < len)
            return jinja_value_acquire(items->u.l.v[i + 1]);
        return jinja__undef_msg(&rs->acct, "there is no next item");
    default:
        return jinja__undef_msg(&rs->acct, "'LoopContext object' has no attribute '%.*s'",
                                (int)(n < 100 ? n : 100), name);
    }
}

/* Keeps the items for which the loop's `if` holds (evaluated with the target bound). */
static jinja_value *loop_filter(struct jinja__rs *rs, const struct jinja__node *n,
                                jinja_value *items)
{
    jinja_value *kept = jinja__list(&rs->acct, items->u.l.n, 0);
    struct jinja__scope *saved = rs->scope;
    for (size_t i = 0; i < items->u.l.n; i++) {
        struct jinja__scope s;
        scope_init(&s, saved);
        rs->scope = &s;
        jinja_value *c =
            bind_target(rs, &s, n->a, items->u.l.v[i]) == 0 ? jinja__eval(rs, n->c) : NULL;
        rs->scope = saved;
        scope_free(&s);
        if (!c) {
            jinja_value_release(kept);
            return NULL;
        }
        if (jinja__truthy(c))
            jinja__list_push(kept, jinja_value_acquire(items->u.l.v[i]));
        jinja_value_release(c);
    }
    return kept;
}

/* The list a for loop iterates over: the iterable's items, filtered by the loop's `if`. */
static int loop_items(struct jinja__rs *rs, const struct jinja__node *n, jinja_value **out)
{
    jinja_value *seq = jinja__eval(rs, n->b);
    jinja_value *items = seq ? jinja__iter_list(rs, n->b, seq) : NULL;
    jinja_value_release(seq);
    if (items && n->c) {
        jinja_value *kept = loop_filter(rs, n, items);
        jinja_value_release(items);
        items = kept;
    }
    *out = items;
    return items ? 0 : -1;
}

/*
 * One loop object serves every iteration (jinja2 advances a single LoopContext too); each
 * iteration gets a fresh scope, so a set inside the body does not survive into the next iteration
 * or after the loop. break ends the loop, continue the iteration; else runs when nothing was
 * iterated.
 */
static int exec_for(struct jinja__rs *rs, const struct jinja__node *n)
{
    jinja_value *items;
    if (loop_items(rs, n, &items) < 0)
        return -1;
    size_t count = items->u.l.n;
    jinja_value *loop = jinja__dict(&rs->acct, JK_LOOP); /* takes over items */
    loop->u.loop.items = items;
    int rc = 0;
    struct jinja__scope s, *saved = rs->scope;
    scope_init(&s, saved);
    rs->scope = &s;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        scope_clear(&s); /* a fresh scope per iteration, reusing the array */
        loop->u.loop.i = i;
        scope_sets(&s, "loop", jinja_value_acquire(loop));
        rc = jinja__step(rs, 1);
        if (rc == 0)
            rc = bind_target(rs, &s, n->a, items->u.l.v[i]);
        if (rc == 0)
            rc = exec_body(rs, &n->kids);
        int ctl = rs->ctl;
        rs->ctl = 0;
        if (ctl == 1)
            break;
    }
    rs->scope = saved;
    scope_free(&s);
    jinja_value_release(loop);
    if (rc == 0 && count == 0)
        rc = exec_body(rs, &n->kids2);
    return rc;
}

/* ==== other statements ======================================================================= */

/* if / elif / else: walks the elif chain iteratively. */
static int exec_if(struct jinja__rs *rs, const struct jinja__node *n)
{
    for (;;) {
        jinja_value *c = jinja__eval(rs, n->a);
        if (!c)
            return -1;
        int t = jinja__truthy(c);
        jinja_value_release(c);
        if (t)
            return exec_body(rs, &n->kids);
        if (n->kids2.n == 1 && n->kids2.v[0]->kind == NK_IF && n->kids2.v[0]->op) {
            n = n->kids2.v[0];
            continue;
        }
        return exec_body(rs, &n->kids2);
    }
}

/* Assigns v (transferred) to a set target: a name, names, or namespace.attribute. */
static int assign(struct jinja__rs *rs, const struct jinja__node *target, jinja_value *v)
{
    int rc = 0;
    if (target->kind == NK_ATTR) {
        /* the namespace is shared by reference: the change is visible in every scope */
        jinja_value *ns = jinja__lookup(rs, target->a->s, target->a->n);
        if (!ns || ns->kind != JK_OBJ || !(ns->flags & JF_NS))
            rc = jinja__fail(rs, target, "cannot assign attribute on non-namespace object");
        else
            jinja__dict_put(ns, jinja__str(&rs->acct, target->s, target->n),
                            jinja_value_acquire(v));
    } else {
        rc = bind_target(rs, rs->scope, target, v);
    }
    jinja_value_release(v);
    return rc == 0 ? jinja__step(rs, 1) : -1;
}

/* {% set x %}...{% endset %}: the rendered body, optionally filtered, assigned to x. */
static int exec_setblock(struct jinja__rs *rs, const struct jinja__node *n)
{
    jinja_value *text = capture(rs, &n->kids);
    if (text && n->b) {
        jinja_value *f = filter_text(rs, n->b, text);
        jinja_value_release(text);
        text = f;
    }
    return text ? assign(rs, n->a, text) : -1;
}

/* {% filter f %}...{% endfilter %}: the rendered body through the filter chain. */
static int exec_filterblock(struct jinja__rs *rs, const struct jinja__node *n)
{
    jinja_value *text = capture(rs, &n->kids);
    if (!text)
        return -1;
    jinja_value *r = filter_text(rs, n->b, text);
    jinja_value_release(text);
    return r ? emit_value(rs, r) : -1;
}

/* The values are evaluated in the outer scope, then bound in a new one for the body. */
static int exec_with(struct jinja__rs *rs, const struct jinja__node *n)
{
    struct jinja__scope s, *saved = rs->scope;
    scope_init(&s, saved);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n->kids.n; i++) {
        jinja_value *v = jinja__eval(rs, n->kids2.v[i]);
        rc = v ? bind_target(rs, &s, n->kids.v[i], v) : -1;
        jinja_value_release(v);
    }
    rs->scope = &s;
    if (rc == 0)
        rc = exec_body(rs, &n->kids3);
    rs->scope = saved;
    scope_free(&s);
    return rc;
}

/* Dispatch on the statement kind. */
static int exec_stmt(struct jinja__rs *rs, const struct jinja__node *n)
{
    switch (n->kind) {
    case NK_TEXT:
        jinja__buf_put(rs->out, n->s, n->n);
        return jinja__step(rs, 1);
    case NK_PRINT: {
        jinja_value *v = jinja__eval(rs, n->a);
        return v ? emit_value(rs, v) : -1;
    }
    case NK_IF:
        return exec_if(rs, n);
    case NK_FOR:
        return exec_for(rs, n);
    case NK_SET: {
        jinja_value *v = jinja__eval(rs, n->b);
        return v ? assign(rs, n->a, v) : -1;
    }
    case NK_SETBLOCK:
        return exec_setblock(rs, n);
    case NK_MACRO:
        scope_set(rs->scope, n->s, n->n, jinja__macro(&rs->acct, n, NULL));
        return 0;
    case NK_CALLBLOCK:
        return exec_callblock(rs, n);
    case NK_FILTERBLOCK:
        return exec_filterblock(rs, n);
    case NK_WITH:
        return exec_with(rs, n);
    case NK_BREAK:
    case NK_CONTINUE:
        rs->ctl = n->kind == NK_BREAK ? 1 : 2;
        return 0;
    case NK_SCOPE:
        return exec_body(rs, &n->kids);
    default:
        return jinja__fail(rs, n, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec_body(struct jinja__rs *rs, const struct jinja__nodes *body)
{
    if (++rs->nest > JINJA__MAX_EVAL_NEST) {
        rs->nest--;
        return jinja__fail(rs, NULL, "statements nested too deeply");
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < body->n && !rs->ctl; i++)
        rc = exec_stmt(rs, body->v[i]);
    rs->nest--;
    return rc;
}

/* ==== render ================================================================================= */

/*
 * The spine: set up the render state with the root scope, run the body, then release the scopes
 * and break namespace cycles whether or not the render succeeded.
 */
int jinja_render(const jinja_tmpl *t, const jinja_value *ctx, char **out, size_t *outlen, char *err,
                 size_t errlen)
{
    struct jinja__buf buf = {.limit = t->opts.max_output};
    struct jinja__scope root;
    scope_init(&root, NULL);
    struct jinja__rs rs = {.t = t,
                           .ctx = (jinja_value *)ctx,
                           .out = &buf,
                           .root = &root,
                           .scope = &root,
                           .err = err,
                           .errlen = errlen};
    rs.acct.limit = t->opts.max_memory;
    *out = NULL;
    if (outlen)
        *outlen = 0;
    int rc = ctx && ctx->kind != JK_DICT ? jinja__fail(&rs, NULL, "the context must be a dict")
                                         : exec_body(&rs, &t->body);
    if (rc == 0 && buf.over)
        rc = jinja__fail_limit(&rs, "max_output");
    scope_free(&root);
    /* Values created by the render die here; a namespace may hold itself (ns.me = ns), so
     * emptying every namespace first is what makes their reference counts reach zero. */
    for (size_t i = 0; i < rs.nns; i++) {
        jinja__dict_clear(rs.ns[i]);
        jinja_value_release(rs.ns[i]);
    }
    free(rs.ns);
    if (rc < 0) {
        jinja__buf_free(&buf);
        return rs.code ? rs.code : DD_EINVAL;
    }
    *out = jinja__buf_take(&buf, outlen);
    return 0;
}
