/*
 * dev_cuda — the CUDA device (contract in dev_cuda.h): matmuls on one GPU through the launchers
 * of kernels/cuda (kcuda.h); every other op of the forward pass stays on the calling thread.
 *
 * Weights: the device table hands over host views into the mmap. The first matmul with a view
 * uploads it (its n_out rows of row_bytes) and remembers the device copy in a hash table keyed
 * by the host address, so each weight crosses PCIe once; the copies live until destroy.
 * Activations: per product, x is uploaded into a device buffer, the product runs (matrix-vector
 * kernel for up to KC_MATVEC_MAX_T rows, dequantise + cuBLAS above), and y is downloaded.
 * Buffers grow on demand (the first steps of each shape allocate; later steps do not).
 *
 * Thread: the engine thread only. A CUDA failure aborts (kcuda.h, STYLE rule 18c).
 */
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dev_cuda_impl.h"      // defines: dev_cuda__create
#include "device.h"             // defines: struct dev, struct dev_ops
#include "engine/util.h"        // defines: xcalloc, dd_errf, LOG_I
#include "kernels/cpu/kq.h"     // defines: kq_type_name
#include "kernels/cuda/kcuda.h" // defines: kc_stream, kc_matmul
#include "topo.h"               // defines: topo_create, topo_coreset_init_gpu, topo_bind_set

/* One uploaded weight view: host address -> device copy of n bytes. */
struct wslot {
    const void *host;
    void *dev;
    size_t bytes;
};

struct cuda_dev {
    struct dev base;
    kc_stream *s;
    int gpu;
    struct wslot *w; /* open addressing, cap a power of two, at most half full */
    size_t w_cap, w_n, w_bytes;
    float *x, *y; /* device activation buffers */
    size_t x_cap, y_cap;
    cpu_set_t near; /* PUs near the GPU (has_near): where its host thread runs */
    bool has_near;
};

static struct cuda_dev *cuda_of(struct dev *d)
{
    return (struct cuda_dev *)d;
}

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static struct wslot *slot_find(struct cuda_dev *cd, const void *host)
{
    for (size_t i = hash_ptr(host, cd->w_cap);; i = (i + 1) & (cd->w_cap - 1))
        if (cd->w[i].host == host || !cd->w[i].host)
            return &cd->w[i];
}

static void table_grow(struct cuda_dev *cd)
{
    struct wslot *old = cd->w;
    size_t old_cap = cd->w_cap;
    cd->w_cap = old_cap ? 2 * old_cap : 1024;
    cd->w = xcalloc(cd->w_cap, sizeof *cd->w);
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].host)
            *slot_find(cd, old[i].host) = old[i];
    free(old);
}

/* The device copy of weight view w, uploaded on first use. */
static const void *weight_dev(struct cuda_dev *cd, const struct dev_mat *w)
{
    const size_t bytes = w->row_bytes * (size_t)w->n_out;
    if (2 * (cd->w_n + 1) > cd->w_cap)
        table_grow(cd);
    struct wslot *sl = slot_find(cd, w->data);
    if (sl->host && sl->bytes >= bytes)
        return sl->dev;
    if (sl->host) { /* the same address seen with fewer rows before: replace the copy */
        kc_stream_sync(cd->s);
        kc_free(sl->dev);
        cd->w_bytes -= sl->bytes;
        cd->w_n--;
    }
    void *p = kc_malloc(bytes);
    if (!p) {
        LOG_E("cuda device %d: out of GPU memory uploading a %s weight of %.1f MiB "
              "(%.1f MiB resident)",
              cd->gpu, kq_type_name(w->type), bytes / 1048576.0, cd->w_bytes / 1048576.0);
        abort();
    }
    kc_upload(cd->s, p, w->data, bytes);
    *sl = (struct wslot){w->data, p, bytes};
    cd->w_n++;
    cd->w_bytes += bytes;
    return p;
}

/* A device buffer of at least need bytes in *buf (capacity *cap). */
static float *grow(struct cuda_dev *cd, float **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return *buf;
    kc_stream_sync(cd->s);
    kc_free(*buf);
    *buf = kc_malloc(need);
    if (!*buf) {
        LOG_E("cuda device %d: cannot allocate %.1f MiB of activations", cd->gpu, need / 1048576.0);
        abort();
    }
    *cap = need;
    return *buf;
}

static void cuda_matmul(struct dev *d, const struct dev_mat *w, const float *x, int64_t T, float *y)
{
    struct cuda_dev *cd = cuda_of(d);
    if (T <= 0 || w->n_out <= 0)
        return;
    const size_t xb = (size_t)(T * w->n_in) * sizeof(float);
    const size_t yb = (size_t)(T * w->n_out) * sizeof(float);
    if (w->n_in <= 0) { /* an empty slice of a shard: the product is 0 */
        memset(y, 0, yb);
        return;
    }
    struct kc_mat m = {weight_dev(cd, w), w->type, w->n_in, w->n_out, w->row_bytes};
    float *dx = grow(cd, &cd->x, &cd->x_cap, xb), *dy = grow(cd, &cd->y, &cd->y_cap, yb);
    if (T > KC_MATVEC_MAX_T && kc_stream_reserve(cd->s, kc_matmul_scratch_bytes(&m, T))) {
        LOG_E("cuda device %d: cannot allocate GEMM scratch", cd->gpu);
        abort();
    }
    kc_upload(cd->s, dx, x, xb);
    kc_matmul(cd->s, &m, dx, w->n_in, T, dy, w->n_out);
    kc_download(cd->s, y, dy, yb);
    kc_stream_sync(cd->s);
}

static int cuda_n_threads(const struct dev *d)
{
    return 1;
}

static void cuda_destroy(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    kc_stream_sync(cd->s);
    for (size_t i = 0; i < cd->w_cap; i++)
        if (cd->w[i].host)
            kc_free(cd->w[i].dev);
    kc_free(cd->x);
    kc_free(cd->y);
    kc_stream_destroy(cd->s);
    free(cd->w);
    free(cd);
}

/* The PUs near the GPU: hwloc's PCI locality of the device CUDA reports (its NUMA node on a
 * multi-socket host), for cuda_bind_host. False when the locality is unknown. */
static bool find_near(int gpu, cpu_set_t *near, int *numa)
{
    char busid[32], err[256];
    kc_device_busid(gpu, busid, sizeof busid);
    topo_t *t = busid[0] ? topo_create(err, sizeof err) : NULL;
    if (!t)
        return false;
    const int i = topo_gpu_find(t, busid);
    topo_coreset cs;
    bool ok = i >= 0 && topo_coreset_init_gpu(t, i, 0, &cs) == 0;
    if (ok) {
        CPU_ZERO(near);
        for (int u = 0; u < cs.n; u++)
            if (cs.pu[u] >= 0 && cs.pu[u] < CPU_SETSIZE)
                CPU_SET(cs.pu[u], near);
        *numa = topo_gpu_get(t, i)->numa;
        ok = CPU_COUNT(near) > 0;
        topo_coreset_deinit(&cs);
    }
    topo_destroy(t);
    return ok;
}

/* Best effort: a container that forbids binding leaves the thread where it was. */
static void cuda_bind_host(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    if (cd->has_near && sched_setaffinity(0, sizeof cd->near, &cd->near) != 0)
        LOG_W("cuda device %d: cannot bind its host thread (runs unbound)", cd->gpu);
}

static const struct dev_ops cuda_ops = {
    .api_version = DEV_API_VERSION,
    .name = "cuda",
    .destroy = cuda_destroy,
    .matmul = cuda_matmul,
    .n_threads = cuda_n_threads,
    .bind_host = cuda_bind_host,
};

int dev_cuda__create(int gpu, struct dev **out, char *err, size_t errlen)
{
    struct cuda_dev *cd = xcalloc(1, sizeof *cd);
    if (kc_stream_create(gpu, 64u << 20, &cd->s, err, errlen)) {
        free(cd);
        return DD_EUNSUPPORTED;
    }
    cd->base.ops = &cuda_ops;
    cd->base.ctx = cd;
    cd->gpu = gpu;
    table_grow(cd);
    int numa = -1;
    cd->has_near = find_near(gpu, &cd->near, &numa);
    if (cd->has_near)
        LOG_I("cuda device %d: its host thread binds to %d PUs near it (NUMA node %d)", gpu,
              CPU_COUNT(&cd->near), numa);
    char desc[256];
    kc_device_describe(gpu, desc, sizeof desc);
    LOG_I("cuda device %d: %s (matmuls on the GPU, other ops on the host)", gpu, desc);
    *out = &cd->base;
    return 0;
}
