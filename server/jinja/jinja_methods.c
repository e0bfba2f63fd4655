/*
 * jinja_methods — Python methods reachable from templates (str, dict, list, loop.cycle) and
 * the global functions: range, namespace, dict, raise_exception, strftime_now.
 *
 * Methods are looked up by name on an object and returned bound (a JK_FUNC holding `self`), so
 * `s.split` is a value and `s.split(",")` a call, as in Python. Methods that mutate a list or a
 * dict (append, pop, update, ...) are refused exactly as transformers' ImmutableSandbox
 * refuses them: the attribute is an undefined whose use raises "access to attribute 'append'
 * of 'list' object is unsafe.". range() is capped at 100000 items like jinja2's sandbox.
 * Positions and lengths of strings count code points, as Python's do.
 *
 * Invariants: the global function values are immortal statics (never written, safe to share
 * between threads); every other result is a new reference or NULL with the error recorded.
 *
 * Threads: the tables are constant; strftime_now uses localtime_r.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h" // defines: xmalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__args, value helpers

typedef struct jinja__node node;
typedef struct jinja__args args;

#define MAX_RANGE 100000

/* ==== lookup tables ========================================================================== */

static jinja_value G_FUNCS[] = {
    {.kind = JK_FUNC, .flags = JF_STATIC, .fn = FN_RANGE},
    {.kind = JK_FUNC, .flags = JF_STATIC, .fn = FN_NAMESPACE},
    {.kind = JK_FUNC, .flags = JF_STATIC, .fn = FN_DICT},
    {.kind = JK_FUNC, .flags = JF_STATIC, .fn = FN_RAISE},
    {.kind = JK_FUNC, .flags = JF_STATIC, .fn = FN_STRFTIME},
};
static const char *const G_NAMES[] = {"range", "namespace", "dict", "raise_exception",
                                      "strftime_now"};

static const struct {
    uint8_t kind; /* the receiver's kind */
    uint16_t fn;
    const char *name;
} METHODS[] = {
    {JK_STR, FN_STARTSWITH, "startswith"},
    {JK_STR, FN_ENDSWITH, "endswith"},
    {JK_STR, FN_SPLIT, "split"},
    {JK_STR, FN_RSPLIT, "rsplit"},
    {JK_STR, FN_SPLITLINES, "splitlines"},
    {JK_STR, FN_STRIP, "strip"},
    {JK_STR, FN_LSTRIP, "lstrip"},
    {JK_STR, FN_RSTRIP, "rstrip"},
    {JK_STR, FN_REPLACE, "replace"},
    {JK_STR, FN_UPPER, "upper"},
    {JK_STR, FN_LOWER, "lower"},
    {JK_STR, FN_TITLE, "title"},
    {JK_STR, FN_CAPITALIZE, "capitalize"},
    {JK_STR, FN_SWAPCASE, "swapcase"},
    {JK_STR, FN_CASEFOLD, "casefold"},
    {JK_STR, FN_FIND, "find"},
    {JK_STR, FN_RFIND, "rfind"},
    {JK_STR, FN_INDEX, "index"},
    {JK_STR, FN_RINDEX, "rindex"},
    {JK_STR, FN_COUNT, "count"},
    {JK_STR, FN_JOIN, "join"},
    {JK_STR, FN_FORMAT, "format"},
    {JK_STR, FN_ISDIGIT, "isdigit"},
    {JK_STR, FN_ISALPHA, "isalpha"},
    {JK_STR, FN_ISALNUM, "isalnum"},
    {JK_STR, FN_ISSPACE, "isspace"},
    {JK_STR, FN_ISLOWER, "islower"},
    {JK_STR, FN_ISUPPER, "isupper"},
    {JK_STR, FN_CENTER, "center"},
    {JK_STR, FN_LJUST, "ljust"},
    {JK_STR, FN_RJUST, "rjust"},
    {JK_STR, FN_ZFILL, "zfill"},
    {JK_DICT, FN_ITEMS, "items"},
    {JK_DICT, FN_KEYS, "keys"},
    {JK_DICT, FN_VALUES, "values"},
    {JK_DICT, FN_GET, "get"},
    {JK_DICT, FN_DCOPY, "copy"},
    {JK_LIST, FN_LINDEX, "index"},
    {JK_LIST, FN_LCOUNT, "count"},
    {JK_LIST, FN_LCOPY, "copy"},
    {JK_LOOP, FN_CYCLE, "cycle"},
};

static const char *const UNSAFE_LIST = ",append,extend,insert,pop,remove,reverse,sort,clear,";
static const char *const UNSAFE_DICT = ",pop,popitem,setdefault,update,clear,";

/* Is name one of the comma-separated words of list? */
static int in_list(const char *list, const char *name, size_t n)
{
    char key[40];
    if (n + 3 > sizeof(key))
        return 0;
    key[0] = ',';
    memcpy(key + 1, name, n);
    key[n + 1] = ',';
    key[n + 2] = 0;
    return strstr(list, key) != NULL;
}

/* The builtin globals; context variables and template sets shadow them. */
jinja_value *jinja__global(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(G_NAMES) / sizeof(G_NAMES[0]); i++)
        if (strlen(G_NAMES[i]) == n && memcmp(G_NAMES[i], name, n) == 0)
            return &G_FUNCS[i];
    return NULL;
}

/*
 * Binds method name of obj, or NULL when obj has none. Mutating list and dict methods yield the
 * sandbox's undefined, so {{ l.append }} prints nothing and calling it fails with transformers'
 * exact message.
 */
jinja_value *jinja__method(struct jinja__rs *rs, jinja_value *obj, const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(METHODS) / sizeof(METHODS[0]); i++)
        if (METHODS[i].kind == obj->kind && strlen(METHODS[i].name) == n &&
            memcmp(METHODS[i].name, name, n) == 0)
            return jinja__func(&rs->acct, METHODS[i].fn, jinja_value_acquire(obj));
    if ((obj->kind == JK_LIST && in_list(UNSAFE_LIST, name, n)) ||
        (obj->kind == JK_DICT && in_list(UNSAFE_DICT, name, n)))
        return jinja__undef_msg(&rs->acct, "access to attribute '%.*s' of '%s' object is unsafe.",
                                (int)n, name, obj->kind == JK_LIST ? "list" : "dict");
    return NULL;
}

/* ==== dict, list and loop methods ============================================================ */

/* dict.items() (as (key, value) tuples), keys(), values(), get(key, default=None), copy(). */
static jinja_value *m_dict(struct jinja__rs *rs, const node *at, jinja_value *d, const args *a,
                           int fn)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, fn == FN_GET ? "get" : "items", fn == FN_GET ? "key,default" : "", a, p,
                    2) < 0 ||
        jinja__step(rs, d->u.d.n) < 0)
        return NULL;
    if (fn == FN_GET) {
        if (!p[0])
            return (jinja__fail(rs, at, "get() needs a key"), NULL);
        jinja_value *v = jinja__dict_get(d, p[0]);
        return jinja_value_acquire(v ? v : p[1] ? p[1] : jinja__none());
    }
    jinja_value *out =
        fn == FN_DCOPY ? jinja__dict(&rs->acct, JK_DICT) : jinja__list(&rs->acct, d->u.d.n, 0);
    for (size_t i = 0; i < d->u.d.n; i++) {
        jinja_value *k = jinja_value_acquire(d->u.d.k[i]), *v = jinja_value_acquire(d->u.d.v[i]);
        if (fn == FN_DCOPY) {
            jinja__dict_put(out, k, v);
            continue;
        }
        if (fn == FN_ITEMS) {
            jinja_value *pair = jinja__list(&rs->acct, 2, 1);
            jinja__list_push(pair, k);
            jinja__list_push(pair, v);
            jinja__list_push(out, pair);
            continue;
        }
        jinja__list_push(out, fn == FN_KEYS ? k : v);
        jinja_value_release(fn == FN_KEYS ? v : k);
    }
    return out;
}

/* list.index(x), count(x), copy(). */
static jinja_value *m_list(struct jinja__rs *rs, const node *at, jinja_value *l, const args *a,
                           int fn)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "index", fn == FN_LCOPY ? "" : "value", a, p, 1) < 0 ||
        jinja__step(rs, l->u.l.n) < 0)
        return NULL;
    if (fn == FN_LCOPY) {
        jinja_value *c = jinja__list(&rs->acct, l->u.l.n, l->flags & JF_TUPLE);
        for (size_t i = 0; i < l->u.l.n; i++)
            jinja__list_push(c, jinja_value_acquire(l->u.l.v[i]));
        return c;
    }
    if (!p[0])
        return (jinja__fail(rs, at, "index() takes exactly one argument"), NULL);
    int64_t count = 0;
    for (size_t i = 0; i < l->u.l.n; i++) {
        if (!jinja__equal(l->u.l.v[i], p[0]))
            continue;
        if (fn == FN_LINDEX)
            return jinja__int(&rs->acct, (int64_t)i);
        count++;
    }
    if (fn == FN_LINDEX)
        return (jinja__fail(rs, at, "value is not in list"), NULL);
    return jinja__int(&rs->acct, count);
}

/* loop.cycle(a, b, ...): the argument for the current iteration. */
static jinja_value *m_cycle(struct jinja__rs *rs, const node *at, jinja_value *loop, const args *a)
{
    if (!a->npos)
        return (jinja__fail(rs, at, "no items for cycling given"), NULL);
    return jinja_value_acquire(a->pos[loop->u.loop.i % a->npos]);
}

/* ==== global functions ======================================================================= */

/*
 * range(stop) / range(start, stop[, step]) as a list, refused past 100000 items like jinja2's
 * sandbox (which transformers uses) does.
 */
static jinja_value *g_range(struct jinja__rs *rs, const node *at, const args *a)
{
    int64_t v[3] = {0, 0, 1};
    if (a->nkw || a->npos < 1 || a->npos > 3)
        return (jinja__fail(rs, at, "range() takes 1 to 3 integer arguments"), NULL);
    for (size_t i = 0; i < a->npos; i++)
        if (jinja__opt_int(rs, at, a->pos[i], 0, &v[a->npos == 1 ? 1 : i]) < 0)
            return NULL;
    if (v[2] == 0)
        return (jinja__fail(rs, at, "range() arg 3 must not be zero"), NULL);
    double count = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2]
                            : ((double)v[0] - (double)v[1]) / -(double)v[2];
    size_t n = count <= 0 ? 0 : (size_t)(count + 0.999999999);
    if (count > MAX_RANGE)
        return (jinja__fail(rs, at,
                            "Range too big. The sandbox blocks ranges larger than "
                            "MAX_RANGE (%d).",
                            MAX_RANGE),
                NULL);
    if (jinja__step(rs, n) < 0)
        return NULL;
    jinja_value *l = jinja__list(&rs->acct, n, 0);
    for (size_t i = 0; i < n; i++)
        jinja__list_push(l, jinja__int(&rs->acct, v[0] + (int64_t)i * v[2]));
    return l;
}

/* dict(...) and namespace(...): a mapping's entries, then keyword arguments. */
static jinja_value *g_mapping(struct jinja__rs *rs, const node *at, const args *a, int ns)
{
    jinja_value *d = jinja__dict(&rs->acct, ns ? JK_OBJ : JK_DICT);
    if (ns) {
        d->flags |= JF_NS;
        jinja__track_ns(rs, d);
    }
    for (size_t i = 0; i < a->npos; i++) {
        const jinja_value *src = a->pos[i];
        if (src->kind != JK_DICT) {
            jinja_value_release(d);
            return (
                jinja__fail(rs, at, "%s() arguments must be mappings", ns ? "namespace" : "dict"),
                NULL);
        }
        for (size_t k = 0; k < src->u.d.n; k++)
            jinja__dict_put(d, jinja_value_acquire(src->u.d.k[k]),
                            jinja_value_acquire(src->u.d.v[k]));
    }
    for (size_t i = 0; i < a->nkw; i++)
        jinja__dict_put(d, jinja__str(&rs->acct, a->kname[i], a->klen[i]),
                        jinja_value_acquire(a->kval[i]));
    return d;
}

/* raise_exception(message): fails the render with exactly that message. */
static jinja_value *g_raise(struct jinja__rs *rs, const node *at, const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "raise_exception", "message", a, p, 1) < 0)
        return NULL;
    jinja_value *msg = p[0] ? jinja__to_str(&rs->acct, p[0]) : jinja__str(&rs->acct, "", 0);
    jinja__raise(rs, msg->u.s.p);
    jinja_value_release(msg);
    return NULL;
}

/*
 * strftime_now(format): the current local time (or the fixed time of jinja_opts.now), formatted by
 * the C library's strftime — the same one CPython's uses on glibc.
 */
static jinja_value *g_strftime(struct jinja__rs *rs, const node *at, const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "strftime_now", "format", a, p, 1) < 0 ||
        jinja__want_str(rs, at, p[0], "format") < 0)
        return NULL;
    time_t now = rs->t->opts.now ? (time_t)rs->t->opts.now : time(NULL);
    struct tm tm;
    char out[1024];
    localtime_r(&now, &tm);
    size_t n = p[0]->u.s.n ? strftime(out, sizeof(out), p[0]->u.s.p, &tm) : 0;
    return jinja__str(&rs->acct, out, n);
}

/* ==== dispatch =============================================================================== */

/* Calls a builtin: a global function, or a method with its bound self. */
jinja_value *jinja__func_call(struct jinja__rs *rs, const node *at, jinja_value *fn, const args *a)
{
    jinja_value *self = fn->u.bound.self;
    if (jinja__step(rs, 1) < 0)
        return NULL;
    switch (fn->fn) {
    case FN_RANGE:
        return g_range(rs, at, a);
    case FN_NAMESPACE:
    case FN_DICT:
        return g_mapping(rs, at, a, fn->fn == FN_NAMESPACE);
    case FN_RAISE:
        return g_raise(rs, at, a);
    case FN_STRFTIME:
        return g_strftime(rs, at, a);
    case FN_ITEMS:
    case FN_KEYS:
    case FN_VALUES:
    case FN_GET:
    case FN_DCOPY:
        return m_dict(rs, at, self, a, fn->fn);
    case FN_LINDEX:
    case FN_LCOUNT:
    case FN_LCOPY:
        return m_list(rs, at, self, a, fn->fn);
    case FN_CYCLE:
        return m_cycle(rs, at, self, a);
    default:
        return jinja__str_method(rs, at, fn->fn, self, a);
    }
}
