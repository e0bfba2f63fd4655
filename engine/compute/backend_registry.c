/*
 * backend_registry — the one place that knows which optional backends this build has
 * (STYLE rule 8: the #ifdef ladder lives here and in the Makefile only). Everything else asks
 * through these functions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"        // defines: comm_create, comm_create_host
#include "dev_cuda.h"    // defines: dev_cuda_create, dev_cuda_count
#include "device.h"      // defines: struct dev_spec, dev_cpu_create_group
#include "dist.h"        // defines: struct dist_ops, dist_transport
#include "engine/util.h" // defines: dd_errf

#ifdef DELTAD_CUDA
#include "dev_cuda_impl.h" // defines: dev_cuda__create
#endif
#ifdef DELTAD_NCCL
#include "comm_nccl.h" // defines: comm_nccl_create
#endif
#ifdef DELTAD_CUDA
#include "kernels/cuda/kcuda.h" // defines: kc_device_count
#endif
#ifdef DELTAD_MPI
extern const struct dist_ops dist_mpi_ops; /* dist_mpi.c */
#endif

const struct dist_ops *dist_transport(void)
{
#ifdef DELTAD_MPI
    return &dist_mpi_ops;
#else
    return NULL;
#endif
}

bool dev_cuda_built(void)
{
#ifdef DELTAD_CUDA
    return true;
#else
    return false;
#endif
}

int dev_cuda_count(void)
{
#ifdef DELTAD_CUDA
    char err[256];
    return kc_device_count(err, sizeof err);
#else
    return 0;
#endif
}

void dev_cuda_info(int gpu, char *desc, size_t dlen, char *busid, size_t blen, size_t *free_b,
                   size_t *total_b)
{
    *free_b = *total_b = 0;
    busid[0] = '\0';
#ifdef DELTAD_CUDA
    kc_device_describe(gpu, desc, dlen);
    kc_device_busid(gpu, busid, blen);
    if (kc_device_mem(gpu, free_b, total_b))
        *free_b = *total_b = 0;
#else
    (void)blen;
    snprintf(desc, dlen, "GPU %d: this build has no CUDA", gpu);
#endif
}

int dev_group_create(const struct dev_spec *sp, int n_threads, bool bind, struct dev **devs,
                     int *n_dev, char *err, size_t errlen)
{
    *n_dev = 0;
    if (!sp->cuda) {
        int rc = dev_cpu_create_group(sp->n, n_threads * sp->n, bind, devs, err, errlen);
        *n_dev = rc ? 0 : sp->n;
        return rc;
    }
    struct dev_spec all = *sp;
    if (sp->all) {
        all.n = dev_cuda_count();
        if (all.n < 1) {
            dd_errf(err, errlen, "cuda:all: no usable GPU");
            return DD_EUNSUPPORTED;
        }
        all.n = all.n < DEV_GROUP_MAX ? all.n : DEV_GROUP_MAX;
        for (int i = 0; i < all.n; i++)
            all.gpu[i] = i;
    }
    for (int i = 0; i < all.n; i++) {
        int rc = dev_cuda_create(all.gpu[i], &devs[i], err, errlen);
        if (rc) {
            while (i-- > 0)
                dev_destroy(devs[i]);
            return rc;
        }
    }
    *n_dev = all.n;
    return 0;
}

int dev_cuda_create(int gpu, struct dev **out, char *err, size_t errlen)
{
#ifdef DELTAD_CUDA
    return dev_cuda__create(gpu, out, err, errlen);
#else
    (void)gpu, (void)out;
    dd_errf(err, errlen, "this build has no CUDA; rebuild with make CUDA=1 (devices: cpu)");
    return DD_EUNSUPPORTED;
#endif
}

struct comm *comm_create(enum comm_kind kind, int n_ranks, const int *cuda_devices, char *err,
                         size_t errlen)
{
    switch (kind) {
    case COMM_HOST:
        return comm_create_host(n_ranks);
    case COMM_NCCL:
#ifdef DELTAD_NCCL
        return comm_nccl_create(n_ranks, cuda_devices, err, errlen);
#else
        (void)cuda_devices;
        dd_errf(err, errlen, "this build has no NCCL; rebuild with make CUDA=1 NCCL=1");
        return NULL;
#endif
    case COMM_NCCL_DIST:
#ifdef DELTAD_NCCL_DIST
        return comm_nccl_create_dist(n_ranks, cuda_devices, err, errlen);
#else
        dd_errf(err, errlen,
                "GPU groups across mpirun ranks need NCCL and MPI; rebuild with make CUDA=1 "
                "NCCL=1 and libopenmpi-dev installed");
        return NULL;
#endif
    }
    dd_errf(err, errlen, "unknown communicator kind %d", (int)kind);
    return NULL;
}
