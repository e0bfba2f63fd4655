/*
 * jinja_eval — evaluates expressions with Python's semantics as jinja2 exposes them.
 *
 * Every eval returns a new reference or NULL after recording the error in the render state.
 * Operators follow Python: `and`/`or` short-circuit and return an operand, `/` is true
 * division, `//` and `%` floor, `+` concatenates strings and lists, `*` repeats them,
 * comparisons chain. Integers are int64: an overflow is an error rather than a big integer.
 * Undefined follows jinja2's default Undefined: it prints as "", is falsy, iterates as empty
 * and compares unequal, but any attribute, item, arithmetic or call on it raises its message.
 * Attribute access (a.b) tries the Python attribute first (dict methods, string methods), then
 * the item; subscripts (a["b"]) try the item first — the order jinja2's getattr/getitem use.
 *
 * Threads: works on one render state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, xcalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__node, value helpers

/*
 * Turns a built buffer into a string value; a buffer that hit its limit means the value would have
 * passed max_memory.
 */
jinja_value *jinja__buf_value(struct jinja__rs *rs, struct jinja__buf *b)
{
    if (b->over) {
        jinja__buf_free(b);
        return (jinja__fail_limit(rs, "max_memory"), NULL);
    }
    size_t n;
    char *p = jinja__buf_take(b, &n);
    return jinja__str_take(&rs->acct, p, n);
}

/* ==== arguments ============================================================================== */

/* Releases every argument reference and the arrays; the struct is zeroed and reusable. */
void jinja__args_free(struct jinja__args *a)
{
    for (size_t i = 0; i < a->npos; i++)
        jinja_value_release(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++)
        jinja_value_release(a->kval[i]);
    free(a->pos);
    free(a->kname);
    free(a->klen);
    free(a->kval);
    jinja_value_release(a->hold);
    memset(a, 0, sizeof(*a));
}

/* Appends one keyword argument (v transferred; name borrowed, kept alive by the AST or a->hold). */
static void push_kw(struct jinja__args *a, const char *name, size_t n, jinja_value *v)
{
    a->kname = xrealloc(a->kname, (a->nkw + 1) * sizeof(*a->kname));
    a->klen = xrealloc(a->klen, (a->nkw + 1) * sizeof(*a->klen));
    a->kval = xrealloc(a->kval, (a->nkw + 1) * sizeof(*a->kval));
    a->kname[a->nkw] = name;
    a->klen[a->nkw] = n;
    a->kval[a->nkw++] = v;
}

/* *args: appends a list's items to the positional arguments. */
static int splat_pos(struct jinja__rs *rs, const struct jinja__node *at, struct jinja__args *a,
                     jinja_value *l)
{
    if (l->kind != JK_LIST) {
        jinja_value_release(l);
        return jinja__fail(rs, at, "argument after * must be an iterable");
    }
    a->pos = xrealloc(a->pos, (a->npos + l->u.l.n + 1) * sizeof(*a->pos));
    for (size_t i = 0; i < l->u.l.n; i++)
        a->pos[a->npos++] = jinja_value_acquire(l->u.l.v[i]);
    jinja_value_release(l);
    return 0;
}

/* **kwargs: the names point into the dict's keys; a->hold keeps the dict alive. */
static int splat_kw(struct jinja__rs *rs, const struct jinja__node *at, struct jinja__args *a,
                    jinja_value *d)
{
    if (d->kind != JK_DICT) {
        jinja_value_release(d);
        return jinja__fail(rs, at, "argument after ** must be a mapping");
    }
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_value *k = d->u.d.k[i];
        if (k->kind != JK_STR) {
            jinja_value_release(d);
            return jinja__fail(rs, at, "keywords must be strings");
        }
        push_kw(a, k->u.s.p, k->u.s.n, jinja_value_acquire(d->u.d.v[i]));
    }
    jinja_value_release(a->hold);
    a->hold = d;
    return 0;
}

/* Evaluates a call's arguments left to right; on failure nothing is left allocated. */
int jinja__args_eval(struct jinja__rs *rs, const struct jinja__node *call, struct jinja__args *a)
{
    memset(a, 0, sizeof(*a));
    a->pos = xmalloc((call->kids.n + 1) * sizeof(*a->pos));
    for (size_t i = 0; i < call->kids.n; i++) {
        jinja_value *v = jinja__eval(rs, call->kids.v[i]);
        if (!v)
            goto fail;
        a->pos[a->npos++] = v;
    }
    for (size_t i = 0; i < call->kids2.n; i++) {
        const struct jinja__node *kw = call->kids2.v[i];
        jinja_value *v = jinja__eval(rs, kw->a);
        if (!v)
            goto fail;
        push_kw(a, kw->s, kw->n, v);
    }
    jinja_value *extra;
    if (call->b && (!(extra = jinja__eval(rs, call->b)) || splat_pos(rs, call, a, extra) < 0))
        goto fail;
    if (call->c && (!(extra = jinja__eval(rs, call->c)) || splat_kw(rs, call, a, extra) < 0))
        goto fail;
    return 0;
fail:
    jinja__args_free(a);
    return -1;
}

/* Index of name in the comma-separated spec, or -1. */
static int spec_index(const char *spec, const char *name, size_t n)
{
    int idx = 0;
    for (const char *p = spec; *p; idx++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return idx;
        if (!e)
            break;
        p = e + 1;
    }
    return -1;
}

/*
 * Python-style binding for builtins: positionals fill spec's names in order, keywords by name;
 * out[i] is borrowed from a and NULL when the argument was not given.
 */
int jinja__bind(struct jinja__rs *rs, const struct jinja__node *at, const char *fname,
                const char *spec, const struct jinja__args *a, jinja_value **out, int nout)
{
    for (int i = 0; i < nout; i++)
        out[i] = NULL;
    int nparams = *spec ? 1 : 0;
    for (const char *p = spec; *p; p++)
        nparams += *p == ',';
    /* the parameter count is the number of names in spec */
    if (a->npos > (size_t)nparams)
        return jinja__fail(rs, at, "%s() takes at most %d argument(s) (%zu given)", fname, nparams,
                           a->npos);
    for (size_t i = 0; i < a->npos && (int)i < nout; i++)
        out[i] = a->pos[i];
    for (size_t i = 0; i < a->nkw; i++) {
        int idx = spec_index(spec, a->kname[i], a->klen[i]);
        if (idx < 0 || idx >= nout)
            return jinja__fail(rs, at, "%s() got an unexpected keyword argument '%.*s'", fname,
                               (int)a->klen[i], a->kname[i]);
        if (out[idx])
            return jinja__fail(rs, at, "%s() got multiple values for argument '%.*s'", fname,
                               (int)a->klen[i], a->kname[i]);
        out[idx] = a->kval[i];
    }
    return 0;
}

/* Builtins that need a string argument say so with Python's wording. */
int jinja__want_str(struct jinja__rs *rs, const struct jinja__node *at, const jinja_value *v,
                    const char *what)
{
    if (v && v->kind == JK_STR)
        return 0;
    return jinja__fail(rs, at, "%s must be a string, not %s", what,
                       v ? jinja__type_name(v) : "nothing");
}

/* Optional int argument (None and missing give dflt). */
int jinja__opt_int(struct jinja__rs *rs, const struct jinja__node *at, const jinja_value *v,
                   int64_t dflt, int64_t *out)
{
    *out = dflt;
    if (!v || v->kind == JK_NONE)
        return 0;
    if (v->kind == JK_INT || v->kind == JK_BOOL) {
        *out = v->kind == JK_INT ? v->u.i : v->u.b;
        return 0;
    }
    return jinja__fail(rs, at, "an integer is required");
}

/* ==== attribute and item access ============================================================== */

/* The undefined jinja2 returns for a missing attribute; using it raises this message. */
static jinja_value *no_attr(struct jinja__rs *rs, const jinja_value *obj, const char *name,
                            size_t n)
{
    return jinja__undef_msg(&rs->acct, "'%s' has no attribute '%.*s'", jinja__type_name(obj),
                            (int)(n < 100 ? n : 100), name);
}

/*
 * jinja2's getattr: a Python attribute (a method of str, dict or list, or a loop variable) first,
 * then for dicts and namespaces the item of that name, else undefined. So d.items is the method
 * even when d has an "items" key; d["items"] gets the key.
 */
jinja_value *jinja__getattr(struct jinja__rs *rs, jinja_value *obj, const char *name, size_t n)
{
    jinja_value *m = jinja__method(rs, obj, name, n);
    if (m)
        return m;
    if (obj->kind == JK_LOOP)
        return jinja__loop_attr(rs, obj, name, n);
    if (obj->kind == JK_DICT || obj->kind == JK_OBJ) {
        jinja_value *v = jinja__dict_gets(obj, name, n);
        if (v)
            return jinja_value_acquire(v);
    }
    return no_attr(rs, obj, name, n);
}

/* Python index i (negative from the end) into a sequence of n items; -1 when out of range. */
static long seq_index(const jinja_value *key, size_t n)
{
    int64_t i = key->kind == JK_INT ? key->u.i : key->u.b;
    if (i < 0)
        i += (int64_t)n;
    return i < 0 || (uint64_t)i >= n ? -1 : (long)i;
}

/* Undefined for a missing index: "list object has no element 5". */
static jinja_value *no_element(struct jinja__rs *rs, const jinja_value *obj, jinja_value *key)
{
    struct jinja__buf b = {.limit = 200};
    jinja__put_repr(&b, key);
    jinja_value *u = jinja__undef_msg(&rs->acct, "%s has no element %s", jinja__type_name(obj),
                                      b.d.p ? b.d.p : "");
    jinja__buf_free(&b);
    return u;
}

/*
 * jinja2's getitem: the item first (dict key, list or string index), then for a string key the
 * attribute of that name, else undefined.
 */
jinja_value *jinja__getitem(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *obj,
                            jinja_value *key)
{
    int int_key = key->kind == JK_INT || key->kind == JK_BOOL;
    if (obj->kind == JK_DICT) {
        jinja_value *v = jinja__dict_get(obj, key);
        if (v)
            return jinja_value_acquire(v);
    } else if (obj->kind == JK_LIST && int_key) {
        long i = seq_index(key, obj->u.l.n);
        return i < 0 ? no_element(rs, obj, key) : jinja_value_acquire(obj->u.l.v[i]);
    } else if (obj->kind == JK_STR && int_key) {
        long i = seq_index(key, jinja__utf8_count(obj->u.s.p, obj->u.s.n));
        if (i < 0)
            return no_element(rs, obj, key);
        size_t off = jinja__utf8_offset(obj->u.s.p, obj->u.s.n, (size_t)i);
        uint32_t cp;
        size_t len = jinja__utf8_next(obj->u.s.p + off, obj->u.s.n - off, &cp);
        return jinja__str(&rs->acct, obj->u.s.p + off, len);
    }
    (void)at;
    if (key->kind == JK_STR)
        return jinja__getattr(rs, obj, key->u.s.p, key->u.s.n);
    return no_element(rs, obj, key);
}

/* Python's slice index adjustment; returns the number of items selected. */
static size_t slice_bounds(int64_t n, const jinja_value *lo, const jinja_value *hi, int64_t step,
                           int64_t *start)
{
    /* Defaults, then each given bound: negative counts from the end, then clamp to the
     * range the step direction can use (-1 means "before the first item" going down). */
    int64_t s = step < 0 ? n - 1 : 0, e = step < 0 ? -1 : n;
    const jinja_value *ends[2] = {lo, hi};
    int64_t *vals[2] = {&s, &e};
    for (int k = 0; k < 2; k++) {
        if (!ends[k])
            continue;
        int64_t v = ends[k]->kind == JK_INT ? ends[k]->u.i : ends[k]->u.b;
        if (v < 0) {
            v += n;
            if (v < 0)
                v = step < 0 ? -1 : 0;
        } else if (v >= n) {
            v = step < 0 ? n - 1 : n;
        }
        *vals[k] = v;
    }
    *start = s;
    if (step < 0)
        return e < s ? (size_t)((s - e - 1) / -step + 1) : 0;
    return s < e ? (size_t)((e - s - 1) / step + 1) : 0;
}

/* list[a:b:c] or str[a:b:c]; strings are sliced by code point. */
static jinja_value *slice_value(struct jinja__rs *rs, const struct jinja__node *at,
                                jinja_value *obj, jinja_value *part[3])
{
    for (int k = 0; k < 3; k++)
        if (part[k] && part[k]->kind != JK_INT && part[k]->kind != JK_BOOL)
            return (jinja__fail(rs, at, "slice indices must be integers or None"), NULL);
    int64_t step = part[2] ? (part[2]->kind == JK_INT ? part[2]->u.i : part[2]->u.b) : 1;
    if (step == 0 || step == INT64_MIN) /* INT64_MIN could not be negated safely */
        return (jinja__fail(rs, at, "slice step cannot be zero"), NULL);
    if (obj->kind == JK_LIST) {
        int64_t start;
        size_t k = slice_bounds((int64_t)obj->u.l.n, part[0], part[1], step, &start);
        if (jinja__step(rs, k) < 0)
            return NULL;
        jinja_value *l = jinja__list(&rs->acct, k, obj->flags & JF_TUPLE);
        for (size_t i = 0; i < k; i++)
            jinja__list_push(l, jinja_value_acquire(obj->u.l.v[start + (int64_t)i * step]));
        return l;
    }
    if (obj->kind != JK_STR)
        return (jinja__fail(rs, at, "'%s' is not subscriptable", jinja__type_name(obj)), NULL);
    /* off[i] = byte offset of code point i, so any step can pick characters directly */
    size_t n = jinja__utf8_count(obj->u.s.p, obj->u.s.n);
    size_t *off = xmalloc((n + 1) * sizeof(*off));
    for (size_t i = 0, pos = 0; i <= n; i++) {
        uint32_t cp;
        off[i] = pos;
        if (i < n)
            pos += jinja__utf8_next(obj->u.s.p + pos, obj->u.s.n - pos, &cp);
    }
    int64_t start;
    size_t k = slice_bounds((int64_t)n, part[0], part[1], step, &start);
    struct jinja__buf b = {.limit = obj->u.s.n};
    for (size_t i = 0; i < k; i++) {
        int64_t c = start + (int64_t)i * step;
        jinja__buf_put(&b, obj->u.s.p + off[c], off[c + 1] - off[c]);
    }
    free(off);
    size_t len;
    char *p = jinja__buf_take(&b, &len);
    return jinja__str_take(&rs->acct, p, len);
}

/* x[key] or x[a:b:c]; an undefined x raises, as in jinja2. */
static jinja_value *eval_item(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *obj = jinja__eval(rs, e->a), *r = NULL;
    if (!obj)
        return NULL;
    if (obj->kind == JK_UNDEF) {
        jinja__fail_undef(rs, e, obj);
        goto out;
    }
    if (e->b->kind == NK_SLICE) {
        jinja_value *part[3] = {NULL, NULL, NULL};
        const struct jinja__node *src[3] = {e->b->a, e->b->b, e->b->c};
        int ok = 1;
        for (int k = 0; k < 3 && ok; k++)
            if (src[k] && !(part[k] = jinja__eval(rs, src[k])))
                ok = 0;
        for (int k = 0; k < 3; k++) /* None parts mean "default" */
            if (part[k] && part[k]->kind == JK_NONE)
                part[k] = NULL;
        if (ok)
            r = slice_value(rs, e, obj, part);
        for (int k = 0; k < 3; k++)
            jinja_value_release(part[k]);
        goto out;
    }
    jinja_value *key = jinja__eval(rs, e->b);
    if (key) {
        r = jinja__getitem(rs, e, obj, key);
        jinja_value_release(key);
    }
out:
    jinja_value_release(obj);
    return r;
}

/* x.name; an undefined x raises its message ("'x' is undefined"). */
static jinja_value *eval_attr(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *obj = jinja__eval(rs, e->a), *r = NULL;
    if (!obj)
        return NULL;
    if (obj->kind == JK_UNDEF)
        jinja__fail_undef(rs, e, obj);
    else
        r = jinja__getattr(rs, obj, e->s, e->n);
    jinja_value_release(obj);
    return r;
}

/* ==== calls, filters, tests ================================================================== */

/* Dispatches a call on any value; only macros and builtins are callable. */
jinja_value *jinja__call(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *fn,
                         const struct jinja__args *a)
{
    switch (fn->kind) {
    case JK_MACRO:
        return jinja__macro_call(rs, at, fn, a);
    case JK_FUNC:
        return jinja__func_call(rs, at, fn, a);
    case JK_UNDEF:
        jinja__fail_undef(rs, at, fn);
        return NULL;
    default:
        jinja__fail(rs, at, "'%s' object is not callable", jinja__py_type(fn));
        return NULL;
    }
}

/*
 * callee(args): the callee is evaluated first, so s.split(...) calls the method bound by getattr.
 */
static jinja_value *eval_call(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *fn = jinja__eval(rs, e->a), *r = NULL;
    struct jinja__args a;
    if (!fn)
        return NULL;
    if (fn->kind == JK_UNDEF) /* jinja2 raises before evaluating the arguments */
        jinja__fail_undef(rs, e, fn);
    else if (jinja__args_eval(rs, e, &a) == 0) {
        r = jinja__call(rs, e, fn, &a);
        jinja__args_free(&a);
    }
    jinja_value_release(fn);
    return r;
}

/* NK_FILTER and NK_TEST share the evaluation of their operand and arguments. */
static jinja_value *eval_builtin(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *v = e->a ? jinja__eval(rs, e->a) : jinja_value_acquire(rs->block_input);
    struct jinja__args a;
    jinja_value *r = NULL;
    if (!v || jinja__args_eval(rs, e, &a) < 0) {
        jinja_value_release(v);
        return NULL;
    }
    if (e->kind == NK_FILTER) {
        r = jinja__filter(rs, e, e->id, v, &a);
    } else {
        int t = jinja__test(rs, e, e->id, v, &a);
        r = t < 0 ? NULL : jinja__bool(t);
    }
    jinja__args_free(&a);
    jinja_value_release(v);
    return r;
}

/* ==== literals and names ===================================================================== */

/*
 * Literals become fresh values on every evaluation: the AST is shared between threads and never
 * holds a value (or a reference count).
 */
static jinja_value *eval_const(struct jinja__rs *rs, const struct jinja__node *e)
{
    switch (e->op) {
    case JK_NONE:
        return jinja__none();
    case JK_BOOL:
        return jinja__bool((int)e->i);
    case JK_INT:
        return jinja__int(&rs->acct, e->i);
    case JK_FLOAT:
        return jinja__float(&rs->acct, e->f);
    default:
        return jinja__str(&rs->acct, e->s, e->n);
    }
}

/* A name that is nowhere to be found is an undefined carrying "'name' is undefined". */
static jinja_value *eval_name(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *v = jinja__lookup(rs, e->s, e->n);
    if (v)
        return jinja_value_acquire(v);
    return jinja__undef_msg(&rs->acct, "'%.*s' is undefined", (int)(e->n < 100 ? e->n : 100), e->s);
}

/* [...], (...) and {...} literals. */
static jinja_value *eval_seq(struct jinja__rs *rs, const struct jinja__node *e)
{
    int dict = e->kind == NK_DICT;
    jinja_value *c = dict ? jinja__dict(&rs->acct, JK_DICT)
                          : jinja__list(&rs->acct, e->kids.n, e->kind == NK_TUPLE);
    for (size_t i = 0; i < e->kids.n; i++) {
        jinja_value *k = jinja__eval(rs, e->kids.v[i]);
        jinja_value *v = k && dict ? jinja__eval(rs, e->kids2.v[i]) : NULL;
        if (!k || (dict && !v)) {
            jinja_value_release(k);
            jinja_value_release(c);
            return NULL;
        }
        if (dict)
            jinja__dict_put(c, k, v);
        else
            jinja__list_push(c, k);
    }
    if (jinja__step(rs, e->kids.n) < 0) { /* also catches nesting past JINJA__MAX_NEST */
        jinja_value_release(c);
        return NULL;
    }
    return c;
}

/* a if cond else b; without else, a false condition gives undefined (prints as nothing). */
static jinja_value *eval_cond(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *c = jinja__eval(rs, e->b);
    if (!c)
        return NULL;
    int t = jinja__truthy(c);
    jinja_value_release(c);
    if (t)
        return jinja__eval(rs, e->a);
    return e->c ? jinja__eval(rs, e->c) : jinja__undef();
}

/*
 * What a Python for loop would iterate: a list as is, a dict's keys, a string's characters,
 * nothing for undefined; other kinds are not iterable.
 */
jinja_value *jinja__iter_list(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *v)
{
    if (v->kind == JK_LIST)
        return jinja_value_acquire(v);
    if (v->kind == JK_UNDEF)
        return jinja__list(&rs->acct, 0, 0);
    if (v->kind != JK_DICT && v->kind != JK_STR)
        return (jinja__fail(rs, at, "'%s' object is not iterable", jinja__py_type(v)), NULL);
    size_t n = v->kind == JK_DICT ? v->u.d.n : jinja__utf8_count(v->u.s.p, v->u.s.n);
    if (jinja__step(rs, n) < 0)
        return NULL;
    jinja_value *l = jinja__list(&rs->acct, n, 0);
    for (size_t i = 0, off = 0; i < n; i++) {
        if (v->kind == JK_DICT) {
            jinja__list_push(l, jinja_value_acquire(v->u.d.k[i]));
            continue;
        }
        uint32_t cp;
        size_t len = jinja__utf8_next(v->u.s.p + off, v->u.s.n - off, &cp);
        jinja__list_push(l, jinja__str(&rs->acct, v->u.s.p + off, len));
        off += len;
    }
    return l;
}

/* ==== dispatch =============================================================================== */

/* Dispatch on the expression kind. */
static jinja_value *eval_node(struct jinja__rs *rs, const struct jinja__node *e)
{
    switch (e->kind) {
    case NK_CONST:
        return eval_const(rs, e);
    case NK_NAME:
        return eval_name(rs, e);
    case NK_LIST:
    case NK_TUPLE:
    case NK_DICT:
        return eval_seq(rs, e);
    case NK_ATTR:
        return eval_attr(rs, e);
    case NK_ITEM:
        return eval_item(rs, e);
    case NK_CALL:
        return eval_call(rs, e);
    case NK_FILTER:
    case NK_TEST:
        return eval_builtin(rs, e);
    case NK_UNARY:
    case NK_BIN:
    case NK_AND:
    case NK_OR:
    case NK_CMP:
    case NK_CONCAT:
        return jinja__eval_op(rs, e);
    case NK_COND:
        return eval_cond(rs, e);
    default:
        jinja__fail(rs, e, "internal error: node %d is not an expression", e->kind);
        return NULL;
    }
}

/*
 * Every evaluation is a step (bounded by max_steps) and one level of C recursion (bounded by
 * JINJA__MAX_EVAL_NEST), so no expression can hang or overflow the stack.
 */
jinja_value *jinja__eval(struct jinja__rs *rs, const struct jinja__node *e)
{
    if (jinja__step(rs, 1) < 0)
        return NULL;
    if (++rs->nest > JINJA__MAX_EVAL_NEST) {
        rs->nest--;
        jinja__fail(rs, e, "expression nested too deeply");
        return NULL;
    }
    jinja_value *v = eval_node(rs, e);
    rs->nest--;
    return v;
}
