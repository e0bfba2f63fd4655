/*
 * chat_tmpl — the model's chat template through the Jinja interpreter (see chat.h).
 *
 * The context is the one Hugging Face's apply_chat_template builds: messages, tools (None when
 * absent), documents (None), add_generation_prompt, bos_token / eos_token, the request's
 * chat_template_kwargs merged in (enable_thinking, ...), and the interpreter's strftime_now.
 * Messages are normalised the way OpenAI clients need and the Qwen templates expect:
 * content-part arrays become one string; a null or absent assistant content becomes "" (Qwen3
 * calls content.split); tool-call arguments sent as a JSON string (what every OpenAI client
 * sends) become the object (Qwen3-Coder and Qwen3.5 iterate arguments|items, Qwen2.5 prints
 * arguments|tojson).
 *
 * User text and control tokens: every string taken from the request (values and keys) has its
 * control-token texts (<|im_end|>, ...) replaced by sentinels before rendering, one private-use
 * code point U+10F000 + k per entry k of a table; a character of that range typed by the user
 * is itself an entry, so the mapping is reversible. The template works on text that is the
 * user's except for those few code points, so its logic (split on </think>, startswith, ...)
 * sees what Hugging Face's would. After rendering the sentinels are turned back into their text
 * and recorded as user spans, which the api module tokenizes without special-token parsing: a
 * control token can only come from the template itself.
 *
 * Thread safety: a chat_tmpl_t is immutable after chat_tmpl_create; renders are independent.
 *
 * Sections: creation, escaping, context, rendering.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_impl.h"          // defines: chat__render_jinja, chat_tmpl_create
#include "engine/model/tok.h"   // defines: tok_token_type, tok_piece
#include "engine/util.h"        // defines: xcalloc, dd_buf_put, dd_errf, dd_read_file, DD_EINVAL
#include "server/jinja/jinja.h" // defines: jinja_compile, jinja_render, jinja_value_*

#define SENTINEL_MAX 4096 /* table entries: U+10F000 .. U+10FFFF */

/* ---- creation -------------------------------------------------------------------------- */

/* The text of token id (malloc'd), or NULL. */
static char *piece_dup(const tok_t *tok, int32_t id)
{
    size_t n;
    const char *p = id >= 0 ? tok_piece(tok, id, &n) : NULL;
    if (!p)
        return NULL;
    char *s = xmalloc(n + 1);
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Every control token's text, which user strings may not smuggle into the prompt. Capped at
 * half the sentinel range; the other half is for user characters of that range. */
static void collect_controls(chat_tmpl_t *t, const tok_t *tok)
{
    int32_t n = tok_n_vocab(tok);
    for (int32_t id = 0; id < n && t->n_ctl < SENTINEL_MAX / 2; id++) {
        if (tok_token_type(tok, id) != TOK_CONTROL)
            continue;
        size_t len;
        const char *p = tok_piece(tok, id, &len);
        if (!p || len == 0)
            continue;
        t->ctl = xrealloc(t->ctl, (size_t)(t->n_ctl + 1) * sizeof *t->ctl);
        t->ctl_len = xrealloc(t->ctl_len, (size_t)(t->n_ctl + 1) * sizeof *t->ctl_len);
        t->ctl[t->n_ctl] = piece_dup(tok, id);
        t->ctl_len[t->n_ctl++] = len;
        t->first[(unsigned char)p[0]] = true;
    }
}

/* Compile src (from file `path`, or the GGUF when path is NULL); a missing GGUF template
 * leaves t->jt NULL (ChatML). */
static int compile(chat_tmpl_t *t, const struct model *m, const char *path, char *err,
                   size_t errlen)
{
    const char *src = NULL;
    size_t len = 0;
    char *owned = NULL;
    if (path) {
        owned = dd_read_file(path, &len);
        if (!owned) {
            dd_errf(err, errlen, "%s: cannot read the chat template file", path);
            return DD_EIO;
        }
        src = owned;
        snprintf(t->source, sizeof t->source, "%s", path);
    } else if (gguf_get_str(m->gguf, "tokenizer.chat_template", &src, &len) != 0) {
        snprintf(t->source, sizeof t->source, "built-in ChatML (%s has no chat template)",
                 m->path ? m->path : "the model");
        return 0;
    } else {
        snprintf(t->source, sizeof t->source, "tokenizer.chat_template of %s",
                 m->path ? m->path : "the model");
    }
    char jerr[400];
    t->xml_tools = memmem(src, len, "<function=", strlen("<function=")) != NULL;
    int rc = jinja_compile(src, len, NULL, &t->jt, jerr, sizeof jerr);
    if (rc)
        dd_errf(err, errlen, "%s: chat template: %s", path ? path : m->path, jerr);
    free(owned);
    return rc ? DD_EINVAL : 0;
}

int chat_tmpl_create(const struct model *m, const char *path, chat_tmpl_t **out, char *err,
                     size_t errlen)
{
    chat_tmpl_t *t = xcalloc(1, sizeof *t);
    int rc = compile(t, m, path && *path ? path : NULL, err, errlen);
    if (rc) {
        chat_tmpl_destroy(t);
        return rc;
    }
    collect_controls(t, m->tok);
    t->bos = piece_dup(m->tok, tok_bos(m->tok));
    t->eos = piece_dup(m->tok, tok_eos(m->tok));
    *out = t;
    return 0;
}

const char *chat_tmpl_source(const chat_tmpl_t *t)
{
    return t->source;
}

enum chat_tool_form chat_tmpl_tool_form(const chat_tmpl_t *t)
{
    return t && t->xml_tools ? CHAT_TOOLS_XML : CHAT_TOOLS_JSON;
}

bool chat__tmpl_is_jinja(const chat_tmpl_t *t)
{
    return t->jt != NULL;
}

void chat_tmpl_destroy(chat_tmpl_t *t)
{
    if (!t)
        return;
    jinja_free(t->jt);
    for (int i = 0; i < t->n_ctl; i++)
        free(t->ctl[i]);
    free(t->ctl);
    free(t->ctl_len);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* ---- escaping -------------------------------------------------------------------------- */

/* One render's sentinel table: entries below n_ctl are the template's control tokens, the
 * rest user characters of the sentinel range (4 UTF-8 bytes each). */
struct esc {
    const chat_tmpl_t *t;
    char (*lit)[4]; /* [n_lit] */
    int n_lit;
    bool full; /* more distinct entries than sentinels */
};

/* Bytes F4 8F xx yy are U+10F000 .. U+10FFFF. */
static bool is_sentinel(const char *s, size_t n)
{
    return n >= 4 && (unsigned char)s[0] == 0xF4 && (unsigned char)s[1] == 0x8F;
}

static void put_sentinel(struct dd_buf *b, int k)
{
    char s[4] = {(char)0xF4, (char)0x8F, (char)(0x80 | (k >> 6)), (char)(0x80 | (k & 63))};
    dd_buf_put(b, s, 4);
}

/* The entry for user character s[0..4) of the sentinel range (added when new). */
static int lit_entry(struct esc *e, const char *s)
{
    for (int i = 0; i < e->n_lit; i++)
        if (memcmp(e->lit[i], s, 4) == 0)
            return e->t->n_ctl + i;
    if (e->t->n_ctl + e->n_lit >= SENTINEL_MAX) {
        e->full = true;
        return 0;
    }
    e->lit = xrealloc(e->lit, (size_t)(e->n_lit + 1) * sizeof *e->lit);
    memcpy(e->lit[e->n_lit], s, 4);
    return e->t->n_ctl + e->n_lit++;
}

/* The control token whose text starts s[0..n) (the longest), or -1. */
static int ctl_at(const chat_tmpl_t *t, const char *s, size_t n)
{
    int best = -1;
    for (int k = 0; k < t->n_ctl; k++)
        if (t->ctl_len[k] <= n && memcmp(s, t->ctl[k], t->ctl_len[k]) == 0 &&
            (best < 0 || t->ctl_len[k] > t->ctl_len[best]))
            best = k;
    return best;
}

/* s with control-token texts and sentinel-range characters replaced by sentinels, into b
 * (NUL-terminated; an empty string still allocates). */
static void esc_text(struct esc *e, const char *s, struct dd_buf *b)
{
    size_t n = strlen(s), run = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int k = is_sentinel(s + i, n - i) ? lit_entry(e, s + i)
                : e->t->first[c]          ? ctl_at(e->t, s + i, n - i)
                                          : -1;
        if (k < 0) {
            i++;
            continue;
        }
        dd_buf_put(b, s + run, i - run);
        put_sentinel(b, k);
        i += k < e->t->n_ctl ? e->t->ctl_len[k] : 4;
        run = i;
    }
    dd_buf_put(b, s + run, n - run);
}

/* esc_text as a new Jinja string. */
static jinja_value *esc_string(struct esc *e, const char *s)
{
    struct dd_buf b = {0};
    esc_text(e, s, &b);
    jinja_value *v = jinja_value_string(b.p, b.len);
    dd_buf_free(&b);
    return v;
}

/* Append s[0..n) with the sentinels turned back into their text; with spans, each restored
 * text is recorded as user text. An unknown sentinel (not ours) is kept as it is. */
static void restore(const struct esc *e, const char *s, size_t n, struct chat_prompt *out,
                    bool spans)
{
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        int k = is_sentinel(s + i, n - i)
                    ? (((unsigned char)s[i + 2] & 63) << 6) | ((unsigned char)s[i + 3] & 63)
                    : -1;
        if (k < 0 || k >= e->t->n_ctl + e->n_lit) {
            i++;
            continue;
        }
        chat__put(out, s + run, i - run);
        const char *txt = k < e->t->n_ctl ? e->t->ctl[k] : e->lit[k - e->t->n_ctl];
        size_t len = k < e->t->n_ctl ? e->t->ctl_len[k] : 4;
        if (spans)
            chat__put_user(out, txt, len);
        else
            chat__put(out, txt, len);
        i += 4;
        run = i;
    }
    chat__put(out, s + run, n - run);
}

/* ---- context --------------------------------------------------------------------------- */

/* A request value as a Jinja value, every string and key escaped. */
static jinja_value *to_value(struct esc *e, const cJSON *j)
{
    if (cJSON_IsString(j))
        return esc_string(e, j->valuestring);
    if (!cJSON_IsArray(j) && !cJSON_IsObject(j))
        return jinja_value_from_cjson(j);
    bool list = cJSON_IsArray(j);
    jinja_value *v = list ? jinja_value_list() : jinja_value_dict();
    const cJSON *item;
    cJSON_ArrayForEach(item, j)
    {
        if (list) {
            jinja_list_append(v, to_value(e, item));
            continue;
        }
        struct dd_buf key = {0};
        esc_text(e, item->string ? item->string : "", &key);
        jinja_dict_set(v, key.p, to_value(e, item));
        dd_buf_free(&key);
    }
    return v;
}

/* Replace (or add) o[key] with v (transferred). */
static void set_item(cJSON *o, const char *key, cJSON *v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else
        cJSON_AddItemToObject(o, key, v);
}

/* Tool-call arguments sent as JSON text become the object they encode. */
static void normalize_calls(cJSON *calls)
{
    cJSON *c;
    cJSON_ArrayForEach(c, calls)
    {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args))
            continue;
        cJSON *o = cJSON_Parse(args->valuestring);
        if (cJSON_IsObject(o))
            set_item(fn, "arguments", o);
        else
            cJSON_Delete(o);
    }
}

/* A copy of messages as the templates expect them (see the file comment). */
static cJSON *normalize_messages(const cJSON *messages)
{
    cJSON *msgs = cJSON_Duplicate(messages, true), *m;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        bool assistant = cJSON_IsString(role) && strcmp(role->valuestring, "assistant") == 0;
        if (cJSON_IsArray(content)) {
            char *owned;
            const char *text = chat_content_text(content, &owned);
            set_item(m, "content", cJSON_CreateString(text ? text : ""));
            free(owned);
        } else if (assistant && (!content || cJSON_IsNull(content))) {
            set_item(m, "content", cJSON_CreateString(""));
        }
        normalize_calls(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    }
    return msgs;
}

/* Hugging Face's variables; the request's kwargs first, so they cannot replace them. */
static jinja_value *context(struct esc *e, const cJSON *msgs, const cJSON *tools,
                            const cJSON *kwargs, bool add_generation_prompt)
{
    const chat_tmpl_t *t = e->t;
    jinja_value *ctx = jinja_value_dict();
    const cJSON *kv, *kw = cJSON_IsObject(kwargs) ? kwargs : NULL;
    cJSON_ArrayForEach(kv, kw)
    {
        struct dd_buf key = {0};
        esc_text(e, kv->string ? kv->string : "", &key);
        jinja_dict_set(ctx, key.p, to_value(e, kv));
        dd_buf_free(&key);
    }
    jinja_dict_set(ctx, "messages", to_value(e, msgs));
    jinja_dict_set(ctx, "tools", tools ? to_value(e, tools) : jinja_value_none());
    jinja_dict_set(ctx, "documents", jinja_value_none());
    jinja_dict_set(ctx, "add_generation_prompt", jinja_value_bool(add_generation_prompt));
    jinja_dict_set(ctx, "bos_token", t->bos ? jinja_value_cstring(t->bos) : jinja_value_none());
    jinja_dict_set(ctx, "eos_token", t->eos ? jinja_value_cstring(t->eos) : jinja_value_none());
    return ctx;
}

/* ---- rendering ------------------------------------------------------------------------- */

/* Which think tag comes last in s[0..n): 1 "<think>", 0 "</think>", -1 neither. */
static int last_think(const char *s, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '<')
            continue;
        if (n - i >= 7 && memcmp(s + i, "<think>", 7) == 0)
            return 1;
        if (n - i >= 8 && memcmp(s + i, "</think>", 8) == 0)
            return 0;
    }
    return -1;
}

/* Does the generation prompt (the text after the template's last control token other than a
 * think tag; s is the escaped render, so no such token came from the user) leave a <think>
 * block open, taking the prefill text into account? */
static bool think_open(const chat_tmpl_t *t, const char *s, size_t n, const char *prefill)
{
    size_t from = 0;
    for (size_t i = n; i-- > 0 && !from;) {
        int k = t->first[(unsigned char)s[i]] ? ctl_at(t, s + i, n - i) : -1;
        if (k >= 0 && strcmp(t->ctl[k], "<think>") != 0 && strcmp(t->ctl[k], "</think>") != 0)
            from = i + t->ctl_len[k];
    }
    int state = last_think(s + from, n - from);
    int pre = prefill ? last_think(prefill, strlen(prefill)) : -1;
    return (pre >= 0 ? pre : state) == 1;
}

/* A failed render: the template's message with the user's text restored. */
static int render_error(const struct esc *e, int rc, const char *msg, char *err, size_t errlen)
{
    struct chat_prompt b = {0};
    restore(e, msg, strlen(msg), &b, false);
    dd_errf(err, errlen, "%s", b.text.p ? b.text.p : msg);
    chat_prompt_free(&b);
    return rc == DD_EFULL ? DD_EFULL : DD_EINVAL;
}

/* Render with the prefill rule of chat.h: a trailing assistant message (when a generation
 * prompt is wanted) is left out of the render and its content appended as user text. */
int chat__render_jinja(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                       const cJSON *kwargs, bool add_generation_prompt, struct chat_prompt *out,
                       char *err, size_t errlen)
{
    struct esc e = {.t = t};
    cJSON *msgs = normalize_messages(messages);
    int n = cJSON_GetArraySize(msgs);
    const cJSON *last = cJSON_GetArrayItem(msgs, n - 1);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    char *prefill = NULL;
    if (add_generation_prompt && cJSON_IsString(role) &&
        strcmp(role->valuestring, "assistant") == 0) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(last, "content");
        prefill = xstrdup(cJSON_IsString(c) ? c->valuestring : "");
        cJSON_DeleteItemFromArray(msgs, n - 1);
    }
    jinja_value *ctx = context(&e, msgs, tools, kwargs, add_generation_prompt);
    char *text = NULL, jerr[512];
    size_t len = 0;
    int rc = e.full ? DD_EINVAL : jinja_render(t->jt, ctx, &text, &len, jerr, sizeof jerr);
    if (e.full)
        snprintf(jerr, sizeof jerr, "too many distinct private-use characters in the request");
    jinja_value_release(ctx);
    cJSON_Delete(msgs);
    if (rc == 0) {
        restore(&e, text, len, out, true);
        if (prefill)
            chat__put_user(out, prefill, strlen(prefill));
        if (!out->text.p)
            chat__put(out, "", 0);
        out->think_open = think_open(t, text, len, prefill);
    } else {
        rc = render_error(&e, rc, jerr, err, errlen);
    }
    free(text);
    free(prefill);
    free(e.lit);
    return rc;
}
