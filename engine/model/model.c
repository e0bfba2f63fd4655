/*
 * model — load a GGUF model of a supported arch: read and validate hyper-parameters with
 * llama.cpp's strictness (exact scalar types), bind every tensor as a view into the mapping
 * with its expected shape and an allowed type, and refuse files carrying tensors the arch does
 * not use. See docs/models.md sections 2, 4 and 10 for the facts encoded here.
 *
 * Thread safety: model_load/model_free run on the start-up thread; a loaded model is immutable.
 */
#include "model.h" // defines: struct model, model_load

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, dd_errf

static const char *const arch_names[ARCH_COUNT] = {"qwen3", "qwen35", "qwen35moe", "qwen3next"};

const char *model_arch_name(enum model_arch a)
{
    return (unsigned)a < ARCH_COUNT ? arch_names[a] : "?";
}

/* Loader state: the file, the error sink and the number of tensors bound so far. */
struct loader {
    struct model *m;
    const gguf_t *g;
    const char *arch;
    char *err;
    size_t errlen;
    int64_t n_bound;
};

/* ============================================================================================
 * Hyper-parameters
 * ========================================================================================== */

/* Read {arch}.key as u32. Missing: default when !required, else error. */
static int hp_u32(struct loader *L, const char *key, bool required, int64_t def, int64_t *out)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    uint32_t v;
    int rc = gguf_get_u32(L->g, full, &v);
    if (rc == DD_ENOTFOUND && !required) {
        *out = def;
        return 0;
    }
    if (rc == DD_ENOTFOUND) {
        dd_errf(L->err, L->errlen, "%s: required key %s is missing", L->m->path, full);
        return DD_EFORMAT;
    }
    if (rc == DD_ETYPE) {
        dd_errf(L->err, L->errlen, "%s: key %s has wrong type (expected u32)", L->m->path, full);
        return DD_ETYPE;
    }
    *out = v;
    return 0;
}

static int hp_f32(struct loader *L, const char *key, bool required, float def, float *out)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    int rc = gguf_get_f32(L->g, full, out);
    if (rc == DD_ENOTFOUND && !required) {
        *out = def;
        return 0;
    }
    if (rc != 0) {
        dd_errf(L->err, L->errlen, "%s: key %s %s (expected f32)", L->m->path, full,
                rc == DD_ENOTFOUND ? "is missing" : "has wrong type");
        return rc == DD_ENOTFOUND ? DD_EFORMAT : DD_ETYPE;
    }
    return 0;
}

static int hp_check(struct loader *L, bool ok, const char *what)
{
    if (ok)
        return 0;
    dd_errf(L->err, L->errlen, "%s: invalid hyper-parameters: %s", L->m->path, what);
    return DD_EFORMAT;
}

static int read_arch(struct loader *L)
{
    const char *s;
    size_t n;
    int rc = gguf_get_str(L->g, "general.architecture", &s, &n);
    if (rc) {
        dd_errf(L->err, L->errlen, "%s: general.architecture is %s", L->m->path,
                rc == DD_ENOTFOUND ? "missing" : "not a string");
        return DD_EFORMAT;
    }
    for (int a = 0; a < ARCH_COUNT; a++) {
        if (strlen(arch_names[a]) == n && memcmp(arch_names[a], s, n) == 0) {
            L->m->hp.arch = (enum model_arch)a;
            L->arch = arch_names[a];
            return 0;
        }
    }
    dd_errf(L->err, L->errlen,
            "%s: unsupported architecture '%.*s' (supported: qwen3, qwen35, "
            "qwen35moe, qwen3next)",
            L->m->path, (int)(n > 64 ? 64 : n), s);
    return DD_EUNSUPPORTED;
}

static int read_attn_hparams(struct loader *L, struct model_hparams *hp)
{
    int rc = 0;
    int64_t klen, vlen;
    rc = rc ? rc : hp_u32(L, "context_length", true, 0, &hp->n_ctx_train);
    rc = rc ? rc : hp_u32(L, "embedding_length", true, 0, &hp->n_embd);
    rc = rc ? rc : hp_u32(L, "block_count", true, 0, &hp->n_layer_all);
    rc = rc ? rc : hp_u32(L, "nextn_predict_layers", false, 0, &hp->n_nextn);
    rc = rc ? rc : hp_u32(L, "attention.head_count", true, 0, &hp->n_head);
    rc = rc ? rc : hp_u32(L, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv);
    if (rc)
        return rc;
    if ((rc = hp_check(L, hp->n_head > 0 && hp->n_embd > 0,
                       "head_count and embedding_length "
                       "must be > 0")))
        return rc;
    rc = rc ? rc : hp_u32(L, "attention.key_length", false, hp->n_embd / hp->n_head, &klen);
    rc = rc ? rc : hp_u32(L, "attention.value_length", false, hp->n_embd / hp->n_head, &vlen);
    rc = rc ? rc : hp_u32(L, "rope.dimension_count", false, klen, &hp->n_rot);
    rc = rc ? rc : hp_f32(L, "rope.freq_base", false, 10000.0f, &hp->rope_base);
    rc = rc ? rc : hp_f32(L, "attention.layer_norm_rms_epsilon", true, 0, &hp->eps);
    rc = rc ? rc : hp_f32(L, "attention.scale", false, 0.0f, &hp->attn_scale);
    if (rc)
        return rc;
    hp->head_dim = klen;
    hp->n_layer = hp->n_layer_all - hp->n_nextn;
    rc = rc ? rc : hp_check(L, klen == vlen, "attention.key_length != value_length");
    rc = rc ? rc : hp_check(L, klen > 0 && klen <= 512, "head dim must be in 1..512");
    rc = rc ? rc
            : hp_check(L, hp->n_head_kv > 0 && hp->n_head % hp->n_head_kv == 0,
                       "head_count must be a multiple of head_count_kv");
    rc = rc ? rc
            : hp_check(L, hp->n_rot > 0 && hp->n_rot % 2 == 0 && hp->n_rot <= klen,
                       "rope.dimension_count must be even and <= head dim");
    rc = rc ? rc : hp_check(L, hp->n_nextn <= 1, "nextn_predict_layers must be 0 or 1");
    rc = rc ? rc
            : hp_check(L, hp->n_layer >= 1 && hp->n_layer <= 1024,
                       "block_count out of "
                       "range");
    rc = rc ? rc : hp_check(L, hp->eps > 0 && hp->eps < 1, "rms epsilon out of range");
    rc = rc ? rc : hp_check(L, hp->rope_base > 0, "rope.freq_base must be > 0");
    if (hp->attn_scale == 0.0f)
        hp->attn_scale = 1.0f / sqrtf((float)klen);
    return rc;
}

static int read_ffn_hparams(struct loader *L, struct model_hparams *hp)
{
    bool moe = hp->arch == ARCH_QWEN35MOE || hp->arch == ARCH_QWEN3NEXT;
    int rc = hp_u32(L, "feed_forward_length", !moe, 0, &hp->n_ff);
    if (rc || !moe)
        return rc ? rc : hp_check(L, hp->n_ff > 0, "feed_forward_length must be > 0");
    rc = rc ? rc : hp_u32(L, "expert_count", true, 0, &hp->n_expert);
    rc = rc ? rc : hp_u32(L, "expert_used_count", true, 0, &hp->n_expert_used);
    if (rc)
        return rc;
    rc = hp_check(L,
                  hp->n_expert > 0 && hp->n_expert <= 1024 && hp->n_expert_used > 0 &&
                      hp->n_expert_used <= hp->n_expert && hp->n_expert_used <= 64,
                  "expert_count / expert_used_count out of range");
    rc = rc ? rc
            : hp_u32(L, "expert_feed_forward_length", false,
                     hp->n_ff / (hp->n_expert_used ? hp->n_expert_used : 1), &hp->n_ff_exp);
    rc = rc ? rc : hp_u32(L, "expert_shared_feed_forward_length", false, hp->n_ff, &hp->n_ff_shexp);
    return rc ? rc
              : hp_check(L, hp->n_ff_exp > 0 && hp->n_ff_shexp > 0,
                         "expert widths must "
                         "be > 0");
}

static int read_gdn_hparams(struct loader *L, struct model_hparams *hp)
{
    int64_t inner;
    int rc = hp_u32(L, "full_attention_interval", false, 4, &hp->fa_interval);
    rc = rc ? rc : hp_u32(L, "ssm.conv_kernel", true, 0, &hp->conv_k);
    rc = rc ? rc : hp_u32(L, "ssm.state_size", true, 0, &hp->ssm_s);
    rc = rc ? rc : hp_u32(L, "ssm.group_count", true, 0, &hp->ssm_hk);
    rc = rc ? rc : hp_u32(L, "ssm.time_step_rank", true, 0, &hp->ssm_hv);
    rc = rc ? rc : hp_u32(L, "ssm.inner_size", true, 0, &inner);
    if (rc)
        return rc;
    rc = hp_check(L, hp->fa_interval >= 1, "full_attention_interval must be >= 1");
    rc = rc ? rc
            : hp_check(L, hp->conv_k >= 2 && hp->conv_k <= 16,
                       "ssm.conv_kernel out of "
                       "range 2..16");
    rc = rc ? rc
            : hp_check(L, hp->ssm_s >= 1 && hp->ssm_s <= 256,
                       "ssm.state_size out of range "
                       "1..256");
    rc = rc ? rc
            : hp_check(L, hp->ssm_hk > 0 && hp->ssm_hv > 0 && hp->ssm_hv % hp->ssm_hk == 0,
                       "ssm.time_step_rank must be a multiple of ssm.group_count");
    rc = rc ? rc
            : hp_check(L, inner == hp->ssm_hv * hp->ssm_s,
                       "ssm.inner_size != time_step_rank"
                       " * state_size");
    hp->conv_ch = 2 * hp->ssm_hk * hp->ssm_s + hp->ssm_hv * hp->ssm_s;
    hp->kmap_mod = hp->arch != ARCH_QWEN3NEXT;
    hp->attn_gated = true;
    return rc;
}

/* ============================================================================================
 * Tensor binding
 * ========================================================================================== */

enum { REQ = 1, OPT = 0 };
enum { T_F32 = 1, T_ANY = 2 }; /* F32 only, or any weight type the kernels support */

static int bind(struct loader *L, struct model_w *w, const char *name, int req, int types,
                int64_t ne0, int64_t ne1, int64_t ne2)
{
    const struct gguf_tensor *t = gguf_find_tensor(L->g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!req)
            return 0;
        dd_errf(L->err, L->errlen, "%s: missing tensor '%s'", L->m->path, name);
        return DD_EFORMAT;
    }
    int64_t want[4] = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1};
    /* [E] norms are sometimes written as [E, 1]: only the element counts must agree */
    for (int d = 0; d < 4; d++) {
        if (t->ne[d] != want[d]) {
            dd_errf(L->err, L->errlen,
                    "%s: tensor '%s' has shape [%lld, %lld, %lld], expected "
                    "[%lld, %lld, %lld]",
                    L->m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                    (long long)want[0], (long long)want[1], (long long)want[2]);
            return DD_EFORMAT;
        }
    }
    bool type_ok = types == T_F32 ? t->type == KQ_F32 : kq_type_supported(t->type);
    if (type_ok && ne0 % kq_block_elems((enum kq_type)t->type) != 0)
        type_ok = false;
    if (!type_ok) {
        dd_errf(L->err, L->errlen,
                "%s: tensor '%s' has type %s, which is not supported here "
                "(%s)",
                L->m->path, name, kq_type_name(t->type),
                types == T_F32 ? "must be f32"
                               : "supported: f32 f16 bf16 q8_0 q4_0 q4_k q5_k "
                                 "q6_k with whole blocks per row");
        return DD_EUNSUPPORTED;
    }
    w->data = t->data;
    w->type = (enum kq_type)t->type;
    memcpy(w->ne, want, sizeof want);
    w->nb1 = kq_row_bytes(w->type, ne0);
    w->nb2 = w->nb1 * (size_t)want[1];
    L->m->weight_bytes += t->size;
    L->n_bound++;
    return 0;
}

/* bind "blk.<il>.<name>.weight"; ssm_a and ssm_dt.bias are stored without the suffix */
static int bind_blk(struct loader *L, int64_t il, struct model_w *w, const char *name, int req,
                    int types, int64_t ne0, int64_t ne1, int64_t ne2)
{
    char full[128];
    if (strcmp(name, "ssm_dt.bias") == 0 || strcmp(name, "ssm_a") == 0)
        snprintf(full, sizeof full, "blk.%lld.%s", (long long)il, name);
    else
        snprintf(full, sizeof full, "blk.%lld.%s.weight", (long long)il, name);
    return bind(L, w, full, req, types, ne0, ne1, ne2);
}

static int bind_attn(struct loader *L, int64_t il, struct model_layer *l)
{
    const struct model_hparams *hp = &L->m->hp;
    int64_t E = hp->n_embd, D = hp->head_dim, qout = hp->n_head * D * (hp->attn_gated ? 2 : 1);
    int rc = bind_blk(L, il, &l->wq, "attn_q", REQ, T_ANY, E, qout, 0);
    rc = rc ? rc : bind_blk(L, il, &l->wk, "attn_k", REQ, T_ANY, E, hp->n_head_kv * D, 0);
    rc = rc ? rc : bind_blk(L, il, &l->wv, "attn_v", REQ, T_ANY, E, hp->n_head_kv * D, 0);
    rc = rc ? rc : bind_blk(L, il, &l->wo, "attn_output", REQ, T_ANY, hp->n_head * D, E, 0);
    rc = rc ? rc : bind_blk(L, il, &l->q_norm, "attn_q_norm", REQ, T_F32, D, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->k_norm, "attn_k_norm", REQ, T_F32, D, 0, 0);
    return rc;
}

static int bind_gdn(struct loader *L, int64_t il, struct model_layer *l)
{
    const struct model_hparams *hp = &L->m->hp;
    int64_t E = hp->n_embd, Hv = hp->ssm_hv, S = hp->ssm_s, C = hp->conv_ch;
    int rc = bind_blk(L, il, &l->qkv, "attn_qkv", REQ, T_ANY, E, C, 0);
    rc = rc ? rc : bind_blk(L, il, &l->gate, "attn_gate", REQ, T_ANY, E, Hv * S, 0);
    rc = rc ? rc : bind_blk(L, il, &l->conv, "ssm_conv1d", REQ, T_F32, hp->conv_k, C, 0);
    rc = rc ? rc : bind_blk(L, il, &l->dt_bias, "ssm_dt.bias", REQ, T_F32, Hv, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->ssm_a, "ssm_a", REQ, T_F32, Hv, 0, 0);
    if (hp->arch == ARCH_QWEN3NEXT) {
        rc = rc ? rc : bind_blk(L, il, &l->ba, "ssm_ba", REQ, T_ANY, E, 2 * Hv, 0);
    } else {
        rc = rc ? rc : bind_blk(L, il, &l->beta, "ssm_beta", REQ, T_ANY, E, Hv, 0);
        rc = rc ? rc : bind_blk(L, il, &l->alpha, "ssm_alpha", REQ, T_ANY, E, Hv, 0);
    }
    rc = rc ? rc : bind_blk(L, il, &l->ssm_norm, "ssm_norm", REQ, T_F32, S, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->ssm_out, "ssm_out", REQ, T_ANY, Hv * S, E, 0);
    return rc;
}

static int bind_ffn(struct loader *L, int64_t il, struct model_layer *l)
{
    const struct model_hparams *hp = &L->m->hp;
    int64_t E = hp->n_embd;
    if (hp->n_expert == 0) {
        int rc = bind_blk(L, il, &l->ffn_gate, "ffn_gate", REQ, T_ANY, E, hp->n_ff, 0);
        rc = rc ? rc : bind_blk(L, il, &l->ffn_up, "ffn_up", REQ, T_ANY, E, hp->n_ff, 0);
        return rc ? rc : bind_blk(L, il, &l->ffn_down, "ffn_down", REQ, T_ANY, hp->n_ff, E, 0);
    }
    int64_t Nx = hp->n_expert, F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    int rc = bind_blk(L, il, &l->gate_inp, "ffn_gate_inp", REQ, T_F32, E, Nx, 0);
    rc = rc ? rc : bind_blk(L, il, &l->gate_exps, "ffn_gate_exps", REQ, T_ANY, E, F, Nx);
    rc = rc ? rc : bind_blk(L, il, &l->up_exps, "ffn_up_exps", REQ, T_ANY, E, F, Nx);
    rc = rc ? rc : bind_blk(L, il, &l->down_exps, "ffn_down_exps", REQ, T_ANY, F, E, Nx);
    rc = rc ? rc : bind_blk(L, il, &l->gate_inp_shexp, "ffn_gate_inp_shexp", REQ, T_F32, E, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->gate_shexp, "ffn_gate_shexp", REQ, T_ANY, E, Fs, 0);
    rc = rc ? rc : bind_blk(L, il, &l->up_shexp, "ffn_up_shexp", REQ, T_ANY, E, Fs, 0);
    return rc ? rc : bind_blk(L, il, &l->down_shexp, "ffn_down_shexp", REQ, T_ANY, Fs, E, 0);
}

static int bind_layer(struct loader *L, int64_t il)
{
    struct model *m = L->m;
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    int64_t E = hp->n_embd;
    l->is_mtp = il >= hp->n_layer;
    l->recurrent = hp->arch != ARCH_QWEN3 && !l->is_mtp && (il + 1) % hp->fa_interval != 0;
    l->n_head = hp->n_head;
    l->n_head_kv = hp->n_head_kv;
    l->ssm_hk = hp->ssm_hk;
    l->ssm_hv = hp->ssm_hv;
    l->conv_ch = hp->conv_ch;
    l->n_ff = hp->n_ff;
    l->n_ff_exp = hp->n_ff_exp;
    l->n_ff_shexp = hp->n_ff_shexp;
    const char *ffn_norm = hp->arch == ARCH_QWEN3 ? "ffn_norm" : "post_attention_norm";
    int rc = bind_blk(L, il, &l->attn_norm, "attn_norm", REQ, T_F32, E, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->ffn_norm, ffn_norm, REQ, T_F32, E, 0, 0);
    rc = rc ? rc : (l->recurrent ? bind_gdn(L, il, l) : bind_attn(L, il, l));
    rc = rc ? rc : bind_ffn(L, il, l);
    if (rc || !l->is_mtp)
        return rc;
    rc = bind_blk(L, il, &l->eh_proj, "nextn.eh_proj", REQ, T_ANY, 2 * E, E, 0);
    rc = rc ? rc : bind_blk(L, il, &l->enorm, "nextn.enorm", REQ, T_F32, E, 0, 0);
    rc = rc ? rc : bind_blk(L, il, &l->hnorm, "nextn.hnorm", REQ, T_F32, E, 0, 0);
    rc = rc ? rc
            : bind_blk(L, il, &l->shared_head_norm, "nextn.shared_head_norm", OPT, T_F32, E, 0, 0);
    return rc;
}

static int bind_all(struct loader *L)
{
    struct model *m = L->m;
    struct model_hparams *hp = &m->hp;
    const struct gguf_tensor *emb = gguf_find_tensor(L->g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] < 1) {
        dd_errf(L->err, L->errlen, "%s: missing or malformed tensor 'token_embd.weight'", m->path);
        return DD_EFORMAT;
    }
    hp->n_vocab = emb->ne[1];
    int rc = bind(L, &m->tok_embd, "token_embd.weight", REQ, T_ANY, hp->n_embd, hp->n_vocab, 0);
    rc = rc ? rc : bind(L, &m->output_norm, "output_norm.weight", REQ, T_F32, hp->n_embd, 0, 0);
    rc = rc ? rc : bind(L, &m->output, "output.weight", OPT, T_ANY, hp->n_embd, hp->n_vocab, 0);
    if (rc)
        return rc;
    if (!m->output.data)
        m->output = m->tok_embd; /* tied head */
    m->vocab_lo = 0;
    m->vocab_hi = hp->n_vocab;
    m->layers = xcalloc((size_t)hp->n_layer_all, sizeof *m->layers);
    for (int64_t il = 0; il < hp->n_layer_all && !rc; il++)
        rc = bind_layer(L, il);
    if (rc)
        return rc;
    if (L->n_bound != gguf_n_tensors(L->g)) {
        dd_errf(L->err, L->errlen,
                "%s: wrong number of tensors: the file has %lld, the %s "
                "architecture uses %lld",
                m->path, (long long)gguf_n_tensors(L->g), L->arch, (long long)L->n_bound);
        return DD_EFORMAT;
    }
    return 0;
}

/* ============================================================================================
 * Public
 * ========================================================================================== */

int model_load(const char *path, struct model **out, char *err, size_t errlen)
{
    struct model *m = xcalloc(1, sizeof *m);
    struct loader L = {.m = m, .err = err, .errlen = errlen};
    m->path = xstrdup(path);
    int rc = gguf_open(path, &m->gguf, err, errlen);
    if (rc)
        goto fail;
    L.g = m->gguf;
    rc = read_arch(&L);
    rc = rc ? rc : read_attn_hparams(&L, &m->hp);
    rc = rc ? rc : read_ffn_hparams(&L, &m->hp);
    if (!rc && m->hp.arch != ARCH_QWEN3)
        rc = read_gdn_hparams(&L, &m->hp);
    rc = rc ? rc : bind_all(&L);
    if (rc)
        goto fail;
    char terr[512];
    rc = tok_create(m->gguf, &m->tok, terr, sizeof terr);
    if (rc) {
        dd_errf(err, errlen, "%s: tokenizer: %s", path, terr);
        goto fail;
    }
    if (tok_n_vocab(m->tok) != m->hp.n_vocab) {
        dd_errf(err, errlen, "%s: tokenizer has %d tokens but token_embd has %lld rows", path,
                tok_n_vocab(m->tok), (long long)m->hp.n_vocab);
        rc = DD_EFORMAT;
        goto fail;
    }
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    if (m->tok)
        tok_destroy(m->tok);
    if (m->gguf)
        gguf_close(m->gguf);
    free(m->layers);
    free(m->path);
    free(m);
}

int64_t model_n_attn_layers(const struct model *m)
{
    int64_t n = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        n += !m->layers[il].recurrent;
    return n;
}

int64_t model_n_gdn_layers(const struct model *m)
{
    return m->hp.n_layer - model_n_attn_layers(m);
}

void model_print(const struct model *m, void *file)
{
    FILE *f = file;
    const struct model_hparams *hp = &m->hp;
    fprintf(f,
            "model: %s\n  arch %s, E %lld, layers %lld (%lld GDN + %lld attention) + %lld MTP,"
            " vocab %lld\n",
            m->path, model_arch_name(hp->arch), (long long)hp->n_embd, (long long)hp->n_layer,
            (long long)model_n_gdn_layers(m), (long long)model_n_attn_layers(m),
            (long long)hp->n_nextn, (long long)hp->n_vocab);
    fprintf(f, "  attention: H %lld, Hkv %lld, D %lld, rot %lld, base %g%s\n",
            (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->head_dim,
            (long long)hp->n_rot, hp->rope_base, hp->attn_gated ? ", output gate" : "");
    if (hp->arch != ARCH_QWEN3)
        fprintf(f, "  GDN: Hk %lld, Hv %lld, S %lld, conv %lld, head map %s\n",
                (long long)hp->ssm_hk, (long long)hp->ssm_hv, (long long)hp->ssm_s,
                (long long)hp->conv_k, hp->kmap_mod ? "h mod Hk" : "h / r");
    if (hp->n_expert)
        fprintf(f, "  MoE: %lld experts, top-%lld, expert width %lld, shared width %lld\n",
                (long long)hp->n_expert, (long long)hp->n_expert_used, (long long)hp->n_ff_exp,
                (long long)hp->n_ff_shexp);
    else
        fprintf(f, "  FFN: %lld\n", (long long)hp->n_ff);
    fprintf(f, "  weights: %.1f MiB in the mmap (type of token_embd: %s)\n",
            m->weight_bytes / 1048576.0, kq_type_name(m->tok_embd.type));
}
