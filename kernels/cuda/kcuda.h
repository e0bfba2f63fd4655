/*
 * kcuda — extern "C" entry points of the CUDA kernels (the .cu files of kernels/cuda): a stream
 * context (CUDA stream + cuBLAS handle + scratch), device memory, CUDA graph capture, and one
 * launcher per op of the forward pass. Built with `make CUDA=1`.
 *
 * Layer: kernels. Launchers take raw device pointers, dimensions and a kc_stream; no engine
 * struct crosses this boundary (STYLE rule 5). Every launcher only enqueues work on the stream;
 * nothing synchronises unless its comment says so. Shapes are written [rows][cols], row-major,
 * every activation f32 unless stated. "Device" pointers are cudaMalloc'ed (kc_malloc).
 *
 * Numerics: each op computes the math of its CPU reference (kernels/cpu, named per launcher)
 * in f32 (double where the reference uses double), in a different summation order. Weight
 * matrices keep their GGUF block layouts (kernels/cpu/kq_impl.h). Matrix-vector products
 * dequantise weights on the fly and dot them with the f32 activations (no activation
 * quantisation); the prefill GEMM runs cuBLAS on weights dequantised to F16 (BF16 for BF16
 * weights) with the activations rounded to the same 16-bit type and f32 accumulation.
 *
 * Errors: a failing CUDA or cuBLAS call is a broken device (STYLE rule 18c): it prints the call,
 * file and line and aborts. Only kc_stream_create and kc_malloc report failure to the caller.
 *
 * Thread safety: a kc_stream is driven by one thread at a time.
 */
#ifndef DELTAD_KCUDA_H
#define DELTAD_KCUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ktype.h" // defines: enum kq_type (the ggml type ids)

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device, stream, memory ------------------------------------------------------------ */

/* Number of usable CUDA devices (0 when there is no driver or no GPU); writes the CUDA error
 * string to err when it returns 0 because of an error. */
int kc_device_count(char *err, unsigned long errlen);
/* "NVIDIA H200, sm_90, 139.8 GiB" into buf. */
void kc_device_describe(int device, char *buf, size_t len);
/* Free and total memory of `device` as the driver reports them; -1 on error. */
int kc_device_mem(int device, size_t *free_bytes, size_t *total_bytes);
/* The device's PCI bus id ("0000:3b:00.0") into buf; "" when CUDA cannot tell. */
void kc_device_busid(int device, char *buf, size_t len);

/* Make `device` the calling host thread's current CUDA device (allocations and launches go
 * to it); cheap when it already is. */
void kc_set_device(int device);

typedef struct kc_stream kc_stream;

/* A stream on `device` with its own cuBLAS handle and scratch_bytes of device scratch (for the
 * prefill GEMM, see kc_matmul_scratch_bytes). Returns 0, or -1 with the reason in err.
 * Transferred: kc_stream_destroy. */
int kc_stream_create(int device, size_t scratch_bytes, kc_stream **out, char *err, size_t errlen);
void kc_stream_destroy(kc_stream *s);
/* Grow the scratch to at least bytes (synchronises the stream first). Returns 0 or -1. */
int kc_stream_reserve(kc_stream *s, size_t bytes);
void kc_stream_sync(kc_stream *s);
/* The cudaStream_t, as a void pointer (for NCCL calls on the same stream). */
void *kc_stream_handle(kc_stream *s);

/* Device memory: NULL when the allocation fails (user-sized, the caller reports it). */
void *kc_malloc(size_t bytes);
void kc_free(void *p);
/* Page-locked host memory for fast transfers (NULL on failure). */
void *kc_host_alloc(size_t bytes);
void kc_host_free(void *p);
/* Copies ordered on the stream (asynchronous for pinned host memory). */
void kc_upload(kc_stream *s, void *dst_dev, const void *src_host, size_t bytes);
void kc_download(kc_stream *s, void *dst_host, const void *src_dev, size_t bytes);
void kc_copy(kc_stream *s, void *dst_dev, const void *src_dev, size_t bytes);
void kc_memset(kc_stream *s, void *dst_dev, int byte, size_t bytes);

/* ---- CUDA graphs ------------------------------------------------------------------------- */

/*
 * Capture the launches of a step (for example a decode step of a fixed batch shape) into a
 * graph and replay it. Between kc_graph_begin and kc_graph_end only launchers that do not
 * synchronise may run (matmuls with T <= KC_MATVEC_MAX_T, never kc_stream_reserve). A captured
 * graph replays with the pointers and sizes it was captured with: inputs change by writing new
 * values into the same device buffers (token ids, positions, run tables), and a new batch shape
 * needs a new capture. Transferred: kc_graph_destroy.
 */
typedef struct kc_graph kc_graph;
void kc_graph_begin(kc_stream *s);
kc_graph *kc_graph_end(kc_stream *s);
void kc_graph_launch(kc_stream *s, kc_graph *g);
void kc_graph_destroy(kc_graph *g);

/* ---- matrices ---------------------------------------------------------------------------- */

/* A weight matrix in device memory: n_out rows of n_in elements of `type`, row_bytes apart
 * (kq_row_bytes(type, n_in) for a dense tensor). n_in is a multiple of kq_block_elems(type). */
struct kc_mat {
    const void *data;
    enum kq_type type;
    int64_t n_in, n_out;
    size_t row_bytes;
};

/* Largest T that the matrix-vector kernel takes; longer batches go to the GEMM. */
#define KC_MATVEC_MAX_T 8

/* dst [n_rows][n_in] (dst_type F32, F16 or BF16) = the dequantised rows of w; ids (device,
 * [n_rows], may be NULL) selects source rows: dst row r = w row ids[r]. Reference:
 * kq_dequantize_row. */
void kc_dequantize(kc_stream *s, const struct kc_mat *w, const int32_t *ids, int64_t n_rows,
                   void *dst, enum kq_type dst_type);

/* y [T][y_stride] (first w.n_out used) = x [T][x_stride] (first w.n_in used) * W^T.
 * T <= KC_MATVEC_MAX_T runs the matrix-vector kernel (every weight row read once for all T
 * tokens); longer batches run the GEMM, which needs kc_matmul_scratch_bytes of scratch. */
void kc_matmul(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride, int64_t T,
               float *y, int64_t y_stride);
/* The matrix-vector kernel alone (any T; T > KC_MATVEC_MAX_T re-reads W per 8 tokens). */
void kc_matvec(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride, int64_t T,
               float *y, int64_t y_stride);
/* The GEMM alone (any T >= 1). */
void kc_gemm(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride, int64_t T,
             float *y, int64_t y_stride);
/* Scratch the GEMM needs for T tokens of w (a weight chunk of at least 64 rows plus x). */
size_t kc_matmul_scratch_bytes(const struct kc_mat *w, int64_t T);

/*
 * Expert products for routed tokens without a host round trip (the decode MoE path): for item
 * i < n_items, expert e = ids[i] (device int32), y [i][y_stride] = W_e * x row (i / x_div),
 * where W_e is w shifted by e * expert_bytes (w.n_out rows). x_div = k (experts per token) for
 * the gate / up projections of each token, 1 for the down projections of each item.
 */
void kc_matvec_ids(kc_stream *s, const struct kc_mat *w, size_t expert_bytes, const int32_t *ids,
                   int64_t n_items, const float *x, int64_t x_stride, int64_t x_div, float *y,
                   int64_t y_stride);

/* ---- norms, RoPE, activations (reference: kernels/cpu/kop.c) ----------------------------- */

/*
 * Rows of n values addressed as (token t < n_tok, head h < n_head) at t * tok_stride + h *
 * head_stride floats (n_head = 1, head_stride = 0 for plain rows); y uses the same strides and
 * may alias x. rmsnorm: y = x / sqrt(mean(x^2) + eps) * w (w [n] or NULL); l2norm in place:
 * x /= max(|x|, eps). References: kop_rmsnorm, kop_l2norm.
 */
void kc_rmsnorm(kc_stream *s, const float *x, const float *w, float *y, int64_t n_tok,
                int64_t n_head, int64_t tok_stride, int64_t head_stride, int64_t n, float eps);
void kc_l2norm(kc_stream *s, float *x, int64_t n_tok, int64_t n_head, int64_t tok_stride,
               int64_t head_stride, int64_t n, float eps);
/* x [n_rows][n] = rmsnorm(x) * w * silu(z), in place; z [n_rows][n]. Reference:
 * kop_rmsnorm_gate. */
void kc_rmsnorm_gate(kc_stream *s, float *x, const float *w, const float *z, int64_t n_rows,
                     int64_t n, float eps);
/* NEOX RoPE on the first n_rot dims of every head (addressed as kc_rmsnorm's rows) at the
 * token's position pos [n_tok] (device int32), in place. Reference: kop_rope_neox. */
void kc_rope_neox(kc_stream *s, float *x, const int32_t *pos, int64_t n_tok, int64_t n_head,
                  int64_t tok_stride, int64_t head_stride, int64_t n_rot, float base);
/* cs [T][n_rot] = the rotation table of each position pos [T] (device int64): cos theta_i at
 * i, sin theta_i at n_rot/2 + i, theta in double. Reference: kop_rope_table. */
void kc_rope_table(kc_stream *s, const int64_t *pos, int64_t T, int64_t n_rot, float base,
                   float *cs);
/* NEOX RoPE of every head (addressed as kc_rmsnorm's rows) from its token's table cs
 * [n_tok][n_rot], in place. Reference: kop_rope_neox_cs. */
void kc_rope_neox_cs(kc_stream *s, float *x, const float *cs, int64_t n_tok, int64_t n_head,
                     int64_t tok_stride, int64_t head_stride, int64_t n_rot);
/* g = silu(g) * u over n elements (kop_swiglu). */
void kc_swiglu(kc_stream *s, float *g, const float *u, int64_t n);
/* x *= sigmoid(g) over n elements (kop_mul_sigmoid). */
void kc_mul_sigmoid(kc_stream *s, float *x, const float *g, int64_t n);
/* x = sigmoid(x) over n elements. */
void kc_sigmoid(kc_stream *s, float *x, int64_t n);
/* y += x over n elements (kop_add). */
void kc_add(kc_stream *s, float *y, const float *x, int64_t n);

/* The BF16 wire format of the NCCL allreduce, on a raw cudaStream_t (comm_nccl has no
 * kc_stream): dst[i] = bf16(src[i]) rounded to nearest even (NaN stays NaN), and back. */
void kc_f32_to_bf16_on(void *stream, const float *src, uint16_t *dst, int64_t n);
void kc_bf16_to_f32_on(void *stream, const uint16_t *src, float *dst, int64_t n);

/* out [T][E] = dequantised rows ids [T] (device int32) of the embedding table w (E = n_in). */
void kc_embed(kc_stream *s, const struct kc_mat *w, const int32_t *ids, int64_t T, float *out);
/* out [T] (device int32) = index of the largest of each row of x [T][n] (ties: lowest index;
 * NaN never wins); mass [T] (device, may be NULL) = sum_i exp(x_i - the largest) in f32 (the
 * softmax probability of the largest is 1 / mass). Reference: dev_cpu__argmax (which sums in
 * double). */
void kc_argmax(kc_stream *s, const float *x, int64_t T, int64_t n, int32_t *out, float *mass);

/* ---- attention (reference: kop_attn_head) ------------------------------------------------ */

/*
 * The KV cache of one attention layer: rows [n_seq][n_ctx][kv_dim] f32 for K and for V (the
 * layout of engine/sched/cache.c), kv_dim = Hkv * D.
 */
struct kc_kv {
    float *k, *v;
    int64_t n_ctx, kv_dim;
};
/* pos32 [T] = pos [T] (device int64) as int32, n_kv [T] = pos + 1 (the causal mask of
 * kc_attention). Reference: dev_cpu__attn's n_kv. */
void kc_pos_n_kv(kc_stream *s, const int64_t *pos, int64_t T, int32_t *pos32, int32_t *n_kv);
/* Store each token's new K/V rows at (seq [t], pos [t]): k_new, v_new [T][new_stride]. */
void kc_kv_store(kc_stream *s, const struct kc_kv *kv, const float *k_new, const float *v_new,
                 int64_t new_stride, const int32_t *seq, const int32_t *pos, int64_t T);
/*
 * Attention of T query rows: row t, query head h < H reads q + t * q_tok + h * q_head [D] and
 * the n_kv [t] cached positions 0 .. n_kv[t]-1 of sequence seq [t] (the caller's causal mask:
 * n_kv = pos + 1), KV head h / (H / Hkv); out + t * out_tok + h * D = softmax(q.k * scale) v,
 * then times sigmoid(gate + t * q_tok + h * q_head) when gate is not NULL (gated attention).
 * D <= 256. Flash-decoding style: each (row, head) streams its positions once with an online
 * softmax, so it serves batched decode and (untiled) prefill alike.
 */
void kc_attention(kc_stream *s, const struct kc_kv *kv, const float *q, int64_t q_tok,
                  int64_t q_head, const float *gate, const int32_t *seq, const int32_t *n_kv,
                  int64_t T, int64_t H, int64_t Hkv, int64_t D, float scale, float *out,
                  int64_t out_tok);

/* ---- Gated DeltaNet (docs/models.md 5.4; reference: kop_conv1d_silu, kop_gdn_step) -------- */

/* One sequence's rows [t0, t1) of a batch; its state is read from snapshot group src_group. */
struct kc_run {
    int32_t t0, t1, seq, src_group;
};

/*
 * Recurrent state of one GDN layer: for group g < n_groups and sequence q, the conv state
 * [(K-1)][C] at conv + g * group_stride + q * seq_stride and the SSM state [Hv][S][S] at
 * ssm + g * group_stride + q * seq_stride (floats; the layout of engine/sched/cache.c).
 */
struct kc_gdn_state {
    float *conv, *ssm;
    int64_t group_stride, seq_stride, n_groups;
};

/* beta [T][Hv] = sigmoid(b), decay [T][Hv] = exp(a_log[h] * softplus(alpha + dt_bias[h])).
 * b, alpha [T][Hv] each, or (ba != NULL, qwen3next) ba [T][2 Hv] grouped per key head as
 * [b (r) | alpha (r)], r = Hv / Hk. */
void kc_gdn_gates(kc_stream *s, const float *b, const float *alpha, const float *ba,
                  const float *a_log, const float *dt_bias, int64_t T, int64_t Hv, int64_t Hk,
                  float *beta, float *decay);
/*
 * Causal depthwise conv with SiLU over the runs (device array [n_runs]): y [T][C] from u [T][C]
 * and taps w [C][K] (K <= 16), starting from each run's conv state in group src_group; then the
 * conv state windows of the last min(T_run, n_groups) tokens into groups 0 .. (group g = the
 * window ending g tokens before the run's end), as fwd.c does.
 */
void kc_conv1d_silu(kc_stream *s, const float *u, const float *w, int64_t C, int64_t K,
                    const struct kc_run *runs, int64_t n_runs, const struct kc_gdn_state *st,
                    float *y);
/*
 * The gated delta rule, token by token (the order of kop_gdn_step), for every run and value head
 * h < Hv: q, k, v of token t read from y [T][C] (q of key head kh at kh * S, k at Hk * S + kh * S,
 * v at 2 Hk S + h S; q and k already L2-normalised), kh = h % Hk (kmap_mod) or h / (Hv / Hk).
 * The first token starts from group src_group; after the run group 0 holds the final state and
 * group g (1 <= g < n_groups, g < T_run) the state g tokens before the end: the snapshot groups
 * of a verification batch, written straight into the cache. o [T][Hv * S] = M^T q / sqrt(S).
 * S <= 256, S % 4 == 0.
 */
void kc_gdn(kc_stream *s, const float *y, int64_t C, int64_t Hk, int64_t Hv, int64_t S,
            int kmap_mod, const float *beta, const float *decay, const struct kc_run *runs,
            int64_t n_runs, const struct kc_gdn_state *st, float *o);

/* ---- mixture of experts (docs/models.md 5.6) --------------------------------------------- */

/* Per row of logits [T][Nx]: softmax over all experts, top-k (ties: lower index), weights
 * renormalised by max(sum, 6.1e-5), then the k choices sorted by expert: route_e, route_w
 * [T][k]. Nx <= 1024, k <= 16. */
void kc_moe_route(kc_stream *s, const float *logits, int64_t T, int64_t Nx, int64_t k,
                  int32_t *route_e, float *route_w);
/* Group the T * k choices by expert for the prefill path: e_off [Nx + 1] (expert e owns slots
 * e_off[e] .. e_off[e+1]-1, in row order), slot [T * k] of each choice, e_row [T * k] row of
 * each slot. One block; deterministic. */
void kc_moe_dispatch(kc_stream *s, const int32_t *route_e, int64_t T, int64_t k, int64_t Nx,
                     int32_t *e_off, int32_t *slot, int32_t *e_row);
/* ids [s] (device int32, s < n) = the expert of slot s under kc_moe_dispatch's e_off [Nx + 1]
 * (the decode path's input of kc_matvec_ids, without a host round trip). */
void kc_slot_experts(kc_stream *s, const int32_t *e_off, int64_t Nx, int64_t n, int32_t *ids);
/* out [n][E] = x rows idx [n] (device int32) of x [*][E]. */
void kc_gather_rows(kc_stream *s, const float *x, const int32_t *idx, int64_t n, int64_t E,
                    float *out);
/* out [T] = sigmoid(w . x_t) over x [T][E], the dot in double (the shared expert's gate).
 * Reference: dev_cpu__shexp_gate. */
void kc_shexp_gate(kc_stream *s, const float *w, const float *x, int64_t T, int64_t E, float *out);
/* Rows of w floats, in place allowed (dst == src): gather (scatter 0) dst [i] = src [idx[i]] for
 * i ascending (in place when idx[i] >= i); scatter dst [idx[i]] = src [i] for i descending. One
 * block, row by row. References: dev_cpu__gather_rows, dev_cpu__scatter_rows. */
void kc_move_rows(kc_stream *s, float *dst, const float *src, const int32_t *idx, int64_t n,
                  int64_t w, int scatter);
/* out [T][E] = sh_gate[t] * shared[t] (both may be NULL: 0) + sum_i route_w[t][i] *
 * eout[j] with j = slot[t * k + i] (slot NULL: j = t * k + i), in the order i = 0 .. k-1. */
void kc_moe_combine(kc_stream *s, const float *shared, const float *sh_gate, const float *route_w,
                    const int32_t *slot, const float *eout, int64_t T, int64_t k, int64_t E,
                    float *out);

#ifdef __cplusplus
}
#endif

#endif
