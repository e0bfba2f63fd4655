/*
 * schema_re — the `pattern` keyword: a regular expression (a documented subset of Python's
 * re, which python-jsonschema uses) translated into the GBNF of the JSON string contents that
 * match it, escapes included.
 *
 * The subset: literals (UTF-8), escapes \. \\ \/ \- \^ \$ \| \( \) \[ \] \{ \} \* \+ \? \n \r
 * \t, classes [a-z_] and [^...] (with escapes inside), \d \w \s (as their ASCII sets: subsets
 * of Python's Unicode ones), `.`, groups ( ) and (?: ), alternation |, the quantifiers * + ?
 * {m} {m,} {m,n} (a lazy ? after one is accepted: same language), and ^ / $ at the very start
 * and end. Refused: backreferences, lookarounds and other (? groups, \D \W \S \b \B and other
 * escapes, anchors inside the pattern.
 *
 * What is generated is the anchored match (^...$) whether or not the pattern is anchored: a
 * string that matches in full also contains a match, so it is valid under re.search. Negated
 * classes and `.` leave out '"', '\' and the control characters (they would need JSON escapes);
 * literals and positive classes that name them get their escapes. Inside the XML tool-call
 * form (schema_impl.h, enum schema_text) '<' is treated the same way in JSON (the escape
 * \u003c); in a raw parameter value classes leave '<' out and a literal '<' is refused.
 *
 * Thread safety: no shared state.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched/gram.h" // defines: GRAM_MAX_REPEAT
#include "engine/util.h"       // defines: struct dd_buf, dd_errf
#include "schema_impl.h"       // defines: schema__pattern

#define RE_MAX_DEPTH 32

struct re {
    const char *s;
    size_t n, i;
    struct dd_buf *e;
    enum schema_text mode;
    char *err;
    size_t errlen;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void re_fail(struct re *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    r->failed = true;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dd_errf(r->err, r->errlen, "'pattern' at offset %zu: %s", r->i, msg);
}

/* One UTF-8 character of the pattern. */
static int32_t re_char(struct re *r)
{
    const unsigned char *s = (const unsigned char *)r->s;
    unsigned char b = s[r->i];
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (!len || r->i + (size_t)len > r->n) {
        re_fail(r, "invalid UTF-8");
        return -1;
    }
    uint32_t cp = len == 1 ? b : b & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++)
        cp = cp << 6 | (s[r->i + k] & 0x3F);
    r->i += (size_t)len;
    return (int32_t)cp;
}

/* Code point c inside a string, as a GBNF literal: its JSON text (with escapes), or itself in
 * RAW mode, where '<' cannot be. */
static void emit_char(struct re *r, uint32_t c)
{
    struct dd_buf *e = r->e;
    if (r->mode == SCHEMA_TEXT_RAW && c == '<')
        re_fail(r, "a literal '<' cannot be generated in a parameter of the XML tool-call form");
    else if (r->mode == SCHEMA_TEXT_RAW)
        dd_buf_printf(e, "\"\\U%08x\" ", c);
    else if (c == '"')
        dd_buf_puts(e, "\"\\\\\\\"\" ");
    else if (c == '\\')
        dd_buf_puts(e, "\"\\\\\\\\\" ");
    else if (c == '\n')
        dd_buf_puts(e, "\"\\\\n\" ");
    else if (c == '\t')
        dd_buf_puts(e, "\"\\\\t\" ");
    else if (c == '\r')
        dd_buf_puts(e, "\"\\\\r\" ");
    else if (c < 0x20 || (c == '<' && r->mode == SCHEMA_TEXT_JSON_XML))
        dd_buf_printf(e, "\"\\\\u%04x\" ", c);
    else
        dd_buf_printf(e, "\"\\U%08x\" ", c);
}

/* A set of code points as sorted (lo, hi) pairs. */
struct cset {
    uint32_t r[2 * 64];
    int n;
};

static void cset_add(struct re *r, struct cset *c, uint32_t lo, uint32_t hi)
{
    if (c->n == 64) {
        re_fail(r, "a class with more than 64 ranges");
        return;
    }
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
}

static int pair_cmp(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Emit a set: its plain part as one GBNF class ('"', '\' and the controls cut out), and, for a
 * positive set, those special members as escape literals. neg: the complement (then the
 * specials are left out: a subset of what the class matches). */
static void emit_set(struct re *r, struct cset *c, bool neg)
{
    qsort(c->r, (size_t)c->n, 2 * sizeof *c->r, pair_cmp);
    struct cset m = {0}; /* merged, then complemented when neg */
    for (int k = 0; k < c->n; k++) {
        if (m.n && c->r[2 * k] <= m.r[2 * m.n - 1] + 1) {
            if (c->r[2 * k + 1] > m.r[2 * m.n - 1])
                m.r[2 * m.n - 1] = c->r[2 * k + 1];
        } else {
            m.r[2 * m.n] = c->r[2 * k];
            m.r[2 * m.n + 1] = c->r[2 * k + 1];
            m.n++;
        }
    }
    if (neg) {
        struct cset x = {0};
        uint32_t lo = 0;
        for (int k = 0; k < m.n; k++) {
            if (m.r[2 * k] > lo)
                cset_add(r, &x, lo, m.r[2 * k] - 1);
            lo = m.r[2 * k + 1] + 1;
        }
        if (lo <= 0x10FFFF)
            cset_add(r, &x, lo, 0x10FFFF);
        m = x;
    }
    /* the ranges without what needs an escape: controls, '"', '\' (and '<' in the XML form);
     * raw text cuts '<' only */
    static const uint32_t cut_json[] = {0x22, 0x5c, 0x110000},
                          cut_xml[] = {0x22, 0x3c, 0x5c, 0x110000}, cut_raw[] = {0x3c, 0x110000};
    const uint32_t *cuts = r->mode == SCHEMA_TEXT_JSON       ? cut_json
                           : r->mode == SCHEMA_TEXT_JSON_XML ? cut_xml
                                                             : cut_raw;
    uint32_t floor_cp = r->mode == SCHEMA_TEXT_RAW ? 0 : 0x20;
    struct dd_buf cls = {0};
    for (int k = 0; k < m.n; k++) {
        uint32_t a = m.r[2 * k] < floor_cp ? floor_cp : m.r[2 * k], hi = m.r[2 * k + 1];
        for (int j = 0; a <= hi; j++) {
            uint32_t b = cuts[j] - 1 < hi ? cuts[j] - 1 : hi;
            if (a <= b)
                dd_buf_printf(&cls, "\\U%08x-\\U%08x", a, b);
            if (cuts[j] + 1 > a)
                a = cuts[j] + 1;
            if (cuts[j] == 0x110000)
                break;
        }
    }
    int alts = 0;
    dd_buf_puts(r->e, "( ");
    if (cls.len) {
        dd_buf_puts(r->e, "[");
        dd_buf_put(r->e, cls.p, cls.len);
        dd_buf_puts(r->e, "] ");
        alts++;
    }
    dd_buf_free(&cls);
    for (int k = 0; k < m.n && !neg && r->mode != SCHEMA_TEXT_RAW; k++)
        for (uint32_t ch = m.r[2 * k]; ch <= m.r[2 * k + 1] && ch <= 0x5c; ch++)
            if (ch < 0x20 || ch == 0x22 || ch == 0x5c ||
                (ch == 0x3c && r->mode == SCHEMA_TEXT_JSON_XML)) {
                dd_buf_puts(r->e, alts++ ? "| " : "");
                emit_char(r, ch);
            }
    if (!alts)
        re_fail(r, r->mode == SCHEMA_TEXT_RAW
                       ? "a class that matches no character but '<' (which a parameter of the "
                         "XML tool-call form cannot carry)"
                       : "a class that matches no character a JSON string can carry");
    dd_buf_puts(r->e, ") ");
}

/* \d \w \s into c; false for an escape that is not a class. */
static bool shorthand(struct re *r, char k, struct cset *c)
{
    switch (k) {
    case 'd':
        cset_add(r, c, '0', '9');
        return true;
    case 'w':
        cset_add(r, c, '0', '9');
        cset_add(r, c, 'A', 'Z');
        cset_add(r, c, 'a', 'z');
        cset_add(r, c, '_', '_');
        return true;
    case 's':
        cset_add(r, c, '\t', '\r');
        cset_add(r, c, ' ', ' ');
        return true;
    default:
        return false;
    }
}

/* An escaped literal character after '\'; -1 (and an error) for unsupported escapes. */
static int32_t re_escape(struct re *r, char k)
{
    switch (k) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    default:
        if (k && strchr(".\\/-^$|()[]{}*+?\"'", k))
            return k;
        re_fail(r, "the escape '\\%c' is not supported", k ? k : '0');
        return -1;
    }
}

static void re_class(struct re *r)
{
    r->i++; /* [ */
    bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg)
        r->i++;
    struct cset c = {0};
    bool first = true;
    while (!r->failed) {
        if (r->i >= r->n) {
            re_fail(r, "unterminated class");
            return;
        }
        if (r->s[r->i] == ']' && !first) {
            r->i++;
            break;
        }
        first = false;
        int32_t lo;
        if (r->s[r->i] == '\\') {
            char k = r->i + 1 < r->n ? r->s[r->i + 1] : 0;
            r->i += 2;
            if (shorthand(r, k, &c))
                continue;
            lo = re_escape(r, k);
        } else {
            lo = re_char(r);
        }
        int32_t hi = lo;
        if (!r->failed && r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                char k = r->i + 1 < r->n ? r->s[r->i + 1] : 0;
                r->i += 2;
                hi = re_escape(r, k);
            } else {
                hi = re_char(r);
            }
            if (!r->failed && hi < lo)
                re_fail(r, "a range runs backwards");
        }
        if (!r->failed)
            cset_add(r, &c, (uint32_t)lo, (uint32_t)hi);
    }
    if (!r->failed)
        emit_set(r, &c, neg);
}

static void re_alt(struct re *r, int depth);

static void re_quant(struct re *r)
{
    if (r->i >= r->n)
        return;
    char q = r->s[r->i];
    if (q == '*' || q == '+' || q == '?') {
        dd_buf_printf(r->e, "%c ", q);
        r->i++;
    } else if (q == '{') {
        size_t end = r->i + 1;
        unsigned long lo = 0, hi = 0;
        int got = 0;
        char buf[32];
        while (end < r->n && r->s[end] != '}' && end - r->i < sizeof buf)
            end++;
        if (end >= r->n || r->s[end] != '}') {
            re_fail(r, "unterminated {m,n}");
            return;
        }
        memcpy(buf, r->s + r->i + 1, end - r->i - 1);
        buf[end - r->i - 1] = 0;
        if (sscanf(buf, "%lu,%lu%n", &lo, &hi, &got) == 2 && (size_t)got == strlen(buf)) {
        } else if (sscanf(buf, "%lu,%n", &lo, &got) == 1 && (size_t)got == strlen(buf)) {
            hi = ULONG_MAX;
        } else if (sscanf(buf, "%lu%n", &lo, &got) == 1 && (size_t)got == strlen(buf)) {
            hi = lo;
        } else {
            re_fail(r, "a malformed {m,n}");
            return;
        }
        if (lo > GRAM_MAX_REPEAT || (hi != ULONG_MAX && (hi > GRAM_MAX_REPEAT || hi < lo))) {
            re_fail(r, "{m,n} must have m <= n <= %d", GRAM_MAX_REPEAT);
            return;
        }
        if (hi == ULONG_MAX)
            dd_buf_printf(r->e, "{%lu,} ", lo);
        else
            dd_buf_printf(r->e, "{%lu,%lu} ", lo, hi);
        r->i = end + 1;
    } else {
        return;
    }
    if (r->i < r->n && r->s[r->i] == '?') /* lazy: the same language */
        r->i++;
    if (r->i < r->n && strchr("*+?{", r->s[r->i]))
        re_fail(r, "a quantifier follows a quantifier");
}

static void re_seq(struct re *r, int depth)
{
    dd_buf_puts(r->e, "( ");
    while (!r->failed && r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        if (c == '$' && r->i + 1 == r->n && depth == 0) {
            r->i++;
            break;
        }
        if (c == '^' || c == '$') {
            re_fail(r, "anchors are supported only at the start and the end");
            return;
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            re_fail(r, "a quantifier with nothing to repeat");
            return;
        }
        if (c == '(') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == '?') {
                if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                    r->i += 2;
                } else {
                    re_fail(r, "lookarounds and other (? groups are not supported");
                    return;
                }
            }
            if (depth + 1 >= RE_MAX_DEPTH) {
                re_fail(r, "groups nested deeper than %d", RE_MAX_DEPTH);
                return;
            }
            re_alt(r, depth + 1);
            if (r->i >= r->n || r->s[r->i] != ')') {
                re_fail(r, "unclosed '('");
                return;
            }
            r->i++;
        } else if (c == '[') {
            re_class(r);
        } else if (c == '.') {
            r->i++;
            struct cset nl = {0};
            cset_add(r, &nl, '\n', '\n');
            emit_set(r, &nl, true);
        } else if (c == '\\') {
            char k = r->i + 1 < r->n ? r->s[r->i + 1] : 0;
            r->i += 2;
            struct cset cs = {0};
            if (shorthand(r, k, &cs)) {
                emit_set(r, &cs, false);
            } else {
                int32_t ch = re_escape(r, k);
                if (ch >= 0)
                    emit_char(r, (uint32_t)ch);
            }
        } else {
            int32_t ch = re_char(r);
            if (ch >= 0)
                emit_char(r, (uint32_t)ch);
        }
        re_quant(r);
    }
    dd_buf_puts(r->e, ") ");
}

static void re_alt(struct re *r, int depth)
{
    dd_buf_puts(r->e, "( ");
    re_seq(r, depth);
    while (!r->failed && r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        dd_buf_puts(r->e, "| ");
        re_seq(r, depth);
    }
    dd_buf_puts(r->e, ") ");
}

int schema__pattern(const char *re, enum schema_text mode, struct dd_buf *e, char *err,
                    size_t errlen)
{
    struct re r = {.s = re, .n = strlen(re), .e = e, .mode = mode, .err = err, .errlen = errlen};
    if (r.n > 4096) {
        dd_errf(err, errlen, "'pattern' is longer than 4096 bytes");
        return -1;
    }
    if (r.n && re[0] == '^')
        r.i = 1;
    re_alt(&r, 0);
    if (!r.failed && r.i < r.n)
        re_fail(&r, "unmatched ')'");
    return r.failed ? -1 : 0;
}
