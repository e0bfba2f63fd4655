/*
 * mkmodel — deterministic generator of synthetic GGUF models for tests and benchmarks.
 *
 *   mkmodel --tiny-all DIR
 *       the standard test set (docs/models.md §9): tiny-{qwen3,qwen35,qwen35moe,qwen3next}.gguf
 *       in F32, tiny-qwen35-{q8_0,q4_0}.gguf, tiny-qwen35moe-q8_0.gguf, and
 *       small-qwen35-{f32,f16,bf16,q4_k,q5_k,q6_k}.gguf (every quantised ne0 a multiple of 256),
 *       and tiny-qwen35-mtp1.gguf (an MTP proof model whose head always agrees: --mtp-agree 1).
 *   mkmodel --arch A [--type T] [--preset tiny|small|1g|moe-1g] [--vocab N] [--seed S]
 *           [--tokenizer TOK.gguf] [--head tied|separate] -o FILE
 *       --tokenizer: every tokenizer.* key of TOK.gguf (tools/tok2gguf's output, e.g. the real
 *       151,936-token Qwen3 vocabulary) instead of the synthetic one; the vocab is its size.
 *       --head tied: no output.weight (the head is token_embd, as in qwen3), which keeps the
 *       1g preset near 1 GB with a 152k vocabulary.
 *       --mtp-agree P: an MTP proof model (see "MTP proof models" below): a trunk that walks a
 *       fixed cycle of tokens and an MTP head that agrees with it on a fraction P of them.
 *
 * Determinism: every tensor row draws from its own splitmix64 stream seeded from
 * hash(tensor name) ^ seed and the row index, and normals come from Marsaglia's polar form of
 * Box–Muller with a logarithm built from IEEE +, *, / only (no libm), so a file is bit-identical
 * across runs, thread counts, generation order and machines. The same tensor name gets the same
 * values in every arch and type, so quantised models can be compared with their F32 twins.
 *
 * Not a converter: the weights are noise with the scales of docs §9.3, and the tokenizer is the
 * 272-token vocab of §9.2 (optionally padded with [PAD<i>] tokens) or a copied one.
 *
 * Threads: generation of one tensor is split by rows across the online CPUs.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/gguf.h"        // defines: GGUF_MAX_DIMS
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/util.h"              // defines: xmalloc, dd_now
#include "kernels/cpu/kq.h"           // defines: kq_quantize_row, kq_row_bytes, kq_type_name

/* ---- deterministic RNG -------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double unif(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Natural logarithm of q in (0, 1) from the exponent bits and an atanh series: only exactly
 * rounded IEEE operations, so the result is the same on every machine (libm's log need not be).
 * Relative error about 1e-15, far below the float precision of the weights. */
static double det_log(double q)
{
    static const double c[10] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,
                                 1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19};
    uint64_t bits;
    memcpy(&bits, &q, 8);
    int e = (int)((bits >> 52) & 0x7ff) - 1022; /* q = m * 2^e, m in [0.5, 1); q is normal */
    bits = (bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull;
    double m;
    memcpy(&m, &bits, 8);
    if (m < 0.70710678118654752) {
        m *= 2.0;
        e -= 1;
    }
    /* ln m = 2 atanh(t) = 2t (c0 + c1 x + ... + c9 x^9), x = t^2 <= 0.03, in Estrin's order
     * (short dependency chains: this is the generator's hot spot). */
    double t = (m - 1.0) / (m + 1.0), x = t * t, x2 = x * x, x4 = x2 * x2, x8 = x4 * x4;
    double p03 = (c[0] + c[1] * x) + (c[2] + c[3] * x) * x2;
    double p47 = (c[4] + c[5] * x) + (c[6] + c[7] * x) * x2;
    double sum = (p03 + p47 * x4) + (c[8] + c[9] * x) * x8;
    return 2.0 * t * sum + e * 0.69314718055994530942;
}

/* z[0..n) = N(0, 1) samples by the polar Box–Muller method; z has room for n + 1 values and
 * q for (n + 1) / 2. Two passes: the rejection loop draws all points first, then the
 * branch-free transform runs over independent points (its divide, log and sqrt latencies
 * overlap instead of chaining; about 20 % faster than one point at a time). */
static void normals(uint64_t *s, int64_t n, double *z, double *q)
{
    int64_t np = (n + 1) / 2;
    for (int64_t p = 0; p < np; p++) {
        double u, v, r;
        do {
            u = 2.0 * unif(s) - 1.0;
            v = 2.0 * unif(s) - 1.0;
            r = u * u + v * v;
        } while (r >= 1.0 || r < 0x1p-1000); /* keep r normal for det_log */
        z[2 * p] = u, z[2 * p + 1] = v, q[p] = r;
    }
    for (int64_t p = 0; p < np; p++) {
        double f = sqrt(-2.0 * det_log(q[p]) / q[p]);
        z[2 * p] *= f;
        z[2 * p + 1] *= f;
    }
}

/* Tensor seeds come from the name, so adding, removing or reordering tensors never changes
 * the values of the others. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ---- configuration ------------------------------------------------------------------------ */

enum arch { A_QWEN3, A_QWEN35, A_QWEN35MOE, A_QWEN3NEXT };
static const char *const arch_names[] = {"qwen3", "qwen35", "qwen35moe", "qwen3next"};

/* Everything that defines a model file. Symbols as in docs/models.md §0; all dims are int64
 * because they end up in ne[]. */
struct cfg {
    enum arch arch;
    int64_t E, n_trunk, n_mtp;               /* width, trunk layers, MTP blocks */
    int64_t H, Hkv, D, R;                    /* attention heads, head dim, rotary dims */
    int64_t Hk, Hv, S, K;                    /* GDN key/value heads, head dim, conv width */
    int64_t n_ff;                            /* dense FFN width */
    int64_t n_exp, n_used, ff_exp, ff_shexp; /* MoE */
    int64_t vocab, ctx;
    float rope_base, eps;
    enum kq_type type; /* type of every quantisable matrix */
    uint64_t seed;
    const char *name;  /* general.name */
    const gguf_t *tok; /* --tokenizer: the tokenizer keys come from here, or NULL */
    bool tied;         /* no output.weight */
    double mtp_agree;  /* --mtp-agree: in [0, 1] for an MTP proof model, < 0 = off */
};

static bool is_moe(const struct cfg *c)
{
    return c->arch == A_QWEN35MOE || c->arch == A_QWEN3NEXT;
}

/* Dims of a preset (tiny, small, 1g) for an arch; false for an unknown preset.
 *   tiny  = docs §9.1 (qwen3: the dense tiny model of §9.3);
 *   small = tiny widened so that every quantised ne0 is a multiple of 256 (K-quants):
 *           E 256, S 64 (Hv·S = 256), D 64 (H·D = 256), n_ff 512, expert widths 256 / 512;
 *   1g    = Qwen3.5-35B-A3B-like layer shapes with 12 trunk layers and a 32k vocab.
 * Arch, type, seed, vocab and name survive; everything else is reset. */
static bool preset_dims(struct cfg *c, const char *preset)
{
    bool q3 = c->arch == A_QWEN3;
    *c = (struct cfg){.arch = c->arch,
                      .type = c->type,
                      .seed = c->seed,
                      .vocab = c->vocab,
                      .name = c->name,
                      .tok = c->tok,
                      .tied = c->tied,
                      .mtp_agree = c->mtp_agree,
                      .K = 4,
                      .eps = 1e-6f,
                      .rope_base = q3 ? 1e6f : 1e7f,
                      .n_mtp = q3 ? 0 : 1,
                      .ctx = 2048,
                      .Hkv = 2};
    if (strcmp(preset, "tiny") == 0) {
        c->E = 128, c->n_trunk = q3 ? 2 : 4, c->H = 4, c->D = q3 ? 32 : 64;
        c->Hk = 2, c->Hv = 4, c->S = 32, c->n_ff = 256;
        c->n_exp = 8, c->n_used = 2, c->ff_exp = 64, c->ff_shexp = 128;
    } else if (strcmp(preset, "small") == 0) {
        c->E = 256, c->n_trunk = q3 ? 2 : 4, c->H = 4, c->D = 64;
        c->Hk = 2, c->Hv = 4, c->S = 64, c->n_ff = 512;
        c->n_exp = 8, c->n_used = 2, c->ff_exp = 256, c->ff_shexp = 512;
    } else if (strcmp(preset, "1g") == 0 || strcmp(preset, "moe-1g") == 0) {
        c->E = 2048, c->n_trunk = 12, c->H = 16, c->D = q3 ? 128 : 256, c->ctx = 262144;
        c->Hk = 16, c->Hv = 32, c->S = 128, c->n_ff = 6144;
        c->n_exp = 32, c->n_used = 8, c->ff_exp = 256, c->ff_shexp = 512; /* moe-1g ~1.2 GB */
    } else if (strcmp(preset, "uneven") == 0) {
        /* small, with expert and shared widths of 768: with K-quant blocks of 256 the tensor-
         * parallel splits are uneven on 2 devices and have an empty slice on 4 */
        c->E = 256, c->n_trunk = q3 ? 2 : 4, c->H = 4, c->D = 64;
        c->Hk = 2, c->Hv = 4, c->S = 64, c->n_ff = 768;
        c->n_exp = 8, c->n_used = 2, c->ff_exp = 768, c->ff_shexp = 768;
    } else {
        return false;
    }
    c->R = q3 ? c->D : c->D / 4;
    if (c->vocab == 0)
        c->vocab = strcmp(preset, "1g") == 0 || strcmp(preset, "moe-1g") == 0 ? 32768 : 272;
    return true;
}

/* ---- tokenizer (docs §9.2) ---------------------------------------------------------------- */

#define N_REAL_TOKENS 269 /* 256 bytes + 8 merges + 5 specials; pads follow */

static const char *const merges[8] = {"Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "Ġ s"};
static const char *const merged[8] = {"Ġt", "he", "Ġthe", "in", "er", "Ġa", "on", "Ġs"};
static const char *const specials[5] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                                        "</think>"};
static const char chatml_template[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* GPT-2 byte-to-unicode: the UTF-8 text (<= 2 bytes + NUL) of the character standing for byte b. */
static void byte_token(int b, char out[3])
{
    int cp = b, n = 0;
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (!printable) {
        for (int x = 0; x < b; x++)
            n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = '\0';
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = '\0';
    }
}

/* Every tokenizer.* key of tok (scalars, strings and arrays of integers or strings). */
static void copy_tokenizer(gguf_writer_t *w, const gguf_t *tok)
{
    for (int64_t i = 0; i < gguf_n_kv(tok); i++) {
        const char *key = gguf_key_name(tok, i), *s;
        size_t n;
        uint64_t len;
        enum gguf_vtype et;
        const void *data;
        int64_t v;
        if (strncmp(key, "tokenizer.", 10) != 0)
            continue;
        enum gguf_vtype t = gguf_kv_type(tok, i);
        if (t == GGUF_T_STRING && gguf_get_str(tok, key, &s, &n) == 0) {
            char *z = xmalloc(n + 1);
            memcpy(z, s, n);
            z[n] = '\0';
            gguf_writer_set_str(w, key, z);
            free(z);
        } else if (t == GGUF_T_BOOL) {
            bool b = false;
            gguf_get_bool(tok, key, &b);
            gguf_writer_set_bool(w, key, b);
        } else if (t != GGUF_T_ARRAY && gguf_get_int(tok, key, &v) == 0) {
            gguf_writer_set_u32(w, key, (uint32_t)v);
        } else if (t == GGUF_T_ARRAY && gguf_get_arr(tok, key, &et, &len, &data) == 0) {
            if (et == GGUF_T_STRING) {
                const char **strs = xmalloc(len * sizeof *strs);
                size_t *lens = xmalloc(len * sizeof *lens);
                for (uint64_t k = 0; k < len; k++)
                    gguf_arr_str(tok, key, k, &strs[k], &lens[k]);
                gguf_writer_set_arr_str(w, key, strs, lens, len);
                free(strs);
                free(lens);
            } else {
                int32_t *vals = xmalloc((len ? len : 1) * sizeof *vals);
                for (uint64_t k = 0; k < len; k++) {
                    gguf_arr_int(tok, key, k, &v);
                    vals[k] = (int32_t)v;
                }
                gguf_writer_set_arr_i32(w, key, vals, len);
                free(vals);
            }
        }
    }
}

/* Tokenizer keys: the §9.2 vocab, padded to c->vocab with unused [PAD<i>] tokens (type 5); or
 * the keys of --tokenizer. */
static void set_tokenizer(gguf_writer_t *w, const struct cfg *c)
{
    if (c->tok) {
        copy_tokenizer(w, c->tok);
        return;
    }
    int64_t V = c->vocab;
    char **tok = xmalloc((size_t)V * sizeof(char *));
    int32_t *type = xmalloc((size_t)V * sizeof(int32_t));
    for (int64_t i = 0; i < V; i++) {
        tok[i] = xmalloc(32);
        type[i] = i < 264 ? 1 : i < N_REAL_TOKENS ? 3 : 5;
        if (i < 256)
            byte_token((int)i, tok[i]);
        else if (i < 264)
            snprintf(tok[i], 32, "%s", merged[i - 256]);
        else if (i < N_REAL_TOKENS)
            snprintf(tok[i], 32, "%s", specials[i - 264]);
        else
            snprintf(tok[i], 32, "[PAD%lld]", (long long)i);
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre",
                        c->arch == A_QWEN35 || c->arch == A_QWEN35MOE ? "qwen35" : "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, NULL,
                            (uint64_t)V);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)V);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 8);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 264);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 266);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 264);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_set_str(w, "tokenizer.chat_template", chatml_template);
    for (int64_t i = 0; i < V; i++)
        free(tok[i]);
    free(tok);
    free(type);
}

/* ---- hyper-parameter keys (docs §2.2, §2.5) ----------------------------------------------- */

/* llama_ftype of a file whose matrices are all of type t. */
static uint32_t file_type(enum kq_type t)
{
    switch (t) {
    case KQ_F16:
        return 1;
    case KQ_Q4_0:
        return 2;
    case KQ_Q8_0:
        return 7;
    case KQ_Q4_K:
        return 14; /* Q4_K_S */
    case KQ_Q5_K:
        return 16; /* Q5_K_S */
    case KQ_Q6_K:
        return 18;
    case KQ_BF16:
        return 32;
    default:
        return 0;
    }
}

/* "{arch}.key" = v as u32 (llama.cpp rejects other integer types for these keys). */
static void set_u32(gguf_writer_t *w, const struct cfg *c, const char *key, int64_t v)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch_names[c->arch], key);
    gguf_writer_set_u32(w, full, (uint32_t)v);
}

static void set_f32(gguf_writer_t *w, const struct cfg *c, const char *key, float v)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch_names[c->arch], key);
    gguf_writer_set_f32(w, full, v);
}

/* Keys of the GDN hybrids: M-RoPE sections, SSM dims, MTP, experts. */
static void set_hybrid_keys(gguf_writer_t *w, const struct cfg *c)
{
    set_u32(w, c, "nextn_predict_layers", c->n_mtp);
    set_u32(w, c, "full_attention_interval", 4);
    set_u32(w, c, "ssm.conv_kernel", c->K);
    set_u32(w, c, "ssm.state_size", c->S);
    set_u32(w, c, "ssm.group_count", c->Hk);
    set_u32(w, c, "ssm.time_step_rank", c->Hv);
    set_u32(w, c, "ssm.inner_size", c->Hv * c->S);
    if (c->arch != A_QWEN3NEXT) {
        int32_t half = (int32_t)(c->R / 2), a = (half + 2) / 3;
        const int32_t sections[4] = {a, a, half - 2 * a, 0}; /* [11,11,10,0] for R = 64 */
        char key[128];
        snprintf(key, sizeof(key), "%s.rope.dimension_sections", arch_names[c->arch]);
        gguf_writer_set_arr_i32(w, key, sections, 4);
    }
    if (is_moe(c)) {
        set_u32(w, c, "expert_count", c->n_exp);
        set_u32(w, c, "expert_used_count", c->n_used);
        set_u32(w, c, "expert_feed_forward_length", c->ff_exp);
        set_u32(w, c, "expert_shared_feed_forward_length", c->ff_shexp);
    }
}

/* All metadata of §9.2. qwen3 gets only the dense keys of §2.5. */
static void set_keys(gguf_writer_t *w, const struct cfg *c)
{
    gguf_writer_set_str(w, "general.architecture", arch_names[c->arch]);
    gguf_writer_set_str(w, "general.name", c->name);
    gguf_writer_set_u32(w, "general.file_type", file_type(c->type));
    if (c->type != KQ_F32 && c->type != KQ_F16 && c->type != KQ_BF16)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    set_u32(w, c, "context_length", c->ctx);
    set_u32(w, c, "embedding_length", c->E);
    set_u32(w, c, "block_count", c->n_trunk + c->n_mtp);
    set_u32(w, c, "feed_forward_length", c->n_ff);
    set_u32(w, c, "attention.head_count", c->H);
    set_u32(w, c, "attention.head_count_kv", c->Hkv);
    set_u32(w, c, "attention.key_length", c->D);
    set_u32(w, c, "attention.value_length", c->D);
    set_u32(w, c, "rope.dimension_count", c->R);
    set_f32(w, c, "rope.freq_base", c->rope_base);
    set_f32(w, c, "attention.layer_norm_rms_epsilon", c->eps);
    if (c->arch != A_QWEN3)
        set_hybrid_keys(w, c);
    set_tokenizer(w, c);
}

/* ---- tensor list (docs §4, §9.3) ---------------------------------------------------------- */

enum init {
    I_EMBED,  /* N(0, 1) */
    I_MATRIX, /* N(0, 1/ne0): ne0 is the number of input features */
    I_NORM,   /* 1 + 0.1 N(0, 1) */
    I_CONV,   /* 0.5 N(0, 1) */
    I_DT,     /* 0.5 N(0, 1) */
    I_SSM_A,  /* -U(1, 16) */
    /* MTP proof models only (struct proof) */
    I_SMALL,    /* N(0, 1/ne0) / 100: a residual writer that leaves the residual stream alone */
    I_HEAD_SIG, /* output.weight: row sigma(x) = token_embd row x */
    I_EH_PROJ,  /* nextn.eh_proj: [A | 0] */
};

struct tspec {
    char name[64];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    enum init init;
    bool keep_f32; /* norms, conv, routers, ssm_a, dt bias and 1-D tensors (docs §4.9) */
};

struct tlist {
    struct tspec *v; /* [n] in file order */
    int n, cap;
};

/* Appends a tensor of shape [ne0, ne1, ne2] (trailing zeros = absent dims). */
static void add(struct tlist *l, enum init init, int64_t ne0, int64_t ne1, int64_t ne2,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add(struct tlist *l, enum init init, int64_t ne0, int64_t ne1, int64_t ne2,
                const char *fmt, ...)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof(*l->v));
    }
    struct tspec *t = &l->v[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    t->ne[0] = ne0, t->ne[1] = ne1 ? ne1 : 1, t->ne[2] = ne2 ? ne2 : 1, t->ne[3] = 1;
    t->init = init;
    t->keep_f32 = t->n_dims == 1 || init == I_NORM || init == I_CONV || init == I_DT ||
                  init == I_SSM_A || strstr(t->name, "ffn_gate_inp") != NULL;
}

/* How a matrix that writes into the residual stream starts: small in an MTP proof model. */
static enum init writer(const struct cfg *c)
{
    return c->mtp_agree >= 0 ? I_SMALL : I_MATRIX;
}

/* Gated full attention (hybrids: attn_q packs query and gate) or plain qwen3 attention. */
static void add_attn(struct tlist *l, const struct cfg *c, int il)
{
    int64_t qout = c->arch == A_QWEN3 ? c->H * c->D : 2 * c->H * c->D;
    add(l, I_MATRIX, c->E, qout, 0, "blk.%d.attn_q.weight", il);
    add(l, I_MATRIX, c->E, c->Hkv * c->D, 0, "blk.%d.attn_k.weight", il);
    add(l, I_MATRIX, c->E, c->Hkv * c->D, 0, "blk.%d.attn_v.weight", il);
    add(l, writer(c), c->H * c->D, c->E, 0, "blk.%d.attn_output.weight", il);
    add(l, I_NORM, c->D, 0, 0, "blk.%d.attn_q_norm.weight", il);
    add(l, I_NORM, c->D, 0, 0, "blk.%d.attn_k_norm.weight", il);
}

/* Gated DeltaNet mixer (docs §4.2). */
static void add_gdn(struct tlist *l, const struct cfg *c, int il)
{
    int64_t C = 2 * c->Hk * c->S + c->Hv * c->S;
    add(l, I_MATRIX, c->E, C, 0, "blk.%d.attn_qkv.weight", il);
    add(l, I_MATRIX, c->E, c->Hv * c->S, 0, "blk.%d.attn_gate.weight", il);
    add(l, I_CONV, c->K, C, 0, "blk.%d.ssm_conv1d.weight", il);
    add(l, I_DT, c->Hv, 0, 0, "blk.%d.ssm_dt.bias", il);
    add(l, I_SSM_A, c->Hv, 0, 0, "blk.%d.ssm_a", il);
    if (c->arch == A_QWEN3NEXT) {
        add(l, I_MATRIX, c->E, 2 * c->Hv, 0, "blk.%d.ssm_ba.weight", il);
    } else {
        add(l, I_MATRIX, c->E, c->Hv, 0, "blk.%d.ssm_beta.weight", il);
        add(l, I_MATRIX, c->E, c->Hv, 0, "blk.%d.ssm_alpha.weight", il);
    }
    add(l, I_NORM, c->S, 0, 0, "blk.%d.ssm_norm.weight", il);
    add(l, writer(c), c->Hv * c->S, c->E, 0, "blk.%d.ssm_out.weight", il);
}

/* Dense SwiGLU FFN or MoE with a shared expert (docs §4.5, §4.6). */
static void add_ffn(struct tlist *l, const struct cfg *c, int il)
{
    if (!is_moe(c)) {
        add(l, I_MATRIX, c->E, c->n_ff, 0, "blk.%d.ffn_gate.weight", il);
        add(l, I_MATRIX, c->E, c->n_ff, 0, "blk.%d.ffn_up.weight", il);
        add(l, writer(c), c->n_ff, c->E, 0, "blk.%d.ffn_down.weight", il);
        return;
    }
    add(l, I_MATRIX, c->E, c->n_exp, 0, "blk.%d.ffn_gate_inp.weight", il);
    add(l, I_MATRIX, c->E, c->ff_exp, c->n_exp, "blk.%d.ffn_gate_exps.weight", il);
    add(l, I_MATRIX, c->E, c->ff_exp, c->n_exp, "blk.%d.ffn_up_exps.weight", il);
    add(l, writer(c), c->ff_exp, c->E, c->n_exp, "blk.%d.ffn_down_exps.weight", il);
    add(l, I_MATRIX, c->E, 0, 0, "blk.%d.ffn_gate_inp_shexp.weight", il);
    add(l, I_MATRIX, c->E, c->ff_shexp, 0, "blk.%d.ffn_gate_shexp.weight", il);
    add(l, I_MATRIX, c->E, c->ff_shexp, 0, "blk.%d.ffn_up_shexp.weight", il);
    add(l, writer(c), c->ff_shexp, c->E, 0, "blk.%d.ffn_down_shexp.weight", il);
}

/* Block il: mixer (attention every 4th trunk layer and in the MTP block, else GDN), FFN, and
 * for the MTP block the nextn.* tensors of §4.7. */
static void add_layer(struct tlist *l, const struct cfg *c, int il)
{
    bool mtp = il >= c->n_trunk;
    bool attn = c->arch == A_QWEN3 || mtp || (il + 1) % 4 == 0;
    add(l, I_NORM, c->E, 0, 0, "blk.%d.attn_norm.weight", il);
    if (attn)
        add_attn(l, c, il);
    else
        add_gdn(l, c, il);
    add(l, I_NORM, c->E, 0, 0,
        c->arch == A_QWEN3 ? "blk.%d.ffn_norm.weight" : "blk.%d.post_attention_norm.weight", il);
    add_ffn(l, c, il);
    if (mtp) {
        add(l, c->mtp_agree >= 0 ? I_EH_PROJ : I_MATRIX, 2 * c->E, c->E, 0,
            "blk.%d.nextn.eh_proj.weight", il);
        add(l, I_NORM, c->E, 0, 0, "blk.%d.nextn.enorm.weight", il);
        add(l, I_NORM, c->E, 0, 0, "blk.%d.nextn.hnorm.weight", il);
        add(l, I_NORM, c->E, 0, 0, "blk.%d.nextn.shared_head_norm.weight", il);
    }
}

/* Every tensor of the model in file order: globals, then blocks 0 .. n_trunk + n_mtp - 1.
 * qwen3 ties the head to token_embd, so it has no output.weight. */
static void build_list(struct tlist *l, const struct cfg *c)
{
    add(l, I_EMBED, c->E, c->vocab, 0, "token_embd.weight");
    add(l, I_NORM, c->E, 0, 0, "output_norm.weight");
    if (c->arch != A_QWEN3 && !c->tied)
        add(l, c->mtp_agree >= 0 ? I_HEAD_SIG : I_MATRIX, c->E, c->vocab, 0, "output.weight");
    for (int il = 0; il < c->n_trunk + c->n_mtp; il++)
        add_layer(l, c, il);
}

/* ---- tensor generation -------------------------------------------------------------------- */

/* ---- MTP proof models (--mtp-agree P) ----------------------------------------------------
 *
 * A model whose speculation outcome is known by construction, to measure what MTP drafts buy
 * when they are accepted (a random model's MTP head never agrees with its trunk). Every matrix
 * that writes into the residual stream is small (I_SMALL), so the trunk's last hidden row stays
 * close to the embedding of the token fed; the head's row sigma(x) is token_embd row x, so the
 * trunk predicts sigma(x) after x. sigma walks one cycle through the proof tokens ('\n', the
 * merges, then printable ASCII: at most E / 2 of them, so that their embeddings are far from
 * dependent) in a shuffled order and fixes every other token, so greedy decoding after a prompt
 * that ends in a proof token walks the cycle.
 *
 * The MTP block sees c = [enorm(e_y) | hnorm(h)], and eh_proj = [A | 0] ignores h. A maps
 * u_y = enorm(e_y) to u_y for the agreeing proof tokens (the MTP head then predicts sigma(y),
 * which is the trunk's next token) and to u_sigma(y) for the others, a fraction 1 - P (it
 * predicts sigma(sigma(y)), which verification rejects). A is exact on the proof tokens:
 * A = I + (T - U) (U^T U)^{-1} U^T with U = [u_y] (E x L) and T the targets. A chained draft
 * feeds the previous draft token, so each draft is right when its input is an agreeing token:
 * the head agrees on a fraction P of the cycle's positions. */

#define PROOF_MAX 104 /* '\n', 8 merges, 95 printable ASCII bytes */

struct proof {
    int64_t L;                /* tokens in the cycle */
    int32_t tok[PROOF_MAX];   /* cycle order: sigma(tok[i]) = tok[(i + 1) % L] */
    bool agree[PROOF_MAX];    /* the MTP head agrees after tok[i] */
    int64_t *inv;             /* [vocab] sigma^-1 */
    float *A;                 /* [E][E] row-major */
    const struct tspec *embd; /* token_embd.weight, for output.weight's rows */
    uint64_t embd_seed;
};

static void gen_row(const struct tspec *t, uint64_t tseed, int64_t row, float *x, double *z,
                    double *q, const struct proof *pf);

/* Fisher-Yates shuffle of v[0 .. n) from stream s. */
static void shuffle_i32(int32_t *v, int64_t n, uint64_t *s)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(s) % (uint64_t)(i + 1));
        int32_t t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

/* Row 0 of tensor `name` of list l as floats (x: [ne0]). */
static void gen_named_row(const struct tlist *l, uint64_t seed, const char *name, int64_t row,
                          float *x)
{
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].name, name) != 0)
            continue;
        int64_t n = l->v[i].ne[0];
        double *z = xmalloc((size_t)(n + 1) * sizeof(double));
        double *q = xmalloc((size_t)(n + 2) / 2 * sizeof(double) + sizeof(double));
        gen_row(&l->v[i], hash_str(name) ^ seed, row, x, z, q, NULL);
        free(z);
        free(q);
        return;
    }
    ASSERT(!"tensor not in the list");
}

/* Solve G X = B in place (B: [L][n] row-major) for the symmetric positive definite G [L][L]
 * (destroyed: its Cholesky factor). */
static void cholesky_solve(double *G, int64_t L, double *B, int64_t n)
{
    for (int64_t j = 0; j < L; j++) {
        for (int64_t k = 0; k < j; k++)
            for (int64_t i = j; i < L; i++)
                G[i * L + j] -= G[i * L + k] * G[j * L + k];
        ASSERT(G[j * L + j] > 0);
        double d = sqrt(G[j * L + j]);
        for (int64_t i = j; i < L; i++)
            G[i * L + j] /= d;
    }
    for (int64_t c = 0; c < n; c++) {
        for (int64_t i = 0; i < L; i++) { /* L y = b */
            double v = B[i * n + c];
            for (int64_t k = 0; k < i; k++)
                v -= G[i * L + k] * B[k * n + c];
            B[i * n + c] = v / G[i * L + i];
        }
        for (int64_t i = L - 1; i >= 0; i--) { /* L^T x = y */
            double v = B[i * n + c];
            for (int64_t k = i + 1; k < L; k++)
                v -= G[k * L + i] * B[k * n + c];
            B[i * n + c] = v / G[i * L + i];
        }
    }
}

/* u = enorm(e_tok) as the engine computes it: e / sqrt(mean(e^2) + eps) * g. */
static void proof_u(const struct tlist *l, const struct cfg *c, const float *g, int32_t tok,
                    float *e, double *u)
{
    gen_named_row(l, c->seed, "token_embd.weight", tok, e);
    double ss = 0;
    for (int64_t i = 0; i < c->E; i++)
        ss += (double)e[i] * e[i];
    double r = 1.0 / sqrt(ss / (double)c->E + c->eps);
    for (int64_t i = 0; i < c->E; i++)
        u[i] = e[i] * r * g[i];
}

/* The cycle, sigma^-1 and A of the model of c (list l); see the section comment. */
static void proof_build(struct proof *pf, const struct cfg *c, const struct tlist *l)
{
    const int64_t E = c->E;
    int32_t all[PROOF_MAX];
    int64_t L = 0;
    all[L++] = 10;
    for (int32_t t = 256; t < 264; t++)
        all[L++] = t;
    for (int32_t t = 32; t < 127; t++)
        all[L++] = t;
    uint64_t s = c->seed ^ hash_str("mtp-proof");
    shuffle_i32(all + 1, L - 1, &s); /* '\n' stays in: every chat prompt ends with it */
    pf->L = L < E / 2 ? L : E / 2;
    memcpy(pf->tok, all, sizeof all);
    int32_t idx[PROOF_MAX];
    for (int64_t i = 0; i < pf->L; i++)
        idx[i] = (int32_t)i;
    shuffle_i32(idx, pf->L, &s);
    int64_t n_agree = (int64_t)floor(c->mtp_agree * (double)pf->L + 0.5);
    for (int64_t i = 0; i < pf->L; i++)
        pf->agree[idx[i]] = i < n_agree;
    pf->inv = xmalloc((size_t)c->vocab * sizeof *pf->inv);
    for (int64_t v = 0; v < c->vocab; v++)
        pf->inv[v] = v;
    for (int64_t i = 0; i < pf->L; i++)
        pf->inv[pf->tok[(i + 1) % pf->L]] = pf->tok[i];
    /* U [L][E], targets minus U for the disagreeing tokens, G = U U^T, M = G^-1 U */
    float *g = xmalloc((size_t)E * sizeof *g), *e = xmalloc((size_t)E * sizeof *e);
    char name[64];
    snprintf(name, sizeof name, "blk.%lld.nextn.enorm.weight", (long long)c->n_trunk);
    gen_named_row(l, c->seed, name, 0, g);
    double *U = xmalloc((size_t)(pf->L * E) * sizeof *U);
    for (int64_t i = 0; i < pf->L; i++)
        proof_u(l, c, g, pf->tok[i], e, U + i * E);
    double *G = xmalloc((size_t)(pf->L * pf->L) * sizeof *G);
    for (int64_t i = 0; i < pf->L; i++)
        for (int64_t j = 0; j < pf->L; j++) {
            double d = 0;
            for (int64_t k = 0; k < E; k++)
                d += U[i * E + k] * U[j * E + k];
            G[i * pf->L + j] = d;
        }
    double *M = xmalloc((size_t)(pf->L * E) * sizeof *M);
    memcpy(M, U, (size_t)(pf->L * E) * sizeof *M);
    cholesky_solve(G, pf->L, M, E);
    pf->A = xmalloc((size_t)(E * E) * sizeof *pf->A);
    double *row = xmalloc((size_t)E * sizeof *row);
    for (int64_t r = 0; r < E; r++) {
        for (int64_t k = 0; k < E; k++)
            row[k] = k == r;
        for (int64_t i = 0; i < pf->L; i++) {
            if (pf->agree[i])
                continue;
            double d = U[((i + 1) % pf->L) * E + r] - U[i * E + r]; /* (T - U)[r][i] */
            for (int64_t k = 0; k < E; k++)
                row[k] += d * M[i * E + k];
        }
        for (int64_t k = 0; k < E; k++)
            pf->A[r * E + k] = (float)row[k];
    }
    free(row);
    free(M);
    free(G);
    free(U);
    free(e);
    free(g);
}

static void proof_free(struct proof *pf)
{
    free(pf->inv);
    free(pf->A);
}

/* One row of ne0 values from the row's own stream, scaled for the tensor's role (pf: the proof
 * model's data for I_HEAD_SIG and I_EH_PROJ, else unused). z: [ne0 + 1] and
 * q: [(ne0 + 1) / 2] scratch. */
static void gen_row(const struct tspec *t, uint64_t tseed, int64_t row, float *x, double *z,
                    double *q, const struct proof *pf)
{
    int64_t n = t->ne[0];
    if (t->init == I_HEAD_SIG) {
        gen_row(pf->embd, pf->embd_seed, pf->inv[row], x, z, q, NULL);
        return;
    }
    if (t->init == I_EH_PROJ) {
        memcpy(x, pf->A + row * (n / 2), (size_t)(n / 2) * sizeof(float));
        memset(x + n / 2, 0, (size_t)(n / 2) * sizeof(float));
        return;
    }
    uint64_t s = tseed ^ ((uint64_t)row * 0xd1342543de82ef95ull);
    splitmix64(&s);
    if (t->init == I_SSM_A) {
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)-(1.0 + 15.0 * unif(&s));
        return;
    }
    normals(&s, n, z, q);
    double mul = t->init == I_MATRIX  ? 1.0 / sqrt((double)n)
                 : t->init == I_SMALL ? 0.01 / sqrt((double)n)
                 : t->init == I_NORM  ? 0.1
                 : t->init == I_EMBED ? 1.0
                                      : 0.5; /* conv taps, dt bias */
    double add = t->init == I_NORM ? 1.0 : 0.0;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(add + mul * z[i]);
}

/* A slice of one tensor's rows for one thread. */
struct gen_job {
    const struct tspec *t;
    enum kq_type type;
    uint64_t tseed;
    int64_t r0, r1;   /* rows [r0, r1) */
    size_t row_bytes; /* encoded row size */
    uint8_t *out;     /* [rows * row_bytes] */
    const struct proof *pf;
};

/* Thread body: generate, then encode, each row of the slice (per-thread scratch). */
static void *gen_rows(void *arg)
{
    struct gen_job *j = arg;
    int64_t n = j->t->ne[0];
    float *x = xmalloc((size_t)n * sizeof(float));
    double *z = xmalloc((size_t)(n + 1) * sizeof(double));
    double *q = xmalloc((size_t)(n + 1) / 2 * sizeof(double) + sizeof(double));
    for (int64_t r = j->r0; r < j->r1; r++) {
        gen_row(j->t, j->tseed, r, x, z, q, j->pf);
        kq_quantize_row(j->type, x, j->out + (size_t)r * j->row_bytes, n);
    }
    free(x);
    free(z);
    free(q);
    return NULL;
}

static int n_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

/* Generates tensor t encoded as `type` into a new buffer of *size bytes (caller frees).
 * Rows are split evenly over the CPUs for tensors of 64k elements or more; the calling
 * thread takes the first slice. A failed pthread_create just runs that slice inline. */
static uint8_t *gen_tensor(const struct tspec *t, enum kq_type type, uint64_t seed,
                           const struct proof *pf, size_t *size)
{
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    struct gen_job base = {
        .t = t, .type = type, .row_bytes = kq_row_bytes(type, t->ne[0]), .pf = pf};
    base.tseed = hash_str(t->name) ^ seed;
    *size = base.row_bytes * (size_t)rows;
    base.out = xmalloc(*size ? *size : 1);
    int nt = rows * t->ne[0] >= (1 << 16) ? n_threads() : 1;
    pthread_t tid[16];
    struct gen_job jobs[16];
    for (int k = 0; k < nt; k++) {
        jobs[k] = base;
        jobs[k].r0 = rows * k / nt;
        jobs[k].r1 = rows * (k + 1) / nt;
        if (k > 0 && pthread_create(&tid[k], NULL, gen_rows, &jobs[k]) != 0)
            gen_rows(&jobs[k]), tid[k] = 0;
    }
    gen_rows(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (tid[k])
            pthread_join(tid[k], NULL);
    }
    return base.out;
}

/* ---- model files -------------------------------------------------------------------------- */

/* Writes the model of c to path; prints one summary line with the weight bytes. Tensors are
 * generated one at a time, so peak memory is the file size plus one tensor. */
static int write_model(const struct cfg *c, const char *path)
{
    double t0 = dd_now();
    struct tlist l = {0};
    build_list(&l, c);
    gguf_writer_t *w = gguf_writer_create(0);
    set_keys(w, c);
    struct proof pf = {0};
    if (c->mtp_agree >= 0) {
        proof_build(&pf, c, &l);
        pf.embd = &l.v[0]; /* token_embd.weight comes first */
        pf.embd_seed = hash_str(pf.embd->name) ^ c->seed;
    }
    int rc = 0;
    uint64_t total = 0;
    for (int i = 0; i < l.n && rc == 0; i++) {
        const struct tspec *t = &l.v[i];
        enum kq_type type = t->keep_f32 ? KQ_F32 : c->type;
        if (t->ne[0] % kq_block_elems(type) != 0) {
            fprintf(stderr, "mkmodel: %s: ne0 = %lld is not a multiple of %d, the block of %s\n",
                    t->name, (long long)t->ne[0], kq_block_elems(type), kq_type_name(type));
            rc = 1;
            break;
        }
        size_t size;
        uint8_t *data = gen_tensor(t, type, c->seed, &pf, &size);
        rc = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, type, data, size) ? 1 : 0;
        total += size;
        free(data);
    }
    char err[512];
    if (rc == 0 && gguf_writer_write_file(w, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel: %s\n", err);
        rc = 1;
    }
    if (rc == 0)
        printf("%s: %s %s, %d tensors, %llu weight bytes, %.2f s\n", path, arch_names[c->arch],
               kq_type_name(c->type), l.n, (unsigned long long)total, dd_now() - t0);
    if (rc == 0 && c->mtp_agree >= 0) {
        int64_t n = 0;
        for (int64_t i = 0; i < pf.L; i++)
            n += pf.agree[i];
        printf("MTP proof model: a cycle of %lld tokens, the MTP head agrees after %lld of them"
               " (%.1f %%)\n",
               (long long)pf.L, (long long)n, 100.0 * (double)n / (double)pf.L);
    }
    proof_free(&pf);
    gguf_writer_destroy(w);
    free(l.v);
    return rc;
}

static bool parse_arch(const char *s, enum arch *a)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, arch_names[i]) == 0) {
            *a = (enum arch)i;
            return true;
        }
    }
    return false;
}

/* A fraction in [0, 1]. */
static bool parse_unit(const char *s, double *v)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || !(x >= 0.0 && x <= 1.0))
        return false;
    *v = x;
    return true;
}

static bool parse_type(const char *s, enum kq_type *t)
{
    static const enum kq_type types[] = {KQ_F32,  KQ_F16,  KQ_BF16, KQ_Q8_0,
                                         KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcasecmp(s, kq_type_name(types[i])) == 0) {
            *t = types[i];
            return true;
        }
    }
    return false;
}

/* One model of the standard set: DIR/<prefix>-<arch><suffix>.gguf (agree: --mtp-agree, or
 * < 0). */
static int tiny_one(const char *dir, const char *preset, enum arch a, enum kq_type type,
                    const char *prefix, const char *suffix, double agree)
{
    char path[4096], name[128];
    snprintf(name, sizeof(name), "%s-%s%s", prefix, arch_names[a], suffix);
    snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
    struct cfg c = {.arch = a, .type = type, .name = name, .mtp_agree = agree};
    preset_dims(&c, preset);
    return write_model(&c, path);
}

/* The standard test set (see the file comment). */
static int tiny_all(const char *dir)
{
    static const enum kq_type small_types[] = {KQ_F32, KQ_F16, KQ_BF16, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
    mkdir(dir, 0755);
    int rc = 0;
    for (int a = 0; a < 4; a++)
        rc |= tiny_one(dir, "tiny", (enum arch)a, KQ_F32, "tiny", "", -1);
    rc |= tiny_one(dir, "tiny", A_QWEN35, KQ_Q8_0, "tiny", "-q8_0", -1);
    rc |= tiny_one(dir, "tiny", A_QWEN35, KQ_Q4_0, "tiny", "-q4_0", -1);
    rc |= tiny_one(dir, "tiny", A_QWEN35MOE, KQ_Q8_0, "tiny", "-q8_0", -1);
    rc |= tiny_one(dir, "uneven", A_QWEN35MOE, KQ_Q4_K, "uneven", "-q4_k", -1);
    rc |= tiny_one(dir, "tiny", A_QWEN35, KQ_F32, "tiny", "-mtp1", 1.0); /* MTP proof model */
    for (size_t i = 0; i < sizeof(small_types) / sizeof(small_types[0]); i++) {
        char suffix[16];
        snprintf(suffix, sizeof(suffix), "-%s", kq_type_name(small_types[i]));
        for (char *p = suffix; *p; p++)
            *p = (char)(*p == 'K' ? 'k' : *p); /* "q4_K" → "q4_k" in file names */
        rc |= tiny_one(dir, "small", A_QWEN35, small_types[i], "small", suffix, -1);
    }
    return rc;
}

static int usage(void)
{
    fprintf(
        stderr,
        "usage: mkmodel --tiny-all DIR\n"
        "       mkmodel --arch qwen3|qwen35|qwen35moe|qwen3next [--type T] "
        "[--preset tiny|small|uneven|1g|moe-1g]\n"
        "               [--vocab N] [--seed S] [--tokenizer TOK.gguf] [--head tied|separate]"
        " -o FILE\n"
        "  T: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k (default f32; q8_0 for 1g presets)\n"
        "  1g: qwen35 E=2048, 12+1 layers, vocab 32768; moe-1g: qwen35moe, 64 experts\n"
        "  --tokenizer: the tokenizer (and vocab size) of a GGUF, e.g. tok2gguf's output\n"
        "  --head tied: no output.weight (the head is token_embd)\n"
        "  --mtp-agree P: an MTP proof model: greedy decoding walks a cycle of tokens and\n"
        "               the MTP head agrees with the trunk after a fraction P (0..1) of them\n");
    return 2;
}

/* Options of the general form; returns 0, or 2 after printing usage. The 1g presets imply
 * their arch and default to Q8_0; the others need --arch and default to F32. */
static int parse_opts(int argc, char **argv, struct cfg *c, const char **preset, const char **out,
                      const char **tok)
{
    bool have_arch = false, have_type = false;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (strcmp(argv[i], "--arch") == 0 && parse_arch(v, &c->arch))
            have_arch = true;
        else if (strcmp(argv[i], "--type") == 0 && parse_type(v, &c->type))
            have_type = true;
        else if (strcmp(argv[i], "--preset") == 0)
            *preset = v;
        else if (strcmp(argv[i], "--vocab") == 0 && atoll(v) >= N_REAL_TOKENS)
            c->vocab = atoll(v);
        else if (strcmp(argv[i], "--seed") == 0)
            c->seed = strtoull(v, NULL, 0);
        else if (strcmp(argv[i], "-o") == 0)
            *out = v;
        else if (strcmp(argv[i], "--tokenizer") == 0)
            *tok = v;
        else if (strcmp(argv[i], "--mtp-agree") == 0 && parse_unit(v, &c->mtp_agree))
            continue;
        else if (strcmp(argv[i], "--head") == 0 &&
                 (strcmp(v, "tied") == 0 || strcmp(v, "separate") == 0))
            c->tied = strcmp(v, "tied") == 0;
        else
            return usage();
    }
    bool big = strcmp(*preset, "1g") == 0 || strcmp(*preset, "moe-1g") == 0;
    if (!have_arch && big)
        c->arch = strcmp(*preset, "1g") == 0 ? A_QWEN35 : A_QWEN35MOE;
    else if (!have_arch)
        return usage();
    if (!have_type)
        c->type = big ? KQ_Q8_0 : KQ_F32;
    if (c->mtp_agree >= 0 && (c->arch == A_QWEN3 || c->tied)) {
        fprintf(stderr, "mkmodel: --mtp-agree needs an arch with an MTP block (qwen35, "
                        "qwen35moe, qwen3next) and a separate head (not --head tied)\n");
        return 2;
    }
    return *out ? 0 : usage();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--tiny-all") == 0)
        return tiny_all(argv[2]) ? 1 : 0;
    struct cfg c = {.name = "synthetic", .mtp_agree = -1};
    const char *preset = "tiny", *out = NULL, *tok_path = NULL;
    if (parse_opts(argc, argv, &c, &preset, &out, &tok_path))
        return 2;
    gguf_t *tok = NULL;
    if (tok_path) {
        char err[512];
        uint64_t n = 0;
        enum gguf_vtype et;
        const void *data;
        if (gguf_open(tok_path, &tok, err, sizeof err) != 0 ||
            gguf_get_arr(tok, "tokenizer.ggml.tokens", &et, &n, &data) != 0 || n < 16) {
            fprintf(stderr, "mkmodel: %s: %s\n", tok_path, tok ? "no tokenizer.ggml.tokens" : err);
            gguf_close(tok);
            return 2;
        }
        c.tok = tok;
        c.vocab = (int64_t)n;
    }
    if (!preset_dims(&c, preset)) {
        fprintf(stderr, "mkmodel: unknown preset '%s'\n", preset);
        return 2;
    }
    double t0 = dd_now();
    int rc = write_model(&c, out);
    if (rc == 0)
        printf("total %.2f s\n", dd_now() - t0);
    gguf_close(tok);
    return rc;
}
