/*
 * tpool — the persistent thread pool of one CPU device.
 *
 * tpool_run(pool, fn, ctx) runs fn(ctx, ith, nth) once on each of the pool's nth threads and
 * returns when all have returned; tpool_run_chunks(pool, fn, ctx, n, 0) runs fn on chunks
 * 0..n-1 that the threads claim one at a time, and does not wait for a thread that is not
 * there (the forward ops use it: see dev_cpu.c). The calling thread is thread 0; threads 1..nth-1
 * are workers created once by tpool_create. A dispatch creates no thread and allocates nothing.
 * Idle workers spin for a short while (TPOOL_SPIN_US by default) so back-to-back dispatches start
 * within microseconds, then sleep on a futex so an idle pool costs no CPU.
 *
 * Threads: one thread at a time may call tpool_run / tpool_set_spin_us / tpool_destroy for a
 * given pool (its owner, e.g. the device's host thread); tpool_barrier and tpool_split are for
 * use inside fn. Different pools are independent.
 */
#ifndef DELTAD_TPOOL_H
#define DELTAD_TPOOL_H

#include <stdint.h>

#include "topo.h" // defines: topo_coreset

typedef struct tpool tpool_t;

/* The work of one dispatch: ith in [0, nth). Runs on every thread of the pool concurrently. */
typedef void (*tpool_fn)(void *ctx, int ith, int nth);

/* How long an idle thread spins before it sleeps, by default (0 when the pool has more threads
 * than CPUs to run them: then spinning only steals time from the threads being waited for). */
#define TPOOL_SPIN_US 100

/* Create a pool of n_threads (>= 1) threads, counting the caller of tpool_run as thread 0.
 * cores (borrowed for the duration of the call; may be NULL): worker i binds itself to unit
 * i % cores->n; the pool never rebinds the caller, which should bind itself with
 * topo_bind_unit(cores, 0) if it wants unit 0. name (may be NULL) names the threads
 * "name/i" (truncated to 15 bytes). n_threads == 0 means cores->n (or 1 without cores).
 * Returns NULL when the OS refuses to create a thread. Transferred: tpool_destroy. */
tpool_t *tpool_create(int n_threads, const topo_coreset *cores, const char *name);

int tpool_size(const tpool_t *p);
/* Bind the calling thread (the pool's thread 0 when it next calls tpool_run) to unit 0 of the
 * core set the pool was created with; a no-op for an unbound pool. For a pool whose caller is
 * not the thread that created it (a device of a tensor-parallel group driven by a host thread).
 * Returns 0, or -1 when the OS refused (tolerated: the thread runs unbound). */
int tpool_bind_caller(const tpool_t *p);

/* Set the idle spin time in microseconds (0 = sleep at once). Only while no dispatch runs. */
void tpool_set_spin_us(tpool_t *p, int us);

/* Run fn(ctx, ith, nth) on all threads, the caller as ith 0; return when every call returned.
 * Everything written before the call is visible to fn on every thread, and everything fn wrote
 * on any thread is visible to the caller afterwards. Must not be called from inside fn.
 * ctx is borrowed for the duration of the call. */
void tpool_run(tpool_t *p, tpool_fn fn, void *ctx);

/* The work of a chunked dispatch: chunk c, run on thread ith (for per-thread scratch). */
typedef void (*tpool_chunk_fn)(void *ctx, int64_t c, int ith);

/*
 * Run fn(ctx, c, ith) exactly once for every chunk c in [0, n), the threads claiming chunks in
 * increasing order from a shared counter (dynamic distribution: a thread slowed by other load
 * on its core takes fewer chunks). Chunks [0, n_first) all complete before any chunk >= n_first
 * starts (two phases without a barrier; n_first = 0: one phase). Returns when every chunk is
 * done. A worker joins the dispatch only while unclaimed chunks remain; the caller waits for the
 * workers that joined, never for one that has not woken up yet (a descheduled worker does not
 * hold up the step unless it holds a chunk). Which thread runs a chunk must not change its
 * result: fn(ctx, c, ith) may use ith only to pick scratch. Visibility as in tpool_run. fn must
 * not call tpool_barrier. Same threading rules as tpool_run; n <= 0 returns at once.
 * When the caller has run out of chunks and a worker still inside the dispatch takes longer than
 * about 1.5 of the caller's chunks (a worker descheduled on a core it shares with other work),
 * the caller moves that worker onto its own CPU and sleeps until it is done; the worker finishes
 * its chunk there, and the caller then gives it its own affinity back (tpool_pulls counts these).
 * When the caller had to wait for a worker's chunk far longer than its own chunks take (the
 * worker was descheduled: a busy neighbour on its core) and such waits have lately cost more
 * than the workers' chunks saved, the following dispatches run on the caller alone for a while
 * (a backoff that grows while it keeps happening), then the workers are tried again.
 */
void tpool_run_chunks(tpool_t *p, tpool_chunk_fn fn, void *ctx, int64_t n, int64_t n_first);

/* Stalls tpool_run_chunks has seen (a caller's wait of several chunks). Owner thread. */
int64_t tpool_stalls(const tpool_t *p);
/* Workers tpool_run_chunks has pulled onto the caller's CPU to finish a chunk (see tpool.c).
 * Owner thread. */
int64_t tpool_pulls(const tpool_t *p);

/* Inside fn: wait until every thread of the dispatch has reached this barrier. Writes made by
 * any thread before the barrier are visible to all threads after it. IMPORTANT: every thread
 * must call it the same number of times in a dispatch, or the dispatch deadlocks. */
void tpool_barrier(tpool_t *p);

/* Join all workers and free the pool. Only while no dispatch runs. NULL is a no-op. */
void tpool_destroy(tpool_t *p);

/* Thread ith's share of [0, n): a contiguous [*lo, *hi) of nearly equal size (in units of
 * align), with both bounds multiples of align except where they equal n. The ranges of
 * ith = 0..nth-1 are disjoint, in order, and cover [0, n); some may be empty. */
void tpool_split(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi);

#endif
