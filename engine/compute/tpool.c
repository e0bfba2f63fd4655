/*
 * tpool — persistent thread pool: dispatch by generation counter, spin-then-futex waits, an
 * in-dispatch barrier.
 *
 * What it is not: a task queue. Every dispatch runs one function on all threads; splitting the
 * work is the function's business (tpool_split helps).
 *
 * Protocol (all counters are 32-bit atomics, each hot group on its own cache line):
 * - Dispatch: the caller writes fn/ctx (plain fields), sets `pending` = nth - 1, then increments
 *   `gen`. A worker that sees `gen` change runs fn, then decrements `pending`. The caller runs
 *   its own share as thread 0 and waits for `pending` == 0.
 * - Barrier: each arriving thread increments `bar_arrived`; the last one resets it to 0 and
 *   increments `bar_gen`, which the others wait on.
 * - Shutdown: `stop` is set before the final increment of `gen`.
 * - Entry: every dispatch also opens `entry` (before its `gen` increment): the generation's low
 *   16 bits as a tag, an OPEN bit and the count of workers inside. A worker that sees `gen` = g
 *   joins by a CAS that adds 1 while the tag is g's and OPEN is set, and leaves by subtracting
 *   1. So a worker runs each generation at most once, and only while its dispatch is open. An
 *   all-thread dispatch (tpool_run) stays open until `pending` reaches 0, so every worker joins
 *   it; a chunked one (tpool_run_chunks) is closed by the caller once every chunk is claimed,
 *   and the caller then waits only for the count to drop to 0: a worker still asleep, or
 *   descheduled before it joined, finds the dispatch closed (or a newer tag) and goes back to
 *   waiting. Chunks are claimed with a relaxed fetch_add on `next`; the second phase of a
 *   two-phase dispatch waits for `done_first` to reach n_first.
 * - Pull: a worker inside a chunked dispatch sets its `inside` flag; the owner, once it has
 *   waited too long for such workers (for the entry count, or for `done_first`), moves them onto
 *   its CPU and sleeps on that word's futex (see pull_holders).
 *
 * Memory ordering:
 * - The caller's plain writes (fn, ctx, the caller's data) are published by the increment of
 *   `gen` (seq_cst, so release) and acquired by the workers' load of `gen`.
 * - Workers' writes are published by their decrement of `pending` (seq_cst RMW, so release;
 *   RMWs extend the release sequence) and acquired by the caller's load that sees 0.
 * - Barrier: arrivals are acq_rel RMWs on one counter, so the last arriver has acquired every
 *   earlier arrival; its increment of `bar_gen` releases all of it to the waiters' acquire load.
 *   The reset of `bar_arrived` happens-before any arrival at the next barrier, because every
 *   thread passes the current barrier (acquiring `bar_gen`) first.
 * - Entry: the caller writes the dispatch's fields (plain) before its release store of `entry`;
 *   a joining CAS (acquire) that sees the tag and OPEN sees them. A worker's writes are
 *   released by its leaving RMW and acquired by the caller's load that sees the count at 0.
 *   Phase-one chunks release their writes with the increment of `done_first`, acquired by the
 *   wait of a phase-two chunk.
 * - Sleeping never carries data; it only has to avoid lost wake-ups. A sleeper increments a
 *   `*_sleepers` counter and then re-reads the word (both seq_cst); a waker changes the word and
 *   then reads the sleeper counter (both seq_cst). In the single total order at least one of them
 *   sees the other, and FUTEX_WAIT itself refuses to sleep if the word already changed.
 *
 * Invariants: between dispatches pending == 0, bar_arrived == 0 and entry's count == 0 with OPEN
 * clear; a worker processes every all-thread generation exactly once (such a generation cannot
 * end without every worker) and a chunked one at most once.
 *
 * Threads: see tpool.h. Workers only touch the pool fields listed above and fn's data.
 */
#include "tpool.h" // defines: tpool_t, tpool_fn

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/util.h" // defines: xcalloc, xaligned_alloc, ASSERT, LOG_D, LOG_E

#define CACHE_LINE 64
#define SPIN_PURE_NS 10000 /* spin without yielding this long, see spin_change */

/* The entry word: tag (generation's low 16 bits) | OPEN | count of workers inside. */
#define ENTRY_OPEN 0x8000u
#define ENTRY_COUNT 0x7fffu
#define ENTRY_TAG(g) (((g)&0xffffu) << 16)

enum { MODE_ALL, MODE_CHUNKS };

/* A stall (see note_wait): the caller waited for workers more than STALL_MIN_NS and more than
 * STALL_CHUNKS of its own chunks; it then runs alone for SOLO_MIN_NS .. SOLO_MAX_NS. */
#define STALL_MIN_NS 200000
#define STALL_CHUNKS 4
#define HELP_DECAY 0.995
#define SOLO_WAITS 16
#define SOLO_MIN_NS 2000000
#define SOLO_MAX_NS 1000000000

/* A word that threads wait on, with the count of threads sleeping (or about to) on it. */
typedef struct waitword {
    _Atomic uint32_t word;
    _Atomic uint32_t sleepers;
} waitword;

/* A worker. `inside` and `pulled` are its own cache line's (the array is cache-line aligned). */
typedef struct worker {
    _Alignas(CACHE_LINE) _Atomic int inside; /* joined a chunked dispatch, not yet left */
    _Atomic int pulled;                      /* on the owner's CPU (see pull_holders) */
    _Atomic int64_t since;                   /* when it joined or started its latest chunk */
    pid_t tid;                               /* set before the start-up handshake */
    cpu_set_t home;                          /* its affinity after binding itself */
    tpool_t *pool;
    int ith;
    const topo_coreset *cores; /* borrowed; only read before the start-up handshake ends */
    pthread_t thread;
} worker;

struct tpool {
    /* Read-mostly: fixed at creation (spin_ns changes only while idle, stop only at the end). */
    int n;               /* threads, caller included */
    _Atomic int spin_ns; /* idle spin budget; relaxed, read at each wait */
    _Atomic int stop;    /* set before the final gen increment */
    worker *workers;     /* [n]; entry 0 unused (the caller); owned */
    int caller_pu;       /* OS index of unit 0 of the creation core set, or -1 (unbound) */
    bool yield;          /* threads may share a CPU: spinning waits yield (spin_change) */
    bool no_pull;        /* owner only: the OS refused a pull (see pull_holders): none more */
    char name[16];

    /* Written by the owner once per dispatch, on the line of the word that publishes it, so a
     * woken worker fetches one cache line. fn/ctx are plain: published by `gen`. */
    _Alignas(CACHE_LINE) waitword gen; /* dispatch generation */
    tpool_fn fn;
    void *ctx;
    int mode;           /* MODE_ALL (fn) or MODE_CHUNKS (cfn) */
    int64_t solo_until; /* owner only: chunked dispatches run on the caller alone until */
    int64_t solo_ns;    /* owner only: the current backoff, see note_wait */
    int64_t n_stalls;   /* owner only: stalls seen (tpool_stalls) */
    int64_t n_solo;     /* owner only: of which started a run alone */
    int64_t n_pulls;    /* owner only: workers pulled onto the owner's CPU (pull_holders) */
    double help_ns;     /* owner only: decayed sums of the workers' help and of the */
    double lost_ns;     /*   caller's waits for them, see note_wait */
    tpool_chunk_fn cfn; /* MODE_CHUNKS: */
    int64_t n_chunks;   /*   chunks [0, n_chunks) */
    int64_t n_first;    /*   of which the first phase */

    /* Owner and workers: who is inside the current dispatch (see the protocol above). */
    _Alignas(CACHE_LINE) waitword entry;
    _Alignas(CACHE_LINE) _Atomic int64_t next; /* the next unclaimed chunk */
    _Alignas(CACHE_LINE) waitword done_first;  /* first-phase chunks done */

    /* Owner and workers: the completion count. `busy` lives here because the owner holds this
     * line anyway when it writes the flag (right after reading / writing `pending`). */
    _Alignas(CACHE_LINE) waitword pending; /* workers still running the current dispatch */
    _Atomic int busy; /* a dispatch is running; catches nested / concurrent tpool_run */
    _Alignas(CACHE_LINE) _Atomic uint32_t bar_arrived;
    _Alignas(CACHE_LINE) waitword bar_gen; /* barrier generation; waiters spin here */
};

/* ================================================================================================
 * Waiting: spin, then futex
 * ============================================================================================== */

/* A spin-loop hint: lets the sibling hyperthread run and avoids a memory-order mis-speculation
 * flush when the awaited store lands. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t old)
{
    /* Returns at once (EAGAIN) if *w != old; spurious returns are handled by the caller's loop. */
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Spin until w->word != old, for at most spin_ns; returns the new value or old on timeout.
 * With `yield`, after SPIN_PURE_NS the loop also calls sched_yield at each clock check. A
 * healthy dispatch is seen within ~1 us, long before that; the yield matters when the thread we
 * wait for may share our CPU (an unbound pool): measured on a 2-core VM with both pool threads
 * on one CPU, pure spinning took ~210 us per dispatch (two spin windows), the yielding phase
 * ~27 us. A pool whose threads have a core each does not yield: there the thread waited for is
 * elsewhere, and a yield only hands this core to other processes for a time slice. */
static uint32_t spin_change(waitword *w, uint32_t old, int spin_ns, bool yield)
{
    int64_t start = now_ns();
    for (unsigned i = 1;; i++) {
        uint32_t v = atomic_load_explicit(&w->word, memory_order_acquire);
        if (v != old)
            return v;
        if ((i & 63) == 0) { /* the clock costs ~20 ns: read it every 64 pauses */
            int64_t elapsed = now_ns() - start;
            if (elapsed >= spin_ns)
                return old;
            if (yield && elapsed >= SPIN_PURE_NS)
                sched_yield();
        }
        cpu_relax();
    }
}

/* Sleep until w->word != old (acquire); returns the new value. */
static uint32_t sleep_change(waitword *w, uint32_t old)
{
    uint32_t v;
    atomic_fetch_add(&w->sleepers, 1);
    while ((v = atomic_load(&w->word)) == old)
        futex_wait(&w->word, old);
    atomic_fetch_sub(&w->sleepers, 1);
    return v;
}

/* Wait until w->word != old (acquire), spinning first; returns the new value. */
static uint32_t wait_change(tpool_t *p, waitword *w, uint32_t old)
{
    int spin = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
    uint32_t v = spin > 0 ? spin_change(w, old, spin, p->yield) : old;
    return v != old ? v : sleep_change(w, old);
}

/* After changing w->word (seq_cst): wake its sleepers, if any (a syscall only when needed). */
static void wake_sleepers(waitword *w)
{
    if (atomic_load(&w->sleepers) > 0)
        futex_wake_all(&w->word);
}

/* Owner side: wait until every worker has finished the current dispatch. */
static void wait_pending(tpool_t *p)
{
    uint32_t v;
    while ((v = atomic_load_explicit(&p->pending.word, memory_order_acquire)) != 0)
        wait_change(p, &p->pending, v);
}

/* Worker side: this worker is done with the dispatch; the last one wakes the owner. */
static void finish_one(tpool_t *p)
{
    if (atomic_fetch_sub(&p->pending.word, 1) == 1)
        wake_sleepers(&p->pending);
}

/* ================================================================================================
 * Entry and chunks
 * ============================================================================================== */

/* Join dispatch g: true when it is still open (the dispatch's fields are then visible). */
static bool join(tpool_t *p, uint32_t g)
{
    uint32_t e = atomic_load_explicit(&p->entry.word, memory_order_acquire);
    for (;;) {
        if ((e & ~(ENTRY_OPEN | ENTRY_COUNT)) != ENTRY_TAG(g) || !(e & ENTRY_OPEN))
            return false;
        if (atomic_compare_exchange_weak_explicit(&p->entry.word, &e, e + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    }
}

/* Leave the dispatch; the last worker out of a closed one wakes the owner. */
static void leave(tpool_t *p)
{
    const uint32_t e = atomic_fetch_sub(&p->entry.word, 1) - 1;
    if (!(e & ENTRY_OPEN) && (e & ENTRY_COUNT) == 0)
        wake_sleepers(&p->entry);
}

/* Owner side: close the entry, then wait until every worker inside has left. */
static void close_entry(tpool_t *p)
{
    uint32_t e = atomic_fetch_and(&p->entry.word, ~ENTRY_OPEN) & ~ENTRY_OPEN;
    while (e & ENTRY_COUNT)
        e = wait_change(p, &p->entry, e);
}

/* ================================================================================================
 * Pulling a descheduled worker onto the owner's CPU
 * ============================================================================================== */

/*
 * A worker whose core is shared with another process (a busy neighbour) is descheduled for the
 * neighbour's time slices, milliseconds at a time. When that happens while it holds a chunk, the
 * owner soon has nothing left but to wait for that chunk. Instead, once it has waited
 * PULL_LATE_NS plus 1.5 of its own chunks of that phase (they are measured; the chunks of a
 * phase cost about the same, and a running worker started its last chunk before the owner's last
 * one, so it finishes within about one chunk of the owner) for a worker that has also been that
 * long in its chunk (a worker's first chunk of a dispatch can take longer: it fetches what the
 * owner just wrote), the owner moves every worker still inside the dispatch onto its own CPU
 * (sched_setaffinity of that thread) and sleeps on a futex: the kernel runs the worker there at
 * once, it finishes the chunk, claims no other, leaves the dispatch (which wakes the owner) and
 * waits for the next one without spinning. The owner then gives the worker its own affinity back
 * (send_home), which moves it home even while it is only queued behind the owner (were the worker
 * to do it itself, it would first have to wait for the owner to leave the CPU, its own core idle
 * meanwhile). Only the owner changes a worker's affinity after start-up, so the two changes
 * cannot cross. A false alarm costs two migrations and a futex wake-up while the owner had
 * nothing else to do.
 */
#define PULL_LATE_NS 20000
#define PULL_UNKNOWN_NS 100000 /* the chunk time when the owner ran none */

/* How long the owner waits before pulling, for chunks of `chunk` ns. */
static int64_t pull_patience(int64_t chunk)
{
    return chunk > 0 ? PULL_LATE_NS + chunk * 3 / 2 : PULL_UNKNOWN_NS;
}

/* Owner side, waiting since `start`: at time t, pull? (see above) */
static bool pull_due(const tpool_t *p, int64_t start, int64_t t, int64_t patience)
{
    if (t - start < patience)
        return false;
    for (int i = 1; i < p->n; i++) {
        const worker *w = &p->workers[i];
        if (atomic_load_explicit(&w->inside, memory_order_relaxed) &&
            t - atomic_load_explicit(&w->since, memory_order_relaxed) >= patience)
            return true;
    }
    return false;
}

/* Owner side: move every worker inside the dispatch onto the calling thread's CPU; returns how many
 * moved. The caller must then sleep, not spin, or the worker cannot run there. */
static int pull_holders(tpool_t *p)
{
    const int cpu = p->no_pull ? -1 : sched_getcpu();
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return 0;
    cpu_set_t here;
    CPU_ZERO(&here);
    CPU_SET(cpu, &here);
    int moved = 0;
    for (int i = 1; i < p->n; i++) {
        worker *w = &p->workers[i];
        if (!atomic_load_explicit(&w->inside, memory_order_relaxed) || CPU_COUNT(&w->home) == 0 ||
            CPU_EQUAL(&w->home, &here))
            continue;
        atomic_store_explicit(&w->pulled, 1, memory_order_relaxed);
        if (sched_setaffinity(w->tid, sizeof here, &here) == 0) {
            moved++;
        } else { /* e.g. a cpuset that changed under us: wait as before from now on */
            atomic_store_explicit(&w->pulled, 0, memory_order_relaxed);
            p->no_pull = true;
            LOG_D("pool %s: cannot move thread %d to CPU %d; no more pulls", p->name, i, cpu);
        }
    }
    p->n_pulls += moved;
    return moved;
}

/* Owner side, once the pulled workers are done with what it waited for: their own affinity back. */
static void send_home(tpool_t *p)
{
    for (int i = 1; i < p->n; i++) {
        worker *w = &p->workers[i];
        if (!atomic_load_explicit(&w->pulled, memory_order_relaxed))
            continue;
        if (sched_setaffinity(w->tid, sizeof w->home, &w->home) != 0) {
            p->no_pull = true; /* it stays on this CPU until it is given its affinity back */
            LOG_W("pool %s: cannot give thread %d its CPUs back", p->name, i);
        }
        atomic_store_explicit(&w->pulled, 0, memory_order_relaxed);
    }
}

/* Owner side, once a pull is due: move the workers inside onto this CPU (pull_holders), sleep
 * until (w->word & mask) == target, then send them home. Returns false, having done nothing
 * more, when no worker could be moved. */
static bool pull_and_sleep(tpool_t *p, waitword *w, uint32_t mask, uint32_t target)
{
    if (pull_holders(p) == 0)
        return false;
    uint32_t v = atomic_load_explicit(&w->word, memory_order_acquire);
    while ((v & mask) != target)
        v = sleep_change(w, v);
    send_home(p);
    return true;
}

/* Owner side of a chunked dispatch: close the entry and wait until every worker inside has left;
 * pull them (see above) and sleep once both this wait and a worker's chunk last `patience` ns. */
static void close_chunks(tpool_t *p, int64_t patience)
{
    uint32_t e = atomic_fetch_and(&p->entry.word, ~ENTRY_OPEN) & ~ENTRY_OPEN;
    const int64_t start = now_ns();
    for (unsigned i = 1; e & ENTRY_COUNT; i++) {
        if ((i & 63) == 0 && pull_due(p, start, now_ns(), patience)) {
            if (pull_and_sleep(p, &p->entry, ENTRY_COUNT, 0))
                return;
            while (e & ENTRY_COUNT)
                e = wait_change(p, &p->entry, e);
            return;
        }
        cpu_relax();
        e = atomic_load_explicit(&p->entry.word, memory_order_acquire);
    }
}

/* Wait until the first phase of the current dispatch is done. Its chunks are held by running
 * threads, so this spins (yielding where the holder may share this CPU); the owner
 * (patience >= 0) pulls the workers inside as close_chunks does, then sleeps. done_first only
 * counts first-phase chunks, so it stops at n_first. */
static void wait_first(tpool_t *p, int64_t patience)
{
    const uint32_t n_first = (uint32_t)p->n_first;
    int64_t start = 0;
    for (unsigned i = 1;; i++) {
        uint32_t v = atomic_load_explicit(&p->done_first.word, memory_order_acquire);
        if (v >= n_first)
            return;
        if ((i & 63) == 0) {
            const int64_t t = now_ns();
            if (!start)
                start = t;
            if (patience >= 0 && pull_due(p, start, t, patience) &&
                pull_and_sleep(p, &p->done_first, UINT32_MAX, n_first))
                return;
            if (p->yield && t - start >= SPIN_PURE_NS) /* the holder may share this CPU */
                sched_yield();
        }
        cpu_relax();
    }
}

/* The owner's chunks of one dispatch: time and count per phase (0: first, 1: second), and the
 * time it waited for the first phase. The phases' chunks can differ a lot in cost (quantising
 * the activations vs output rows), so pulls compare a worker with the owner's chunks of the
 * phase it waits for. */
typedef struct own_chunks {
    int64_t ns[2], n[2], waited;
} own_chunks;

static int64_t own_avg(const own_chunks *o, int phase)
{
    return o->n[phase] > 0 ? o->ns[phase] / o->n[phase] : 0;
}

/* Claim and run chunks of the current dispatch until none is left; returns how many ran here.
 * Owner (ith 0): its chunks are timed into *o. A worker stops after a chunk during which it was
 * pulled onto the owner's CPU. */
static int64_t run_chunks(tpool_t *p, int ith, own_chunks *o)
{
    const int64_t n = p->n_chunks, n_first = p->n_first;
    worker *w = ith > 0 ? &p->workers[ith] : NULL;
    bool first_done = n_first == 0;
    for (int64_t ran = 0;; ran++) {
        const int64_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (c >= n)
            return ran;
        if (c >= n_first && !first_done) {
            if (w) {
                wait_first(p, -1);
            } else {
                const int64_t t = now_ns();
                wait_first(p, pull_patience(own_avg(o, 0)));
                o->waited += now_ns() - t;
            }
            first_done = true;
        }
        const int64_t ts = now_ns();
        if (w)
            atomic_store_explicit(&w->since, ts, memory_order_relaxed);
        p->cfn(p->ctx, c, ith);
        if (!w) {
            o->ns[c >= n_first] += now_ns() - ts;
            o->n[c >= n_first]++;
        }
        if (c < n_first && atomic_fetch_add(&p->done_first.word, 1) + 1 == (uint32_t)n_first)
            wake_sleepers(&p->done_first);
        if (w && atomic_load_explicit(&w->pulled, memory_order_relaxed))
            return ran + 1; /* on the owner's CPU: leave it to the owner */
    }
}

/*
 * Owner side, after a chunked dispatch: the caller ran `ran` of its n chunks (`chunk` ns each on
 * average) and then waited `wait` ns for the workers' chunks (or for their first-phase chunks).
 * The workers saved the caller about (n - ran) x chunk; a wait of several chunks means a worker
 * was descheduled holding one (a busy neighbour on its core, more runnable threads than cores)
 * and cost that wait. Both are summed with a decay (about the last few hundred dispatches).
 * When a stall happens while the waits outweigh the help, the caller runs the dispatches alone
 * for a backoff time (SOLO_WAITS x the wait at least, doubling with each such stall in a row, up
 * to SOLO_MAX_NS; halving with each dispatch without one) and then tries the workers again. On a
 * quiet machine a worker's chunk ends within about one chunk of the caller's last one, so this
 * never triggers.
 */
static void note_wait(tpool_t *p, int64_t n, int64_t ran, int64_t chunk, int64_t wait)
{
    if (ran == 0) /* no chunk of the caller's to compare the wait with */
        return;
    p->help_ns = p->help_ns * HELP_DECAY + (double)((n - ran) * chunk);
    p->lost_ns = p->lost_ns * HELP_DECAY + (double)wait;
    if (wait > STALL_MIN_NS && wait > STALL_CHUNKS * chunk) {
        p->n_stalls++;
        if (p->lost_ns > p->help_ns) {
            const int64_t b =
                2 * p->solo_ns > SOLO_WAITS * wait ? 2 * p->solo_ns : SOLO_WAITS * wait;
            p->solo_ns = b < SOLO_MIN_NS ? SOLO_MIN_NS : b > SOLO_MAX_NS ? SOLO_MAX_NS : b;
            p->solo_until = now_ns() + p->solo_ns;
            p->n_solo++;
            return;
        }
    }
    p->solo_ns /= 2;
    p->solo_until = 0;
}

/* Owner side: publish a dispatch whose fields are written: open the entry, then bump `gen`. */
static void publish(tpool_t *p)
{
    const uint32_t g = atomic_load_explicit(&p->gen.word, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->entry.word, ENTRY_TAG(g) | ENTRY_OPEN, memory_order_release);
    atomic_fetch_add(&p->gen.word, 1); /* publishes the fields and the caller's data */
    wake_sleepers(&p->gen);
}

/* ================================================================================================
 * Workers
 * ============================================================================================== */

static void name_thread(const tpool_t *p, int ith)
{
    char name[16];
    snprintf(name, sizeof name, "%.10s/%d", p->name, ith);
    pthread_setname_np(pthread_self(), name);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    tpool_t *p = w->pool;
    name_thread(p, w->ith);
    if (w->cores)
        topo_bind_unit(w->cores, w->ith); /* failure is logged once inside and tolerated */
    w->cores = NULL;
    w->tid = (pid_t)syscall(SYS_gettid);
    if (sched_getaffinity(0, sizeof w->home, &w->home) != 0)
        CPU_ZERO(&w->home); /* unknown: pull_holders leaves it alone */
    uint32_t seen = atomic_load_explicit(&p->gen.word, memory_order_acquire);
    finish_one(p); /* start-up handshake: tpool_create waits for every worker */
    for (;;) {
        /* pulled: the owner's CPU until the owner sends it home; spinning would hold that up */
        seen = atomic_load_explicit(&w->pulled, memory_order_relaxed)
                   ? sleep_change(&p->gen, seen)
                   : wait_change(p, &p->gen, seen);
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            break;
        if (!join(p, seen))
            continue; /* a chunked dispatch that ended without us */
        if (p->mode == MODE_ALL) {
            p->fn(p->ctx, w->ith, p->n);
            leave(p);
            finish_one(p);
        } else {
            atomic_store_explicit(&w->since, now_ns(), memory_order_relaxed);
            atomic_store_explicit(&w->inside, 1, memory_order_relaxed);
            run_chunks(p, w->ith, NULL);
            leave(p);
            atomic_store_explicit(&w->inside, 0, memory_order_relaxed);
        }
    }
    return NULL;
}

/* Ask the workers [1, n_started) to exit and join them. */
static void stop_workers(tpool_t *p, int n_started)
{
    atomic_store_explicit(&p->stop, 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen.word, 1); /* releases `stop` */
    wake_sleepers(&p->gen);
    for (int i = 1; i < n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
}

/* Start workers 1..n-1 and wait until each has bound itself. Returns 0, or the index of the
 * worker the OS refused to create (workers before it are running). */
static int start_workers(tpool_t *p, const topo_coreset *cores)
{
    atomic_store_explicit(&p->pending.word, (uint32_t)(p->n - 1), memory_order_relaxed);
    for (int i = 1; i < p->n; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        p->workers[i].cores = cores;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            atomic_fetch_sub(&p->pending.word, (uint32_t)(p->n - i)); /* never coming */
            wait_pending(p);
            return i;
        }
    }
    wait_pending(p);
    return 0;
}

/* ================================================================================================
 * Public API
 * ============================================================================================== */

/* Default spin budget: TPOOL_SPIN_US, or 0 when the pool has more threads than the CPUs it may
 * use (its core set, else the creating thread's affinity). Oversubscribed spinners steal the
 * time slices of the threads they wait for: 3 threads on a 2-core VM measured ~15-20 us per
 * dispatch futex-only, ~40-60 us with spin_change's yield phase, ~600 us spinning without it. */
static int default_spin_ns(int n_threads, const topo_coreset *cores)
{
    cpu_set_t mask;
    int cpus = cores ? cores->n : 0;
    if (!cores && sched_getaffinity(0, sizeof mask, &mask) == 0)
        cpus = CPU_COUNT(&mask);
    return cpus > 0 && n_threads > cpus ? 0 : TPOOL_SPIN_US * 1000;
}

tpool_t *tpool_create(int n_threads, const topo_coreset *cores, const char *name)
{
    if (n_threads == 0)
        n_threads = cores ? cores->n : 1;
    ASSERT(n_threads >= 1);
    tpool_t *p = xaligned_alloc(sizeof *p); /* the waitwords want their own cache lines */
    memset(p, 0, sizeof *p);                /* all-zero is a valid state for every atomic here */
    p->n = n_threads;
    p->caller_pu = cores && cores->n > 0 ? cores->pu[0] : -1;
    p->yield = !cores || cores->n < n_threads;
    atomic_init(&p->spin_ns, default_spin_ns(n_threads, cores));
    p->workers = xaligned_alloc((size_t)n_threads * sizeof *p->workers); /* `inside` lines */
    memset(p->workers, 0, (size_t)n_threads * sizeof *p->workers);
    snprintf(p->name, sizeof p->name, "%s", name ? name : "tpool");
    int failed = start_workers(p, cores);
    if (failed) {
        LOG_E("pool %s: cannot create thread %d of %d", p->name, failed, n_threads);
        stop_workers(p, failed);
        goto fail;
    }
    LOG_D("pool %s: %d threads%s, spin %d us", p->name, n_threads, cores ? ", bound" : "",
          atomic_load_explicit(&p->spin_ns, memory_order_relaxed) / 1000);
    return p;
fail:
    free(p->workers);
    free(p);
    return NULL;
}

int tpool_size(const tpool_t *p)
{
    return p->n;
}

int64_t tpool_stalls(const tpool_t *p)
{
    return p->n_stalls;
}

int64_t tpool_pulls(const tpool_t *p)
{
    return p->n_pulls;
}

int tpool_bind_caller(const tpool_t *p)
{
    if (p->caller_pu < 0 || p->caller_pu >= CPU_SETSIZE)
        return 0;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    CPU_SET(p->caller_pu, &mask);
    return sched_setaffinity(0, sizeof mask, &mask) == 0 ? 0 : -1;
}

void tpool_set_spin_us(tpool_t *p, int us)
{
    ASSERT(us >= 0 && us <= 1000000);
    atomic_store_explicit(&p->spin_ns, us * 1000, memory_order_relaxed);
}

void tpool_run(tpool_t *p, tpool_fn fn, void *ctx)
{
    int was_busy = atomic_exchange_explicit(&p->busy, 1, memory_order_relaxed);
    ASSERT(!was_busy);
    p->fn = fn;
    p->ctx = ctx;
    p->mode = MODE_ALL;
    if (p->n > 1) {
        atomic_store_explicit(&p->pending.word, (uint32_t)(p->n - 1), memory_order_relaxed);
        publish(p); /* publishes fn, ctx, pending and the caller's data */
    }
    fn(ctx, 0, p->n);
    if (p->n > 1) {
        wait_pending(p);
        close_entry(p);
    }
    atomic_store_explicit(&p->busy, 0, memory_order_relaxed);
}

void tpool_run_chunks(tpool_t *p, tpool_chunk_fn fn, void *ctx, int64_t n, int64_t n_first)
{
    ASSERT(n_first >= 0 && n_first <= (n > 0 ? n : 0));
    if (n <= 0)
        return;
    if (p->n == 1 || (p->solo_until && now_ns() < p->solo_until)) {
        for (int64_t c = 0; c < n; c++) /* in order: phase one before phase two */
            fn(ctx, c, 0);
        return;
    }
    int was_busy = atomic_exchange_explicit(&p->busy, 1, memory_order_relaxed);
    ASSERT(!was_busy);
    p->mode = MODE_CHUNKS;
    p->cfn = fn;
    p->ctx = ctx;
    p->n_chunks = n;
    p->n_first = n_first;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->done_first.word, 0, memory_order_relaxed);
    publish(p);
    own_chunks o = {{0, 0}, {0, 0}, 0};
    const int64_t t0 = now_ns(), ran = run_chunks(p, 0, &o), t1 = now_ns();
    /* every chunk is claimed: wait for the ones workers hold (of the last phase) */
    close_chunks(p, pull_patience(own_avg(&o, n > n_first)));
    note_wait(p, n, ran, ran > 0 ? (t1 - t0 - o.waited) / ran : 0, now_ns() - t1 + o.waited);
    atomic_store_explicit(&p->busy, 0, memory_order_relaxed);
}

void tpool_barrier(tpool_t *p)
{
    if (p->n == 1)
        return;
    ASSERT(p->mode == MODE_ALL); /* a chunked dispatch has no fixed set of threads */
    /* Read before arriving: the generation cannot advance until this thread has arrived. */
    uint32_t g = atomic_load_explicit(&p->bar_gen.word, memory_order_relaxed);
    uint32_t arrived = atomic_fetch_add_explicit(&p->bar_arrived, 1, memory_order_acq_rel);
    if (arrived == (uint32_t)p->n - 1) {
        atomic_store_explicit(&p->bar_arrived, 0, memory_order_relaxed);
        atomic_fetch_add(&p->bar_gen.word, 1);
        wake_sleepers(&p->bar_gen);
        return;
    }
    wait_change(p, &p->bar_gen, g);
}

void tpool_destroy(tpool_t *p)
{
    if (!p)
        return;
    ASSERT(atomic_load_explicit(&p->busy, memory_order_relaxed) == 0);
    if (p->n_stalls || p->n_pulls)
        LOG_D("pool %s: %lld stalls, %lld runs on the caller alone, %lld pulls", p->name,
              (long long)p->n_stalls, (long long)p->n_solo, (long long)p->n_pulls);
    stop_workers(p, p->n);
    free(p->workers);
    free(p);
}

void tpool_split(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi)
{
    ASSERT(n >= 0 && nth >= 1 && ith >= 0 && ith < nth && align >= 1);
    int64_t blocks = (n + align - 1) / align;
    int64_t b0 = blocks * ith / nth;
    int64_t b1 = blocks * (ith + 1) / nth;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}
