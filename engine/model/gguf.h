/*
 * gguf — reader (mmap, fully validated) of GGUF v2/v3 files. The writer, which only the tools
 * and the tests use, is gguf_writer.h.
 *
 * The reader validates every offset, size, count and string length against the file size
 * before use; a malformed file yields an error message naming the field and the byte offset,
 * never a crash or an out-of-bounds read. Tensors are views into the mapping (STYLE rule 13).
 *
 * Ownership: a gguf_t owns its mapping (or borrows the caller's buffer for gguf_open_mem) and
 * every pointer it returns; those stay valid until gguf_close(). Strings returned by the
 * metadata getters point into the file and are NOT NUL-terminated: use the returned length.
 *
 * Thread safety: a gguf_t is immutable after open; any thread may read it concurrently.
 */
#ifndef DELTAD_GGUF_H
#define DELTAD_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, numbered as in the file. */
enum gguf_vtype {
    GGUF_T_U8 = 0,
    GGUF_T_I8 = 1,
    GGUF_T_U16 = 2,
    GGUF_T_I16 = 3,
    GGUF_T_U32 = 4,
    GGUF_T_I32 = 5,
    GGUF_T_F32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_U64 = 10,
    GGUF_T_I64 = 11,
    GGUF_T_F64 = 12,
    GGUF_T_COUNT
};

#define GGUF_MAGIC "GGUF" /* the first 4 bytes of every file */
#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* One tensor info. name is NUL-terminated (owned by the gguf_t). data points into the mapping,
 * size is the byte size computed from type and ne. Unused ne entries are 1. */
struct gguf_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type; /* ggml type id (0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K, 30 BF16
                      ...) */
    uint64_t offset; /* relative to the data section */
    size_t size;     /* bytes */
    const void *data;
};

typedef struct gguf gguf_t;

/* ---- reader ------------------------------------------------------------------------------- */

/* Open and validate a file. Returns 0 and *out, or a negative dd_err with a message in err
 * (e.g. "x.gguf: tensor 3 'blk.0.attn_q.weight': data offset 123 + size 456 exceeds file size
 * 500 (at byte 1234)"). */
int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen);
/* Same over a caller buffer (borrowed; must outlive the gguf_t). Used by tests and the fuzzer. */
int gguf_open_mem(const void *data, size_t size, gguf_t **out, char *err, size_t errlen);
void gguf_close(gguf_t *g);

uint32_t gguf_version(const gguf_t *g);
uint32_t gguf_alignment(const gguf_t *g);
size_t gguf_file_size(const gguf_t *g);
const void *gguf_base(const gguf_t *g);   /* start of the mapping */
size_t gguf_data_offset(const gguf_t *g); /* byte offset of the data section */

/* Key/value access. Keys are looked up by exact name. */
int64_t gguf_n_kv(const gguf_t *g);
int64_t gguf_find_key(const gguf_t *g, const char *key); /* index or -1 */
const char *gguf_key_name(const gguf_t *g, int64_t i);   /* NUL-terminated copy */
enum gguf_vtype gguf_kv_type(const gguf_t *g, int64_t i);

/* Typed scalar getters. Return 0, DD_ENOTFOUND when the key is absent, or DD_ETYPE when the
 * stored type is not exactly the requested one (llama.cpp strictness). */
int gguf_get_u32(const gguf_t *g, const char *key, uint32_t *out);
int gguf_get_i32(const gguf_t *g, const char *key, int32_t *out);
int gguf_get_u64(const gguf_t *g, const char *key, uint64_t *out);
int gguf_get_f32(const gguf_t *g, const char *key, float *out);
int gguf_get_bool(const gguf_t *g, const char *key, bool *out);
int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len);
/* Any integer scalar type (u8..i64, bool) converted to int64 (u64 > INT64_MAX is DD_ERANGE). */
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out);

/* Arrays. gguf_get_arr gives the element type and count; for fixed-size element types *data
 * points at the packed little-endian elements in the file (possibly unaligned: use memcpy or
 * the element getters). For string arrays use gguf_arr_str (*data is NULL). Nested arrays are
 * validated at open; their elements are reachable only through gguf_get_arr (etype GGUF_T_ARRAY,
 * data NULL). Element getters return DD_ERANGE for an index >= n. */
int gguf_get_arr(const gguf_t *g, const char *key, enum gguf_vtype *etype, uint64_t *n,
                 const void **data);
/* Element i of an integer array (any integer element type) as int64. */
int gguf_arr_int(const gguf_t *g, const char *key, uint64_t i, int64_t *out);
/* Element i of an f32 array. */
int gguf_arr_f32(const gguf_t *g, const char *key, uint64_t i, float *out);
/* Element i of a string array: pointer into the file (not NUL-terminated) and its length. O(1). */
int gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len);

/* Tensors. */
int64_t gguf_n_tensors(const gguf_t *g);
const struct gguf_tensor *gguf_tensor_at(const gguf_t *g, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const gguf_t *g, const char *name); /* NULL if absent */

/* Size table of ggml types known to the container (not necessarily computable by our kernels).
 * Returns false for unknown ids. */
bool gguf_type_info(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes, const char **name);
/* Byte size of one element of a fixed-size value type (enum gguf_vtype); 0 for string, array and
 * unknown types. */
size_t gguf_vtype_size(uint32_t t);

#endif
