/*
 * resp_responses — Responses API objects and events (see resp_responses.h).
 *
 * One state machine serves both modes: parts open, grow and close output items, writing
 * events to the job's buffer (which the job drops without streaming) and keeping each closed
 * item for the object. An item closes when a part of another kind arrives (reasoning, then
 * text, then calls, as the model writes them) or at the end. Item ids derive from the
 * response id, so the events and the object name the same items.
 *
 * Thread safety: one owner (the connection thread); cancelled reads the locked store.
 */
#include "resp_responses.h" // defines: resp_responses_create

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, dd_buf_put
#include "json.h"        // defines: json_utf8_sanitize

enum item_kind {
    IT_NONE = -1,
    IT_MESSAGE = RESP_PART_CONTENT,
    IT_REASONING = RESP_PART_REASONING,
    IT_CALL = RESP_PART_CALL_START
};

struct front {
    struct resp_front base;
    store_t *store; /* NULL = not stored */
    char id[64];
    cJSON *obj;       /* the response object: request echo, status, output, usage */
    cJSON *output;    /* obj's output array (closed items) */
    cJSON *assistant; /* the output as a chat message, for the stored conversation */
    char *messages;   /* the conversation before this response */
    int64_t seq;      /* sequence_number of the next event */
    enum item_kind kind;
    char item_id[96], call_id[64];
    char *name;
    struct dd_buf text; /* the open item's text or arguments */
    const char *item_status;
};

/* ---- small builders ------------------------------------------------------------------- */

/* Append "event: type\ndata: {type, ..., sequence_number}\n\n" and delete o. */
static void emit(struct front *f, struct dd_buf *b, const char *type, cJSON *o)
{
    cJSON_AddNumberToObject(o, "sequence_number", (double)f->seq++);
    resp_sse_event(b, type, o);
}

static cJSON *event(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* An event about the open item: type, item_id, output_index (, content_index). */
static cJSON *item_event(struct front *f, const char *type, bool content)
{
    cJSON *o = event(type);
    cJSON_AddStringToObject(o, "item_id", f->item_id);
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(f->output));
    if (content)
        cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

/* The content part of the open message or reasoning item. */
static cJSON *part_json(const struct front *f, bool full)
{
    cJSON *p = cJSON_CreateObject();
    bool msg = f->kind == IT_MESSAGE;
    cJSON_AddStringToObject(p, "type", msg ? "output_text" : "reasoning_text");
    cJSON_AddItemToObject(p, "text",
                          full ? resp_str(f->text.p, f->text.len) : cJSON_CreateString(""));
    if (msg) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddArrayToObject(p, "logprobs");
    }
    return p;
}

/* The open item as an output item (full: with its text and final status). */
static cJSON *item_json(const struct front *f, bool full)
{
    cJSON *it = cJSON_CreateObject();
    const char *status = full ? f->item_status : "in_progress";
    if (f->kind == IT_CALL) {
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "id", f->item_id);
        cJSON_AddStringToObject(it, "call_id", f->call_id);
        cJSON_AddStringToObject(it, "name", f->name);
        cJSON_AddItemToObject(it, "arguments",
                              full ? resp_str(f->text.p, f->text.len) : cJSON_CreateString(""));
        cJSON_AddStringToObject(it, "status", status);
        return it;
    }
    cJSON_AddStringToObject(it, "type", f->kind == IT_MESSAGE ? "message" : "reasoning");
    cJSON_AddStringToObject(it, "id", f->item_id);
    if (f->kind == IT_REASONING)
        cJSON_AddArrayToObject(it, "summary");
    cJSON_AddStringToObject(it, "status", status);
    if (f->kind == IT_MESSAGE)
        cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (full)
        cJSON_AddItemToArray(content, part_json(f, true));
    return it;
}

/* ---- items ------------------------------------------------------------------------------ */

/* output_item.added (+ content_part.added for text items). */
static void item_open(struct front *f, struct dd_buf *b, enum item_kind kind, const char *call_id,
                      const char *name)
{
    static const char *const prefix[] = {"msg", "rs", "fc"};
    f->kind = kind;
    dd_buf_truncate(&f->text, 0);
    const char *hex = strchr(f->id, '_') ? strchr(f->id, '_') + 1 : f->id;
    snprintf(f->item_id, sizeof f->item_id, "%s_%s%d", prefix[kind], hex,
             cJSON_GetArraySize(f->output));
    if (kind == IT_CALL) {
        snprintf(f->call_id, sizeof f->call_id, "%s", call_id ? call_id : "");
        free(f->name);
        f->name = xstrdup(name ? name : "");
    }
    cJSON *o = event("response.output_item.added");
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(f->output));
    cJSON_AddItemToObject(o, "item", item_json(f, false));
    emit(f, b, "response.output_item.added", o);
    if (kind != IT_CALL) {
        o = item_event(f, "response.content_part.added", true);
        cJSON_AddItemToObject(o, "part", part_json(f, false));
        emit(f, b, "response.content_part.added", o);
    }
}

/* The closed item also joins the chat message that the stored conversation ends with. */
static void keep_for_store(struct front *f)
{
    if (f->kind == IT_MESSAGE) {
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(f->assistant, "content");
        struct dd_buf t = {0};
        dd_buf_puts(&t, cJSON_IsString(old) ? old->valuestring : "");
        dd_buf_put(&t, f->text.p ? f->text.p : "", f->text.len);
        char *z = json_utf8_sanitize(t.p ? t.p : "", t.len, NULL);
        cJSON_ReplaceItemInObjectCaseSensitive(f->assistant, "content", cJSON_CreateString(z));
        free(z);
        dd_buf_free(&t);
    } else if (f->kind == IT_CALL) {
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(f->assistant, "tool_calls");
        if (!calls)
            calls = cJSON_AddArrayToObject(f->assistant, "tool_calls");
        cJSON *c = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(c, "id", f->call_id);
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", f->name);
        cJSON_AddItemToObject(fn, "arguments", resp_str(f->text.p, f->text.len));
        cJSON_AddItemToArray(calls, c);
    }
}

/* The .done events of the open item; it joins the output. */
static void item_close(struct front *f, struct dd_buf *b)
{
    if (f->kind == IT_NONE)
        return;
    cJSON *o;
    if (f->kind == IT_CALL) {
        o = item_event(f, "response.function_call_arguments.done", false);
        cJSON_AddStringToObject(o, "name", f->name);
        cJSON_AddItemToObject(o, "arguments", resp_str(f->text.p, f->text.len));
        emit(f, b, "response.function_call_arguments.done", o);
    } else {
        bool msg = f->kind == IT_MESSAGE;
        const char *done = msg ? "response.output_text.done" : "response.reasoning_text.done";
        o = item_event(f, done, true);
        cJSON_AddItemToObject(o, "text", resp_str(f->text.p, f->text.len));
        if (msg)
            cJSON_AddArrayToObject(o, "logprobs");
        emit(f, b, done, o);
        o = item_event(f, "response.content_part.done", true);
        cJSON_AddItemToObject(o, "part", part_json(f, true));
        emit(f, b, "response.content_part.done", o);
    }
    cJSON *item = item_json(f, true);
    o = event("response.output_item.done");
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(f->output));
    cJSON_AddItemToObject(o, "item", cJSON_Duplicate(item, true));
    emit(f, b, "response.output_item.done", o);
    cJSON_AddItemToArray(f->output, item);
    keep_for_store(f);
    f->kind = IT_NONE;
}

/* ---- the front end ---------------------------------------------------------------------- */

/* A copy of the object with this status, for an event or the store. */
static cJSON *snapshot(struct front *f, const char *status)
{
    cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "status", cJSON_CreateString(status));
    return cJSON_Duplicate(f->obj, true);
}

static void store_obj(struct front *f, bool final)
{
    if (!f->store)
        return;
    char *obj = cJSON_PrintUnformatted(f->obj), *msgs = NULL;
    if (final) {
        cJSON *m = cJSON_Parse(f->messages);
        if (!m)
            m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_Duplicate(f->assistant, true));
        msgs = cJSON_PrintUnformatted(m);
        cJSON_Delete(m);
    }
    store_put(f->store, f->id, obj, msgs);
    free(obj);
    free(msgs);
}

static void f_open(struct resp_front *base, struct dd_buf *b)
{
    struct front *f = (struct front *)base;
    cJSON *o = event("response.created");
    cJSON_AddItemToObject(o, "response", snapshot(f, "in_progress"));
    emit(f, b, "response.created", o);
    o = event("response.in_progress");
    cJSON_AddItemToObject(o, "response", snapshot(f, "in_progress"));
    emit(f, b, "response.in_progress", o);
}

static void f_part(struct resp_front *base, struct dd_buf *b, enum resp_part kind, const char *id,
                   const char *name, const char *s, size_t n)
{
    struct front *f = (struct front *)base;
    if (kind == RESP_PART_CALL_START ||
        (kind != RESP_PART_CALL_ARGS && (int)f->kind != (int)kind)) {
        item_close(f, b);
        item_open(f, b, (enum item_kind)kind, id, name);
        if (kind == RESP_PART_CALL_START)
            return;
    }
    if (n == 0 || f->kind == IT_NONE)
        return;
    dd_buf_put(&f->text, s, n);
    const char *type = f->kind == IT_CALL      ? "response.function_call_arguments.delta"
                       : f->kind == IT_MESSAGE ? "response.output_text.delta"
                                               : "response.reasoning_text.delta";
    cJSON *o = item_event(f, type, f->kind != IT_CALL);
    cJSON_AddItemToObject(o, "delta", resp_str(s, n));
    if (f->kind == IT_MESSAGE)
        cJSON_AddArrayToObject(o, "logprobs");
    emit(f, b, type, o);
}

/* usage: input / output tokens with the cached and reasoning details. */
static cJSON *usage_json(const struct resp_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", (double)u->prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"), "cached_tokens",
                            (double)u->cached);
    cJSON_AddNumberToObject(o, "output_tokens", (double)u->completion);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"), "reasoning_tokens",
                            (double)u->reasoning);
    cJSON_AddNumberToObject(o, "total_tokens", (double)(u->prompt + u->completion));
    return o;
}

static void f_close(struct resp_front *base, struct dd_buf *b, const struct resp_end *end)
{
    struct front *f = (struct front *)base;
    bool incomplete = !strcmp(end->finish, "length");
    bool cancelled = !strcmp(end->finish, "cancelled");
    f->item_status = incomplete || cancelled ? "incomplete" : "completed";
    item_close(f, b);
    if (incomplete) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "incomplete_details", d);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "usage", usage_json(&end->u));
    const char *status = cancelled ? "cancelled" : incomplete ? "incomplete" : "completed";
    cJSON *o = event(cancelled || incomplete ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(o, "response", snapshot(f, status));
    emit(f, b, cancelled || incomplete ? "response.incomplete" : "response.completed", o);
    store_obj(f, true);
}

static char *f_object(struct resp_front *base, size_t *len)
{
    struct front *f = (struct front *)base;
    char *s = cJSON_PrintUnformatted(f->obj);
    ASSERT(s);
    *len = strlen(s);
    return s;
}

/* response.failed with the error in the object (also what the store keeps). */
static void f_fail(struct resp_front *base, struct dd_buf *b, int status, const char *message)
{
    struct front *f = (struct front *)base;
    f->item_status = "incomplete";
    item_close(f, b);
    cJSON *err = cJSON_CreateObject();
    cJSON_AddStringToObject(err, "code", status == 503 ? "server_is_overloaded" : "server_error");
    cJSON_AddStringToObject(err, "message", message);
    cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "error", err);
    cJSON *o = event("response.failed");
    cJSON_AddItemToObject(o, "response", snapshot(f, "failed"));
    emit(f, b, "response.failed", o);
    store_obj(f, false);
}

static bool f_cancelled(struct resp_front *base)
{
    struct front *f = (struct front *)base;
    return f->store && store_cancel_requested(f->store, f->id);
}

static void f_destroy(struct resp_front *base)
{
    struct front *f = (struct front *)base;
    cJSON_Delete(f->obj);
    cJSON_Delete(f->assistant);
    free(f->messages);
    free(f->name);
    dd_buf_free(&f->text);
    free(f);
}

char *resp_responses_error(const struct api_error *e, size_t *len)
{
    return resp_error(e, len);
}

static const struct resp_front_ops ops = {
    .open = f_open,
    .part = f_part,
    .close = f_close,
    .object = f_object,
    .fail = f_fail,
    .error = resp_responses_error,
    .cancelled = f_cancelled,
    .destroy = f_destroy,
};

/* The object in the SDK's field order, request fields from echo. */
static cJSON *object_json(const char *id, const char *model, int64_t created, const cJSON *echo)
{
    static const char *const echoed[] = {"instructions",
                                         "max_output_tokens",
                                         "model",
                                         "parallel_tool_calls",
                                         "previous_response_id",
                                         "reasoning",
                                         "store",
                                         "temperature",
                                         "text",
                                         "tool_choice",
                                         "tools",
                                         "top_p"};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)created);
    cJSON_AddStringToObject(o, "status", "in_progress");
    cJSON_AddFalseToObject(o, "background");
    cJSON_AddNullToObject(o, "error");
    cJSON_AddNullToObject(o, "incomplete_details");
    for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(echo, echoed[i]);
        if (!strcmp(echoed[i], "model"))
            cJSON_AddStringToObject(o, "model", model);
        else if (!strcmp(echoed[i], "parallel_tool_calls") && cJSON_IsNull(v))
            cJSON_AddTrueToObject(o, echoed[i]);
        else if ((!strcmp(echoed[i], "temperature") || !strcmp(echoed[i], "top_p")) &&
                 cJSON_IsNull(v))
            cJSON_AddNumberToObject(o, echoed[i], 1);
        else
            cJSON_AddItemToObject(o, echoed[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
        if (!strcmp(echoed[i], "model"))
            cJSON_AddArrayToObject(o, "output");
    }
    cJSON_AddStringToObject(o, "truncation", "disabled");
    cJSON_AddNullToObject(o, "usage");
    cJSON_AddNullToObject(o, "user");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(echo, "metadata");
    cJSON_AddItemToObject(o, "metadata", md ? cJSON_Duplicate(md, true) : cJSON_CreateObject());
    return o;
}

struct resp_front *resp_responses_create(const char *id, const char *model, int64_t created,
                                         const cJSON *echo, const char *messages, bool keep,
                                         store_t *store)
{
    struct front *f = xcalloc(1, sizeof *f);
    f->base.ops = &ops;
    f->store = keep ? store : NULL;
    snprintf(f->id, sizeof f->id, "%s", id);
    f->obj = object_json(id, model, created, echo);
    f->output = cJSON_GetObjectItemCaseSensitive(f->obj, "output");
    f->assistant = cJSON_CreateObject();
    cJSON_AddStringToObject(f->assistant, "role", "assistant");
    cJSON_AddStringToObject(f->assistant, "content", "");
    f->messages = xstrdup(messages ? messages : "[]");
    f->kind = IT_NONE;
    f->item_status = "completed";
    store_obj(f, false); /* in_progress: GET and cancel work while it runs */
    return &f->base;
}

char *resp_responses_deleted(const char *id, size_t *len)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddBoolToObject(o, "deleted", true);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *len = strlen(s);
    return s;
}
