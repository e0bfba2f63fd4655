/*
 * jinja_impl.h — internals shared by the jinja_*.c files; users include jinja.h only.
 *
 * Pipeline and files:
 *   jinja_lex.c      source -> tokens, applying trim_blocks, lstrip_blocks and {%- -%}
 *   jinja_parse.c    parser plumbing, statements, jinja_compile   (AST in the template arena)
 *   jinja_expr.c     the expression grammar
 *   jinja_exec.c     statements, scopes, macros, limits, errors, jinja_render
 *   jinja_eval.c     expressions: names, literals, attributes, items, slices, calls, arguments
 *   jinja_ops.c      Python's operators
 *   jinja_filters.c  string/number filters and the tests;  jinja_seq.c  sequence filters
 *   jinja_methods.c  globals and dict/list/loop methods;    jinja_str.c  str methods
 *   jinja_value.c    the value model;  jinja_json.c  tojson;  jinja_text.c  arena, buffers,
 *                    UTF-8, whitespace, float repr, case mapping
 *
 * Ownership: every function returning jinja_value * returns a new reference (NULL = error, the
 * message is in the render state) unless its comment says "borrowed". AST nodes and token
 * strings live in the template arena and are never freed one by one; the AST never holds a
 * value, which is what lets threads render one template concurrently.
 */
#ifndef DELTAD_JINJA_IMPL_H
#define DELTAD_JINJA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/util.h" // defines: struct dd_buf
#include "jinja.h"       // defines: jinja_value, jinja_tmpl, struct jinja_opts

/* ---- arena (jinja_text.c): template-lifetime memory ---------------------------------------- */

struct jinja__chunk;
struct jinja__arena {
    struct jinja__chunk *head;
};
void *jinja__arena_alloc(struct jinja__arena *a, size_t n); /* zeroed, 16-byte aligned */
char *jinja__arena_dup(struct jinja__arena *a, const char *s, size_t n);
void jinja__arena_free(struct jinja__arena *a);

/* ---- output with a hard limit (jinja_text.c) ------------------------------------------------ */

/* A dd_buf (util.h) whose appends stop at a byte limit: the limit is what keeps a runaway
 * template from eating memory, so every jinja append goes through jinja__buf_put and friends,
 * never straight to dd_buf_put on d. */
struct jinja__buf {
    struct dd_buf d; /* the bytes; d.p NULL until the first append */
    size_t limit;    /* appends beyond it set over and are dropped */
    int over;
};
void jinja__buf_put(struct jinja__buf *b, const char *s, size_t n);
void jinja__buf_putc(struct jinja__buf *b, char c);
void jinja__buf_printf(struct jinja__buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (never NULL; free()) and resets the buffer. */
char *jinja__buf_take(struct jinja__buf *b, size_t *len);
void jinja__buf_free(struct jinja__buf *b);

/* ---- text helpers (jinja_text.c) ------------------------------------------------------------ */

/* Decodes one UTF-8 sequence at s[0..n); invalid bytes decode as themselves, length 1. */
size_t jinja__utf8_next(const char *s, size_t n, uint32_t *cp);
size_t jinja__utf8_count(const char *s, size_t n);
/* Byte offset of code point index k (k may be the count: returns n). */
size_t jinja__utf8_offset(const char *s, size_t n, size_t k);
void jinja__utf8_put(struct jinja__buf *b, uint32_t cp);
/* Python's str.isspace() for one code point. */
int jinja__is_space(uint32_t cp);
/* Length of the whitespace run at the start / end of s[0..n). */
size_t jinja__space_prefix(const char *s, size_t n);
size_t jinja__space_suffix(const char *s, size_t n);
/* Python's float repr (shortest round trip: 0.1, 1e+16, 1.0, inf, nan). */
void jinja__put_float(struct jinja__buf *b, double v);
/* A JSON string literal as json.dumps writes it (ensure_ascii selects \uXXXX for non-ASCII). */
void jinja__put_json_string(struct jinja__buf *b, const char *s, size_t n, int ensure_ascii);

/* Case conversion of s[0..n) appended to b (simple mappings for Latin, Greek, Cyrillic). */
enum { JINJA__UPPER, JINJA__LOWER, JINJA__CAPITALIZE, JINJA__TITLE, JINJA__SWAPCASE };
void jinja__put_case(struct jinja__buf *b, const char *s, size_t n, int mode);
int jinja__cp_cased(uint32_t cp);

/* ---- values (jinja_value.c) ---------------------------------------------------------------- */

enum jinja__kind {
    JK_UNDEF, /* jinja2's Undefined; u.s holds the message an operation on it raises */
    JK_NONE,
    JK_BOOL,
    JK_INT,
    JK_FLOAT,
    JK_STR,
    JK_LIST,  /* also tuples (JF_TUPLE) */
    JK_DICT,  /* insertion-ordered; keys are any hashable value (compared with ==) */
    JK_OBJ,   /* namespace(): an attribute bag (always JF_NS) */
    JK_LOOP,  /* a for loop's `loop`: one object advanced by each iteration, as in jinja2 */
    JK_MACRO, /* a macro, or a call block's caller() (u.m.scope set) */
    JK_FUNC,  /* a builtin function or a method bound to u.f.self */
};

enum { JF_STATIC = 1, JF_TUPLE = 2, JF_NS = 4 };

struct jinja__acct {
    size_t used, limit; /* bytes of render-created values alive; over the limit sets over */
    int over;
    int deep; /* a container nested deeper than JINJA__MAX_NEST was built */
};

/* Containers nest at most this deep (values from cJSON: 1000 at most); recursive walkers stop
 * a little deeper, which only a reference cycle through a namespace can reach. */
#define JINJA__MAX_NEST 1024
#define JINJA__WALK_LIMIT 1100

struct jinja__node;
struct jinja__scope;
struct jinja__args;

struct jinja_value {
    int32_t refs;
    uint8_t kind;             /* enum jinja__kind */
    uint8_t flags;            /* JF_* */
    uint16_t fn;              /* JK_FUNC: builtin id (jinja_methods.c) */
    uint32_t depth;           /* containers: 1 + the deepest element's depth; scalars 0 */
    struct jinja__acct *acct; /* charged render, or NULL for caller-built values */
    size_t charged;           /* bytes charged to acct */
    union {
        int b;
        int64_t i;
        double f;
        struct {
            char *p; /* NUL-terminated; owned */
            size_t n;
        } s;
        struct {
            jinja_value **v;
            size_t n, cap;
        } l;
        struct {
            jinja_value **k, **v;
            size_t n, cap;
        } d;
        struct {
            const struct jinja__node *node; /* NULL once a caller() outlived its block */
            struct jinja__scope *scope;     /* caller(): the call block's scope */
        } m;
        struct {
            jinja_value *self; /* bound object, NULL for globals */
        } bound;
        struct {
            jinja_value *items; /* owned: the (filtered) list being iterated */
            size_t i;           /* current index0 */
        } loop;
    } u;
};

jinja_value *jinja__none(void);
jinja_value *jinja__bool(int b);
jinja_value *jinja__undef(void);
/* An undefined carrying the message an operation on it raises (printf format). */
jinja_value *jinja__undef_msg(struct jinja__acct *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
jinja_value *jinja__int(struct jinja__acct *a, int64_t v);
jinja_value *jinja__float(struct jinja__acct *a, double v);
jinja_value *jinja__str(struct jinja__acct *a, const char *s, size_t n);
/* Takes a malloc'd, NUL-terminated buffer of n bytes. */
jinja_value *jinja__str_take(struct jinja__acct *a, char *s, size_t n);
jinja_value *jinja__list(struct jinja__acct *a, size_t cap, int tuple);
jinja_value *jinja__dict(struct jinja__acct *a, enum jinja__kind kind);
jinja_value *jinja__func(struct jinja__acct *a, int fn, jinja_value *self /* transferred */);
jinja_value *jinja__macro(struct jinja__acct *a, const struct jinja__node *n,
                          struct jinja__scope *scope);
void jinja__list_push(jinja_value *l, jinja_value *v /* transferred */);
/* Sets d[k] = v (both transferred). */
void jinja__dict_put(jinja_value *d, jinja_value *k, jinja_value *v);
void jinja__dict_puts(jinja_value *d, const char *k, jinja_value *v /* transferred */);
/* Borrowed, NULL when missing. */
jinja_value *jinja__dict_get(const jinja_value *d, const jinja_value *k);
jinja_value *jinja__dict_gets(const jinja_value *d, const char *k, size_t n);
/* Drops every entry of a dict or object (breaks reference cycles through namespaces). */
void jinja__dict_clear(jinja_value *d);

int jinja__truthy(const jinja_value *v);
int jinja__equal(const jinja_value *a, const jinja_value *b);
/* Python ordering: *res = -1/0/1; returns -1 when the two cannot be ordered. */
int jinja__order(const jinja_value *a, const jinja_value *b, int *res);
int jinja__is_num(const jinja_value *v); /* bool, int or float */
double jinja__num(const jinja_value *v);
/* Python str() / repr() of v appended to b. */
void jinja__put_str(struct jinja__buf *b, const jinja_value *v);
void jinja__put_repr(struct jinja__buf *b, const jinja_value *v);
/* str(v) as a value: v itself when it is a string. */
jinja_value *jinja__to_str(struct jinja__acct *a, jinja_value *v /* borrowed */);
/* Python's type name for TypeError messages: "int", "NoneType", "list", ... */
const char *jinja__py_type(const jinja_value *v);
/* jinja2's object_type_repr: "dict object", "None", ... */
const char *jinja__type_name(const jinja_value *v);

/* ---- tokens (jinja_lex.c) ------------------------------------------------------------------ */

enum jinja__tk {
    TK_EOF,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
};

enum jinja__op {
    OP_NONE,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GE,
    OP_LT,
    OP_LE,
    OP_IN,
    OP_NOTIN,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMI,
    OP_NEG,
    OP_POS,
    OP_NOT,
};

struct jinja__tok {
    uint8_t type; /* enum jinja__tk */
    uint8_t op;   /* enum jinja__op for TK_OP */
    uint32_t line, col;
    const char *s; /* DATA, NAME, STRING (unescaped): arena or normalized source */
    size_t n;
    int64_t i;
    double f;
};

/*
 * Tokenizes src (already newline-normalized, in the arena) into an arena array ending with
 * TK_EOF. Returns 0, or DD_EINVAL with "line:col: message" in err.
 */
int jinja__lex(const char *src, size_t n, const struct jinja_opts *o, struct jinja__arena *ar,
               struct jinja__tok **toks, size_t *ntoks, char *err, size_t errlen);

/* ---- AST (jinja_parse.c) ------------------------------------------------------------------- */

enum jinja__nk {
    /* statements */
    NK_TEXT,
    NK_PRINT,
    NK_IF,
    NK_FOR,
    NK_SET,
    NK_SETBLOCK,
    NK_MACRO,
    NK_CALLBLOCK,
    NK_FILTERBLOCK,
    NK_WITH,
    NK_BREAK,
    NK_CONTINUE,
    NK_SCOPE,
    /* expressions */
    NK_CONST,
    NK_NAME,
    NK_LIST,
    NK_TUPLE,
    NK_DICT,
    NK_ATTR,
    NK_ITEM,
    NK_SLICE,
    NK_CALL,
    NK_FILTER,
    NK_TEST,
    NK_UNARY,
    NK_BIN,
    NK_AND,
    NK_OR,
    NK_CMP,
    NK_OPERAND,
    NK_CONCAT,
    NK_COND,
    NK_KW,
};

struct jinja__nodes {
    struct jinja__node **v;
    size_t n;
};

/*
 * One AST node; which fields mean what depends on kind (see jinja_parse.c's grammar comment).
 * Statement bodies and argument lists are `kids` / `kids2` / `kids3`.
 */
struct jinja__node {
    uint8_t kind; /* enum jinja__nk */
    uint8_t op;   /* enum jinja__op, or the constant's kind for NK_CONST, or negation */
    int16_t id;   /* filter / test id */
    uint32_t line, col;
    const char *s; /* name, attribute, string constant or text */
    size_t n;
    int64_t i;
    double f;
    struct jinja__node *a, *b, *c;
    struct jinja__nodes kids, kids2, kids3;
};

/* ---- parser (jinja_parse.c: plumbing, statements, compile; jinja_expr.c: expressions) ------ */

#define JINJA__MAX_NESTING 300 /* nested parse levels before "template nested too deeply" */

struct jinja__parser {
    const struct jinja__tok *t; /* borrowed token array, ends with TK_EOF */
    size_t i;
    struct jinja__arena *ar;
    int nesting;
    int uses;  /* the macro being parsed mentions varargs (1) / kwargs (2) */
    int loops; /* for bodies around the cursor (break/continue need one) */
    int failed;
    char *err;
    size_t errlen;
};

/* A node list under construction (malloc'd until finished into the arena). */
struct jinja__nvec {
    struct jinja__node **v;
    size_t n, cap;
};

typedef struct jinja__node jinja__node_t;
const struct jinja__tok *jinja__cur(const struct jinja__parser *p);
const struct jinja__tok *jinja__peek(const struct jinja__parser *p); /* the token after cur */
void jinja__advance(struct jinja__parser *p);
int jinja__tok_is(const struct jinja__tok *t, const char *name); /* a NAME token spelled name */
int jinja__at_name(const struct jinja__parser *p, const char *name);
int jinja__at_op(const struct jinja__parser *p, int op);
/* A token as jinja2 names it in messages ("end of print statement", "+", a name). */
const char *jinja__describe(const struct jinja__tok *t, char *buf, size_t cap);
/* Records the first error, "line:col: message" at token t; always returns NULL. */
jinja__node_t *jinja__perr(struct jinja__parser *p, const struct jinja__tok *t, const char *fmt,
                           ...) __attribute__((format(printf, 3, 4)));
jinja__node_t *jinja__unexpected(struct jinja__parser *p);
/* Consume the expected operator / token type or record an error; 0 or -1. */
int jinja__expect_op(struct jinja__parser *p, int op, const char *what);
int jinja__expect_type(struct jinja__parser *p, int type, const char *what);
/* A zeroed arena node at token at's position (mk2 also sets a and b). */
jinja__node_t *jinja__mk(struct jinja__parser *p, int kind, const struct jinja__tok *at);
jinja__node_t *jinja__mk2(struct jinja__parser *p, int kind, const struct jinja__tok *at,
                          jinja__node_t *a, jinja__node_t *b);
void jinja__vec_push(struct jinja__nvec *v, jinja__node_t *n);
/* Moves a vector into the arena and frees it. */
struct jinja__nodes jinja__vec_finish(struct jinja__parser *p, struct jinja__nvec *v);
/* One more parse level; fails past JINJA__MAX_NESTING (the caller decrements p->nesting). */
int jinja__enter(struct jinja__parser *p);

/* Expression entry points (jinja_expr.c); all return NULL after recording an error. */
jinja__node_t *jinja__parse_expr(struct jinja__parser *p, int with_cond);
/* Comma-separated expressions (a tuple when there is a comma); names_only parses assignment
 * targets, extra is a name that also ends the list ("in"), parens allows "()". */
jinja__node_t *jinja__parse_tuple(struct jinja__parser *p, int names_only, int with_cond,
                                  const char *extra, int parens);
jinja__node_t *jinja__parse_primary(struct jinja__parser *p);
jinja__node_t *jinja__parse_postfix(struct jinja__parser *p, jinja__node_t *n);
/* "|f(args)|g" chains on n; start_inline: the first filter has no "|" (filter blocks). */
jinja__node_t *jinja__parse_filters(struct jinja__parser *p, jinja__node_t *n, int start_inline);

struct jinja_tmpl {
    struct jinja_opts opts;
    struct jinja__arena arena; /* every node, token string and the normalized source */
    struct jinja__nodes body;
};

/* ---- render state (jinja_exec.c) ----------------------------------------------------------- */

struct jinja__var {
    const char *name; /* arena or static */
    size_t n;
    jinja_value *v; /* owned */
};

struct jinja__scope {
    struct jinja__scope *parent;
    struct jinja__var *v; /* owned array */
    size_t n, cap;
};

struct jinja__rs {
    const struct jinja_tmpl *t;
    jinja_value *ctx; /* borrowed render variables (a dict) or NULL */
    struct jinja__acct acct;
    struct jinja__buf *out; /* where text goes now (swapped while capturing) */
    struct jinja__scope *root, *scope;
    uint64_t steps;
    int depth;                /* nested macro calls */
    int nest;                 /* nested evaluations (bounds the C stack) */
    jinja_value *block_input; /* borrowed: the body text a filter block's chain starts from */
    int ctl;                  /* pending OP-less control: 1 break, 2 continue */
    int failed;               /* an error is in err */
    int code;                 /* DD_EINVAL or DD_EFULL */
    char *err;
    size_t errlen;
    jinja_value **ns; /* namespaces created, cleared at the end to break cycles */
    size_t nns, cap_ns;
};

/* Records an error "line:col: message" (node may be NULL); returns -1. */
int jinja__fail(struct jinja__rs *rs, const struct jinja__node *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records a limit error (DD_EFULL); returns -1. */
int jinja__fail_limit(struct jinja__rs *rs, const char *what);
/* raise_exception(msg): the error message is exactly msg; returns -1. */
int jinja__raise(struct jinja__rs *rs, const char *msg);
/* The error an operation on an undefined raises; returns -1. */
int jinja__fail_undef(struct jinja__rs *rs, const struct jinja__node *node, const jinja_value *u);
/* Counts one step (n items); fails past max_steps or max_memory. Returns 0 or -1. */
int jinja__step(struct jinja__rs *rs, uint64_t n);
/* Borrowed lookup through the scopes, the context, then the globals; NULL when undefined. */
jinja_value *jinja__lookup(struct jinja__rs *rs, const char *name, size_t n);
/* Calls a macro or caller() value. */
jinja_value *jinja__macro_call(struct jinja__rs *rs, const struct jinja__node *at,
                               jinja_value *macro, const struct jinja__args *args);
/* loop.<name> of a JK_LOOP value (an undefined for unknown names). */
jinja_value *jinja__loop_attr(struct jinja__rs *rs, jinja_value *loop, const char *name, size_t n);
/* Registers a namespace object so the end of the render can break cycles through it. */
void jinja__track_ns(struct jinja__rs *rs, jinja_value *ns);

/* ---- expressions (jinja_eval.c) ------------------------------------------------------------ */

struct jinja__args {
    jinja_value **pos; /* owned references */
    size_t npos;
    const char **kname; /* keyword names (arena) */
    size_t *klen;
    jinja_value **kval; /* owned references */
    size_t nkw;
    jinja_value *hold; /* owned: the **kwargs dict whose keys kname points into */
};

/* Nested evaluations and statement bodies (each a few C frames) before "nested too deeply". */
#define JINJA__MAX_EVAL_NEST 700

jinja_value *jinja__eval(struct jinja__rs *rs, const struct jinja__node *e);
/* The buffer's bytes as a string value (fails on an overflowed buffer); frees b. */
jinja_value *jinja__buf_value(struct jinja__rs *rs, struct jinja__buf *b);
/* Evaluates call arguments (kids: positional, kids2: NK_KW). Returns 0 or -1. */
int jinja__args_eval(struct jinja__rs *rs, const struct jinja__node *call, struct jinja__args *a);
void jinja__args_free(struct jinja__args *a);
/* Binds args to the comma-separated parameter names of spec (out[i], borrowed or NULL). */
int jinja__bind(struct jinja__rs *rs, const struct jinja__node *at, const char *fname,
                const char *spec, const struct jinja__args *a, jinja_value **out, int nout);
/* Argument checks: a string (what names it in the message) / an optional int (None or missing
 * give dflt). Return 0 or -1 with the error recorded. */
int jinja__want_str(struct jinja__rs *rs, const struct jinja__node *at, const jinja_value *v,
                    const char *what);
int jinja__opt_int(struct jinja__rs *rs, const struct jinja__node *at, const jinja_value *v,
                   int64_t dflt, int64_t *out);
jinja_value *jinja__getattr(struct jinja__rs *rs, jinja_value *obj, const char *name, size_t n);
jinja_value *jinja__getitem(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *obj,
                            jinja_value *key);
/* Calls any callable value. */
jinja_value *jinja__call(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *fn,
                         const struct jinja__args *a);
/* The items a for loop or filter iterates over, as a list (dict: keys; str: characters). */
jinja_value *jinja__iter_list(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *v);
/* NK_UNARY, NK_BIN, NK_AND, NK_OR, NK_CMP and NK_CONCAT (jinja_ops.c). */
jinja_value *jinja__eval_op(struct jinja__rs *rs, const struct jinja__node *e);
/* Python's binary arithmetic op (OP_ADD ... OP_POW) on x and y (borrowed). */
jinja_value *jinja__binop(struct jinja__rs *rs, const struct jinja__node *at, int op,
                          jinja_value *x, jinja_value *y);
/* Python's `needle in hay`: 1/0, or -1 on error. */
int jinja__contains(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *hay,
                    jinja_value *needle);

/* Builtin function ids (JK_FUNC values): globals, then methods by receiver kind. */
enum jinja__fn {
    FN_RANGE,
    FN_NAMESPACE,
    FN_DICT,
    FN_RAISE,
    FN_STRFTIME,
    FN_STARTSWITH,
    FN_ENDSWITH,
    FN_SPLIT,
    FN_RSPLIT,
    FN_SPLITLINES,
    FN_STRIP,
    FN_LSTRIP,
    FN_RSTRIP,
    FN_REPLACE,
    FN_UPPER,
    FN_LOWER,
    FN_TITLE,
    FN_CAPITALIZE,
    FN_SWAPCASE,
    FN_CASEFOLD,
    FN_FIND,
    FN_RFIND,
    FN_INDEX,
    FN_RINDEX,
    FN_COUNT,
    FN_JOIN,
    FN_FORMAT,
    FN_ISDIGIT,
    FN_ISALPHA,
    FN_ISALNUM,
    FN_ISSPACE,
    FN_ISLOWER,
    FN_ISUPPER,
    FN_CENTER,
    FN_LJUST,
    FN_RJUST,
    FN_ZFILL,
    FN_ITEMS,
    FN_KEYS,
    FN_VALUES,
    FN_GET,
    FN_DCOPY,
    FN_LINDEX,
    FN_LCOUNT,
    FN_LCOPY,
    FN_CYCLE,
};

/* ---- builtins (jinja_filters.c, jinja_methods.c) ------------------------------------------- */

int jinja__filter_find(const char *name, size_t n);
int jinja__test_find(const char *name, size_t n);
jinja_value *jinja__filter(struct jinja__rs *rs, const struct jinja__node *at, int id,
                           jinja_value *v, const struct jinja__args *a);
/* Returns 1/0, or -1 on error. */
int jinja__test(struct jinja__rs *rs, const struct jinja__node *at, int id, jinja_value *v,
                const struct jinja__args *a);
/* The sequence filters (jinja_seq.c); ids are local to that file. */
int jinja__seq_filter_find(const char *name, size_t n);
jinja_value *jinja__seq_filter(struct jinja__rs *rs, const struct jinja__node *at, int id,
                               jinja_value *v, const struct jinja__args *a);
/* Calls string method fn (FN_STARTSWITH ... FN_ZFILL) on self (jinja_str.c). */
jinja_value *jinja__str_method(struct jinja__rs *rs, const struct jinja__node *at, int fn,
                               jinja_value *self, const struct jinja__args *a);
/* A bound method of obj called name, or NULL when obj has none. */
jinja_value *jinja__method(struct jinja__rs *rs, jinja_value *obj, const char *name, size_t n);
/* A global function (range, namespace, dict, raise_exception, strftime_now) or NULL; borrowed. */
jinja_value *jinja__global(const char *name, size_t n);
jinja_value *jinja__func_call(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *fn,
                              const struct jinja__args *a);
/* json.dumps options as transformers' tojson passes them. */
struct jinja__json_opts {
    const char *indent; /* NULL: no newlines (json's indent=None) */
    size_t indent_n;
    const char *item_sep, *key_sep; /* ", " / ": " by default; "," with an indent */
    int sort_keys, ensure_ascii;
};
/* Appends json.dumps(v). Returns 0, or -1 with a message in err for a value JSON cannot
 * hold (undefined, macro, namespace) or a reference cycle. */
int jinja__put_json(struct jinja__buf *b, const jinja_value *v, const struct jinja__json_opts *o,
                    char *err, size_t errlen);

#endif
