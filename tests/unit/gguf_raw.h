/*
 * gguf_raw — a raw GGUF byte builder for tests: header, keys, tensor infos and padding appended
 * field by field into a fixed buffer, so a test can state exactly which field of a file it breaks
 * (tests/unit/test_gguf.c) or write a value type the writer never produces
 * (tests/fuzz/gguf_seeds.c). Integers are written in host order (little-endian on every machine
 * we build for, as GGUF requires).
 *
 * Not a writer: nothing is validated. Overflowing the buffer aborts.
 */
#ifndef DELTAD_TEST_GGUF_RAW_H
#define DELTAD_TEST_GGUF_RAW_H

#include <stddef.h>
#include <stdint.h>

struct gguf_raw {
    uint8_t p[4096]; /* [n] bytes built so far */
    size_t n;
};

void gguf_raw_put(struct gguf_raw *b, const void *src, size_t n);
void gguf_raw_u8(struct gguf_raw *b, uint8_t v);
void gguf_raw_u32(struct gguf_raw *b, uint32_t v);
void gguf_raw_u64(struct gguf_raw *b, uint64_t v);
/* u64 length + bytes (no NUL). */
void gguf_raw_str(struct gguf_raw *b, const char *s);
/* Magic, version, tensor count, key count. */
void gguf_raw_header(struct gguf_raw *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* Key, value type, then n bytes of value (v may be NULL when n is 0: the caller appends). */
void gguf_raw_kv(struct gguf_raw *b, const char *key, uint32_t type, const void *v, size_t n);
void gguf_raw_kv_u32(struct gguf_raw *b, const char *key, uint32_t v);
/* A tensor info with n_dims dims from ne. */
void gguf_raw_tinfo(struct gguf_raw *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                    uint32_t type, uint64_t off);
/* Zero bytes up to the next multiple of align. */
void gguf_raw_pad(struct gguf_raw *b, size_t align);
void gguf_raw_zeros(struct gguf_raw *b, size_t n);
/* Writes the bytes to path. Returns 0 or -1. */
int gguf_raw_save(const struct gguf_raw *b, const char *path);

#endif
