/*
 * jinja_filters — jinja2's builtin filters and tests that chat templates use, with
 * transformers' tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
 *
 * Filters: abs, attr, capitalize, count, d/default, dictsort, e/escape, first, float, indent,
 * int, items, join, last, length, list, lower, map, max, min, reject, rejectattr, replace,
 * reverse, round, safe, select, selectattr, sort, string, sum, title, tojson, trim, unique,
 * upper. Tests: boolean, callable, defined, divisibleby, eq (==, equalto), even, false, float,
 * ge (>=), gt (>, greaterthan), in, integer, iterable, le (<=), lower, lt (<, lessthan),
 * mapping, ne (!=), none, number, odd, sameas, sequence, string, true, undefined, upper.
 * Autoescaping does not exist here, so safe and escape return plain strings.
 *
 * Invariants: ids are indexes into the tables below and are resolved at compile time; every
 * filter returns a new reference or NULL with the error recorded.
 *
 * Threads: the tables are constant.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__args, value helpers

typedef struct jinja__node node;
typedef struct jinja__args args;
typedef jinja_value *(*filter_fn)(struct jinja__rs *rs, const node *at, jinja_value *v,
                                  const args *a);

/* ==== helpers ================================================================================ */

/*
 * jinja2's soft_str: most string filters convert their input with str() first (so None|trim is
 * "None").
 */
static jinja_value *str_of(struct jinja__rs *rs, jinja_value *v)
{
    return jinja__to_str(&rs->acct, v);
}

/* An int (or bool) argument, or Python's TypeError. */
static int want_int(struct jinja__rs *rs, const node *at, const jinja_value *v, const char *what,
                    int64_t *out)
{
    if (v->kind == JK_INT || v->kind == JK_BOOL) {
        *out = v->kind == JK_INT ? v->u.i : v->u.b;
        return 0;
    }
    return jinja__fail(rs, at, "%s must be an integer", what);
}

/* ==== string filters ========================================================================= */

/* upper, lower, capitalize: str() then a case conversion. */
static jinja_value *f_case(struct jinja__rs *rs, jinja_value *v, int mode)
{
    jinja_value *s = str_of(rs, v);
    struct jinja__buf b = {.limit = rs->acct.limit};
    jinja__put_case(&b, s->u.s.p, s->u.s.n, mode);
    jinja_value_release(s);
    return jinja__buf_value(rs, &b);
}

/* Filters take (value, arguments); jinja__bind rejects arguments they do not have. */
static jinja_value *f_upper(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return jinja__bind(rs, at, "upper", "", a, NULL, 0) < 0 ? NULL : f_case(rs, v, JINJA__UPPER);
}

static jinja_value *f_lower(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return jinja__bind(rs, at, "lower", "", a, NULL, 0) < 0 ? NULL : f_case(rs, v, JINJA__LOWER);
}

static jinja_value *f_capitalize(struct jinja__rs *rs, const node *at, jinja_value *v,
                                 const args *a)
{
    if (jinja__bind(rs, at, "capitalize", "", a, NULL, 0) < 0)
        return NULL;
    return f_case(rs, v, JINJA__CAPITALIZE);
}

/* jinja2's title: words start after "-", whitespace or an opening bracket. */
static jinja_value *f_title(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "title", "", a, NULL, 0) < 0)
        return NULL;
    jinja_value *s = str_of(rs, v);
    struct jinja__buf b = {.limit = rs->acct.limit};
    int start = 1;
    for (size_t i = 0; i < s->u.s.n;) {
        uint32_t cp;
        size_t l = jinja__utf8_next(s->u.s.p + i, s->u.s.n - i, &cp);
        /* a word starts after whitespace, '-' or an opening bracket (jinja2's regex) */
        int sep = jinja__is_space(cp) || (cp < 0x80 && strchr("-({[<", (int)cp) && cp);
        if (sep)
            jinja__buf_put(&b, s->u.s.p + i, l);
        else
            jinja__put_case(&b, s->u.s.p + i, l, start ? JINJA__UPPER : JINJA__LOWER);
        start = sep;
        i += l;
    }
    jinja_value_release(s);
    return jinja__buf_value(rs, &b);
}

/* trim(chars=None) is str.strip on str(value). */
static jinja_value *f_trim(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "trim", "chars", a, p, 1) < 0)
        return NULL;
    jinja_value *s = str_of(rs, v), *m = jinja__method(rs, s, "strip", 5), *r = NULL;
    struct jinja__args ma = {.pos = p, .npos = p[0] && p[0]->kind != JK_NONE ? 1 : 0};
    r = jinja__func_call(rs, at, m, &ma);
    jinja_value_release(m);
    jinja_value_release(s);
    return r;
}

/* replace(old, new, count=None) is str.replace on str(value). */
static jinja_value *f_replace(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[3];
    if (jinja__bind(rs, at, "replace", "old,new,count", a, p, 3) < 0)
        return NULL;
    if (!p[0] || !p[1])
        return (jinja__fail(rs, at, "replace() needs old and new"), NULL);
    jinja_value *s = str_of(rs, v), *m = jinja__method(rs, s, "replace", 7);
    struct jinja__args ma = {.pos = p, .npos = p[2] && p[2]->kind != JK_NONE ? 3 : 2};
    jinja_value *r = jinja__func_call(rs, at, m, &ma);
    jinja_value_release(m);
    jinja_value_release(s);
    return r;
}

/* str(value); a string is returned as is. */
static jinja_value *f_string(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return jinja__bind(rs, at, "string", "", a, NULL, 0) < 0 ? NULL : str_of(rs, v);
}

/* HTML escaping as markupsafe does it (&, <, >, " and '). */
static jinja_value *f_escape(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "escape", "", a, NULL, 0) < 0)
        return NULL;
    jinja_value *s = str_of(rs, v);
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; i < s->u.s.n; i++) {
        const char *rep = NULL;
        switch (s->u.s.p[i]) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&#34;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        default:
            break;
        }
        if (rep)
            jinja__buf_put(&b, rep, strlen(rep));
        else
            jinja__buf_putc(&b, s->u.s.p[i]);
    }
    jinja_value_release(s);
    return jinja__buf_value(rs, &b);
}

/*
 * indent(width=4, first=False, blank=False): jinja2 3.1's algorithm, which appends a newline,
 * splits with str.splitlines and indents every line but the first (and blank lines only when
 * asked).
 */
static jinja_value *f_indent(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[3];
    if (jinja__bind(rs, at, "indent", "width,first,blank", a, p, 3) < 0)
        return NULL;
    struct jinja__buf pad = {.limit = 4096}, b = {.limit = rs->acct.limit};
    int64_t w = 4;
    if (p[0] && p[0]->kind == JK_STR)
        jinja__buf_put(&pad, p[0]->u.s.p, p[0]->u.s.n);
    else if (p[0] && want_int(rs, at, p[0], "width", &w) < 0)
        return NULL;
    for (int64_t i = 0; !(p[0] && p[0]->kind == JK_STR) && i < w; i++)
        jinja__buf_putc(&pad, ' ');
    jinja_value *s = str_of(rs, v), *nl = jinja__str(&rs->acct, "\n", 1);
    struct jinja__args ma = {0};
    jinja_value *joined = jinja__binop(rs, at, OP_ADD, s, nl);
    jinja_value *m = joined ? jinja__method(rs, joined, "splitlines", 10) : NULL;
    jinja_value *lines = m ? jinja__func_call(rs, at, m, &ma) : NULL;
    /* the first line is indented only with first=True, empty lines only with blank=True */
    int first = p[1] && jinja__truthy(p[1]), blank = p[2] && jinja__truthy(p[2]);
    for (size_t i = 0; lines && i < lines->u.l.n; i++) {
        const jinja_value *line = lines->u.l.v[i];
        if (i)
            jinja__buf_putc(&b, '\n');
        if (i == 0 ? first : line->u.s.n || blank)
            jinja__buf_put(&b, pad.d.p ? pad.d.p : "", pad.d.len);
        jinja__buf_put(&b, line->u.s.p, line->u.s.n);
    }
    int ok = lines != NULL;
    jinja_value_release(lines);
    jinja_value_release(m);
    jinja_value_release(joined);
    jinja_value_release(nl);
    jinja_value_release(s);
    jinja__buf_free(&pad);
    if (!ok) {
        jinja__buf_free(&b);
        return NULL;
    }
    return jinja__buf_value(rs, &b);
}

/* No autoescaping here, so safe is str(). */
static jinja_value *f_safe(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    return jinja__bind(rs, at, "safe", "", a, NULL, 0) < 0 ? NULL : str_of(rs, v);
}

/*
 * transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) —
 * note that the first positional argument is ensure_ascii, not indent (jinja2's own tojson
 * differs).
 */
static jinja_value *f_tojson(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[4];
    if (jinja__bind(rs, at, "tojson", "ensure_ascii,indent,separators,sort_keys", a, p, 4) < 0)
        return NULL;
    struct jinja__json_opts o = {.item_sep = ", ", .key_sep = ": "}; /* json.dumps defaults */
    o.ensure_ascii = p[0] && jinja__truthy(p[0]);
    o.sort_keys = p[3] && jinja__truthy(p[3]);
    char pad[64];
    if (p[1] && p[1]->kind == JK_STR) {
        o.indent = p[1]->u.s.p;
        o.indent_n = p[1]->u.s.n;
    } else if (p[1] && p[1]->kind != JK_NONE) {
        int64_t w = 0;
        if (want_int(rs, at, p[1], "indent", &w) < 0)
            return NULL;
        w = w < 0 ? 0 : w > 63 ? 63 : w;
        memset(pad, ' ', (size_t)w);
        o.indent = pad;
        o.indent_n = (size_t)w;
        o.item_sep = ","; /* Python's default once an indent is given */
    }
    jinja_value *sep = p[2] && p[2]->kind == JK_LIST ? p[2] : NULL;
    if (sep && sep->u.l.n == 2 && sep->u.l.v[0]->kind == JK_STR && sep->u.l.v[1]->kind == JK_STR) {
        o.item_sep = sep->u.l.v[0]->u.s.p;
        o.key_sep = sep->u.l.v[1]->u.s.p;
    }
    struct jinja__buf b = {.limit = rs->acct.limit};
    char err[200];
    if (jinja__put_json(&b, v, &o, err, sizeof(err)) < 0) {
        jinja__buf_free(&b);
        return (jinja__fail(rs, at, "%s", err), NULL);
    }
    return jinja__buf_value(rs, &b);
}

/* ==== values and numbers ===================================================================== */

/*
 * default(value, default_value='', boolean=False): replaces undefined, and with boolean=True
 * anything falsy.
 */
static jinja_value *f_default(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    if (jinja__bind(rs, at, "default", "default_value,boolean", a, p, 2) < 0)
        return NULL;
    /* none is a defined value: none|default('x') stays none unless boolean is set */
    int use = v->kind == JK_UNDEF || (p[1] && jinja__truthy(p[1]) && !jinja__truthy(v));
    if (!use)
        return jinja_value_acquire(v);
    return p[0] ? jinja_value_acquire(p[0]) : jinja__str(&rs->acct, "", 0);
}

/* len(): code points of a string, items of a list or dict, 0 for undefined. */
static jinja_value *f_length(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "length", "", a, NULL, 0) < 0)
        return NULL;
    switch (v->kind) {
    case JK_UNDEF:
        return jinja__int(&rs->acct, 0);
    case JK_STR:
        return jinja__int(&rs->acct, (int64_t)jinja__utf8_count(v->u.s.p, v->u.s.n));
    case JK_LIST:
        return jinja__int(&rs->acct, (int64_t)v->u.l.n);
    case JK_DICT:
        return jinja__int(&rs->acct, (int64_t)v->u.d.n);
    default:
        jinja__fail(rs, at, "object of type '%s' has no len()", jinja__type_name(v));
        return NULL;
    }
}

/* abs() of a number (bool gives an int). */
static jinja_value *f_abs(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    if (jinja__bind(rs, at, "abs", "", a, NULL, 0) < 0)
        return NULL;
    if (v->kind == JK_FLOAT)
        return jinja__float(&rs->acct, fabs(v->u.f));
    if ((v->kind == JK_INT && v->u.i != INT64_MIN) || v->kind == JK_BOOL)
        return jinja__int(&rs->acct, v->kind == JK_BOOL ? v->u.b : llabs(v->u.i));
    return (jinja__fail(rs, at, "bad operand type for abs(): '%s'", jinja__type_name(v)), NULL);
}

/* Python's int(str, base) / float(str) on a stripped string; 0 when it does not parse. */
static int parse_number(const jinja_value *s, int base, int want_float, int64_t *i, double *f)
{
    char buf[128];
    size_t lo = jinja__space_prefix(s->u.s.p, s->u.s.n);
    size_t hi = s->u.s.n - jinja__space_suffix(s->u.s.p + lo, s->u.s.n - lo);
    size_t k = 0;
    for (size_t j = lo; j < hi; j++) {
        if (s->u.s.p[j] == '_' && j > lo && j + 1 < hi)
            continue;
        if (k + 1 >= sizeof(buf) || s->u.s.p[j] == 0)
            return 0;
        buf[k++] = s->u.s.p[j];
    }
    buf[k] = 0;
    if (k == 0)
        return 0;
    char *end;
    if (want_float) {
        *f = strtod(buf, &end);
        return *end == 0 && !(buf[0] == '0' && (buf[1] | 0x20) == 'x');
    }
    *i = strtoll(buf, &end, base);
    return *end == 0;
}

/*
 * int(value, default=0, base=10): strings parse with the base and fall back to int(float(s))
 * ("1.9"|int is 1); anything unparsable gives the default.
 */
static jinja_value *f_int(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    int64_t base = 10, i;
    double f;
    if (jinja__bind(rs, at, "int", "default,base", a, p, 2) < 0 ||
        (p[1] && want_int(rs, at, p[1], "base", &base) < 0))
        return NULL;
    if (v->kind == JK_INT || v->kind == JK_BOOL)
        return jinja__int(&rs->acct, v->kind == JK_INT ? v->u.i : v->u.b);
    if (v->kind == JK_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
        return jinja__int(&rs->acct, (int64_t)v->u.f);
    if (v->kind == JK_STR && base >= 0 && base <= 36 && base != 1) {
        if (parse_number(v, (int)base, 0, &i, &f))
            return jinja__int(&rs->acct, i);
        if (base == 10 && parse_number(v, 10, 1, &i, &f) && isfinite(f) && fabs(f) < 9.2e18)
            return jinja__int(&rs->acct, (int64_t)f);
    }
    return p[0] ? jinja_value_acquire(p[0]) : jinja__int(&rs->acct, 0);
}

/* float(value, default=0.0). */
static jinja_value *f_float(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[1];
    int64_t i;
    double f;
    if (jinja__bind(rs, at, "float", "default", a, p, 1) < 0)
        return NULL;
    if (jinja__is_num(v))
        return jinja__float(&rs->acct, jinja__num(v));
    if (v->kind == JK_STR && parse_number(v, 10, 1, &i, &f))
        return jinja__float(&rs->acct, f);
    return p[0] ? jinja_value_acquire(p[0]) : jinja__float(&rs->acct, 0.0);
}

/* round(): Python's round() for "common" (ties to even on the exact binary value, which
 * glibc's printf implements), floor/ceil on value * 10^precision otherwise. */
static jinja_value *f_round(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[2];
    int64_t prec = 0;
    if (jinja__bind(rs, at, "round", "precision,method", a, p, 2) < 0 ||
        (p[0] && want_int(rs, at, p[0], "precision", &prec) < 0))
        return NULL;
    const char *method = p[1] && p[1]->kind == JK_STR ? p[1]->u.s.p : "common";
    int common = strcmp(method, "common") == 0;
    if (!common && strcmp(method, "floor") != 0 && strcmp(method, "ceil") != 0)
        return (jinja__fail(rs, at, "method must be common, ceil or floor"), NULL);
    if (!jinja__is_num(v))
        return (jinja__fail(rs, at, "round() needs a number"), NULL);
    if (common && v->kind != JK_FLOAT && prec >= 0) /* round(int) stays an int in Python */
        return jinja__int(&rs->acct, v->kind == JK_INT ? v->u.i : v->u.b);
    double x = jinja__num(v), scale = pow(10.0, (double)(prec < -300  ? -300
                                                         : prec > 300 ? 300
                                                                      : prec));
    if (!common)
        return jinja__float(&rs->acct,
                            (method[0] == 'f' ? floor(x * scale) : ceil(x * scale)) / scale);
    if (prec < 0 || prec > 300 || !isfinite(x))
        return jinja__float(&rs->acct, prec < 0 ? nearbyint(x * scale) / scale : x);
    char buf[400]; /* %.Nf rounds the exact binary value half-to-even, like Python's round */
    snprintf(buf, sizeof(buf), "%.*f", (int)prec, x);
    return jinja__float(&rs->acct, strtod(buf, NULL));
}

/* attr(name): the attribute (or item) called name. */
static jinja_value *f_attr(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "attr", "name", a, p, 1) < 0)
        return NULL;
    if (!p[0] || p[0]->kind != JK_STR)
        return (jinja__fail(rs, at, "attr() needs a name"), NULL);
    return jinja__getattr(rs, v, p[0]->u.s.p, p[0]->u.s.n);
}

/* ==== tests ================================================================================== */

typedef int (*test_fn)(struct jinja__rs *rs, const node *at, jinja_value *v, const args *a);

enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_BOOLEAN,
    T_FALSE,
    T_TRUE,
    T_INTEGER,
    T_FLOAT,
    T_NUMBER,
    T_STRING,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_CALLABLE,
    T_LOWER,
    T_UPPER,
};

/* Tests that only look at the value's kind. */
static int kind_test(int which, const jinja_value *v)
{
    switch (which) {
    case T_DEFINED:
        return v->kind != JK_UNDEF;
    case T_UNDEFINED:
        return v->kind == JK_UNDEF;
    case T_NONE:
        return v->kind == JK_NONE;
    case T_BOOLEAN:
        return v->kind == JK_BOOL;
    case T_FALSE:
        return v->kind == JK_BOOL && !v->u.b;
    case T_TRUE:
        return v->kind == JK_BOOL && v->u.b;
    case T_INTEGER:
        return v->kind == JK_INT;
    case T_FLOAT:
        return v->kind == JK_FLOAT;
    case T_NUMBER:
        return jinja__is_num(v);
    case T_STRING:
        return v->kind == JK_STR;
    case T_MAPPING:
        return v->kind == JK_DICT;
    case T_ITERABLE:
    case T_SEQUENCE:
        return v->kind == JK_STR || v->kind == JK_LIST || v->kind == JK_DICT || v->kind == JK_UNDEF;
    case T_CALLABLE:
        return v->kind == JK_MACRO || v->kind == JK_FUNC;
    default:
        break;
    }
    /* lower / upper: Python's str.islower() / isupper() on str(v) */
    struct jinja__buf b = {.limit = (size_t)-1}, c = {.limit = (size_t)-1};
    jinja__put_str(&b, v);
    jinja__put_case(&c, b.d.p ? b.d.p : "", b.d.len,
                    which == T_LOWER ? JINJA__LOWER : JINJA__UPPER);
    int cased = 0;
    for (size_t i = 0; i < b.d.len;) {
        uint32_t cp;
        i += jinja__utf8_next(b.d.p + i, b.d.len - i, &cp);
        cased |= jinja__cp_cased(cp);
    }
    int r = cased && b.d.len == c.d.len && memcmp(b.d.p, c.d.p, b.d.len) == 0;
    jinja__buf_free(&b);
    jinja__buf_free(&c);
    return r;
}

/* Tests with one argument: comparisons, in, sameas, divisibleby, odd, even. */
static int arg_test(struct jinja__rs *rs, const node *at, const char *name, jinja_value *v,
                    const args *a)
{
    jinja_value *p[1];
    int odd = strcmp(name, "odd") == 0, even = strcmp(name, "even") == 0;
    if (jinja__bind(rs, at, name, odd || even ? "" : "other", a, p, 1) < 0)
        return -1;
    if (odd || even || strcmp(name, "divisibleby") == 0) {
        int64_t x, d = 2;
        if ((v->kind != JK_INT && v->kind != JK_BOOL) || (p[0] && p[0]->kind != JK_INT))
            return jinja__fail(rs, at, "%s needs integers", name);
        x = v->kind == JK_INT ? v->u.i : v->u.b;
        if (p[0])
            d = p[0]->u.i;
        if (d == 0)
            return jinja__fail(rs, at, "integer division or modulo by zero");
        int64_t r = d == -1 ? 0 : x % d;
        return odd ? r != 0 : r == 0;
    }
    if (!p[0])
        return jinja__fail(rs, at, "test '%s' needs an argument", name);
    if (strcmp(name, "in") == 0)
        return jinja__contains(rs, at, p[0], v);
    if (strcmp(name, "sameas") == 0)
        return v == p[0];
    if (strcmp(name, "eq") == 0 || strcmp(name, "ne") == 0)
        return jinja__equal(v, p[0]) == (name[0] == 'e');
    int c;
    if (jinja__order(v, p[0], &c) < 0)
        return jinja__fail(rs, at, "'%s' not supported between these types", name);
    return name[0] == 'g' ? (name[1] == 't' ? c > 0 : c >= 0) : (name[1] == 't' ? c < 0 : c <= 0);
}

static const struct {
    const char *name;
    int kind;        /* T_* for kind_test, -1 for arg_test */
    const char *arg; /* arg_test's canonical name */
} TESTS[] = {
    {"defined", T_DEFINED, 0},
    {"undefined", T_UNDEFINED, 0},
    {"none", T_NONE, 0},
    {"boolean", T_BOOLEAN, 0},
    {"false", T_FALSE, 0},
    {"true", T_TRUE, 0},
    {"integer", T_INTEGER, 0},
    {"float", T_FLOAT, 0},
    {"number", T_NUMBER, 0},
    {"string", T_STRING, 0},
    {"mapping", T_MAPPING, 0},
    {"iterable", T_ITERABLE, 0},
    {"sequence", T_SEQUENCE, 0},
    {"callable", T_CALLABLE, 0},
    {"lower", T_LOWER, 0},
    {"upper", T_UPPER, 0},
    {"odd", -1, "odd"},
    {"even", -1, "even"},
    {"divisibleby", -1, "divisibleby"},
    {"in", -1, "in"},
    {"sameas", -1, "sameas"},
    {"eq", -1, "eq"},
    {"==", -1, "eq"},
    {"equalto", -1, "eq"},
    {"ne", -1, "ne"},
    {"!=", -1, "ne"},
    {"lt", -1, "lt"},
    {"<", -1, "lt"},
    {"lessthan", -1, "lt"},
    {"le", -1, "le"},
    {"<=", -1, "le"},
    {"gt", -1, "gt"},
    {">", -1, "gt"},
    {"greaterthan", -1, "gt"},
    {"ge", -1, "ge"},
    {">=", -1, "ge"},
};

/* Compile-time lookup: the index into TESTS. */
int jinja__test_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(TESTS) / sizeof(TESTS[0]); i++)
        if (strlen(TESTS[i].name) == n && memcmp(TESTS[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

/* Runs test id on v with a's arguments: 1 true, 0 false, -1 error. */
int jinja__test(struct jinja__rs *rs, const node *at, int id, jinja_value *v, const args *a)
{
    if (TESTS[id].kind >= 0) {
        if (jinja__bind(rs, at, TESTS[id].name, "", a, NULL, 0) < 0)
            return -1;
        return kind_test(TESTS[id].kind, v);
    }
    return arg_test(rs, at, TESTS[id].arg, v, a);
}

/* ==== filter table =========================================================================== */

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},       {"attr", f_attr},       {"capitalize", f_capitalize},
    {"count", f_length},  {"d", f_default},       {"default", f_default},
    {"e", f_escape},      {"escape", f_escape},   {"float", f_float},
    {"indent", f_indent}, {"int", f_int},         {"length", f_length},
    {"lower", f_lower},   {"replace", f_replace}, {"round", f_round},
    {"safe", f_safe},     {"string", f_string},   {"title", f_title},
    {"tojson", f_tojson}, {"trim", f_trim},       {"upper", f_upper},
};

#define SEQ_BASE 1000 /* ids from here on are jinja_seq.c's filters */

/* Compile-time lookup: ids below SEQ_BASE are this file's, above it jinja_seq.c's. */
int jinja__filter_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(FILTERS) / sizeof(FILTERS[0]); i++)
        if (strlen(FILTERS[i].name) == n && memcmp(FILTERS[i].name, name, n) == 0)
            return (int)i;
    int id = jinja__seq_filter_find(name, n);
    return id < 0 ? -1 : SEQ_BASE + id;
}

/* Each filter application counts as a step. */
jinja_value *jinja__filter(struct jinja__rs *rs, const node *at, int id, jinja_value *v,
                           const args *a)
{
    if (jinja__step(rs, 1) < 0)
        return NULL;
    if (id >= SEQ_BASE)
        return jinja__seq_filter(rs, at, id - SEQ_BASE, v, a);
    return FILTERS[id].fn(rs, at, v, a);
}
