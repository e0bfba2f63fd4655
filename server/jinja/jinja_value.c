/*
 * jinja_value — the value model of the Jinja interpreter: construction, reference counting,
 * lists and insertion-ordered dicts, Python truthiness, equality and ordering, str() and
 * repr(), and the conversion from cJSON.
 *
 * Invariants:
 *   - Values are reference counted; a container owns one reference to each element.
 *   - JF_STATIC values (none, true, false, the plain undefined) are immortal and never written,
 *     so several threads may share them.
 *   - Values created during a render carry that render's accounting (acct) and charge their
 *     bytes to it while alive; the render fails when the total passes max_memory.
 *   - Only namespaces (and the C building API) mutate a container after it is built, so every
 *     reference cycle passes through a namespace; the render clears them at its end.
 *
 * Threads: a value tree is used by one thread at a time (see jinja.h); the statics are shared.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, xrealloc, xcalloc
#include "jinja_impl.h"  // defines: jinja_value internals, jinja__buf

static jinja_value v_none = {.kind = JK_NONE, .flags = JF_STATIC};
static jinja_value v_true = {.kind = JK_BOOL, .flags = JF_STATIC, .u.b = 1};
static jinja_value v_false = {.kind = JK_BOOL, .flags = JF_STATIC, .u.b = 0};
static jinja_value v_undef = {.kind = JK_UNDEF, .flags = JF_STATIC};

/* ==== allocation and accounting ============================================================== */

/*
 * Charges n more bytes of v to its render's accounting; crossing max_memory only sets a flag that
 * the next step check turns into an error, so constructors never fail.
 */
static void charge(jinja_value *v, size_t n)
{
    if (!v->acct)
        return;
    v->charged += n;
    v->acct->used += n;
    if (v->acct->used > v->acct->limit)
        v->acct->over = 1;
}

/*
 * A zeroed value of kind with one reference, charged to a (NULL: a caller-built value, not
 * accounted).
 */
static jinja_value *vnew(struct jinja__acct *a, enum jinja__kind kind)
{
    jinja_value *v = xcalloc(1, sizeof(*v));
    v->refs = 1;
    v->kind = (uint8_t)kind;
    v->acct = a;
    charge(v, sizeof(*v));
    return v;
}

/* Statics are never written, which is what lets threads share them. */
jinja_value *jinja_value_acquire(jinja_value *v)
{
    if (v && !(v->flags & JF_STATIC))
        v->refs++;
    return v;
}

/* Releases what v owns (elements, strings, the bound object), not v itself. */
static void free_contents(jinja_value *v)
{
    switch (v->kind) {
    case JK_UNDEF:
    case JK_STR:
        free(v->u.s.p);
        break;
    case JK_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            jinja_value_release(v->u.l.v[i]);
        free(v->u.l.v);
        break;
    case JK_DICT:
    case JK_OBJ:
        jinja__dict_clear(v);
        free(v->u.d.k);
        free(v->u.d.v);
        break;
    case JK_FUNC:
        jinja_value_release(v->u.bound.self);
        break;
    case JK_LOOP:
        jinja_value_release(v->u.loop.items);
        break;
    default:
        break;
    }
}

/* Frees v when its last reference goes and refunds its bytes to the render that charged them. */
void jinja_value_release(jinja_value *v)
{
    if (!v || (v->flags & JF_STATIC) || --v->refs > 0)
        return;
    free_contents(v);
    if (v->acct)
        v->acct->used -= v->charged;
    free(v);
}

/* ==== constructors =========================================================================== */

/* The immortal singletons: no allocation, no accounting, safe from any thread. */
jinja_value *jinja__none(void)
{
    return &v_none;
}

jinja_value *jinja__bool(int b)
{
    return b ? &v_true : &v_false;
}

jinja_value *jinja__undef(void)
{
    return &v_undef;
}

/*
 * The message is what jinja2 would raise on use ("'x' is undefined", "'dict object' has no
 * attribute 'y'"); it is cut at 511 bytes.
 */
jinja_value *jinja__undef_msg(struct jinja__acct *a, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    jinja_value *v = vnew(a, JK_UNDEF);
    v->u.s.n = strlen(tmp);
    v->u.s.p = xmalloc(v->u.s.n + 1);
    memcpy(v->u.s.p, tmp, v->u.s.n + 1);
    charge(v, v->u.s.n + 1);
    return v;
}

/*
 * Numbers are boxed like everything else; templates build few enough of them for this to be cheap.
 */
jinja_value *jinja__int(struct jinja__acct *a, int64_t i)
{
    jinja_value *v = vnew(a, JK_INT);
    v->u.i = i;
    return v;
}

jinja_value *jinja__float(struct jinja__acct *a, double f)
{
    jinja_value *v = vnew(a, JK_FLOAT);
    v->u.f = f;
    return v;
}

/* Adopts s (malloc'd, NUL-terminated, n bytes) without copying. */
jinja_value *jinja__str_take(struct jinja__acct *a, char *s, size_t n)
{
    jinja_value *v = vnew(a, JK_STR);
    v->u.s.p = s;
    v->u.s.n = n;
    charge(v, n + 1);
    return v;
}

jinja_value *jinja__str(struct jinja__acct *a, const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return jinja__str_take(a, p, n);
}

/* cap reserves room for that many items up front (0: grow on demand). */
jinja_value *jinja__list(struct jinja__acct *a, size_t cap, int tuple)
{
    jinja_value *v = vnew(a, JK_LIST);
    v->flags = tuple ? JF_TUPLE : 0;
    if (cap) {
        v->u.l.v = xmalloc(cap * sizeof(*v->u.l.v));
        v->u.l.cap = cap;
        charge(v, cap * sizeof(*v->u.l.v));
    }
    return v;
}

/* A dict, a namespace (JK_OBJ) or a loop object (JK_LOOP); all share the same storage. */
jinja_value *jinja__dict(struct jinja__acct *a, enum jinja__kind kind)
{
    return vnew(a, kind);
}

/* A builtin function (self NULL) or a method bound to self. */
jinja_value *jinja__func(struct jinja__acct *a, int fn, jinja_value *self)
{
    jinja_value *v = vnew(a, JK_FUNC);
    v->fn = (uint16_t)fn;
    v->u.bound.self = self;
    return v;
}

/*
 * A macro refers to its AST node, which the template owns and outlives every render; scope is only
 * set for caller().
 */
jinja_value *jinja__macro(struct jinja__acct *a, const struct jinja__node *n,
                          struct jinja__scope *scope)
{
    jinja_value *v = vnew(a, JK_MACRO);
    v->u.m.node = n;
    v->u.m.scope = scope;
    return v;
}

/* ==== containers ============================================================================= */

/*
 * Tracks nesting so that deep chains built by a template are refused before the recursive walkers
 * (release, repr, json, ==) could overflow the stack.
 */
static void note_depth(jinja_value *c, const jinja_value *child)
{
    uint32_t d = child->depth + 1;
    if (d > c->depth)
        c->depth = d;
    if (d > JINJA__MAX_NEST && c->acct)
        c->acct->deep = 1;
}

/* Appends v, doubling the array when full (the growth is charged). */
void jinja__list_push(jinja_value *l, jinja_value *v)
{
    if (l->u.l.n == l->u.l.cap) {
        size_t cap = l->u.l.cap ? l->u.l.cap * 2 : 4;
        l->u.l.v = xrealloc(l->u.l.v, cap * sizeof(*l->u.l.v));
        charge(l, (cap - l->u.l.cap) * sizeof(*l->u.l.v));
        l->u.l.cap = cap;
    }
    l->u.l.v[l->u.l.n++] = v;
    note_depth(l, v);
}

/*
 * Linear search with Python equality (1 == 1.0 == True), which is what Python's hashing amounts to
 * here: chat-template dicts are small.
 */
static long dict_find(const jinja_value *d, const jinja_value *k)
{
    for (size_t i = 0; i < d->u.d.n; i++)
        if (jinja__equal(d->u.d.k[i], k))
            return (long)i;
    return -1;
}

/* Inserts or replaces; order is the order of first insertion, as in Python 3.7+. */
void jinja__dict_put(jinja_value *d, jinja_value *k, jinja_value *v)
{
    long at = dict_find(d, k);
    if (at >= 0) { /* Python keeps the first key object and position */
        jinja_value_release(k);
        jinja_value_release(d->u.d.v[at]);
        d->u.d.v[at] = v;
        note_depth(d, v);
        return;
    }
    if (d->u.d.n == d->u.d.cap) {
        size_t cap = d->u.d.cap ? d->u.d.cap * 2 : 4;
        d->u.d.k = xrealloc(d->u.d.k, cap * sizeof(*d->u.d.k));
        d->u.d.v = xrealloc(d->u.d.v, cap * sizeof(*d->u.d.v));
        charge(d, 2 * (cap - d->u.d.cap) * sizeof(*d->u.d.k));
        d->u.d.cap = cap;
    }
    d->u.d.k[d->u.d.n] = k;
    d->u.d.v[d->u.d.n++] = v;
    note_depth(d, v);
}

void jinja__dict_puts(jinja_value *d, const char *k, jinja_value *v)
{
    jinja__dict_put(d, jinja__str(d->acct, k, strlen(k)), v);
}

/* Borrowed lookups; dict_gets is the fast path for string keys (attribute access, scopes). */
jinja_value *jinja__dict_get(const jinja_value *d, const jinja_value *k)
{
    long at = dict_find(d, k);
    return at >= 0 ? d->u.d.v[at] : NULL;
}

jinja_value *jinja__dict_gets(const jinja_value *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_value *key = d->u.d.k[i];
        if (key->kind == JK_STR && key->u.s.n == n && memcmp(key->u.s.p, k, n) == 0)
            return d->u.d.v[i];
    }
    return NULL;
}

/* Also used at the end of a render on every namespace to break reference cycles. */
void jinja__dict_clear(jinja_value *d)
{
    size_t n = d->u.d.n;
    d->u.d.n = 0; /* releasing may re-enter through a cycle: empty the dict first */
    for (size_t i = 0; i < n; i++) {
        jinja_value_release(d->u.d.k[i]);
        jinja_value_release(d->u.d.v[i]);
    }
}

/* ==== public constructors ==================================================================== */

/* Public constructors: caller-built values carry no accounting (acct NULL). */
jinja_value *jinja_value_none(void)
{
    return jinja__none();
}

jinja_value *jinja_value_bool(int b)
{
    return jinja__bool(b);
}

jinja_value *jinja_value_int(int64_t v)
{
    return jinja__int(NULL, v);
}

jinja_value *jinja_value_float(double v)
{
    return jinja__float(NULL, v);
}

jinja_value *jinja_value_string(const char *s, size_t len)
{
    return jinja__str(NULL, s, len);
}

jinja_value *jinja_value_cstring(const char *s)
{
    return jinja__str(NULL, s, strlen(s));
}

jinja_value *jinja_value_list(void)
{
    return jinja__list(NULL, 0, 0);
}

jinja_value *jinja_value_dict(void)
{
    return jinja__dict(NULL, JK_DICT);
}

/* On a type error the item is still released, so callers never leak on the error path. */
int jinja_list_append(jinja_value *list, jinja_value *item)
{
    if (!list || list->kind != JK_LIST || !item) {
        jinja_value_release(item);
        return DD_ETYPE;
    }
    jinja__list_push(list, item);
    return 0;
}

int jinja_dict_set(jinja_value *dict, const char *key, jinja_value *v)
{
    if (!dict || dict->kind != JK_DICT || !key || !v) {
        jinja_value_release(v);
        return DD_ETYPE;
    }
    jinja__dict_puts(dict, key, v);
    return 0;
}

/* Recursion depth is bounded by cJSON's own nesting limit (CJSON_NESTING_LIMIT, 1000). */
jinja_value *jinja_value_from_cjson(const cJSON *j)
{
    if (!j || cJSON_IsNull(j) || cJSON_IsInvalid(j))
        return jinja__none();
    if (cJSON_IsBool(j))
        return jinja__bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0)
            return jinja__int(NULL, (int64_t)d);
        return jinja__float(NULL, d);
    }
    if (cJSON_IsString(j) || cJSON_IsRaw(j))
        return jinja_value_cstring(j->valuestring ? j->valuestring : "");
    jinja_value *c = cJSON_IsArray(j) ? jinja_value_list() : jinja_value_dict();
    for (const cJSON *e = j->child; e; e = e->next) {
        if (c->kind == JK_LIST)
            jinja__list_push(c, jinja_value_from_cjson(e));
        else
            jinja__dict_puts(c, e->string ? e->string : "", jinja_value_from_cjson(e));
    }
    return c;
}

/* ==== truthiness, equality, ordering ========================================================= */

/*
 * Python's bool(v): empty containers, zero, '', None and undefined are false; objects and
 * callables are true.
 */
int jinja__truthy(const jinja_value *v)
{
    switch (v->kind) {
    case JK_UNDEF:
    case JK_NONE:
        return 0;
    case JK_BOOL:
        return v->u.b;
    case JK_INT:
        return v->u.i != 0;
    case JK_FLOAT:
        return v->u.f != 0;
    case JK_STR:
        return v->u.s.n != 0;
    case JK_LIST:
        return v->u.l.n != 0;
    case JK_DICT:
        return v->u.d.n != 0;
    default:
        return 1;
    }
}

/* bool is an int subclass in Python, so arithmetic and comparisons accept it as a number. */
int jinja__is_num(const jinja_value *v)
{
    return v->kind == JK_BOOL || v->kind == JK_INT || v->kind == JK_FLOAT;
}

double jinja__num(const jinja_value *v)
{
    return v->kind == JK_FLOAT ? v->u.f : v->kind == JK_INT ? (double)v->u.i : (double)v->u.b;
}

/* The integer value of an int or a bool. */
static int64_t as_int(const jinja_value *v)
{
    return v->kind == JK_INT ? v->u.i : v->u.b;
}

/*
 * Python's ==. Numbers compare by value across int, float and bool; other kinds must match; a
 * cycle deeper than the walk limit compares unequal instead of recursing forever.
 */
static int equal_at(const jinja_value *a, const jinja_value *b, int depth);

/*
 * Element-wise equality of two lists (a tuple never equals a list) or two dicts (same keys, equal
 * values, any order).
 */
static int equal_containers(const jinja_value *a, const jinja_value *b, int depth)
{
    if (a->kind == JK_LIST) {
        if ((a->flags & JF_TUPLE) != (b->flags & JF_TUPLE) || a->u.l.n != b->u.l.n)
            return 0;
        for (size_t i = 0; i < a->u.l.n; i++)
            if (!equal_at(a->u.l.v[i], b->u.l.v[i], depth + 1))
                return 0;
        return 1;
    }
    if (a->u.d.n != b->u.d.n)
        return 0;
    for (size_t i = 0; i < a->u.d.n; i++) {
        const jinja_value *bv = jinja__dict_get(b, a->u.d.k[i]);
        if (!bv || !equal_at(a->u.d.v[i], bv, depth + 1))
            return 0;
    }
    return 1;
}

static int equal_at(const jinja_value *a, const jinja_value *b, int depth)
{
    if (a == b)
        return 1;
    if (depth > JINJA__WALK_LIMIT)
        return 0;
    if (jinja__is_num(a) && jinja__is_num(b)) {
        if (a->kind != JK_FLOAT && b->kind != JK_FLOAT)
            return as_int(a) == as_int(b);
        return jinja__num(a) == jinja__num(b);
    }
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case JK_UNDEF:
    case JK_NONE:
        return 1;
    case JK_STR:
        return a->u.s.n == b->u.s.n && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
    case JK_LIST:
    case JK_DICT:
        return equal_containers(a, b, depth);
    case JK_FUNC:
        return a->fn == b->fn && a->u.bound.self == b->u.bound.self;
    default:
        return 0;
    }
}

int jinja__equal(const jinja_value *a, const jinja_value *b)
{
    return equal_at(a, b, 0);
}

/* Three-way comparison of two doubles. */
static int cmp3(double x, double y)
{
    return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Python's < for numbers, strings (UTF-8 byte order equals code point order) and same-kind
 * sequences (lexicographic); everything else cannot be ordered and the caller raises a TypeError.
 */
int jinja__order(const jinja_value *a, const jinja_value *b, int *res)
{
    if (jinja__is_num(a) && jinja__is_num(b)) {
        if (a->kind != JK_FLOAT && b->kind != JK_FLOAT)
            *res = as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
        else
            *res = cmp3(jinja__num(a), jinja__num(b));
        return 0;
    }
    if (a->kind == JK_STR && b->kind == JK_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = n ? memcmp(a->u.s.p, b->u.s.p, n) : 0;
        *res = c ? (c < 0 ? -1 : 1) : cmp3((double)a->u.s.n, (double)b->u.s.n);
        return 0;
    }
    if (a->kind != JK_LIST || b->kind != JK_LIST || (a->flags ^ b->flags) & JF_TUPLE)
        return -1;
    for (size_t i = 0; i < a->u.l.n && i < b->u.l.n; i++) {
        if (jinja__equal(a->u.l.v[i], b->u.l.v[i]))
            continue;
        return jinja__order(a->u.l.v[i], b->u.l.v[i], res);
    }
    *res = cmp3((double)a->u.l.n, (double)b->u.l.n);
    return 0;
}

/* ==== str() and repr() ======================================================================= */

/* Code points Python's str.isprintable() rejects beyond ASCII controls (an approximation of the
 * Unicode categories C* and Z* minus the space). */
static int unprintable(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
           (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff ||
           (cp >= 0xe000 && cp <= 0xf8ff);
}

/*
 * Python's repr of a string: single quotes unless the text has a ' and no ", backslash escapes for
 * the quote, \\, \n, \r, \t and unprintable code points.
 */
static void put_str_repr(struct jinja__buf *b, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    jinja__buf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = jinja__utf8_next(s + i, n - i, &cp);
        if (cp == '\\' || cp == (uint32_t)q) {
            jinja__buf_putc(b, '\\');
            jinja__buf_putc(b, (char)cp);
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            jinja__buf_put(b, cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : "\\t", 2);
        } else if (unprintable(cp)) {
            jinja__buf_printf(b, cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
        } else {
            jinja__buf_put(b, s + i, l);
        }
        i += l;
    }
    jinja__buf_putc(b, q);
}

/*
 * str(v) (repr = 0) or repr(v) (repr = 1). Undefined prints nothing as str and "Undefined" inside
 * containers, as jinja2 does.
 */
static void put_at(struct jinja__buf *b, const jinja_value *v, int repr, int depth);

/* [a, b] for lists, (a, b) for tuples and (a,) for one-tuples, elements as repr. */
static void put_list(struct jinja__buf *b, const jinja_value *v, int depth)
{
    int tuple = (v->flags & JF_TUPLE) != 0;
    jinja__buf_putc(b, tuple ? '(' : '[');
    for (size_t i = 0; i < v->u.l.n; i++) {
        if (i)
            jinja__buf_put(b, ", ", 2);
        put_at(b, v->u.l.v[i], 1, depth + 1);
    }
    if (tuple && v->u.l.n == 1)
        jinja__buf_putc(b, ',');
    jinja__buf_putc(b, tuple ? ')' : ']');
}

/* {k: v, ...} with keys and values as repr. */
static void put_dict(struct jinja__buf *b, const jinja_value *v, int depth)
{
    jinja__buf_putc(b, '{');
    for (size_t i = 0; i < v->u.d.n; i++) {
        if (i)
            jinja__buf_put(b, ", ", 2);
        put_at(b, v->u.d.k[i], 1, depth + 1);
        jinja__buf_put(b, ": ", 2);
        put_at(b, v->u.d.v[i], 1, depth + 1);
    }
    jinja__buf_putc(b, '}');
}

static void put_at(struct jinja__buf *b, const jinja_value *v, int repr, int depth)
{
    if (depth > JINJA__WALK_LIMIT) {
        jinja__buf_put(b, "...", 3);
        return;
    }
    switch (v->kind) {
    case JK_UNDEF:
        if (repr)
            jinja__buf_put(b, "Undefined", 9);
        break;
    case JK_NONE:
        jinja__buf_put(b, "None", 4);
        break;
    case JK_BOOL:
        jinja__buf_put(b, v->u.b ? "True" : "False", v->u.b ? 4 : 5);
        break;
    case JK_INT:
        jinja__buf_printf(b, "%lld", (long long)v->u.i);
        break;
    case JK_FLOAT:
        jinja__put_float(b, v->u.f);
        break;
    case JK_STR:
        if (repr)
            put_str_repr(b, v->u.s.p, v->u.s.n);
        else
            jinja__buf_put(b, v->u.s.p, v->u.s.n);
        break;
    case JK_LIST:
        put_list(b, v, depth);
        break;
    case JK_DICT:
        put_dict(b, v, depth);
        break;
    case JK_LOOP:
        jinja__buf_printf(b, "<LoopContext %zu/%zu>", v->u.loop.i + 1, v->u.loop.items->u.l.n);
        break;
    case JK_OBJ:
        jinja__buf_put(b, "<Namespace ", 11);
        put_dict(b, v, depth);
        jinja__buf_putc(b, '>');
        break;
    case JK_MACRO:
        jinja__buf_put(b, "<Macro>", 7);
        break;
    default:
        jinja__buf_put(b, "<built-in function>", 19);
        break;
    }
}

/* Output and ~ use str(); containers print their elements with repr(), as Python does. */
void jinja__put_str(struct jinja__buf *b, const jinja_value *v)
{
    put_at(b, v, 0, 0);
}

void jinja__put_repr(struct jinja__buf *b, const jinja_value *v)
{
    put_at(b, v, 1, 0);
}

/* Returns v itself when it already is a string (no copy). */
jinja_value *jinja__to_str(struct jinja__acct *a, jinja_value *v)
{
    if (v->kind == JK_STR)
        return jinja_value_acquire(v);
    struct jinja__buf b = {.limit = a ? a->limit : (size_t)-1};
    jinja__put_str(&b, v);
    if (b.over && a)
        a->over = 1;
    size_t n;
    char *p = jinja__buf_take(&b, &n);
    return jinja__str_take(a, p, n);
}

/* Python's type name, for TypeError messages. */
const char *jinja__py_type(const jinja_value *v)
{
    switch (v->kind) {
    case JK_NONE:
        return "NoneType";
    case JK_BOOL:
        return "bool";
    case JK_INT:
        return "int";
    case JK_FLOAT:
        return "float";
    case JK_STR:
        return "str";
    case JK_LIST:
        return v->flags & JF_TUPLE ? "tuple" : "list";
    case JK_DICT:
        return "dict";
    case JK_OBJ:
        return "Namespace";
    case JK_LOOP:
        return "LoopContext";
    case JK_MACRO:
        return "Macro";
    case JK_UNDEF:
        return "Undefined";
    default:
        return "builtin_function_or_method";
    }
}

/*
 * The object description jinja2 puts in undefined messages, e.g. "'dict object' has no attribute
 * 'x'".
 */
const char *jinja__type_name(const jinja_value *v)
{
    switch (v->kind) {
    case JK_UNDEF:
        return "Undefined";
    case JK_NONE:
        return "None";
    case JK_BOOL:
        return "bool object";
    case JK_INT:
        return "int object";
    case JK_FLOAT:
        return "float object";
    case JK_STR:
        return "str object";
    case JK_LIST:
        return v->flags & JF_TUPLE ? "tuple object" : "list object";
    case JK_DICT:
        return "dict object";
    case JK_OBJ:
        return "jinja2.utils.Namespace object";
    case JK_LOOP:
        return "LoopContext object";
    case JK_MACRO:
        return "jinja2.runtime.Macro object";
    default:
        return "builtin_function_or_method object";
    }
}
