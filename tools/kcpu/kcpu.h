/*
 * kcpu.h — CUDA-on-CPU emulation: the device side of the CUDA language for g++ (-std=c++17).
 * `make KCPU=1` force-includes it (-include tools/kcpu/kcpu.h) into each kernels/cuda .cu after
 * tools/kcpu/rewrite.py has turned each `k<<<grid, block, shmem, stream>>>(args)` into
 * `kcpu::launch(site, k, kcpu::cfg(grid, block, shmem, stream), args)`. The .cu files stay
 * unmodified.
 *
 * Execution model (tools/kcpu/sched.cpp): a launch deals its blocks out to KCPU_THREADS OS
 * threads (default the number of cores, at least 2, the launching thread among them) and
 * returns when all have finished; a block runs whole on one OS thread, every CUDA thread of it
 * a fiber with its own stack. A fiber runs until it reaches __syncthreads (a block barrier),
 * a warp collective (__shfl_*_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp:
 * computed once every lane of the mask has arrived) or its end; the scheduler then runs the
 * next fiber. KCPU_ORDER=forward|reverse|shuffle picks the order in which runnable fibers run
 * between those points, so kernels that depend on an unsynchronised order show up as
 * differences between the three runs; blocks of one grid really run at once, so cross-block
 * races can show (and are TSan reports in the SANITIZE=thread build).
 *
 * __shared__ memory is per block: rewrite.py turns each `__shared__ T a[N], b;` into
 * KCPU_SHARED(T, a, [N]); KCPU_SHARED(T, b, ) — a reference to the running block's heap copy
 * (0xFF-filled, bounds known to ASan). An unrewritten __shared__ (a header the Makefile does
 * not rewrite) still works as a thread-local static, since an OS thread runs one block at a
 * time. Plain loads and stores are the host's; atomics are real host atomics.
 *
 * Errors (a lane missing from a warp op's mask, a lane that exited before a warp op all other
 * lanes wait at, a barrier some lanes never reach, a kernel argument that is not memory of the
 * launching GPU) print the kernel, its source line, the block and the thread, then abort.
 */
#ifndef KCPU_H
#define KCPU_H

#ifndef __cplusplus
#error "kcpu.h is for the C++ (g++) compilation of kernels/cuda"
#endif

#include <functional>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_bf16.h"    // defines: __nv_bfloat16
#include "cuda_fp16.h"    // defines: __half
#include "cuda_runtime.h" // defines: cudaStream_t, cudaError_t

/* ---- the language ---------------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
/* Block-shared, for declarations rewrite.py left alone: one block per OS thread at a time, so
 * a thread-local static is per block. */
#define __shared__ static thread_local
/* A rewritten `__shared__ T name dims;`: the block's copy, keyed by a static per declaration. */
#define KCPU_SHARED(T, name, dims)                                                                 \
    static char kcpu_shared_key_##name;                                                            \
    T(&name) dims = *(T(*) dims)kcpu::shared(&kcpu_shared_key_##name, sizeof(T dims))

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz)
    {
    }
};

namespace kcpu
{

/* Where a launch was written (rewrite.py fills it in): the kernel expression and its line. */
struct site {
    const char *name;
    const char *file;
    int line;
};

/* The execution configuration of one launch. */
struct cfg {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    cfg(dim3 g, dim3 b, size_t sh = 0, cudaStream_t st = nullptr)
        : grid(g), block(b), shmem(sh), stream(st)
    {
    }
};

/* What a running CUDA thread sees; `cur` points at the running fiber's (set on every switch). */
struct block_info {
    uint3 idx;
    dim3 dim, grid;
};
struct thread_info {
    uint3 tid;
    const block_info *blk;
};
extern __thread thread_info *cur;

/* ---- runtime entry points (sched.cpp, cudart.cpp) -------------------------------------------- */

/* Runs the grid of c: body(ctx) once per CUDA thread. Aborts on a scheduling error. */
void run_grid(const site &s, const cfg &c, void (*body)(void *), void *ctx);
/* False (and the launch error set) when c is not a valid configuration. */
bool check_cfg(const site &s, const cfg &c);
/* Aborts when p (argument i of the kernel at s) is neither NULL nor device memory. */
void check_arg(const site &s, int i, const void *p);
/* Runs op now, or records it when st is capturing a graph. */
void enqueue(cudaStream_t st, std::function<void()> op);

enum warp_kind { W_SHFL, W_SHFL_XOR, W_SHFL_UP, W_SHFL_DOWN, W_BALLOT, W_ANY, W_ALL, W_SYNC };
/* The collective kind over the lanes of mask; every lane passes its value (and source lane or
 * offset in arg); returns this lane's result once all lanes of mask have arrived. */
uint64_t warp_op(int kind, unsigned mask, uint64_t val, int arg, int width, int size);
void syncthreads();
/* The running block's copy of the __shared__ variable whose declaration key names. */
void *shared(const void *key, size_t bytes);

template <class F> void thunk(void *f)
{
    (*(F *)f)();
}

template <class Tup, size_t... I>
void check_args(const site &s, const Tup &t, std::index_sequence<I...>)
{
    (
        [&] {
            using T = std::tuple_element_t<I, Tup>;
            if constexpr (std::is_pointer_v<T>)
                check_arg(s, (int)I, (const void *)std::get<I>(t));
        }(),
        ...);
}

/* k<<<c>>>(a...): the arguments convert to the kernel's parameter types at the launch, as in
 * CUDA, and are kept by value (a captured graph replays them). */
template <class... P, class... A>
void launch(const site &s, void (*k)(P...), const cfg &c, A &&...a)
{
    if (!check_cfg(s, c))
        return;
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    check_args(s, args, std::index_sequence_for<P...>{});
    enqueue(c.stream, [s, c, k, args]() {
        auto call = [&]() { std::apply(k, args); };
        run_grid(s, c, &thunk<decltype(call)>, &call);
    });
}

template <class T> T warp_t(int kind, unsigned mask, T v, int arg, int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp op on a large type");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = warp_op(kind, mask, u, arg, width, (int)sizeof(T));
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}

} // namespace kcpu

#define threadIdx (static_cast<const kcpu::thread_info *>(kcpu::cur)->tid)
#define blockIdx (kcpu::cur->blk->idx)
#define blockDim (kcpu::cur->blk->dim)
#define gridDim (kcpu::cur->blk->grid)
#define __syncthreads() kcpu::syncthreads()

static const int warpSize = 32;

/* ---- warp collectives ------------------------------------------------------------------------ */

template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return kcpu::warp_t(kcpu::W_SHFL, mask, v, src, width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    return kcpu::warp_t(kcpu::W_SHFL_XOR, mask, v, lane_mask, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return kcpu::warp_t(kcpu::W_SHFL_UP, mask, v, (int)delta, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return kcpu::warp_t(kcpu::W_SHFL_DOWN, mask, v, (int)delta, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)kcpu::warp_op(kcpu::W_BALLOT, mask, pred != 0, 0, 32, 4);
}
inline int __any_sync(unsigned mask, int pred)
{
    return (int)kcpu::warp_op(kcpu::W_ANY, mask, pred != 0, 0, 32, 4);
}
inline int __all_sync(unsigned mask, int pred)
{
    return (int)kcpu::warp_op(kcpu::W_ALL, mask, pred != 0, 0, 32, 4);
}
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    kcpu::warp_op(kcpu::W_SYNC, mask, 0, 0, 32, 4);
}

/* ---- math intrinsics (the host's libm and IEEE arithmetic; no FMA contraction in ISO C++) ---- */

inline float __fmul_rn(float a, float b)
{
    return a * b;
}
inline float __fadd_rn(float a, float b)
{
    return a + b;
}
inline float __fsub_rn(float a, float b)
{
    return a - b;
}
inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
inline float __fmaf_rn(float a, float b, float c)
{
    return fmaf(a, b, c);
}
inline float __fdividef(float a, float b)
{
    return a / b;
}
inline float __expf(float x)
{
    return expf(x);
}
inline float __logf(float x)
{
    return logf(x);
}
inline float __sinf(float x)
{
    return sinf(x);
}
inline float __cosf(float x)
{
    return cosf(x);
}
inline float __powf(float a, float b)
{
    return powf(a, b);
}
inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
inline float __saturatef(float x)
{
    return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
}
inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __int_as_float(int32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline int32_t __float_as_int(float f)
{
    int32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- atomics (real host atomics: correct whether blocks share an OS thread or not) ----------- */

template <class T> inline T atomicAdd(T *p, T v)
{
    if constexpr (std::is_floating_point_v<T>) {
        T old, nv;
        __atomic_load(p, &old, __ATOMIC_RELAXED);
        do
            nv = old + v;
        while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        return old;
    } else {
        return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    }
}
template <class T> inline T atomicMax(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v &&
           !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
template <class T> inline T atomicCAS(T *p, T cmp, T v)
{
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
template <class T> inline T atomicExch(T *p, T v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

#endif
