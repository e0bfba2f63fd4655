/*
 * jinja_text — the byte-level helpers of the Jinja interpreter: the template arena, bounded
 * output buffers, UTF-8 walking, Python's notion of whitespace, Python's float repr and simple
 * case mapping.
 *
 * Invariants: strings are byte strings that should be UTF-8; invalid bytes never stop anything
 * (they decode as themselves). A buffer never grows past its limit: an append that would is
 * dropped and sets `over`, which the render loop turns into an error.
 *
 * Threads: no shared state; each function works on the objects it is given.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, dd_buf_put, dd_errf
#include "jinja_impl.h"  // defines: jinja__buf, jinja__arena, jinja_value internals

/* ==== arena ================================================================================= */

struct jinja__chunk {
    struct jinja__chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_CHUNK 16384

/*
 * Bump allocation from 16 KiB chunks (bigger requests get a chunk of their own); nothing is freed
 * until the template is.
 */
void *jinja__arena_alloc(struct jinja__arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct jinja__chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = xmalloc(sizeof(*c) + cap);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

/* A NUL-terminated copy of s[0..n) in the arena. */
char *jinja__arena_dup(struct jinja__arena *a, const char *s, size_t n)
{
    char *p = jinja__arena_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    return p;
}

/* Frees every chunk; the arena is empty and reusable afterwards. */
void jinja__arena_free(struct jinja__arena *a)
{
    struct jinja__chunk *c = a->head;
    while (c) {
        struct jinja__chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ==== buffers =============================================================================== */

/*
 * Appends s[0..n) unless that would pass the limit: then nothing is appended and the buffer is
 * marked over for good, so a runaway render stops at the next check.
 */
void jinja__buf_put(struct jinja__buf *b, const char *s, size_t n)
{
    if (b->over || n > b->limit - b->d.len) {
        b->over = 1;
        return;
    }
    dd_buf_put(&b->d, s, n);
}

/* One byte; same limit rule. */
void jinja__buf_putc(struct jinja__buf *b, char c)
{
    jinja__buf_put(b, &c, 1);
}

/* Formatted append of short texts (numbers, escapes): at most 255 bytes. */
void jinja__buf_printf(struct jinja__buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        jinja__buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* An empty buffer still yields an allocated "" so callers never see NULL. */
char *jinja__buf_take(struct jinja__buf *b, size_t *len)
{
    return dd_buf_take(&b->d, len);
}

/* Releases the bytes; the limit and the over flag stay. */
void jinja__buf_free(struct jinja__buf *b)
{
    dd_buf_free(&b->d);
}

/* ==== UTF-8 and whitespace ================================================================== */

/*
 * Overlong forms and surrogates are not rejected: templates and messages are trusted to be UTF-8
 * and only need to be walked safely.
 */
size_t jinja__utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
    if (len == 1 || len == 0 || len > n || u[0] > 0xf4) {
        *cp = u[0];
        return 1;
    }
    uint32_t c = u[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *cp = u[0];
            return 1;
        }
        c = (c << 6) | (u[i] & 0x3f);
    }
    *cp = c;
    return len;
}

/* Python's len() of a string: the number of code points. */
size_t jinja__utf8_count(const char *s, size_t n)
{
    size_t k = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; i += jinja__utf8_next(s + i, n - i, &cp))
        k++;
    return k;
}

/* Clamped to n when k is past the end. */
size_t jinja__utf8_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    uint32_t cp;
    while (k-- > 0 && i < n)
        i += jinja__utf8_next(s + i, n - i, &cp);
    return i;
}

/* Encodes one code point (callers pass at most U+10FFFF). */
void jinja__utf8_put(struct jinja__buf *b, uint32_t cp)
{
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        t[0] = (char)(0xf0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    jinja__buf_put(b, t, n);
}

/* White_Space plus U+001C..U+001F, which is what str.isspace(), str.strip() and re's \s use. */
int jinja__is_space(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* Used for {%- stripping, lstrip_blocks and the whitespace runs inside tags. */
size_t jinja__space_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = jinja__utf8_next(s + i, n - i, &cp);
        if (!jinja__is_space(cp))
            break;
        i += l;
    }
    return i;
}

/* Start of the UTF-8 sequence that ends at s[end - 1]. */
static size_t seq_start(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80)
        i--;
    return i;
}

/*
 * Scans backwards sequence by sequence; a stray continuation byte counts as one non-space
 * character.
 */
size_t jinja__space_suffix(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t st = seq_start(s, end);
        uint32_t cp;
        size_t l = jinja__utf8_next(s + st, end - st, &cp);
        if (st + l != end) { /* not a whole sequence: a lone continuation byte */
            st = end - 1;
            cp = (unsigned char)s[st];
        }
        if (!jinja__is_space(cp))
            break;
        end = st;
    }
    return n - end;
}

/* ==== numbers =============================================================================== */

/* Writes the digits d[0..nd) with decimal exponent e (value = d.ddd * 10^e) the way Python's
 * repr does: positional for -4 <= e < 16, scientific otherwise. */
static void put_digits(struct jinja__buf *b, const char *d, int nd, int e)
{
    if (e < -4 || e >= 16) {
        jinja__buf_putc(b, d[0]);
        if (nd > 1) {
            jinja__buf_putc(b, '.');
            jinja__buf_put(b, d + 1, (size_t)nd - 1);
        }
        jinja__buf_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e < 0) {
        jinja__buf_put(b, "0.", 2);
        for (int i = 0; i < -e - 1; i++)
            jinja__buf_putc(b, '0');
        jinja__buf_put(b, d, (size_t)nd);
    } else {
        for (int i = 0; i <= e; i++)
            jinja__buf_putc(b, i < nd ? d[i] : '0');
        jinja__buf_putc(b, '.');
        if (nd > e + 1)
            jinja__buf_put(b, d + e + 1, (size_t)(nd - e - 1));
        else
            jinja__buf_putc(b, '0');
    }
}

/*
 * Finds the shortest %.Ne form that strtod reads back as the same double (what Python's repr
 * guarantees), then lays the digits out the way repr does. Relies on the C locale's '.' decimal
 * point.
 */
void jinja__put_float(struct jinja__buf *b, double v)
{
    if (isnan(v)) {
        jinja__buf_put(b, "nan", 3);
        return;
    }
    if (isinf(v)) {
        jinja__buf_put(b, v < 0 ? "-inf" : "inf", v < 0 ? 4 : 3);
        return;
    }
    if (signbit(v))
        jinja__buf_putc(b, '-');
    v = fabs(v);
    if (v == 0) {
        jinja__buf_put(b, "0.0", 3);
        return;
    }
    /* The shortest %e form that reads back as the same double. */
    char tmp[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    put_digits(b, digits, nd, e);
}

/* ==== case mapping ========================================================================== */

/*
 * Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic — the scripts
 * chat templates meet in practice; other code points are left alone. Returns the mapped code
 * point (upper != 0: to upper case).
 */
static uint32_t map_case(uint32_t c, int upper)
{
    if (c < 0x80) {
        if (upper && c >= 'a' && c <= 'z')
            return c - 32;
        if (!upper && c >= 'A' && c <= 'Z')
            return c + 32;
        return c;
    }
    if (c >= 0xe0 && c <= 0xfe && c != 0xf7 && upper)
        return c - 32;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7 && !upper)
        return c + 32;
    if (c == 0xff && upper)
        return 0x178;
    if (c == 0x178 && !upper)
        return 0xff;
    if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x178 && c != 0x17f) {
        int odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
        int is_lower = odd_lower ? (c & 1) == 0 : (c & 1) == 1;
        if (upper && is_lower)
            return c - 1;
        if (!upper && !is_lower)
            return c + 1;
        return c;
    }
    if (upper && ((c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) || (c >= 0x430 && c <= 0x44f)))
        return c - 32;
    if (upper && c == 0x3c2)
        return 0x3a3;
    if (!upper && ((c >= 0x391 && c <= 0x3a9 && c != 0x3a2) || (c >= 0x410 && c <= 0x42f)))
        return c + 32;
    if (upper && c >= 0x450 && c <= 0x45f)
        return c - 80;
    if (!upper && c >= 0x400 && c <= 0x40f)
        return c + 80;
    return c;
}

/*
 * Has an upper/lower case partner (or is sharp s): Python's notion of a cased character for the
 * scripts mapped here.
 */
int jinja__cp_cased(uint32_t c)
{
    return map_case(c, 1) != c || map_case(c, 0) != c || c == 0xdf;
}

/* One code point in the wanted case; sharp s upper-cases to two letters. */
static void put_cased(struct jinja__buf *b, uint32_t c, int upper)
{
    if (upper && c == 0xdf) { /* German sharp s upper-cases to "SS", as in Python */
        jinja__buf_put(b, "SS", 2);
        return;
    }
    jinja__utf8_put(b, map_case(c, upper));
}

/*
 * str.upper/lower/capitalize/title/swapcase over s; title follows Python's str.title (a letter
 * after a cased letter is lowered, any other letter raised).
 */
void jinja__put_case(struct jinja__buf *b, const char *s, size_t n, int mode)
{
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t l = jinja__utf8_next(s + i, n - i, &c);
        int up;
        switch (mode) {
        case JINJA__UPPER:
            up = 1;
            break;
        case JINJA__LOWER:
            up = 0;
            break;
        case JINJA__CAPITALIZE:
            up = first;
            break;
        case JINJA__SWAPCASE:
            up = map_case(c, 0) == c;
            break;
        default:
            up = !prev_cased;
            break; /* JINJA__TITLE: Python's str.title */
        }
        if (c < 0x80 || jinja__cp_cased(c))
            put_cased(b, c, up);
        else
            jinja__buf_put(b, s + i, l);
        prev_cased = jinja__cp_cased(c);
        first = 0;
        i += l;
    }
}
