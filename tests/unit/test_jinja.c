/*
 * test_jinja — the Jinja interpreter (server/jinja*.c) against Python jinja2 configured like
 * Hugging Face transformers, plus limits, errors and the value API.
 *
 * Fixtures (tools/templates/make_fixtures.py, committed under tests/fixtures/templates/):
 *   - every real template in ../shared/data/templates × every conversation of cases.json must
 *     render byte for byte like <template>__<case>.txt, or fail like <template>__<case>.err
 *     ("raise: MSG" must give exactly MSG; "error: ..." only has to fail);
 *   - snippets.json: small templates covering expressions, filters, tests, statements and
 *     whitespace control, rendered against one context.
 * The server modules are not in libdeltad.a, so this file includes their .c files.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"             // defines: DD_EINVAL, DD_EFULL, DD_ETYPE
#include "server/jinja/jinja_impl.h" // the interpreter's internals under test
#include "test.h"

#define FIXDIR "tests/fixtures/templates"
#define TMPLDIR "../shared/data/templates"

/* ==== helpers ================================================================================ */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct jinja__buf b = {.limit = (size_t)-1};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        jinja__buf_put(&b, tmp, n);
    fclose(f);
    return jinja__buf_take(&b, len);
}

/* The moment make_fixtures.py's strftime_now returns (local time). */
static int64_t fixed_now(void)
{
    struct tm tm = {.tm_year = 125,
                    .tm_mon = 2,
                    .tm_mday = 7,
                    .tm_hour = 9,
                    .tm_min = 5,
                    .tm_sec = 2,
                    .tm_isdst = -1};
    return (int64_t)mktime(&tm);
}

/* Renders src with ctx and default HF options; returns the rc, output in *out (or NULL). */
static int render_opts(const char *src, jinja_value *ctx, const struct jinja_opts *o, char **out,
                       char *err, size_t errlen)
{
    jinja_tmpl *t;
    *out = NULL;
    int rc = jinja_compile(src, strlen(src), o, &t, err, errlen);
    if (rc)
        return rc;
    rc = jinja_render(t, ctx, out, NULL, err, errlen);
    jinja_free(t);
    return rc;
}

static int render(const char *src, char **out, char *err, size_t errlen)
{
    return render_opts(src, NULL, NULL, out, err, errlen);
}

/* Prints where two renders first differ. */
static void show_diff(const char *what, const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    printf("  %s: differs at byte %zu (want %zu bytes, got %zu)\n", what, i, wn, gn);
    printf("    want: ...%.*s|%.*s\n", (int)(i - from), want + from,
           (int)(wn - i < 60 ? wn - i : 60), want + i);
    printf("    got:  ...%.*s|%.*s\n", (int)(i - from), got + from,
           (int)(gn - i < 60 ? gn - i : 60), got + i);
}

/* ==== real templates × conversations ========================================================= */

static jinja_value *case_context(const cJSON *c)
{
    jinja_value *ctx = jinja_value_dict();
    jinja_dict_set(ctx, "messages", jinja_value_from_cjson(cJSON_GetObjectItem(c, "messages")));
    jinja_dict_set(ctx, "tools", jinja_value_from_cjson(cJSON_GetObjectItem(c, "tools")));
    jinja_dict_set(ctx, "documents", jinja_value_none());
    jinja_dict_set(ctx, "add_generation_prompt",
                   jinja_value_bool(cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"))));
    const cJSON *kw = cJSON_GetObjectItem(c, "kwargs");
    for (const cJSON *e = kw ? kw->child : NULL; e; e = e->next)
        jinja_dict_set(ctx, e->string, jinja_value_from_cjson(e));
    return ctx;
}

/* Checks one render against its fixture; returns 1 when it matches. */
static int check_pair(const char *tname, const jinja_tmpl *t, const cJSON *c)
{
    const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
    char path[512], err[512];
    size_t wn, gn = 0;
    snprintf(path, sizeof(path), FIXDIR "/%s__%s.txt", tname, cname);
    char *want = read_file(path, &wn), *werr = NULL, *got = NULL;
    if (!want) {
        snprintf(path, sizeof(path), FIXDIR "/%s__%s.err", tname, cname);
        werr = read_file(path, &wn);
    }
    jinja_value *ctx = case_context(c);
    int rc = jinja_render(t, ctx, &got, &gn, err, sizeof(err)), ok = 0;
    jinja_value_release(ctx);
    if (want) {
        ok = rc == 0 && gn == wn && memcmp(want, got, wn) == 0;
        if (rc)
            printf("  %s__%s: error %s\n", tname, cname, err);
        else if (!ok)
            show_diff(path, want, wn, got, gn);
    } else if (werr) {
        werr[strcspn(werr, "\n")] = 0;
        int raised = strncmp(werr, "raise: ", 7) == 0;
        ok = rc != 0 && (!raised || strcmp(err, werr + 7) == 0);
        if (!ok)
            printf("  %s__%s: want failure \"%s\", got rc %d \"%s\"\n", tname, cname, werr, rc,
                   rc ? err : "");
    } else {
        printf("  no fixture for %s__%s\n", tname, cname);
    }
    free(want);
    free(werr);
    free(got);
    return ok;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

TEST(real_templates)
{
    size_t n;
    char *json = read_file(FIXDIR "/cases.json", &n);
    DIR *d = opendir(TMPLDIR);
    CHECK(json != NULL);
    if (!json || !d) {
        printf("  (no %s: real templates not checked)\n", TMPLDIR);
        free(json);
        if (d)
            closedir(d);
        return;
    }
    cJSON *cases = cJSON_Parse(json);
    char *names[64];
    int nt = 0, pairs = 0, match = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && nt < 64;)
        if (strstr(e->d_name, ".jinja"))
            names[nt++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)nt, sizeof(names[0]), cmp_names);
    for (int i = 0; i < nt; i++) {
        char path[512], err[512];
        snprintf(path, sizeof(path), TMPLDIR "/%s", names[i]);
        size_t len;
        char *src = read_file(path, &len);
        jinja_tmpl *t = NULL;
        int rc = src ? jinja_compile(src, len, NULL, &t, err, sizeof(err)) : -1;
        if (rc)
            printf("  %s: compile failed: %s\n", names[i], err);
        CHECK_EQ(rc, 0);
        *strstr(names[i], ".jinja") = 0;
        for (const cJSON *c = cases ? cases->child : NULL; t && c; c = c->next) {
            pairs++;
            match += check_pair(names[i], t, c);
        }
        jinja_free(t);
        free(src);
        free(names[i]);
    }
    printf("  real templates: %d/%d (template, case) pairs match jinja2\n", match, pairs);
    CHECK(pairs > 0);
    CHECK_EQ(match, pairs);
    cJSON_Delete(cases);
    free(json);
}

TEST(snippets)
{
    size_t n;
    char *json = read_file(FIXDIR "/snippets.json", &n);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root != NULL);
    if (!root) {
        free(json);
        return;
    }
    jinja_value *ctx = jinja_value_from_cjson(cJSON_GetObjectItem(root, "context"));
    struct jinja_opts o;
    jinja_opts_init(&o);
    o.now = fixed_now();
    int total = 0, match = 0, errors = 0, same_msg = 0;
    const cJSON *list = cJSON_GetObjectItem(root, "snippets");
    for (const cJSON *s = list ? list->child : NULL; s; s = s->next, total++) {
        const char *name = cJSON_GetObjectItem(s, "name")->valuestring;
        const char *src = cJSON_GetObjectItem(s, "template")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(s, "expected"),
                    *werr = cJSON_GetObjectItem(s, "error");
        char *got, err[512];
        int rc = render_opts(src, ctx, &o, &got, err, sizeof(err)), ok;
        if (want) {
            ok = rc == 0 && strcmp(got, want->valuestring) == 0;
            if (!ok)
                printf("  snippet %s: want \"%s\", got %s \"%s\"\n", name, want->valuestring,
                       rc ? "error" : "", rc ? err : got);
        } else {
            int raised = strncmp(werr->valuestring, "raise: ", 7) == 0;
            ok = rc != 0 && (!raised || strcmp(err, werr->valuestring + 7) == 0);
            /* informative: does our text (after "line:col: ") equal Python's message? */
            const char *py = strstr(werr->valuestring, ": "), *ours = strstr(err, ": ");
            py = py && !raised ? strstr(py + 2, ": ") : NULL;
            errors += !raised;
            same_msg += py && ours && rc && strcmp(py + 2, ours + 2) == 0;
            if (!ok)
                printf("  snippet %s: want failure \"%s\", got \"%s\"\n", name, werr->valuestring,
                       rc ? err : got);
        }
        match += ok;
        free(got);
    }
    printf("  snippets: %d/%d match jinja2 (%d/%d error messages word for word)\n", match, total,
           same_msg, errors);
    CHECK_EQ(match, total);
    jinja_value_release(ctx);
    cJSON_Delete(root);
    free(json);
}

/* ==== hand-written cases ===================================================================== */

/* Renders src and expects exactly want. */
static void expect(const char *src, const char *want)
{
    char *got, err[512];
    int rc = render(src, &got, err, sizeof(err));
    if (rc)
        printf("  \"%s\": error %s\n", src, err);
    CHECK_EQ(rc, 0);
    if (got)
        CHECK_STR_EQ(got, want);
    free(got);
}

/* Expects a compile or render failure with rc and an error starting with prefix. */
static void expect_fail(const char *src, int want_rc, const char *prefix)
{
    char *got, err[512];
    int rc = render(src, &got, err, sizeof(err));
    CHECK_EQ(rc, want_rc);
    CHECK(got == NULL);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        printf("  \"%.60s\": error \"%s\", want prefix \"%s\"\n", src, err, prefix);
    CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
    free(got);
}

TEST(syntax_errors)
{
    expect_fail("line1\n{{ 1 + }}", DD_EINVAL, "2:8: unexpected 'end of print statement'");
    expect_fail("{% if x %}a", DD_EINVAL, "1:12: Unexpected end of template.");
    expect_fail("ab\n  {{ x | nosuch }}", DD_EINVAL, "2:10: No filter named 'nosuch'.");
    expect_fail("{{ x is nosuch }}", DD_EINVAL, "1:9: No test named 'nosuch'.");
    expect_fail("{% frobnicate %}", DD_EINVAL, "1:4: Encountered unknown tag 'frobnicate'.");
    expect_fail("{% include 'x' %}", DD_EINVAL, "1:4: 'include' is not supported");
    expect_fail("{{ 'abc }}", DD_EINVAL, "1:4: unterminated string literal");
    expect_fail("{{ (1 ] }}", DD_EINVAL, "1:7: unexpected ']'");
    expect_fail("{# never closed", DD_EINVAL, "1:1: Missing end of comment tag");
    expect_fail("{{ x", DD_EINVAL, "1:1: unclosed variable tag");
    expect_fail("{% for x in y recursive %}{% endfor %}", DD_EINVAL, "1:15: recursive");
    expect_fail("{% macro m(a=1, b) %}{% endmacro %}", DD_EINVAL, "1:18: non-default argument");
    expect_fail("{{ 99999999999999999999 }}", DD_EINVAL, "1:4: integer literal too large");
    expect_fail("{% if 1 %}{% break %}{% endif %}", DD_EINVAL, "1:14: 'break' outside of a loop");
    expect_fail("{% for x in l %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}",
                DD_EINVAL, "1:35: 'continue' outside of a loop");
    expect_fail("{% set 1 = 2 %}", DD_EINVAL, "1:10: can't assign");
}

TEST(runtime_errors)
{
    expect_fail("{{ raise_exception('No messages provided.') }}", DD_EINVAL,
                "No messages provided.");
    expect_fail("x\n  {{ y.z }}", DD_EINVAL, "2:7: 'y' is undefined");
    expect_fail("{{ 'a' + 1 }}", DD_EINVAL, "1:8: can only concatenate str (not \"int\") to str");
    expect_fail("{{ [1].append(2) }}", DD_EINVAL,
                "1:14: access to attribute 'append' of 'list' object is unsafe.");
    expect_fail("{{ 9223372036854775807 + 1 }}", DD_EINVAL, "1:24: integer overflow");
    expect_fail("{{ range(200000)|length }}", DD_EINVAL, "1:9: Range too big.");
    expect_fail("{% set ns = namespace() %}{% macro m() %}{% set ns.c = caller %}{% endmacro %}"
                "{% call m() %}x{% endcall %}{{ ns.c() }}",
                DD_EINVAL, "1:114: caller() called after its call block ended");
}

TEST(limits)
{
    expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", DD_EFULL,
                "template render limit exceeded: max_depth");
    expect_fail("{{ 'x' * 100000000000 }}", DD_EFULL, "template render limit exceeded: max_memory");
    expect_fail("{% set ns = namespace(l=[]) %}{% for i in range(3000) %}{% set ns.l = [ns.l] %}"
                "{% endfor %}",
                DD_EINVAL, "values nested deeper than 1024 levels");

    struct jinja_opts o;
    jinja_opts_init(&o);
    o.max_memory = 4 << 20; /* doubling a string must stop at the memory limit */
    char *out, err[256];
    int rc = render_opts("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                         "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
                         NULL, &o, &out, err, sizeof(err));
    CHECK_EQ(rc, DD_EFULL);
    CHECK(strstr(err, "max_memory") != NULL);
    o.max_memory = 0;
    o.max_output = 1000;
    rc = render_opts("{% for i in range(2000) %}x{% endfor %}", NULL, &o, &out, err, sizeof(err));
    CHECK_EQ(rc, DD_EFULL);
    CHECK(strstr(err, "max_output") != NULL);
    rc = render_opts("{% set x %}{% for i in range(2000) %}x{% endfor %}{% endset %}", NULL, &o,
                     &out, err, sizeof(err));
    CHECK_EQ(rc, DD_EFULL);
    o.max_output = 0;
    o.max_steps = 1000;
    rc = render_opts("{% for i in range(5000) %}{% endfor %}", NULL, &o, &out, err, sizeof(err));
    CHECK_EQ(rc, DD_EFULL);
    CHECK(strstr(err, "max_steps") != NULL);
    /* range() is capped like jinja2's sandbox, so an "infinite" loop nests two of them */
    o.max_steps = 2000000;
    rc = render_opts("{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}"
                     "{% endfor %}",
                     NULL, &o, &out, err, sizeof(err));
    CHECK_EQ(rc, DD_EFULL);
    CHECK(strstr(err, "max_steps") != NULL);
}

/* Hostile shapes must fail cleanly, never overflow the stack. */
TEST(deep_inputs)
{
    size_t n = 200000;
    char *src = malloc(3 * n + 16);
    strcpy(src, "{{ ");
    size_t k = 3;
    for (size_t i = 0; i < n; i++)
        src[k++] = '(';
    strcpy(src + k, "1 }}");
    char *out, err[256];
    CHECK(render(src, &out, err, sizeof(err)) != 0);
    k = 3;
    for (size_t i = 0; i < n; i++) {
        src[k++] = '1';
        src[k++] = '+';
    }
    strcpy(src + k, "1 }}");
    CHECK(render(src, &out, err, sizeof(err)) != 0);
    CHECK(strstr(err, "nested too deeply") != NULL);
    k = 0;
    for (size_t i = 0; i < n / 10; i++)
        k += (size_t)sprintf(src + k, "{%% if 1 %%}");
    CHECK(render(src, &out, err, sizeof(err)) != 0);
    free(src);
    expect("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}", "True");
}

TEST(whitespace_control)
{
    expect("{% if true %}\n  x\n{% endif %}\n", "  x\n");
    expect("  {%- if true -%}  a  {%- endif -%}  ", "a");
    expect("a\n  {{ 'b' }}\n", "a\n  b");
    struct jinja_opts o = {0}; /* plain jinja2: no trim, no lstrip */
    char *out, err[128];
    CHECK_EQ(render_opts("{% if true %}\n  x\n  {% endif %}\n", NULL, &o, &out, err, sizeof(err)),
             0);
    CHECK_STR_EQ(out, "\n  x\n  ");
    free(out);
    o.keep_trailing_newline = 1;
    CHECK_EQ(render_opts("x\n", NULL, &o, &out, err, sizeof(err)), 0);
    CHECK_STR_EQ(out, "x\n");
    free(out);
}

TEST(expressions)
{
    expect("{{ [1, 2, 3][::-1] }} {{ 'abc'[-2:] }} {{ (1, 2)[1] }}", "[3, 2, 1] bc 2");
    expect("{{ 7 // -2 }} {{ 7 % -3 }} {{ 2 ** 62 }} {{ 1e308 * 10 }}",
           "-4 -2 4611686018427387904 inf");
    expect("{{ none or 0 or '' or 'x' }} {{ 1 and 0 }}", "x 0");
    expect("{{ 'ok' if 1 > 0 }}{{ 'no' if 0 }}", "ok");
    expect("{{ {'a': 1}.a }} {{ {'a': 1}['b'] is defined }}", "1 False");
    expect("{{ 'é'|length }} {{ 'aé'[1] }}", "1 é");
}

TEST(tojson)
{
    expect("{{ {'a': [1, 2.5, none, true], 'b': 'é\"\\n'}|tojson }}",
           "{\"a\": [1, 2.5, null, true], \"b\": \"é\\\"\\n\"}");
    expect("{{ {'a': {}}|tojson(indent=2) }}", "{\n  \"a\": {}\n}");
    expect("{{ 'é'|tojson(true) }}", "\"\\u00e9\"");
    expect("{{ '😀'|tojson(ensure_ascii=true) }}", "\"\\ud83d\\ude00\"");
}

TEST(loops_and_macros)
{
    expect("{% for a, b in {'x': 1, 'y': 2}|items %}{{ loop.index }}{{ a }}{{ b }}"
           "{% if not loop.last %},{% endif %}{% endfor %}",
           "1x1,2y2");
    expect("{% macro m(a, b='d') %}{{ a }}{{ b }}{{ caller() if caller is defined }}{% endmacro %}"
           "{{ m(1) }}|{% call m(2, b='e') %}C{% endcall %}",
           "1d|2eC");
    expect("{% set ns = namespace(n=0) %}{% for x in range(10) if x is odd %}"
           "{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
           "25");
}

TEST(value_api)
{
    jinja_value *ctx = jinja_value_dict(), *l = jinja_value_list();
    CHECK_EQ(jinja_list_append(l, jinja_value_int(3)), 0);
    CHECK_EQ(jinja_list_append(l, jinja_value_float(0.5)), 0);
    CHECK_EQ(jinja_list_append(l, jinja_value_string("a\0b", 3)), 0);
    CHECK_EQ(jinja_list_append(ctx, jinja_value_none()), DD_ETYPE);
    CHECK_EQ(jinja_dict_set(ctx, "l", l), 0);
    CHECK_EQ(jinja_dict_set(ctx, "x", jinja_value_cstring("first")), 0);
    CHECK_EQ(jinja_dict_set(ctx, "x", jinja_value_cstring("second")), 0);
    CHECK_EQ(jinja_dict_set(ctx, "b", jinja_value_bool(1)), 0);
    cJSON *j = cJSON_Parse("{\"n\": 1, \"f\": 1.25, \"big\": 1e300, \"s\": \"\\u00e9\", "
                           "\"a\": [null, false], \"o\": {\"k\": \"v\", \"k\": \"w\"}}");
    CHECK_EQ(jinja_dict_set(ctx, "j", jinja_value_from_cjson(j)), 0);
    cJSON_Delete(j);
    const char *src = "{{ l[0] + 1 }} {{ l[1] }} {{ l[2]|length }} {{ x }} {{ b }} {{ j|tojson }}";
    jinja_tmpl *t;
    char err[256], *out;
    size_t n;
    CHECK_EQ(jinja_compile(src, strlen(src), NULL, &t, err, sizeof(err)), 0);
    CHECK_EQ(jinja_render(t, ctx, &out, &n, err, sizeof(err)), 0);
    CHECK_STR_EQ(out, "4 0.5 3 second True {\"n\": 1, \"f\": 1.25, \"big\": 1e+300, \"s\": "
                      "\"é\", \"a\": [null, false], \"o\": {\"k\": \"w\"}}");
    CHECK_EQ(n, strlen(out));
    free(out);
    CHECK_EQ(jinja_render(t, NULL, &out, &n, err, sizeof(err)), DD_EINVAL); /* l undefined */
    jinja_free(t);
    jinja_value_release(ctx);
}

int main(void)
{
    RUN(real_templates);
    RUN(snippets);
    RUN(syntax_errors);
    RUN(runtime_errors);
    RUN(limits);
    RUN(deep_inputs);
    RUN(whitespace_control);
    RUN(expressions);
    RUN(tojson);
    RUN(loops_and_macros);
    RUN(value_api);
    TEST_MAIN_END("test_jinja");
}
