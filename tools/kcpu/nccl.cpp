/*
 * nccl — the kcpu emulation of the NCCL calls comm_nccl.c makes, over the fake GPUs of one
 * process.
 *
 * ncclCommInitAll makes a clique of n communicators (rank r on devlist[r]). ncclAllReduce
 * inside ncclGroupStart/End only queues the call on the calling thread; the outermost
 * ncclGroupEnd posts every queued call to its clique and then waits until each has been posted
 * by all ranks. Call number s of every rank forms one collective: the last rank to post it sums
 * the ranks' inputs in rank order (f32 sums for F32; BF16 inputs widened, summed in f32, rounded
 * back to BF16 once) into a temporary and writes the same bits to every rank's output. So one
 * thread may post all ranks inside one group, or one thread per rank may post its own.
 * An allreduce outside a group runs as a group of one call. A group whose (first) call's stream
 * captures a graph is recorded into the capture instead, and posts when the graph is launched
 * (as NCCL kernels in a captured CUDA graph run at its launch).
 */
#include "nccl.h" // defines: ncclAllReduce

#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "kcpu_impl.h" // defines: kcpu::is_device, kcpu::device_of, kcpu::die

struct coll {
    std::vector<const void *> send;
    std::vector<void *> recv;
    size_t count = 0;
    ncclDataType_t type = ncclFloat32;
    int posted = 0, left = 0;
    bool done = false;
};

struct clique {
    int n;
    std::mutex mu;
    std::condition_variable cv;
    std::map<uint64_t, coll> pending; /* by call number */
    int live;
};

struct kcpu_nccl_comm {
    clique *cl;
    int rank, device;
    uint64_t seq; /* this rank's next call number */
};

struct queued {
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclComm_t comm;
    cudaStream_t st;
};

static __thread int group_depth;
static __thread std::vector<queued> *group_calls;

static float bf16_to_f32(uint16_t h)
{
    return __bfloat162float(__nv_bfloat16{h});
}

static void reduce(coll *c)
{
    const size_t n = c->count;
    std::vector<float> sum(n, 0.0f);
    for (size_t r = 0; r < c->send.size(); r++)
        for (size_t i = 0; i < n; i++)
            sum[i] += c->type == ncclFloat32 ? ((const float *)c->send[r])[i]
                                             : bf16_to_f32(((const uint16_t *)c->send[r])[i]);
    for (size_t r = 0; r < c->recv.size(); r++)
        for (size_t i = 0; i < n; i++) {
            if (c->type == ncclFloat32)
                ((float *)c->recv[r])[i] = sum[i];
            else
                ((uint16_t *)c->recv[r])[i] = __float2bfloat16_rn(sum[i]).__x;
        }
}

/* Post one call; returns its call number. The caller holds cl->mu. */
static uint64_t post(const queued &q)
{
    clique *cl = q.comm->cl;
    const uint64_t s = q.comm->seq++;
    coll &c = cl->pending[s];
    if (!c.posted) {
        c.send.assign(cl->n, NULL);
        c.recv.assign(cl->n, NULL);
        c.count = q.count, c.type = q.type, c.left = cl->n;
    } else if (c.count != q.count || c.type != q.type) {
        kcpu::die("ncclAllReduce call %llu: rank %d passes %zu elements of type %d, an earlier "
                  "rank %zu of type %d",
                  (unsigned long long)s, q.comm->rank, q.count, (int)q.type, c.count, (int)c.type);
    }
    c.send[q.comm->rank] = q.send;
    c.recv[q.comm->rank] = q.recv;
    if (++c.posted == cl->n) {
        reduce(&c);
        c.done = true;
        cl->cv.notify_all();
    }
    return s;
}

static void run_group(std::vector<queued> &calls);

/* Run the group's calls now, or record them into the capture of their stream. */
static void issue_group(std::vector<queued> &calls)
{
    if (calls.empty())
        return;
    const std::vector<queued> q = calls;
    calls.clear();
    kcpu::enqueue(q[0].st, [q]() {
        std::vector<queued> c = q; /* a graph may replay it again */
        run_group(c);
    });
}

static void run_group(std::vector<queued> &calls)
{
    std::vector<uint64_t> seqs(calls.size());
    for (size_t i = 0; i < calls.size(); i++) {
        std::lock_guard<std::mutex> lk(calls[i].comm->cl->mu);
        seqs[i] = post(calls[i]);
    }
    for (size_t i = 0; i < calls.size(); i++) {
        clique *cl = calls[i].comm->cl;
        std::unique_lock<std::mutex> lk(cl->mu);
        coll &c = cl->pending[seqs[i]];
        cl->cv.wait(lk, [&] { return c.done; });
        if (--c.left == 0)
            cl->pending.erase(seqs[i]);
    }
    calls.clear();
}

extern "C" ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devlist)
{
    int n_dev = 0;
    if (n < 1 || cudaGetDeviceCount(&n_dev) != cudaSuccess)
        return ncclInvalidArgument;
    clique *cl = new clique;
    cl->n = n;
    cl->live = n;
    for (int r = 0; r < n; r++) {
        const int d = devlist ? devlist[r] : r;
        if (d < 0 || d >= n_dev)
            return ncclInvalidArgument;
        comms[r] = new kcpu_nccl_comm{cl, r, d, 0};
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    clique *cl = comm->cl;
    bool last;
    {
        std::lock_guard<std::mutex> lk(cl->mu);
        last = --cl->live == 0;
    }
    if (last)
        delete cl;
    delete comm;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupStart(void)
{
    if (!group_calls)
        group_calls = new std::vector<queued>;
    group_depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0)
        return ncclInvalidUsage;
    if (--group_depth == 0)
        issue_group(*group_calls);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                      ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t st)
{
    if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclBfloat16))
        return ncclInvalidArgument;
    const size_t bytes = count * (type == ncclFloat32 ? 4 : 2);
    if (!kcpu::is_device(send, bytes) || !kcpu::is_device(recv, bytes)) {
        kcpu::warn("ncclAllReduce rank %d: buffers are not inside device allocations", comm->rank);
        return ncclInvalidArgument;
    }
    if (kcpu::device_of(send) != comm->device || kcpu::device_of(recv) != comm->device) {
        kcpu::warn("ncclAllReduce rank %d on GPU %d: buffers on GPUs %d and %d", comm->rank,
                   comm->device, kcpu::device_of(send), kcpu::device_of(recv));
        return ncclInvalidArgument;
    }
    const queued q{send, recv, count, type, comm, st};
    if (group_depth > 0) {
        group_calls->push_back(q);
        return ncclSuccess;
    }
    std::vector<queued> one{q};
    issue_group(one);
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error";
    case ncclSystemError:
        return "unhandled system error";
    case ncclInternalError:
        return "internal error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    }
    return "unknown result code";
}
