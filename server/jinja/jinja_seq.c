/*
 * jinja_seq — jinja2's filters over sequences and mappings: first, last, list, items, join,
 * reverse, map, select, reject, selectattr, rejectattr, sort, unique, min, max, dictsort, sum.
 *
 * Every filter first turns its input into a list the way a Python for loop would iterate it
 * (a dict gives its keys, a string its characters, an undefined nothing), then works on that
 * list. `attribute=` arguments are dotted paths ("a.b", "items.0") resolved like jinja2's
 * attrgetter; map/select take the name of another filter or test, resolved when called.
 * Sorting is stable (a merge sort) and case-insensitive by default, as in jinja2.
 *
 * Invariants: results are new references or NULL with the error recorded; work proportional
 * to the input is charged to the step budget.
 *
 * Threads: the table is constant.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__args, value helpers

typedef struct jinja__node node;
typedef struct jinja__args args;

/* ==== helpers ================================================================================ */

/* item.a.b (dotted; numeric parts index lists), as jinja2's attribute= arguments work. */
static jinja_value *attr_path(struct jinja__rs *rs, const node *at, jinja_value *item,
                              const jinja_value *path)
{
    if (path->kind == JK_INT)
        return jinja__getitem(rs, at, item, (jinja_value *)path);
    if (path->kind != JK_STR)
        return (jinja__fail(rs, at, "attribute must be a string"), NULL);
    /* each dotted part is an item lookup (which falls back to the attribute) */
    jinja_value *cur = jinja_value_acquire(item);
    const char *p = path->u.s.p, *end = p + path->u.s.n;
    while (cur && p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        char *stop;
        long long idx = n ? strtoll(p, &stop, 10) : 0;
        jinja_value *key =
            n && stop == p + n ? jinja__int(&rs->acct, idx) : jinja__str(&rs->acct, p, n);
        jinja_value *next = cur->kind == JK_UNDEF ? NULL : jinja__getitem(rs, at, cur, key);
        if (cur->kind == JK_UNDEF)
            jinja__fail_undef(rs, at, cur);
        jinja_value_release(key);
        jinja_value_release(cur);
        cur = next;
        if (!dot)
            break;
        p = dot + 1;
    }
    return cur;
}

/* A list of the iterable's items (new reference). */
static jinja_value *items_of(struct jinja__rs *rs, const node *at, jinja_value *v)
{
    return jinja__iter_list(rs, at, v);
}

/* ==== sequences ============================================================================== */

/* first / last: undefined with jinja2's message when there is nothing. */
static jinja_value *f_first_last(struct jinja__rs *rs, const node *at, jinja_value *v,
                                 const args *a, int last)
{
    if (jinja__bind(rs, at, last ? "last" : "first", "", a, NULL, 0) < 0)
        return NULL;
    jinja_value *l = items_of(rs, at, v), *r = NULL;
    if (!l)
        return NULL;
    if (l->u.l.n)
        r = jinja_value_acquire(l->u.l.v[last ? l->u.l.n - 1 : 0]);
    else
        r = jinja__undef_msg(&rs->acct, "No %s item, sequence was empty.", last ? "last" : "first");
    jinja_value_release(l);
    return r;
}

static jinja_value *f_first(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return f_first_last(rs, at, v, a, 0);
}

static jinja_value *f_last(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return f_first_last(rs, at, v, a, 1);
}

/* A fresh list copy (the result of list(), reverse, sort...). */
static jinja_value *copy_list(struct jinja__rs *rs, const node *at, jinja_value *v)
{
    jinja_value *l = items_of(rs, at, v);
    if (!l)
        return NULL;
    jinja_value *c = jinja__list(&rs->acct, l->u.l.n, 0);
    for (size_t i = 0; i < l->u.l.n; i++)
        jinja__list_push(c, jinja_value_acquire(l->u.l.v[i]));
    jinja_value_release(l);
    return c;
}

/* list(value): a new list (a string gives its characters, a dict its keys). */
static jinja_value *f_list(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return jinja__bind(rs, at, "list", "", a, NULL, 0) < 0 ? NULL : copy_list(rs, at, v);
}

/*
 * items(value): (key, value) tuples of a mapping; undefined gives an empty list, anything else is
 * jinja2's TypeError.
 */
static jinja_value *f_items(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "items", "", a, NULL, 0) < 0)
        return NULL;
    if (v->kind == JK_UNDEF)
        return jinja__list(&rs->acct, 0, 0);
    if (v->kind != JK_DICT)
        return (jinja__fail(rs, at, "Can only get item pairs from a mapping."), NULL);
    jinja_value *m = jinja__method(rs, v, "items", 5);
    struct jinja__args none = {0};
    jinja_value *r = jinja__func_call(rs, at, m, &none);
    jinja_value_release(m);
    return r;
}

/* join(d='', attribute=None): str() of each item (or of its attribute), separated by d. */
static jinja_value *f_join(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, "join", "d,attribute", a, p, 2) < 0)
        return NULL;
    jinja_value *l = items_of(rs, at, v);
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; l && i < l->u.l.n; i++) {
        jinja_value *item =
            p[1] ? attr_path(rs, at, l->u.l.v[i], p[1]) : jinja_value_acquire(l->u.l.v[i]);
        if (!item) {
            jinja_value_release(l);
            l = NULL;
            break;
        }
        if (i && p[0])
            jinja__put_str(&b, p[0]);
        jinja__put_str(&b, item);
        jinja_value_release(item);
    }
    if (!l) {
        jinja__buf_free(&b);
        return NULL;
    }
    jinja_value_release(l);
    return jinja__buf_value(rs, &b);
}

/* reverse: a reversed list, or the reversed string for a string. */
static jinja_value *f_reverse(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "reverse", "", a, NULL, 0) < 0)
        return NULL;
    jinja_value *l = copy_list(rs, at, v);
    for (size_t i = 0; l && i < l->u.l.n / 2; i++) {
        jinja_value *t = l->u.l.v[i];
        l->u.l.v[i] = l->u.l.v[l->u.l.n - 1 - i];
        l->u.l.v[l->u.l.n - 1 - i] = t;
    }
    if (!l || v->kind != JK_STR)
        return l;
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; i < l->u.l.n; i++)
        jinja__put_str(&b, l->u.l.v[i]);
    jinja_value_release(l);
    return jinja__buf_value(rs, &b);
}

/* ==== map, select, sort ====================================================================== */

/* The arguments after the first `skip` positional ones, for a filter or test named by them. */
static struct jinja__args rest_args(const args *a, size_t skip)
{
    struct jinja__args r = *a;
    r.pos = a->npos > skip ? a->pos + skip : NULL;
    r.npos = a->npos > skip ? a->npos - skip : 0;
    r.hold = NULL;
    return r;
}

/*
 * map('filter', args...) applies a filter to each item; map(attribute='x', default=d) picks an
 * attribute, replacing undefined results by d when given.
 */
static jinja_value *f_map(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *attr = NULL, *dflt = NULL;
    for (size_t i = 0; i < a->nkw; i++) {
        if (a->klen[i] == 9 && memcmp(a->kname[i], "attribute", 9) == 0)
            attr = a->kval[i];
        else if (a->klen[i] == 7 && memcmp(a->kname[i], "default", 7) == 0)
            dflt = a->kval[i];
    }
    int fid = -1;
    if (!attr) {
        if (!a->npos || a->pos[0]->kind != JK_STR)
            return (jinja__fail(rs, at, "map() needs a filter name or attribute="), NULL);
        if ((fid = jinja__filter_find(a->pos[0]->u.s.p, a->pos[0]->u.s.n)) < 0)
            return (jinja__fail(rs, at, "No filter named '%s'.", a->pos[0]->u.s.p), NULL);
    }
    jinja_value *l = items_of(rs, at, v);
    jinja_value *out = l ? jinja__list(&rs->acct, l->u.l.n, 0) : NULL;
    struct jinja__args fa = rest_args(a, 1); /* the named filter's own arguments */
    for (size_t i = 0; out && i < l->u.l.n; i++) {
        jinja_value *r = attr ? attr_path(rs, at, l->u.l.v[i], attr)
                              : jinja__filter(rs, at, fid, l->u.l.v[i], &fa);
        if (r && r->kind == JK_UNDEF && dflt) {
            jinja_value_release(r);
            r = jinja_value_acquire(dflt);
        }
        if (!r) {
            jinja_value_release(out);
            out = NULL;
            break;
        }
        jinja__list_push(out, r);
    }
    jinja_value_release(l);
    return out;
}

/* select / reject / selectattr / rejectattr: keep items whose test result equals keep. */
static jinja_value *select_items(struct jinja__rs *rs, const node *at, jinja_value *v,
                                 const args *a, int by_attr, int keep)
{
    size_t skip = by_attr ? 1 : 0;
    if (by_attr && (!a->npos || a->pos[0]->kind != JK_STR))
        return (jinja__fail(rs, at, "selectattr() needs an attribute name"), NULL);
    int tid = -1;
    if (a->npos > skip) {
        const jinja_value *name = a->pos[skip];
        if (name->kind != JK_STR || (tid = jinja__test_find(name->u.s.p, name->u.s.n)) < 0)
            return (jinja__fail(rs, at, "No test named '%s'.",
                                name->kind == JK_STR ? name->u.s.p : "?"),
                    NULL);
    }
    struct jinja__args ta = rest_args(a, skip + 1); /* the test's own arguments */
    ta.nkw = 0;
    jinja_value *l = items_of(rs, at, v);
    jinja_value *out = l ? jinja__list(&rs->acct, l->u.l.n, 0) : NULL;
    for (size_t i = 0; out && i < l->u.l.n; i++) {
        jinja_value *x =
            by_attr ? attr_path(rs, at, l->u.l.v[i], a->pos[0]) : jinja_value_acquire(l->u.l.v[i]);
        int t = !x ? -1 : tid < 0 ? jinja__truthy(x) : jinja__test(rs, at, tid, x, &ta);
        jinja_value_release(x);
        if (t < 0) {
            jinja_value_release(out);
            out = NULL;
        } else if (t == keep) {
            jinja__list_push(out, jinja_value_acquire(l->u.l.v[i]));
        }
    }
    jinja_value_release(l);
    return out;
}

/*
 * select('test', args...), reject, selectattr('attr', 'test', args...), rejectattr: with no test
 * name the item's truthiness decides.
 */
static jinja_value *f_select(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return select_items(rs, at, v, a, 0, 1);
}

static jinja_value *f_reject(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return select_items(rs, at, v, a, 0, 0);
}

static jinja_value *f_selectattr(struct jinja__rs *rs, const node *at, jinja_value *v,
                                 const args *a)
{
    return select_items(rs, at, v, a, 1, 1);
}

static jinja_value *f_rejectattr(struct jinja__rs *rs, const node *at, jinja_value *v,
                                 const args *a)
{
    return select_items(rs, at, v, a, 1, 0);
}

struct sort_ent {
    jinja_value *key;  /* owned */
    jinja_value *item; /* borrowed from the list being sorted */
};

struct sorter {
    struct jinja__rs *rs;
    const node *at;
    int reverse, failed;
};

/*
 * Compares two entries by key; an incomparable pair records jinja2's TypeError once and stops the
 * sort.
 */
static int ent_cmp(struct sorter *s, const struct sort_ent *x, const struct sort_ent *y)
{
    int c = 0;
    if (!s->failed && jinja__order(x->key, y->key, &c) < 0) {
        jinja__fail(s->rs, s->at, "'<' not supported between instances of '%s' and '%s'",
                    jinja__type_name(x->key), jinja__type_name(y->key));
        s->failed = 1;
    }
    return s->reverse ? -c : c;
}

/* Stable merge sort of e[0..n) using tmp as scratch. */
static void merge_sort(struct sorter *s, struct sort_ent *e, struct sort_ent *tmp, size_t n)
{
    if (n < 2 || s->failed)
        return;
    size_t h = n / 2, i = 0, j = h, k = 0; /* sort both halves, then merge (left wins ties) */
    merge_sort(s, e, tmp, h);
    merge_sort(s, e + h, tmp, n - h);
    while (i < h && j < n)
        tmp[k++] = ent_cmp(s, &e[j], &e[i]) < 0 ? e[j++] : e[i++];
    while (i < h)
        tmp[k++] = e[i++];
    while (j < n)
        tmp[k++] = e[j++];
    memcpy(e, tmp, n * sizeof(*e));
}

/* The comparison key of an item: its attribute path, lower-cased unless case-sensitive. */
static jinja_value *sort_key(struct jinja__rs *rs, const node *at, jinja_value *item,
                             const jinja_value *attr, int case_sensitive)
{
    jinja_value *k = attr ? attr_path(rs, at, item, attr) : jinja_value_acquire(item);
    if (!k || case_sensitive || k->kind != JK_STR)
        return k;
    struct jinja__buf b = {.limit = rs->acct.limit};
    jinja__put_case(&b, k->u.s.p, k->u.s.n, JINJA__LOWER);
    jinja_value_release(k);
    return jinja__buf_value(rs, &b);
}

/* Sorts (or, with unique, deduplicates) the items of v; returns a new list. */
static jinja_value *sorted(struct jinja__rs *rs, const node *at, jinja_value *v, int reverse,
                           int case_sensitive, const jinja_value *attr, int unique)
{
    jinja_value *l = items_of(rs, at, v);
    if (!l || jinja__step(rs, l->u.l.n) < 0) {
        jinja_value_release(l);
        return NULL;
    }
    size_t n = l->u.l.n, k = 0;
    struct sort_ent *e = xcalloc(n + 1, sizeof(*e)), *tmp = xcalloc(n + 1, sizeof(*e));
    /* keys are computed once per item; unique compares each new key with the kept ones */
    struct sorter s = {rs, at, reverse, 0};
    for (size_t i = 0; i < n && !s.failed; i++) {
        e[k].item = l->u.l.v[i];
        e[k].key = sort_key(rs, at, e[k].item, attr, case_sensitive);
        s.failed = !e[k].key || (unique && jinja__step(rs, k) < 0);
        int dup = 0;
        for (size_t j = 0; unique && !s.failed && j < k && !dup; j++)
            dup = jinja__equal(e[j].key, e[k].key);
        if (dup)
            jinja_value_release(e[k].key);
        else if (e[k].key)
            k++;
    }
    if (!unique)
        merge_sort(&s, e, tmp, k);
    jinja_value *out = s.failed ? NULL : jinja__list(&rs->acct, k, 0);
    for (size_t i = 0; i < k; i++) {
        if (out)
            jinja__list_push(out, jinja_value_acquire(e[i].item));
        jinja_value_release(e[i].key);
    }
    free(e);
    free(tmp);
    jinja_value_release(l);
    return out;
}

/* sort(reverse=False, case_sensitive=False, attribute=None). */
static jinja_value *f_sort(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[3];
    if (jinja__bind(rs, at, "sort", "reverse,case_sensitive,attribute", a, p, 3) < 0)
        return NULL;
    return sorted(rs, at, v, p[0] && jinja__truthy(p[0]), p[1] && jinja__truthy(p[1]), p[2], 0);
}

/* unique(case_sensitive=False, attribute=None): first occurrences, in order. */
static jinja_value *f_unique(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, "unique", "case_sensitive,attribute", a, p, 2) < 0)
        return NULL;
    return sorted(rs, at, v, 0, p[0] && jinja__truthy(p[0]), p[1], 1);
}

/* min/max(case_sensitive=False, attribute=None) via a sort; empty gives undefined. */
static jinja_value *min_max(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a,
                            int max)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, max ? "max" : "min", "case_sensitive,attribute", a, p, 2) < 0)
        return NULL;
    jinja_value *l = sorted(rs, at, v, max, p[0] && jinja__truthy(p[0]), p[1], 0), *r;
    if (!l)
        return NULL;
    r = l->u.l.n ? jinja_value_acquire(l->u.l.v[0])
                 : jinja__undef_msg(&rs->acct, "No aggregated item, sequence was empty.");
    jinja_value_release(l);
    return r;
}

static jinja_value *f_min(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return min_max(rs, at, v, a, 0);
}

static jinja_value *f_max(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return min_max(rs, at, v, a, 1);
}

/* dictsort(case_sensitive=False, by='key', reverse=False): sorted (key, value) pairs. */
static jinja_value *f_dictsort(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[3];
    if (jinja__bind(rs, at, "dictsort", "case_sensitive,by,reverse", a, p, 3) < 0)
        return NULL;
    if (v->kind != JK_DICT)
        return (jinja__fail(rs, at, "dictsort() needs a mapping"), NULL);
    int by_value = p[1] && p[1]->kind == JK_STR && strcmp(p[1]->u.s.p, "value") == 0;
    jinja_value *pairs = f_items(rs, at, v, &(struct jinja__args){0});
    jinja_value *idx = jinja__int(&rs->acct, by_value); /* sort the pairs on item 0 or 1 */
    jinja_value *r = pairs ? sorted(rs, at, pairs, p[2] && jinja__truthy(p[2]),
                                    p[0] && jinja__truthy(p[0]), idx, 0)
                           : NULL;
    jinja_value_release(idx);
    jinja_value_release(pairs);
    return r;
}

/* sum(attribute=None, start=0) with Python's + (so strings fail like in Python). */
static jinja_value *f_sum(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, "sum", "attribute,start", a, p, 2) < 0)
        return NULL;
    jinja_value *l = items_of(rs, at, v);
    jinja_value *acc = p[1] ? jinja_value_acquire(p[1]) : jinja__int(&rs->acct, 0);
    for (size_t i = 0; l && acc && i < l->u.l.n; i++) {
        jinja_value *x =
            p[0] ? attr_path(rs, at, l->u.l.v[i], p[0]) : jinja_value_acquire(l->u.l.v[i]);
        jinja_value *next = x ? jinja__binop(rs, at, OP_ADD, acc, x) : NULL;
        jinja_value_release(x);
        jinja_value_release(acc);
        acc = next;
    }
    if (!l) {
        jinja_value_release(acc);
        return NULL;
    }
    jinja_value_release(l);
    return acc;
}

/* ==== table ================================================================================== */

static const struct {
    const char *name;
    jinja_value *(*fn)(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a);
} SEQ_FILTERS[] = {
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
};

/* Compile-time lookup of a sequence filter. */
int jinja__seq_filter_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(SEQ_FILTERS) / sizeof(SEQ_FILTERS[0]); i++)
        if (strlen(SEQ_FILTERS[i].name) == n && memcmp(SEQ_FILTERS[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

/* Runs sequence filter id (an index into SEQ_FILTERS). */
jinja_value *jinja__seq_filter(struct jinja__rs *rs, const node *at, int id, jinja_value *v,
                               const args *a)
{
    return SEQ_FILTERS[id].fn(rs, at, v, a);
}
