/*
 * reasoning — split a chat choice's generated text into reasoning and content, incrementally:
 * the text of a leading <think> ... </think> block becomes reasoning (OpenAI extension
 * message.reasoning_content), the rest content.
 *
 * Rules, the same whether the text arrives at once or a byte at a time:
 *   - <think> counts only at the very start of the output (after whitespace), so a model that
 *     writes about the tag in its answer is not misread; when the prompt already opened the
 *     block (Qwen3 thinking templates end the generation prompt with "<think>\n"), the output
 *     starts inside it and only </think> ends it;
 *   - whitespace right after <think>, right before </think> and right after </think> is
 *     dropped (the tags' own line breaks), so neither part starts or ends with them;
 *   - an unterminated block (the token cap hit while thinking) is all reasoning.
 * Text is held back only while it may still be part of a tag or of droppable whitespace.
 *
 * Ownership: a struct reasoning is caller-allocated (reasoning_init / reasoning_deinit); the
 * emit callback borrows each piece for the duration of the call. Thread safety: one owner.
 */
#ifndef DELTAD_REASONING_H
#define DELTAD_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/util.h" // defines: struct dd_buf

/* Receives every non-empty piece in output order; reasoning tells which part it belongs to. */
typedef void (*reasoning_emit_fn)(void *ud, bool reasoning, const char *s, size_t n);

struct reasoning {
    int state;           /* internal: where in the output the splitter is */
    struct dd_buf hold;  /* bytes received but not yet emitted */
    bool opened, closed; /* <think> seen in the output / </think> seen */
    reasoning_emit_fn emit;
    void *ud;
};

/* inside: the prompt ended in an open <think> block, so the output starts as reasoning. */
void reasoning_init(struct reasoning *r, bool inside, reasoning_emit_fn emit, void *ud);
void reasoning_feed(struct reasoning *r, const char *s, size_t n);
/* End of output: emit whatever is held back. */
void reasoning_finish(struct reasoning *r);
void reasoning_deinit(struct reasoning *r);

#endif
