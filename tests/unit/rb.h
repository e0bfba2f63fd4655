/*
 * rb — a raw GGUF byte builder for tests: header, keys, tensor infos and padding appended field
 * by field into a fixed buffer, so a test can state exactly which field of a file it breaks
 * (tests/unit/test_gguf.c) or write a value type the writer never produces
 * (tests/fuzz/gguf_seeds.c). Integers are written in host order (little-endian on every machine
 * we build for, as GGUF requires).
 *
 * Not a writer: nothing is validated. Overflowing the buffer aborts.
 */
#ifndef DELTAD_TEST_RB_H
#define DELTAD_TEST_RB_H

#include <stddef.h>
#include <stdint.h>

struct rb {
    uint8_t p[4096]; /* [n] bytes built so far */
    size_t n;
};

void rb_put(struct rb *b, const void *src, size_t n);
void rb_u8(struct rb *b, uint8_t v);
void rb_u32(struct rb *b, uint32_t v);
void rb_u64(struct rb *b, uint64_t v);
/* u64 length + bytes (no NUL). */
void rb_str(struct rb *b, const char *s);
/* Magic, version, tensor count, key count. */
void rb_header(struct rb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* Key, value type, then n bytes of value (v may be NULL when n is 0: the caller appends). */
void rb_kv(struct rb *b, const char *key, uint32_t type, const void *v, size_t n);
void rb_kv_u32(struct rb *b, const char *key, uint32_t v);
/* A tensor info with n_dims dims from ne. */
void rb_tinfo(struct rb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
              uint64_t off);
/* Zero bytes up to the next multiple of align. */
void rb_pad(struct rb *b, size_t align);
void rb_zeros(struct rb *b, size_t n);
/* Writes the bytes to path. Returns 0 or -1. */
int rb_save(const struct rb *b, const char *path);

#endif
