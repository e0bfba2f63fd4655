/*
 * pretok — the pre-tokenizer splits of byte-level BPE vocabularies, written by hand to match the
 * HF tokenizer.json regexes exactly (leftmost-first alternation, greedy quantifiers):
 *
 *   qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen35: as qwen2 with [\p{L}\p{M}] for letter runs and marks excluded from symbol runs.
 *   llama3: as qwen2 with \p{N}{1,3} (llama.cpp's "llama-bpe").
 *
 * Bytes that are not valid UTF-8 count as one symbol character each (no category), so any byte
 * string splits losslessly.
 *
 * Thread safety: pure functions; any thread may call them.
 */
#ifndef DELTAD_PRETOK_H
#define DELTAD_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum pretok_kind { PRETOK_QWEN2, PRETOK_QWEN35, PRETOK_LLAMA3 };

/* Map a tokenizer.ggml.pre value (s[0..len)) to a kind. Returns 0, or DD_EUNSUPPORTED for a
 * name we do not implement. "default" maps to qwen2 (the caller warns). */
int pretok_from_name(const char *s, size_t len, enum pretok_kind *out);
const char *pretok_name(enum pretok_kind k);

/* Byte length of the pre-token starting at s[0] (n >= 1 bytes left); always in [1, n]. Calling
 * it repeatedly from the returned end splits the whole text. */
size_t pretok_next(enum pretok_kind k, const uint8_t *s, size_t n);

#endif
