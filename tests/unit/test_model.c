/*
 * test_model — model_load validation: a copy of a good tiny model loads; each single defect
 * (missing or mistyped key, inconsistent hyper-parameter, missing / extra / misshapen tensor,
 * unsupported arch, tokenizer size mismatch) is refused with a message naming the key or the
 * tensor. Also checks the derived layer pattern and hyper-parameters of every tiny arch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/gguf.h"        // defines: gguf_open, gguf_get_*, gguf_arr_*
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/model/model.h"       // defines: model_load
#include "test.h"                     // defines: TEST, RUN, CHECK*, TEST_MAIN_END
#include "testutil.h"                 // defines: testutil_*

static char models[512];

/* One defect to inject while copying a model. */
struct mut {
    const char *drop_key, *key_as_i32, *set_u32_key, *arch, *drop_tensor, *extra_tensor,
        *shrink_tensor;
    uint32_t u32;
    int drop_last_token;
};

static void copy_array(gguf_writer_t *w, const gguf_t *g, const char *key, const struct mut *mu)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    gguf_get_arr(g, key, &et, &n, &data);
    if (mu->drop_last_token && strcmp(key, "tokenizer.ggml.tokens") == 0)
        n--;
    if (mu->drop_last_token && strcmp(key, "tokenizer.ggml.token_type") == 0)
        n--;
    if (et == GGUF_T_STRING) {
        const char **s = malloc(n * sizeof *s);
        size_t *len = malloc(n * sizeof *len);
        for (uint64_t i = 0; i < n; i++)
            gguf_arr_str(g, key, i, &s[i], &len[i]);
        gguf_writer_set_arr_str(w, key, s, len, n);
        free(s);
        free(len);
    } else if (et == GGUF_T_F32) {
        float *v = malloc(n * sizeof *v);
        for (uint64_t i = 0; i < n; i++)
            gguf_arr_f32(g, key, i, &v[i]);
        gguf_writer_set_arr_f32(w, key, v, n);
        free(v);
    } else {
        int32_t *v = malloc(n * sizeof *v);
        for (uint64_t i = 0; i < n; i++) {
            int64_t x;
            gguf_arr_int(g, key, i, &x);
            v[i] = (int32_t)x;
        }
        gguf_writer_set_arr_i32(w, key, v, n);
        free(v);
    }
}

static void copy_kv(gguf_writer_t *w, const gguf_t *g, int64_t i, const struct mut *mu)
{
    const char *key = gguf_key_name(g, i);
    const char *s;
    size_t len;
    uint32_t u;
    float f;
    bool b;
    int32_t i32;
    if ((mu->drop_key && strcmp(key, mu->drop_key) == 0) || strcmp(key, "general.alignment") == 0)
        return;
    switch (gguf_kv_type(g, i)) {
    case GGUF_T_U32:
        gguf_get_u32(g, key, &u);
        if (mu->set_u32_key && strcmp(key, mu->set_u32_key) == 0)
            u = mu->u32;
        if (mu->key_as_i32 && strcmp(key, mu->key_as_i32) == 0)
            gguf_writer_set_i32(w, key, (int32_t)u);
        else
            gguf_writer_set_u32(w, key, u);
        break;
    case GGUF_T_I32:
        gguf_get_i32(g, key, &i32);
        gguf_writer_set_i32(w, key, i32);
        break;
    case GGUF_T_F32:
        gguf_get_f32(g, key, &f);
        gguf_writer_set_f32(w, key, f);
        break;
    case GGUF_T_BOOL:
        gguf_get_bool(g, key, &b);
        gguf_writer_set_bool(w, key, b);
        break;
    case GGUF_T_STRING: {
        gguf_get_str(g, key, &s, &len);
        char *z = strndup(s, len);
        if (mu->arch && strcmp(key, "general.architecture") == 0)
            gguf_writer_set_str(w, key, mu->arch);
        else
            gguf_writer_set_str(w, key, z);
        free(z);
        break;
    }
    case GGUF_T_ARRAY:
        copy_array(w, g, key, mu);
        break;
    default:
        CHECK(!"unexpected metadata type in the tiny model");
    }
}

static void copy_tensors(gguf_writer_t *w, const gguf_t *g, const struct mut *mu)
{
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (mu->drop_tensor && strcmp(t->name, mu->drop_tensor) == 0)
            continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        size_t size = t->size;
        if (mu->shrink_tensor && strcmp(t->name, mu->shrink_tensor) == 0) {
            ne[0] /= 2; /* an F32 vector: half of it */
            size /= 2;
        }
        gguf_writer_add_tensor(w, t->name, t->n_dims, ne, t->type, t->data, size);
        if (mu->extra_tensor && i == 0)
            gguf_writer_add_tensor(w, mu->extra_tensor, t->n_dims, ne, t->type, t->data, size);
    }
}

/* Copy models/<src> with one defect into a temp file and try to load it. Returns model_load's
 * code; err receives its message. */
static int load_mutated(const char *src, const struct mut *mu, char *err, size_t errlen)
{
    char in[600], out[] = "/tmp/deltad-test-model-XXXXXX";
    snprintf(in, sizeof in, "%s/%s", models, src);
    gguf_t *g;
    if (gguf_open(in, &g, err, errlen) != 0)
        return -100;
    gguf_writer_t *w = gguf_writer_create(gguf_alignment(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        copy_kv(w, g, i, mu);
    copy_tensors(w, g, mu);
    int fd = mkstemp(out);
    close(fd);
    int rc = gguf_writer_write_file(w, out, err, errlen);
    gguf_writer_destroy(w);
    gguf_close(g);
    struct model *m = NULL;
    if (rc == 0)
        rc = model_load(out, &m, err, errlen);
    model_free(m);
    unlink(out);
    return rc;
}

static void expect_fail(const char *src, const struct mut *mu, const char *needle)
{
    char err[1024] = "";
    int rc = load_mutated(src, mu, err, sizeof err);
    printf("  %-40s -> %s\n", needle, err);
    CHECK(rc < 0 && rc != -100);
    CHECK(strstr(err, needle) != NULL);
}

TEST(copy_loads)
{
    char err[1024] = "";
    struct mut none = {0};
    CHECK_EQ(load_mutated("tiny-qwen35.gguf", &none, err, sizeof err), 0);
    CHECK_EQ(load_mutated("tiny-qwen3next.gguf", &none, err, sizeof err), 0);
}

TEST(defects_rejected)
{
    expect_fail("tiny-qwen35.gguf", &(struct mut){.drop_key = "qwen35.ssm.state_size"},
                "qwen35.ssm.state_size");
    expect_fail("tiny-qwen35.gguf", &(struct mut){.key_as_i32 = "qwen35.block_count"},
                "wrong type");
    expect_fail("tiny-qwen35.gguf",
                &(struct mut){.set_u32_key = "qwen35.ssm.inner_size", .u32 = 100}, "inner_size");
    expect_fail("tiny-qwen35.gguf",
                &(struct mut){.set_u32_key = "qwen35.attention.head_count_kv", .u32 = 3},
                "head_count_kv");
    expect_fail("tiny-qwen35.gguf", &(struct mut){.arch = "llama4"}, "unsupported architecture");
    expect_fail("tiny-qwen35.gguf", &(struct mut){.drop_tensor = "blk.1.ssm_a"},
                "missing tensor 'blk.1.ssm_a'");
    expect_fail("tiny-qwen35moe.gguf", &(struct mut){.drop_tensor = "blk.4.nextn.eh_proj.weight"},
                "blk.4.nextn.eh_proj.weight");
    expect_fail("tiny-qwen35.gguf", &(struct mut){.extra_tensor = "blk.0.surprise.weight"},
                "wrong number of tensors");
    expect_fail("tiny-qwen35.gguf", &(struct mut){.shrink_tensor = "blk.0.attn_norm.weight"},
                "blk.0.attn_norm.weight");
    expect_fail("tiny-qwen3next.gguf", &(struct mut){.drop_last_token = 1}, "token");
}

TEST(missing_file)
{
    char err[512] = "";
    struct model *m = NULL;
    CHECK(model_load("/nonexistent/model.gguf", &m, err, sizeof err) < 0);
    CHECK(strstr(err, "/nonexistent/model.gguf") != NULL);
    CHECK(m == NULL);
}

TEST(hparams)
{
    static const struct {
        const char *file;
        enum model_arch arch;
        int64_t n_layer, n_nextn, n_gdn, n_attn;
        bool kmap_mod;
    } want[] = {
        {"tiny-qwen3.gguf", ARCH_QWEN3, 2, 0, 0, 2, false},
        {"tiny-qwen35.gguf", ARCH_QWEN35, 4, 1, 3, 1, true},
        {"tiny-qwen35moe.gguf", ARCH_QWEN35MOE, 4, 1, 3, 1, true},
        {"tiny-qwen3next.gguf", ARCH_QWEN3NEXT, 4, 1, 3, 1, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[600], err[512];
        snprintf(path, sizeof path, "%s/%s", models, want[i].file);
        struct model *m = NULL;
        CHECK_EQ(model_load(path, &m, err, sizeof err), 0);
        if (!m)
            continue;
        CHECK_EQ(m->hp.arch, want[i].arch);
        CHECK_EQ(m->hp.n_layer, want[i].n_layer);
        CHECK_EQ(m->hp.n_nextn, want[i].n_nextn);
        CHECK_EQ(model_n_gdn_layers(m), want[i].n_gdn);
        CHECK_EQ(model_n_attn_layers(m), want[i].n_attn);
        CHECK_EQ(m->hp.n_vocab, 272);
        if (want[i].arch != ARCH_QWEN3) {
            CHECK_EQ(m->hp.kmap_mod, want[i].kmap_mod);
            CHECK(m->layers[3].recurrent == false && m->layers[2].recurrent == true);
            CHECK_EQ(m->hp.conv_ch, 256);
        } else {
            CHECK(m->output.data == m->tok_embd.data); /* tied head */
        }
        model_free(m);
    }
}

int main(int argc, char **argv)
{
    if (!testutil_models_dir(argc, argv, models, sizeof models))
        return TESTUTIL_SKIP_RC;
    RUN(copy_loads);
    RUN(defects_rejected);
    RUN(missing_file);
    RUN(hparams);
    TEST_MAIN_END("test_model");
}
