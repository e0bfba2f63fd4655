/*
 * model — hyper-parameters, layer kinds and weight binding of the supported archs: qwen3
 * (dense), qwen35 (GDN hybrid, dense FFN), qwen35moe and qwen3next (GDN hybrid, MoE with a
 * shared expert), including the MTP ("nextn") block. Facts: docs/models.md sections 2 and 4.
 *
 * Weights stay in the GGUF mapping: a struct model_w is a view (data pointer into the mmap),
 * never a copy (a device's shard may own copies: split tensors, and tensors in its kernels'
 * layout, shard.h). Loading validates every hyper-parameter and every tensor's presence, type and
 * shape; errors name the file and the key or tensor.
 *
 * Ownership: model_load returns a model owning its gguf_t and tok_t; model_free releases them.
 * Thread safety: immutable after load.
 */
#ifndef DELTAD_MODEL_H
#define DELTAD_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"           // defines: gguf_t
#include "kernels/cpu/kq.h" // defines: enum kq_type
#include "tok.h"            // defines: tok_t

enum model_arch { ARCH_QWEN3 = 0, ARCH_QWEN35, ARCH_QWEN35MOE, ARCH_QWEN3NEXT, ARCH_COUNT };

/* A weight view. ne in GGUF order: ne[0] = input features (contiguous), ne[1] = outputs,
 * ne[2] = experts. data == NULL means the tensor is absent. */
struct model_w {
    const void *data;
    enum kq_type type;
    int64_t ne[4];
    size_t nb1; /* bytes per row (ne[0] elements) */
    size_t nb2; /* bytes per ne[2] slice (one expert) */
};

struct model_hparams {
    enum model_arch arch;
    int64_t n_embd;      /* E */
    int64_t n_layer;     /* trunk layers */
    int64_t n_layer_all; /* trunk + MTP */
    int64_t n_nextn;     /* MTP blocks (0 or 1) */
    int64_t n_vocab;
    int64_t n_ctx_train;
    /* attention */
    int64_t n_head, n_head_kv, head_dim, n_rot;
    float rope_base, attn_scale, eps;
    bool attn_gated; /* hybrid archs: attn_q packs [q_h | gate_h] per head */
    /* FFN */
    int64_t n_ff, n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* GDN */
    int64_t fa_interval, conv_k, ssm_s, ssm_hk, ssm_hv, conv_ch;
    bool kmap_mod; /* value head h reads key head h % Hk (qwen35*) instead of h / r */
};

struct model_layer {
    bool recurrent; /* GDN layer; false = attention */
    bool is_mtp;
    /* Dims of this layer as held here: the global dims for a whole model, the device's slice
     * for a tensor-parallel shard (shard.h). Forward code reads these, never the hparams. */
    int64_t n_head, n_head_kv;          /* attention heads */
    int64_t ssm_hk, ssm_hv, conv_ch;    /* GDN key heads, value heads, conv channels */
    int64_t n_ff, n_ff_exp, n_ff_shexp; /* FFN widths */
    struct model_w attn_norm, ffn_norm; /* ffn_norm = post_attention_norm (ffn_norm for qwen3) */
    /* attention */
    struct model_w wq, wk, wv, wo, q_norm, k_norm;
    /* GDN */
    struct model_w qkv, gate, conv, dt_bias, ssm_a, beta, alpha, ba, ssm_norm, ssm_out;
    /* dense FFN */
    struct model_w ffn_gate, ffn_up, ffn_down;
    /* MoE */
    struct model_w gate_inp, gate_exps, up_exps, down_exps;
    struct model_w gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
    /* MTP only */
    struct model_w eh_proj, enorm, hnorm, shared_head_norm;
};

struct model {
    struct model_hparams hp;
    char *path;
    gguf_t *gguf;
    tok_t *tok;
    struct model_w tok_embd, output_norm, output; /* output may alias tok_embd (tied) */
    int64_t vocab_lo, vocab_hi; /* rows of the LM head held here (a shard: a vocab slice) */
    struct model_layer *layers; /* [n_layer_all] */
    size_t weight_bytes;        /* sum of bound tensor sizes */
    /* a tensor-parallel shard (shard.h): the buffers of its split tensors */
    bool is_shard;
    void **owned;
    int64_t n_owned;
    size_t owned_bytes;
};

/* Load and validate. Returns 0 or a negative dd_err with the message in err. */
int model_load(const char *path, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);

const char *model_arch_name(enum model_arch a);
/* Layers of the trunk that are attention (not GDN) and GDN, counted. */
int64_t model_n_attn_layers(const struct model *m);
int64_t model_n_gdn_layers(const struct model *m);
/* Print a one-screen summary (arch, dims, layer pattern, bytes by type). */
void model_print(const struct model *m, void *file);

#endif
