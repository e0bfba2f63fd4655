/*
 * jinja_parse — the parser's plumbing (token cursor, errors, node construction), the
 * statements, and jinja_compile / jinja_free. Expressions are in jinja_expr.c.
 *
 * Statements: for (targets, `if` filter, else), if/elif/else, set (names, tuples, ns.attr,
 * block form with filters), macro, call (with caller parameters), filter, with, break,
 * continue, print, and the blocks rendered in place (generation, block). extends, include,
 * import, from and autoescape are refused: a chat template is one self-contained file.
 *
 * Node fields per statement kind (see jinja_impl.h for the node): NK_IF a=test kids=body
 * kids2=else (an elif is a lone NK_IF with op=1 in kids2); NK_FOR a=target b=iterable c=filter
 * kids=body kids2=else; NK_SET a=target b=value; NK_SETBLOCK a=target b=filters kids=body;
 * NK_MACRO s=name kids=params kids2=defaults (NULL = none) kids3=body op=uses varargs (1) /
 * kwargs (2); NK_CALLBLOCK a=the call, then like NK_MACRO; NK_FILTERBLOCK b=filters kids=body;
 * NK_WITH kids=targets kids2=values kids3=body; NK_SCOPE kids=body.
 *
 * Invariants: nodes live in the template arena; parse recursion is bounded
 * (JINJA__MAX_NESTING), so a hostile template cannot exhaust the stack; the first error wins
 * and reads "line:col: message".
 *
 * Threads: jinja_compile is reentrant; the template it returns is immutable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xrealloc, dd_errf, DD_EINVAL
#include "jinja_impl.h"  // defines: jinja__parser, jinja__tok, jinja__node, jinja__lex

typedef struct jinja__node node;

/* ==== tokens, nodes, errors ================================================================== */

/* The token under the cursor (TK_EOF at the end, never past it). */
const struct jinja__tok *jinja__cur(const struct jinja__parser *p)
{
    return &p->t[p->i];
}

const struct jinja__tok *jinja__peek(const struct jinja__parser *p)
{
    return p->t[p->i].type == TK_EOF ? &p->t[p->i] : &p->t[p->i + 1];
}

/* Moves on, staying on TK_EOF once there. */
void jinja__advance(struct jinja__parser *p)
{
    if (p->t[p->i].type != TK_EOF)
        p->i++;
}

/*
 * Keywords are plain names in jinja2 (in, not, and, is, if, else...), so this is how the parser
 * tests for them.
 */
int jinja__tok_is(const struct jinja__tok *t, const char *name)
{
    return t->type == TK_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

int jinja__at_name(const struct jinja__parser *p, const char *name)
{
    return jinja__tok_is(jinja__cur(p), name);
}

int jinja__at_op(const struct jinja__parser *p, int op)
{
    return jinja__cur(p)->type == TK_OP && jinja__cur(p)->op == op;
}

const char *jinja__describe(const struct jinja__tok *t, char *buf, size_t cap)
{
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_DATA:
        return "template data";
    case TK_VAR_BEGIN:
        return "begin of print statement";
    case TK_VAR_END:
        return "end of print statement";
    case TK_BLOCK_BEGIN:
        return "begin of statement block";
    case TK_BLOCK_END:
        return "end of statement block";
    case TK_STRING:
        return "string";
    case TK_INT:
        return "integer";
    case TK_FLOAT:
        return "float";
    case TK_NAME:
        snprintf(buf, cap, "%.*s", (int)(t->n < 60 ? t->n : 60), t->s);
        return buf;
    default:
        break;
    }
    static const char *const names[] = {
        [OP_ASSIGN] = "=", [OP_DOT] = ".",    [OP_COLON] = ":",    [OP_PIPE] = "|",
        [OP_COMMA] = ",",  [OP_SEMI] = ";",   [OP_ADD] = "+",      [OP_SUB] = "-",
        [OP_MUL] = "*",    [OP_DIV] = "/",    [OP_FDIV] = "//",    [OP_MOD] = "%",
        [OP_POW] = "**",   [OP_TILDE] = "~",  [OP_LBRACKET] = "[", [OP_RBRACKET] = "]",
        [OP_LPAREN] = "(", [OP_RPAREN] = ")", [OP_LBRACE] = "{",   [OP_RBRACE] = "}",
        [OP_EQ] = "==",    [OP_NE] = "!=",    [OP_GT] = ">",       [OP_GE] = ">=",
        [OP_LT] = "<",     [OP_LE] = "<=",
    };
    return t->op < sizeof(names) / sizeof(names[0]) && names[t->op] ? names[t->op] : "operator";
}

/* Records the first error at token t (see jinja_impl.h). */
node *jinja__perr(struct jinja__parser *p, const struct jinja__tok *t, const char *fmt, ...)
{
    if (p->failed)
        return NULL;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dd_errf(p->err, p->errlen, "%u:%u: %s", t->line, t->col, msg);
    p->failed = 1;
    return NULL;
}

/* "unexpected 'x'" at the current token. */
node *jinja__unexpected(struct jinja__parser *p)
{
    char buf[64];
    return jinja__perr(p, jinja__cur(p), "unexpected '%s'",
                       jinja__describe(jinja__cur(p), buf, sizeof(buf)));
}

/* Messages follow jinja2's "expected token 'x', got 'y'". */
int jinja__expect_op(struct jinja__parser *p, int op, const char *what)
{
    if (jinja__at_op(p, op)) {
        jinja__advance(p);
        return 0;
    }
    char buf[64];
    jinja__perr(p, jinja__cur(p), "expected token '%s', got '%s'", what,
                jinja__describe(jinja__cur(p), buf, sizeof(buf)));
    return -1;
}

int jinja__expect_type(struct jinja__parser *p, int type, const char *what)
{
    if (jinja__cur(p)->type == type) {
        jinja__advance(p);
        return 0;
    }
    char buf[64];
    jinja__perr(p, jinja__cur(p), "expected token '%s', got '%s'", what,
                jinja__describe(jinja__cur(p), buf, sizeof(buf)));
    return -1;
}

/* Nodes are zeroed, so absent children and empty lists need no initialisation. */
node *jinja__mk(struct jinja__parser *p, int kind, const struct jinja__tok *at)
{
    node *n = jinja__arena_alloc(p->ar, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

node *jinja__mk2(struct jinja__parser *p, int kind, const struct jinja__tok *at, node *a, node *b)
{
    node *n = jinja__mk(p, kind, at);
    n->a = a;
    n->b = b;
    return n;
}

/* Lists are collected in malloc'd vectors while parsing and copied into the arena once complete. */
void jinja__vec_push(struct jinja__nvec *v, node *n)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 8;
        v->v = xrealloc(v->v, v->cap * sizeof(*v->v));
    }
    v->v[v->n++] = n;
}

/* Moves a vector into the arena (frees it). */
struct jinja__nodes jinja__vec_finish(struct jinja__parser *p, struct jinja__nvec *v)
{
    struct jinja__nodes out = {NULL, v->n};
    if (v->n) {
        out.v = jinja__arena_alloc(p->ar, v->n * sizeof(*out.v));
        memcpy(out.v, v->v, v->n * sizeof(*out.v));
    }
    free(v->v);
    v->v = NULL;
    v->n = v->cap = 0;
    return out;
}

/* Counts one level of recursion; parse_body, expressions and not/unary chains call it. */
int jinja__enter(struct jinja__parser *p)
{
    if (++p->nesting > JINJA__MAX_NESTING) {
        jinja__perr(p, jinja__cur(p), "template nested too deeply");
        return -1;
    }
    return 0;
}

/* ==== statements ============================================================================= */

struct ends {
    const char *names[3]; /* the tags that close the body being parsed */
    const char *tag;      /* the block being closed, for messages */
};

static int parse_body(struct jinja__parser *p, const struct ends *e, struct jinja__nodes *out);

/* Ensures n is a name, or a tuple of names (for and set targets). */
static node *check_target(struct jinja__parser *p, node *n)
{
    if (!n)
        return NULL;
    int ok = n->kind == NK_NAME;
    if (n->kind == NK_TUPLE) {
        ok = 1;
        for (size_t i = 0; i < n->kids.n; i++)
            ok &= n->kids.v[i]->kind == NK_NAME;
    }
    if (!ok)
        return jinja__perr(p, jinja__cur(p), "can't assign to this target");
    return n;
}

/* After the statement's own tokens: "%}", the body up to one of e's tags, and that tag.
 * Returns the index of the closing tag found, or -1. */
static int body_until(struct jinja__parser *p, const struct ends *e, struct jinja__nodes *out)
{
    if (jinja__at_op(p, OP_COLON)) /* jinja2 tolerates a Python-style colon */
        jinja__advance(p);
    if (jinja__expect_type(p, TK_BLOCK_END, "end of statement block") < 0)
        return -1;
    int which = parse_body(p, e, out);
    if (which >= 0)
        jinja__advance(p); /* the closing tag's name */
    return which;
}

/* {% for target in iterable [if filter] %} body [{% else %} body] {% endfor %} */
static node *parse_for(struct jinja__parser *p, const struct jinja__tok *at)
{
    node *n = jinja__mk(p, NK_FOR, at);
    n->a = check_target(p, jinja__parse_tuple(p, 1, 0, "in", 0));
    if (!n->a || (!jinja__at_name(p, "in") && !jinja__unexpected(p)))
        return NULL;
    jinja__advance(p);
    n->b = jinja__parse_tuple(p, 0, 0, "recursive", 0);
    if (n->b && jinja__at_name(p, "if")) { /* for x in xs if cond: filters before counting */
        jinja__advance(p);
        n->c = jinja__parse_expr(p, 1);
    }
    if (p->failed)
        return NULL;
    if (jinja__at_name(p, "recursive"))
        return jinja__perr(p, jinja__cur(p), "recursive for loops are not supported");
    struct ends e = {{"endfor", "else"}, "for"}, e2 = {{"endfor"}, "for"};
    p->loops++;
    int which = body_until(p, &e, &n->kids);
    p->loops--;
    if (which == 1 && body_until(p, &e2, &n->kids2) < 0)
        return NULL;
    return which < 0 ? NULL : n;
}

/* if / elif chains: each elif is an NK_IF (op = 1) alone in the previous one's else body. */
static node *parse_if(struct jinja__parser *p, const struct jinja__tok *at)
{
    node *first = NULL, *prev = NULL;
    struct ends e = {{"elif", "else", "endif"}, "if"}, e2 = {{"endif"}, "if"};
    for (;;) {
        node *n = jinja__mk(p, NK_IF, at);
        n->op = prev != NULL; /* marks an elif, which the executor walks iteratively */
        n->a = jinja__parse_tuple(p, 0, 0, NULL, 0);
        if (!n->a)
            return NULL;
        if (prev) {
            prev->kids2.v = jinja__arena_alloc(p->ar, sizeof(node *));
            prev->kids2.v[0] = n;
            prev->kids2.n = 1;
        } else {
            first = n;
        }
        int which = body_until(p, &e, &n->kids);
        if (which < 0)
            return NULL;
        if (which == 1 && body_until(p, &e2, &n->kids2) < 0)
            return NULL;
        if (which != 0) /* else or endif ends the chain */
            return first;
        prev = n;
        at = jinja__cur(p);
    }
}

/* {% set x = v %}, {% set a, b = v %}, {% set ns.attr = v %}, or the block form
 * {% set x [| filters] %}...{% endset %}. */
static node *parse_set(struct jinja__parser *p, const struct jinja__tok *at)
{
    node *n = jinja__mk(p, NK_SET, at);
    if (jinja__cur(p)->type == TK_NAME && jinja__peek(p)->type == TK_OP &&
        jinja__peek(p)->op == OP_DOT) { /* ns.attr: stored as NK_ATTR(NK_NAME ns, attr) */
        node *ns = jinja__mk(p, NK_NAME, jinja__cur(p));
        ns->s = jinja__cur(p)->s;
        ns->n = jinja__cur(p)->n;
        jinja__advance(p);
        jinja__advance(p);
        if (jinja__cur(p)->type != TK_NAME)
            return jinja__perr(p, jinja__cur(p), "expected name after '.'");
        n->a = jinja__mk2(p, NK_ATTR, jinja__cur(p), ns, NULL);
        n->a->s = jinja__cur(p)->s;
        n->a->n = jinja__cur(p)->n;
        jinja__advance(p);
    } else {
        n->a = check_target(p, jinja__parse_tuple(p, 1, 0, NULL, 0));
    }
    if (!n->a)
        return NULL;
    if (jinja__at_op(p, OP_ASSIGN)) {
        jinja__advance(p);
        n->b = jinja__parse_tuple(p, 0, 1, NULL, 0);
        return n->b ? n : NULL;
    }
    n->kind = NK_SETBLOCK; /* no "=": the value is the rendered body */
    if (jinja__at_op(p, OP_PIPE) && !(n->b = jinja__parse_filters(p, NULL, 0)))
        return NULL;
    struct ends e = {{"endset"}, "set"};
    return body_until(p, &e, &n->kids) < 0 ? NULL : n;
}

/* "(a, b=default, ...)": names into kids, defaults (or NULL) into kids2. */
static int parse_signature(struct jinja__parser *p, node *n)
{
    if (jinja__expect_op(p, OP_LPAREN, "(") < 0)
        return -1;
    struct jinja__nvec names = {0}, defs = {0};
    while (!p->failed && !jinja__at_op(p, OP_RPAREN)) {
        if (names.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        if (jinja__cur(p)->type != TK_NAME) {
            jinja__unexpected(p);
            break;
        }
        node *name = jinja__mk(p, NK_NAME, jinja__cur(p));
        name->s = jinja__cur(p)->s;
        name->n = jinja__cur(p)->n;
        jinja__advance(p);
        node *def = NULL; /* evaluated at call time, in the macro's scope */
        if (jinja__at_op(p, OP_ASSIGN)) {
            jinja__advance(p);
            def = jinja__parse_expr(p, 1);
        } else if (defs.n && defs.v[defs.n - 1]) {
            jinja__perr(p, jinja__cur(p), "non-default argument follows default argument");
        }
        jinja__vec_push(&names, name);
        jinja__vec_push(&defs, def);
    }
    if (!p->failed)
        jinja__expect_op(p, OP_RPAREN, ")");
    n->kids = jinja__vec_finish(p, &names);
    n->kids2 = jinja__vec_finish(p, &defs);
    return p->failed ? -1 : 0;
}

/*
 * {% macro name(params) %} and {% call[(params)] m(args) %}: both record whether their body
 * mentions varargs or kwargs, which decides whether extra arguments are accepted (jinja2's rule).
 */
static node *parse_macro(struct jinja__parser *p, const struct jinja__tok *at, int call)
{
    node *n = jinja__mk(p, call ? NK_CALLBLOCK : NK_MACRO, at);
    if (!call) {
        if (jinja__cur(p)->type != TK_NAME)
            return jinja__unexpected(p);
        n->s = jinja__cur(p)->s;
        n->n = jinja__cur(p)->n;
        jinja__advance(p);
    }
    if ((!call || jinja__at_op(p, OP_LPAREN)) && parse_signature(p, n) < 0)
        return NULL;
    if (call) { /* the macro call the block's body is passed to as caller() */
        const struct jinja__tok *ct = jinja__cur(p);
        n->a = jinja__parse_expr(p, 1);
        if (!n->a)
            return NULL;
        if (n->a->kind != NK_CALL)
            return jinja__perr(p, ct, "expected call");
    }
    struct ends e = {{call ? "endcall" : "endmacro"}, call ? "call" : "macro"};
    int outer = p->uses, loops = p->loops;
    p->uses = p->loops = 0; /* a macro body is a function: no loop around it */
    int rc = body_until(p, &e, &n->kids3);
    n->op = (uint8_t)p->uses; /* the exec side's USES_VARARGS / USES_KWARGS */
    p->uses = outer;
    p->loops = loops;
    return rc < 0 ? NULL : n;
}

/* {% with a = 1, b = 2 %}...{% endwith %} */
static node *parse_with(struct jinja__parser *p, const struct jinja__tok *at)
{
    node *n = jinja__mk(p, NK_WITH, at);
    struct jinja__nvec names = {0}, vals = {0};
    while (!p->failed && jinja__cur(p)->type != TK_BLOCK_END) {
        if (names.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        node *t = check_target(p, jinja__parse_primary(p));
        if (t && jinja__expect_op(p, OP_ASSIGN, "=") == 0) {
            jinja__vec_push(&names, t);
            jinja__vec_push(&vals, jinja__parse_expr(p, 1));
        }
    }
    n->kids = jinja__vec_finish(p, &names);
    n->kids2 = jinja__vec_finish(p, &vals);
    struct ends e = {{"endwith"}, "with"};
    return p->failed || body_until(p, &e, &n->kids3) < 0 ? NULL : n;
}

/* Blocks rendered in place: {% generation %}, {% block name %}, {% filter f %}. */
static node *parse_scope(struct jinja__parser *p, const struct jinja__tok *at, const char *tag)
{
    node *n = jinja__mk(p, NK_SCOPE, at);
    if (strcmp(tag, "filter") == 0) {
        n->kind = NK_FILTERBLOCK;
        if (!(n->b = jinja__parse_filters(p, NULL, 1)))
            return NULL;
    } else if (strcmp(tag, "block") == 0) { /* no inheritance: the block just renders */
        if (jinja__cur(p)->type != TK_NAME)
            return jinja__unexpected(p);
        jinja__advance(p);
        while (jinja__at_name(p, "scoped") || jinja__at_name(p, "required"))
            jinja__advance(p);
    }
    char end[32];
    snprintf(end, sizeof(end), "end%s", tag);
    struct ends e = {{end}, tag};
    if (body_until(p, &e, &n->kids) < 0)
        return NULL;
    if (strcmp(tag, "block") == 0 && jinja__cur(p)->type == TK_NAME)
        jinja__advance(p);
    return n;
}

/* {% print a, b %}: each expression printed in turn. */
static node *parse_print_stmt(struct jinja__parser *p, const struct jinja__tok *at)
{
    struct jinja__nvec outs = {0};
    while (!p->failed && jinja__cur(p)->type != TK_BLOCK_END) {
        if (outs.n && jinja__expect_op(p, OP_COMMA, ",") < 0)
            break;
        jinja__vec_push(&outs, jinja__mk2(p, NK_PRINT, at, jinja__parse_expr(p, 1), NULL));
    }
    node *n = jinja__mk(p, NK_SCOPE, at);
    n->kids = jinja__vec_finish(p, &outs);
    return p->failed ? NULL : n;
}

/* Dispatches on the tag name after "{%". */
static node *parse_statement(struct jinja__parser *p)
{
    const struct jinja__tok *at = jinja__cur(p);
    if (at->type != TK_NAME)
        return jinja__perr(p, at, "tag name expected");
    static const char *const unsupported[] = {"extends", "include",    "import",
                                              "from",    "autoescape", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (jinja__tok_is(at, unsupported[i]))
            return jinja__perr(p, at, "'%s' is not supported (templates are self-contained)",
                               unsupported[i]);
    jinja__advance(p);
    if (jinja__tok_is(at, "for"))
        return parse_for(p, at);
    if (jinja__tok_is(at, "if"))
        return parse_if(p, at);
    if (jinja__tok_is(at, "set"))
        return parse_set(p, at);
    if (jinja__tok_is(at, "macro") || jinja__tok_is(at, "call"))
        return parse_macro(p, at, jinja__tok_is(at, "call"));
    if (jinja__tok_is(at, "with"))
        return parse_with(p, at);
    if (jinja__tok_is(at, "print"))
        return parse_print_stmt(p, at);
    if (jinja__tok_is(at, "break") || jinja__tok_is(at, "continue")) {
        if (!p->loops)
            return jinja__perr(p, at, "'%.*s' outside of a loop", (int)at->n, at->s);
        return jinja__mk(p, jinja__tok_is(at, "break") ? NK_BREAK : NK_CONTINUE, at);
    }
    if (jinja__tok_is(at, "filter") || jinja__tok_is(at, "generation") ||
        jinja__tok_is(at, "block"))
        return parse_scope(p, at,
                           jinja__tok_is(at, "filter")  ? "filter"
                           : jinja__tok_is(at, "block") ? "block"
                                                        : "generation");
    return jinja__perr(p, at, "Encountered unknown tag '%.*s'.", (int)(at->n < 60 ? at->n : 60),
                       at->s);
}

/* jinja2's message for a template that ends inside a block. */
static void fail_eof(struct jinja__parser *p, const struct ends *e)
{
    char want[120] = "";
    for (int i = 0; i < 3 && e->names[i]; i++) {
        size_t k = strlen(want);
        snprintf(want + k, sizeof(want) - k, "%s'%s'", i ? " or " : "", e->names[i]);
    }
    jinja__perr(p, jinja__cur(p),
                "Unexpected end of template. Jinja was looking for the following tags: %s. The "
                "innermost block that needs to be closed is '%s'.",
                want, e->tag);
}

/* Which of e's closing tags the cursor is on, or -1. */
static int end_index(const struct jinja__parser *p, const struct ends *e)
{
    for (int i = 0; e && i < 3 && e->names[i]; i++)
        if (jinja__at_name(p, e->names[i]))
            return i;
    return -1;
}

/*
 * Statements and text up to "{% <one of e's names>" (e NULL: up to the end of the template).
 * Leaves the cursor on that name and returns its index (0 at the end of the template), or -1.
 */
static int parse_body(struct jinja__parser *p, const struct ends *e, struct jinja__nodes *out)
{
    if (jinja__enter(p) < 0)
        return -1;
    struct jinja__nvec body = {0};
    int which = -1;
    /* Text and {{ }} go straight into the body; {% starts a statement or ends this body. */
    while (!p->failed) {
        const struct jinja__tok *t = jinja__cur(p);
        if (t->type == TK_EOF) {
            if (e)
                fail_eof(p, e);
            else
                which = 0;
            break;
        }
        jinja__advance(p);
        if (t->type == TK_DATA) {
            node *n = jinja__mk(p, NK_TEXT, t);
            n->s = t->s;
            n->n = t->n;
            jinja__vec_push(&body, n);
        } else if (t->type == TK_VAR_BEGIN) {
            node *n = jinja__mk2(p, NK_PRINT, t, jinja__parse_tuple(p, 0, 1, NULL, 0), NULL);
            if (n->a && jinja__expect_type(p, TK_VAR_END, "end of print statement") == 0)
                jinja__vec_push(&body, n);
        } else if ((which = end_index(p, e)) >= 0) {
            break;
        } else {
            node *n = parse_statement(p);
            if (n && jinja__expect_type(p, TK_BLOCK_END, "end of statement block") == 0)
                jinja__vec_push(&body, n);
        }
    }
    *out = jinja__vec_finish(p, &body);
    p->nesting--;
    return p->failed ? -1 : which;
}

/* ==== compile ================================================================================ */

/* Hugging Face's settings; limits stay 0 and take their defaults in jinja_compile. */
void jinja_opts_init(struct jinja_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->trim_blocks = 1;
    o->lstrip_blocks = 1;
}

/* The defaults documented in jinja.h. */
static void fill_limits(struct jinja_opts *o)
{
    if (!o->max_output)
        o->max_output = 16u << 20;
    if (!o->max_memory)
        o->max_memory = 128u << 20;
    if (!o->max_steps)
        o->max_steps = 10000000;
    if (o->max_depth <= 0)
        o->max_depth = 64;
}

/* Copies src into the arena with "\r\n" and "\r" turned into "\n", minus one trailing "\n". */
static char *normalize(struct jinja__arena *ar, const char *src, size_t len, int keep_nl,
                       size_t *out_len)
{
    char *s = jinja__arena_alloc(ar, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (!keep_nl && k > 0 && s[k - 1] == '\n')
        k--;
    s[k] = 0;
    *out_len = k;
    return s;
}

/*
 * normalize -> lex -> parse; the token array is temporary, everything else lives in the template's
 * arena.
 */
int jinja_compile(const char *src, size_t len, const struct jinja_opts *o, jinja_tmpl **out,
                  char *err, size_t errlen)
{
    jinja_tmpl *t = xcalloc(1, sizeof(*t));
    if (o)
        t->opts = *o;
    else
        jinja_opts_init(&t->opts);
    fill_limits(&t->opts);
    size_t n;
    const char *s =
        normalize(&t->arena, src ? src : "", src ? len : 0, t->opts.keep_trailing_newline, &n);
    struct jinja__tok *toks = NULL;
    size_t ntoks;
    int rc = jinja__lex(s, n, &t->opts, &t->arena, &toks, &ntoks, err, errlen);
    if (rc == 0) {
        struct jinja__parser p = {.t = toks, .ar = &t->arena, .err = err, .errlen = errlen};
        rc = parse_body(&p, NULL, &t->body) < 0 ? DD_EINVAL : 0;
    }
    free(toks);
    if (rc) {
        jinja_free(t);
        *out = NULL;
        return rc;
    }
    *out = t;
    return 0;
}

/* Everything the template owns is in its arena. */
void jinja_free(jinja_tmpl *t)
{
    if (!t)
        return;
    jinja__arena_free(&t->arena);
    free(t);
}
