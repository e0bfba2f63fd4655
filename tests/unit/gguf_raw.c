/*
 * gguf_raw — the raw GGUF byte builder of gguf_raw.h. Test-only; linked into the test programs
 * (through the tests' helper library) and into tests/fuzz/gguf_seeds.
 */
#include "gguf_raw.h" // defines: struct gguf_raw, rb_*

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h" // defines: GGUF_MAGIC, GGUF_T_U32

void gguf_raw_put(struct gguf_raw *b, const void *src, size_t n)
{
    if (b->n + n > sizeof(b->p))
        abort();
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

void gguf_raw_u8(struct gguf_raw *b, uint8_t v)
{
    gguf_raw_put(b, &v, 1);
}

void gguf_raw_u32(struct gguf_raw *b, uint32_t v)
{
    gguf_raw_put(b, &v, 4);
}

void gguf_raw_u64(struct gguf_raw *b, uint64_t v)
{
    gguf_raw_put(b, &v, 8);
}

void gguf_raw_str(struct gguf_raw *b, const char *s)
{
    gguf_raw_u64(b, strlen(s));
    gguf_raw_put(b, s, strlen(s));
}

void gguf_raw_header(struct gguf_raw *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gguf_raw_put(b, GGUF_MAGIC, 4);
    gguf_raw_u32(b, version);
    gguf_raw_u64(b, n_tensors);
    gguf_raw_u64(b, n_kv);
}

void gguf_raw_kv(struct gguf_raw *b, const char *key, uint32_t type, const void *v, size_t n)
{
    gguf_raw_str(b, key);
    gguf_raw_u32(b, type);
    gguf_raw_put(b, v, n);
}

void gguf_raw_kv_u32(struct gguf_raw *b, const char *key, uint32_t v)
{
    gguf_raw_kv(b, key, GGUF_T_U32, &v, 4);
}

void gguf_raw_tinfo(struct gguf_raw *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                    uint32_t type, uint64_t off)
{
    gguf_raw_str(b, name);
    gguf_raw_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gguf_raw_u64(b, ne[d]);
    gguf_raw_u32(b, type);
    gguf_raw_u64(b, off);
}

void gguf_raw_pad(struct gguf_raw *b, size_t align)
{
    while (b->n % align)
        gguf_raw_u8(b, 0);
}

void gguf_raw_zeros(struct gguf_raw *b, size_t n)
{
    while (n--)
        gguf_raw_u8(b, 0);
}

int gguf_raw_save(const struct gguf_raw *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t wrote = fwrite(b->p, 1, b->n, f);
    return (fclose(f) != 0 || wrote != b->n) ? -1 : 0;
}
