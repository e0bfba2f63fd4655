// kc_moe — mixture-of-experts routing and dispatch (docs/models.md 5.6; contracts in kcuda.h):
// top-k routing per row, grouping of the choices by expert for the prefill GEMMs, row gather,
// and the weighted combination with the gated shared expert. The expert products themselves
// are kc_matvec_ids (decode) or kc_gemm per expert (prefill).
//
// Routing follows the CPU forward's arithmetic: the softmax denominator and each weight in
// double from exp(logit - max), ties to the lower expert index, renormalisation by
// max(sum, 6.1e-5), then the choices sorted by expert so the combination sums in expert order.
#include "kcuda_impl.cuh" // defines: struct kc_stream

#define ROUTE_KMAX 16

/* ptxas-local: k_moe_route — the chosen experts sel[] and weights w[] (ROUTE_KMAX each) are
 * indexed by the run-time k, so they cannot live in registers; 128 bytes per thread. */
/* One warp per row. */
__global__ void k_moe_route(const float *logits, int64_t T, int64_t Nx, int64_t k, int32_t *route_e,
                            float *route_w)
{
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (t >= T)
        return;
    const float *lg = logits + t * Nx;
    float mx = -INFINITY;
    for (int64_t e = lane; e < Nx; e += 32)
        mx = fmaxf(mx, lg[e]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0.0;
    for (int64_t e = lane; e < Nx; e += 32)
        sum += exp((double)lg[e] - mx);
    sum = kc__warp_sum_d(sum);
    int32_t sel[ROUTE_KMAX];
    float w[ROUTE_KMAX];
    double wsum = 0.0;
    for (int64_t i = 0; i < k; i++) {
        float bv = -INFINITY;
        int32_t bi = -1;
        for (int64_t e = lane; e < Nx; e += 32) {
            bool taken = false;
            for (int64_t q = 0; q < i; q++)
                taken |= sel[q] == e;
            if (!taken && (bi < 0 || lg[e] > bv))
                bv = lg[e], bi = (int32_t)e;
        }
        for (int o = 16; o > 0; o >>= 1) { /* larger value wins, ties to the lower index */
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
                bv = ov, bi = oi;
        }
        sel[i] = bi;
        w[i] = (float)(exp((double)lg[bi] - mx) / sum);
        wsum += w[i];
    }
    if (lane != 0)
        return;
    const float denom = (float)(wsum > 6.1e-5 ? wsum : 6.1e-5);
    for (int64_t i = 0; i < k; i++)
        w[i] /= denom;
    for (int64_t i = 1; i < k; i++) /* insertion sort by expert, weights alongside */
        for (int64_t j = i; j > 0 && sel[j - 1] > sel[j]; j--) {
            const int32_t te = sel[j];
            const float tw = w[j];
            sel[j] = sel[j - 1], w[j] = w[j - 1];
            sel[j - 1] = te, w[j - 1] = tw;
        }
    for (int64_t i = 0; i < k; i++) {
        route_e[t * k + i] = sel[i];
        route_w[t * k + i] = w[i];
    }
}

extern "C" void kc_moe_route(kc_stream *s, const float *logits, int64_t T, int64_t Nx, int64_t k,
                             int32_t *route_e, float *route_w)
{
    if (T <= 0)
        return;
    KC_REQUIRE(Nx > 0 && Nx <= 1024 && k >= 1 && k <= ROUTE_KMAX && k <= Nx);
    k_moe_route<<<kc__blocks(T, 4), 128, 0, s->st>>>(logits, T, Nx, k, route_e, route_w);
    KC_LAUNCHED();
}

/* One block: thread e counts its expert's choices, thread 0 scans, thread e then hands out its
 * slots in row order. */
__global__ void k_moe_dispatch(const int32_t *route_e, int64_t n, int64_t Nx, int32_t *e_off,
                               int32_t *slot, int32_t *e_row, int64_t k)
{
    for (int64_t e = threadIdx.x; e < Nx; e += blockDim.x) {
        int32_t c = 0;
        for (int64_t i = 0; i < n; i++)
            c += route_e[i] == e;
        e_off[e + 1] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        e_off[0] = 0;
        for (int64_t e = 0; e < Nx; e++)
            e_off[e + 1] += e_off[e];
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < Nx; e += blockDim.x) {
        int32_t next = e_off[e];
        for (int64_t i = 0; i < n; i++)
            if (route_e[i] == e) {
                slot[i] = next;
                e_row[next++] = (int32_t)(i / k);
            }
    }
}

extern "C" void kc_moe_dispatch(kc_stream *s, const int32_t *route_e, int64_t T, int64_t k,
                                int64_t Nx, int32_t *e_off, int32_t *slot, int32_t *e_row)
{
    if (Nx <= 0)
        return;
    k_moe_dispatch<<<1, 1024, 0, s->st>>>(route_e, T * k, Nx, e_off, slot, e_row, k);
    KC_LAUNCHED();
}

/* ids [s] = the expert whose slots e_off[e] .. e_off[e+1]-1 hold slot s (binary search). */
__global__ void k_slot_experts(const int32_t *e_off, int64_t Nx, int64_t n, int32_t *ids)
{
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n)
        return;
    int64_t lo = 0, hi = Nx; /* the last e with e_off[e] <= s */
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (e_off[mid] <= s)
            lo = mid;
        else
            hi = mid;
    }
    ids[s] = (int32_t)lo;
}

extern "C" void kc_slot_experts(kc_stream *s, const int32_t *e_off, int64_t Nx, int64_t n,
                                int32_t *ids)
{
    if (n <= 0 || Nx <= 0)
        return;
    k_slot_experts<<<kc__blocks(n, 128), 128, 0, s->st>>>(e_off, Nx, n, ids);
    KC_LAUNCHED();
}

__global__ void k_gather(const float *x, const int32_t *idx, int64_t n, int64_t E, float *out)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n * E)
        return;
    out[id] = x[(int64_t)idx[id / E] * E + id % E];
}

extern "C" void kc_gather_rows(kc_stream *s, const float *x, const int32_t *idx, int64_t n,
                               int64_t E, float *out)
{
    if (n * E <= 0)
        return;
    k_gather<<<kc__blocks(n * E, 256), 256, 0, s->st>>>(x, idx, n, E, out);
    KC_LAUNCHED();
}

/* One block of 256 per row: out [t] = sigmoid(w . x_t) with the dot in double; reference:
 * dev_cpu__shexp_gate (kop_sigmoid). */
__global__ void k_shexp_gate(const float *w, const float *x, int64_t E, float *out)
{
    const int64_t t = blockIdx.x;
    double dot = 0.0;
    for (int64_t i = threadIdx.x; i < E; i += blockDim.x)
        dot += (double)w[i] * x[t * E + i];
    dot = kc__block_sum_d(dot);
    if (threadIdx.x == 0)
        out[t] = kc__sigmoid((float)dot);
}

extern "C" void kc_shexp_gate(kc_stream *s, const float *w, const float *x, int64_t T, int64_t E,
                              float *out)
{
    if (T <= 0)
        return;
    k_shexp_gate<<<(unsigned)T, 256, 0, s->st>>>(w, x, E, out);
    KC_LAUNCHED();
}

/* Row moves that may run in place (dst == src): one block walks the rows in the order of the
 * reference (gather ascending, scatter descending), a barrier after each row, so a row is read
 * before a later one overwrites it. References: dev_cpu__gather_rows, dev_cpu__scatter_rows. */
__global__ void k_move_rows(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t w,
                            int scatter)
{
    for (int64_t r = 0; r < n; r++) {
        const int64_t i = scatter ? n - 1 - r : r;
        float *d = dst + (scatter ? (int64_t)idx[i] : i) * w;
        const float *sr = src + (scatter ? i : (int64_t)idx[i]) * w;
        for (int64_t c = threadIdx.x; c < w; c += blockDim.x)
            d[c] = sr[c]; /* rows are whole: d and sr are one row or disjoint */
        __syncthreads();
    }
}

extern "C" void kc_move_rows(kc_stream *s, float *dst, const float *src, const int32_t *idx,
                             int64_t n, int64_t w, int scatter)
{
    if (n * w <= 0)
        return;
    k_move_rows<<<1, 256, 0, s->st>>>(dst, src, idx, n, w, scatter);
    KC_LAUNCHED();
}

__global__ void k_moe_combine(const float *shared, const float *sh_gate, const float *route_w,
                              const int32_t *slot, const float *eout, int64_t T, int64_t k,
                              int64_t E, float *out)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= T * E)
        return;
    const int64_t t = id / E, c = id % E;
    float o = shared ? __fmul_rn(shared[id], sh_gate[t]) : 0.0f;
    for (int64_t i = 0; i < k; i++) {
        const int64_t j = slot ? slot[t * k + i] : t * k + i;
        o = __fadd_rn(o, __fmul_rn(route_w[t * k + i], eout[j * E + c]));
    }
    out[id] = o;
}

extern "C" void kc_moe_combine(kc_stream *s, const float *shared, const float *sh_gate,
                               const float *route_w, const int32_t *slot, const float *eout,
                               int64_t T, int64_t k, int64_t E, float *out)
{
    if (T * E <= 0)
        return;
    k_moe_combine<<<kc__blocks(T * E, 256), 256, 0, s->st>>>(shared, sh_gate, route_w, slot, eout,
                                                             T, k, E, out);
    KC_LAUNCHED();
}
