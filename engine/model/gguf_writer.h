/*
 * gguf_writer — writes GGUF v3 files (the reader is gguf.h). Used by the tools (mkmodel,
 * tok2gguf), the tests and the fuzz seed generator; the daemon never writes a model.
 *
 * Ownership: a gguf_writer_t is created by gguf_writer_create and freed by gguf_writer_destroy;
 * every setter copies its key, strings and arrays, and add_tensor copies the tensor data, so the
 * caller's buffers are borrowed only for the duration of the call.
 *
 * Thread safety: a writer belongs to the thread that created it.
 */
#ifndef DELTAD_GGUF_WRITER_H
#define DELTAD_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_writer gguf_writer_t;

/* alignment 0 means 32 (GGUF_DEFAULT_ALIGNMENT); any other value (a power of two) is written as
 * general.alignment. Allocation aborts on OOM. */
gguf_writer_t *gguf_writer_create(uint32_t alignment);
/* Frees keys, tensor copies and the writer; NULL is a no-op. */
void gguf_writer_destroy(gguf_writer_t *w);

void gguf_writer_set_u32(gguf_writer_t *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer_t *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer_t *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer_t *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s);
void gguf_writer_set_arr_i32(gguf_writer_t *w, const char *key, const int32_t *v, uint64_t n);
void gguf_writer_set_arr_u32(gguf_writer_t *w, const char *key, const uint32_t *v, uint64_t n);
void gguf_writer_set_arr_f32(gguf_writer_t *w, const char *key, const float *v, uint64_t n);
/* strs[i] with lens[i] bytes (lens may be NULL for NUL-terminated strings). */
void gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs,
                             const size_t *lens, uint64_t n);
/* Add a tensor; the data (size bytes, must equal the size implied by type and ne) is copied. */
int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t n_dims, const int64_t *ne,
                           uint32_t type, const void *data, size_t size);
int gguf_writer_write_file(gguf_writer_t *w, const char *path, char *err, size_t errlen);
/* Serialise to a heap buffer (*buf transferred to the caller, free()). */
int gguf_writer_write_mem(gguf_writer_t *w, void **buf, size_t *len);

#endif
