/*
 * jinja_json — json.dumps for the tojson filter, exactly as transformers calls it:
 * json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys).
 *
 * So by default items are separated by ", " and keys by ": " on one line; with an indent every
 * item goes on its own line and the item separator becomes "," (Python's rule when indent is
 * set and separators are not). Strings escape only '"', '\\' and control characters (as
 * \n, \t, ... or \u00XX) unless ensure_ascii asks for \uXXXX escapes of everything
 * non-ASCII; floats use Python's repr (NaN, Infinity as Python writes them); dict keys that
 * are ints, floats, bools or None become strings like Python's do.
 *
 * Invariants: nothing outside the given buffer is written; a reference cycle through a
 * namespace is reported ("Circular reference detected") instead of recursing forever.
 *
 * Threads: pure functions of their arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, dd_errf
#include "jinja_impl.h"  // defines: jinja__buf, jinja__json_opts, jinja_value internals

/* ==== JSON ================================================================================== */

/*
 * \uXXXX, or a surrogate pair for astral code points, in lower-case hex as json.dumps writes them.
 */
static void put_u_escape(struct jinja__buf *b, uint32_t cp)
{
    if (cp >= 0x10000) {
        cp -= 0x10000;
        jinja__buf_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
    } else {
        jinja__buf_printf(b, "\\u%04x", cp);
    }
}

/*
 * With ensure_ascii=False json.dumps only escapes the quote, the backslash and C0 controls; DEL
 * and non-ASCII pass through as UTF-8.
 */
void jinja__put_json_string(struct jinja__buf *b, const char *s, size_t n, int ensure_ascii)
{
    jinja__buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = jinja__utf8_next(s + i, n - i, &cp);
        const char *esc = NULL;
        switch (cp) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            break;
        }
        if (esc)
            jinja__buf_put(b, esc, 2);
        else if (cp < 0x20 || (ensure_ascii && cp >= 0x7f))
            put_u_escape(b, cp);
        else
            jinja__buf_put(b, s + i, l);
        i += l;
    }
    jinja__buf_putc(b, '"');
}

struct json_walk {
    struct jinja__buf *b;
    const struct jinja__json_opts *o;
    char *err;
    size_t errlen;
};

/*
 * Dispatch on kind. Namespaces, macros, functions and undefined are not serializable, which is
 * Python's TypeError.
 */
static int put_json_value(struct json_walk *w, const jinja_value *v, int depth);

/* With an indent: a newline and depth copies of the indent string; without one nothing. */
static void newline_indent(struct json_walk *w, int depth)
{
    if (!w->o->indent)
        return;
    jinja__buf_putc(w->b, '\n');
    for (int i = 0; i < depth; i++)
        jinja__buf_put(w->b, w->o->indent, w->o->indent_n);
}

/* json.dumps turns int, float, bool and None keys into strings; others are a TypeError. */
static int put_json_key(struct json_walk *w, const jinja_value *k)
{
    struct jinja__buf t = {.limit = (size_t)-1};
    switch (k->kind) {
    case JK_STR:
        jinja__put_json_string(w->b, k->u.s.p, k->u.s.n, w->o->ensure_ascii);
        return 0;
    case JK_INT:
        jinja__buf_printf(&t, "%lld", (long long)k->u.i);
        break;
    case JK_FLOAT:
        jinja__put_float(&t, k->u.f);
        break;
    case JK_BOOL:
        jinja__buf_put(&t, k->u.b ? "true" : "false", k->u.b ? 4 : 5);
        break;
    case JK_NONE:
        jinja__buf_put(&t, "null", 4);
        break;
    default:
        dd_errf(w->err, w->errlen, "keys must be str, int, float, bool or None, not %s",
                jinja__type_name(k));
        return -1;
    }
    jinja__put_json_string(w->b, t.d.p, t.d.len, 0);
    jinja__buf_free(&t);
    return 0;
}

/* Entry order of a dict: insertion order, or sorted by key for sort_keys. */
static int json_order(struct json_walk *w, const jinja_value *d, size_t *idx)
{
    for (size_t i = 0; i < d->u.d.n; i++)
        idx[i] = i;
    if (!w->o->sort_keys)
        return 0;
    for (size_t i = 1; i < d->u.d.n; i++) { /* insertion sort: dicts here are small */
        size_t x = idx[i], j = i;
        int c = 0;
        while (j > 0) {
            if (jinja__order(d->u.d.k[idx[j - 1]], d->u.d.k[x], &c) < 0) {
                dd_errf(w->err, w->errlen, "sort_keys: keys cannot be ordered");
                return -1;
            }
            if (c <= 0)
                break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    return 0;
}

/* {"k": v, ...}; "{}" when empty, whatever the indent (as in Python). */
static int put_json_dict(struct json_walk *w, const jinja_value *d, int depth)
{
    if (d->u.d.n == 0) {
        jinja__buf_put(w->b, "{}", 2);
        return 0;
    }
    size_t *idx = xmalloc(d->u.d.n * sizeof(*idx));
    int rc = json_order(w, d, idx);
    jinja__buf_putc(w->b, '{');
    for (size_t i = 0; rc == 0 && i < d->u.d.n; i++) {
        if (i)
            jinja__buf_put(w->b, w->o->item_sep, strlen(w->o->item_sep));
        newline_indent(w, depth + 1);
        rc = put_json_key(w, d->u.d.k[idx[i]]);
        if (rc == 0) {
            jinja__buf_put(w->b, w->o->key_sep, strlen(w->o->key_sep));
            rc = put_json_value(w, d->u.d.v[idx[i]], depth + 1);
        }
    }
    newline_indent(w, depth);
    jinja__buf_putc(w->b, '}');
    free(idx);
    return rc;
}

/* [a, b, ...]; "[]" when empty. Tuples are written as lists. */
static int put_json_list(struct json_walk *w, const jinja_value *l, int depth)
{
    if (l->u.l.n == 0) {
        jinja__buf_put(w->b, "[]", 2);
        return 0;
    }
    jinja__buf_putc(w->b, '[');
    for (size_t i = 0; i < l->u.l.n; i++) {
        if (i)
            jinja__buf_put(w->b, w->o->item_sep, strlen(w->o->item_sep));
        newline_indent(w, depth + 1);
        if (put_json_value(w, l->u.l.v[i], depth + 1) < 0)
            return -1;
    }
    newline_indent(w, depth);
    jinja__buf_putc(w->b, ']');
    return 0;
}

static int put_json_value(struct json_walk *w, const jinja_value *v, int depth)
{
    if (depth > JINJA__WALK_LIMIT) {
        dd_errf(w->err, w->errlen, "Circular reference detected");
        return -1;
    }
    switch (v->kind) {
    case JK_NONE:
        jinja__buf_put(w->b, "null", 4);
        return 0;
    case JK_BOOL:
        jinja__buf_put(w->b, v->u.b ? "true" : "false", v->u.b ? 4 : 5);
        return 0;
    case JK_INT:
        jinja__buf_printf(w->b, "%lld", (long long)v->u.i);
        return 0;
    case JK_FLOAT:
        if (isnan(v->u.f))
            jinja__buf_put(w->b, "NaN", 3);
        else if (isinf(v->u.f))
            jinja__buf_put(w->b, v->u.f < 0 ? "-Infinity" : "Infinity", v->u.f < 0 ? 9 : 8);
        else
            jinja__put_float(w->b, v->u.f);
        return 0;
    case JK_STR:
        jinja__put_json_string(w->b, v->u.s.p, v->u.s.n, w->o->ensure_ascii);
        return 0;
    case JK_LIST:
        return put_json_list(w, v, depth);
    case JK_DICT:
        return put_json_dict(w, v, depth);
    default:
        dd_errf(w->err, w->errlen, "Object of type %s is not JSON serializable",
                v->kind == JK_UNDEF ? "Undefined" : jinja__type_name(v));
        return -1;
    }
}

/* Entry point; err receives Python's message when a value cannot be written. */
int jinja__put_json(struct jinja__buf *b, const jinja_value *v, const struct jinja__json_opts *o,
                    char *err, size_t errlen)
{
    struct json_walk w = {.b = b, .o = o, .err = err, .errlen = errlen};
    return put_json_value(&w, v, 0);
}
