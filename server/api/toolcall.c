/*
 * toolcall — the incremental tool-call parser (see toolcall.h).
 *
 * States, each working on a buffer of not-yet-settled text:
 *   TEXT       content; holds back trailing whitespace and a partial "<tool_call>"
 *   HEAD       inside a block, before the call is recognised: the JSON head
 *              `{"name": "f", "arguments": {` or the XML head `<function=f>`
 *   JSON_ARGS  streaming the arguments object byte for byte until its braces balance
 *   XML_BODY   between parameters: `<parameter=p>` or `</function>`
 *   XML_VALUE  a parameter value, settled at `</parameter>`
 *   TAIL       the call is complete: skip to `</tool_call>`
 *   BUFFER     the head did not match: wait for `</tool_call>`, then parse the block whole or
 *              give it back as text
 * A step returns true when it moved on (the loop runs again) and false when it needs more text.
 * Decisions depend only on the text seen, never on where the pieces were cut.
 *
 * Thread safety: one owner (the connection thread of the request).
 */
#include "toolcall.h" // defines: toolcall_feed

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h" // defines: schema_types, schema_value_type, SCHEMA_T_STR

enum { TC_TEXT, TC_HEAD, TC_JSON_ARGS, TC_XML_BODY, TC_XML_VALUE, TC_TAIL, TC_BUFFER };

#define NONE SIZE_MAX
#define NAME_MAX_LEN 120 /* longer "names" are not a call head */

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

/* ---- text helpers ---------------------------------------------------------------------- */

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

/* Start of the whitespace run that ends at i. */
static size_t back_ws(const char *s, size_t i)
{
    while (i > 0 && is_ws(s[i - 1]))
        i--;
    return i;
}

/* Index of tag in s[from..n), or NONE. */
static size_t find(const char *s, size_t n, size_t from, const char *tag)
{
    size_t k = strlen(tag);
    if (!s || from >= n || n - from < k)
        return NONE;
    const char *hit = memmem(s + from, n - from, tag, k);
    return hit ? (size_t)(hit - s) : NONE;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag)
{
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0)
            return k;
    return 0;
}

/* Match the literal l at *p after whitespace: 1 matched (*p moves past it), 0 the text ends
 * inside it, -1 something else is there. */
static int lit(const char *s, size_t n, size_t *p, const char *l)
{
    size_t i = skip_ws(s, n, *p), k = strlen(l), r = n - i;
    if (r < k)
        return r == 0 || memcmp(s + i, l, r) == 0 ? 0 : -1;
    if (memcmp(s + i, l, k) != 0)
        return -1;
    *p = i + k;
    return 1;
}

/* ---- tools and emitting ---------------------------------------------------------------- */

/* The declared function named s[0..n) (its "function" object), or NULL. */
static const cJSON *tool_fn(const cJSON *tools, const char *s, size_t n)
{
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(name) && strlen(name->valuestring) == n &&
            memcmp(name->valuestring, s, n) == 0)
            return fn;
    }
    return NULL;
}

/* The JSON types parameter p of the current function may have (its schema's), ANY when the
 * function or the parameter is not described. */
static unsigned param_types(const cJSON *fn, const char *p)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, p);
    return ps ? schema_types(params, ps) : SCHEMA_T_ANY;
}

static void text_out(struct toolcall *t, const char *s, size_t n)
{
    if (n)
        t->emit(t->ud, TOOLCALL_TEXT, s, n);
}

/* Call events are swallowed for a muted call (beyond max_calls). */
static void call_out(struct toolcall *t, enum toolcall_ev ev, const char *s, size_t n)
{
    if (!t->muted && (n || ev == TOOLCALL_START))
        t->emit(t->ud, ev, s, n);
}

/* Report a call named s[0..n) if that name is declared. Returns false otherwise. */
static bool commit(struct toolcall *t, const char *s, size_t n)
{
    const cJSON *fn = t->tools ? tool_fn(t->tools, s, n) : NULL;
    if (t->tools && !fn)
        return false;
    t->fn = fn;
    t->muted = t->max_calls > 0 && t->n_calls >= t->max_calls;
    if (!t->muted)
        t->n_calls++;
    call_out(t, TOOLCALL_START, s, n);
    return true;
}

/* Leave the block: call[from..] goes back to the text buffer (empty during a block). */
static void end_call(struct toolcall *t, size_t from, bool skip_ws_after)
{
    if (t->call.len > from)
        dd_buf_put(&t->text, t->call.p + from, t->call.len - from);
    dd_buf_truncate(&t->call, 0);
    dd_buf_truncate(&t->pre, 0);
    t->pos = 0;
    t->state = TC_TEXT;
    t->skip_ws = skip_ws_after;
    t->muted = false;
    t->fn = NULL;
}

/* ---- content --------------------------------------------------------------------------- */

/* TEXT: emit up to a <tool_call> (entering the block) or up to what may still be part of one. */
static bool step_text(struct toolcall *t, bool final)
{
    struct dd_buf *b = &t->text;
    if (t->skip_ws) {
        dd_buf_consume(b, skip_ws(b->p, b->len, 0));
        if (b->len == 0)
            return false;
        t->skip_ws = false;
    }
    size_t o = find(b->p, b->len, 0, OPEN);
    if (o != NONE) {
        size_t w = back_ws(b->p, o), rest = o + strlen(OPEN);
        text_out(t, b->p, w);
        if (o > w)
            dd_buf_put(&t->pre, b->p + w, o - w);
        if (b->len > rest)
            dd_buf_put(&t->call, b->p + rest, b->len - rest);
        dd_buf_truncate(b, 0);
        t->state = TC_HEAD;
        return true;
    }
    size_t keep = final ? 0 : partial_tag(b->p, b->len, OPEN);
    size_t w = final && t->n_calls == 0 ? b->len : back_ws(b->p, b->len - keep);
    text_out(t, b->p, w);
    if (final)
        dd_buf_truncate(b, 0);
    else
        dd_buf_consume(b, w);
    return false;
}

/* ---- the JSON form --------------------------------------------------------------------- */

/* {"name": "f", "arguments": {  — commits with pos at the arguments' '{'. */
static int json_head(struct toolcall *t)
{
    static const char *const before[] = {"{", "\"name\"", ":", "\""};
    static const char *const after[] = {",", "\"arguments\"", ":", "{"};
    const char *s = t->call.p;
    size_t n = t->call.len, p = 0;
    int r;
    for (int i = 0; i < 4; i++)
        if ((r = lit(s, n, &p, before[i])) <= 0)
            return r;
    size_t q = p;
    while (q < n && s[q] != '"' && s[q] != '\\' && s[q] != '\n' && q - p < NAME_MAX_LEN)
        q++;
    if (q == n)
        return 0;
    if (s[q] != '"' || q == p)
        return -1;
    size_t name = p, name_len = q - p;
    p = q + 1;
    for (int i = 0; i < 4; i++)
        if ((r = lit(s, n, &p, after[i])) <= 0)
            return r;
    if (!commit(t, s + name, name_len))
        return -1;
    t->pos = p - 1;
    t->depth = 0;
    t->in_str = t->esc = false;
    t->state = TC_JSON_ARGS;
    return 1;
}

/* JSON_ARGS: stream the arguments until the braces balance. A '<' outside a string cannot be
 * JSON: the arguments were cut off, and the rest is skipped like a tail. */
static bool step_json_args(struct toolcall *t)
{
    const char *s = t->call.p;
    size_t n = t->call.len, i = t->pos;
    bool done = false;
    for (; i < n && !done; i++) {
        char c = s[i];
        if (t->in_str) {
            if (t->esc)
                t->esc = false;
            else if (c == '\\')
                t->esc = true;
            else if (c == '"')
                t->in_str = false;
        } else if (c == '"') {
            t->in_str = true;
        } else if (c == '{' || c == '[') {
            t->depth++;
        } else if ((c == '}' || c == ']') && --t->depth == 0) {
            done = true;
        } else if (c == '<') {
            done = true;
            i--; /* not part of the arguments */
        }
    }
    call_out(t, TOOLCALL_ARGS, s + t->pos, i - t->pos);
    t->pos = i;
    if (done)
        t->state = TC_TAIL;
    return done;
}

/* ---- the XML form ---------------------------------------------------------------------- */

/* <function=f>  — commits with pos after the '>'. */
static int xml_head(struct toolcall *t)
{
    const char *s = t->call.p;
    size_t n = t->call.len, p = 0;
    int r = lit(s, n, &p, "<function=");
    if (r <= 0)
        return r;
    size_t q = p;
    while (q < n && s[q] != '>' && s[q] != '\n' && q - p < NAME_MAX_LEN)
        q++;
    if (q == n)
        return 0;
    if (s[q] != '>' || q == p || !commit(t, s + p, q - p))
        return -1;
    t->pos = q + 1;
    t->n_params = 0;
    t->state = TC_XML_BODY;
    return 1;
}

/* s[0..n) is one complete JSON value (surrounding whitespace allowed) of one of the types. */
static bool is_json_of(const char *s, size_t n, unsigned types)
{
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    bool ok = v && skip_ws(s, n, (size_t)(end - s)) == n && (schema_value_type(v) & types);
    cJSON_Delete(v);
    return ok;
}

/* Append s[0..n) as a JSON string. */
static void put_json_string(struct dd_buf *b, const char *s, size_t n)
{
    char *z = malloc(n + 1);
    memcpy(z, s, n);
    z[n] = '\0';
    cJSON *v = cJSON_CreateString(z);
    char *text = cJSON_PrintUnformatted(v);
    dd_buf_puts(b, text ? text : "\"\"");
    free(text);
    cJSON_Delete(v);
    free(z);
}

/* One settled parameter as the next piece of the arguments object. */
static void xml_param(struct toolcall *t, const char *v, size_t n)
{
    struct dd_buf b = {0};
    dd_buf_puts(&b, t->n_params++ ? ", " : "{");
    put_json_string(&b, t->param, strlen(t->param));
    dd_buf_puts(&b, ": ");
    size_t from = skip_ws(v, n, 0), to = back_ws(v, n);
    unsigned types = param_types(t->fn, t->param);
    if (types != SCHEMA_T_STR && from < to && is_json_of(v + from, to - from, types))
        dd_buf_put(&b, v + from, to - from);
    else
        put_json_string(&b, v, n);
    call_out(t, TOOLCALL_ARGS, b.p, b.len);
    dd_buf_free(&b);
}

/* Close the arguments object ({} when the call had no parameters) and skip to the end tag. */
static void xml_close(struct toolcall *t, size_t pos)
{
    const char *c = t->n_params ? "}" : "{}";
    call_out(t, TOOLCALL_ARGS, c, strlen(c));
    t->pos = pos;
    t->state = TC_TAIL;
}

/* XML_BODY: the next <parameter=p> (its value starts after the '>' and one newline) or
 * </function>; anything else ends the arguments. */
static bool step_xml_body(struct toolcall *t)
{
    const char *s = t->call.p;
    size_t n = t->call.len, p = skip_ws(s, n, t->pos), q = p, e = p;
    if (p == n)
        return false;
    int r = lit(s, n, &q, "<parameter="), r2 = lit(s, n, &e, "</function>");
    if (r2 == 1) {
        xml_close(t, e);
        return true;
    }
    if (r == 1) {
        size_t gt = q;
        while (gt < n && s[gt] != '>' && s[gt] != '\n' && gt - q < sizeof t->param - 1)
            gt++;
        if (gt == n)
            return false;
        if (s[gt] != '>' || gt == q) {
            xml_close(t, p);
            return true;
        }
        if (gt + 1 == n)
            return false; /* is a newline next? */
        memcpy(t->param, s + q, gt - q);
        t->param[gt - q] = '\0';
        t->pos = gt + 1 + (s[gt + 1] == '\n');
        t->state = TC_XML_VALUE;
        return true;
    }
    if (r == 0 || r2 == 0)
        return false;
    xml_close(t, p);
    return true;
}

/* XML_VALUE: settled at </parameter>; one newline before it belongs to the layout. */
static bool step_xml_value(struct toolcall *t)
{
    size_t e = find(t->call.p, t->call.len, t->pos, "</parameter>");
    if (e == NONE)
        return false;
    size_t end = e > t->pos && t->call.p[e - 1] == '\n' ? e - 1 : e;
    xml_param(t, t->call.p + t->pos, end - t->pos);
    t->pos = e + strlen("</parameter>");
    t->state = TC_XML_BODY;
    return true;
}

/* ---- block boundaries ------------------------------------------------------------------ */

/* HEAD: recognise the form by the first character; a mismatch waits for the whole block. */
static bool step_head(struct toolcall *t)
{
    size_t p = skip_ws(t->call.p, t->call.len, 0);
    if (p == t->call.len)
        return false;
    char c = t->call.p[p];
    int r = c == '{' ? json_head(t) : c == '<' ? xml_head(t) : -1;
    if (r < 0)
        t->state = TC_BUFFER;
    return r != 0;
}

/* TAIL: skip to </tool_call>, or to a new <tool_call> when the model forgot the close. */
static bool step_tail(struct toolcall *t)
{
    size_t c = find(t->call.p, t->call.len, t->pos, CLOSE);
    size_t o = find(t->call.p, t->call.len, t->pos, OPEN);
    if (c == NONE && o == NONE)
        return false;
    if (o < c)
        end_call(t, o, true);
    else
        end_call(t, c + strlen(CLOSE), true);
    return true;
}

/* A whole block s[0..n) as one JSON object {"name", "arguments"?} in any key order; arguments
 * an object (printed compactly) or a string (taken as the JSON text). Returns false if not. */
static bool parse_whole(struct toolcall *t, const char *s, size_t n)
{
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *arg = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    bool ok = cJSON_IsObject(o) && skip_ws(s, n, (size_t)(end - s)) == n && cJSON_IsString(name) &&
              (!arg || cJSON_IsObject(arg) || cJSON_IsString(arg)) &&
              commit(t, name->valuestring, strlen(name->valuestring));
    if (ok) {
        char *text = cJSON_IsString(arg) ? NULL : cJSON_PrintUnformatted(arg);
        const char *a = cJSON_IsString(arg) ? arg->valuestring : text ? text : "{}";
        call_out(t, TOOLCALL_ARGS, a, strlen(a));
        free(text);
    }
    cJSON_Delete(o);
    return ok;
}

/* BUFFER: at </tool_call> (or the end of output) parse the block whole, else give it back as
 * text with its tags and the whitespace that preceded it. */
static bool step_buffer(struct toolcall *t, bool final)
{
    size_t c = find(t->call.p, t->call.len, 0, CLOSE);
    if (c == NONE && !final)
        return false;
    size_t inner = c == NONE ? t->call.len : c;
    bool ok = parse_whole(t, t->call.p, inner);
    if (!ok) {
        text_out(t, t->pre.p, t->pre.len);
        text_out(t, OPEN, strlen(OPEN));
        text_out(t, t->call.p, c == NONE ? t->call.len : c + strlen(CLOSE));
    }
    end_call(t, c == NONE ? t->call.len : c + strlen(CLOSE), ok);
    return true;
}

/* ---- driver ---------------------------------------------------------------------------- */

/* Step until more text is needed; at the end of output settle whatever is still open. */
static void tc_run(struct toolcall *t, bool final)
{
    for (;;) {
        bool more = false;
        switch (t->state) {
        case TC_TEXT:
            more = step_text(t, final);
            break;
        case TC_HEAD:
            more = step_head(t);
            break;
        case TC_JSON_ARGS:
            more = step_json_args(t);
            break;
        case TC_XML_BODY:
            more = step_xml_body(t);
            break;
        case TC_XML_VALUE:
            more = step_xml_value(t);
            break;
        case TC_TAIL:
            more = step_tail(t);
            break;
        default:
            more = step_buffer(t, final);
            break;
        }
        if (more)
            continue;
        if (!final)
            return;
        if (t->state == TC_HEAD) {
            t->state = TC_BUFFER; /* an incomplete head: parse or give back what there is */
            continue;
        }
        if (t->state == TC_XML_BODY || t->state == TC_XML_VALUE)
            xml_close(t, t->call.len);
        return;
    }
}

void toolcall_init(struct toolcall *t, const cJSON *tools, int max_calls, toolcall_emit_fn emit_fn,
                   void *ud)
{
    memset(t, 0, sizeof *t);
    t->tools = tools;
    t->max_calls = max_calls;
    t->emit = emit_fn;
    t->ud = ud;
}

void toolcall_feed(struct toolcall *t, const char *s, size_t n)
{
    if (n == 0)
        return;
    dd_buf_put(t->state == TC_TEXT ? &t->text : &t->call, s, n);
    tc_run(t, false);
}

void toolcall_finish(struct toolcall *t)
{
    tc_run(t, true);
}

void toolcall_deinit(struct toolcall *t)
{
    dd_buf_free(&t->text);
    dd_buf_free(&t->call);
    dd_buf_free(&t->pre);
}
