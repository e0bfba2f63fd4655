/*
 * chat_impl — what the chat module's files share (chat.c: validation and the built-in ChatML;
 * chat_tmpl.c: model templates through the Jinja interpreter). Not for users of chat.h.
 */
#ifndef DELTAD_CHAT_IMPL_H
#define DELTAD_CHAT_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "chat.h"               // defines: struct chat_prompt, chat_tmpl_t
#include "server/jinja/jinja.h" // defines: jinja_tmpl

/* A compiled chat template (chat_tmpl_t). */
struct chat_tmpl {
    jinja_tmpl *jt;  /* NULL: the built-in ChatML */
    char *bos, *eos; /* token texts, or NULL (None in the template) */
    char **ctl;      /* [n_ctl] control-token texts, escaped in user strings */
    size_t *ctl_len; /* [n_ctl] */
    int n_ctl;
    bool first[256];  /* bytes that start some control-token text */
    bool xml_tools;   /* the template writes tool calls in the XML form */
    char source[600]; /* where the template came from, for the log */
};

/* Append template text (tokenized with special-token parsing). */
void chat__put(struct chat_prompt *p, const char *s, size_t n);
/* Append user text and record its span (adjacent spans merge). */
void chat__put_user(struct chat_prompt *p, const char *s, size_t n);
/* True when t renders through Jinja (false: the built-in ChatML). */
bool chat__tmpl_is_jinja(const chat_tmpl_t *t);
/* The Jinja path of chat_render (t has a template); same contract. */
int chat__render_jinja(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                       const cJSON *kwargs, bool add_generation_prompt, struct chat_prompt *out,
                       char *err, size_t errlen);

#endif
