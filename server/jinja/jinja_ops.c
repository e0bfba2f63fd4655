/*
 * jinja_ops — Python's operators on template values: arithmetic (+ - * / // % **), string and
 * list concatenation and repetition, comparisons (chained), `in`, `not`, `and`/`or` and `~`.
 *
 * Semantics are CPython's: `/` is true division, `//` and `%` floor (the result of % takes the
 * divisor's sign), ints and floats mix, bools count as ints, `and`/`or` return the deciding
 * operand. Integers are int64: an overflow is an error where Python would grow a big integer.
 * An undefined operand raises its message (jinja2's Undefined does the same), except for ==,
 * != and `in`, which treat it as an ordinary value.
 *
 * Invariants: every result is a new reference or NULL with the error recorded; repetition
 * checks its size against the memory limit before allocating.
 *
 * Threads: works on one render state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc
#include "jinja_impl.h"  // defines: jinja__rs, jinja__node, value helpers

/* ==== operators ============================================================================== */

/* The operator as Python prints it in TypeErrors. */
static const char *op_text(int op)
{
    static const char *const t[] = {
        [OP_ADD] = "+",   [OP_SUB] = "-", [OP_MUL] = "*",          [OP_DIV] = "/",
        [OP_FDIV] = "//", [OP_MOD] = "%", [OP_POW] = "** or pow()"};
    return op < (int)(sizeof(t) / sizeof(t[0])) && t[op] ? t[op] : "?";
}

/* ints and bools take the integer paths; anything with a float goes the double way. */
static int is_intlike(const jinja_value *v)
{
    return v->kind == JK_INT || v->kind == JK_BOOL;
}

static int64_t ival(const jinja_value *v)
{
    return v->kind == JK_INT ? v->u.i : v->u.b;
}

/* Where Python would switch to a big integer. */
static jinja_value *overflow(struct jinja__rs *rs, const struct jinja__node *at)
{
    jinja__fail(rs, at, "integer overflow (integers are 64-bit here)");
    return NULL;
}

/*
 * Exponentiation by squaring with overflow checks; a negative exponent gives a float, as in
 * Python.
 */
static jinja_value *int_pow(struct jinja__rs *rs, const struct jinja__node *at, int64_t b,
                            int64_t e)
{
    if (e < 0) {
        if (b == 0)
            return (jinja__fail(rs, at, "0.0 cannot be raised to a negative power"), NULL);
        return jinja__float(&rs->acct, pow((double)b, (double)e));
    }
    int64_t r = 1;
    while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, b, &r))
            return overflow(rs, at);
        e >>= 1;
        if (e && __builtin_mul_overflow(b, b, &b))
            return overflow(rs, at);
    }
    return jinja__int(&rs->acct, r);
}

/*
 * int op int with Python's rules: / is true division, // and % floor towards minus infinity,
 * overflow is an error.
 */
static jinja_value *int_arith(struct jinja__rs *rs, const struct jinja__node *at, int op, int64_t a,
                              int64_t b)
{
    int64_t r = 0;
    int bad = 0;
    if ((op == OP_FDIV || op == OP_MOD || op == OP_DIV) && b == 0)
        return (jinja__fail(rs, at, "division by zero"), NULL);
    switch (op) {
    case OP_ADD:
        bad = __builtin_add_overflow(a, b, &r);
        break;
    case OP_SUB:
        bad = __builtin_sub_overflow(a, b, &r);
        break;
    case OP_MUL:
        bad = __builtin_mul_overflow(a, b, &r);
        break;
    case OP_DIV:
        return jinja__float(&rs->acct, (double)a / (double)b);
    case OP_POW:
        return int_pow(rs, at, a, b);
    case OP_FDIV:
        if (a == INT64_MIN && b == -1)
            return overflow(rs, at);
        /* C truncates towards zero; Python floors */
        r = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
        break;
    default:                                /* OP_MOD */
        r = b == -1 ? 0 : a % b;            /* INT64_MIN % -1 traps in C */
        if (r != 0 && ((r < 0) != (b < 0))) /* Python: the result takes the divisor's sign */
            r += b;
        break;
    }
    return bad ? overflow(rs, at) : jinja__int(&rs->acct, r);
}

/* Python's float floor division and modulo (divmod). */
static void float_divmod(double x, double y, double *div, double *mod)
{
    double m = fmod(x, y), d = (x - m) / y;
    if (m != 0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    if (d != 0) {
        double f = floor(d);
        *div = d - f > 0.5 ? f + 1.0 : f;
    } else {
        *div = copysign(0.0, x / y);
    }
    *mod = m;
}

/*
 * float op float (either side may have been an int). Python raises on 0.0 ** -1 and would return a
 * complex number for a negative base with a fractional exponent; both are errors here.
 */
static jinja_value *float_arith(struct jinja__rs *rs, const struct jinja__node *at, int op,
                                double a, double b)
{
    double r, d, m;
    if ((op == OP_FDIV || op == OP_MOD || op == OP_DIV) && b == 0)
        return (jinja__fail(rs, at, "float division by zero"), NULL);
    switch (op) {
    case OP_ADD:
        r = a + b;
        break;
    case OP_SUB:
        r = a - b;
        break;
    case OP_MUL:
        r = a * b;
        break;
    case OP_DIV:
        r = a / b;
        break;
    case OP_POW:
        if (a == 0 && b < 0)
            return (jinja__fail(rs, at, "0.0 cannot be raised to a negative power"), NULL);
        if (a < 0 && b != floor(b))
            return (jinja__fail(rs, at, "negative number to a fractional power"), NULL);
        r = pow(a, b);
        break;
    default:
        float_divmod(a, b, &d, &m);
        r = op == OP_FDIV ? d : m;
        break;
    }
    return jinja__float(&rs->acct, r);
}

/* s * k or l * k. */
static jinja_value *repeat(struct jinja__rs *rs, jinja_value *seq, int64_t k)
{
    size_t unit = seq->kind == JK_STR ? seq->u.s.n : seq->u.l.n, total;
    if (k < 0)
        k = 0;
    /* refuse before allocating: 'x' * 10**12 must not even try */
    if (__builtin_mul_overflow(unit, (size_t)k, &total) || total > rs->acct.limit)
        return (jinja__fail_limit(rs, "max_memory"), NULL);
    if (jinja__step(rs, seq->kind == JK_STR ? total / 64 : total) < 0)
        return NULL;
    if (seq->kind == JK_LIST) {
        jinja_value *l = jinja__list(&rs->acct, total, seq->flags & JF_TUPLE);
        for (size_t i = 0; i < total; i++)
            jinja__list_push(l, jinja_value_acquire(seq->u.l.v[i % unit]));
        return l;
    }
    char *p = xmalloc(total + 1);
    for (int64_t i = 0; i < k; i++)
        memcpy(p + (size_t)i * unit, seq->u.s.p, unit);
    p[total] = 0;
    return jinja__str_take(&rs->acct, p, total);
}

/* str + str or list + list (tuple + tuple), as a new value. */
static jinja_value *join2(struct jinja__rs *rs, jinja_value *x, jinja_value *y)
{
    if (x->kind == JK_STR) {
        char *p = xmalloc(x->u.s.n + y->u.s.n + 1);
        memcpy(p, x->u.s.p, x->u.s.n);
        memcpy(p + x->u.s.n, y->u.s.p, y->u.s.n + 1);
        return jinja__str_take(&rs->acct, p, x->u.s.n + y->u.s.n);
    }
    if (jinja__step(rs, x->u.l.n + y->u.l.n) < 0)
        return NULL;
    jinja_value *l = jinja__list(&rs->acct, x->u.l.n + y->u.l.n, x->flags & JF_TUPLE);
    for (size_t i = 0; i < x->u.l.n; i++)
        jinja__list_push(l, jinja_value_acquire(x->u.l.v[i]));
    for (size_t i = 0; i < y->u.l.n; i++)
        jinja__list_push(l, jinja_value_acquire(y->u.l.v[i]));
    return l;
}

/* Picks the arithmetic that applies to the operand kinds, else Python's TypeError text. */
jinja_value *jinja__binop(struct jinja__rs *rs, const struct jinja__node *at, int op,
                          jinja_value *x, jinja_value *y)
{
    if (x->kind == JK_UNDEF || y->kind == JK_UNDEF)
        return (jinja__fail_undef(rs, at, x->kind == JK_UNDEF ? x : y), NULL);
    if (is_intlike(x) && is_intlike(y))
        return int_arith(rs, at, op, ival(x), ival(y));
    if (jinja__is_num(x) && jinja__is_num(y))
        return float_arith(rs, at, op, jinja__num(x), jinja__num(y));
    int seq_x = x->kind == JK_STR || x->kind == JK_LIST,
        seq_y = y->kind == JK_STR || y->kind == JK_LIST;
    if (op == OP_ADD && x->kind == y->kind && seq_x &&
        (x->flags & JF_TUPLE) == (y->flags & JF_TUPLE))
        return join2(rs, x, y);
    if (op == OP_MUL && seq_x && is_intlike(y))
        return repeat(rs, x, ival(y));
    if (op == OP_MUL && seq_y && is_intlike(x))
        return repeat(rs, y, ival(x));
    if (op == OP_ADD && seq_x) /* Python words this case differently */
        jinja__fail(rs, at, "can only concatenate %s (not \"%s\") to %s", jinja__py_type(x),
                    jinja__py_type(y), jinja__py_type(x));
    else
        jinja__fail(rs, at, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                    jinja__py_type(x), jinja__py_type(y));
    return NULL;
}

/*
 * Substring for strings, == membership for lists, key presence for dicts; an undefined container
 * holds nothing (jinja2's Undefined iterates as empty).
 */
int jinja__contains(struct jinja__rs *rs, const struct jinja__node *at, jinja_value *hay,
                    jinja_value *needle)
{
    switch (hay->kind) {
    case JK_UNDEF:
        return 0;
    case JK_STR:
        if (needle->kind != JK_STR)
            return jinja__fail(rs, at, "'in <string>' requires string as left operand, not %s",
                               jinja__py_type(needle));
        return needle->u.s.n == 0 ||
               memmem(hay->u.s.p, hay->u.s.n, needle->u.s.p, needle->u.s.n) != NULL;
    case JK_LIST:
        for (size_t i = 0; i < hay->u.l.n; i++)
            if (jinja__equal(hay->u.l.v[i], needle))
                return 1;
        return 0;
    case JK_DICT:
        return jinja__dict_get(hay, needle) != NULL;
    default:
        return jinja__fail(rs, at, "argument of type '%s' is not iterable", jinja__py_type(hay));
    }
}

/* One comparison of a chain; 1/0, or -1 on error. */
static int compare(struct jinja__rs *rs, const struct jinja__node *at, int op, jinja_value *x,
                   jinja_value *y)
{
    if (op == OP_EQ || op == OP_NE)
        return jinja__equal(x, y) == (op == OP_EQ);
    if (op == OP_IN || op == OP_NOTIN) {
        int r = jinja__contains(rs, at, y, x);
        return r < 0 ? -1 : r == (op == OP_IN);
    }
    if (x->kind == JK_UNDEF || y->kind == JK_UNDEF) /* Undefined.__lt__ raises */
        return jinja__fail_undef(rs, at, x->kind == JK_UNDEF ? x : y);
    int c;
    if (jinja__order(x, y, &c) < 0) {
        static const char *const sym[] = {
            [OP_GT] = ">", [OP_GE] = ">=", [OP_LT] = "<", [OP_LE] = "<="};
        return jinja__fail(rs, at, "'%s' not supported between instances of '%s' and '%s'", sym[op],
                           jinja__py_type(x), jinja__py_type(y));
    }
    switch (op) {
    case OP_GT:
        return c > 0;
    case OP_GE:
        return c >= 0;
    case OP_LT:
        return c < 0;
    default:
        return c <= 0;
    }
}

/*
 * a op1 b op2 c ... is (a op1 b) and (b op2 c) ..., stopping at the first false, each operand
 * evaluated once (Python's chaining).
 */
static jinja_value *eval_compare(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *left = jinja__eval(rs, e->a);
    int r = left ? 1 : -1;
    for (size_t i = 0; r == 1 && i < e->kids.n; i++) {
        const struct jinja__node *o = e->kids.v[i];
        jinja_value *right = jinja__eval(rs, o->a);
        r = right ? compare(rs, o, o->op, left, right) : -1;
        jinja_value_release(left);
        left = right;
    }
    jinja_value_release(left);
    return r < 0 ? NULL : jinja__bool(r);
}

/* not x is always a bool; -x and +x need a number. */
static jinja_value *eval_unary(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *v = jinja__eval(rs, e->a);
    if (!v || e->op == OP_NOT) {
        jinja_value *r = v ? jinja__bool(!jinja__truthy(v)) : NULL;
        jinja_value_release(v);
        return r;
    }
    jinja_value *r = NULL;
    if (v->kind == JK_UNDEF)
        jinja__fail_undef(rs, e, v);
    else if (!jinja__is_num(v))
        jinja__fail(rs, e, "bad operand type for unary %s: '%s'", e->op == OP_NEG ? "-" : "+",
                    jinja__py_type(v));
    else if (v->kind == JK_FLOAT)
        r = jinja__float(&rs->acct, e->op == OP_NEG ? -v->u.f : v->u.f);
    else if (e->op == OP_NEG && ival(v) == INT64_MIN)
        overflow(rs, e);
    else
        r = jinja__int(&rs->acct, e->op == OP_NEG ? -ival(v) : ival(v));
    jinja_value_release(v);
    return r;
}

/* Both operands are evaluated before the operator applies (no short-circuit). */
static jinja_value *eval_binop(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *x = jinja__eval(rs, e->a), *y = x ? jinja__eval(rs, e->b) : NULL, *r = NULL;
    if (y)
        r = jinja__binop(rs, e, e->op, x, y);
    jinja_value_release(x);
    jinja_value_release(y);
    return r;
}

/* a and b / a or b: Python returns the deciding operand. */
static jinja_value *eval_logic(struct jinja__rs *rs, const struct jinja__node *e)
{
    jinja_value *x = jinja__eval(rs, e->a);
    if (!x || jinja__truthy(x) == (e->kind == NK_OR))
        return x;
    jinja_value_release(x);
    return jinja__eval(rs, e->b);
}

/* a ~ b ~ c: the str() of each operand, joined; undefined contributes nothing. */
static jinja_value *eval_concat(struct jinja__rs *rs, const struct jinja__node *e)
{
    struct jinja__buf b = {.limit = rs->acct.limit};
    for (size_t i = 0; i < e->kids.n; i++) {
        jinja_value *v = jinja__eval(rs, e->kids.v[i]);
        if (!v) {
            jinja__buf_free(&b);
            return NULL;
        }
        jinja__put_str(&b, v);
        jinja_value_release(v);
    }
    return jinja__buf_value(rs, &b);
}

/* Entry point for the operator nodes. */
jinja_value *jinja__eval_op(struct jinja__rs *rs, const struct jinja__node *e)
{
    switch (e->kind) {
    case NK_UNARY:
        return eval_unary(rs, e);
    case NK_BIN:
        return eval_binop(rs, e);
    case NK_AND:
    case NK_OR:
        return eval_logic(rs, e);
    case NK_CMP:
        return eval_compare(rs, e);
    default:
        return eval_concat(rs, e);
    }
}
