/*
 * resp_messages — Anthropic message objects and events (see resp_messages.h).
 *
 * Like resp_responses: one state machine for both modes; a block opens when a part of another
 * kind arrives (thinking, text, each tool_use) and closes at the next or at the end; closed
 * blocks make the object's content. tool_use input is the parsed arguments (an object; {}
 * when the model's arguments do not parse).
 *
 * Thread safety: one owner (the connection thread).
 */
#include "resp_messages.h" // defines: resp_messages_create

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, dd_buf_put
#include "json.h"        // defines: json_utf8_sanitize

struct front {
    struct resp_front base;
    cJSON *obj;     /* the message object */
    cJSON *content; /* obj's content (closed blocks) */
    int64_t input_tokens;
    int kind; /* the open block: -1 none, else an enum resp_part (CALL_START for tool_use) */
    char *call_id, *name;
    struct dd_buf text;
};

static cJSON *event(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* The open block (full: with its text / input). */
static cJSON *block_json(const struct front *f, bool full)
{
    cJSON *b = cJSON_CreateObject();
    if (f->kind == RESP_PART_CALL_START) {
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", f->call_id);
        cJSON_AddStringToObject(b, "name", f->name);
        cJSON *in = full ? cJSON_ParseWithLength(f->text.p ? f->text.p : "", f->text.len) : NULL;
        if (!cJSON_IsObject(in)) {
            cJSON_Delete(in);
            in = cJSON_CreateObject();
        }
        cJSON_AddItemToObject(b, "input", in);
    } else if (f->kind == RESP_PART_REASONING) {
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking",
                              full ? resp_str(f->text.p, f->text.len) : cJSON_CreateString(""));
        cJSON_AddStringToObject(b, "signature", "");
    } else {
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddItemToObject(b, "text",
                              full ? resp_str(f->text.p, f->text.len) : cJSON_CreateString(""));
    }
    return b;
}

static void block_open(struct front *f, struct dd_buf *b, int kind, const char *id,
                       const char *name)
{
    f->kind = kind;
    dd_buf_truncate(&f->text, 0);
    if (kind == RESP_PART_CALL_START) {
        free(f->call_id);
        free(f->name);
        f->call_id = xstrdup(id ? id : "");
        f->name = xstrdup(name ? name : "");
    }
    cJSON *o = event("content_block_start");
    cJSON_AddNumberToObject(o, "index", cJSON_GetArraySize(f->content));
    cJSON_AddItemToObject(o, "content_block", block_json(f, false));
    resp_sse_event(b, "content_block_start", o);
}

static void block_close(struct front *f, struct dd_buf *b)
{
    if (f->kind < 0)
        return;
    cJSON *o = event("content_block_stop");
    cJSON_AddNumberToObject(o, "index", cJSON_GetArraySize(f->content));
    resp_sse_event(b, "content_block_stop", o);
    cJSON_AddItemToArray(f->content, block_json(f, true));
    f->kind = -1;
}

static cJSON *usage_json(int64_t in, int64_t out, int64_t cached)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", (double)in);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)cached);
    cJSON_AddNumberToObject(u, "output_tokens", (double)out);
    return u;
}

static void f_open(struct resp_front *base, struct dd_buf *b)
{
    struct front *f = (struct front *)base;
    cJSON *o = event("message_start");
    cJSON_AddItemToObject(o, "message", cJSON_Duplicate(f->obj, true));
    resp_sse_event(b, "message_start", o);
    resp_sse_event(b, "ping", event("ping"));
}

static void f_part(struct resp_front *base, struct dd_buf *b, enum resp_part kind, const char *id,
                   const char *name, const char *s, size_t n)
{
    struct front *f = (struct front *)base;
    if (kind == RESP_PART_CALL_START || (kind != RESP_PART_CALL_ARGS && f->kind != (int)kind)) {
        block_close(f, b);
        block_open(f, b, kind, id, name);
        if (kind == RESP_PART_CALL_START)
            return;
    }
    if (n == 0 || f->kind < 0)
        return;
    dd_buf_put(&f->text, s, n);
    cJSON *o = event("content_block_delta"), *d;
    cJSON_AddNumberToObject(o, "index", cJSON_GetArraySize(f->content));
    d = cJSON_AddObjectToObject(o, "delta");
    if (f->kind == RESP_PART_CALL_START) {
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddItemToObject(d, "partial_json", resp_str(s, n));
    } else if (f->kind == RESP_PART_REASONING) {
        cJSON_AddStringToObject(d, "type", "thinking_delta");
        cJSON_AddItemToObject(d, "thinking", resp_str(s, n));
    } else {
        cJSON_AddStringToObject(d, "type", "text_delta");
        cJSON_AddItemToObject(d, "text", resp_str(s, n));
    }
    resp_sse_event(b, "content_block_delta", o);
}

/* stop_reason from how the generation ended. */
static const char *stop_reason(const struct front *f, const struct resp_end *end)
{
    if (!strcmp(end->finish, "length"))
        return "max_tokens";
    if (end->stop_seq)
        return "stop_sequence";
    for (const cJSON *c = f->content->child; c; c = c->next)
        if (!strcmp(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, "tool_use"))
            return "tool_use";
    return "end_turn";
}

static void f_close(struct resp_front *base, struct dd_buf *b, const struct resp_end *end)
{
    struct front *f = (struct front *)base;
    block_close(f, b);
    const char *reason = stop_reason(f, end);
    cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "stop_reason", cJSON_CreateString(reason));
    cJSON_ReplaceItemInObjectCaseSensitive(f->obj, "stop_sequence",
                                           end->stop_seq ? cJSON_CreateString(end->stop_seq)
                                                         : cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(
        f->obj, "usage", usage_json(end->u.prompt, end->u.completion, end->u.cached));
    cJSON *o = event("message_delta"), *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "stop_reason", reason);
    cJSON_AddItemToObject(d, "stop_sequence",
                          end->stop_seq ? cJSON_CreateString(end->stop_seq) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "usage", usage_json(end->u.prompt, end->u.completion, end->u.cached));
    resp_sse_event(b, "message_delta", o);
    resp_sse_event(b, "message_stop", event("message_stop"));
}

static char *f_object(struct resp_front *base, size_t *len)
{
    struct front *f = (struct front *)base;
    char *s = cJSON_PrintUnformatted(f->obj);
    ASSERT(s);
    *len = strlen(s);
    return s;
}

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static cJSON *error_json(int status, const char *message)
{
    cJSON *o = event("error"), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "type", error_type(status));
    cJSON_AddStringToObject(err, "message", message);
    return o;
}

char *resp_messages_error(const struct api_error *e, size_t *len)
{
    char msg[600];
    if (e->param[0] && !strstr(e->message, e->param))
        snprintf(msg, sizeof msg, "%s: %s", e->param, e->message);
    else
        snprintf(msg, sizeof msg, "%s", e->message);
    cJSON *o = error_json(e->status, msg);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *len = strlen(s);
    return s;
}

static void f_fail(struct resp_front *base, struct dd_buf *b, int status, const char *message)
{
    resp_sse_event(b, "error", error_json(status, message));
}

static void f_destroy(struct resp_front *base)
{
    struct front *f = (struct front *)base;
    cJSON_Delete(f->obj);
    free(f->call_id);
    free(f->name);
    dd_buf_free(&f->text);
    free(f);
}

static const struct resp_front_ops ops = {
    .open = f_open,
    .part = f_part,
    .close = f_close,
    .object = f_object,
    .fail = f_fail,
    .error = resp_messages_error,
    .cancelled = NULL,
    .destroy = f_destroy,
};

struct resp_front *resp_messages_create(const char *id, const char *model,
                                        const struct api_messages_req *mr)
{
    struct front *f = xcalloc(1, sizeof *f);
    f->base.ops = &ops;
    f->kind = -1;
    f->input_tokens = mr->input_tokens;
    f->obj = cJSON_CreateObject();
    cJSON_AddStringToObject(f->obj, "id", id);
    cJSON_AddStringToObject(f->obj, "type", "message");
    cJSON_AddStringToObject(f->obj, "role", "assistant");
    cJSON_AddStringToObject(f->obj, "model", model);
    f->content = cJSON_AddArrayToObject(f->obj, "content");
    cJSON_AddNullToObject(f->obj, "stop_reason");
    cJSON_AddNullToObject(f->obj, "stop_sequence");
    cJSON_AddItemToObject(f->obj, "usage", usage_json(mr->input_tokens, 0, 0));
    return &f->base;
}
