/*
 * test_mkmodel — tools/mkmodel.c: runs `mkmodel --tiny-all` twice into temporary directories,
 * checks that the runs are byte-identical, and opens every model to check the facts of
 * docs/models.md §9 (tensor counts, shapes, keys, vocab, which tensors stay F32) and that the
 * quantised variants hold the same weights as their F32 twins.
 *
 * Needs BUILD_DIR/tools/mkmodel (argv[1] or $DELTAD_TEST_BUILD); skips without it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/model/gguf.h"        // defines: gguf_open, gguf_find_tensor
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/util.h"              // defines: DD_E*
#include "kernels/cpu/kq.h"           // defines: kq_dequantize_row
#include "test.h"                     // defines: TEST, RUN, CHECK*, TEST_MAIN_END

static char dir1[64] = "/tmp/test_mkmodel_XXXXXX";
static char dir2[64] = "/tmp/test_mkmodel_XXXXXX";

static const char *const files[] = {
    "tiny-qwen3.gguf",          "tiny-qwen35.gguf",       "tiny-qwen35moe.gguf",
    "tiny-qwen3next.gguf",      "tiny-qwen35-q8_0.gguf",  "tiny-qwen35-q4_0.gguf",
    "tiny-qwen35moe-q8_0.gguf", "small-qwen35-f32.gguf",  "small-qwen35-f16.gguf",
    "small-qwen35-bf16.gguf",   "small-qwen35-q4_k.gguf", "small-qwen35-q5_k.gguf",
    "small-qwen35-q6_k.gguf",
};
#define N_FILES (sizeof(files) / sizeof(files[0]))

static gguf_t *open_model(const char *name)
{
    char path[256], err[512] = "";
    gguf_t *g = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir1, name);
    if (gguf_open(path, &g, err, sizeof(err)) != 0)
        printf("  %s\n", err);
    return g;
}

/* Tensor `name` exists with exactly these dims (n_dims = number of non-zero entries). */
static int has_shape(const gguf_t *g, const char *name, int64_t ne0, int64_t ne1, int64_t ne2)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    uint32_t nd = ne2 ? 3 : ne1 ? 2 : 1;
    int ok = t && t->n_dims == nd && t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1) &&
             t->ne[2] == (ne2 ? ne2 : 1);
    if (!ok)
        printf("  %s: wrong or missing shape\n", name);
    return ok;
}

static uint32_t tensor_type(const gguf_t *g, const char *name)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    return t ? t->type : 0xffffffffu;
}

static int64_t key_u32(const gguf_t *g, const char *key)
{
    uint32_t v;
    return gguf_get_u32(g, key, &v) == 0 ? (int64_t)v : -1;
}

static int token_is(const gguf_t *g, uint64_t id, const char *text)
{
    const char *s;
    size_t n;
    return gguf_arr_str(g, "tokenizer.ggml.tokens", id, &s, &n) == 0 && n == strlen(text) &&
           memcmp(s, text, n) == 0;
}

/* Largest |a - b| over tensor `name` of two models, both dequantised to f32. */
static double max_diff(const gguf_t *a, const gguf_t *b, const char *name, double *max_abs)
{
    const struct gguf_tensor *ta = gguf_find_tensor(a, name), *tb = gguf_find_tensor(b, name);
    if (!ta || !tb || ta->ne[0] != tb->ne[0])
        return 1e30;
    int64_t n = ta->ne[0], rows = ta->ne[1] * ta->ne[2] * ta->ne[3];
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    double d = 0;
    *max_abs = 0;
    for (int64_t r = 0; r < rows; r++) {
        kq_dequantize_row(ta->type, (const uint8_t *)ta->data + r * (ta->size / rows), x, n);
        kq_dequantize_row(tb->type, (const uint8_t *)tb->data + r * (tb->size / rows), y, n);
        for (int64_t i = 0; i < n; i++) {
            d = fmax(d, fabs((double)x[i] - y[i]));
            *max_abs = fmax(*max_abs, fabs((double)x[i]));
        }
    }
    free(x);
    free(y);
    return d;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* Two runs of the generator give byte-identical files. */
TEST(deterministic)
{
    for (size_t i = 0; i < N_FILES; i++) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "cmp -s %s/%s %s/%s", dir1, files[i], dir2, files[i]);
        int rc = system(cmd);
        if (rc != 0)
            printf("  %s differs between two runs\n", files[i]);
        CHECK_EQ(rc, 0);
    }
}

/* Tensor counts of docs §9.3 and the 272-token vocab, for every file of the set. */
TEST(tensor_counts)
{
    const int want[N_FILES] = {24, 71, 96, 93, 71, 71, 96, 71, 71, 71, 71, 71, 71};
    for (size_t i = 0; i < N_FILES; i++) {
        gguf_t *g = open_model(files[i]);
        CHECK(g != NULL);
        if (!g)
            continue;
        CHECK_EQ(gguf_n_tensors(g), want[i]);
        enum gguf_vtype et;
        uint64_t n;
        const void *data;
        CHECK_EQ(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data), 0);
        CHECK_EQ(n, 272);
        const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
        CHECK(emb && emb->ne[1] == 272);
        gguf_close(g);
    }
}

/* Keys and shapes of the three hybrid archs, including their differences (ssm_ba, MoE,
 * no M-RoPE sections for qwen3next). */
TEST(hybrid_keys_and_shapes)
{
    const char *arch[3] = {"qwen35", "qwen35moe", "qwen3next"};
    for (int a = 0; a < 3; a++) {
        char name[64], key[128];
        snprintf(name, sizeof(name), "tiny-%s.gguf", arch[a]);
        gguf_t *g = open_model(name);
        CHECK(g != NULL);
        if (!g)
            continue;
        const char *s;
        size_t n;
        CHECK(gguf_get_str(g, "general.architecture", &s, &n) == 0 && n == strlen(arch[a]) &&
              memcmp(s, arch[a], n) == 0);
        snprintf(key, sizeof(key), "%s.block_count", arch[a]);
        CHECK_EQ(key_u32(g, key), 5);
        snprintf(key, sizeof(key), "%s.nextn_predict_layers", arch[a]);
        CHECK_EQ(key_u32(g, key), 1);
        snprintf(key, sizeof(key), "%s.ssm.inner_size", arch[a]);
        CHECK_EQ(key_u32(g, key), 128);
        snprintf(key, sizeof(key), "%s.rope.dimension_sections", arch[a]);
        int64_t sec;
        CHECK_EQ(gguf_arr_int(g, key, 2, &sec), a == 2 ? DD_ENOTFOUND : 0);
        CHECK(a == 2 || sec == 2);
        snprintf(key, sizeof(key), "%s.expert_count", arch[a]);
        CHECK_EQ(key_u32(g, key), a == 0 ? -1 : 8);
        CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s, &n) == 0);
        CHECK(memcmp(s, a == 2 ? "qwen2" : "qwen35", n) == 0);
        CHECK(has_shape(g, "token_embd.weight", 128, 272, 0));
        CHECK(has_shape(g, "output.weight", 128, 272, 0));
        CHECK(has_shape(g, "blk.0.attn_qkv.weight", 128, 256, 0));
        CHECK(has_shape(g, "blk.2.ssm_conv1d.weight", 4, 256, 0));
        CHECK(has_shape(g, "blk.1.ssm_a", 4, 0, 0));
        CHECK(has_shape(g, "blk.1.ssm_dt.bias", 4, 0, 0));
        CHECK(has_shape(g, "blk.3.attn_q.weight", 128, 512, 0));
        CHECK(has_shape(g, "blk.4.attn_output.weight", 256, 128, 0));
        CHECK(has_shape(g, "blk.4.nextn.eh_proj.weight", 256, 128, 0));
        CHECK(has_shape(g, "blk.4.nextn.shared_head_norm.weight", 128, 0, 0));
        if (a == 2)
            CHECK(has_shape(g, "blk.0.ssm_ba.weight", 128, 8, 0));
        else
            CHECK(has_shape(g, "blk.0.ssm_beta.weight", 128, 4, 0));
        if (a == 0)
            CHECK(has_shape(g, "blk.4.ffn_down.weight", 256, 128, 0));
        else
            CHECK(has_shape(g, "blk.4.ffn_down_exps.weight", 64, 128, 8) &&
                  has_shape(g, "blk.0.ffn_gate_shexp.weight", 128, 128, 0) &&
                  has_shape(g, "blk.0.ffn_gate_inp_shexp.weight", 128, 0, 0));
        CHECK(gguf_find_tensor(g, "blk.3.attn_qkv.weight") == NULL);
        gguf_close(g);
    }
}

/* The dense qwen3 model: 2 layers, D 32, tied head, ffn_norm naming. */
TEST(qwen3_dense)
{
    gguf_t *g = open_model("tiny-qwen3.gguf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_EQ(key_u32(g, "qwen3.block_count"), 2);
    CHECK_EQ(key_u32(g, "qwen3.attention.key_length"), 32);
    CHECK(gguf_find_tensor(g, "output.weight") == NULL); /* tied */
    CHECK(has_shape(g, "blk.1.attn_q.weight", 128, 128, 0));
    CHECK(has_shape(g, "blk.1.attn_k.weight", 128, 64, 0));
    CHECK(has_shape(g, "blk.1.attn_q_norm.weight", 32, 0, 0));
    CHECK(has_shape(g, "blk.1.ffn_norm.weight", 128, 0, 0));
    float base;
    CHECK(gguf_get_f32(g, "qwen3.rope.freq_base", &base) == 0 && base == 1e6f);
    gguf_close(g);
}

/* Byte tokens in GPT-2 encoding, merges, specials, pads and their token types. */
TEST(tokenizer)
{
    gguf_t *g = open_model("tiny-qwen35moe.gguf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(token_is(g, 32, "\xc4\xa0")); /* space = Ġ */
    CHECK(token_is(g, 0, "\xc4\x80"));  /* byte 0 = U+0100 */
    CHECK(token_is(g, 97, "a"));
    CHECK(token_is(g, 258, "\xc4\xa0the"));
    CHECK(token_is(g, 266, "<|im_end|>"));
    CHECK(token_is(g, 271, "[PAD271]"));
    int64_t ty;
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 263, &ty) == 0 && ty == 1);
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 264, &ty) == 0 && ty == 3);
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 269, &ty) == 0 && ty == 5);
    const char *s;
    size_t n;
    CHECK(gguf_arr_str(g, "tokenizer.ggml.merges", 2, &s, &n) == 0 && n == 6 &&
          memcmp(s, "\xc4\xa0t he", 6) == 0);
    CHECK_EQ(key_u32(g, "tokenizer.ggml.eos_token_id"), 266);
    CHECK(gguf_get_str(g, "tokenizer.chat_template", &s, &n) == 0 && n > 20);
    gguf_close(g);
}

/* The quantised files keep the F32 tensors of docs §4.9 and hold the same weights. */
TEST(quantised_twins)
{
    gguf_t *f = open_model("tiny-qwen35.gguf"), *q = open_model("tiny-qwen35-q8_0.gguf");
    gguf_t *sf = open_model("small-qwen35-f32.gguf"), *sk = open_model("small-qwen35-q4_k.gguf");
    gguf_t *sh = open_model("small-qwen35-f16.gguf");
    CHECK(f && q && sf && sk && sh);
    if (!f || !q || !sf || !sk || !sh)
        goto out;
    CHECK_EQ(tensor_type(q, "blk.0.attn_qkv.weight"), KQ_Q8_0);
    CHECK_EQ(tensor_type(q, "token_embd.weight"), KQ_Q8_0);
    CHECK_EQ(tensor_type(q, "blk.0.ssm_conv1d.weight"), KQ_F32);
    CHECK_EQ(tensor_type(q, "blk.0.ssm_a"), KQ_F32);
    CHECK_EQ(tensor_type(q, "blk.0.attn_norm.weight"), KQ_F32);
    CHECK_EQ(tensor_type(sk, "blk.4.ffn_down.weight"), KQ_Q4_K);
    CHECK_EQ(tensor_type(sk, "blk.4.nextn.eh_proj.weight"), KQ_Q4_K);
    CHECK_EQ(tensor_type(sh, "blk.0.ssm_out.weight"), KQ_F16);
    CHECK_EQ(key_u32(q, "general.file_type"), 7);
    double amax;
    CHECK(max_diff(f, q, "blk.0.attn_qkv.weight", &amax) < amax / 100);
    CHECK(max_diff(f, q, "blk.2.ssm_conv1d.weight", &amax) == 0);
    CHECK(max_diff(sf, sk, "blk.1.ffn_up.weight", &amax) < amax / 5);
    CHECK(max_diff(sf, sh, "blk.1.ffn_up.weight", &amax) < amax / 1000);
    CHECK(max_diff(f, sf, "blk.0.ssm_a", &amax) == 0); /* same name, same values */
out:
    gguf_close(f), gguf_close(q), gguf_close(sf), gguf_close(sk), gguf_close(sh);
}

/* Value ranges of docs §9.3. */
TEST(value_ranges)
{
    gguf_t *g = open_model("tiny-qwen35moe.gguf");
    CHECK(g != NULL);
    if (!g)
        return;
    const struct gguf_tensor *a = gguf_find_tensor(g, "blk.0.ssm_a");
    const struct gguf_tensor *nrm = gguf_find_tensor(g, "output_norm.weight");
    const struct gguf_tensor *w = gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    CHECK(a && nrm && w);
    if (a && nrm && w) {
        const float *x = a->data;
        for (int i = 0; i < 4; i++)
            CHECK(x[i] <= -1.0f && x[i] >= -16.0f);
        double s = 0, s2 = 0;
        for (int i = 0; i < 128; i++)
            s += ((const float *)nrm->data)[i];
        CHECK_NEAR(s / 128, 1.0, 0.05);
        int64_t n = w->ne[0] * w->ne[1] * w->ne[2];
        for (int64_t i = 0; i < n; i++)
            s2 += (double)((const float *)w->data)[i] * ((const float *)w->data)[i];
        CHECK_NEAR(s2 / (double)n * 64, 1.0, 0.05); /* variance 1 / in_features */
    }
    gguf_close(g);
}

static const char *g_bin;

/* --tokenizer copies every tokenizer.* key of another GGUF (the vocab size follows it) and
 * --head tied leaves output.weight out. */
TEST(copied_tokenizer)
{
    enum { V = 300 };
    char tokp[128], outp[128], cmd[1024], err[512], *strs[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        strs[i] = malloc(16);
        snprintf(strs[i], 16, i == 7 ? "<|end|>" : "tok%d", i);
        types[i] = i == 7 ? 3 : 1;
    }
    const char *merges[] = {"t o", "to k"};
    gguf_writer_t *w = gguf_writer_create(0);
    gguf_writer_set_str(w, "general.architecture", "none");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, NULL, V);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, V);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 7);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_set_str(w, "tokenizer.chat_template", "{{ 'copied template' }}");
    snprintf(tokp, sizeof tokp, "%s/tok.gguf", dir1);
    snprintf(outp, sizeof outp, "%s/copied.gguf", dir1);
    CHECK_EQ(gguf_writer_write_file(w, tokp, err, sizeof err), 0);
    gguf_writer_destroy(w);
    snprintf(cmd, sizeof cmd,
             "%s --arch qwen35 --preset tiny --tokenizer %s --head tied -o %s >/dev/null", g_bin,
             tokp, outp);
    CHECK_EQ(system(cmd), 0);
    gguf_t *g = NULL;
    CHECK_EQ(gguf_open(outp, &g, err, sizeof err), 0);
    if (g) {
        const char *s;
        size_t n;
        int64_t ty;
        CHECK(token_is(g, 5, "tok5") && token_is(g, 7, "<|end|>") && token_is(g, 299, "tok299"));
        CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 7, &ty) == 0 && ty == 3);
        CHECK(gguf_arr_str(g, "tokenizer.ggml.merges", 1, &s, &n) == 0 && n == 4 &&
              !memcmp(s, "to k", 4));
        CHECK_EQ(key_u32(g, "tokenizer.ggml.eos_token_id"), 7);
        CHECK(gguf_get_str(g, "tokenizer.chat_template", &s, &n) == 0 &&
              n == strlen("{{ 'copied template' }}"));
        CHECK(has_shape(g, "token_embd.weight", 128, V, 0));
        CHECK(gguf_find_tensor(g, "output.weight") == NULL);
        gguf_close(g);
    }
    for (int i = 0; i < V; i++)
        free(strs[i]);
}

/* Runs `mkmodel --tiny-all DIR`; 0 on success. */
static int run_mkmodel(const char *bin, const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --tiny-all %s >/dev/null", bin, dir);
    return system(cmd);
}

int main(int argc, char **argv)
{
    const char *b = argc > 1 ? argv[1] : getenv("DELTAD_TEST_BUILD");
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/tools/mkmodel", b ? b : "build/cpu");
    if (access(bin, X_OK) != 0)
        TEST_SKIP("%s not built", bin);
    if (!mkdtemp(dir1) || !mkdtemp(dir2) || run_mkmodel(bin, dir1) || run_mkmodel(bin, dir2)) {
        printf("mkmodel --tiny-all failed\n");
        return 1;
    }
    RUN(deterministic);
    RUN(tensor_counts);
    RUN(hybrid_keys_and_shapes);
    RUN(qwen3_dense);
    RUN(tokenizer);
    RUN(quantised_twins);
    RUN(value_ranges);
    g_bin = bin;
    RUN(copied_tokenizer);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir1, dir2);
    if (system(cmd) != 0)
        printf("warning: could not remove %s %s\n", dir1, dir2);
    TEST_MAIN_END("test_mkmodel");
}
