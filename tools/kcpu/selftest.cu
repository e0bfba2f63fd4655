// selftest — kernels that check the kcpu emulation itself (built only with make KCPU=1, run by
// tests/cuda/test_kcpu.sh): `kcpu_selftest ok` checks barriers, shared memory and every warp
// collective against their definitions, that the blocks of a grid run at once on several OS
// threads (shared memory per block, real atomics) and exits 0; every other case is a broken program
// that the emulator must stop with a "kcpu:" message naming the kernel, block and thread:
//   exit-before-shfl   a lane returns while the rest of its warp waits at __shfl_xor_sync
//   mask-missing-lane  a lane calls __shfl_sync with a mask that leaves itself out
//   divergent-sync     half a warp waits at __syncthreads, the other half at a shuffle
//   exit-at-barrier    half the block returns while the other half waits at __syncthreads
//   host-pointer       a kernel gets a host pointer where device memory is expected
//   sync-in-capture    cudaStreamSynchronize while the stream captures a graph
//   copy-in-capture    a copy from pageable host memory into a graph capture
//   malloc-in-capture  cudaMalloc while the thread captures a graph
//   bad-memcpy         cudaMemcpyHostToDevice with the pointers swapped
//   other-gpu-memory   a kernel on GPU 1 gets memory of GPU 0 (kcpu has no peer access)
//   other-gpu-stream   a launch into a stream of GPU 0 while GPU 1 is current
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "selftest: %s: %s\n", #call, cudaGetErrorString(rc_));                 \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* out[t] for t < 128, four warps: a block-wide reversal through shared memory, then per warp
 * xor-shuffle sum, shfl from lane 3, up/down shuffles, ballot, any and all. */
__global__ void k_ok(const int *in, int *out)
{
    __shared__ int buf[128];
    const int t = threadIdx.x, lane = t & 31;
    buf[t] = in[t];
    __syncthreads();
    const int v = buf[127 - t];
    int s = v;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const int from3 = __shfl_sync(0xffffffffu, v, 3);
    const int up = __shfl_up_sync(0xffffffffu, v, 1), down = __shfl_down_sync(0xffffffffu, v, 1);
    const unsigned odd = __ballot_sync(0xffffffffu, v & 1);
    const int any7 = __any_sync(0xffffffffu, v == 7), all_pos = __all_sync(0xffffffffu, v >= 0);
    out[6 * t + 0] = v;
    out[6 * t + 1] = s;
    out[6 * t + 2] = from3;
    out[6 * t + 3] = lane ? up : v;
    out[6 * t + 4] = (int)odd;
    out[6 * t + 5] = (lane < 31 ? down : v) * 4 + any7 * 2 + all_pos;
}

/* Two blocks that each wait until both have started: true only when blocks run at once (kcpu
 * only: a GPU does not promise it). The wait gives up after 60 s so that a one-thread run fails
 * instead of hanging; out[b] is the number of blocks block b saw started. */
__global__ void k_meet(int *started, int *out)
{
    if (threadIdx.x == 0) {
        atomicAdd(started, 1);
        const time_t t0 = time(NULL);
        while (__atomic_load_n(started, __ATOMIC_SEQ_CST) < 2 && time(NULL) - t0 < 60)
            sched_yield();
        out[blockIdx.x] = __atomic_load_n(started, __ATOMIC_SEQ_CST);
    }
}

/* 64 blocks of 64 threads: a reversal through the block's own shared memory, and a grid-wide
 * atomic count. */
__global__ void k_blocks(int *out, int *count)
{
    __shared__ int s[64];
    const int t = threadIdx.x;
    s[t] = (int)blockIdx.x * 1000 + t;
    __syncthreads();
    out[blockIdx.x * 64 + t] = s[63 - t];
    atomicAdd(count, 1);
}

__global__ void k_exit_before_shfl(float *out)
{
    if (threadIdx.x == 5)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void k_mask_missing_lane(float *out)
{
    out[threadIdx.x] = __shfl_sync(threadIdx.x == 9 ? 0xfffffdffu : 0xffffffffu, 1.0f, 0);
}

__global__ void k_divergent_sync(float *out)
{
    if (threadIdx.x < 16)
        __syncthreads();
    else
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void k_exit_at_barrier(float *out)
{
    if (threadIdx.x >= 40)
        return;
    __syncthreads();
    out[threadIdx.x % 32] = 1.0f;
}

__global__ void k_store(float *out)
{
    out[threadIdx.x] = 1.0f;
}

static int run_ok(void)
{
    int in[128], *din, *dout, out[6 * 128];
    for (int t = 0; t < 128; t++)
        in[t] = (t * 37) % 101;
    CHECK(cudaMalloc((void **)&din, sizeof in));
    CHECK(cudaMalloc((void **)&dout, sizeof out));
    CHECK(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice));
    k_ok<<<1, 128>>>(din, dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < 128; t++) {
        const int w = t / 32, lane = t % 32, v = in[127 - t];
        int s = 0, any7 = 0, all_pos = 1;
        unsigned odd = 0;
        for (int l = 0; l < 32; l++) {
            const int u = in[127 - (32 * w + l)];
            s += u, any7 |= u == 7, all_pos &= u >= 0;
            odd |= (unsigned)(u & 1) << l;
        }
        const int up = lane ? in[127 - (t - 1)] : v, down = lane < 31 ? in[127 - (t + 1)] : v;
        const int want[6] = {v,  s,        in[127 - (32 * w + 3)],
                             up, (int)odd, down * 4 + any7 * 2 + all_pos};
        for (int i = 0; i < 6; i++)
            bad += out[6 * t + i] != want[i];
    }
    printf("%s barrier + shared + warp collectives: %d mismatches\n", bad ? "FAIL" : "ok  ", bad);
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    return bad ? 1 : 0;
}

static int run_blocks(void)
{
    int *d, meet[2], out[64 * 64], count;
    /* d: started, meet[2], count, out */
    CHECK(cudaMalloc((void **)&d, (4 + 64 * 64) * sizeof(int)));
    CHECK(cudaMemset(d, 0, 4 * sizeof(int)));
    k_meet<<<2, 32>>>(d, d + 1);
    k_blocks<<<64, 64>>>(d + 4, d + 3);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(meet, d + 1, sizeof meet, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&count, d + 3, sizeof count, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out, d + 4, sizeof out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 64 * 64; i++)
        bad += out[i] != (i / 64) * 1000 + 63 - i % 64;
    printf("%s blocks at once: both blocks saw %d and %d started (want 2); 64 blocks: %d "
           "shared-memory mismatches, atomic count %d (want 4096)\n",
           meet[0] == 2 && meet[1] == 2 && !bad && count == 4096 ? "ok  " : "FAIL", meet[0],
           meet[1], bad, count);
    CHECK(cudaFree(d));
    return meet[0] == 2 && meet[1] == 2 && !bad && count == 4096 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "ok";
    float *d, host[32];
    CHECK(cudaMalloc((void **)&d, sizeof host));
    if (!strcmp(c, "ok")) {
        CHECK(cudaFree(d));
        return run_ok() | run_blocks();
    }
    if (!strcmp(c, "exit-before-shfl"))
        k_exit_before_shfl<<<1, 32>>>(d);
    else if (!strcmp(c, "mask-missing-lane"))
        k_mask_missing_lane<<<1, 32>>>(d);
    else if (!strcmp(c, "divergent-sync"))
        k_divergent_sync<<<1, 32>>>(d);
    else if (!strcmp(c, "exit-at-barrier"))
        k_exit_at_barrier<<<1, 64>>>(d);
    else if (!strcmp(c, "host-pointer"))
        k_store<<<1, 32>>>(host);
    else if (!strcmp(c, "sync-in-capture")) {
        cudaStream_t st;
        cudaGraph_t g;
        CHECK(cudaStreamCreate(&st));
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        k_store<<<1, 32, 0, st>>>(d);
        CHECK(cudaStreamSynchronize(st));
        CHECK(cudaStreamEndCapture(st, &g));
    } else if (!strcmp(c, "copy-in-capture") || !strcmp(c, "malloc-in-capture")) {
        cudaStream_t st;
        cudaGraph_t g;
        CHECK(cudaStreamCreate(&st));
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        float *d2;
        if (!strcmp(c, "copy-in-capture"))
            CHECK(cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, st));
        else
            CHECK(cudaMalloc((void **)&d2, sizeof host));
        CHECK(cudaStreamEndCapture(st, &g));
    } else if (!strcmp(c, "bad-memcpy")) {
        CHECK(cudaMemcpy(host, d, sizeof host, cudaMemcpyHostToDevice));
    } else if (!strcmp(c, "other-gpu-memory")) {
        CHECK(cudaSetDevice(1));
        k_store<<<1, 32>>>(d);
    } else if (!strcmp(c, "other-gpu-stream")) {
        cudaStream_t st;
        CHECK(cudaStreamCreate(&st));
        CHECK(cudaSetDevice(1));
        float *d1;
        CHECK(cudaMalloc((void **)&d1, sizeof host));
        k_store<<<1, 32, 0, st>>>(d1);
        CHECK(cudaGetLastError());
    } else {
        fprintf(stderr, "selftest: unknown case %s\n", c);
        return 2;
    }
    CHECK(cudaDeviceSynchronize());
    printf("selftest: case %s was not caught\n", c);
    return 0;
}
