// kc_gdn — the Gated DeltaNet layer's sequence ops: the beta / decay gates, the causal conv
// with its state snapshots, and the gated delta rule recurrence that writes the SSM snapshot
// groups of a verification batch straight into the state cache (contracts in kcuda.h; math in
// docs/models.md 5.4, snapshot rules in docs/parallelism-and-speculation.md 2.2-2.3).
//
// Conv: one thread per (run, channel) walks the run's tokens; it owns its channel in every
// snapshot group, reads the source group's K-1 values before writing any group, and so needs
// no ordering between threads even when the source group is also a destination.
//
// Recurrence: one block per (run, value head, 32 value columns); lane = value column j, the
// GDN_WARPS warps split the key index i, so loads of M[i][j] are coalesced. Each thread keeps
// its keys' state in registers across the run. Per token: decay, the two column reductions
// (M^T k and M^T q) through shared memory, the rank-1 update, and the snapshot stores. The
// block is the sole owner of its (run, head, columns) in every group.
//
// TODO(issue 8): the chunked form (docs/models.md 6) for long prefills, with tensor cores.
#include "kcuda_impl.cuh" // defines: kc__sigmoid, struct kc_stream

/* ---- gates ---------------------------------------------------------------------------------- */

__global__ void k_gdn_gates(const float *b, const float *al, const float *ba, const float *a_log,
                            const float *dt, int64_t T, int64_t Hv, int64_t r, float *beta,
                            float *decay)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= T * Hv)
        return;
    const int64_t t = id / Hv, h = id % Hv, gk = h / r, j = h % r;
    const float bv = ba ? ba[t * 2 * Hv + 2 * r * gk + j] : b[id];
    const float av = ba ? ba[t * 2 * Hv + 2 * r * gk + r + j] : al[id];
    const float x = __fadd_rn(av, dt[h]);
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    beta[id] = kc__sigmoid(bv);
    decay[id] = expf(__fmul_rn(a_log[h], sp));
}

extern "C" void kc_gdn_gates(kc_stream *s, const float *b, const float *alpha, const float *ba,
                             const float *a_log, const float *dt_bias, int64_t T, int64_t Hv,
                             int64_t Hk, float *beta, float *decay)
{
    if (T * Hv <= 0)
        return;
    KC_REQUIRE(Hk > 0 && Hv % Hk == 0);
    k_gdn_gates<<<kc__blocks(T * Hv, 256), 256, 0, s->st>>>(b, alpha, ba, a_log, dt_bias, T, Hv,
                                                            Hv / Hk, beta, decay);
    KC_LAUNCHED();
}

/* ---- causal conv ----------------------------------------------------------------------------- */

#define CONV_KMAX 16

/* ptxas-local: k_conv — the window st[] and taps wc[] (CONV_KMAX floats each) are indexed by
 * the run-time kernel size, so they cannot live in registers; 128 bytes per thread, L1-resident. */
__global__ void k_conv(const float *u, const float *w, int64_t C, int64_t K,
                       const struct kc_run *runs, float *conv, int64_t group_stride,
                       int64_t seq_stride, int64_t n_groups, float *y)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const struct kc_run ru = runs[blockIdx.y];
    const int64_t T = ru.t1 - ru.t0;
    const float *src = conv + ru.src_group * group_stride + ru.seq * seq_stride;
    float st[CONV_KMAX], wc[CONV_KMAX];
    for (int j = 0; j < K; j++)
        wc[j] = w[c * K + j];
    for (int j = 0; j < K - 1; j++)
        st[j] = src[j * C + c];
    const float *ur = u + ru.t0 * C + c;
    /* output t sees virtual rows t .. t+K-1 of [state ; u]; tap j multiplies row t+j */
    for (int64_t t = 0; t < T; t++) {
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            const int64_t vr = t + j;
            const float x = vr < K - 1 ? st[vr] : ur[(vr - (K - 1)) * C];
            acc = __fadd_rn(acc, __fmul_rn(wc[j], x));
        }
        y[(ru.t0 + t) * C + c] = kc__silu(acc);
    }
    /* group g: the K-1 inputs ending g tokens before the end (rows T-g .. T-g+K-2) */
    const int64_t n_snap = T < n_groups ? T : n_groups;
    for (int64_t g = 0; g < n_snap; g++) {
        float *dst = conv + g * group_stride + ru.seq * seq_stride;
        for (int r = 0; r < K - 1; r++) {
            const int64_t vr = T - g + r;
            dst[r * C + c] = vr < K - 1 ? st[vr] : ur[(vr - (K - 1)) * C];
        }
    }
}

extern "C" void kc_conv1d_silu(kc_stream *s, const float *u, const float *w, int64_t C, int64_t K,
                               const struct kc_run *runs, int64_t n_runs,
                               const struct kc_gdn_state *st, float *y)
{
    if (n_runs <= 0 || C <= 0)
        return;
    KC_REQUIRE(K >= 1 && K <= CONV_KMAX && n_runs <= 65535);
    const dim3 grid(kc__blocks(C, 128), (unsigned)n_runs);
    k_conv<<<grid, 128, 0, s->st>>>(u, w, C, K, runs, st->conv, st->group_stride, st->seq_stride,
                                    st->n_groups, y);
    KC_LAUNCHED();
}

/* ---- gated delta rule ----------------------------------------------------------------------- */

#define GDN_WARPS 4

/* KPT: keys per thread (>= S / GDN_WARPS). */
template <int KPT>
__global__ void __launch_bounds__(32 * GDN_WARPS)
    k_gdn(const float *y, int64_t C, int64_t Hk, int64_t Hv, int64_t S, int kmap_mod,
          const float *beta, const float *decay, const struct kc_run *runs, float *ssm,
          int64_t group_stride, int64_t seq_stride, int64_t n_groups, float *o)
{
    __shared__ float red0[GDN_WARPS][32], red1[GDN_WARPS][32];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int64_t h = blockIdx.x % Hv, ri = blockIdx.x / Hv;
    const int64_t j = (int64_t)blockIdx.y * 32 + lane; /* value column */
    const bool col = j < S;
    const int64_t kh = kmap_mod ? h % Hk : h / (Hv / Hk);
    const struct kc_run ru = runs[ri];
    const float scale = 1.0f / sqrtf((float)S);
    const size_t head = (size_t)h * S * S;
    const float *Min = ssm + ru.src_group * group_stride + ru.seq * seq_stride + head;
    float M[KPT];
#pragma unroll
    for (int ii = 0; ii < KPT; ii++) {
        const int64_t i = wp + GDN_WARPS * ii;
        M[ii] = col && i < S ? Min[i * S + j] : 0.0f;
    }
    for (int64_t t = ru.t0; t < ru.t1; t++) {
        const float *q = y + t * C + kh * S, *k = y + t * C + Hk * S + kh * S;
        const float v = col ? y[t * C + 2 * Hk * S + h * S + j] : 0.0f;
        const float dec = decay[t * Hv + h], bt = beta[t * Hv + h];
        float part = 0.0f;
#pragma unroll
        for (int ii = 0; ii < KPT; ii++) {
            const int64_t i = wp + GDN_WARPS * ii;
            M[ii] *= dec;
            if (i < S)
                part += k[i] * M[ii];
        }
        red0[wp][lane] = part;
        __syncthreads();
        float kM = 0.0f;
        for (int w = 0; w < GDN_WARPS; w++)
            kM += red0[w][lane];
        const float delta = bt * (v - kM);
        part = 0.0f;
#pragma unroll
        for (int ii = 0; ii < KPT; ii++) {
            const int64_t i = wp + GDN_WARPS * ii;
            if (i < S) {
                M[ii] += k[i] * delta;
                part += q[i] * M[ii];
            }
        }
        red1[wp][lane] = part;
        __syncthreads();
        if (wp == 0 && col) {
            float out = 0.0f;
            for (int w = 0; w < GDN_WARPS; w++)
                out += red1[w][lane];
            o[t * Hv * S + h * S + j] = out * scale;
        }
        /* snapshot: this state is `back` tokens before the end of the run */
        const int64_t back = ru.t1 - 1 - t;
        if (col && back < n_groups) {
            float *dst = ssm + back * group_stride + ru.seq * seq_stride + head;
#pragma unroll
            for (int ii = 0; ii < KPT; ii++) {
                const int64_t i = wp + GDN_WARPS * ii;
                if (i < S)
                    dst[i * S + j] = M[ii];
            }
        }
    }
}

extern "C" void kc_gdn(kc_stream *s, const float *y, int64_t C, int64_t Hk, int64_t Hv, int64_t S,
                       int kmap_mod, const float *beta, const float *decay,
                       const struct kc_run *runs, int64_t n_runs, const struct kc_gdn_state *st,
                       float *o)
{
    if (n_runs <= 0 || Hv <= 0)
        return;
    KC_REQUIRE(S > 0 && S <= 256 && S % 4 == 0 && Hk > 0 && Hv % Hk == 0);
    KC_REQUIRE(C >= 2 * Hk * S + Hv * S && n_runs * Hv < (1ll << 31));
    const dim3 grid((unsigned)(n_runs * Hv), kc__blocks(S, 32)), block(32 * GDN_WARPS);
    const int64_t kpt = (S + GDN_WARPS - 1) / GDN_WARPS;
#define GDN_LAUNCH(K)                                                                              \
    k_gdn<K><<<grid, block, 0, s->st>>>(y, C, Hk, Hv, S, kmap_mod, beta, decay, runs, st->ssm,     \
                                        st->group_stride, st->seq_stride, st->n_groups, o)
    if (kpt <= 4)
        GDN_LAUNCH(4);
    else if (kpt <= 8)
        GDN_LAUNCH(8);
    else if (kpt <= 16)
        GDN_LAUNCH(16);
    else if (kpt <= 32)
        GDN_LAUNCH(32);
    else
        GDN_LAUNCH(64);
#undef GDN_LAUNCH
    KC_LAUNCHED();
}
