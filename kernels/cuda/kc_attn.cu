// kc_attn — the KV store and attention over per-sequence KV rows (contracts in kcuda.h).
//
// Attention runs one block of ATT_WARPS warps per (query row, head). Warp w takes positions
// w, w + ATT_WARPS, ...; for each, the lanes hold D / 32 dims of q and of the output, the score
// is a warp-reduced dot product, and an online softmax (running max m, sum l, rescaled
// accumulator) folds the position in. The warps' partial (m, l, acc) merge in shared memory at
// the end. Every position is read once per (row, head); K/V rows of one KV head are shared by
// the H / Hkv query heads through L2.
//
// TODO(issue 8): a tiled prefill kernel (a tile of query rows per block, K/V tiles staged in
// shared memory, tensor-core QK^T) for long prompts; this one is O(T * n_kv) L2 reads.
#include "kcuda_impl.cuh" // defines: kc__warp_sum, struct kc_stream

#define ATT_WARPS 4
#define ATT_DMAX 256
#define ATT_PER_LANE (ATT_DMAX / 32)

__global__ void k_kv_store(float *kc, float *vc, int64_t n_ctx, int64_t kv_dim, const float *k,
                           const float *v, int64_t new_stride, const int32_t *seq,
                           const int32_t *pos, int64_t T)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= T * kv_dim)
        return;
    const int64_t t = id / kv_dim, c = id % kv_dim;
    const int64_t at = ((int64_t)seq[t] * n_ctx + pos[t]) * kv_dim + c;
    kc[at] = k[t * new_stride + c];
    vc[at] = v[t * new_stride + c];
}

extern "C" void kc_kv_store(kc_stream *s, const struct kc_kv *kv, const float *k_new,
                            const float *v_new, int64_t new_stride, const int32_t *seq,
                            const int32_t *pos, int64_t T)
{
    if (T <= 0)
        return;
    k_kv_store<<<kc__blocks(T * kv->kv_dim, 256), 256, 0, s->st>>>(
        kv->k, kv->v, kv->n_ctx, kv->kv_dim, k_new, v_new, new_stride, seq, pos, T);
    KC_LAUNCHED();
}

/* The device interface's int64 positions [T] as the int32 positions and visible lengths
 * (pos + 1, the causal mask) that kc_kv_store and kc_attention take. */
__global__ void k_pos_n_kv(const int64_t *pos, int64_t T, int32_t *pos32, int32_t *n_kv)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T)
        return;
    pos32[t] = (int32_t)pos[t];
    n_kv[t] = (int32_t)(pos[t] + 1);
}

extern "C" void kc_pos_n_kv(kc_stream *s, const int64_t *pos, int64_t T, int32_t *pos32,
                            int32_t *n_kv)
{
    if (T <= 0)
        return;
    k_pos_n_kv<<<kc__blocks(T, 256), 256, 0, s->st>>>(pos, T, pos32, n_kv);
    KC_LAUNCHED();
}

__global__ void __launch_bounds__(32 * ATT_WARPS)
    k_attention(const float *kc, const float *vc, int64_t n_ctx, int64_t kv_dim, const float *q,
                int64_t q_tok, int64_t q_head, const float *gate, const int32_t *seq,
                const int32_t *n_kv, int64_t H, int64_t Hkv, int64_t D, float scale, float *out,
                int64_t out_tok)
{
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS], sm_acc[ATT_WARPS][ATT_DMAX];
    const int64_t t = blockIdx.x, h = blockIdx.y, j = h / (H / Hkv);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const float *qr = q + t * q_tok + h * q_head;
    const float *kb = kc + (int64_t)seq[t] * n_ctx * kv_dim + j * D;
    const float *vb = vc + (int64_t)seq[t] * n_ctx * kv_dim + j * D;
    float qv[ATT_PER_LANE], acc[ATT_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        const int64_t d = lane + 32 * i;
        qv[i] = d < D ? qr[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t nk = n_kv[t];
    for (int64_t p = w; p < nk; p += ATT_WARPS) {
        const float *kr = kb + p * kv_dim, *vr = vb + p * kv_dim;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            const int64_t d = lane + 32 * i;
            if (d < D)
                part += qv[i] * kr[d];
        }
        const float sc = kc__warp_sum(part) * scale;
        const float m_new = fmaxf(m, sc);
        const float corr = expf(m - m_new), pr = expf(sc - m_new);
        l = l * corr + pr;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            const int64_t d = lane + 32 * i;
            acc[i] = acc[i] * corr + (d < D ? pr * vr[d] : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0)
        sm_m[w] = m, sm_l[w] = l;
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++)
        sm_acc[w][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < ATT_WARPS; k++)
        M = fmaxf(M, sm_m[k]);
    float L = 0.0f, f[ATT_WARPS];
    for (int k = 0; k < ATT_WARPS; k++) {
        f[k] = sm_m[k] == -INFINITY ? 0.0f : expf(sm_m[k] - M); /* a warp without positions */
        L += sm_l[k] * f[k];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    float *orow = out + t * out_tok + h * D;
    const float *grow = gate ? gate + t * q_tok + h * q_head : NULL;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int k = 0; k < ATT_WARPS; k++)
            o += sm_acc[k][d] * f[k];
        o *= inv;
        if (grow)
            o *= kc__sigmoid(grow[d]);
        orow[d] = o;
    }
}

extern "C" void kc_attention(kc_stream *s, const struct kc_kv *kv, const float *q, int64_t q_tok,
                             int64_t q_head, const float *gate, const int32_t *seq,
                             const int32_t *n_kv, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                             float scale, float *out, int64_t out_tok)
{
    if (T <= 0 || H <= 0)
        return;
    KC_REQUIRE(D > 0 && D <= ATT_DMAX && Hkv > 0 && H % Hkv == 0 && H <= 65535);
    const dim3 grid((unsigned)T, (unsigned)H);
    k_attention<<<grid, 32 * ATT_WARPS, 0, s->st>>>(kv->k, kv->v, kv->n_ctx, kv->kv_dim, q, q_tok,
                                                    q_head, gate, seq, n_kv, H, Hkv, D, scale, out,
                                                    out_tok);
    KC_LAUNCHED();
}
