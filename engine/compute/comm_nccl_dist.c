/*
 * comm_nccl_dist — one NCCL communicator over the GPUs of every process of an mpirun job
 * (contract in comm_nccl.h; compiled only with NCCL=1 and MPI, see the Makefile).
 *
 * NCCL's own bootstrap across hosts: rank 0 makes the unique id (ncclGetUniqueId), dist_bcast
 * sends it to every process, and each process joins its GPUs as global ranks base + d with
 * ncclCommInitRank inside one ncclGroupStart/End (several GPUs of one process initialise
 * together). From there the reductions are comm_nccl.c's: each GPU's host thread enqueues its
 * ncclAllReduce on its stream, and NCCL moves the bytes between hosts (InfiniBand or sockets,
 * NCCL_SOCKET_IFNAME / NCCL_IB_HCA choose). The other processes' traffic (the step's command,
 * the logits gather) stays on MPI (fwd_group.c).
 *
 * Not run on a GPU yet: this machine has none; `make cuda-check` compiles it.
 */
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm.h"        // defines: struct comm
#include "comm_nccl.h"   // defines: comm_nccl_create_dist
#include "dist.h"        // defines: dist_allgather, dist_bcast, dist_rank
#include "engine/util.h" // defines: dd_errf

#define MAX_GPUS 64

struct comm *comm_nccl__adopt(int n_local, const int *cuda_devices, const ncclComm_t *comms,
                              int n_total);

struct comm *comm_nccl_create_dist(int n_local, const int *cuda_devices, char *err, size_t errlen)
{
    int64_t mine = n_local, all[DIST_MAX_RANKS];
    if (dist_allgather(&mine, all, sizeof mine)) {
        dd_errf(err, errlen, "NCCL across ranks: %s", dist_failure());
        return NULL;
    }
    int base = 0, total = 0;
    for (int p = 0; p < dist_size(); p++) {
        base += p < dist_rank() ? (int)all[p] : 0;
        total += (int)all[p];
    }
    if (n_local < 1 || total > MAX_GPUS) {
        dd_errf(err, errlen, "NCCL across ranks: %d GPUs here, %d in all (1..%d)", n_local, total,
                MAX_GPUS);
        return NULL;
    }
    ncclUniqueId id;
    ncclResult_t rc = dist_rank() == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (rc != ncclSuccess) {
        dd_errf(err, errlen, "NCCL: ncclGetUniqueId failed: %s", ncclGetErrorString(rc));
        return NULL; /* IMPORTANT: the workers then wait in dist_bcast until mpirun ends them */
    }
    if (dist_bcast(&id, sizeof id)) {
        dd_errf(err, errlen, "NCCL across ranks: %s", dist_failure());
        return NULL;
    }
    ncclComm_t comms[MAX_GPUS];
    rc = ncclGroupStart();
    for (int d = 0; d < n_local && rc == ncclSuccess; d++) {
        if (cudaSetDevice(cuda_devices[d]) != cudaSuccess) {
            dd_errf(err, errlen, "NCCL across ranks: cannot use GPU %d", cuda_devices[d]);
            ncclGroupEnd();
            return NULL;
        }
        rc = ncclCommInitRank(&comms[d], total, id, base + d);
    }
    ncclResult_t end = ncclGroupEnd();
    rc = rc != ncclSuccess ? rc : end;
    if (rc != ncclSuccess) {
        dd_errf(err, errlen, "NCCL: ncclCommInitRank (GPUs %d..%d of %d) failed: %s", base,
                base + n_local - 1, total, ncclGetErrorString(rc));
        return NULL;
    }
    return comm_nccl__adopt(n_local, cuda_devices, comms, total);
}
