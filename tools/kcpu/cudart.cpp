/*
 * cudart — the fake CUDA runtime of the kcpu emulation: KCPU_DEVICES (default 4) devices whose
 * memory is host memory, streams that run their work at once, and graph capture.
 *
 * Device memory: cudaMalloc returns 256-byte aligned host memory filled with 0xFF bytes, so
 * an output a kernel forgot to write reads as NaN. Every allocation is tracked: copies check
 * their direction (a "device" side must lie inside one live allocation, a "host" side must not
 * be device memory) and kernel arguments must be device memory (sched.cpp), which catches a
 * host pointer handed to a kernel. Pinned host memory (cudaMallocHost) counts as host memory.
 * Each allocation belongs to the GPU current when it was made: a kernel argument, a cuBLAS
 * operand or an NCCL buffer of another GPU than the one the work runs on is an error (kcpu has
 * no peer access), and so is a launch into a stream of another GPU than the current one, as in
 * CUDA. Copies may cross GPUs (unified addressing).
 *
 * Streams: work runs synchronously on the calling thread, so every stream is trivially ordered.
 * While a stream captures (cudaStreamBeginCapture .. EndCapture), launches, copies, memsets and
 * GEMMs on it are recorded instead of run (a kernel's arguments by value, a copy's pointers:
 * what the bytes are at launch, as on a GPU); cudaGraphLaunch replays them in order. What a GPU
 * refuses during a capture is an error here too: a synchronisation of the capturing stream, a
 * copy between it and pageable host memory (only cudaMallocHost memory may take part), and
 * cudaMalloc / cudaFree on a thread that captures (cudaStreamCaptureModeThreadLocal).
 *
 * Thread safety: the allocation table has a mutex; the current device and last error are per
 * OS thread (as in CUDA); a stream is used by one thread at a time.
 */
#include <map>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "kcpu_impl.h" // defines: kcpu::die, kcpu::is_device

struct kcpu_stream {
    int device;
    bool capturing;
    std::vector<std::function<void()>> rec; /* the capture so far */
};

struct kcpu_graph {
    std::vector<std::function<void()>> ops;
};

namespace kcpu
{

struct alloc {
    size_t bytes;
    int device;
};

static std::mutex mem_mu;
static std::map<uintptr_t, alloc> dev_mem;   /* base -> size, every live cudaMalloc */
static std::map<uintptr_t, size_t> host_mem; /* every live cudaMallocHost */
static __thread int cur_device;
static __thread cudaError_t last_error;
static __thread int captures_here; /* streams this thread is capturing */

cudaError_t set_error(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

/* The allocation containing p (one past the end included when end_ok), or NULL. */
static const std::pair<const uintptr_t, alloc> *find(const void *p, bool end_ok)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = dev_mem.upper_bound(a);
    if (it == dev_mem.begin())
        return NULL;
    --it;
    const uintptr_t end = it->first + it->second.bytes;
    return a < end || (end_ok && a == end) ? &*it : NULL;
}

bool is_device(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> lk(mem_mu);
    const auto *a = find(p, bytes == 0);
    return a && (uintptr_t)p + bytes <= a->first + a->second.bytes;
}

bool is_device_ptr(const void *p)
{
    std::lock_guard<std::mutex> lk(mem_mu);
    return find(p, true) != NULL;
}

int device_of(const void *p)
{
    std::lock_guard<std::mutex> lk(mem_mu);
    const auto *a = find(p, true);
    return a ? a->second.device : -1;
}

int current_device()
{
    return cur_device;
}

int stream_device(cudaStream_t st)
{
    return st ? st->device : cur_device;
}

void enqueue(cudaStream_t st, std::function<void()> op)
{
    if (st && st->capturing)
        st->rec.push_back(std::move(op));
    else
        op();
}

static int n_devices_parse()
{
    const char *e = getenv("KCPU_DEVICES");
    const int v = e ? atoi(e) : 4;
    return v < 0 ? 0 : v > 64 ? 64 : v;
}

static int n_devices()
{
    static const int n = n_devices_parse(); /* once, thread-safe */
    return n;
}

} // namespace kcpu

using namespace kcpu;

/* ---- errors, devices ------------------------------------------------------------------------- */

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define KCPU_ERR(x)                                                                                \
    case x:                                                                                        \
        return #x;
        KCPU_ERR(cudaSuccess)
        KCPU_ERR(cudaErrorInvalidValue)
        KCPU_ERR(cudaErrorMemoryAllocation)
        KCPU_ERR(cudaErrorInvalidConfiguration)
        KCPU_ERR(cudaErrorInvalidDevicePointer)
        KCPU_ERR(cudaErrorInvalidMemcpyDirection)
        KCPU_ERR(cudaErrorNoDevice)
        KCPU_ERR(cudaErrorInvalidDevice)
        KCPU_ERR(cudaErrorInvalidResourceHandle)
        KCPU_ERR(cudaErrorNotSupported)
        KCPU_ERR(cudaErrorStreamCaptureUnsupported)
        KCPU_ERR(cudaErrorStreamCaptureInvalidated)
        KCPU_ERR(cudaErrorIllegalAddress)
#undef KCPU_ERR
    }
    return "cudaErrorUnknown";
}

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
        return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
        return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected (kcpu: KCPU_DEVICES=0)";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotSupported:
        return "operation not supported";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    }
    return "unknown error";
}

extern "C" cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

extern "C" cudaError_t cudaGetDeviceCount(int *n)
{
    *n = n_devices();
    return *n ? cudaSuccess : set_error(cudaErrorNoDevice);
}

extern "C" cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= n_devices())
        return set_error(cudaErrorInvalidDevice);
    cur_device = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    *device = cur_device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    if (device < 0 || device >= n_devices())
        return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "kcpu emulated GPU %d", device);
    p->totalGlobalMem = (size_t)16 << 30;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}

/* A bus id no host has (domain ffff), so topology lookups find no locality for it. */
extern "C" cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device)
{
    if (device < 0 || device >= n_devices())
        return set_error(cudaErrorInvalidDevice);
    if (!buf || len < 13)
        return set_error(cudaErrorInvalidValue);
    snprintf(buf, (size_t)len, "ffff:%02x:00.0", device);
    return cudaSuccess;
}

/* The current device's 16 GiB (cudaGetDeviceProperties) less its live allocations. */
extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    const size_t total = (size_t)16 << 30;
    size_t used = 0;
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        for (const auto &a : dev_mem)
            used += a.second.device == cur_device ? a.second.bytes : 0;
    }
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* One byte more than asked: the address one past the end (a valid kernel argument) then lies
 * in this allocation and never starts the next one, which a sanitizer's allocator may place
 * right there; the exact size keeps ASan's bounds at the end of the buffer. */
extern "C" cudaError_t cudaMalloc(void **p, size_t bytes)
{
    void *m = NULL;
    if (captures_here) {
        warn("cudaMalloc while this thread captures a graph");
        *p = NULL;
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (posix_memalign(&m, 256, bytes + 1)) {
        *p = NULL;
        return set_error(cudaErrorMemoryAllocation);
    }
    memset(m, 0xFF, bytes + 1);
    std::lock_guard<std::mutex> lk(mem_mu);
    dev_mem[(uintptr_t)m] = alloc{bytes, cur_device};
    *p = m;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    if (captures_here) {
        warn("cudaFree while this thread captures a graph");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        auto it = dev_mem.find((uintptr_t)p);
        if (it == dev_mem.end()) {
            warn("cudaFree(%p): not the start of a live device allocation", p);
            return set_error(cudaErrorInvalidDevicePointer);
        }
        dev_mem.erase(it);
    }
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lk(mem_mu);
    host_mem[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        if (!host_mem.erase((uintptr_t)p)) {
            warn("cudaFreeHost(%p): not a cudaMallocHost allocation", p);
            return set_error(cudaErrorInvalidValue);
        }
    }
    free(p);
    return cudaSuccess;
}

/* Does [p, p + bytes) lie inside one cudaMallocHost allocation? */
static bool is_pinned(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = host_mem.upper_bound((uintptr_t)p);
    if (it == host_mem.begin())
        return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second;
}

/* A copy's pointer checks: the device side inside one allocation, the host side outside. */
static cudaError_t check_side(const char *what, const void *p, size_t bytes, bool dev)
{
    if (dev ? is_device(p, bytes) : !is_device_ptr(p))
        return cudaSuccess;
    warn("%s: %p (%zu bytes) is %s", what, p, bytes,
         dev ? "not inside one device allocation" : "device memory where host memory is expected");
    return set_error(dev ? cudaErrorInvalidDevicePointer : cudaErrorInvalidMemcpyDirection);
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                       enum cudaMemcpyKind kind, cudaStream_t st)
{
    if (!bytes)
        return cudaSuccess;
    if (kind == cudaMemcpyDefault)
        kind = (cudaMemcpyKind)((is_device_ptr(src) ? 2 : 0) + (is_device_ptr(dst) ? 1 : 0));
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
        return set_error(cudaErrorInvalidMemcpyDirection);
    const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    cudaError_t e = check_side("cudaMemcpy source", src, bytes, src_dev);
    if (e == cudaSuccess)
        e = check_side("cudaMemcpy destination", dst, bytes, dst_dev);
    if (e != cudaSuccess)
        return e;
    const void *host = !src_dev ? src : !dst_dev ? dst : NULL;
    if (st && st->capturing && host && !is_pinned(host, bytes)) {
        warn("cudaMemcpyAsync of pageable host memory %p (%zu bytes) into a graph capture", host,
             bytes);
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    enqueue(st, [=]() { memmove(dst, src, bytes); });
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                                  enum cudaMemcpyKind kind)
{
    return cudaMemcpyAsync(dst, src, bytes, kind, NULL);
}

extern "C" cudaError_t cudaMemsetAsync(void *dst, int byte, size_t bytes, cudaStream_t st)
{
    if (!bytes)
        return cudaSuccess;
    const cudaError_t e = check_side("cudaMemset", dst, bytes, true);
    if (e != cudaSuccess)
        return e;
    enqueue(st, [=]() { memset(dst, byte, bytes); });
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void *dst, int byte, size_t bytes)
{
    return cudaMemsetAsync(dst, byte, bytes, NULL);
}

/* ---- streams and graphs ---------------------------------------------------------------------- */

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
    *st = new kcpu_stream{cur_device, false, {}};
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *st)
{
    return cudaStreamCreateWithFlags(st, cudaStreamDefault);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    delete st;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    if (st && st->capturing) {
        warn("cudaStreamSynchronize on a stream that is capturing a graph");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
    if (!st || st->capturing) {
        warn("cudaStreamBeginCapture: %s", st ? "the stream already captures" : "legacy stream");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    st->capturing = true;
    st->rec.clear();
    captures_here++;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g)
{
    if (!st || !st->capturing) {
        warn("cudaStreamEndCapture without cudaStreamBeginCapture");
        return set_error(cudaErrorInvalidValue);
    }
    st->capturing = false;
    captures_here--;
    *g = new kcpu_graph{std::move(st->rec)};
    st->rec.clear();
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                            unsigned long long flags)
{
    *exec = new kcpu_graph{g->ops};
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    for (auto &op : exec->ops)
        enqueue(st, op);
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}
