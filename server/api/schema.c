/*
 * schema — JSON Schema to GBNF (contract, coverage and limits in schema.h).
 *
 * Every subschema becomes one rule "sN ::= ..." (N in order of generation); references are
 * memoised by their pointer text before their target is generated, so a recursive schema
 * refers to a rule that is still being written. allOf members are merged into one object
 * schema (a cJSON tree this module owns until the end). The shared primitives (ws, jstring,
 * jint, jnumber, jvalue, ...) are written once, first. Errors carry the JSON pointer of the
 * subschema being compiled.
 *
 * Thread safety: no shared state.
 */
#include "schema.h" // defines: schema_to_gbnf

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched/gram.h" // defines: GRAM_MAX_REPEAT
#include "engine/util.h"       // defines: struct dd_buf, xmalloc
#include "json.h"              // defines: json_utf8_valid
#include "schema_impl.h"       // defines: schema__pattern

#define INF UINT64_MAX

/* The primitives every generated grammar starts with. Whitespace is bounded: nothing, one
 * blank, or one newline and up to 16 blanks. */
#define SCHEMA_PRIMS_A                                                                             \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,16}\n"                                                      \
    "jhex ::= [0-9a-fA-F]\n"
#define SCHEMA_JCHAR "jchar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" jesc )\n"
/* Inside the XML tool-call form '<' only as an escape: a value never holds "</parameter>". */
#define SCHEMA_JCHAR_XML                                                                           \
    "jchar ::= [^\"\\\\\\x00-\\x1f<] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" jesc )\n"
#define SCHEMA_PRIMS_B                                                                             \
    "jesc ::= [0-9a-cA-Ce-fE-F] jhex jhex jhex | [dD] [0-7] jhex jhex\n"                           \
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"                                                       \
    "jint ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"                                              \
    "jnumber ::= jint ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"                         \
    "jbool ::= \"true\" | \"false\"\n"                                                             \
    "jnull ::= \"null\"\n"                                                                         \
    "jvalue ::= jobject | jarray | jstring | jnumber | jbool | jnull\n"                            \
    "jmember ::= jstring ws \":\" ws jvalue ws\n"                                                  \
    "jobject ::= \"{\" ws ( jmember ( \",\" ws jmember )* )? \"}\"\n"                              \
    "jarray ::= \"[\" ws ( jvalue ws ( \",\" ws jvalue ws )* )? \"]\"\n"
#define SCHEMA_PRIMS SCHEMA_PRIMS_A SCHEMA_JCHAR SCHEMA_PRIMS_B
static const char prims[] = SCHEMA_PRIMS;
static const char prims_xml[] = SCHEMA_PRIMS_A SCHEMA_JCHAR_XML SCHEMA_PRIMS_B;

/* response_format json_object: any object, over the same primitives. */
static const char json_object_gbnf[] = "root ::= jobject\n" SCHEMA_PRIMS;

const char *schema_json_object_gbnf(void)
{
    return json_object_gbnf;
}

/* ---- generator state ---------------------------------------------------------------------- */

struct sref {
    char *ptr;
    int id;
};

struct sg {
    const cJSON *root;
    struct dd_buf *out;
    struct sref *refs;
    int n_refs, cap_refs;
    cJSON **owned;
    int n_owned, cap_owned;
    int n_rules;
    char *err;
    size_t errlen;
    bool failed;
    char path[256];
    char pre[12];          /* rule name prefix: several schemas can share one grammar */
    enum schema_text text; /* JSON, or JSON inside the XML tool-call form */
};

/* What a generator owns: the $ref names it numbered and the merged allOf schemas. */
static void sg_release(struct sg *g)
{
    for (int k = 0; k < g->n_refs; k++)
        free(g->refs[k].ptr);
    free(g->refs);
    for (int k = 0; k < g->n_owned; k++)
        cJSON_Delete(g->owned[k]);
    free(g->owned);
}

__attribute__((format(printf, 2, 3))) static int fail(struct sg *g, const char *fmt, ...)
{
    if (g->failed)
        return -1;
    g->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dd_errf(g->err, g->errlen, "%s: %s", g->path[0] ? g->path : "#", msg);
    return -1;
}

/* Append "/seg" (escaped per JSON pointer) to the error path; returns the old length. */
static size_t path_push(struct sg *g, const char *a, const char *b)
{
    size_t old = strlen(g->path);
    if (old == 0)
        snprintf(g->path, sizeof g->path, "#");
    size_t n = strlen(g->path);
    snprintf(g->path + n, sizeof g->path - n, "/%s%s%s", a, b ? "/" : "", b ? b : "");
    return old;
}

static void path_pop(struct sg *g, size_t old)
{
    g->path[old] = 0;
}

/* A GBNF string literal of bytes s[0 .. n). */
static void lit(struct dd_buf *b, const char *s, size_t n)
{
    dd_buf_putc(b, '"');
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"' || c == '\\')
            dd_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            dd_buf_printf(b, "\\x%02x", c);
        else
            dd_buf_putc(b, (char)c);
    }
    dd_buf_puts(b, "\" ");
}

/* The literal of a JSON value as cJSON prints it; in the XML tool-call form '<' (which can
 * only be in a string) as the escape \u003c. */
static void lit_json(struct sg *g, struct dd_buf *b, const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    ASSERT(s);
    struct dd_buf x = {0};
    for (const char *c = s; *c; c++)
        if (*c == '<' && g->text == SCHEMA_TEXT_JSON_XML)
            dd_buf_puts(&x, "\\u003c");
        else
            dd_buf_putc(&x, *c);
    lit(b, x.p, x.len);
    dd_buf_free(&x);
    free(s);
}

static int new_rule(struct sg *g)
{
    if (g->n_rules >= SCHEMA_MAX_RULES)
        return fail(g, "the schema needs more than %d grammar rules", SCHEMA_MAX_RULES);
    return g->n_rules++;
}

/* Write "sN<suffix> ::= expr\n". */
static void put_rule(struct sg *g, int id, const char *suffix, const struct dd_buf *expr)
{
    dd_buf_printf(g->out, "%ss%d%s ::= ", g->pre, id, suffix);
    dd_buf_put(g->out, expr->p, expr->len);
    dd_buf_putc(g->out, '\n');
    if (g->out->len > SCHEMA_MAX_TEXT)
        fail(g, "the schema's grammar exceeds %u bytes", SCHEMA_MAX_TEXT);
}

static const cJSON *kw(const cJSON *s, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

/* ---- keywords ----------------------------------------------------------------------------- */

static const char *const annotations[] = {
    "title",      "description", "default",   "examples", "$schema",     "$id", "$comment",
    "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", NULL};
static const char *const assertions[] = {"type",
                                         "enum",
                                         "const",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "format",
                                         "pattern",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (strcmp(*l, k) == 0)
            return true;
    return false;
}

/* Every keyword known; returns the number of assertion keywords. */
static int check_keywords(struct sg *g, const cJSON *s)
{
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, s)
    {
        if (in_list(annotations, m->string))
            continue;
        if (!in_list(assertions, m->string))
            return fail(g,
                        "the keyword '%.64s' is not supported (deltad refuses what it cannot "
                        "enforce)",
                        m->string);
        n++;
    }
    return n;
}

/* ---- integers ----------------------------------------------------------------------------- */

static void digits_of(uint64_t v, char *out)
{
    snprintf(out, 24, "%llu", (unsigned long long)v);
}

/* Numbers of n digits from lo to hi (same length, lo <= hi), as one parenthesised expression. */
static void same_len(struct dd_buf *b, const char *lo, const char *hi, int n)
{
    if (n == 0)
        return;
    if (lo[0] == hi[0]) {
        dd_buf_printf(b, "\"%c\" ", lo[0]);
        same_len(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo0 = strspn(lo + 1, "0") == (size_t)(n - 1), hi9 = strspn(hi + 1, "9") == (size_t)(n - 1);
    char a = lo[0], z = hi[0];
    int alts = 0;
    dd_buf_puts(b, "( ");
    if (!lo0) {
        char nines[24];
        memset(nines, '9', (size_t)n - 1);
        nines[n - 1] = 0;
        dd_buf_printf(b, "\"%c\" ", a);
        same_len(b, lo + 1, nines, n - 1);
        a++;
        alts++;
    }
    if (!hi9) {
        char zeros[24];
        memset(zeros, '0', (size_t)n - 1);
        zeros[n - 1] = 0;
        dd_buf_printf(b, "%s\"%c\" ", alts ? "| " : "", z);
        same_len(b, zeros, hi + 1, n - 1);
        z--;
        alts++;
    }
    if (a <= z) {
        dd_buf_printf(b, "%s[%c-%c] ", alts ? "| " : "", a, z);
        if (n > 1)
            dd_buf_printf(b, "[0-9]{%d} ", n - 1);
    }
    dd_buf_puts(b, ") ");
}

static uint64_t pow10u(int k)
{
    uint64_t p = 1;
    while (k-- > 0)
        p *= 10;
    return p;
}

/* Unsigned integers in [lo, hi] (hi == INF: up to 16 digits), without leading zeros. */
static void uint_range(struct dd_buf *b, uint64_t lo, uint64_t hi)
{
    char slo[24], shi[24];
    digits_of(lo, slo);
    int dlo = (int)strlen(slo), dhi = 16;
    if (hi != INF) {
        digits_of(hi, shi);
        dhi = (int)strlen(shi);
    }
    dd_buf_puts(b, "( ");
    for (int d = dlo; d <= dhi; d++) {
        if (d > dlo)
            dd_buf_puts(b, "| ");
        if (hi == INF && d > dlo) { /* every longer number */
            dd_buf_printf(b, "[1-9] [0-9]{%d,15} ", d - 1);
            break;
        }
        char a[24], z[24];
        digits_of(d == dlo ? lo : pow10u(d - 1), a);
        digits_of(hi != INF && d == dhi ? hi : pow10u(d) - 1, z);
        same_len(b, a, z, d);
    }
    dd_buf_puts(b, ") ");
}

/* One integer bound: *v set, *has set; exclusive bounds move inward. */
static int int_bound(struct sg *g, const cJSON *s, const char *k, bool upper, bool excl, int64_t *v,
                     bool *has)
{
    const cJSON *x = kw(s, k);
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 1e15)
        return fail(g, "'%s' must be a number within +-1e15", k);
    double d = x->valuedouble;
    int64_t b = upper ? (int64_t)floor(d) : (int64_t)ceil(d);
    if (excl && (double)b == d)
        b += upper ? -1 : 1;
    if (!*has || (upper ? b < *v : b > *v))
        *v = b;
    *has = true;
    return 0;
}

static int int_expr(struct sg *g, const cJSON *s, struct dd_buf *e)
{
    int64_t lo = 0, hi = 0;
    bool hl = false, hh = false;
    if (int_bound(g, s, "minimum", false, false, &lo, &hl) ||
        int_bound(g, s, "exclusiveMinimum", false, true, &lo, &hl) ||
        int_bound(g, s, "maximum", true, false, &hi, &hh) ||
        int_bound(g, s, "exclusiveMaximum", true, true, &hi, &hh))
        return -1;
    if (!hl && !hh) {
        dd_buf_puts(e, "jint ");
        return 0;
    }
    if (hl && hh && lo > hi)
        return fail(g, "no integer lies between the minimum %lld and the maximum %lld",
                    (long long)lo, (long long)hi);
    dd_buf_puts(e, "( ");
    bool alt = false;
    if (!hh || hi >= 0) {
        uint_range(e, hl && lo > 0 ? (uint64_t)lo : 0, hh ? (uint64_t)hi : INF);
        alt = true;
    }
    if (!hl || lo < 0) {
        dd_buf_puts(e, alt ? "| \"-\" " : "\"-\" ");
        uint_range(e, hh && hi < 0 ? (uint64_t)-hi : 1, hl ? (uint64_t)-lo : INF);
    }
    dd_buf_puts(e, ") ");
    return 0;
}

/* number with bounds: whole-number bounds >= 0 only (0..1, 1..5, 0..100: the common ones). The
 * integer part runs over the range and a fraction of at most 6 digits follows (few enough that a
 * double never rounds onto an exclusive bound); no exponent. */
static int number_expr(struct sg *g, const cJSON *s, struct dd_buf *e)
{
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum",
                                       "exclusiveMaximum"};
    double v[4];
    bool has[4];
    for (int k = 0; k < 4; k++) {
        const cJSON *x = kw(s, keys[k]);
        has[k] = x != NULL;
        v[k] = has[k] && cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (has[k] && !(v[k] >= 0 && v[k] <= 1e15 && v[k] == floor(v[k])))
            return fail(g, "bounds on type 'number' must be whole numbers from 0 to 1e15 ('%s')",
                        keys[k]);
    }
    if (has[0] && has[1])
        return fail(g, "'minimum' together with 'exclusiveMinimum' is not supported");
    if (has[2] && has[3])
        return fail(g, "'maximum' together with 'exclusiveMaximum' is not supported");
    if (!has[0] && !has[1])
        return fail(g, "bounds on type 'number' need a 'minimum' or 'exclusiveMinimum' >= 0");
    uint64_t lo = (uint64_t)(has[0] ? v[0] : v[1]);
    bool lo_ex = has[1], hi_set = has[2] || has[3], hi_ex = has[3];
    uint64_t hi = hi_set ? (uint64_t)(has[2] ? v[2] : v[3]) : INF;
    if (hi_set && (hi < lo || (hi == lo && (lo_ex || hi_ex))))
        return fail(g, "no number lies between the bounds");
    const char *frac = "( \".\" [0-9]{1,6} )? ";
    dd_buf_puts(e, "( ");
    bool alt = false;
    if (lo_ex) { /* lo itself only with a non-zero fraction */
        if (!hi_set || hi > lo) {
            dd_buf_printf(e, "\"%llu.\" [0-9]{0,5} [1-9] ", (unsigned long long)lo);
            alt = true;
        }
        lo++;
    }
    if (!hi_set || lo < hi) { /* whole part in [lo, hi - 1], any fraction */
        dd_buf_puts(e, alt ? "| " : "");
        uint_range(e, lo, hi_set ? hi - 1 : INF);
        dd_buf_puts(e, frac);
        alt = true;
    }
    if (hi_set && !hi_ex && hi >= lo) /* hi itself, maybe with zeros */
        dd_buf_printf(e, "%s\"%llu\" ( \".\" \"0\"{1,6} )? ", alt ? "| " : "",
                      (unsigned long long)hi);
    dd_buf_puts(e, ") ");
    return 0;
}

/* ---- strings ------------------------------------------------------------------------------ */

static const char *format_expr(const char *f)
{
    static const char *const fmts[][2] = {
        {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" "
                 "[0-9] | \"2\" [0-8] )"},
        {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
                 "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
        {"date-time",
         "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" "
         "[0-8] ) \"T\" ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
         "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
        {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                 "[0-9a-f]{12}"},
        {"email", "[a-zA-Z0-9] [a-zA-Z0-9._+-]{0,31} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,31} ( "
                  "\".\" [a-zA-Z]{2,8} ){1,3}"},
        {"uri",
         "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \"://\" [a-zA-Z0-9] [a-zA-Z0-9.-]{0,62} ( \"/\" "
         "[a-zA-Z0-9._~!$&'()*+,;=:@-]{0,32} ){0,8} ( \"?\" [a-zA-Z0-9._~!$&'()*+,;=:@/?-]{0,64} "
         ")?"},
    };
    for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++)
        if (strcmp(fmts[k][0], f) == 0)
            return fmts[k][1];
    return NULL;
}

/* A non-negative integer keyword no larger than GRAM_MAX_REPEAT; absent leaves *v. */
static int count_kw(struct sg *g, const cJSON *s, const char *k, uint64_t *v)
{
    const cJSON *x = kw(s, k);
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
        x->valuedouble > GRAM_MAX_REPEAT)
        return fail(g, "'%s' must be an integer between 0 and %d", k, GRAM_MAX_REPEAT);
    *v = (uint64_t)x->valuedouble;
    return 0;
}

static void repeat_suffix(struct dd_buf *e, uint64_t lo, uint64_t hi)
{
    if (hi == INF)
        dd_buf_printf(e, "{%llu,} ", (unsigned long long)lo);
    else
        dd_buf_printf(e, "{%llu,%llu} ", (unsigned long long)lo, (unsigned long long)hi);
}

/* A string's contents between quotes, or raw (a string parameter of the XML tool-call form: the
 * characters themselves, never "</parameter>": the rule xraw-s0 of schema_primitives_xml, or
 * no '<' at all where the length is bounded). */
static int string_expr(struct sg *g, const cJSON *s, bool raw, struct dd_buf *e)
{
    uint64_t lo = 0, hi = INF;
    const cJSON *f = kw(s, "format");
    const char *q = raw ? "" : "\"\\\"\" ";
    if (count_kw(g, s, "minLength", &lo) || count_kw(g, s, "maxLength", &hi))
        return -1;
    if (lo > hi)
        return fail(g, "'minLength' is above 'maxLength'");
    const cJSON *pat = kw(s, "pattern");
    if (pat) {
        char perr[256];
        if (!cJSON_IsString(pat))
            return fail(g, "'pattern' must be a string");
        if (f || kw(s, "minLength") || kw(s, "maxLength"))
            return fail(g, "'pattern' together with 'format' or lengths is not supported");
        dd_buf_puts(e, q);
        if (schema__pattern(pat->valuestring, raw ? SCHEMA_TEXT_RAW : g->text, e, perr,
                            sizeof perr))
            return fail(g, "%s", perr);
        dd_buf_puts(e, q);
        return 0;
    }
    if (f) {
        const char *fx = cJSON_IsString(f) ? format_expr(f->valuestring) : NULL;
        if (!fx)
            return fail(g, "'format' must be one of date, time, date-time, uuid, email, uri");
        if (kw(s, "minLength") || kw(s, "maxLength"))
            return fail(g, "'format' together with 'minLength' / 'maxLength' is not supported");
        dd_buf_printf(e, "%s%s %s", q, fx, q);
        return 0;
    }
    if (raw && hi == INF) {
        if (lo)
            dd_buf_printf(e, "[^<]{%llu} ", (unsigned long long)lo);
        dd_buf_puts(e, "xraw-s0 ");
        return 0;
    }
    dd_buf_puts(e, raw ? "[^<]" : "\"\\\"\" jchar");
    repeat_suffix(e, lo, hi);
    dd_buf_puts(e, q);
    return 0;
}

/* ---- the recursion ------------------------------------------------------------------------ */

static int gen(struct sg *g, const cJSON *s, int depth, char *name);

/* The rule of a subschema under path segment(s) a[/b]; name gets its rule name. */
static int gen_at(struct sg *g, const cJSON *s, int depth, const char *a, const char *b, char *name)
{
    size_t old = path_push(g, a, b);
    int rc = gen(g, s, depth + 1, name);
    if (rc == 0)
        path_pop(g, old);
    return rc;
}

static int object_expr(struct sg *g, const cJSON *s, int depth, int id, struct dd_buf *e)
{
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required");
    const cJSON *ap = kw(s, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return fail(g, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return fail(g, "'required' must be an array of strings");
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return fail(g, "'additionalProperties' must be a boolean or a schema");
    int n = cJSON_GetArraySize(props) + cJSON_GetArraySize(req);
    const char **key = xcalloc((size_t)n + 1, sizeof *key);
    char(*sub)[24] = xcalloc((size_t)n + 1, sizeof *sub);
    bool *must = xcalloc((size_t)n + 1, sizeof *must);
    int np = 0, rc = -1;
    const cJSON *m;
    cJSON_ArrayForEach(m, props)
    {
        key[np] = m->string;
        if (gen_at(g, m, depth, "properties", m->string, sub[np]))
            goto out;
        np++;
    }
    cJSON_ArrayForEach(m, req)
    {
        if (!cJSON_IsString(m)) {
            fail(g, "'required' must be an array of strings");
            goto out;
        }
        int k = 0;
        while (k < np && strcmp(key[k], m->valuestring) != 0)
            k++;
        if (k == np) { /* required but not described: any value */
            key[np] = m->valuestring;
            snprintf(sub[np++], sizeof *sub, "jvalue");
        }
        must[k] = true;
    }
    if (np == 0) {
        if (cJSON_IsFalse(ap)) {
            dd_buf_puts(e, "\"{\" ws \"}\" ");
        } else if (cJSON_IsObject(ap)) {
            char v[24];
            if (gen_at(g, ap, depth, "additionalProperties", NULL, v))
                goto out;
            dd_buf_printf(e,
                          "\"{\" ws ( jstring ws \":\" ws %s ws ( \",\" ws jstring ws \":\" ws "
                          "%s ws )* )? \"}\" ",
                          v, v);
        } else {
            dd_buf_puts(e, "jobject ");
        }
        rc = 0;
        goto out;
    }
    /* kv_i; tail T_i = the properties from i on, each after a comma (s<id>-t<i>) */
    struct dd_buf kv = {0}, t = {0};
    for (int i = np - 1; i >= 1; i--) {
        dd_buf_truncate(&t, 0);
        dd_buf_puts(&t, must[i] ? "" : "( ");
        dd_buf_puts(&t, "\",\" ws ");
        cJSON *k = cJSON_CreateString(key[i]);
        lit_json(g, &t, k);
        cJSON_Delete(k);
        dd_buf_printf(&t, "ws \":\" ws %s ws %s", sub[i], must[i] ? "" : ")? ");
        if (i + 1 < np)
            dd_buf_printf(&t, "%ss%d-t%d ", g->pre, id, i + 1);
        char suffix[24];
        snprintf(suffix, sizeof suffix, "-t%d", i);
        put_rule(g, id, suffix, &t);
    }
    dd_buf_puts(e, "\"{\" ws ( ");
    bool any_required = false;
    for (int j = 0; j < np; j++) {
        dd_buf_truncate(&kv, 0);
        cJSON *k = cJSON_CreateString(key[j]);
        lit_json(g, &kv, k);
        cJSON_Delete(k);
        dd_buf_printf(&kv, "ws \":\" ws %s ws ", sub[j]);
        if (j)
            dd_buf_puts(e, "| ");
        dd_buf_put(e, kv.p, kv.len);
        if (j + 1 < np)
            dd_buf_printf(e, "%ss%d-t%d ", g->pre, id, j + 1);
        if (must[j]) {
            any_required = true;
            break;
        }
    }
    if (!any_required)
        dd_buf_puts(e, "| ");
    dd_buf_puts(e, ") \"}\" ");
    dd_buf_free(&kv);
    dd_buf_free(&t);
    rc = g->failed ? -1 : 0;
out:
    free(key);
    free(sub);
    free(must);
    return rc;
}

static int array_expr(struct sg *g, const cJSON *s, int depth, int id, struct dd_buf *e)
{
    const cJSON *items = kw(s, "items"), *pre = kw(s, "prefixItems");
    uint64_t lo = 0, hi = INF;
    if (count_kw(g, s, "minItems", &lo) || count_kw(g, s, "maxItems", &hi))
        return -1;
    if (pre && !cJSON_IsArray(pre))
        return fail(g, "'prefixItems' must be an array of schemas");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return fail(g, "'items' must be a schema (an array of schemas is prefixItems)");
    int c = cJSON_GetArraySize(pre);
    char item[24] = "";
    if (!items || cJSON_IsTrue(items))
        snprintf(item, sizeof item, "jvalue");
    else if (cJSON_IsObject(items) && gen_at(g, items, depth, "items", NULL, item))
        return -1;
    if (!item[0] && hi > (uint64_t)c)
        hi = (uint64_t)c;
    if (lo > hi)
        return fail(g, "'minItems' cannot be met (maxItems or the prefixItems/items limit)");
    char(*p)[24] = xcalloc((size_t)c + 1, sizeof *p);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, pre)
    {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (gen_at(g, m, depth, "prefixItems", idx, p[i])) {
            free(p);
            return -1;
        }
        i++;
    }
    /* A_i: the items from index i on (s<id>-a<i>), written last to first */
    struct dd_buf a = {0};
    int last = -1; /* the highest i with a non-empty A_i */
    if (item[0] && (uint64_t)c < hi) {
        uint64_t need = lo > (uint64_t)c ? lo - (uint64_t)c : 0, room = hi == INF ? INF : hi - c;
        if (c == 0) {
            dd_buf_printf(&a, "%s%s ws ( \",\" ws %s ws )", need ? "" : "( ", item, item);
            repeat_suffix(&a, need ? need - 1 : 0, room == INF ? INF : room - 1);
            if (!need)
                dd_buf_puts(&a, ")? ");
        } else {
            dd_buf_printf(&a, "( \",\" ws %s ws )", item);
            repeat_suffix(&a, need, room);
        }
        char suffix[24];
        snprintf(suffix, sizeof suffix, "-a%d", c);
        put_rule(g, id, suffix, &a);
        last = c;
    }
    for (i = c - 1; i >= 0; i--) {
        if ((uint64_t)i >= hi)
            continue;
        dd_buf_truncate(&a, 0);
        bool opt = (uint64_t)i >= lo;
        dd_buf_printf(&a, "%s%s%s ws ", opt ? "( " : "", i ? "\",\" ws " : "", p[i]);
        if (last == i + 1)
            dd_buf_printf(&a, "%ss%d-a%d ", g->pre, id, i + 1);
        if (opt)
            dd_buf_puts(&a, ")? ");
        char suffix[24];
        snprintf(suffix, sizeof suffix, "-a%d", i);
        put_rule(g, id, suffix, &a);
        last = i;
    }
    dd_buf_puts(e, "\"[\" ws ");
    if (last == 0)
        dd_buf_printf(e, "%ss%d-a0 ", g->pre, id);
    dd_buf_puts(e, "\"]\" ");
    dd_buf_free(&a);
    free(p);
    return g->failed ? -1 : 0;
}

/* The expression of one type name. */
static int type_expr(struct sg *g, const cJSON *s, const char *t, int depth, int id,
                     struct dd_buf *e)
{
    if (strcmp(t, "null") == 0)
        dd_buf_puts(e, "jnull ");
    else if (strcmp(t, "boolean") == 0)
        dd_buf_puts(e, "jbool ");
    else if (strcmp(t, "integer") == 0)
        return int_expr(g, s, e);
    else if (strcmp(t, "number") == 0) {
        if (kw(s, "minimum") || kw(s, "maximum") || kw(s, "exclusiveMinimum") ||
            kw(s, "exclusiveMaximum"))
            return number_expr(g, s, e);
        dd_buf_puts(e, "jnumber ");
    } else if (strcmp(t, "string") == 0)
        return string_expr(g, s, false, e);
    else if (strcmp(t, "array") == 0)
        return array_expr(g, s, depth, id, e);
    else if (strcmp(t, "object") == 0)
        return object_expr(g, s, depth, id, e);
    else
        return fail(g,
                    "unknown type '%.32s' (string, number, integer, boolean, object, array, "
                    "null)",
                    t);
    return 0;
}

/* Without "type": the one type the keywords imply, or NULL for any value. */
static int implied_type(struct sg *g, const cJSON *s, const char **t)
{
    static const char *const groups[][6] = {
        {"object", "properties", "required", "additionalProperties", NULL},
        {"array", "items", "prefixItems", "minItems", "maxItems", NULL},
        {"string", "minLength", "maxLength", "format", "pattern", NULL},
        {"integer", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL},
    };
    *t = NULL;
    for (size_t k = 0; k < 4; k++)
        for (int j = 1; groups[k][j]; j++)
            if (kw(s, groups[k][j])) {
                if (*t && strcmp(*t, groups[k][0]) != 0)
                    return fail(g, "keywords of several types without a 'type'");
                *t = groups[k][0];
            }
    return 0;
}

static int types_expr(struct sg *g, const cJSON *s, int depth, int id, struct dd_buf *e)
{
    const cJSON *ty = kw(s, "type");
    const char *t = NULL;
    if (!ty) {
        if (implied_type(g, s, &t))
            return -1;
        if (!t) {
            dd_buf_puts(e, "jvalue ");
            return 0;
        }
        return type_expr(g, s, t, depth, id, e);
    }
    if (cJSON_IsString(ty))
        return type_expr(g, s, ty->valuestring, depth, id, e);
    if (!cJSON_IsArray(ty) || !ty->child)
        return fail(g, "'type' must be a type name or a non-empty array of them");
    const cJSON *m;
    int k = 0;
    dd_buf_puts(e, "( ");
    cJSON_ArrayForEach(m, ty)
    {
        if (!cJSON_IsString(m))
            return fail(g, "'type' must be a type name or a non-empty array of them");
        if (k++)
            dd_buf_puts(e, "| ");
        if (type_expr(g, s, m->valuestring, depth, id, e))
            return -1;
    }
    dd_buf_puts(e, ") ");
    return 0;
}

/* $ref: a JSON pointer into the document ("#", "#/$defs/x", ...). */
static const cJSON *resolve(const cJSON *root, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/' && n + 1 < sizeof seg; p++) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                seg[n++] = *p;
            }
        }
        seg[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = *end || !seg[0] ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, seg) : NULL;
        }
    }
    return *p ? NULL : cur;
}

static int gen_ref(struct sg *g, const cJSON *s, int depth, char *name)
{
    const cJSON *r = kw(s, "$ref");
    if (!cJSON_IsString(r))
        return fail(g, "'$ref' must be a string");
    const cJSON *m;
    cJSON_ArrayForEach(
        m, s) if (!in_list(annotations, m->string) &&
                  strcmp(m->string, "$ref")) return fail(g,
                                                         "'%.64s' next to '$ref' is not supported",
                                                         m->string);
    for (int k = 0; k < g->n_refs; k++)
        if (strcmp(g->refs[k].ptr, r->valuestring) == 0) {
            snprintf(name, 24, "%ss%d", g->pre, g->refs[k].id);
            return 0;
        }
    const cJSON *target = resolve(g->root, r->valuestring);
    if (!target)
        return fail(g,
                    "'$ref' '%.128s' does not resolve inside the schema (only local "
                    "references '#/...' are supported)",
                    r->valuestring);
    int id = new_rule(g);
    if (id < 0)
        return -1;
    if (g->n_refs == g->cap_refs) {
        g->cap_refs = g->cap_refs ? 2 * g->cap_refs : 8;
        g->refs = xrealloc(g->refs, (size_t)g->cap_refs * sizeof *g->refs);
    }
    g->refs[g->n_refs++] = (struct sref){xstrdup(r->valuestring), id};
    char sub[24];
    size_t old = path_push(g, "$ref", NULL);
    if (gen(g, target, depth + 1, sub))
        return -1;
    path_pop(g, old);
    struct dd_buf e = {0};
    dd_buf_printf(&e, "%s", sub);
    put_rule(g, id, "", &e);
    dd_buf_free(&e);
    snprintf(name, 24, "%ss%d", g->pre, id);
    return g->failed ? -1 : 0;
}

/* One allOf member x (references followed) into props / req; false when it is not an object
 * schema. */
static bool merge_one(struct sg *g, const cJSON *x, bool member, cJSON *props, cJSON *req,
                      bool *closed)
{
    for (int hop = 0; cJSON_IsObject(x) && kw(x, "$ref") && hop < 16; hop++)
        x = cJSON_IsString(kw(x, "$ref")) ? resolve(g->root, kw(x, "$ref")->valuestring) : NULL;
    const cJSON *t = cJSON_IsObject(x) ? kw(x, "type") : NULL;
    if (!cJSON_IsObject(x) || (t && !(cJSON_IsString(t) && !strcmp(t->valuestring, "object"))) ||
        kw(x, "anyOf") || kw(x, "oneOf") || (member && kw(x, "allOf")) || kw(x, "enum") ||
        kw(x, "const") || (member && kw(x, "$ref")))
        return false;
    const cJSON *p, *pr = kw(x, "properties"), *rq = kw(x, "required");
    if ((pr && !cJSON_IsObject(pr)) || (rq && !cJSON_IsArray(rq)))
        return false; /* an array's members have no names to merge by (found by fuzz_gram) */
    cJSON_ArrayForEach(p, pr)
    {
        if (cJSON_GetObjectItemCaseSensitive(props, p->string))
            return false;
        cJSON_AddItemToObject(props, p->string, cJSON_Duplicate(p, true));
    }
    cJSON_ArrayForEach(p, rq)
    {
        if (!cJSON_IsString(p))
            return false;
        cJSON_AddItemToArray(req, cJSON_Duplicate(p, true));
    }
    *closed = *closed || cJSON_IsFalse(kw(x, "additionalProperties"));
    return true;
}

/* allOf: every member an object schema; merged with the schema's own properties into one
 * object schema (owned by g until the end). */
static int merge_all_of(struct sg *g, const cJSON *s, cJSON **out)
{
    const cJSON *all = kw(s, "allOf");
    if (!cJSON_IsArray(all) || !all->child)
        return fail(g, "'allOf' must be a non-empty array of schemas");
    cJSON *mg = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    cJSON_AddStringToObject(mg, "type", "object");
    cJSON_AddItemToObject(mg, "properties", props);
    cJSON_AddItemToObject(mg, "required", req);
    if (g->n_owned == g->cap_owned) {
        g->cap_owned = g->cap_owned ? 2 * g->cap_owned : 4;
        g->owned = xrealloc(g->owned, (size_t)g->cap_owned * sizeof *g->owned);
    }
    g->owned[g->n_owned++] = mg;
    bool closed = false, ok = merge_one(g, s, false, props, req, &closed);
    const cJSON *m;
    cJSON_ArrayForEach(m, all) ok = ok && merge_one(g, m, true, props, req, &closed);
    if (!ok)
        return fail(g, "'allOf' is supported for object schemas (properties, required, "
                       "additionalProperties) that define each property once");
    if (closed)
        cJSON_AddFalseToObject(mg, "additionalProperties");
    *out = mg;
    return 0;
}

static unsigned types_of(const cJSON *root, const cJSON *s, int depth);
static int check_one_of(struct sg *g, const cJSON *arr);

/* The alternatives of an array of schemas (anyOf / oneOf / enum / const); enum and const
 * values of a type the schema's "type" leaves out are not generated. */
static int alternatives(struct sg *g, const cJSON *s, int depth, struct dd_buf *e)
{
    const cJSON *c = kw(s, "const"), *en = kw(s, "enum");
    const char *comb = kw(s, "anyOf") ? "anyOf" : "oneOf";
    const cJSON *arr = kw(s, comb), *m;
    unsigned types = kw(s, "type") ? types_of(g->root, s, 0) : SCHEMA_T_ANY;
    dd_buf_puts(e, "( ");
    if (c) {
        if (!(schema_value_type(c) & types))
            return fail(g, "'const' is not of the schema's 'type'");
        lit_json(g, e, c);
    } else if (en) {
        if (!cJSON_IsArray(en) || !en->child)
            return fail(g, "'enum' must be a non-empty array");
        int k = 0;
        cJSON_ArrayForEach(m, en)
        {
            if (!(schema_value_type(m) & types))
                continue;
            if (k++)
                dd_buf_puts(e, "| ");
            lit_json(g, e, m);
        }
        if (!k)
            return fail(g, "no value of 'enum' is of the schema's 'type'");
    } else {
        if (!cJSON_IsArray(arr) || !arr->child)
            return fail(g, "'%s' must be a non-empty array of schemas", comb);
        if (strcmp(comb, "oneOf") == 0 && check_one_of(g, arr))
            return -1;
        int k = 0;
        cJSON_ArrayForEach(m, arr)
        {
            char idx[16], sub[24];
            snprintf(idx, sizeof idx, "%d", k);
            if (gen_at(g, m, depth, comb, idx, sub))
                return -1;
            dd_buf_printf(e, "%s%s ", k++ ? "| " : "", sub);
        }
    }
    dd_buf_puts(e, ") ");
    return 0;
}

static int gen(struct sg *g, const cJSON *s, int depth, char *name)
{
    if (depth > SCHEMA_MAX_DEPTH)
        return fail(g, "the schema is nested deeper than %d levels", SCHEMA_MAX_DEPTH);
    if (cJSON_IsTrue(s)) {
        snprintf(name, 24, "jvalue");
        return 0;
    }
    if (cJSON_IsFalse(s))
        return fail(g, "the schema 'false' matches nothing");
    if (!cJSON_IsObject(s))
        return fail(g, "a schema must be an object or a boolean");
    int n = check_keywords(g, s);
    if (n < 0)
        return -1;
    if (kw(s, "$ref"))
        return gen_ref(g, s, depth, name);
    if (kw(s, "allOf")) {
        cJSON *merged;
        if (merge_all_of(g, s, &merged))
            return -1;
        return gen(g, merged, depth + 1, name);
    }
    bool alt = kw(s, "const") || kw(s, "enum") || kw(s, "anyOf") || kw(s, "oneOf");
    if (alt && n > 1 && !(n == 2 && kw(s, "type") && (kw(s, "enum") || kw(s, "const"))))
        return fail(g, "'enum', 'const', 'anyOf' and 'oneOf' combine only with 'type' (and "
                       "enum/const only)");
    int id = new_rule(g);
    if (id < 0)
        return -1;
    struct dd_buf e = {0};
    int rc = alt ? alternatives(g, s, depth, &e) : types_expr(g, s, depth, id, &e);
    if (rc == 0)
        put_rule(g, id, "", &e);
    dd_buf_free(&e);
    snprintf(name, 24, "%ss%d", g->pre, id);
    return g->failed ? -1 : 0;
}

/* ---- JSON types ---------------------------------------------------------------------------- */

static unsigned type_bit(const char *t)
{
    static const struct {
        const char *name;
        unsigned bits;
    } m[] = {{"null", SCHEMA_T_NULL},   {"boolean", SCHEMA_T_BOOL},
             {"integer", SCHEMA_T_INT}, {"number", SCHEMA_T_INT | SCHEMA_T_NUM},
             {"string", SCHEMA_T_STR},  {"array", SCHEMA_T_ARR},
             {"object", SCHEMA_T_OBJ}};
    for (size_t k = 0; k < sizeof m / sizeof *m; k++)
        if (strcmp(m[k].name, t) == 0)
            return m[k].bits;
    return SCHEMA_T_ANY; /* an unknown type: the compiler refuses it */
}

unsigned schema_value_type(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return SCHEMA_T_NULL;
    if (cJSON_IsBool(v))
        return SCHEMA_T_BOOL;
    if (cJSON_IsNumber(v))
        return isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) ? SCHEMA_T_INT
                                                                                   : SCHEMA_T_NUM;
    if (cJSON_IsString(v))
        return SCHEMA_T_STR;
    return cJSON_IsArray(v) ? SCHEMA_T_ARR : cJSON_IsObject(v) ? SCHEMA_T_OBJ : 0;
}

static unsigned types_of(const cJSON *root, const cJSON *s, int depth)
{
    if (!cJSON_IsObject(s) || depth > SCHEMA_MAX_DEPTH)
        return SCHEMA_T_ANY;
    const cJSON *r = kw(s, "$ref"), *ty = kw(s, "type"), *m;
    if (cJSON_IsString(r)) {
        const cJSON *t = resolve(root, r->valuestring);
        return t ? types_of(root, t, depth + 1) : SCHEMA_T_ANY;
    }
    unsigned bits = SCHEMA_T_ANY, u = 0;
    if (cJSON_IsString(ty)) {
        bits = type_bit(ty->valuestring);
    } else if (cJSON_IsArray(ty) && ty->child) {
        bits = 0;
        cJSON_ArrayForEach(m, ty)
        {
            bits |= cJSON_IsString(m) ? type_bit(m->valuestring) : SCHEMA_T_ANY;
        }
    } else if (!ty) { /* the type the keywords imply (implied_type) */
        static const struct {
            const char *k;
            unsigned bits;
        } imp[] = {{"properties", SCHEMA_T_OBJ},
                   {"required", SCHEMA_T_OBJ},
                   {"additionalProperties", SCHEMA_T_OBJ},
                   {"items", SCHEMA_T_ARR},
                   {"prefixItems", SCHEMA_T_ARR},
                   {"minItems", SCHEMA_T_ARR},
                   {"maxItems", SCHEMA_T_ARR},
                   {"minLength", SCHEMA_T_STR},
                   {"maxLength", SCHEMA_T_STR},
                   {"format", SCHEMA_T_STR},
                   {"pattern", SCHEMA_T_STR}};
        for (size_t k = 0; k < sizeof imp / sizeof *imp; k++)
            if (kw(s, imp[k].k))
                bits &= imp[k].bits;
    }
    if (kw(s, "const")) {
        bits &= schema_value_type(kw(s, "const"));
    } else if (cJSON_IsArray(kw(s, "enum"))) {
        cJSON_ArrayForEach(m, kw(s, "enum")) u |= schema_value_type(m);
        bits &= u;
    }
    const cJSON *alt = kw(s, "anyOf") ? kw(s, "anyOf") : kw(s, "oneOf");
    if (cJSON_IsArray(alt)) {
        u = 0;
        cJSON_ArrayForEach(m, alt) u |= types_of(root, m, depth + 1);
        bits &= u;
    }
    if (cJSON_IsArray(kw(s, "allOf")))
        cJSON_ArrayForEach(m, kw(s, "allOf")) bits &= types_of(root, m, depth + 1);
    return bits;
}

/* ---- oneOf ------------------------------------------------------------------------------------
 *
 * A value generated for one branch of a oneOf must be invalid under every other branch. That is
 * decided, conservatively, per ordered pair (a, b) by excludes(a, b) — "every value generated
 * from a fails b" — and holds when:
 *   - a's values are a finite set (const / enum) whose members b's types or b's own finite set
 *     leave out;
 *   - a and b share no type, or share only "object" and a's objects fail b: b requires a
 *     property a never writes (a declares its properties and not that one), or a always writes
 *     a property b forbids (additionalProperties false), or a always writes a property whose
 *     value b's schema of it excludes (a discriminator: {"kind": {"const": "cat"}}).
 * Anything else is refused (use anyOf, or make the branches disjoint).
 */

#define ONEOF_MAX_BRANCHES 64

/* s with its $refs followed (NULL when one does not resolve or loops too long). */
static const cJSON *deref(const cJSON *root, const cJSON *s)
{
    for (int hop = 0; cJSON_IsObject(s) && kw(s, "$ref") && hop < 16; hop++)
        s = cJSON_IsString(kw(s, "$ref")) ? resolve(root, kw(s, "$ref")->valuestring) : NULL;
    return cJSON_IsObject(s) && kw(s, "$ref") ? NULL : s;
}

/* The finite set of values s allows (its const as a one-member set, or its enum), else NULL;
 * *one is set for a const. */
static const cJSON *values_of(const cJSON *s, bool *one)
{
    *one = cJSON_IsObject(s) && kw(s, "const");
    if (*one)
        return kw(s, "const");
    const cJSON *en = cJSON_IsObject(s) ? kw(s, "enum") : NULL;
    return cJSON_IsArray(en) && en->child ? en->child : NULL;
}

static bool in_set(const cJSON *v, const cJSON *set, bool one)
{
    for (const cJSON *w = set; w; w = one ? NULL : w->next)
        if (cJSON_Compare(v, w, true))
            return true;
    return false;
}

static bool listed(const cJSON *arr, const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, arr)
    {
        if (cJSON_IsString(m) && strcmp(m->valuestring, name) == 0)
            return true;
    }
    return false;
}

static bool excludes(const cJSON *root, const cJSON *a, const cJSON *b, int depth);

/* a and b object schemas (followed): every object generated from a fails b. */
static bool objects_exclude(const cJSON *root, const cJSON *a, const cJSON *b, int depth)
{
    const cJSON *pa = kw(a, "properties"), *ra = kw(a, "required");
    const cJSON *pb = kw(b, "properties"), *rb = kw(b, "required"), *m;
    bool keys_known = (cJSON_IsObject(pa) && pa->child) || (cJSON_IsArray(ra) && ra->child);
    if (kw(a, "allOf") || kw(b, "allOf"))
        return false;
    cJSON_ArrayForEach(m, rb) /* b requires what a never writes */
    {
        if (keys_known && cJSON_IsString(m) &&
            !cJSON_GetObjectItemCaseSensitive(pa, m->valuestring) && !listed(ra, m->valuestring))
            return true;
    }
    cJSON_ArrayForEach(m, ra)
    {
        if (!cJSON_IsString(m))
            continue;
        const cJSON *sb =
            cJSON_IsObject(pb) ? cJSON_GetObjectItemCaseSensitive(pb, m->valuestring) : NULL;
        if (!sb && cJSON_IsFalse(kw(b, "additionalProperties")))
            return true; /* a always writes what b forbids */
        const cJSON *sa =
            cJSON_IsObject(pa) ? cJSON_GetObjectItemCaseSensitive(pa, m->valuestring) : NULL;
        if (sb && sa && excludes(root, sa, sb, depth + 1))
            return true; /* a discriminator */
    }
    return false;
}

static bool excludes(const cJSON *root, const cJSON *a, const cJSON *b, int depth)
{
    a = deref(root, a);
    b = deref(root, b);
    if (!a || !b || depth > 8)
        return false;
    if (cJSON_IsFalse(b))
        return true;
    bool one_a, one_b;
    const cJSON *fa = values_of(a, &one_a), *fb = values_of(b, &one_b);
    unsigned ta = types_of(root, a, 0), tb = types_of(root, b, 0);
    if (fa) {
        bool all = true;
        for (const cJSON *v = fa; v && all; v = one_a ? NULL : v->next)
            all = !(schema_value_type(v) & tb) || (fb && !in_set(v, fb, one_b));
        if (all)
            return true;
    }
    unsigned common = ta & tb;
    if (common == 0)
        return true;
    return common == SCHEMA_T_OBJ && !fa && !fb && cJSON_IsObject(a) && cJSON_IsObject(b) &&
           objects_exclude(root, a, b, depth);
}

static int check_one_of(struct sg *g, const cJSON *arr)
{
    const cJSON *x, *y;
    int i = 0;
    if (cJSON_GetArraySize(arr) > ONEOF_MAX_BRANCHES)
        return fail(g, "'oneOf' with more than %d branches is not supported", ONEOF_MAX_BRANCHES);
    for (x = arr->child; x; x = x->next, i++) {
        int j = i + 1;
        for (y = x->next; y; y = y->next, j++)
            if (!excludes(g->root, x, y, 0) || !excludes(g->root, y, x, 0))
                return fail(g,
                            "'oneOf' branches %d and %d may both match one value, so deltad "
                            "cannot enforce exactly one: give the branches different types, "
                            "const / enum values or required properties, or use 'anyOf'",
                            i, j);
    }
    return 0;
}

unsigned schema_types(const cJSON *root, const cJSON *s)
{
    return types_of(root, s, 0);
}

/* ---- the XML tool-call form ------------------------------------------------------------------ */

static int gen_raw(struct sg *g, const cJSON *s, int depth, char *name);
static const char *bad_utf8(const cJSON *v, int depth);

/* The alternatives of a raw string: const / enum literals (the strings among them), anyOf /
 * oneOf branches, else the string keywords. */
static int raw_expr(struct sg *g, const cJSON *s, int depth, struct dd_buf *e)
{
    const cJSON *c = kw(s, "const"), *en = kw(s, "enum"), *m;
    const char *comb = kw(s, "anyOf") ? "anyOf" : kw(s, "oneOf") ? "oneOf" : NULL;
    int k = 0;
    if (c || en) {
        if (en && (!cJSON_IsArray(en) || !en->child))
            return fail(g, "'enum' must be a non-empty array");
        dd_buf_puts(e, "( ");
        for (m = c ? c : en->child; m; m = c ? NULL : m->next) {
            if (!cJSON_IsString(m))
                continue;
            if (strstr(m->valuestring, "</parameter>"))
                return fail(g, "a value holding \"</parameter>\" cannot be written in the XML "
                               "tool-call form");
            dd_buf_puts(e, k++ ? "| " : "");
            lit(e, m->valuestring, strlen(m->valuestring));
        }
        dd_buf_puts(e, ") ");
        return k ? 0 : fail(g, "no string value to choose from");
    }
    if (comb) {
        const cJSON *arr = kw(s, comb);
        if (!cJSON_IsArray(arr) || !arr->child)
            return fail(g, "'%s' must be a non-empty array of schemas", comb);
        if (strcmp(comb, "oneOf") == 0 && check_one_of(g, arr))
            return -1;
        dd_buf_puts(e, "( ");
        cJSON_ArrayForEach(m, arr)
        {
            char idx[16], sub[24];
            snprintf(idx, sizeof idx, "%d", k);
            size_t old = path_push(g, comb, idx);
            if (gen_raw(g, m, depth + 1, sub))
                return -1;
            path_pop(g, old);
            dd_buf_printf(e, "%s%s ", k++ ? "| " : "", sub);
        }
        dd_buf_puts(e, ") ");
        return 0;
    }
    return string_expr(g, s, true, e);
}

/* The rule of a string parameter's raw value (schema_types said: strings only). */
static int gen_raw(struct sg *g, const cJSON *s, int depth, char *name)
{
    if (depth > SCHEMA_MAX_DEPTH)
        return fail(g, "the schema is nested deeper than %d levels", SCHEMA_MAX_DEPTH);
    if (!cJSON_IsObject(s))
        return fail(g, "a schema must be an object or a boolean");
    if (check_keywords(g, s) < 0)
        return -1;
    const cJSON *r = kw(s, "$ref");
    if (r) {
        const cJSON *t = cJSON_IsString(r) ? resolve(g->root, r->valuestring) : NULL;
        if (!t)
            return fail(g, "'$ref' must be a reference that resolves inside the schema");
        size_t old = path_push(g, "$ref", NULL);
        int rc = gen_raw(g, t, depth + 1, name);
        if (rc == 0)
            path_pop(g, old);
        return rc;
    }
    if (kw(s, "allOf"))
        return fail(g, "'allOf' of string schemas is not supported");
    int id = new_rule(g);
    if (id < 0)
        return -1;
    struct dd_buf e = {0};
    int rc = raw_expr(g, s, depth, &e);
    if (rc == 0)
        put_rule(g, id, "", &e);
    dd_buf_free(&e);
    snprintf(name, 24, "%ss%d", g->pre, id);
    return g->failed ? -1 : 0;
}

/* One parameter: rule <pre>-p<k> ::= "<parameter=NAME>\n" value "\n</parameter>\n", the value
 * raw for a string-only schema (the parser takes it as text), else JSON (the parser takes text
 * that is JSON of the schema's types as JSON). s NULL: a required name without a schema. */
static int xml_param(struct sg *g, const char *key, const cJSON *s, int k)
{
    char sub[24], hd[160];
    size_t old = path_push(g, "properties", key), n = strlen(key);
    if (n == 0 || n > 120 || strpbrk(key, "<>\n\r"))
        return fail(g, "a property name must be 1 to 120 bytes without '<', '>' or newlines to "
                       "be a parameter of the XML tool-call form");
    snprintf(sub, sizeof sub, "jvalue");
    if (s && (schema_types(g->root, s) == SCHEMA_T_STR ? gen_raw(g, s, 1, sub) : gen(g, s, 1, sub)))
        return -1;
    path_pop(g, old);
    struct dd_buf e = {0};
    snprintf(hd, sizeof hd, "<parameter=%s>\n", key);
    lit(&e, hd, strlen(hd));
    dd_buf_printf(&e, "%s \"\\n</parameter>\\n\" ", sub);
    char suffix[24];
    snprintf(suffix, sizeof suffix, "-p%d", k);
    dd_buf_printf(g->out, "%s%s ::= ", g->pre, suffix);
    dd_buf_put(g->out, e.p, e.len);
    dd_buf_putc(g->out, '\n');
    dd_buf_free(&e);
    return g->failed ? -1 : 0;
}

/* The parameters of an object schema, declared ones in their order (required ones always). */
static int xml_params(struct sg *g, const cJSON *s, struct dd_buf *e)
{
    static const char *const top[] = {"type", "properties", "required", "additionalProperties",
                                      NULL};
    const cJSON *m, *props = kw(s, "properties"), *req = kw(s, "required"), *ty = kw(s, "type");
    const cJSON *ap = kw(s, "additionalProperties");
    cJSON_ArrayForEach(m, s)
    {
        if (!in_list(annotations, m->string) && !in_list(top, m->string))
            return fail(g,
                        "'%.64s' cannot be enforced at the top of a tool's parameters in the XML "
                        "tool-call form (an object schema with properties, required and "
                        "additionalProperties can)",
                        m->string);
    }
    if (ty && !(cJSON_IsString(ty) && strcmp(ty->valuestring, "object") == 0))
        return fail(g, "a tool's parameters must be an object schema");
    if ((props && !cJSON_IsObject(props)) || (req && !cJSON_IsArray(req)) ||
        (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap)))
        return fail(g, "'properties' must be an object, 'required' an array of strings and "
                       "'additionalProperties' a boolean or a schema");
    int k = 0;
    cJSON_ArrayForEach(m, req)
    {
        if (!cJSON_IsString(m))
            return fail(g, "'required' must be an array of strings");
    }
    cJSON_ArrayForEach(m, props)
    {
        bool must = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, req) must = must || strcmp(r->valuestring, m->string) == 0;
        if (xml_param(g, m->string, m, k))
            return -1;
        dd_buf_printf(e, "%s-p%d%s ", g->pre, k++, must ? "" : "?");
    }
    cJSON_ArrayForEach(m, req) /* required but not described: any value */
    {
        if (cJSON_GetObjectItemCaseSensitive(props, m->valuestring))
            continue;
        if (xml_param(g, m->valuestring, NULL, k))
            return -1;
        dd_buf_printf(e, "%s-p%d ", g->pre, k++);
    }
    return 0;
}

int schema_xml_params(const cJSON *schema, const char *prefix, struct dd_buf *out, char *err,
                      size_t errlen)
{
    if (bad_utf8(schema, 0)) {
        dd_errf(err, errlen, "#: a string in the schema is not valid UTF-8");
        return -1;
    }
    struct sg g = {
        .root = schema, .out = out, .err = err, .errlen = errlen, .text = SCHEMA_TEXT_JSON_XML};
    snprintf(g.pre, sizeof g.pre, "%s", prefix);
    size_t at = out->len;
    const cJSON *s = schema;
    for (int hop = 0; cJSON_IsObject(s) && cJSON_IsString(kw(s, "$ref")) && hop < 16; hop++)
        s = resolve(schema, kw(s, "$ref")->valuestring);
    cJSON *merged = NULL;
    struct dd_buf e = {0};
    int rc = !cJSON_IsObject(s) ? fail(&g, "a tool's parameters must be an object schema")
             : kw(s, "allOf") && merge_all_of(&g, s, &merged)
                 ? -1
                 : xml_params(&g, merged ? merged : s, &e);
    if (rc == 0 && !g.failed)
        dd_buf_printf(out, "%s ::= %.*s\n", prefix, (int)e.len, e.p ? e.p : "");
    else
        dd_buf_truncate(out, at);
    dd_buf_free(&e);
    sg_release(&g);
    return rc || g.failed ? -1 : 0;
}

void schema_primitives_xml(struct dd_buf *out)
{
    dd_buf_puts(out, prims_xml);
    schema_text_until(out, "xraw", "</parameter>");
}

void schema_gbnf_literal(struct dd_buf *out, const char *s, size_t n)
{
    lit(out, s, n);
}

/* The first string (a value or a member name) in v that is not valid UTF-8, or NULL. The HTTP
 * layer refuses such bodies before they get here; a schema from elsewhere (a file given to
 * deltad bench, the fuzzer) must not put stray bytes into grammar literals either. */
static const char *bad_utf8(const cJSON *v, int depth)
{
    if (depth > 256)
        return NULL; /* deeper than gen() accepts: it refuses the schema itself */
    if (v->string && !json_utf8_valid(v->string, strlen(v->string)))
        return v->string;
    if (cJSON_IsString(v) && v->valuestring &&
        !json_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return v->valuestring;
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *b = bad_utf8(c, depth + 1);
        if (b)
            return b;
    }
    return NULL;
}

int schema_rules(const cJSON *schema, const char *prefix, struct dd_buf *out, char *err,
                 size_t errlen)
{
    if (bad_utf8(schema, 0)) {
        dd_errf(err, errlen, "#: a string in the schema is not valid UTF-8");
        return -1;
    }
    struct sg g = {.root = schema, .out = out, .err = err, .errlen = errlen};
    snprintf(g.pre, sizeof g.pre, "%s", prefix);
    char top[24];
    size_t at = out->len;
    int rc = gen(&g, schema, 0, top);
    if (rc == 0)
        dd_buf_printf(out, "%s ::= %s\n", prefix, top);
    else
        dd_buf_truncate(out, at);
    sg_release(&g);
    return rc ? -1 : 0;
}

void schema_primitives(struct dd_buf *out)
{
    dd_buf_puts(out, prims);
}

int schema_to_gbnf(const cJSON *schema, struct dd_buf *out, char *err, size_t errlen)
{
    if (schema_rules(schema, "root", out, err, errlen))
        return -1;
    schema_primitives(out);
    return 0;
}

void schema_text_until(struct dd_buf *out, const char *name, const char *pat)
{
    /* name-sK: K characters of pat matched; the text never contains pat. pat's first character
     * must not occur again in it (true of "</think>" and "<tool_call>"), so a mismatch falls
     * back to state 1 on that character and to state 0 on any other. */
    size_t n = strlen(pat);
    ASSERT(n >= 2 && n < 32 && !strchr(pat + 1, pat[0]));
    char p0 = pat[0];
    dd_buf_printf(out, "%s-s0 ::= | [^%c] %s-s0 | \"%c\" %s-s1\n", name, p0, name, p0, name);
    for (size_t k = 1; k + 1 < n; k++)
        dd_buf_printf(out, "%s-s%zu ::= | \"%c\" %s-s%zu | \"%c\" %s-s1 | [^%c%c] %s-s0\n", name, k,
                      pat[k], name, k + 1, p0, name, pat[k], p0, name);
    dd_buf_printf(out, "%s-s%zu ::= | \"%c\" %s-s1 | [^%c%c] %s-s0\n", name, n - 1, p0, name,
                  pat[n - 1], p0, name);
}

void schema_think_prefix(struct dd_buf *out, const char *start)
{
    dd_buf_printf(out, "%s ::= deltad-think-s0 \"</think>\" \"\\n\"{0,2} root\n", start);
    schema_text_until(out, "deltad-think", "</think>");
}
