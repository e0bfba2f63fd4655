/*
 * jinja_expr — the expression grammar, from the loosest binding to the tightest (jinja2's):
 *   expr     := or ("if" or ("else" expr)?)*          conditional; a missing else is undefined
 *   or       := and ("or" and)*        and := not ("and" not)*       not := "not" not | compare
 *   compare  := math1 (("=="|"!="|"<"|"<="|">"|">="|"in"|"not" "in") math1)*   chained
 *   math1    := concat (("+"|"-") concat)*            concat := math2 ("~" math2)*
 *   math2    := pow (("*"|"/"|"//"|"%") pow)*         pow := unary ("**" unary)*
 *   unary    := ("-"|"+") unary-without-filters | primary; then postfix, then filters/tests
 *   postfix  := "." name | "." int | "[" subscript "]" | "(" args ")"
 *   filters  := ("|" name ("(" args ")")? | "is" "not"? name (args | one primary)?)*
 *   primary  := name | string+ | int | float | "(" tuple ")" | "[" list "]" | "{" dict "}"
 * So `-x|abs` is abs(-x), `a + b|length` adds b's length, and `-2 ** 2` is 4 (as in jinja2).
 *
 * Node fields: NK_ATTR a.s, NK_ITEM a[b], NK_SLICE a:b:c (parts may be NULL), NK_CALL a(kids,
 * kids2 = NK_KW s=a) with b=*args c=**kwargs, NK_FILTER / NK_TEST a|s(kids, kids2) with id
 * the builtin (a NULL: a filter block's body), NK_UNARY op a, NK_BIN a op b, NK_CMP a then
 * kids = NK_OPERAND(op, a), NK_CONCAT kids, NK_COND a if b else c, NK_DICT kids=keys
 * kids2=values, NK_CONST op=kind with i/f/s.
 *
 * Invariants: unknown filters and tests are compile errors (jinja2 reports them when
 * compiling too); every recursive entry goes through jinja__enter, bounding the C stack.
 *
 * Threads: runs inside jinja_compile only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xrealloc, dd_errf, DD_EINVAL
#include "jinja_impl.h"  // defines: jinja__parser, jinja__tok, jinja__node, jinja__lex

typedef struct jinja__node node;

/* ==== expressions ============================================================================ */

/*
 * Unary minus/plus bind their operand without its filters; filters and tests then apply to the
 * whole unary expression.
 */
static node *parse_unary(struct jinja__parser *p, int with_filters);

/* Tokens that end an unparenthesised tuple: the end of the tag, ')' or the extra name. */
static int tuple_end(const struct jinja__parser *p, const char *extra)
{
    int t = jinja__cur(p)->type;
    return t == TK_VAR_END || t == TK_BLOCK_END || t == TK_EOF || jinja__at_op(p, OP_RPAREN) ||
           (extra && jinja__at_name(p, extra));
}

/*
 * Expressions separated by commas; a comma makes a tuple. names_only parses assignment targets
 * (names), with_cond allows "a if b else c", extra is a name that also ends the tuple ("in").
 */
node *jinja__parse_tuple(struct jinja__parser *p, int names_only, int with_cond, const char *extra,
                         int parens)
{
    const struct jinja__tok *at = jinja__cur(p);
    struct jinja__nvec items = {0};
    int is_tuple = 0;
    for (;;) {
        if (items.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        if (tuple_end(p, extra))
            break;
        node *e = names_only ? jinja__parse_primary(p) : jinja__parse_expr(p, with_cond);
        if (!e)
            break;
        jinja__vec_push(&items, e);
        if (!jinja__at_op(p, OP_COMMA))
            break;
        is_tuple = 1;
    }
    if (p->failed) {
        free(items.v);
        return NULL;
    }
    /* One expression without a comma is just that expression; "()" is the empty tuple. */
    if (!is_tuple && items.n == 1) {
        node *only = items.v[0];
        free(items.v);
        return only;
    }
    if (!is_tuple && !parens) {
        free(items.v);
        char buf[64];
        return jinja__perr(p, jinja__cur(p), "Expected an expression, got '%s'",
                           jinja__describe(jinja__cur(p), buf, sizeof(buf)));
    }
    node *n = jinja__mk(p, NK_TUPLE, at);
    n->kids = jinja__vec_finish(p, &items);
    return n;
}

/* [a, b, ...] or {k: v, ...}, trailing comma allowed. */
static node *parse_list_or_dict(struct jinja__parser *p, int dict)
{
    const struct jinja__tok *at = jinja__cur(p);
    int close = dict ? OP_RBRACE : OP_RBRACKET;
    jinja__advance(p);
    struct jinja__nvec keys = {0}, vals = {0};
    while (!p->failed && !jinja__at_op(p, close)) {
        if (keys.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        if (jinja__at_op(p, close))
            break;
        /* After an error the loop ends; a NULL pushed here is never looked at. */
        node *k = jinja__parse_expr(p, 1);
        if (k && dict && jinja__expect_op(p, OP_COLON, ":") == 0)
            jinja__vec_push(&vals, jinja__parse_expr(p, 1));
        jinja__vec_push(&keys, k);
    }
    node *n = NULL;
    if (!p->failed && jinja__expect_op(p, close, dict ? "}" : "]") == 0) {
        n = jinja__mk(p, dict ? NK_DICT : NK_LIST, at);
        n->kids = jinja__vec_finish(p, &keys);
        n->kids2 = jinja__vec_finish(p, &vals);
    }
    free(keys.v);
    free(vals.v);
    return n;
}

/* Numbers, and strings — adjacent string literals are concatenated, as in Python. */
static node *parse_const(struct jinja__parser *p)
{
    const struct jinja__tok *t = jinja__cur(p);
    node *n = jinja__mk(p, NK_CONST, t);
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        n->op = t->type == TK_INT ? JK_INT : JK_FLOAT;
        n->i = t->i;
        n->f = t->f;
        jinja__advance(p);
        return n;
    }
    /* adjacent string literals concatenate */
    struct jinja__buf b = {.limit = (size_t)-1};
    while (jinja__cur(p)->type == TK_STRING) {
        jinja__buf_put(&b, jinja__cur(p)->s, jinja__cur(p)->n);
        jinja__advance(p);
    }
    n->op = JK_STR;
    n->s = jinja__arena_dup(p->ar, b.d.p ? b.d.p : "", b.d.len);
    n->n = b.d.len;
    jinja__buf_free(&b);
    return n;
}

/* true/false/none in either case are constants; every other name is a variable. */
node *jinja__parse_primary(struct jinja__parser *p)
{
    const struct jinja__tok *t = jinja__cur(p);
    if (t->type == TK_NAME) {
        node *n = jinja__mk(p, NK_CONST, t);
        if (jinja__tok_is(t, "true") || jinja__tok_is(t, "True") || jinja__tok_is(t, "false") ||
            jinja__tok_is(t, "False")) {
            n->op = JK_BOOL;
            n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (jinja__tok_is(t, "none") || jinja__tok_is(t, "None")) {
            n->op = JK_NONE;
        } else {
            n->kind = NK_NAME;
            n->s = t->s;
            n->n = t->n;
            /* remembered so the enclosing macro knows it takes extra arguments */
            p->uses |= jinja__tok_is(t, "varargs") ? 1 : jinja__tok_is(t, "kwargs") ? 2 : 0;
        }
        jinja__advance(p);
        return n;
    }
    if (t->type == TK_STRING || t->type == TK_INT || t->type == TK_FLOAT)
        return parse_const(p);
    if (jinja__at_op(p, OP_LPAREN)) { /* (expr) or a tuple */
        jinja__advance(p);
        node *n = jinja__parse_tuple(p, 0, 1, NULL, 1);
        if (n && jinja__expect_op(p, OP_RPAREN, ")") < 0)
            return NULL;
        return n;
    }
    if (jinja__at_op(p, OP_LBRACKET) || jinja__at_op(p, OP_LBRACE))
        return parse_list_or_dict(p, jinja__at_op(p, OP_LBRACE));
    return jinja__unexpected(p);
}

/* Call arguments after "(": positional, name=value, *args, **kwargs. */
static int parse_args(struct jinja__parser *p, node *call)
{
    const struct jinja__tok *open = jinja__cur(p);
    if (jinja__expect_op(p, OP_LPAREN, "(") < 0)
        return -1;
    struct jinja__nvec pos = {0}, kw = {0};
    /* Order rules as in Python: positional, then keywords; *args before **kwargs. */
    while (!p->failed && !jinja__at_op(p, OP_RPAREN)) {
        if ((pos.n || kw.n || call->b || call->c) && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        if (jinja__at_op(p, OP_RPAREN))
            break;
        if (jinja__at_op(p, OP_MUL) || jinja__at_op(p, OP_POW)) {
            int star2 = jinja__at_op(p, OP_POW);
            jinja__advance(p);
            node *e = jinja__parse_expr(p, 1);
            if (star2 ? call->c != NULL : (call->b != NULL || call->c != NULL))
                jinja__perr(p, open, "invalid syntax for function call expression");
            *(star2 ? &call->c : &call->b) = e;
        } else if (jinja__cur(p)->type == TK_NAME && jinja__peek(p)->type == TK_OP &&
                   jinja__peek(p)->op == OP_ASSIGN) { /* name=value */
            node *k = jinja__mk(p, NK_KW, jinja__cur(p));
            k->s = jinja__cur(p)->s;
            k->n = jinja__cur(p)->n;
            jinja__advance(p);
            jinja__advance(p);
            k->a = jinja__parse_expr(p, 1);
            jinja__vec_push(&kw, k);
            if (call->c)
                jinja__perr(p, open, "invalid syntax for function call expression");
        } else {
            if (kw.n || call->b || call->c)
                jinja__perr(p, open, "invalid syntax for function call expression");
            jinja__vec_push(&pos, jinja__parse_expr(p, 1));
        }
    }
    if (!p->failed)
        jinja__expect_op(p, OP_RPAREN, ")");
    call->kids = jinja__vec_finish(p, &pos);
    call->kids2 = jinja__vec_finish(p, &kw);
    return p->failed ? -1 : 0;
}

/* One subscript: an expression or a slice a:b:c with any part omitted. */
static node *parse_subscript(struct jinja__parser *p)
{
    const struct jinja__tok *at = jinja__cur(p);
    node *first = NULL;
    if (!jinja__at_op(p, OP_COLON)) {
        first = jinja__parse_expr(p, 1);
        if (!first || !jinja__at_op(p, OP_COLON))
            return first;
    }
    jinja__advance(p); /* the first ':' */
    node *s = jinja__mk2(p, NK_SLICE, at, first, NULL);
    if (!jinja__at_op(p, OP_RBRACKET) && !jinja__at_op(p, OP_COMMA) && !jinja__at_op(p, OP_COLON))
        s->b = jinja__parse_expr(p, 1);
    if (jinja__at_op(p, OP_COLON)) {
        jinja__advance(p);
        if (!jinja__at_op(p, OP_RBRACKET) && !jinja__at_op(p, OP_COMMA))
            s->c = jinja__parse_expr(p, 1);
    }
    return p->failed ? NULL : s;
}

/* obj[sub] or obj[a, b] (a tuple key). */
static node *parse_item(struct jinja__parser *p, node *obj)
{
    const struct jinja__tok *at = jinja__cur(p);
    jinja__advance(p);
    struct jinja__nvec subs = {0};
    while (!p->failed && !jinja__at_op(p, OP_RBRACKET)) {
        if (subs.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        jinja__vec_push(&subs, parse_subscript(p));
    }
    if (!p->failed)
        jinja__expect_op(p, OP_RBRACKET, "]");
    if (p->failed || subs.n == 0) {
        free(subs.v);
        return p->failed ? NULL : jinja__perr(p, at, "expected subscript expression");
    }
    node *idx = subs.v[0]; /* x[a, b] indexes with the tuple (a, b), as in Python */
    if (subs.n > 1) {
        idx = jinja__mk(p, NK_TUPLE, at);
        idx->kids = jinja__vec_finish(p, &subs);
    }
    free(subs.v);
    return jinja__mk2(p, NK_ITEM, at, obj, idx);
}

/* Attribute access, subscripts and calls, left to right. */
node *jinja__parse_postfix(struct jinja__parser *p, node *n)
{
    while (n && !p->failed) {
        const struct jinja__tok *at = jinja__cur(p);
        if (jinja__at_op(p, OP_DOT)) {
            jinja__advance(p);
            const struct jinja__tok *t = jinja__cur(p);
            if (t->type == TK_NAME) {
                n = jinja__mk2(p, NK_ATTR, at, n, NULL);
                n->s = t->s;
                n->n = t->n;
            } else if (t->type == TK_INT) { /* x.0 is x[0] */
                node *k = jinja__mk(p, NK_CONST, t);
                k->op = JK_INT;
                k->i = t->i;
                n = jinja__mk2(p, NK_ITEM, at, n, k);
            } else {
                return jinja__perr(p, t, "expected name or number");
            }
            jinja__advance(p);
        } else if (jinja__at_op(p, OP_LBRACKET)) {
            n = parse_item(p, n);
        } else if (jinja__at_op(p, OP_LPAREN)) {
            n = jinja__mk2(p, NK_CALL, at, n, NULL);
            if (parse_args(p, n) < 0)
                return NULL;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

/* A filter or test name, resolved to its builtin id now: unknown names fail at compile time. */
static int builtin_name(struct jinja__parser *p, node *n, int test)
{
    const struct jinja__tok *t = jinja__cur(p);
    if (t->type != TK_NAME) {
        char buf[64];
        jinja__perr(p, t, "expected token 'name', got '%s'", jinja__describe(t, buf, sizeof(buf)));
        return -1;
    }
    n->s = t->s;
    n->n = t->n;
    jinja__advance(p);
    int id = test ? jinja__test_find(n->s, n->n) : jinja__filter_find(n->s, n->n);
    if (id < 0) {
        jinja__perr(p, t, "No %s named '%.*s'.", test ? "test" : "filter", (int)n->n, n->s);
        return -1;
    }
    n->id = (int16_t)id;
    return 0;
}

/* "|name(args)" chains; with start_inline the first filter has no "|" (filter blocks). */
node *jinja__parse_filters(struct jinja__parser *p, node *n, int start_inline)
{
    while (!p->failed && (jinja__at_op(p, OP_PIPE) || start_inline)) {
        if (!start_inline)
            jinja__advance(p);
        start_inline = 0;
        /* n becomes the operand of the next filter: a|f|g is g(f(a)) */
        node *f = jinja__mk2(p, NK_FILTER, jinja__cur(p), n, NULL);
        if (builtin_name(p, f, 0) < 0)
            return NULL;
        if (jinja__at_op(p, OP_LPAREN) && parse_args(p, f) < 0)
            return NULL;
        n = f;
    }
    return p->failed ? NULL : n;
}

/* x is [not] name, with arguments in parentheses or one bare primary (x is divisibleby 3). */
static node *parse_test(struct jinja__parser *p, node *n)
{
    const struct jinja__tok *at = jinja__cur(p);
    jinja__advance(p); /* "is" */
    int negated = jinja__at_name(p, "not");
    if (negated)
        jinja__advance(p);
    node *t = jinja__mk2(p, NK_TEST, at, n, NULL);
    if (builtin_name(p, t, 1) < 0)
        return NULL;
    const struct jinja__tok *c = jinja__cur(p);
    if (jinja__at_op(p, OP_LPAREN)) {
        if (parse_args(p, t) < 0)
            return NULL;
        /* one bare argument, unless the next word continues the expression */
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                c->type == TK_FLOAT || jinja__at_op(p, OP_LBRACKET) ||
                jinja__at_op(p, OP_LBRACE)) &&
               !jinja__at_name(p, "else") && !jinja__at_name(p, "or") &&
               !jinja__at_name(p, "and")) {
        if (jinja__at_name(p, "is"))
            return jinja__perr(p, c, "You cannot chain multiple tests with is");
        struct jinja__nvec one = {0};
        jinja__vec_push(&one, jinja__parse_postfix(p, jinja__parse_primary(p)));
        t->kids = jinja__vec_finish(p, &one);
        if (p->failed)
            return NULL;
    }
    if (!negated) /* "is not" is not(test) */
        return t;
    node *neg = jinja__mk2(p, NK_UNARY, at, t, NULL);
    neg->op = OP_NOT;
    return neg;
}

static node *parse_unary(struct jinja__parser *p, int with_filters)
{
    if (jinja__enter(p) < 0)
        return NULL;
    const struct jinja__tok *at = jinja__cur(p);
    node *n;
    if (jinja__at_op(p, OP_SUB) || jinja__at_op(p, OP_ADD)) {
        int op = jinja__at_op(p, OP_SUB) ? OP_NEG : OP_POS;
        jinja__advance(p);
        n = jinja__mk2(p, NK_UNARY, at, parse_unary(p, 0), NULL);
        n->op = (uint8_t)op;
        if (!n->a)
            n = NULL;
    } else {
        n = jinja__parse_primary(p);
    }
    n = jinja__parse_postfix(p, n);
    /* filters, tests and calls may follow each other in any order: f(x)|g is h()(...) */
    while (with_filters && n && !p->failed) {
        if (jinja__at_op(p, OP_PIPE))
            n = jinja__parse_filters(p, n, 0);
        else if (jinja__at_name(p, "is"))
            n = parse_test(p, n);
        else if (jinja__at_op(p, OP_LPAREN))
            n = jinja__parse_postfix(p, n);
        else
            break;
    }
    p->nesting--;
    return p->failed ? NULL : n;
}

/* One left-associative level: operands from next, joined by any operator in ops. */
static node *parse_level(struct jinja__parser *p, node *(*next)(struct jinja__parser *),
                         const uint8_t *ops)
{
    node *left = next(p);
    /* A loop, not recursion: long chains like a + b + c + ... cost no parser stack (the
     * evaluator bounds their depth instead). OP_* codes are never 0, so strchr is safe. */
    while (left && jinja__cur(p)->type == TK_OP && strchr((const char *)ops, jinja__cur(p)->op)) {
        const struct jinja__tok *at = jinja__cur(p);
        jinja__advance(p);
        node *right = next(p);
        if (!right)
            return NULL;
        left = jinja__mk2(p, NK_BIN, at, left, right);
        left->op = at->op;
    }
    return p->failed ? NULL : left;
}

/* Adapter for parse_level. */
static node *parse_unary_filtered(struct jinja__parser *p)
{
    return parse_unary(p, 1);
}

/* The binary levels, tightest first; ~ sits between the additive and multiplicative ones. */
static node *parse_pow(struct jinja__parser *p)
{
    static const uint8_t ops[] = {OP_POW, 0};
    return parse_level(p, parse_unary_filtered, ops);
}

/* * / // % */
static node *parse_math2(struct jinja__parser *p)
{
    static const uint8_t ops[] = {OP_MUL, OP_DIV, OP_FDIV, OP_MOD, 0};
    return parse_level(p, parse_pow, ops);
}

/* a ~ b ~ c: one NK_CONCAT with every operand, each converted with str() when evaluated. */
static node *parse_concat(struct jinja__parser *p)
{
    const struct jinja__tok *at = jinja__cur(p);
    node *first = parse_math2(p);
    if (!first || !jinja__at_op(p, OP_TILDE))
        return first;
    struct jinja__nvec parts = {0};
    jinja__vec_push(&parts, first);
    while (!p->failed && jinja__at_op(p, OP_TILDE)) {
        jinja__advance(p);
        jinja__vec_push(&parts, parse_math2(p));
    }
    node *n = jinja__mk(p, NK_CONCAT, at);
    n->kids = jinja__vec_finish(p, &parts);
    return p->failed ? NULL : n;
}

/* + - */
static node *parse_math1(struct jinja__parser *p)
{
    static const uint8_t ops[] = {OP_ADD, OP_SUB, 0};
    return parse_level(p, parse_concat, ops);
}

/* The comparison operator at the cursor (consumed), or 0. */
static int compare_op(struct jinja__parser *p)
{
    const struct jinja__tok *t = jinja__cur(p);
    if (t->type == TK_OP && t->op >= OP_EQ && t->op <= OP_LE) {
        jinja__advance(p);
        return t->op;
    }
    if (jinja__tok_is(t, "in")) {
        jinja__advance(p);
        return OP_IN;
    }
    if (jinja__tok_is(t, "not") && jinja__tok_is(jinja__peek(p), "in")) { /* "not in" */
        jinja__advance(p);
        jinja__advance(p);
        return OP_NOTIN;
    }
    return 0;
}

/* A chain a < b < c keeps every operand for the evaluator to compare pairwise. */
static node *parse_compare(struct jinja__parser *p)
{
    const struct jinja__tok *at = jinja__cur(p);
    node *first = parse_math1(p);
    struct jinja__nvec ops = {0};
    int op;
    while (first && !p->failed && (op = compare_op(p)) != 0) {
        node *o = jinja__mk2(p, NK_OPERAND, jinja__cur(p), parse_math1(p), NULL);
        o->op = (uint8_t)op;
        jinja__vec_push(&ops, o);
    }
    if (p->failed || !ops.n) {
        free(ops.v);
        return p->failed ? NULL : first;
    }
    node *n = jinja__mk2(p, NK_CMP, at, first, NULL);
    n->kids = jinja__vec_finish(p, &ops);
    return n;
}

/* not binds looser than comparisons: not a == b is not (a == b). */
static node *parse_not(struct jinja__parser *p)
{
    if (!jinja__at_name(p, "not"))
        return parse_compare(p);
    const struct jinja__tok *at = jinja__cur(p);
    jinja__advance(p);
    if (jinja__enter(p) < 0)
        return NULL;
    node *n = jinja__mk2(p, NK_UNARY, at, parse_not(p), NULL);
    n->op = OP_NOT;
    p->nesting--;
    return n->a ? n : NULL;
}

/* and / or: short-circuit chains, left-associative. */
static node *parse_logic(struct jinja__parser *p, int or)
{
    node *left = or ? parse_logic(p, 0) : parse_not(p);
    while (left && jinja__at_name(p, or ? "or" : "and")) {
        const struct jinja__tok *at = jinja__cur(p);
        jinja__advance(p);
        node *right = or ? parse_logic(p, 0) : parse_not(p);
        if (!right)
            return NULL;
        left = jinja__mk2(p, or ? NK_OR : NK_AND, at, left, right);
    }
    return p->failed ? NULL : left;
}

/* A full expression; with_cond = 0 stops before a trailing "if" (for loops and if tags). */
node *jinja__parse_expr(struct jinja__parser *p, int with_cond)
{
    if (jinja__enter(p) < 0)
        return NULL;
    node *n = parse_logic(p, 1);
    /* a if b else c if d else e: the else part recurses, so it nests to the right */
    while (with_cond && n && jinja__at_name(p, "if")) {
        const struct jinja__tok *at = jinja__cur(p);
        jinja__advance(p);
        node *c = jinja__mk2(p, NK_COND, at, n, parse_logic(p, 1));
        if (c->b && jinja__at_name(p, "else")) {
            jinja__advance(p);
            c->c = jinja__parse_expr(p, 1);
        }
        n = p->failed ? NULL : c;
    }
    p->nesting--;
    return p->failed ? NULL : n;
}
