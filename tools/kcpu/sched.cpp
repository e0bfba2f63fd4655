/*
 * sched — the kcpu block scheduler: CUDA threads as fibers, block barriers and warp collectives
 * (the model is described in kcpu.h), and the OS threads that run the blocks.
 *
 * A launch hands its grid to a pool of KCPU_THREADS OS threads (default the number of cores,
 * at least 2): the launching thread and KCPU_THREADS - 1 workers take blocks from the grid's
 * counter until none is left, and the launch returns when every block has finished, so
 * launches on one stream stay ordered. Several host threads may launch at once (one grid each
 * in the queue). A block runs whole on the OS thread that took it: for a block of n threads the
 * scheduler makes n fibers on stacks reused from block to block (one mmap per OS thread,
 * a guard page under each stack) and runs passes: each pass visits the fibers in the
 * KCPU_ORDER order and runs every runnable one until it yields. A fiber yields at
 * __syncthreads (state BAR), at a warp op that still lacks lanes (state WARP) or when it
 * returns (DONE). The last lane to reach a warp op computes every lane's result, wakes the
 * others and runs on. When a pass leaves nothing runnable, the barrier is released if every
 * fiber waits at it; a fiber still waiting on a warp op then is a deadlock, and a fiber that
 * exited while others wait at the barrier is a divergent barrier: both are errors.
 *
 * Shared memory: each __shared__ declaration (rewritten by rewrite.py into KCPU_SHARED) asks
 * shared() for its block's copy: a heap allocation made by the first fiber that reaches it,
 * filled with 0xFF bytes and freed when the block ends, so ASan sees its bounds and no two
 * blocks ever share it.
 *
 * Invariant: only the OS thread that runs a block touches its fibers, so there are no locks
 * below the grid queue; `cur` (thread-local) always points at the running fiber's thread_info.
 *
 * Switching: hand-written x86-64 code saves the callee-saved registers, MXCSR and the x87
 * control word and swaps stack pointers (a glibc swapcontext costs a signal-mask system call
 * per switch, and a warp reduction switches 64 times); other machines use ucontext.
 *
 * Sanitizers: under ASan every switch is announced (__sanitizer_start/finish_switch_fiber) so
 * ASan knows which stack is live. Under TSan (`make KCPU=1 SANITIZE=thread`, which compiles
 * this file uninstrumented with KCPU_TSAN=1 so that the scheduler's own bookkeeping is not
 * reported) every fiber is a TSan fiber, switched to without synchronisation; the
 * happens-before edges are CUDA's: the block start (the launch and, on one OS thread, the
 * blocks run before it) precedes every fiber, __syncthreads orders the block, __syncwarp the
 * warp (the other warp collectives exchange values but order no memory, as on Volta and
 * later), and every fiber precedes the block's end and so the launch's return. A missing
 * barrier between a shared-memory write and another thread's read is thus a TSan report,
 * in any fiber order, with the kernel's frames in its stacks.
 */
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

#include "kcpu_impl.h" // defines: kcpu::die, kcpu::site, kcpu::cfg, kcpu::device_of

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#ifdef __has_feature
#if __has_feature(address_sanitizer)
#define KCPU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KCPU_ASAN)
#define KCPU_ASAN 1
#endif
#ifdef KCPU_ASAN
#include <sanitizer/asan_interface.h>        // defines: __asan_unpoison_memory_region
#include <sanitizer/common_interface_defs.h> // defines: __sanitizer_start_switch_fiber
#endif
#ifdef KCPU_TSAN
#include <sanitizer/tsan_interface.h> // defines: __tsan_switch_to_fiber, __tsan_acquire
extern "C" void AnnotateIgnoreWritesBegin(const char *file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif

namespace kcpu
{

__thread thread_info *cur;

enum { MAX_THREADS = 1024, STACK_BYTES = 64 << 10, MAX_SHARED = 16, SHARED_BYTES = 48 << 10 };
enum fstate { F_RUN, F_BAR, F_WARP, F_DONE };

/* ---- context switch -------------------------------------------------------------------------- */

#if defined(__x86_64__)
extern "C" void kcpu__switch(void **save_sp, void *to_sp);
asm(R"(
    .pushsection .text
    .globl kcpu__switch
    .type kcpu__switch, @function
kcpu__switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kcpu__switch, .-kcpu__switch
    .popsection
)");

struct ctx {
    void *sp;
};

static void ctx_switch(ctx *from, ctx *to)
{
    kcpu__switch(&from->sp, to->sp);
}

/* A fresh context that starts entry() on the stack ending at top: the frame kcpu__switch pops
 * (control words, six registers, the return address entry) over a zero slot that keeps the
 * ABI's 16-byte alignment at entry. */
static void ctx_make(ctx *c, char *stack, size_t bytes, void (*entry)())
{
    uint64_t *sp = (uint64_t *)(((uintptr_t)(stack + bytes)) & ~(uintptr_t)15);
    *--sp = 0;
    *--sp = (uint64_t)(uintptr_t)entry;
    for (int i = 0; i < 6; i++)
        *--sp = 0;
    uint32_t mx;
    uint16_t cw;
    asm volatile("stmxcsr %0" : "=m"(mx));
    asm volatile("fnstcw %0" : "=m"(cw));
    *--sp = (uint64_t)mx | (uint64_t)cw << 32;
    c->sp = sp;
}
#else
struct ctx {
    ucontext_t uc;
};

static void ctx_switch(ctx *from, ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}

static void ctx_make(ctx *c, char *stack, size_t bytes, void (*entry)())
{
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}
#endif

/* ---- blocks ---------------------------------------------------------------------------------- */

struct block;

struct fiber : thread_info {
    ctx c;
    block *b;
    unsigned lin; /* linear thread index in the block */
    int state;
    char *stack;
#ifdef KCPU_ASAN
    void *fake; /* ASan's fake stack while switched out */
#endif
#ifdef KCPU_TSAN
    void *tsan;           /* the fiber's TSan context, made once per pool slot */
    unsigned n_bar, n_sw; /* barriers and __syncwarps passed: which sync object is next */
#endif
};

/* The pending warp op of one warp: who arrived, with which values. */
struct warp {
    unsigned arrived, mask;
    unsigned done; /* lanes that exited (so a warp op checks them in one test) */
    int kind, size, width;
    uint64_t val[32], res[32];
    int arg[32];
};

/* One __shared__ variable of a running block: the declaration's key and the block's copy. */
struct shared_var {
    const void *key;
    void *p;
};

struct block {
    block_info info;
    const site *where;
    void (*body)(void *);
    void *body_ctx;
    fiber *f;
    warp *w;
    int n;
    ctx sched;
    shared_var shm[MAX_SHARED];
    int n_shm;
    size_t shm_bytes;
#ifdef KCPU_TSAN
    char start, done, bar[2]; /* sync objects (their addresses): see the opening comment */
    char sw[MAX_THREADS / 32][2];
#endif
};

/* Per OS thread: stacks, fibers and warps for the largest block, reused by every launch. */
struct pool {
    char *stacks;
    fiber f[MAX_THREADS];
    warp w[MAX_THREADS / 32];
    int order[MAX_THREADS];
    uint64_t rng;
#ifdef KCPU_ASAN
    void *fake;               /* the scheduler's fake stack while a fiber runs */
    const void *sched_bottom; /* the scheduler's stack, as ASan reported it */
    size_t sched_size;
#endif
#ifdef KCPU_TSAN
    void *tsan_sched; /* this OS thread's own TSan context */
#endif
};
static __thread pool *tpool;

/* Unmaps the thread's pool when the thread exits: the engine's device host threads come and
 * go with each device group, and the guard pages of a leaked pool (one mapping each) would
 * exhaust vm.max_map_count after a few dozen groups. */
struct pool_owner {
    ~pool_owner()
    {
        if (!tpool)
            return;
#ifdef KCPU_TSAN
        for (int i = 0; i < MAX_THREADS; i++)
            if (tpool->f[i].tsan)
                __tsan_destroy_fiber(tpool->f[i].tsan);
#endif
        munmap(tpool->stacks, (size_t)MAX_THREADS * STACK_BYTES);
        free(tpool);
        tpool = NULL;
    }
};
static thread_local pool_owner pool_owned;

static pool *pool_get()
{
    if (tpool)
        return tpool;
    pool *p = (pool *)calloc(1, sizeof *p);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    p->stacks = (char *)mmap(NULL, (size_t)MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!p || p->stacks == MAP_FAILED)
        die("cannot map %d fiber stacks", (int)MAX_THREADS);
    for (int i = 0; i < MAX_THREADS; i++) /* a guard page under every stack */
        mprotect(p->stacks + (size_t)i * STACK_BYTES, page, PROT_NONE);
    const char *seed = getenv("KCPU_SEED");
    p->rng = seed ? strtoull(seed, NULL, 0) | 1 : 0x2545f4914f6cdd1dull;
#ifdef KCPU_TSAN
    p->tsan_sched = __tsan_get_current_fiber();
#endif
    tpool = p;
    (void)&pool_owned; /* odr-use: constructs the owner, whose destructor runs at thread exit */
    return p;
}

enum order { O_FORWARD, O_REVERSE, O_SHUFFLE };

static int order_parse()
{
    const char *e = getenv("KCPU_ORDER");
    if (!e || !*e || !strcmp(e, "forward"))
        return O_FORWARD;
    if (!strcmp(e, "reverse"))
        return O_REVERSE;
    if (!strcmp(e, "shuffle"))
        return O_SHUFFLE;
    die("KCPU_ORDER=%s: use forward, reverse or shuffle", e);
}

static int order_get()
{
    static const int o = order_parse(); /* once, thread-safe */
    return o;
}

static const char *state_name(int s)
{
    return s == F_RUN    ? "running"
           : s == F_BAR  ? "waiting at __syncthreads"
           : s == F_WARP ? "waiting at a warp op"
                         : "exited";
}

/* The error prefix: kernel, launch site, block and thread. */
[[noreturn]] static void fail_at(const fiber *f, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const block *b = f->b;
    die("kernel %s (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u): %s", b->where->name,
        b->where->file, b->where->line, b->info.idx.x, b->info.idx.y, b->info.idx.z, f->tid.x,
        f->tid.y, f->tid.z, msg);
}

/* ---- switches (with the sanitizers told) ---------------------------------------------------- */

/* Scheduler -> fiber f, back when f yields or ends. */
static void switch_to_fiber(pool *p, block *b, fiber *f)
{
    cur = f;
#ifdef KCPU_ASAN
    __sanitizer_start_switch_fiber(&p->fake, f->stack, STACK_BYTES);
#endif
#ifdef KCPU_TSAN
    __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#endif
    ctx_switch(&b->sched, &f->c);
#ifdef KCPU_ASAN
    __sanitizer_finish_switch_fiber(p->fake, NULL, NULL);
#endif
}

/* In fiber f, once it runs (again): the ASan half of the switch. */
static void fiber_resumed(fiber *f, bool first)
{
#ifdef KCPU_ASAN
    pool *p = tpool;
    __sanitizer_finish_switch_fiber(first ? NULL : f->fake, &p->sched_bottom, &p->sched_size);
#endif
}

/* Fiber f -> the scheduler; `last` when f has ended (its fake stack is dropped). */
static void switch_to_sched(fiber *f, bool last)
{
#ifdef KCPU_ASAN
    pool *p = tpool;
    __sanitizer_start_switch_fiber(last ? NULL : &f->fake, p->sched_bottom, p->sched_size);
#endif
#ifdef KCPU_TSAN
    __tsan_switch_to_fiber(tpool->tsan_sched, __tsan_switch_to_fiber_no_sync);
#endif
    ctx_switch(&f->c, &f->b->sched);
    if (!last)
        fiber_resumed(f, false);
}

static void fiber_main()
{
    fiber *f = (fiber *)cur;
    block *b = f->b;
    fiber_resumed(f, true);
#ifdef KCPU_TSAN
    __tsan_acquire(&b->start);
#endif
    b->body(b->body_ctx);
    f->state = F_DONE;
    warp *w = &b->w[f->lin / 32];
    const unsigned bit = 1u << (f->lin % 32);
    w->done |= bit;
    if (w->arrived && (w->mask & bit))
        fail_at(f, "exited while lanes 0x%08x of its warp wait for it at a warp op (mask 0x%08x)",
                w->arrived, w->mask);
#ifdef KCPU_TSAN
    __tsan_release(&b->done);
#endif
    switch_to_sched(f, true);
    abort(); /* a finished fiber is never resumed */
}

static void yield(fiber *f, int state)
{
    f->state = state;
    switch_to_sched(f, false);
}

void syncthreads()
{
    fiber *f = (fiber *)cur;
#ifdef KCPU_TSAN
    /* two objects in turn: a fast thread's release for the next barrier must not reach a slow
     * thread that has yet to leave this one */
    char *bar = &f->b->bar[f->n_bar++ & 1];
    __tsan_release(bar);
#endif
    yield(f, F_BAR);
#ifdef KCPU_TSAN
    __tsan_acquire(bar);
#endif
}

static void make_order(pool *p, int n)
{
    const int o = order_get();
    for (int i = 0; i < n; i++)
        p->order[i] = o == O_REVERSE ? n - 1 - i : i;
    if (o == O_SHUFFLE)
        for (int i = n - 1; i > 0; i--) {
            p->rng ^= p->rng << 13, p->rng ^= p->rng >> 7, p->rng ^= p->rng << 17;
            const int j = (int)(p->rng % (uint64_t)(i + 1)), t = p->order[i];
            p->order[i] = p->order[j], p->order[j] = t;
        }
}

/* After a pass that left nothing runnable: release the barrier, or report the deadlock. */
static bool release_or_fail(block *b)
{
    int done = 0;
    for (int i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        if (f->state == F_DONE) {
            done++;
        } else if (f->state == F_WARP) {
            const warp *w = &b->w[i / 32];
            const unsigned missing = w->mask & ~w->arrived;
            const int lane = missing ? __builtin_ctz(missing) : -1;
            const int other = (i / 32) * 32 + lane;
            fail_at(f, "waits at a warp op (mask 0x%08x) that lane %d never reaches (it is %s)",
                    w->mask, lane, lane >= 0 && other < b->n ? state_name(b->f[other].state) : "?");
        }
    }
    if (done == b->n)
        return false;
    if (done) { /* a barrier not every thread reaches: UB in CUDA, often a hang */
        int bar = 0, ex = 0;
        for (int i = 0; i < b->n; i++)
            b->f[i].state == F_BAR ? bar = i : ex = i;
        fail_at(&b->f[bar],
                "waits at __syncthreads, which thread %d (and %d of the block's %d "
                "threads in all) exited without reaching",
                ex, done, b->n);
    }
    for (int i = 0; i < b->n; i++)
        if (b->f[i].state == F_BAR)
            b->f[i].state = F_RUN;
    return true;
}

static void run_block(pool *p, block *b)
{
    const dim3 bd = b->info.dim;
    for (int i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        f->tid = uint3{i % bd.x, i / bd.x % bd.y, i / (bd.x * bd.y)};
        f->blk = &b->info;
        f->b = b;
        f->lin = (unsigned)i;
        f->state = F_RUN;
        f->stack = p->stacks + (size_t)i * STACK_BYTES;
#ifdef KCPU_ASAN /* frames a fiber never returned from (its fiber_main) left poisoned */
        __asan_unpoison_memory_region(f->stack + STACK_BYTES / 2, STACK_BYTES / 2);
#endif
#ifdef KCPU_TSAN
        if (!f->tsan)
            f->tsan = __tsan_create_fiber(0);
        f->n_bar = f->n_sw = 0;
#endif
        ctx_make(&f->c, f->stack, STACK_BYTES, fiber_main);
    }
    for (int i = 0; i < (b->n + 31) / 32; i++)
        b->w[i].arrived = b->w[i].done = 0;
    b->n_shm = 0;
    b->shm_bytes = 0;
#ifdef KCPU_TSAN
    __tsan_release(&b->start);
#endif
    do {
        bool ran;
        do {
            ran = false;
            make_order(p, b->n);
            for (int k = 0; k < b->n; k++) {
                fiber *f = &b->f[p->order[k]];
                if (f->state != F_RUN)
                    continue;
                switch_to_fiber(p, b, f);
                ran = true;
            }
        } while (ran);
    } while (release_or_fail(b));
    cur = NULL;
#ifdef KCPU_TSAN
    __tsan_acquire(&b->done);
#endif
    for (int i = 0; i < b->n_shm; i++)
        free(b->shm[i].p);
}

/* ---- the grid queue and its OS threads --------------------------------------------------------
 */

/* One launch: its blocks are dealt out by `next`; `finished` and `helpers` (workers inside)
 * are guarded by q_mu. It lives on the launching thread's stack until both say it is over. */
struct grid {
    const site *where;
    const cfg *c;
    void (*body)(void *);
    void *ctx;
    uint64_t n;
    std::atomic<uint64_t> next;
    uint64_t finished;
    int helpers;
};

/* Made once, never freed: workers wait on it until the process exits. */
struct queue {
    std::mutex mu;
    std::condition_variable work, done;
    std::deque<grid *> grids;
};

static queue *q;
static int n_os_threads;

/* Runs blocks of g until none is left; returns how many this thread ran. */
static uint64_t run_blocks(grid *g)
{
    pool *p = pool_get();
    block b;
    b.where = g->where;
    b.body = g->body;
    b.body_ctx = g->ctx;
    b.f = p->f;
    b.w = p->w;
    b.n = (int)(g->c->block.x * g->c->block.y * g->c->block.z);
    b.info.dim = g->c->block;
    b.info.grid = g->c->grid;
    const uint64_t gx = g->c->grid.x, gy = g->c->grid.y;
    uint64_t ran = 0;
    for (uint64_t i; (i = g->next.fetch_add(1, std::memory_order_relaxed)) < g->n; ran++) {
        b.info.idx = uint3{(unsigned)(i % gx), (unsigned)(i / gx % gy), (unsigned)(i / (gx * gy))};
        run_block(p, &b);
    }
    return ran;
}

/* Called with q->mu held: g leaves the queue once its blocks are all dealt out. */
static void drop_if_dealt(grid *g)
{
    if (g->next.load(std::memory_order_relaxed) < g->n)
        return;
    auto it = std::find(q->grids.begin(), q->grids.end(), g);
    if (it != q->grids.end())
        q->grids.erase(it);
}

static void worker_main()
{
    std::unique_lock<std::mutex> lk(q->mu);
    for (;;) {
        q->work.wait(lk, [] { return !q->grids.empty(); });
        grid *g = q->grids.front();
        drop_if_dealt(g);
        if (g->next.load(std::memory_order_relaxed) >= g->n)
            continue;
        g->helpers++;
        lk.unlock();
        const uint64_t ran = run_blocks(g);
        lk.lock();
        g->finished += ran;
        g->helpers--;
        drop_if_dealt(g);
        if (g->finished == g->n && !g->helpers)
            q->done.notify_all();
    }
}

static void threads_start()
{
    const char *e = getenv("KCPU_THREADS");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const long n = e && *e ? atol(e) : cores < 2 ? 2 : cores;
    if (n < 1 || n > 256)
        die("KCPU_THREADS=%s: use 1 .. 256 OS threads", e);
    n_os_threads = (int)n;
    q = new queue;
    for (int i = 1; i < n_os_threads; i++)
        std::thread(worker_main).detach();
}

void run_grid(const site &s, const cfg &c, void (*body)(void *), void *ctx)
{
    static std::once_flag once;
    std::call_once(once, threads_start);
    grid g;
    g.where = &s;
    g.c = &c;
    g.body = body;
    g.ctx = ctx;
    g.n = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    g.next.store(0, std::memory_order_relaxed);
    g.finished = 0;
    g.helpers = 0;
    if (g.n == 1 || n_os_threads == 1) {
        run_blocks(&g);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(q->mu);
        q->grids.push_back(&g);
    }
    q->work.notify_all();
    const uint64_t ran = run_blocks(&g);
    std::unique_lock<std::mutex> lk(q->mu);
    g.finished += ran;
    drop_if_dealt(&g);
    q->done.wait(lk, [&] { return g.finished == g.n && !g.helpers; });
}

/* The block's copy of the __shared__ variable `key` (see the opening comment). */
void *shared(const void *key, size_t bytes)
{
    fiber *f = (fiber *)cur;
    block *b = f->b;
    for (int i = 0; i < b->n_shm; i++)
        if (b->shm[i].key == key)
            return b->shm[i].p;
    if (b->n_shm == MAX_SHARED)
        fail_at(f, "more than %d __shared__ variables", (int)MAX_SHARED);
    b->shm_bytes += bytes;
    if (b->shm_bytes > SHARED_BYTES)
        fail_at(f, "%zu bytes of static shared memory, more than the %d a block may have",
                b->shm_bytes, (int)SHARED_BYTES);
#ifdef KCPU_TSAN /* the block's memory, not this fiber's write: no race with the other fibers */
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    void *m = malloc(bytes ? bytes : 1);
    if (!m)
        die("out of memory for %zu bytes of shared memory", bytes);
    memset(m, 0xFF, bytes); /* uninitialised shared memory reads as NaN */
#ifdef KCPU_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
#endif
    b->shm[b->n_shm++] = shared_var{key, m};
    return m;
}

bool check_cfg(const site &s, const cfg &c)
{
    const uint64_t n = (uint64_t)c.block.x * c.block.y * c.block.z;
    const char *bad = n == 0 || n > MAX_THREADS              ? "block of 1 .. 1024 threads"
                      : c.block.z > 64                       ? "block.z <= 64"
                      : !c.grid.x || !c.grid.y || !c.grid.z  ? "grid dimensions >= 1"
                      : c.grid.x > 0x7fffffffu               ? "grid.x < 2^31"
                      : c.grid.y > 65535 || c.grid.z > 65535 ? "grid.y, grid.z <= 65535"
                      : c.shmem > 0                          ? "no dynamic shared memory"
                                                             : NULL;
    if (!bad && stream_device(c.stream) != current_device()) {
        warn("kernel %s (launched at %s:%d): a stream of GPU %d while GPU %d is current", s.name,
             s.file, s.line, stream_device(c.stream), current_device());
        set_error(cudaErrorInvalidResourceHandle);
        return false;
    }
    if (!bad)
        return true;
    warn("kernel %s (launched at %s:%d): invalid configuration grid (%u,%u,%u) block (%u,%u,%u) "
         "shmem %zu: needs %s",
         s.name, s.file, s.line, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
         c.shmem, bad);
    set_error(cudaErrorInvalidConfiguration);
    return false;
}

void check_arg(const site &s, int i, const void *p)
{
    if (!p)
        return;
    const int d = device_of(p);
    if (d < 0)
        die("kernel %s (launched at %s:%d): argument %d (%p) is not device memory", s.name, s.file,
            s.line, i + 1, p);
    if (d != current_device())
        die("kernel %s (launched at %s:%d): argument %d (%p) is memory of GPU %d, but the kernel "
            "runs on GPU %d",
            s.name, s.file, s.line, i + 1, p, d, current_device());
}

/* ---- warp collectives ------------------------------------------------------------------------ */

static void warp_compute(warp *w)
{
    const int width = w->width;
    for (int l = 0; l < 32; l++) {
        if (!(w->mask & 1u << l))
            continue;
        int src = l;
        switch (w->kind) {
        case W_SHFL:
            src = (l & ~(width - 1)) + (w->arg[l] & (width - 1));
            break;
        case W_SHFL_XOR:
            src = l ^ w->arg[l];
            if ((src & ~(width - 1)) != (l & ~(width - 1)))
                src = l;
            break;
        case W_SHFL_UP:
            src = (l & (width - 1)) >= w->arg[l] ? l - w->arg[l] : l;
            break;
        case W_SHFL_DOWN:
            src = (l & (width - 1)) + w->arg[l] < width ? l + w->arg[l] : l;
            break;
        default:
            break;
        }
        if (w->kind == W_BALLOT || w->kind == W_ANY || w->kind == W_ALL) {
            unsigned bits = 0;
            for (int j = 0; j < 32; j++)
                if ((w->mask & 1u << j) && w->val[j])
                    bits |= 1u << j;
            w->res[l] = w->kind == W_BALLOT ? bits : w->kind == W_ANY ? bits != 0 : bits == w->mask;
        } else {
            w->res[l] = (w->mask & 1u << src) ? w->val[src] : w->val[l];
        }
    }
}

static const char *warp_name(int kind)
{
    static const char *const names[] = {"__shfl_sync",      "__shfl_xor_sync", "__shfl_up_sync",
                                        "__shfl_down_sync", "__ballot_sync",   "__any_sync",
                                        "__all_sync",       "__syncwarp"};
    return names[kind];
}

uint64_t warp_op(int kind, unsigned mask, uint64_t val, int arg, int width, int size)
{
    fiber *f = (fiber *)cur;
    block *b = f->b;
    const int lane = (int)(f->lin % 32), base = (int)(f->lin / 32) * 32;
    warp *w = &b->w[f->lin / 32];
    if (!(mask & 1u << lane))
        fail_at(f, "%s with mask 0x%08x that does not name its own lane %d", warp_name(kind), mask,
                lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail_at(f, "%s with width %d", warp_name(kind), width);
    const int top = 31 - __builtin_clz(mask);
    if (base + top >= b->n)
        fail_at(f, "%s with mask 0x%08x names lane %d, beyond the block's %d threads",
                warp_name(kind), mask, top, b->n);
    if (mask & w->done)
        fail_at(f, "%s (mask 0x%08x): lane %d exited before the warp op", warp_name(kind), mask,
                __builtin_ctz(mask & w->done));
    if (!w->arrived) {
        w->mask = mask, w->kind = kind, w->size = size, w->width = width;
    } else if (w->mask != mask || w->kind != kind || w->size != size) {
        const int first = __builtin_ctz(w->arrived);
        fail_at(f, "%s (mask 0x%08x, %d bytes) meets lane %d at %s (mask 0x%08x, %d bytes)",
                warp_name(kind), mask, size, first, warp_name(w->kind), w->mask, w->size);
    }
    w->val[lane] = val;
    w->arg[lane] = arg;
    w->arrived |= 1u << lane;
#ifdef KCPU_TSAN /* __syncwarp orders memory among its lanes; two objects as at a barrier */
    char *sw = kind == W_SYNC ? &b->sw[f->lin / 32][f->n_sw++ & 1] : NULL;
    if (sw)
        __tsan_release(sw);
#endif
    if (w->arrived == mask) { /* the last lane: everyone's result, wake the others */
        warp_compute(w);
        w->arrived = 0;
        for (int l = 0; l < 32; l++)
            if (l != lane && (mask & 1u << l))
                b->f[base + l].state = F_RUN;
    } else {
        yield(f, F_WARP);
    }
#ifdef KCPU_TSAN
    if (sw)
        __tsan_acquire(sw);
#endif
    return w->res[lane];
}

/* ---- messages -------------------------------------------------------------------------------- */

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kcpu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kcpu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

} // namespace kcpu
