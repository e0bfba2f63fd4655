/*
 * gguf_seeds — writes a small seed corpus for fuzz_gguf into a directory: files that cover
 * every value type, nested arrays, string arrays, a non-default alignment and tensors of block
 * and plain types. Seeds are kept under 2 KiB so the fuzzer mutates them quickly.
 *
 * Usage: gguf_seeds DIR. Built and run by tests/fuzz/smoke.sh; not part of the library.
 */
#include <stdint.h>
#include <stdio.h>

#include "engine/model/gguf.h"        // defines: GGUF_T_*
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "tests/unit/gguf_raw.h"      // defines: struct gguf_raw, rb_*

static int save(gguf_writer_t *w, const char *dir, const char *name)
{
    char path[4096], err[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int rc = gguf_writer_write_file(w, path, err, sizeof(err));
    if (rc)
        fprintf(stderr, "%s\n", err);
    gguf_writer_destroy(w);
    return rc;
}

/* Scalars and arrays of every type the writer produces, plus two tensors. */
static int seed_kinds(const char *dir, uint32_t alignment, const char *name)
{
    static const char *const toks[] = {"a", "b", "ab", "<|im_end|>"};
    static const int32_t ints[] = {1, -2, 3};
    static const float floats[] = {0.5f, -1.0f};
    static float f32[16];
    static uint8_t q8[34];
    gguf_writer_t *w = gguf_writer_create(alignment);
    gguf_writer_set_str(w, "general.architecture", "qwen35");
    gguf_writer_set_u32(w, "qwen35.block_count", 5);
    gguf_writer_set_i32(w, "i", -1);
    gguf_writer_set_u64(w, "u", 1);
    gguf_writer_set_f32(w, "f", 1e-6f);
    gguf_writer_set_bool(w, "b", true);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 4);
    gguf_writer_set_arr_i32(w, "ai", ints, 3);
    gguf_writer_set_arr_u32(w, "au", (const uint32_t *)ints, 3);
    gguf_writer_set_arr_f32(w, "af", floats, 2);
    const int64_t ne_a[2] = {4, 4}, ne_q[1] = {32};
    gguf_writer_add_tensor(w, "a.weight", 2, ne_a, 0, f32, sizeof(f32));
    gguf_writer_add_tensor(w, "q.weight", 1, ne_q, 8, q8, sizeof(q8));
    return save(w, dir, name);
}

/* Hand-built: one key per fixed-size type the writer lacks and a two-level nested array. */
static int seed_raw(const char *dir)
{
    struct gguf_raw r = {.n = 0};
    uint8_t u8 = 7;
    int8_t i8 = -7;
    uint16_t u16 = 700;
    int16_t i16 = -700;
    int64_t i64 = -70000;
    double f64 = 0.5;
    gguf_raw_header(&r, 2, 0, 7);
    gguf_raw_kv(&r, "u8", GGUF_T_U8, &u8, 1);
    gguf_raw_kv(&r, "i8", GGUF_T_I8, &i8, 1);
    gguf_raw_kv(&r, "u16", GGUF_T_U16, &u16, 2);
    gguf_raw_kv(&r, "i16", GGUF_T_I16, &i16, 2);
    gguf_raw_kv(&r, "i64", GGUF_T_I64, &i64, 8);
    gguf_raw_kv(&r, "f64", GGUF_T_F64, &f64, 8);
    gguf_raw_kv(&r, "nest", GGUF_T_ARRAY, NULL, 0); /* [[true], ["s"]] */
    gguf_raw_u32(&r, GGUF_T_ARRAY);
    gguf_raw_u64(&r, 2);
    gguf_raw_u32(&r, GGUF_T_BOOL);
    gguf_raw_u64(&r, 1);
    gguf_raw_u8(&r, 1);
    gguf_raw_u32(&r, GGUF_T_STRING);
    gguf_raw_u64(&r, 1);
    gguf_raw_str(&r, "s");
    char path[4096];
    snprintf(path, sizeof(path), "%s/raw.gguf", dir);
    return gguf_raw_save(&r, path) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_seeds DIR\n");
        return 2;
    }
    int rc = seed_kinds(argv[1], 0, "kinds.gguf");
    rc |= seed_kinds(argv[1], 64, "kinds-align64.gguf");
    rc |= seed_raw(argv[1]);
    gguf_writer_t *w = gguf_writer_create(0);
    rc |= save(w, argv[1], "empty.gguf");
    return rc ? 1 : 0;
}
