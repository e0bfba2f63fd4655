/*
 * backend_registry — the one place that knows which optional backends this build has
 * (STYLE rule 8: the #ifdef ladder lives here and in the Makefile only). Everything else asks
 * through these functions.
 */
#include "comm.h"        // defines: comm_create, comm_create_host
#include "dev_cuda.h"    // defines: dev_cuda_create
#include "engine/util.h" // defines: dd_errf

#ifdef DELTAD_CUDA
#include "dev_cuda_impl.h" // defines: dev_cuda__create
#endif
#ifdef DELTAD_NCCL
#include "comm_nccl.h" // defines: comm_nccl_create
#endif

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
    }
    dd_errf(err, errlen, "unknown communicator kind %d", (int)kind);
    return NULL;
}
