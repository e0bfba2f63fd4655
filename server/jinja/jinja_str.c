/*
 * jinja_str — Python's str methods for templates: startswith/endswith (with tuples and
 * bounds), split/rsplit/splitlines, strip/lstrip/rstrip (with chars), replace, the case
 * methods, find/rfind/index/rindex/count, join, format ({} {0} {name} and !r/!s only), the
 * is* predicates, center/ljust/rjust/zfill.
 *
 * Strings are UTF-8 byte strings but behave like Python's: positions, widths and bounds count
 * code points, whitespace is str.isspace(), and the case methods use jinja_text.c's simple
 * mappings (Latin, Greek and Cyrillic; other scripts are left as they are).
 *
 * Invariants: `self` is always a JK_STR (the method was bound to one); results are new
 * references or NULL with the error recorded; output size is bounded by the memory limit.
 *
 * Threads: pure functions of their arguments and the render state.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__args, value helpers

typedef struct jinja__node node;
typedef struct jinja__args args;

/* ==== string helpers ========================================================================= */

/* A string value charged to this render. */
static jinja_value *new_str(struct jinja__rs *rs, const char *s, size_t n)
{
    return jinja__str(&rs->acct, s, n);
}

/* Is code point cp in the chars argument (NULL: whitespace)? */
static int in_chars(const jinja_value *chars, uint32_t cp)
{
    if (!chars)
        return jinja__is_space(cp);
    for (size_t i = 0; i < chars->u.s.n;) {
        uint32_t c;
        i += jinja__utf8_next(chars->u.s.p + i, chars->u.s.n - i, &c);
        if (c == cp)
            return 1;
    }
    return 0;
}

/* Scans forward from lo while in_chars(chars, cp) == match; returns where it stopped. */
static size_t skip_fwd(const char *s, size_t lo, size_t hi, const jinja_value *chars, int match)
{
    while (lo < hi) {
        uint32_t cp;
        size_t l = jinja__utf8_next(s + lo, hi - lo, &cp);
        if (in_chars(chars, cp) != match)
            break;
        lo += l;
    }
    return lo;
}

/* Scans backward from hi while in_chars(chars, cp) == match; returns where it stopped. */
static size_t skip_back(const char *s, size_t lo, size_t hi, const jinja_value *chars, int match)
{
    while (hi > lo) {
        size_t st = hi - 1;
        while (st > lo && hi - st < 4 && ((unsigned char)s[st] & 0xc0) == 0x80)
            st--;
        uint32_t cp;
        if (st + jinja__utf8_next(s + st, hi - st, &cp) != hi) {
            st = hi - 1;
            cp = (unsigned char)s[st];
        }
        if (in_chars(chars, cp) != match)
            break;
        hi = st;
    }
    return hi;
}

/* strip / lstrip / rstrip (which < 0: left only, > 0: right only) with optional chars. */
static jinja_value *m_strip(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                            int which)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "strip", "chars", a, p, 1) < 0)
        return NULL;
    if (p[0] && p[0]->kind == JK_NONE)
        p[0] = NULL;
    if (p[0] && jinja__want_str(rs, at, p[0], "chars") < 0)
        return NULL;
    size_t lo = 0, hi = self->u.s.n;
    if (which <= 0) /* strip or lstrip */
        lo = skip_fwd(self->u.s.p, lo, hi, p[0], 1);
    if (which >= 0) /* strip or rstrip */
        hi = skip_back(self->u.s.p, lo, hi, p[0], 1);
    return new_str(rs, self->u.s.p + lo, hi - lo);
}

/* ==== split family =========================================================================== */

/* Python's str.split / str.rsplit with sep NULL (runs of whitespace) or a separator. */
static void split_ws(struct jinja__rs *rs, jinja_value *out, const char *s, size_t n, int64_t max,
                     int right)
{
    size_t lo = 0, hi = n;
    /* Each round skips a whitespace run, then takes the next word (from the right for rsplit). */
    while (max-- != 0) {
        if (right) {
            hi = skip_back(s, 0, hi, NULL, 1);
            if (hi == 0)
                break;
            size_t st = skip_back(s, 0, hi, NULL, 0);
            jinja__list_push(out, new_str(rs, s + st, hi - st));
            hi = st;
        } else {
            lo = skip_fwd(s, lo, n, NULL, 1);
            if (lo == n)
                break;
            size_t e = skip_fwd(s, lo, n, NULL, 0);
            jinja__list_push(out, new_str(rs, s + lo, e - lo));
            lo = e;
        }
    }
    /* Out of splits: the rest, minus the whitespace on the side already split (Python keeps
     * whitespace on the far side: "a b  c ".split(None, 1) is ['a', 'b  c ']). */
    if (right && (hi = skip_back(s, 0, hi, NULL, 1)) > 0)
        jinja__list_push(out, new_str(rs, s, hi));
    if (!right && (lo = skip_fwd(s, lo, n, NULL, 1)) < n)
        jinja__list_push(out, new_str(rs, s + lo, n - lo));
}

/* Last occurrence of needle in hay[0..n). */
static const char *rmemmem(const char *hay, size_t n, const char *needle, size_t k)
{
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(hay + i, needle, k) == 0)
            return hay + i;
    return NULL;
}

/* Python's split(sep) / rsplit(sep): at most max splits (-1: all), from the left or right. */
static void split_sep(struct jinja__rs *rs, jinja_value *out, const char *s, size_t n,
                      const jinja_value *sep, int64_t max, int right)
{
    size_t lo = 0, hi = n, k = sep->u.s.n;
    while (max-- != 0) {
        const char *hit = right ? rmemmem(s + lo, hi - lo, sep->u.s.p, k)
                                : memmem(s + lo, hi - lo, sep->u.s.p, k);
        if (!hit)
            break;
        size_t at = (size_t)(hit - s); /* byte offset of this separator */
        if (right) {
            jinja__list_push(out, new_str(rs, hit + k, hi - at - k));
            hi = at;
        } else {
            jinja__list_push(out, new_str(rs, s + lo, at - lo));
            lo = at + k;
        }
    }
    jinja__list_push(out, new_str(rs, s + lo, hi - lo)); /* the piece after the last split */
}

/* rsplit collects from the right; this restores left-to-right order. */
static void reverse_items(jinja_value *l)
{
    for (size_t i = 0; i < l->u.l.n / 2; i++) {
        jinja_value *t = l->u.l.v[i];
        l->u.l.v[i] = l->u.l.v[l->u.l.n - 1 - i];
        l->u.l.v[l->u.l.n - 1 - i] = t;
    }
}

/* split / rsplit(sep=None, maxsplit=-1). */
static jinja_value *m_split(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                            int right)
{
    jinja_value *p[2];
    int64_t max;
    if (jinja__bind(rs, at, right ? "rsplit" : "split", "sep,maxsplit", a, p, 2) < 0 ||
        jinja__opt_int(rs, at, p[1], -1, &max) < 0)
        return NULL;
    jinja_value *sep = p[0] && p[0]->kind != JK_NONE ? p[0] : NULL;
    if (sep && jinja__want_str(rs, at, sep, "sep") < 0)
        return NULL;
    if (sep && sep->u.s.n == 0)
        return (jinja__fail(rs, at, "empty separator"), NULL);
    if (jinja__step(rs, self->u.s.n / 16) < 0) /* work proportional to the string */
        return NULL;
    jinja_value *out = jinja__list(&rs->acct, 0, 0);
    if (sep)
        split_sep(rs, out, self->u.s.p, self->u.s.n, sep, max < 0 ? -1 : max, right);
    else
        split_ws(rs, out, self->u.s.p, self->u.s.n, max < 0 ? -1 : max, right);
    if (right)
        reverse_items(out);
    return out;
}

/* Length of the line break at s[i] (Python's str.splitlines boundaries), 0 if none. */
static size_t line_break(const char *s, size_t n, size_t i)
{
    uint32_t cp;
    size_t l = jinja__utf8_next(s + i, n - i, &cp);
    if (cp == '\r') /* "\r\n" is one break */
        return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    int brk = cp == '\n' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
              cp == 0x2028 || cp == 0x2029;
    return brk ? l : 0;
}

/* splitlines(keepends=False). */
static jinja_value *m_splitlines(struct jinja__rs *rs, const node *at, jinja_value *self,
                                 const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "splitlines", "keepends", a, p, 1) < 0)
        return NULL;
    int keep = p[0] && jinja__truthy(p[0]);
    const char *s = self->u.s.p;
    size_t n = self->u.s.n, start = 0;
    jinja_value *out = jinja__list(&rs->acct, 0, 0);
    for (size_t i = 0; i < n;) {
        size_t b = line_break(s, n, i);
        if (!b) {
            uint32_t cp;
            i += jinja__utf8_next(s + i, n - i, &cp);
            continue;
        }
        jinja__list_push(out, new_str(rs, s + start, (keep ? i + b : i) - start));
        i += b;
        start = i;
    }
    if (start < n) /* a final line without a break; a trailing break adds no empty line */
        jinja__list_push(out, new_str(rs, s + start, n - start));
    return out;
}

/* ==== search ================================================================================= */

/* Byte range of the code-point slice [start:end] of self (Python's find/count arguments). */
static int sub_range(struct jinja__rs *rs, const node *at, const jinja_value *self, jinja_value **p,
                     size_t *lo, size_t *hi, int64_t *cp_lo)
{
    int64_t n = (int64_t)jinja__utf8_count(self->u.s.p, self->u.s.n), s, e;
    if (jinja__opt_int(rs, at, p[0], 0, &s) < 0 || jinja__opt_int(rs, at, p[1], n, &e) < 0)
        return -1;
    /* slice-style clamping: negative counts from the end */
    s = s < 0 ? (s + n < 0 ? 0 : s + n) : s > n ? n : s;
    e = e < 0 ? (e + n < 0 ? 0 : e + n) : e > n ? n : e;
    if (e < s)
        e = s;
    *cp_lo = s;
    *lo = jinja__utf8_offset(self->u.s.p, self->u.s.n, (size_t)s);
    *hi = *lo + jinja__utf8_offset(self->u.s.p + *lo, self->u.s.n - *lo, (size_t)(e - s));
    return 0;
}

/* find / rfind / index / rindex / count. */
static jinja_value *m_find(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                           int fn)
{
    jinja_value *p[3];
    size_t lo, hi;
    int64_t cp_lo;
    if (jinja__bind(rs, at, "find", "sub,start,end", a, p, 3) < 0 ||
        jinja__want_str(rs, at, p[0], "sub") < 0 ||
        sub_range(rs, at, self, p + 1, &lo, &hi, &cp_lo) < 0)
        return NULL;
    const char *s = self->u.s.p, *k = p[0]->u.s.p;
    size_t kn = p[0]->u.s.n;
    if (fn == FN_COUNT) { /* non-overlapping matches; "" matches between every code point */
        if (kn == 0)
            return jinja__int(&rs->acct, (int64_t)jinja__utf8_count(s + lo, hi - lo) + 1);
        int64_t c = 0;
        for (const char *h; lo <= hi && (h = memmem(s + lo, hi - lo, k, kn)) != NULL; c++)
            lo = (size_t)(h - s) + kn;
        return jinja__int(&rs->acct, c);
    }
    int right = fn == FN_RFIND || fn == FN_RINDEX;
    const char *h = hi < lo + kn ? NULL
                    : right      ? rmemmem(s + lo, hi - lo, k, kn)
                                 : memmem(s + lo, hi - lo, k, kn);
    if (!h && kn == 0) /* "" is found at the start (find) or the end (rfind) */
        h = right ? s + hi : s + lo;
    if (!h && (fn == FN_INDEX || fn == FN_RINDEX))
        return (jinja__fail(rs, at, "substring not found"), NULL);
    /* the result is a code point index into the whole string */
    int64_t r = h ? cp_lo + (int64_t)jinja__utf8_count(s + lo, (size_t)(h - s) - lo) : -1;
    return jinja__int(&rs->acct, r);
}

/* startswith / endswith: prefix may be a tuple of strings. */
static jinja_value *m_affix(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                            int end)
{
    jinja_value *p[3];
    size_t lo, hi;
    int64_t cp_lo;
    if (jinja__bind(rs, at, end ? "endswith" : "startswith", "prefix,start,end", a, p, 3) < 0 ||
        sub_range(rs, at, self, p + 1, &lo, &hi, &cp_lo) < 0)
        return NULL;
    jinja_value *one[1] = {p[0]};
    jinja_value **cand = one;
    size_t nc = 1;
    if (p[0] && p[0]->kind == JK_LIST && (p[0]->flags & JF_TUPLE)) { /* any of several */
        cand = p[0]->u.l.v;
        nc = p[0]->u.l.n;
    }
    for (size_t i = 0; i < nc; i++) {
        if (jinja__want_str(rs, at, cand[i], "prefix") < 0)
            return NULL;
        size_t k = cand[i]->u.s.n;
        if (k <= hi - lo && memcmp(self->u.s.p + (end ? hi - k : lo), cand[i]->u.s.p, k) == 0)
            return jinja__bool(1);
    }
    return jinja__bool(0);
}

/* replace(old, new, count=-1); an empty old inserts new around every code point, as Python does. */
static jinja_value *m_replace(struct jinja__rs *rs, const node *at, jinja_value *self,
                              const args *a)
{
    jinja_value *p[3];
    int64_t max;
    if (jinja__bind(rs, at, "replace", "old,new,count", a, p, 3) < 0 ||
        jinja__want_str(rs, at, p[0], "old") < 0 || jinja__want_str(rs, at, p[1], "new") < 0 ||
        jinja__opt_int(rs, at, p[2], -1, &max) < 0)
        return NULL;
    const char *s = self->u.s.p;
    size_t n = self->u.s.n, k = p[0]->u.s.n, i = 0;
    struct jinja__buf b = {.limit = rs->acct.limit};
    while (i <= n && max != 0) {
        const char *h = k ? memmem(s + i, n - i, p[0]->u.s.p, k) : s + i;
        if (!h)
            break;
        jinja__buf_put(&b, s + i, (size_t)(h - s) - i);
        jinja__buf_put(&b, p[1]->u.s.p, p[1]->u.s.n);
        i = (size_t)(h - s) + k;
        if (!k && i < n) { /* an empty `old` matches between code points */
            uint32_t cp;
            size_t l = jinja__utf8_next(s + i, n - i, &cp);
            jinja__buf_put(&b, s + i, l);
            i += l;
        } else if (!k) { /* the match after the last code point ends the loop */
            i = n + 1;
        }
        max--;
        if (b.over)
            break;
    }
    if (i < n)
        jinja__buf_put(&b, s + i, n - i);
    return jinja__buf_value(rs, &b);
}

/* ==== other string methods =================================================================== */

/* sep.join(iterable): every item must already be a string (Python's TypeError otherwise). */
static jinja_value *m_join(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a)
{
    jinja_value *p[1];
    if (jinja__bind(rs, at, "join", "iterable", a, p, 1) < 0)
        return NULL;
    jinja_value *l = p[0] ? jinja__iter_list(rs, at, p[0]) : NULL;
    if (!l)
        return p[0] ? NULL : (jinja__fail(rs, at, "join() takes exactly one argument"), NULL);
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; i < l->u.l.n; i++) {
        const jinja_value *item = l->u.l.v[i];
        if (item->kind != JK_STR) {
            jinja__fail(rs, at, "sequence item %zu: expected str instance, %s found", i,
                        jinja__type_name(item));
            break;
        }
        if (i)
            jinja__buf_put(&b, self->u.s.p, self->u.s.n);
        jinja__buf_put(&b, item->u.s.p, item->u.s.n);
    }
    jinja_value_release(l);
    if (rs->failed) {
        jinja__buf_free(&b);
        return NULL;
    }
    return jinja__buf_value(rs, &b);
}

/* One "{field}" of str.format: "", a position, or a keyword; optional !r / !s; no spec. */
static int format_field(struct jinja__rs *rs, const node *at, const args *a, const char *f,
                        size_t n, size_t *auto_idx, struct jinja__buf *b)
{
    int repr = 0;
    if (n >= 2 && f[n - 2] == '!') { /* conversion: !r uses repr(), !s (and none) str() */
        repr = f[n - 1] == 'r';
        n -= 2;
    }
    if (memchr(f, ':', n) || memchr(f, '.', n) || memchr(f, '[', n))
        return jinja__fail(rs, at, "format(): specs and field lookups are not supported");
    const jinja_value *v = NULL;
    if (n == 0 || (f[0] >= '0' && f[0] <= '9')) { /* {} takes the next positional */
        size_t idx = n == 0 ? (*auto_idx)++ : (size_t)strtoul(f, NULL, 10);
        v = idx < a->npos ? a->pos[idx] : NULL;
    } else {
        for (size_t i = 0; i < a->nkw && !v; i++)
            if (a->klen[i] == n && memcmp(a->kname[i], f, n) == 0)
                v = a->kval[i];
    }
    if (!v)
        return jinja__fail(rs, at, "format(): no argument for field '{%.*s}'", (int)n, f);
    if (repr)
        jinja__put_repr(b, v);
    else
        jinja__put_str(b, v);
    return 0;
}

/* str.format with positional, numbered and keyword fields; {{ and }} are literal braces. */
static jinja_value *m_format(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a)
{
    const char *s = self->u.s.p;
    size_t n = self->u.s.n, auto_idx = 0;
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; i < n && !rs->failed; i++) {
        if ((s[i] == '{' || s[i] == '}') && i + 1 < n && s[i + 1] == s[i]) { /* {{ or }} */
            jinja__buf_putc(&b, s[i++]);
        } else if (s[i] == '{') {
            const char *close = memchr(s + i, '}', n - i);
            if (!close)
                jinja__fail(rs, at, "Single '{' encountered in format string");
            else if (format_field(rs, at, a, s + i + 1, (size_t)(close - s) - i - 1, &auto_idx,
                                  &b) == 0)
                i = (size_t)(close - s);
        } else if (s[i] == '}') {
            jinja__fail(rs, at, "Single '}' encountered in format string");
        } else {
            jinja__buf_putc(&b, s[i]);
        }
    }
    if (rs->failed) {
        jinja__buf_free(&b);
        return NULL;
    }
    return jinja__buf_value(rs, &b);
}

/* Python's str.isdigit / isalpha / isalnum / isspace / islower / isupper (approximated
 * outside ASCII: any non-space, non-punctuation code point counts as a letter). */
static jinja_value *m_is(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                         int fn)
{
    if (jinja__bind(rs, at, "is", "", a, NULL, 0) < 0)
        return NULL;
    const char *s = self->u.s.p;
    size_t n = self->u.s.n;
    if (fn == FN_ISLOWER || fn == FN_ISUPPER) { /* cased, and unchanged by lower()/upper() */
        struct jinja__buf b = {.limit = (size_t)-1};
        jinja__put_case(&b, s, n, fn == FN_ISLOWER ? JINJA__LOWER : JINJA__UPPER);
        int cased = 0;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            i += jinja__utf8_next(s + i, n - i, &cp);
            cased |= jinja__cp_cased(cp);
        }
        int r = cased && b.d.len == n && memcmp(b.d.p, s, n) == 0;
        jinja__buf_free(&b);
        return jinja__bool(r);
    }
    int ok = n > 0;
    for (size_t i = 0; i < n && ok;) {
        uint32_t c;
        i += jinja__utf8_next(s + i, n - i, &c);
        int digit = c >= '0' && c <= '9', space = jinja__is_space(c);
        int alpha = c < 0x80 ? ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
                             : !space && !(c >= 0x2000 && c <= 0x206f) &&
                                   !(c >= 0x3000 && c <= 0x303f) && c > 0xbf;
        ok = fn == FN_ISDIGIT   ? digit
             : fn == FN_ISALPHA ? alpha
             : fn == FN_ISALNUM ? alpha || digit
                                : space;
    }
    return jinja__bool(ok);
}

/* center / ljust / rjust / zfill to a width in code points. */
static jinja_value *m_pad(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                          int fn)
{
    jinja_value *p[2];
    int64_t width;
    if (jinja__bind(rs, at, "pad", "width,fillchar", a, p, 2) < 0 ||
        jinja__opt_int(rs, at, p[0], 0, &width) < 0)
        return NULL;
    const char *fill = " ";
    size_t fill_n = 1;
    if (p[1] && jinja__want_str(rs, at, p[1], "fillchar") == 0) {
        fill = p[1]->u.s.p;
        fill_n = p[1]->u.s.n;
    } else if (p[1]) {
        return NULL;
    }
    int64_t len = (int64_t)jinja__utf8_count(self->u.s.p, self->u.s.n);
    int64_t marg = width > len ? width - len : 0, left = 0;
    if (marg > (int64_t)rs->acct.limit)
        return (jinja__fail_limit(rs, "max_memory"), NULL);
    if (fn == FN_CENTER)
        left = marg / 2 + (marg & width & 1);
    else if (fn == FN_RJUST || fn == FN_ZFILL)
        left = marg;
    struct jinja__buf b = {.limit = rs->acct.limit};
    size_t sign = fn == FN_ZFILL && self->u.s.n && strchr("+-", self->u.s.p[0]) ? 1 : 0;
    jinja__buf_put(&b, self->u.s.p, sign);
    for (int64_t i = 0; i < left; i++)
        jinja__buf_put(&b, fn == FN_ZFILL ? "0" : fill, fn == FN_ZFILL ? 1 : fill_n);
    jinja__buf_put(&b, self->u.s.p + sign, self->u.s.n - sign);
    for (int64_t i = left; i < marg; i++)
        jinja__buf_put(&b, fill, fill_n);
    return jinja__buf_value(rs, &b);
}

/* upper, lower, casefold, title, capitalize, swapcase. */
static jinja_value *m_case(struct jinja__rs *rs, const node *at, jinja_value *self, const args *a,
                           int mode)
{
    if (jinja__bind(rs, at, "case", "", a, NULL, 0) < 0)
        return NULL;
    struct jinja__buf b = {.limit = rs->acct.limit};
    jinja__put_case(&b, self->u.s.p, self->u.s.n, mode);
    return jinja__buf_value(rs, &b);
}

/* ==== dispatch =============================================================================== */

/* Dispatch for the string methods (ids from enum jinja__fn). */
jinja_value *jinja__str_method(struct jinja__rs *rs, const node *at, int fn, jinja_value *self,
                               const args *a)
{
    switch (fn) {
    case FN_STARTSWITH:
    case FN_ENDSWITH:
        return m_affix(rs, at, self, a, fn == FN_ENDSWITH);
    case FN_SPLIT:
    case FN_RSPLIT:
        return m_split(rs, at, self, a, fn == FN_RSPLIT);
    case FN_SPLITLINES:
        return m_splitlines(rs, at, self, a);
    case FN_STRIP:
        return m_strip(rs, at, self, a, 0);
    case FN_LSTRIP:
        return m_strip(rs, at, self, a, -1);
    case FN_RSTRIP:
        return m_strip(rs, at, self, a, 1);
    case FN_REPLACE:
        return m_replace(rs, at, self, a);
    case FN_UPPER:
        return m_case(rs, at, self, a, JINJA__UPPER);
    case FN_LOWER:
    case FN_CASEFOLD:
        return m_case(rs, at, self, a, JINJA__LOWER);
    case FN_TITLE:
        return m_case(rs, at, self, a, JINJA__TITLE);
    case FN_CAPITALIZE:
        return m_case(rs, at, self, a, JINJA__CAPITALIZE);
    case FN_SWAPCASE:
        return m_case(rs, at, self, a, JINJA__SWAPCASE);
    case FN_FIND:
    case FN_RFIND:
    case FN_INDEX:
    case FN_RINDEX:
    case FN_COUNT:
        return m_find(rs, at, self, a, fn);
    case FN_JOIN:
        return m_join(rs, at, self, a);
    case FN_FORMAT:
        return m_format(rs, at, self, a);
    case FN_CENTER:
    case FN_LJUST:
    case FN_RJUST:
    case FN_ZFILL:
        return m_pad(rs, at, self, a, fn);
    default:
        return m_is(rs, at, self, a, fn);
    }
}
