/*
 * test_tpool — engine/compute/tpool.c: range sums and index coverage across many dispatches,
 * ordered barrier phases, chunked dispatches (every chunk once, the second phase after the first,
 * interleaved with all-thread dispatches, slow and absent workers, a stalled worker, a worker
 * pulled onto the caller's CPU), 10^5
 * back-to-back dispatches, the futex (no spin) path, bound pools, destroy while idle; then a
 * micro-benchmark of dispatch and barrier latency (printed, never asserted).
 *
 * The data races this test would expose are plain (non-atomic) accesses on purpose, so that
 * `make tsan` checks the pool's happens-before edges.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "engine/compute/topo.h"  // defines: topo_create, topo_split
#include "engine/compute/tpool.h" // defines: tpool_*
#include "test.h"

#if defined(__SANITIZE_THREAD__)
#define SLOW 10 /* ThreadSanitizer: fewer iterations */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLOW 10
#endif
#endif
#ifndef SLOW
#define SLOW 1
#endif

#define MAX_THREADS 8

static int n_cpus(void)
{
    cpu_set_t m;
    sched_getaffinity(0, sizeof m, &m);
    return CPU_COUNT(&m);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- tpool_split ----------------------------------------------------------------------------- */

TEST(split_properties)
{
    for (int64_t n = 0; n < 300; n += 7) {
        for (int nth = 1; nth <= 9; nth++) {
            for (int64_t align = 1; align <= 64; align *= 4) {
                int64_t prev = 0, blocks = (n + align - 1) / align;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t lo, hi;
                    tpool_split(n, ith, nth, align, &lo, &hi);
                    CHECK_EQ(lo, prev);
                    CHECK(hi >= lo && hi <= n);
                    CHECK(lo % align == 0 || lo == n);
                    CHECK(hi % align == 0 || hi == n);
                    int64_t nb = (hi - lo + align - 1) / align; /* near-equal shares */
                    CHECK(nb == blocks / nth || nb == blocks / nth + 1);
                    prev = hi;
                }
                CHECK_EQ(prev, n);
            }
        }
    }
}

/* ---- range sums and index coverage ---------------------------------------------------------- */

typedef struct sum_ctx {
    const int64_t *data;
    int64_t n;
    int64_t align;
    int64_t partial[MAX_THREADS]; /* one per thread, plain writes */
    unsigned char *visits;        /* [n] each index bumped by its owner only */
} sum_ctx;

static void sum_fn(void *arg, int ith, int nth)
{
    sum_ctx *c = arg;
    int64_t lo, hi, s = 0;
    tpool_split(c->n, ith, nth, c->align, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        s += c->data[i];
        c->visits[i]++;
    }
    c->partial[ith] = s;
}

static void check_sums(int nth, int dispatches)
{
    enum { N = 10007 };
    static int64_t data[N];
    static unsigned char visits[N];
    for (int64_t i = 0; i < N; i++)
        data[i] = i * 3 - 7;
    tpool_t *p = tpool_create(nth, NULL, "sum");
    sum_ctx c = {.data = data, .visits = visits};
    int bad = 0;
    for (int d = 0; d < dispatches; d++) {
        c.n = d % N;
        c.align = 1 + d % 33;
        memset(visits, 0, sizeof visits);
        tpool_run(p, sum_fn, &c);
        int64_t got = 0, want = 0;
        for (int t = 0; t < nth; t++)
            got += c.partial[t];
        for (int64_t i = 0; i < c.n; i++) {
            want += data[i];
            bad += visits[i] != 1;
        }
        bad += got != want;
    }
    CHECK_EQ(bad, 0);
    tpool_destroy(p);
}

TEST(sums_and_visits)
{
    check_sums(1, 200);
    check_sums(2, 2000 / SLOW);
    check_sums(3, 1000 / SLOW);
    check_sums(MAX_THREADS, 300 / SLOW); /* oversubscribed on small machines */
}

/* ---- barrier phases -------------------------------------------------------------------------- */

enum { PHASES = 50 };

typedef struct phase_ctx {
    int stamp[PHASES][MAX_THREADS]; /* plain: written in phase k, read after the barrier */
    int errors[MAX_THREADS];
    int round;
    tpool_t *pool;
} phase_ctx;

/* Phase k: every thread stamps its slot, then (after the barrier) checks everyone's stamp of
 * phase k and that nobody has stamped phase k+1 yet. */
static void phase_fn(void *arg, int ith, int nth)
{
    phase_ctx *c = arg;
    tpool_t *pool = c->pool;
    int err = 0;
    for (int k = 0; k < PHASES; k++) {
        c->stamp[k][ith] = c->round * 1000 + k;
        tpool_barrier(pool);
        for (int j = 0; j < nth; j++)
            err += c->stamp[k][j] != c->round * 1000 + k;
        if (k + 1 < PHASES)
            for (int j = 0; j < nth; j++)
                err += c->stamp[k + 1][j] == c->round * 1000 + k + 1;
        tpool_barrier(pool); /* nobody overwrites phase k+1 until all have checked it */
    }
    c->errors[ith] += err;
}

static void check_phases(int nth, int rounds, int spin_us)
{
    static phase_ctx c;
    memset(&c, 0, sizeof c);
    c.pool = tpool_create(nth, NULL, "phase");
    tpool_set_spin_us(c.pool, spin_us);
    for (int r = 1; r <= rounds; r++) {
        c.round = r;
        tpool_run(c.pool, phase_fn, &c);
    }
    int err = 0;
    for (int t = 0; t < nth; t++)
        err += c.errors[t];
    CHECK_EQ(err, 0);
    tpool_destroy(c.pool);
}

TEST(barrier_phases)
{
    check_phases(1, 10, TPOOL_SPIN_US);
    check_phases(2, 200 / SLOW, TPOOL_SPIN_US);
    check_phases(4, 50 / SLOW, TPOOL_SPIN_US);
    check_phases(2, 20, 0); /* every wait goes through the futex */
    check_phases(3, 10, 0);
}

/* ---- chunked dispatches ---------------------------------------------------------------------- */

typedef struct count_ctx2 {
    int count[MAX_THREADS][16]; /* [thread][padding] */
} count_ctx2;

static void count2_fn(void *arg, int ith, int nth)
{
    (void)nth;
    ((count_ctx2 *)arg)->count[ith][0]++;
}

enum { CH_MAX = 600 };

typedef struct chunk_ctx {
    int64_t n, n_first;
    int round;
    int first[CH_MAX];         /* plain: phase-one chunk c writes first[c] */
    unsigned char ran[CH_MAX]; /* plain: bumped by whoever runs chunk c */
    int errors[MAX_THREADS];
    int by[MAX_THREADS][16]; /* chunks run per thread (padded) */
    int slow_every;          /* > 0: a worker chunk c with c % slow_every == 1 sleeps 200 us */
} chunk_ctx;

/* Phase one stamps its slot; phase two checks every phase-one stamp of this round. */
static void chunk_fn(void *arg, int64_t c, int ith)
{
    chunk_ctx *x = arg;
    x->ran[c]++;
    x->by[ith][0]++;
    if (x->slow_every && ith > 0 && c % x->slow_every == 1) {
        struct timespec us = {0, 200000};
        nanosleep(&us, NULL); /* a descheduled holder: the others must still wait for it */
    }
    if (c < x->n_first) {
        x->first[c] = x->round * 1000 + (int)c;
        return;
    }
    for (int64_t k = 0; k < x->n_first; k++)
        x->errors[ith] += x->first[k] != x->round * 1000 + (int)k;
}

static void check_chunks(int nth, int rounds, int spin_us)
{
    static chunk_ctx x;
    static count_ctx2 all;
    memset(&x, 0, sizeof x);
    memset(&all, 0, sizeof all);
    tpool_t *p = tpool_create(nth, NULL, "chunk");
    tpool_set_spin_us(p, spin_us);
    int bad = 0, n_all = 0;
    for (int r = 1; r <= rounds; r++) {
        x.round = r;
        x.n = (r * 37) % CH_MAX;
        x.n_first = r % 3 == 0 ? 0 : x.n / (1 + r % 5);
        x.slow_every = r % 7 == 0 ? 5 : 0;
        memset(x.ran, 0, sizeof x.ran);
        tpool_run_chunks(p, chunk_fn, &x, x.n, x.n_first);
        for (int64_t c = 0; c < CH_MAX; c++)
            bad += x.ran[c] != (c < x.n);
        if (r % 4 == 0) { /* all-thread dispatches between chunked ones still reach everyone */
            tpool_run(p, count2_fn, &all);
            n_all++;
        }
    }
    int err = 0, ran = 0;
    for (int t = 0; t < nth; t++) {
        err += x.errors[t];
        ran += x.by[t][0];
        CHECK_EQ(all.count[t][0], n_all);
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(err, 0);
    int64_t want = 0;
    for (int r = 1; r <= rounds; r++)
        want += (r * 37) % CH_MAX;
    CHECK_EQ(ran, want);
    tpool_destroy(p);
}

TEST(chunked_dispatches)
{
    check_chunks(1, 50, TPOOL_SPIN_US);
    check_chunks(2, 2000 / SLOW, TPOOL_SPIN_US);
    check_chunks(2, 300 / SLOW, 0); /* workers asleep: many dispatches end before they wake */
    check_chunks(3, 500 / SLOW, TPOOL_SPIN_US);
    check_chunks(MAX_THREADS, 200 / SLOW, TPOOL_SPIN_US); /* oversubscribed */
}

/* A worker descheduled while it holds a chunk (here: asleep in it) is a stall: tpool_stalls
 * counts it and the next dispatches run on the caller alone; every chunk still runs once. */
typedef struct stall_ctx {
    _Atomic int worker_in; /* a worker is inside its chunk */
    int ran[2];            /* plain: chunk c bumps ran[c] */
} stall_ctx;

static void stall_fn(void *arg, int64_t c, int ith)
{
    stall_ctx *x = arg;
    x->ran[c]++;
    if (ith > 0) {
        atomic_store(&x->worker_in, 1);
        struct timespec ms = {0, 20000000};
        nanosleep(&ms, NULL);
    } else {
        /* wait (at most ~1 s) for a worker to hold the other chunk */
        for (int i = 0; i < 100000 && !atomic_load(&x->worker_in); i++) {
            struct timespec us = {0, 10000};
            nanosleep(&us, NULL);
        }
    }
}

TEST(stall_runs_alone)
{
    tpool_t *p = tpool_create(2, NULL, "stall");
    static stall_ctx x;
    for (int attempt = 0; attempt < 5 && tpool_stalls(p) == 0; attempt++) {
        memset(&x, 0, sizeof x);
        tpool_run_chunks(p, stall_fn, &x, 2, 0);
        CHECK_EQ(x.ran[0], 1);
        CHECK_EQ(x.ran[1], 1);
    }
    CHECK(tpool_stalls(p) >= 1);
    static chunk_ctx y; /* the pool still runs chunked and all-thread dispatches correctly */
    memset(&y, 0, sizeof y);
    y.n = 300, y.n_first = 100, y.round = 1;
    tpool_run_chunks(p, chunk_fn, &y, y.n, y.n_first);
    for (int64_t c = 0; c < y.n; c++)
        CHECK_EQ(y.ran[c], 1);
    CHECK_EQ(y.errors[0] + y.errors[1], 0);
    static count_ctx2 all;
    memset(&all, 0, sizeof all);
    tpool_run(p, count2_fn, &all);
    CHECK_EQ(all.count[0][0] + all.count[1][0], 2);
    tpool_destroy(p);
}

/* A worker that the owner waits for too long (here: spinning in its chunk until it is moved) is
 * pulled onto the owner's CPU: its affinity narrows to that CPU while it holds the chunk, it
 * finishes there, every chunk runs once, and afterwards it runs with its own affinity again. */
typedef struct pull_ctx {
    _Atomic int worker_in; /* a worker is inside its chunk */
    _Atomic int moved;     /* the worker saw its affinity narrowed */
    int home;              /* the CPUs a thread of the test may use */
    int ran[2];            /* plain: chunk c bumps ran[c] */
} pull_ctx;

static void pull_fn(void *arg, int64_t c, int ith)
{
    pull_ctx *x = arg;
    x->ran[c]++;
    if (ith > 0) {
        atomic_store(&x->worker_in, 1);
        const double end = now_s() + 2; /* no pull in 2 s: the check below fails */
        cpu_set_t m;
        while (now_s() < end && !atomic_load(&x->moved))
            if (sched_getaffinity(0, sizeof m, &m) == 0 && CPU_COUNT(&m) < x->home)
                atomic_store(&x->moved, 1);
    } else {
        for (int i = 0; i < 100000 && !atomic_load(&x->worker_in); i++) {
            struct timespec us = {0, 10000};
            nanosleep(&us, NULL);
        }
    }
}

typedef struct aff_ctx {
    int cpus[MAX_THREADS]; /* plain: each thread's allowed CPU count */
} aff_ctx;

static void aff_fn(void *arg, int ith, int nth)
{
    (void)nth;
    cpu_set_t m;
    aff_ctx *a = arg;
    a->cpus[ith] = sched_getaffinity(0, sizeof m, &m) == 0 ? CPU_COUNT(&m) : -1;
}

TEST(pull_moves_worker)
{
    if (n_cpus() < 2) {
        printf("  (skipped: 1 CPU, nowhere to pull from)\n");
        return;
    }
    tpool_t *p = tpool_create(2, NULL, "pull");
    static pull_ctx x;
    for (int attempt = 0; attempt < 5 && tpool_pulls(p) == 0; attempt++) {
        memset(&x, 0, sizeof x);
        x.home = n_cpus();
        tpool_run_chunks(p, pull_fn, &x, 2, 0);
        CHECK_EQ(x.ran[0], 1);
        CHECK_EQ(x.ran[1], 1);
    }
    CHECK(tpool_pulls(p) >= 1);
    CHECK(atomic_load(&x.moved));
    static aff_ctx a;
    tpool_run(p, aff_fn, &a);
    CHECK_EQ(a.cpus[1], n_cpus()); /* back home */
    static chunk_ctx y;            /* and the pool still runs chunked dispatches correctly */
    memset(&y, 0, sizeof y);
    y.n = 300, y.n_first = 100, y.round = 1;
    tpool_run_chunks(p, chunk_fn, &y, y.n, y.n_first);
    for (int64_t c = 0; c < y.n; c++)
        CHECK_EQ(y.ran[c], 1);
    CHECK_EQ(y.errors[0] + y.errors[1], 0);
    tpool_destroy(p);
}

/* ---- back-to-back dispatches ----------------------------------------------------------------- */

typedef struct count_ctx {
    int64_t count[MAX_THREADS][8]; /* [thread][padding]: one cache line each */
} count_ctx;

static void count_fn(void *arg, int ith, int nth)
{
    count_ctx *c = arg;
    c->count[ith][0]++;
}

TEST(many_dispatches)
{
    int nth = n_cpus() < 4 ? n_cpus() : 4;
    if (nth < 2)
        nth = 2;
    const int n = 100000 / SLOW;
    static count_ctx c;
    memset(&c, 0, sizeof c);
    tpool_t *p = tpool_create(nth, NULL, "b2b");
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        tpool_run(p, count_fn, &c);
    double dt = now_s() - t0;
    for (int t = 0; t < nth; t++)
        CHECK_EQ(c.count[t][0], n);
    printf("  %d dispatches on %d threads in %.3f s (%.2f us each)\n", n, nth, dt, dt / n * 1e6);
    tpool_destroy(p);
}

TEST(sleeping_pool_wakes)
{
    static count_ctx c;
    memset(&c, 0, sizeof c);
    tpool_t *p = tpool_create(3, NULL, "sleepy");
    struct timespec ms = {0, 2000000};
    for (int i = 0; i < 20; i++) {
        nanosleep(&ms, NULL); /* well past the spin window: workers are in FUTEX_WAIT */
        tpool_run(p, count_fn, &c);
    }
    tpool_set_spin_us(p, 0);
    for (int i = 0; i < 2000 / SLOW; i++)
        tpool_run(p, count_fn, &c);
    for (int t = 0; t < 3; t++)
        CHECK_EQ(c.count[t][0], 20 + 2000 / SLOW);
    tpool_destroy(p);
}

TEST(destroy_idle)
{
    static count_ctx c;
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 20; i++) {
        tpool_t *p = tpool_create(1 + i % 4, NULL, "idle");
        CHECK_EQ(tpool_size(p), 1 + i % 4);
        if (i % 2)
            tpool_run(p, count_fn, &c);
        if (i % 3 == 0)
            nanosleep(&ms, NULL); /* sometimes destroyed asleep, sometimes while spinning */
        tpool_destroy(p);
    }
    tpool_destroy(NULL);
}

/* ---- bound pool ------------------------------------------------------------------------------ */

typedef struct where_ctx {
    int cpu[MAX_THREADS];
    int pinned[MAX_THREADS]; /* the thread's affinity is exactly one CPU */
} where_ctx;

static void where_fn(void *arg, int ith, int nth)
{
    where_ctx *c = arg;
    cpu_set_t m;
    sched_getaffinity(0, sizeof m, &m);
    c->pinned[ith] = CPU_COUNT(&m) == 1;
    c->cpu[ith] = sched_getcpu();
}

TEST(bound_pool)
{
    char err[256];
    topo_t *t = topo_create(err, sizeof err);
    topo_plan *plan = NULL;
    CHECK_EQ(topo_split(t, 1, 0, &plan, err, sizeof err), 0);
    const topo_coreset *cs = &plan->sets[0];
    tpool_t *p = tpool_create(0, cs, "bound");
    CHECK_EQ(tpool_size(p), cs->n);
    where_ctx c;
    memset(&c, 0, sizeof c);
    tpool_run(p, where_fn, &c);
    for (int i = 1; i < cs->n && i < MAX_THREADS; i++) {
        if (!c.pinned[i]) {
            printf("  note: worker %d not pinned (binding refused here); not an error\n", i);
            continue;
        }
        CHECK_EQ(c.cpu[i], cs->pu[i]);
    }
    tpool_destroy(p);
    topo_plan_destroy(plan);
    topo_destroy(t);
}

/* A pool made on one thread and driven from another (a TP host thread): tpool_bind_caller
 * moves the driving thread onto unit 0 of the pool's set, here the last allowed core; an
 * unbound pool leaves the thread's affinity alone. */
static void *bind_caller_thread(void *arg)
{
    const tpool_t *p = arg;
    cpu_set_t before, after;
    sched_getaffinity(0, sizeof before, &before);
    int rc = tpool_bind_caller(p);
    sched_getaffinity(0, sizeof after, &after);
    static int result[2];
    result[0] = rc;
    result[1] = rc == 0 ? CPU_COUNT(&after) : -1;
    return result;
}

TEST(bind_caller)
{
    char err[256];
    topo_t *t = topo_create(err, sizeof err);
    topo_plan *plan = NULL;
    CHECK_EQ(topo_split(t, 1, 0, &plan, err, sizeof err), 0);
    const topo_coreset *all = &plan->sets[0];
    int last = all->pu[all->n - 1];
    topo_coreset one = {.n = 1, .pu = &last, .numa = -1, .topo = t};
    tpool_t *p = tpool_create(1, &one, "bindc");
    pthread_t th;
    void *res;
    CHECK(pthread_create(&th, NULL, bind_caller_thread, p) == 0);
    pthread_join(th, &res);
    const int *r = res;
    if (r[0] != 0)
        printf("  note: binding refused here; not an error\n");
    else
        CHECK_EQ(r[1], 1);
    tpool_destroy(p);
    tpool_t *u = tpool_create(1, NULL, "unbound");
    CHECK_EQ(tpool_bind_caller(u), 0);
    tpool_destroy(u);
    topo_plan_destroy(plan);
    topo_destroy(t);
}

/* ---- micro-benchmark ------------------------------------------------------------------------- */

static void empty_fn(void *arg, int ith, int nth)
{
}

static void barrier_fn(void *arg, int ith, int nth)
{
    tpool_t *p = arg;
    for (int i = 0; i < 100; i++)
        tpool_barrier(p);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Latency percentiles of one tpool_run(fn) in microseconds, each call timed on its own (the
 * ~30 ns clock read is included), after a few untimed warm-up calls. */
static void latency_us(tpool_t *p, tpool_fn fn, void *ctx, int n, double *med, double *p99)
{
    static double t[20000];
    if (n > 20000)
        n = 20000;
    for (int i = 0; i < 100; i++)
        tpool_run(p, fn, ctx);
    for (int i = 0; i < n; i++) {
        double t0 = now_s();
        tpool_run(p, fn, ctx);
        t[i] = (now_s() - t0) * 1e6;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *med = t[n / 2];
    *p99 = t[n * 99 / 100];
}

TEST(bench_dispatch)
{
    int nth = n_cpus() < MAX_THREADS ? n_cpus() : MAX_THREADS;
    if (nth < 2)
        nth = 2;
    tpool_t *p = tpool_create(nth, NULL, "bench");
    double spin, spin99, bar, bar99, futex, futex99;
    tpool_set_spin_us(p, TPOOL_SPIN_US);
    latency_us(p, empty_fn, NULL, 20000 / SLOW, &spin, &spin99);
    latency_us(p, barrier_fn, p, 2000 / SLOW, &bar, &bar99);
    tpool_set_spin_us(p, 0);
    latency_us(p, empty_fn, NULL, 2000 / SLOW, &futex, &futex99);
    printf("  bench: nth=%d empty dispatch median %.2f us (p99 %.2f) spinning, %.2f us (p99 %.2f) "
           "futex only; barrier %.3f us (100 per dispatch, spinning)\n",
           nth, spin, spin99, futex, futex99, bar / 100);
    tpool_destroy(p);
}

int main(void)
{
    RUN(split_properties);
    RUN(sums_and_visits);
    RUN(barrier_phases);
    RUN(chunked_dispatches);
    RUN(stall_runs_alone);
    RUN(pull_moves_worker);
    RUN(many_dispatches);
    RUN(sleeping_pool_wakes);
    RUN(destroy_idle);
    RUN(bound_pool);
    RUN(bind_caller);
    RUN(bench_dispatch);
    TEST_MAIN_END("test_tpool");
}
