// kcuda — device discovery, the stream context (stream + cuBLAS + scratch), device and pinned
// memory, copies, and CUDA graph capture (contracts in kcuda.h). No kernels live here.
#include <stdio.h>
#include <stdlib.h>

#include "kcuda_impl.cuh" // defines: struct kc_stream, KC_CHECK

void kc__fail(const char *what, const char *why, const char *file, int line)
{
    fprintf(stderr, "deltad: CUDA failure: %s: %s (%s:%d)\n", what, why, file, line);
    abort();
}

extern "C" int kc_device_count(char *err, unsigned long errlen)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (err && errlen)
            snprintf(err, errlen, "%s", cudaGetErrorString(rc));
        return 0;
    }
    return n;
}

extern "C" void kc_device_describe(int device, char *buf, size_t len)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        snprintf(buf, len, "CUDA device %d (no properties)", device);
        return;
    }
    snprintf(buf, len, "%s, sm_%d%d, %.1f GiB, %d SMs", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1u << 30), p.multiProcessorCount);
}

extern "C" int kc_device_mem(int device, size_t *free_bytes, size_t *total_bytes)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess ||
        (cur != device && cudaSetDevice(device) != cudaSuccess) ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (cur >= 0 && cur != device)
        cudaSetDevice(cur);
    return 0;
}

extern "C" void kc_device_busid(int device, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (cudaDeviceGetPCIBusId(buf, (int)len, device) != cudaSuccess) {
        buf[0] = '\0';
        (void)cudaGetLastError(); /* clear it, or the next launch check reports this error */
    }
}

/* ---- streams ------------------------------------------------------------------------------ */

extern "C" int kc_stream_create(int device, size_t scratch_bytes, kc_stream **out, char *err,
                                size_t errlen)
{
    char why[256] = "";
    const int n = kc_device_count(why, sizeof why);
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d not available (%d device%s%s%s)", device, n,
                 n == 1 ? "" : "s", why[0] ? ": " : "", why);
        return -1;
    }
    kc_stream *s = (kc_stream *)calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    s->device = device;
    cudaError_t rc = cudaSetDevice(device);
    if (rc == cudaSuccess)
        rc = cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
        snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(rc));
        free(s);
        return -1;
    }
    cublasStatus_t bs = cublasCreate(&s->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cuBLAS on device %d: %s", device, cublasGetStatusString(bs));
        cudaStreamDestroy(s->st);
        free(s);
        return -1;
    }
    KC_BLAS(cublasSetStream(s->blas, s->st));
    /* default math: CUBLAS_COMPUTE_32F then means full f32 (no TF32) for the F32 GEMMs, and
     * tensor cores for the 16-bit ones */
    KC_BLAS(cublasSetMathMode(s->blas, CUBLAS_DEFAULT_MATH));
    if (cudaMalloc(&s->blas_ws, KC_BLAS_WORKSPACE) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "CUDA device %d: cannot allocate the cuBLAS workspace", device);
        kc_stream_destroy(s);
        return -1;
    }
    KC_BLAS(cublasSetWorkspace(s->blas, s->blas_ws, KC_BLAS_WORKSPACE));
    if (scratch_bytes && kc_stream_reserve(s, scratch_bytes)) {
        snprintf(err, errlen, "CUDA device %d: cannot allocate %.1f MiB of scratch", device,
                 scratch_bytes / 1048576.0);
        kc_stream_destroy(s);
        return -1;
    }
    *out = s;
    return 0;
}

extern "C" void kc_set_device(int device)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device)
        KC_CHECK(cudaSetDevice(device));
}

extern "C" void kc_stream_destroy(kc_stream *s)
{
    if (!s)
        return;
    cudaSetDevice(s->device);
    cudaStreamSynchronize(s->st);
    cudaFree(s->scratch);
    cublasDestroy(s->blas);
    cudaFree(s->blas_ws);
    cudaStreamDestroy(s->st);
    free(s);
}

extern "C" int kc_stream_reserve(kc_stream *s, size_t bytes)
{
    if (bytes <= s->scratch_bytes)
        return 0;
    KC_CHECK(cudaStreamSynchronize(s->st));
    KC_CHECK(cudaFree(s->scratch));
    s->scratch = NULL;
    s->scratch_bytes = 0;
    if (cudaMalloc(&s->scratch, bytes) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free allocation error */
        s->scratch = NULL;
        return -1;
    }
    s->scratch_bytes = bytes;
    return 0;
}

extern "C" void kc_stream_sync(kc_stream *s)
{
    KC_CHECK(cudaStreamSynchronize(s->st));
}

extern "C" void *kc_stream_handle(kc_stream *s)
{
    return (void *)s->st;
}

/* ---- memory ------------------------------------------------------------------------------- */

extern "C" void *kc_malloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void kc_free(void *p)
{
    if (p)
        KC_CHECK(cudaFree(p));
}

extern "C" void *kc_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void kc_host_free(void *p)
{
    if (p)
        KC_CHECK(cudaFreeHost(p));
}

extern "C" void kc_upload(kc_stream *s, void *dst_dev, const void *src_host, size_t bytes)
{
    if (bytes)
        KC_CHECK(cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, s->st));
}

extern "C" void kc_download(kc_stream *s, void *dst_host, const void *src_dev, size_t bytes)
{
    if (bytes)
        KC_CHECK(cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, s->st));
}

extern "C" void kc_copy(kc_stream *s, void *dst_dev, const void *src_dev, size_t bytes)
{
    if (bytes)
        KC_CHECK(cudaMemcpyAsync(dst_dev, src_dev, bytes, cudaMemcpyDeviceToDevice, s->st));
}

extern "C" void kc_memset(kc_stream *s, void *dst_dev, int byte, size_t bytes)
{
    if (bytes)
        KC_CHECK(cudaMemsetAsync(dst_dev, byte, bytes, s->st));
}

/* ---- graphs ------------------------------------------------------------------------------- */

struct kc_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" void kc_graph_begin(kc_stream *s)
{
    KC_CHECK(cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal));
}

extern "C" kc_graph *kc_graph_end(kc_stream *s)
{
    kc_graph *g = (kc_graph *)calloc(1, sizeof *g);
    KC_REQUIRE(g != NULL);
    KC_CHECK(cudaStreamEndCapture(s->st, &g->graph));
    KC_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
    return g;
}

extern "C" void kc_graph_launch(kc_stream *s, kc_graph *g)
{
    KC_CHECK(cudaGraphLaunch(g->exec, s->st));
}

extern "C" void kc_graph_destroy(kc_graph *g)
{
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}
