/*
 * tok — byte-level BPE as GGUF stores it (tokenizer.ggml.model = "gpt2"), with the
 * qwen2 / qwen35 / llama-bpe pre-tokenizer splits implemented by hand over generated Unicode
 * category tables, special-token parsing, and a streaming UTF-8-safe detokenizer.
 *
 * Ownership: tok_create copies everything it needs out of the gguf_t (which may be closed
 * afterwards). Returned piece pointers are owned by the tok_t.
 *
 * Thread safety: a tok_t is immutable after creation; encode/decode may run on any number of
 * threads at once. A tok_stream belongs to one caller.
 */
#ifndef DELTAD_TOKENIZER_H
#define DELTAD_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h" // defines: gguf_t

typedef struct tok tok_t;

/* Token types as tokenizer.ggml.token_type stores them. */
enum tok_type {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4,
    TOK_UNUSED = 5,
    TOK_BYTE = 6
};

/* Build from the tokenizer.* keys of a GGUF. Errors name the key (e.g. "tokenizer.ggml.merges:
 * entry 17 'a b c' is not two tokens"). */
int tok_create(const gguf_t *g, tok_t **out, char *err, size_t errlen);
void tok_destroy(tok_t *t);

int32_t tok_n_vocab(const tok_t *t);
int32_t tok_bos(const tok_t *t); /* -1 when absent */
int32_t tok_eos(const tok_t *t);
bool tok_add_bos(const tok_t *t);
/* True for end-of-generation tokens: eos, eot, and tokens whose text is <|im_end|>,
 * <|endoftext|>, <|eot_id|> and the like. */
bool tok_is_eog(const tok_t *t, int32_t id);
enum tok_type tok_token_type(const tok_t *t, int32_t id);
/* Id of a token by its exact vocabulary string (GPT-2 byte-encoded form), or -1. */
int32_t tok_find(const tok_t *t, const char *text, size_t len);

/*
 * Encode text[0..len) (any bytes; invalid UTF-8 is encoded byte-wise) into ids.
 * parse_special: control / user-defined token strings found in the text become their ids;
 * otherwise they are tokenised as plain text. add_bos is not applied here.
 * Writes at most max_ids ids and returns the total count needed (may exceed max_ids), or a
 * negative dd_err.
 */
int64_t tok_encode(const tok_t *t, const char *text, size_t len, bool parse_special, int32_t *ids,
                   int64_t max_ids);

/* The raw bytes a token stands for (GPT-2 byte decoding applied; control tokens give their
 * text). Pointer owned by the tok_t; *len set. NULL for an out-of-range id. */
const char *tok_piece(const tok_t *t, int32_t id, size_t *len);

/* Decode ids into out (at most cap bytes, no NUL added). Returns the bytes needed. */
size_t tok_decode(const tok_t *t, const int32_t *ids, int64_t n, char *out, size_t cap);

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence at the end so every chunk it
 * releases is valid UTF-8 (invalid bytes are released as U+FFFD once they cannot start a valid
 * sequence). */
struct tok_stream {
    char pend[8]; /* held-back bytes of an incomplete UTF-8 character */
    int npend;
};
void tok_stream_init(struct tok_stream *s);
/* Append the text of id; returns bytes written to out (cap must be >= 256 + piece length). */
size_t tok_stream_push(const tok_t *t, struct tok_stream *s, int32_t id, char *out, size_t cap);
/* Release whatever is held back (as U+FFFD for incomplete sequences). */
size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap);

#endif
