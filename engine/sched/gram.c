/*
 * gram — the grammar compiler: GBNF text to the element arrays of gram_impl.h, and the cache of
 * compiled grammars (contract in gram.h; the matcher and the masks are gram_match.c).
 *
 * The parser is a recursive descent over the text bounded by GRAM_MAX_NEST nested groups; every
 * rule and every generated rule is a symbol whose body collects elements with GEL_ALT markers
 * between alternatives until flattening. Repetitions become generated rules: x* is
 * R ::= x R | (empty), x+ is x R*, x? is R ::= x | (empty), x{m,n} is m copies of x then a chain
 * of n - m nested optionals. Errors carry the line and column where parsing stopped; undefined
 * rules are reported at their first use. After flattening, a rule that can reach itself without
 * consuming a character (left recursion) is an error, since the matcher would expand it forever.
 *
 * Thread safety: gram_compile has no shared state; the cache has a mutex.
 */
#include "gram.h" // defines: gram_compile, gram_cache_get

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, xrealloc, DD_EINVAL
#include "gram_impl.h"   // defines: struct gram, struct gram_el, GEL_*

#define GEL_ALT 3 /* parse-time separator of alternatives */
#define NONE UINT32_MAX

/* ---- parser state ------------------------------------------------------------------------- */

struct psym {
    const char *name; /* into the text; NULL for a generated rule */
    size_t nlen;
    bool defined;
    size_t ref_at;      /* offset of the first reference (for "undefined rule" errors) */
    struct gram_el *el; /* body with GEL_ALT separators */
    uint32_t n, cap;
};

struct prs {
    const char *s;
    size_t n, i;
    char *err;
    size_t errlen;
    bool failed;
    struct psym *sym;
    uint32_t n_sym, cap_sym;
    uint32_t *tab; /* name hash table of symbol indices, NONE = empty */
    uint32_t tab_cap;
    struct gram_cls *cls;
    uint32_t n_cls, cap_cls;
    uint32_t *rng; /* (lo, hi) pairs */
    uint32_t n_rng, cap_rng;
    uint32_t single[128]; /* class index of each one-ASCII-character class, NONE = none yet */
    uint64_t n_el_total;
};

/* Report the first error only, at offset `at`, as "line L, column C: ...". */
__attribute__((format(printf, 3, 4))) static void fail_at(struct prs *p, size_t at, const char *fmt,
                                                          ...)
{
    if (p->failed)
        return;
    p->failed = true;
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)p->s[k] & 0xC0) != 0x80) {
            col++;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dd_errf(p->err, p->errlen, "line %d, column %d: %s", line, col, msg);
}

static uint32_t new_sym(struct prs *p, const char *name, size_t nlen)
{
    if (p->n_sym >= GRAM_MAX_RULES) {
        fail_at(p, p->i, "more than %d rules", GRAM_MAX_RULES);
        return 0;
    }
    if (p->n_sym == p->cap_sym) {
        p->cap_sym = p->cap_sym ? 2 * p->cap_sym : 64;
        p->sym = xrealloc(p->sym, p->cap_sym * sizeof *p->sym);
    }
    p->sym[p->n_sym] = (struct psym){.name = name, .nlen = nlen, .ref_at = p->i};
    return p->n_sym++;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < n; k++)
        h = (h ^ (unsigned char)s[k]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The symbol of a rule name, created on first sight (a reference before the definition). */
static uint32_t sym_of(struct prs *p, const char *name, size_t nlen)
{
    if (p->n_sym * 2 >= p->tab_cap) { /* grow and rehash */
        uint32_t cap = p->tab_cap ? 2 * p->tab_cap : 256;
        uint32_t *t = xmalloc(cap * sizeof *t);
        memset(t, 0xFF, cap * sizeof *t);
        for (uint32_t k = 0; k < p->tab_cap; k++) {
            uint32_t v = p->tab[k];
            if (v == NONE)
                continue;
            uint64_t h = hash_bytes(p->sym[v].name, p->sym[v].nlen) & (cap - 1);
            while (t[h] != NONE)
                h = (h + 1) & (cap - 1);
            t[h] = v;
        }
        free(p->tab);
        p->tab = t;
        p->tab_cap = cap;
    }
    uint64_t h = hash_bytes(name, nlen) & (p->tab_cap - 1);
    for (; p->tab[h] != NONE; h = (h + 1) & (p->tab_cap - 1)) {
        const struct psym *y = &p->sym[p->tab[h]];
        if (y->nlen == nlen && memcmp(y->name, name, nlen) == 0)
            return p->tab[h];
    }
    uint32_t v = new_sym(p, name, nlen);
    if (!p->failed)
        p->tab[h] = v;
    return v;
}

static void emit(struct prs *p, uint32_t sym, uint8_t kind, uint32_t arg)
{
    if (p->failed)
        return;
    if (++p->n_el_total > GRAM_MAX_ELEMS) {
        fail_at(p, p->i, "the grammar expands to more than %u elements", GRAM_MAX_ELEMS);
        return;
    }
    struct psym *y = &p->sym[sym];
    if (y->n == y->cap) {
        y->cap = y->cap ? 2 * y->cap : 8;
        y->el = xrealloc(y->el, y->cap * sizeof *y->el);
    }
    y->el[y->n++] = (struct gram_el){kind, arg};
}

/* ---- character classes -------------------------------------------------------------------- */

static int rng_cmp(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* A class from pairs[0 .. 2 * np) (any order, may overlap), complemented when neg. */
static uint32_t add_cls(struct prs *p, uint32_t *pairs, uint32_t np, bool neg)
{
    if (np)
        qsort(pairs, np, 2 * sizeof *pairs, rng_cmp);
    uint32_t m = 0; /* merge in place */
    for (uint32_t k = 0; k < np; k++) {
        if (m && pairs[2 * k] <= pairs[2 * (m - 1) + 1] + 1) {
            if (pairs[2 * k + 1] > pairs[2 * (m - 1) + 1])
                pairs[2 * (m - 1) + 1] = pairs[2 * k + 1];
        } else {
            pairs[2 * m] = pairs[2 * k];
            pairs[2 * m + 1] = pairs[2 * k + 1];
            m++;
        }
    }
    uint32_t need = p->n_rng + m + 1;
    if (need > p->cap_rng) {
        p->cap_rng = need * 2;
        p->rng = xrealloc(p->rng, 2 * p->cap_rng * sizeof *p->rng);
    }
    struct gram_cls c = {.r0 = p->n_rng};
    uint32_t *out = p->rng + 2 * p->n_rng, lo = 0;
    for (uint32_t k = 0; k < m; k++) {
        if (!neg) {
            out[2 * c.nr] = pairs[2 * k];
            out[2 * c.nr + 1] = pairs[2 * k + 1];
            c.nr++;
        } else if (pairs[2 * k] > lo) {
            out[2 * c.nr] = lo;
            out[2 * c.nr + 1] = pairs[2 * k] - 1;
            c.nr++;
        }
        lo = pairs[2 * k + 1] + 1;
    }
    if (neg && lo <= 0x10FFFF) {
        out[2 * c.nr] = lo;
        out[2 * c.nr + 1] = 0x10FFFF;
        c.nr++;
    }
    p->n_rng += c.nr;
    for (uint32_t k = 0; k < c.nr; k++)
        for (uint32_t cp = out[2 * k]; cp <= out[2 * k + 1] && cp < 128; cp++)
            c.ascii[cp / 32] |= 1u << (cp % 32);
    if (p->n_cls == p->cap_cls) {
        p->cap_cls = p->cap_cls ? 2 * p->cap_cls : 64;
        p->cls = xrealloc(p->cls, p->cap_cls * sizeof *p->cls);
    }
    p->cls[p->n_cls] = c;
    return p->n_cls++;
}

static uint32_t single_cls(struct prs *p, uint32_t cp)
{
    if (cp < 128 && p->single[cp] != NONE)
        return p->single[cp];
    uint32_t pr[2] = {cp, cp};
    uint32_t c = add_cls(p, pr, 1, false);
    if (cp < 128)
        p->single[cp] = c;
    return c;
}

/* ---- lexing ------------------------------------------------------------------------------- */

static bool at_end(const struct prs *p)
{
    return p->i >= p->n || p->failed;
}

static void skip_ws(struct prs *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else {
            break;
        }
    }
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static size_t name_len(const struct prs *p, size_t at)
{
    size_t k = at;
    while (k < p->n && name_char(p->s[k]))
        k++;
    return k - at;
}

/* Does a rule definition (`name ::=`) start at offset at? */
static bool rule_starts(const struct prs *p, size_t at)
{
    size_t k = at + name_len(p, at);
    if (k == at)
        return false;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t' || p->s[k] == '\n' || p->s[k] == '\r'))
        k++;
    return k + 3 <= p->n && memcmp(p->s + k, "::=", 3) == 0;
}

/* One UTF-8 character of the text; -1 (and an error) when malformed. */
static int32_t utf8_char(struct prs *p)
{
    const unsigned char *s = (const unsigned char *)p->s;
    unsigned char b = s[p->i];
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || p->i + (size_t)len > p->n) {
        fail_at(p, p->i, "invalid UTF-8");
        return -1;
    }
    uint32_t cp = len == 1 ? b : b & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((s[p->i + k] & 0xC0) != 0x80) {
            fail_at(p, p->i, "invalid UTF-8");
            return -1;
        }
        cp = cp << 6 | (s[p->i + k] & 0x3F);
    }
    p->i += (size_t)len;
    return (int32_t)cp;
}

static int32_t hex_digits(struct prs *p, int n)
{
    uint32_t v = 0;
    for (int k = 0; k < n; k++, p->i++) {
        char c = p->i < p->n ? p->s[p->i] : 0;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            fail_at(p, p->i, "expected %d hex digits", n);
            return -1;
        }
        v = v * 16 + (uint32_t)d;
    }
    if (v > 0x10FFFF) {
        fail_at(p, p->i, "code point U+%X is beyond U+10FFFF", v);
        return -1;
    }
    return (int32_t)v;
}

/* One character of a literal or class, escapes decoded; -1 after an error. */
static int32_t lit_char(struct prs *p)
{
    if (p->i >= p->n) {
        fail_at(p, p->i, "unexpected end of grammar");
        return -1;
    }
    if (p->s[p->i] == '\n' || p->s[p->i] == '\r') {
        fail_at(p, p->i, "line break inside a literal or class (write \\n)");
        return -1;
    }
    if (p->s[p->i] != '\\')
        return utf8_char(p);
    size_t at = p->i++;
    char c = p->i < p->n ? p->s[p->i++] : 0;
    switch (c) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'x':
        return hex_digits(p, 2);
    case 'u':
        return hex_digits(p, 4);
    case 'U':
        return hex_digits(p, 8);
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '/':
    case '^':
        return c;
    default:
        fail_at(p, at, "unknown escape '\\%c'", c ? c : '0');
        return -1;
    }
}

/* ---- syntax ------------------------------------------------------------------------------- */

static void parse_alts(struct prs *p, uint32_t sym, int depth);

static void parse_literal(struct prs *p, uint32_t sym)
{
    p->i++; /* the opening quote */
    while (!p->failed) {
        if (p->i >= p->n) {
            fail_at(p, p->i, "unterminated string literal");
            return;
        }
        if (p->s[p->i] == '"') {
            p->i++;
            return;
        }
        int32_t cp = lit_char(p);
        if (cp >= 0)
            emit(p, sym, GEL_CHAR, single_cls(p, (uint32_t)cp));
    }
}

static void parse_class(struct prs *p, uint32_t sym)
{
    size_t at = p->i++;
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg)
        p->i++;
    uint32_t *pairs = NULL, np = 0, cap = 0;
    while (!p->failed) {
        if (p->i >= p->n) {
            fail_at(p, at, "unterminated character class");
            break;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        int32_t lo = lit_char(p), hi = lo;
        if (!p->failed && p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = lit_char(p);
            if (!p->failed && hi < lo)
                fail_at(p, p->i, "range end below range start");
        }
        if (p->failed)
            break;
        if (np == cap) {
            cap = cap ? 2 * cap : 8;
            pairs = xrealloc(pairs, 2 * cap * sizeof *pairs);
        }
        pairs[2 * np] = (uint32_t)lo;
        pairs[2 * np + 1] = (uint32_t)hi;
        np++;
    }
    if (!p->failed && np == 0 && !neg)
        fail_at(p, at, "empty character class");
    if (!p->failed)
        emit(p, sym, GEL_CHAR, add_cls(p, pairs, np, neg));
    free(pairs);
}

/* A generated rule whose single alternative is el[0 .. n). */
static uint32_t wrap_rule(struct prs *p, const struct gram_el *el, uint32_t n)
{
    uint32_t r = new_sym(p, NULL, 0);
    p->sym[r].defined = true;
    for (uint32_t k = 0; k < n && !p->failed; k++)
        emit(p, r, el[k].kind, el[k].arg);
    return r;
}

/* R ::= x R | (empty), or with star false R ::= x | (empty). */
static uint32_t rep_rule(struct prs *p, struct gram_el x, bool star, uint32_t tail)
{
    uint32_t r = new_sym(p, NULL, 0);
    p->sym[r].defined = true;
    emit(p, r, x.kind, x.arg);
    if (star)
        emit(p, r, GEL_REF, r);
    else if (tail != NONE)
        emit(p, r, GEL_REF, tail);
    emit(p, r, GEL_ALT, 0);
    return r;
}

static bool parse_count(struct prs *p, uint32_t *v)
{
    size_t at = p->i;
    uint64_t x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && x <= GRAM_MAX_REPEAT)
        x = x * 10 + (uint64_t)(p->s[p->i++] - '0');
    if (p->i == at) {
        fail_at(p, at, "expected a number");
        return false;
    }
    if (x > GRAM_MAX_REPEAT) {
        fail_at(p, at, "repetition count above %d", GRAM_MAX_REPEAT);
        return false;
    }
    *v = (uint32_t)x;
    return true;
}

/* {m}, {m,}, {m,n}: *hi = NONE for no upper bound. */
static bool parse_braces(struct prs *p, uint32_t *lo, uint32_t *hi)
{
    size_t at = p->i++;
    skip_ws(p);
    if (!parse_count(p, lo))
        return false;
    skip_ws(p);
    *hi = *lo;
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        skip_ws(p);
        *hi = NONE;
        if (p->i < p->n && p->s[p->i] != '}' && !parse_count(p, hi))
            return false;
        skip_ws(p);
    }
    if (p->i >= p->n || p->s[p->i] != '}') {
        fail_at(p, at, "expected '}' closing the repetition");
        return false;
    }
    p->i++;
    if (*hi != NONE && *hi < *lo) {
        fail_at(p, at, "repetition {%u,%u} has its maximum below its minimum", *lo, *hi);
        return false;
    }
    return true;
}

/* Apply a postfix operator to the atom el[a0 .. n) of sym. */
static void repeat_atom(struct prs *p, uint32_t sym, uint32_t a0)
{
    char op = p->s[p->i];
    uint32_t lo = 0, hi = NONE;
    if (op == '{') {
        if (!parse_braces(p, &lo, &hi))
            return;
    } else {
        p->i++;
        lo = op == '+' ? 1 : 0;
        hi = op == '?' ? 1 : NONE;
    }
    struct psym *y = &p->sym[sym];
    uint32_t n = y->n - a0;
    struct gram_el x = n == 1 ? y->el[a0] : (struct gram_el){GEL_REF, 0};
    if (n != 1) {
        struct gram_el *copy = xmalloc((n ? n : 1) * sizeof *copy);
        if (n)
            memcpy(copy, y->el + a0, n * sizeof *copy);
        x.arg = wrap_rule(p, copy, n);
        free(copy);
    }
    p->sym[sym].n = a0;
    for (uint32_t k = 0; k < lo && !p->failed; k++)
        emit(p, sym, x.kind, x.arg);
    if (hi == NONE) {
        emit(p, sym, GEL_REF, rep_rule(p, x, true, NONE));
    } else if (hi > lo) {
        uint32_t tail = NONE; /* O_k ::= x O_(k-1) | (empty) */
        for (uint32_t k = 0; k < hi - lo && !p->failed; k++)
            tail = rep_rule(p, x, false, tail);
        emit(p, sym, GEL_REF, tail);
    }
}

static void parse_seq(struct prs *p, uint32_t sym, int depth)
{
    for (;;) {
        skip_ws(p);
        if (at_end(p))
            return;
        char c = p->s[p->i];
        if (c == '|' || c == ')' || (depth == 0 && rule_starts(p, p->i)))
            return;
        uint32_t a0 = p->sym[sym].n;
        size_t at = p->i;
        if (c == '"') {
            parse_literal(p, sym);
        } else if (c == '[') {
            parse_class(p, sym);
        } else if (c == '.') {
            p->i++;
            uint32_t all[2] = {0, 0x10FFFF};
            emit(p, sym, GEL_CHAR, add_cls(p, all, 1, false));
        } else if (c == '(') {
            if (depth + 1 >= GRAM_MAX_NEST) {
                fail_at(p, at, "groups nested deeper than %d", GRAM_MAX_NEST);
                return;
            }
            p->i++;
            uint32_t g = new_sym(p, NULL, 0);
            if (p->failed)
                return;
            p->sym[g].defined = true;
            parse_alts(p, g, depth + 1);
            skip_ws(p);
            if (!p->failed && (p->i >= p->n || p->s[p->i] != ')'))
                fail_at(p, at, "unclosed '('");
            p->i++;
            emit(p, sym, GEL_REF, g);
        } else if (name_len(p, p->i) > 0) {
            size_t nl = name_len(p, p->i);
            uint32_t r = sym_of(p, p->s + p->i, nl);
            p->i += nl;
            emit(p, sym, GEL_REF, r);
        } else {
            fail_at(p, at, "unexpected character '%c'", c);
            return;
        }
        if (p->failed)
            return;
        skip_ws(p);
        while (!at_end(p) &&
               (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' || p->s[p->i] == '{')) {
            repeat_atom(p, sym, a0);
            skip_ws(p);
        }
    }
}

static void parse_alts(struct prs *p, uint32_t sym, int depth)
{
    parse_seq(p, sym, depth);
    while (!at_end(p) && p->s[p->i] == '|') {
        p->i++;
        emit(p, sym, GEL_ALT, 0);
        parse_seq(p, sym, depth);
    }
}

static void parse_grammar(struct prs *p)
{
    for (;;) {
        skip_ws(p);
        if (at_end(p))
            return;
        size_t at = p->i, nl = name_len(p, p->i);
        if (!nl || !rule_starts(p, at)) {
            fail_at(p, at, "expected a rule definition 'name ::= ...'");
            return;
        }
        uint32_t r = sym_of(p, p->s + at, nl);
        if (p->failed)
            return;
        if (p->sym[r].defined) {
            fail_at(p, at, "rule '%.*s' is defined twice", (int)(nl > 64 ? 64 : nl), p->s + at);
            return;
        }
        p->sym[r].defined = true;
        p->i = at + nl;
        skip_ws(p);
        p->i += 3; /* ::= */
        parse_alts(p, r, 0);
        if (!at_end(p) && p->s[p->i] == ')')
            fail_at(p, p->i, "unmatched ')'");
    }
}

/* ---- flattening and checks ---------------------------------------------------------------- */

static void flatten(struct prs *p, gram_t *g)
{
    uint32_t n_el = 0, n_alt = 0;
    for (uint32_t r = 0; r < p->n_sym; r++) {
        n_alt++;
        n_el += p->sym[r].n + 1;
        for (uint32_t k = 0; k < p->sym[r].n; k++)
            n_alt += p->sym[r].el[k].kind == GEL_ALT;
    }
    g->el = xmalloc(n_el * sizeof *g->el);
    g->alt = xmalloc(n_alt * sizeof *g->alt);
    g->rule_alt0 = xmalloc(p->n_sym * sizeof *g->rule_alt0);
    g->rule_nalt = xcalloc(p->n_sym, sizeof *g->rule_nalt);
    g->n_rule = p->n_sym;
    for (uint32_t r = 0; r < p->n_sym; r++) {
        g->rule_alt0[r] = g->n_alt;
        g->alt[g->n_alt++] = g->n_el;
        g->rule_nalt[r] = 1;
        for (uint32_t k = 0; k < p->sym[r].n; k++) {
            struct gram_el e = p->sym[r].el[k];
            if (e.kind == GEL_ALT) {
                g->el[g->n_el++] = (struct gram_el){GEL_END, 0};
                g->alt[g->n_alt++] = g->n_el;
                g->rule_nalt[r]++;
            } else {
                g->el[g->n_el++] = e;
            }
        }
        g->el[g->n_el++] = (struct gram_el){GEL_END, 0};
    }
    g->cls = p->cls;
    g->n_cls = p->n_cls;
    g->ranges = p->rng;
    g->n_ranges = p->n_rng;
    p->cls = NULL;
    p->rng = NULL;
}

/* Rules that can match the empty string (fixpoint). */
static bool *nullable_rules(const gram_t *g)
{
    bool *nul = xcalloc(g->n_rule, sizeof *nul), changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rule; r++) {
            for (uint32_t a = 0; a < g->rule_nalt[r] && !nul[r]; a++) {
                uint32_t k = g->alt[g->rule_alt0[r] + a];
                while (g->el[k].kind == GEL_REF && nul[g->el[k].arg])
                    k++;
                if (g->el[k].kind == GEL_END)
                    nul[r] = changed = true;
            }
        }
    }
    return nul;
}

/* The rule on a cycle of "may start with" edges, or NONE. Iterative DFS (no recursion depth
 * tied to the grammar's size). */
static uint32_t left_recursive(const gram_t *g)
{
    bool *nul = nullable_rules(g);
    uint8_t *color = xcalloc(g->n_rule, 1);
    struct frame {
        uint32_t r, a, k; /* rule, alternative, element within it */
    } *st = xmalloc(((size_t)g->n_rule + 1) * sizeof *st);
    uint32_t found = NONE;
    for (uint32_t r0 = 0; r0 < g->n_rule && found == NONE; r0++) {
        if (color[r0])
            continue;
        uint32_t n = 0;
        st[n++] = (struct frame){r0, 0, g->alt[g->rule_alt0[r0]]};
        color[r0] = 1;
        while (n && found == NONE) {
            struct frame *f = &st[n - 1];
            if (f->a >= g->rule_nalt[f->r]) {
                color[f->r] = 2;
                n--;
                continue;
            }
            struct gram_el e = g->el[f->k];
            bool next_alt = e.kind != GEL_REF || !nul[e.arg];
            uint32_t s = e.arg;
            if (next_alt) {
                f->a++;
                if (f->a < g->rule_nalt[f->r])
                    f->k = g->alt[g->rule_alt0[f->r] + f->a];
            } else {
                f->k++;
            }
            if (e.kind != GEL_REF)
                continue;
            if (color[s] == 1)
                found = s;
            else if (color[s] == 0) {
                color[s] = 1;
                st[n++] = (struct frame){s, 0, g->alt[g->rule_alt0[s]]};
            }
        }
    }
    free(st);
    free(color);
    free(nul);
    return found;
}

static void gram_free(gram_t *g)
{
    free(g->el);
    free(g->alt);
    free(g->rule_alt0);
    free(g->rule_nalt);
    free(g->cls);
    free(g->ranges);
    gram__mcache_free(g->mc);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void prs_free(struct prs *p)
{
    for (uint32_t r = 0; r < p->n_sym; r++)
        free(p->sym[r].el);
    free(p->sym);
    free(p->tab);
    free(p->cls);
    free(p->rng);
}

/* After parsing: every referenced rule defined, a root rule. */
static void check_symbols(struct prs *p, gram_t *g, const char *start)
{
    size_t sl = strlen(start);
    for (uint32_t r = 0; r < p->n_sym && !p->failed; r++)
        if (!p->sym[r].defined)
            fail_at(p, p->sym[r].ref_at, "undefined rule '%.*s'",
                    (int)(p->sym[r].nlen > 64 ? 64 : p->sym[r].nlen), p->sym[r].name);
    g->root = NONE;
    for (uint32_t r = 0; r < p->n_sym && !p->failed; r++)
        if (p->sym[r].name && p->sym[r].nlen == sl && memcmp(p->sym[r].name, start, sl) == 0)
            g->root = r;
    if (!p->failed && g->root == NONE)
        fail_at(p, p->n, "no '%.64s' rule", start);
}

int gram_compile(const char *text, size_t len, const char *start, gram_t **out, char *err,
                 size_t errlen)
{
    start = start ? start : "root";
    double t0 = dd_now();
    *out = NULL;
    struct prs p = {.s = text, .n = len, .err = err, .errlen = errlen};
    memset(p.single, 0xFF, sizeof p.single);
    if (len > GRAM_MAX_TEXT) {
        dd_errf(err, errlen, "the grammar has %zu bytes; the limit is %u", len, GRAM_MAX_TEXT);
        return DD_EINVAL;
    }
    parse_grammar(&p);
    gram_t *g = xcalloc(1, sizeof *g);
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    if (!p.failed)
        check_symbols(&p, g, start);
    if (!p.failed) {
        flatten(&p, g);
        uint32_t lr = left_recursive(g);
        if (lr != NONE) {
            const struct psym *y = &p.sym[lr];
            if (y->name)
                dd_errf(err, errlen,
                        "line 1, column 1: rule '%.*s' is left-recursive (it can reach itself "
                        "without reading a character)",
                        (int)(y->nlen > 64 ? 64 : y->nlen), y->name);
            else
                dd_errf(err, errlen,
                        "line 1, column 1: a group or repetition is left-recursive (e.g. a "
                        "repetition of something that can match nothing)");
            p.failed = true;
        }
    }
    prs_free(&p);
    gram__note_compile(dd_now() - t0, !p.failed);
    if (p.failed) {
        gram_free(g);
        return DD_EINVAL;
    }
    *out = g;
    return 0;
}

void gram_retain(gram_t *g)
{
    atomic_fetch_add(&g->refs, 1);
}

void gram_release(gram_t *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        gram_free(g);
}

uint64_t gram_hash(const char *text, size_t len)
{
    return hash_bytes(text, len);
}

/* ---- the compile cache -------------------------------------------------------------------- */

struct gram_centry {
    uint64_t h, tick;
    char *text, *start;
    size_t len;
    gram_t *g;
};

struct gram_cache {
    pthread_mutex_t mu;
    struct gram_centry *e; /* [cap] */
    int cap, n;
    uint64_t tick;
};

gram_cache_t *gram_cache_create(int cap)
{
    gram_cache_t *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->cap = cap > 0 ? cap : 1;
    c->e = xcalloc((size_t)c->cap, sizeof *c->e);
    return c;
}

static gram_t *cache_find(gram_cache_t *c, uint64_t h, const char *text, size_t len,
                          const char *start)
{
    for (int k = 0; k < c->n; k++) {
        struct gram_centry *e = &c->e[k];
        if (e->h == h && e->len == len && memcmp(e->text, text, len) == 0 &&
            strcmp(e->start, start) == 0) {
            e->tick = ++c->tick;
            gram_retain(e->g);
            return e->g;
        }
    }
    return NULL;
}

int gram_cache_get(gram_cache_t *c, const char *text, size_t len, const char *start, gram_t **out,
                   char *err, size_t errlen)
{
    start = start ? start : "root";
    uint64_t h = gram_hash(text, len);
    pthread_mutex_lock(&c->mu);
    *out = cache_find(c, h, text, len, start);
    pthread_mutex_unlock(&c->mu);
    if (*out)
        return 0;
    gram_t *g;
    int rc =
        gram_compile(text, len, start, &g, err, errlen); /* outside the lock: may take a while */
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    int slot = c->n < c->cap ? c->n++ : 0;
    for (int k = 0; k < c->n && c->n == c->cap; k++)
        if (c->e[k].tick < c->e[slot].tick)
            slot = k;
    struct gram_centry *e = &c->e[slot];
    if (e->g) {
        gram_release(e->g);
        free(e->text);
        free(e->start);
    }
    e->start = xstrdup(start);
    e->h = h;
    e->tick = ++c->tick;
    e->text = xmalloc(len + 1);
    if (len)
        memcpy(e->text, text, len);
    e->len = len;
    e->g = g;
    gram_retain(g);
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return 0;
}

void gram_cache_destroy(gram_cache_t *c)
{
    if (!c)
        return;
    for (int k = 0; k < c->n; k++) {
        gram_release(c->e[k].g);
        free(c->e[k].text);
        free(c->e[k].start);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
