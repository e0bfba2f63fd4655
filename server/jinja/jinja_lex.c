/*
 * jinja_lex — turns template source into tokens, the way jinja2's lexer does.
 *
 * Text between tags becomes TK_DATA after whitespace control:
 *   - "{%-", "{{-", "{#-" strip all whitespace (Python's str.isspace) before the tag;
 *   - "-%}", "-}}", "-#}" strip all whitespace after it;
 *   - trim_blocks drops one "\n" right after "%}" or "#}" (not after "+%}", not after "}}");
 *   - lstrip_blocks removes spaces and tabs (any whitespace) between the start of a line and a
 *     "{%" or "{#" tag ("{%+" opts out; "{{" never strips). "The start of a line" is the start
 *     of the text after a newline, or the text right after a tag whose match ended with "\n"
 *     (or the template start) — the exact rule jinja2 uses, including its quirks.
 * {% raw %}...{% endraw %} yields its body as data (the raw start tag never trims a newline).
 * Inside tags, "%}" / "}}" only end the tag when every bracket opened in it is closed.
 *
 * Invariants: the source is already newline-normalized ("\r\n" and "\r" became "\n") and lives
 * in the template arena, so DATA and NAME tokens point into it; unescaped STRING values are
 * copied to the arena. Token positions are 1-based line and byte column.
 *
 * Threads: pure function of its arguments.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xrealloc, dd_errf, DD_EINVAL
#include "jinja_impl.h"  // defines: jinja__tok, jinja__arena, jinja__space_*

#define MAX_BRACKETS 256

struct lexer {
    const char *s;
    size_t n, pos;
    const struct jinja_opts *o;
    struct jinja__arena *ar;
    struct jinja__tok *toks; /* owned until handed out */
    size_t ntok, cap;
    int line_starting;              /* the previous match ended with "\n" */
    size_t cur_pos, cur_line_start; /* incremental line/column cursor */
    uint32_t cur_line;
    char closers[MAX_BRACKETS];
    int depth;
    char *err;
    size_t errlen;
};

/* ==== positions and errors =================================================================== */

/*
 * Line and column of pos. Tokens are emitted in source order, so an incremental cursor makes this
 * linear over the whole template.
 */
static void locate(struct lexer *lx, size_t pos, uint32_t *line, uint32_t *col)
{
    for (; lx->cur_pos < pos; lx->cur_pos++) {
        if (lx->s[lx->cur_pos] == '\n') {
            lx->cur_line++;
            lx->cur_line_start = lx->cur_pos + 1;
        }
    }
    *line = lx->cur_line;
    *col = (uint32_t)(pos - lx->cur_line_start + 1);
}

/* Formats "line:col: message" into the caller's buffer; returns DD_EINVAL. */
static int lex_fail(struct lexer *lx, size_t pos, const char *fmt, const char *arg)
{
    uint32_t line, col;
    locate(lx, pos, &line, &col);
    char msg[200];
    snprintf(msg, sizeof(msg), fmt, arg);
    dd_errf(lx->err, lx->errlen, "%u:%u: %s", line, col, msg);
    return DD_EINVAL;
}

/* Appends a zeroed token of type at pos. */
static struct jinja__tok *emit(struct lexer *lx, int type, size_t pos)
{
    if (lx->ntok == lx->cap) {
        lx->cap = lx->cap ? lx->cap * 2 : 256;
        lx->toks = xrealloc(lx->toks, lx->cap * sizeof(*lx->toks));
    }
    struct jinja__tok *t = &lx->toks[lx->ntok++];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    locate(lx, pos, &t->line, &t->col);
    return t;
}

/* Does the source at pos start with lit? */
static int at(const struct lexer *lx, size_t pos, const char *lit)
{
    size_t k = strlen(lit);
    return pos <= lx->n && lx->n - pos >= k && memcmp(lx->s + pos, lit, k) == 0;
}

/* Position after the whitespace run at pos. */
static size_t skip_space(const struct lexer *lx, size_t pos)
{
    return pos + jinja__space_prefix(lx->s + pos, lx->n - pos);
}

/* ==== text between tags ====================================================================== */

/*
 * Emits the data s[from, to) ending at a tag whose start is "{"+kind and whose whitespace sign
 * is sign ('-', '+' or 0), after {%- and lstrip_blocks stripping.
 */
static void emit_text(struct lexer *lx, size_t from, size_t to, char kind, char sign)
{
    if (sign == '-') {
        to -= jinja__space_suffix(lx->s + from, to - from);
    } else if (sign != '+' && lx->o->lstrip_blocks && kind != '{') {
        size_t l = to;
        while (l > from && lx->s[l - 1] != '\n')
            l--;
        int has_nl = l > from;
        if ((has_nl || lx->line_starting) && l < to &&
            jinja__space_prefix(lx->s + l, to - l) == to - l)
            to = l;
    }
    if (to > from) {
        struct jinja__tok *t = emit(lx, TK_DATA, from);
        t->s = lx->s + from;
        t->n = to - from;
    }
}

/* After a closing "%}", "#}" or "-%}": the position past it and what it swallowed. */
static size_t close_tag(struct lexer *lx, size_t pos, char sign, size_t len, int trims)
{
    pos += len;
    if (sign == '-') {
        size_t end = skip_space(lx, pos);
        lx->line_starting = end > pos ? lx->s[end - 1] == '\n' : 0;
        return end;
    }
    if (sign == 0 && trims && lx->o->trim_blocks && pos < lx->n && lx->s[pos] == '\n') {
        lx->line_starting = 1;
        return pos + 1;
    }
    lx->line_starting = 0;
    return pos;
}

/* Matches "+X}", "-X}" or "X}" (X = '%' or '#') at pos; returns the length, sets *sign. */
static size_t end_marker(const struct lexer *lx, size_t pos, char x, char *sign)
{
    char t[4] = {0, x, '}', 0};
    t[0] = '+';
    if (at(lx, pos, t)) {
        *sign = '+';
        return 3;
    }
    t[0] = '-';
    if (at(lx, pos, t)) {
        *sign = '-';
        return 3;
    }
    *sign = 0;
    return at(lx, pos, t + 1) ? 2 : 0;
}

/*
 * Finds the end of a comment: the first "+#}", "-#}" or "#}" (jinja2's lazy match), with the same
 * trimming as a block end.
 */
static int lex_comment(struct lexer *lx, size_t start)
{
    for (size_t q = lx->pos; q < lx->n; q++) {
        char sign;
        size_t len = end_marker(lx, q, '#', &sign);
        if (len) {
            lx->pos = close_tag(lx, q, sign, len, 1);
            return 0;
        }
    }
    return lex_fail(lx, start, "%s", "Missing end of comment tag");
}

/* "{%[-+]? raw [-]?%}" at pos: returns the position after it (0 when it is not one). */
static size_t raw_begin(struct lexer *lx, size_t pos, char *sign)
{
    size_t p = pos + 2;
    *sign = 0;
    if (p < lx->n && (lx->s[p] == '-' || lx->s[p] == '+'))
        *sign = lx->s[p++];
    p = skip_space(lx, p);
    if (!at(lx, p, "raw"))
        return 0;
    p = skip_space(lx, p + 3);
    if (at(lx, p, "-%}"))
        return skip_space(lx, p + 3);
    return at(lx, p, "%}") ? p + 2 : 0;
}

/* "{%[-+]? endraw <end>" at q: returns the position after it, or 0. */
static size_t raw_end(struct lexer *lx, size_t q, char *sign)
{
    size_t p = q + 2;
    *sign = 0;
    if (p < lx->n && (lx->s[p] == '-' || lx->s[p] == '+'))
        *sign = lx->s[p++];
    p = skip_space(lx, p);
    if (!at(lx, p, "endraw"))
        return 0;
    p = skip_space(lx, p + 6);
    char esign;
    size_t len = end_marker(lx, p, '%', &esign);
    if (!len)
        return 0;
    return close_tag(lx, p, esign, len, 1);
}

/*
 * The body of {% raw %}: everything up to the first {% endraw %} tag, emitted as data after the
 * usual whitespace control of the endraw tag.
 */
static int lex_raw(struct lexer *lx, size_t start, size_t body)
{
    lx->line_starting = lx->s[body - 1] == '\n';
    for (size_t q = body; q + 1 < lx->n; q++) {
        if (lx->s[q] != '{' || lx->s[q + 1] != '%')
            continue;
        char sign;
        int was_starting = lx->line_starting;
        size_t end = raw_end(lx, q, &sign);
        if (!end) {
            lx->line_starting = was_starting;
            continue;
        }
        int after = lx->line_starting;
        lx->line_starting = was_starting;
        emit_text(lx, body, q, '%', sign);
        lx->line_starting = after;
        lx->pos = end;
        return 0;
    }
    return lex_fail(lx, start, "%s", "Missing end of raw directive");
}

/* ==== inside tags ============================================================================ */

/* ASCII only, like Python's tokenizer here. */
static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Identifier characters; bytes >= 0x80 are accepted so that non-ASCII identifiers (which jinja2
 * allows) lex as names.
 */
static int is_name_char(unsigned char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80 ||
           (!first && is_digit((char)c));
}

/* Value of a hexadecimal digit, 99 for anything else. */
static int digit_value(char c)
{
    char l = (char)(c | 0x20);
    return is_digit(c) ? c - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : 99;
}

/* Digits with single underscores between them ("1_000"); returns the end. */
static size_t digit_run(const struct lexer *lx, size_t p)
{
    if (p >= lx->n || !is_digit(lx->s[p]))
        return p;
    while (p < lx->n) {
        if (is_digit(lx->s[p]))
            p++;
        else if (lx->s[p] == '_' && p + 1 < lx->n && is_digit(lx->s[p + 1]))
            p++;
        else
            break;
    }
    return p;
}

/* Copies s[a, b) without underscores into buf (cap bytes); 0 when it does not fit. */
static int strip_underscores(const char *s, size_t a, size_t b, char *buf, size_t cap)
{
    size_t k = 0;
    for (size_t i = a; i < b; i++) {
        if (s[i] == '_')
            continue;
        if (k + 1 >= cap)
            return 0;
        buf[k++] = s[i];
    }
    buf[k] = 0;
    return 1;
}

/* A float needs a fraction or an exponent: 1.5, 1e3, 1.5e-3 (never right after a '.'). */
static size_t float_end(const struct lexer *lx, size_t p)
{
    if (p > 0 && lx->s[p - 1] == '.')
        return 0;
    size_t q = digit_run(lx, p), frac = 0;
    if (q == p)
        return 0;
    if (q + 1 < lx->n && lx->s[q] == '.' && is_digit(lx->s[q + 1]))
        frac = digit_run(lx, q + 1);
    size_t e = frac ? frac : q;
    if (e < lx->n && (lx->s[e] == 'e' || lx->s[e] == 'E')) {
        size_t x = e + 1;
        if (x < lx->n && (lx->s[x] == '+' || lx->s[x] == '-'))
            x++;
        size_t xe = digit_run(lx, x);
        if (xe > x)
            return xe;
    }
    return frac;
}

/* Integers (decimal, 0x, 0o, 0b, with underscores) and floats; integers must fit in int64. */
static int lex_number(struct lexer *lx, size_t *pp)
{
    size_t p = *pp, end = float_end(lx, p);
    char buf[400];
    if (end) {
        if (!strip_underscores(lx->s, p, end, buf, sizeof(buf)))
            return lex_fail(lx, p, "%s", "number literal too long");
        struct jinja__tok *t = emit(lx, TK_FLOAT, p);
        t->f = strtod(buf, NULL);
        *pp = end;
        return 0;
    }
    int base = 10;
    size_t digits = p;
    char pfx = p + 1 < lx->n && lx->s[p] == '0' ? (char)(lx->s[p + 1] | 0x20) : 0;
    if (pfx == 'x' || pfx == 'o' || pfx == 'b') {
        base = pfx == 'x' ? 16 : pfx == 'o' ? 8 : 2;
        digits = p + 2;
    }
    end = digits;
    while (end < lx->n && (lx->s[end] == '_' || digit_value(lx->s[end]) < base))
        end++;
    if (base == 10 && lx->s[p] == '0') /* "0", "00": a leading zero takes only zeros */
        for (end = p + 1; end < lx->n && (lx->s[end] == '0' || lx->s[end] == '_'); end++)
            ;
    if (end == digits || !strip_underscores(lx->s, digits, end, buf, sizeof(buf)))
        return lex_fail(lx, p, "%s", "invalid number literal");
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    if (errno || v > INT64_MAX)
        return lex_fail(lx, p, "%s", "integer literal too large");
    emit(lx, TK_INT, p)->i = (int64_t)v;
    *pp = end;
    return 0;
}

/* Reads up to n hex digits; returns how many there were. */
static size_t hex_value(const char *s, size_t n, uint32_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = digit_value(s[i]);
        if (d >= 16)
            return i;
        *v = *v * 16 + (uint32_t)d;
    }
    return n;
}

/* One escape after a backslash at s[i] (Python's unicode-escape); returns the chars consumed
 * after the backslash, or 0 for a malformed \x, \u or \U escape. */
static size_t unescape_one(struct jinja__buf *b, const char *s, size_t n, size_t i)
{
    static const char from[] = "\\'\"abfnrtv", to[] = "\\'\"\a\b\f\n\r\t\v";
    char c = s[i];
    const char *hit = c ? strchr(from, c) : NULL;
    if (hit) {
        jinja__buf_putc(b, to[hit - from]);
        return 1;
    }
    if (c == '\n')
        return 1;
    if (c >= '0' && c <= '7') {
        uint32_t v = 0;
        size_t k = 0;
        while (k < 3 && i + k < n && s[i + k] >= '0' && s[i + k] <= '7')
            v = v * 8 + (uint32_t)(s[i + k++] - '0');
        jinja__utf8_put(b, v);
        return k;
    }
    size_t want = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!want) { /* unknown escapes keep their backslash */
        jinja__buf_putc(b, '\\');
        jinja__buf_putc(b, c);
        return 1;
    }
    uint32_t v;
    if (n - i - 1 < want || hex_value(s + i + 1, want, &v) != want || v > 0x10ffff)
        return 0;
    jinja__utf8_put(b, v);
    return want + 1;
}

/* A quoted string with Python's escapes; the value is unescaped into the arena. */
static int lex_string(struct lexer *lx, size_t *pp)
{
    size_t p = *pp, q = p + 1;
    char quote = lx->s[p];
    while (q < lx->n && lx->s[q] != quote)
        q += lx->s[q] == '\\' ? 2 : 1;
    if (q >= lx->n)
        return lex_fail(lx, p, "%s", "unterminated string literal");
    struct jinja__buf b = {.limit = (size_t)-1};
    for (size_t i = p + 1; i < q; i++) {
        if (lx->s[i] != '\\') {
            jinja__buf_putc(&b, lx->s[i]);
            continue;
        }
        size_t k = unescape_one(&b, lx->s, q, i + 1);
        if (!k) {
            jinja__buf_free(&b);
            return lex_fail(lx, i, "%s", "malformed \\x, \\u or \\U escape");
        }
        i += k;
    }
    struct jinja__tok *t = emit(lx, TK_STRING, p);
    t->s = jinja__arena_dup(lx->ar, b.d.p ? b.d.p : "", b.d.len);
    t->n = b.d.len;
    jinja__buf_free(&b);
    *pp = q + 1;
    return 0;
}

static const struct {
    const char *text;
    uint8_t op;
} OPS[] = {
    {"//", OP_FDIV},  {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {">=", OP_GE},
    {"<=", OP_LE},    {"+", OP_ADD},    {"-", OP_SUB},      {"/", OP_DIV},      {"*", OP_MUL},
    {"%", OP_MOD},    {"~", OP_TILDE},  {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN},
    {")", OP_RPAREN}, {"{", OP_LBRACE}, {"}", OP_RBRACE},   {"=", OP_ASSIGN},   {"<", OP_LT},
    {">", OP_GT},     {".", OP_DOT},    {":", OP_COLON},    {"|", OP_PIPE},     {",", OP_COMMA},
    {";", OP_SEMI},
};

/* Keeps brackets balanced: "%}" and "}}" only close a tag at depth 0. */
static int balance(struct lexer *lx, size_t p, char c)
{
    const char *open = "([{", *close = ")]}";
    const char *o = strchr(open, c), *x = strchr(close, c);
    if (o) {
        if (lx->depth == MAX_BRACKETS)
            return lex_fail(lx, p, "%s", "brackets nested too deeply");
        lx->closers[lx->depth++] = close[o - open];
    } else if (x) {
        char got[2] = {c, 0};
        if (lx->depth == 0)
            return lex_fail(lx, p, "unexpected '%s'", got);
        if (lx->closers[--lx->depth] != c)
            return lex_fail(lx, p, "unexpected '%s'", got);
    }
    return 0;
}

/* The longest operator at *pp (two-character ones are listed first in OPS). */
static int lex_operator(struct lexer *lx, size_t *pp)
{
    size_t p = *pp;
    for (size_t i = 0; i < sizeof(OPS) / sizeof(OPS[0]); i++) {
        if (!at(lx, p, OPS[i].text))
            continue;
        if (balance(lx, p, lx->s[p]) != 0)
            return DD_EINVAL;
        emit(lx, TK_OP, p)->op = OPS[i].op;
        *pp = p + strlen(OPS[i].text);
        return 0;
    }
    char got[2] = {lx->s[p], 0};
    return lex_fail(lx, p, "unexpected char '%s'", got);
}

/* The end of the tag at p, if there is one: sets *end past it and emits the end token. */
static int tag_end(struct lexer *lx, size_t p, int block, size_t *end)
{
    if (lx->depth)
        return 0;
    char sign;
    size_t len = block ? end_marker(lx, p, '%', &sign) : 0;
    if (!block) {
        sign = at(lx, p, "-}}") ? '-' : 0;
        len = sign ? 3 : at(lx, p, "}}") ? 2 : 0;
    }
    if (!len)
        return 0;
    emit(lx, block ? TK_BLOCK_END : TK_VAR_END, p);
    *end = close_tag(lx, p, sign, len, block);
    return 1;
}

/*
 * The inside of a {% %} or {{ }} tag: whitespace-separated names, numbers, strings and operators
 * up to the closing marker.
 */
static int lex_tag(struct lexer *lx, size_t start, int block)
{
    size_t p = lx->pos;
    lx->depth = 0;
    for (;;) {
        if (p >= lx->n)
            return lex_fail(lx, start, "%s",
                            block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'");
        if (tag_end(lx, p, block, &lx->pos))
            return 0;
        size_t sp = skip_space(lx, p);
        if (sp > p) {
            p = sp;
            continue;
        }
        unsigned char c = (unsigned char)lx->s[p];
        int rc = 0;
        if (is_digit((char)c)) {
            rc = lex_number(lx, &p);
        } else if (is_name_char(c, 1)) {
            size_t q = p;
            while (q < lx->n && is_name_char((unsigned char)lx->s[q], 0))
                q++;
            struct jinja__tok *t = emit(lx, TK_NAME, p);
            t->s = lx->s + p;
            t->n = q - p;
            p = q;
        } else if (c == '\'' || c == '"') {
            rc = lex_string(lx, &p);
        } else {
            rc = lex_operator(lx, &p);
        }
        if (rc)
            return rc;
    }
}

/* ==== the root state ========================================================================= */

/* Position of the next "{{", "{%" or "{#" at or after pos, or n. */
static size_t next_tag(const struct lexer *lx, size_t pos)
{
    for (size_t p = pos; p + 1 < lx->n; p++) {
        const char *q = memchr(lx->s + p, '{', lx->n - p - 1);
        if (!q)
            break;
        p = (size_t)(q - lx->s);
        char k = lx->s[p + 1];
        if (k == '{' || k == '%' || k == '#')
            return p;
    }
    return lx->n;
}

/* Alternates between text and tags until the end of the source, then emits TK_EOF. */
static int lex_root(struct lexer *lx)
{
    while (lx->pos < lx->n) {
        size_t p = next_tag(lx, lx->pos);
        if (p == lx->n) {
            emit_text(lx, lx->pos, lx->n, 0, '+');
            break;
        }
        char kind = lx->s[p + 1];
        char sign =
            p + 2 < lx->n && (lx->s[p + 2] == '-' || lx->s[p + 2] == '+') ? lx->s[p + 2] : 0;
        char rsign;
        size_t body = kind == '%' ? raw_begin(lx, p, &rsign) : 0;
        emit_text(lx, lx->pos, p, kind, sign);
        lx->line_starting = 0;
        lx->pos = p + 2 + (sign ? 1 : 0);
        int rc;
        if (body)
            rc = lex_raw(lx, p, body);
        else if (kind == '#')
            rc = lex_comment(lx, p);
        else {
            emit(lx, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, p);
            rc = lex_tag(lx, p, kind == '%');
        }
        if (rc)
            return rc;
    }
    emit(lx, TK_EOF, lx->n);
    return 0;
}

/* Entry point: the token array is malloc'd (the caller frees it); string values live in ar. */
int jinja__lex(const char *src, size_t n, const struct jinja_opts *o, struct jinja__arena *ar,
               struct jinja__tok **toks, size_t *ntoks, char *err, size_t errlen)
{
    struct lexer lx = {.s = src,
                       .n = n,
                       .o = o,
                       .ar = ar,
                       .line_starting = 1,
                       .cur_line = 1,
                       .err = err,
                       .errlen = errlen};
    int rc = lex_root(&lx);
    if (rc) {
        free(lx.toks);
        return rc;
    }
    *toks = lx.toks;
    *ntoks = lx.ntok;
    return 0;
}
