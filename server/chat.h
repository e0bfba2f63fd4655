/*
 * chat — render an OpenAI `messages` array into the model's prompt text.
 *
 * For now this is ChatML (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n),
 * the format of every Qwen model deltad serves; the Jinja interpreter will later run the GGUF's
 * tokenizer.chat_template instead, behind the same function.
 *
 * The rendered text comes with the byte ranges that hold user-supplied text (message contents,
 * tool definitions, tool-call arguments). Callers tokenize those ranges with parse_special =
 * false and the template's own text with parse_special = true, so a user cannot inject control
 * tokens such as <|im_end|> by typing them.
 *
 * Thread safety: pure functions; any thread.
 */
#ifndef DELTAD_CHAT_H
#define DELTAD_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "model.h" // defines: struct model

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
    char *text; /* [len + 1] */
    size_t len;
    struct chat_span *spans; /* [n_spans] */
    int64_t n_spans;
    size_t cap_text, cap_spans; /* allocation sizes (internal) */
};

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
 * string / part-array / null content) plus optional tools (array) and template kwargs (object;
 * "enable_thinking": false closes an empty think block). add_generation_prompt opens the
 * assistant turn; a trailing assistant message is continued instead (prefill).
 * All cJSON arguments are borrowed. On success *out owns its buffers (chat_prompt_free);
 * returns 0 or DD_EINVAL with the reason in err.
 */
int chat_render(const struct model *m, const cJSON *messages, const cJSON *tools,
                const cJSON *kwargs, bool add_generation_prompt, struct chat_prompt *out,
                char *err, size_t errlen);
void chat_prompt_free(struct chat_prompt *p);

/* The text of a message content: a string, or the concatenated "text" of an array of parts.
 * Returns a borrowed pointer for strings, or writes a malloc'd concatenation into *owned and
 * returns it; NULL for null/absent content. */
const char *chat_content_text(const cJSON *content, char **owned);

#endif
