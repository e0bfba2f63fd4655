/*
 * chat — render an OpenAI `messages` array into the model's prompt text.
 *
 * The model's own chat template (the GGUF's tokenizer.chat_template, or a file named by the
 * chat_template_file key) is compiled once at start-up (chat_tmpl_create) and run through the
 * Jinja interpreter per request, with the context Hugging Face's apply_chat_template builds
 * (chat_tmpl.c). A model without a template gets the built-in ChatML renderer
 * (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n), the layout every Qwen
 * model shares.
 *
 * The rendered text comes with the byte ranges that hold user-supplied control-token text.
 * Callers tokenize those ranges with parse_special = false and the rest with parse_special =
 * true, so a user cannot inject control tokens such as <|im_end|> by typing them. (The ChatML
 * renderer marks every user byte; the template path marks exactly the control-token texts a
 * user wrote, so the rest tokenizes as one text, as it does in Hugging Face.)
 *
 * Thread safety: a chat_tmpl_t is immutable after creation and may be used by any number of
 * threads at once; the other functions are pure.
 */
#ifndef DELTAD_CHAT_H
#define DELTAD_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/model/model.h" // defines: struct model
#include "engine/util.h"        // defines: struct dd_buf

/* A validation failure: the offending field (OpenAI error.param) and a message. */
struct chat_error {
    char param[64];
    char message[400];
};

/* A byte range of the rendered text that came from the user. */
struct chat_span {
    size_t off, len;
};

/* A rendered prompt. text is NUL-terminated; spans are sorted and do not overlap. */
struct chat_prompt {
    struct dd_buf text;      /* text.p [text.len + 1], never NULL after chat_render */
    struct chat_span *spans; /* [n_spans] */
    int64_t n_spans;
    size_t cap_spans; /* allocation size (internal) */
    bool think_open;  /* the prompt ends inside an open <think> block: output starts reasoning */
    /* Byte offsets where the rendering of a message ends (ascending, each <= text.len): the
     * places where two conversations that share their first messages diverge, and where the
     * prompt cache keeps the model's state. Only some messages are marked: the first one (the
     * system prompt) and the last CHAT_TAIL_ENDS. A template whose rendering of a shorter
     * conversation is not a prefix of the whole contributes no offset for it. */
    size_t *ends; /* [n_ends] */
    int64_t n_ends;
};

/* Messages at the end of a conversation whose end offsets chat_render records. */
#define CHAT_TAIL_ENDS 3

/* A compiled chat template (opaque). */
typedef struct chat_tmpl chat_tmpl_t;

/*
 * The template of model m (borrowed, must outlive the template): the file at path when path is
 * non-empty, else the GGUF's tokenizer.chat_template, else the built-in ChatML. A syntax error
 * is DD_EINVAL with "FILE: chat template: line:col: message" in err; an unreadable file is
 * DD_EIO. On success *out is owned by the caller (chat_tmpl_destroy).
 */
int chat_tmpl_create(const struct model *m, const char *path, chat_tmpl_t **out, char *err,
                     size_t errlen);
/* How the model writes tool calls (toolcall.h): the Qwen3 JSON form, or the XML form of Qwen3.5
 * and Qwen3-Coder. A template that writes "<function=" uses the XML form; the others (and the
 * built-in ChatML, t NULL) the JSON form. */
enum chat_tool_form { CHAT_TOOLS_JSON, CHAT_TOOLS_XML };
enum chat_tool_form chat_tmpl_tool_form(const chat_tmpl_t *t);
/* Where the template came from, for the start-up log. */
const char *chat_tmpl_source(const chat_tmpl_t *t);
void chat_tmpl_destroy(chat_tmpl_t *t);

/*
 * Validate the conversation fields of a chat request body (root, borrowed): messages (docs
 * 7.1 / 7.3: objects with a known role, string / text-part / null content, tool_calls, no two
 * consecutive assistant turns), tools and tool_choice. On success *messages and *tools
 * (NULL when absent) point into root; returns 0, or -1 with *e filled.
 */
int chat_check(const cJSON *root, const cJSON **messages, const cJSON **tools,
               struct chat_error *e);

/*
 * Render messages (an array accepted by chat_check: objects with a string role and a
 * string / part-array / null content) plus optional tools (array) and template kwargs (object,
 * e.g. "enable_thinking": false) with template t (NULL = the built-in ChatML).
 * add_generation_prompt opens the assistant turn; a trailing assistant message is continued
 * instead (prefill: the rest is rendered with the generation prompt, then its content follows).
 * All cJSON arguments are borrowed. On success *out owns its buffers (chat_prompt_free);
 * returns 0, or DD_EINVAL / DD_EFULL with the reason in err: the template's own message for
 * raise_exception, "line:col: ..." for other template errors.
 */
int chat_render(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                const cJSON *kwargs, bool add_generation_prompt, struct chat_prompt *out, char *err,
                size_t errlen);
void chat_prompt_free(struct chat_prompt *p);

/* The text of a message content: a string, or the concatenated "text" of an array of parts.
 * Returns a borrowed pointer for strings, or writes a malloc'd concatenation into *owned and
 * returns it; NULL for null/absent content. */
const char *chat_content_text(const cJSON *content, char **owned);

#endif
