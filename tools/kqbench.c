/*
 * kqbench — throughput of the CPU matmul kernels (kernels/cpu/quant.h) against memory bandwidth.
 *
 *   kqbench [--rows R] [--n N] [--types q8_0,q4_K,f16] [--isa scalar|avx2|avx512] [--ws MiB]
 *
 * 1. A STREAM-like triad (a = b + s * c over 128 MiB arrays) with 1 and 2 threads gives the
 *    machine's bandwidth (bytes = 3 x 8 per element, write-allocate not counted).
 * 2. Decode: kq_matmul with one token over R x N weights, 1 and 2 threads splitting the rows
 *    (a barrier after every matmul, as the CPU device does). Enough copies of the matrix are
 *    cycled to exceed 256 MiB (--ws), so weights come from DRAM; a small --ws with a small
 *    matrix measures the in-cache speed of the kernel instead. Reports GB/s of weight bytes and the
 *    fraction of the triad figure for the same thread count.
 * 3. Prefill: 64 tokens against one matrix, GFLOP/s (2 * R * N * 64 per matmul).
 *
 * Threads: main plus one worker per extra thread; the worker only runs matmuls.
 */
#include "quant.h" // defines: kq_matmul, kq_quantize_row, kq_isa_*

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t workset_bytes = 256u << 20; /* --ws MiB: weight bytes cycled through in decode */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "kqbench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Uniform in [-0.5, 0.5]. */
static float frand(void)
{
    return (float)(rand() / (double)RAND_MAX) - 0.5f;
}

/* ================================ triad ===================================================== */

struct triad_arg {
    double *a, *b, *c;
    size_t n;
    int reps;
};

static void *triad_run(void *p)
{
    struct triad_arg *t = p;
    for (int r = 0; r < t->reps; r++)
        for (size_t i = 0; i < t->n; i++)
            t->a[i] = t->b[i] + 3.0 * t->c[i];
    return NULL;
}

/* Best-of-3 triad bandwidth in GB/s over 128 MiB arrays split across nthr threads. */
static double triad(int nthr)
{
    const size_t n = (128u << 20) / sizeof(double);
    double *a = xalloc(n * 8), *b = xalloc(n * 8), *c = xalloc(n * 8);
    for (size_t i = 0; i < n; i++)
        a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[8];
        struct triad_arg arg[8];
        const double t0 = now();
        for (int k = 0; k < nthr; k++) {
            const size_t lo = n * k / nthr, hi = n * (k + 1) / nthr;
            arg[k] = (struct triad_arg){a + lo, b + lo, c + lo, hi - lo, 2};
            pthread_create(&th[k], NULL, triad_run, &arg[k]);
        }
        for (int k = 0; k < nthr; k++)
            pthread_join(th[k], NULL);
        const double gbs = 2.0 * 3 * 8 * n / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(a), free(b), free(c);
    return best;
}

/* ================================ matmul ==================================================== */

struct mm_job {
    enum kq_type t;
    int64_t rows, n, nt;
    uint8_t **mats; /* ncopies weight matrices */
    int ncopies, iters;
    const uint8_t *act;
    float *y;
    pthread_barrier_t *bar;
    int nthr, id;
};

/* Thread id's share of the rows of every matmul in the sequence, with a barrier after each. */
static void *mm_run(void *p)
{
    const struct mm_job *j = p;
    const int64_t r0 = j->rows * j->id / j->nthr, r1 = j->rows * (j->id + 1) / j->nthr;
    const size_t ws = kq_row_bytes(j->t, j->n), as = kq_act_row_bytes(j->t, j->n);
    for (int it = 0; it < j->iters; it++) {
        kq_matmul(j->t, j->n, j->mats[it % j->ncopies], ws, r0, r1, j->act, as, j->nt, j->y,
                  j->rows);
        if (j->nthr > 1)
            pthread_barrier_wait(j->bar);
    }
    return NULL;
}

/* Seconds per matmul (best of 3 runs of `iters` matmuls) with nthr threads. */
static double mm_time(struct mm_job base, int nthr)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nthr);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[8];
        struct mm_job job[8];
        const double t0 = now();
        for (int k = 0; k < nthr; k++) {
            job[k] = base;
            job[k].bar = &bar, job[k].nthr = nthr, job[k].id = k;
            if (k > 0)
                pthread_create(&th[k], NULL, mm_run, &job[k]);
        }
        mm_run(&job[0]);
        for (int k = 1; k < nthr; k++)
            pthread_join(th[k], NULL);
        const double dt = (now() - t0) / base.iters;
        best = dt < best ? dt : best;
    }
    pthread_barrier_destroy(&bar);
    return best;
}

static void bench_type(enum kq_type t, int64_t rows, int64_t n, const double tri[2])
{
    const size_t wbytes = kq_row_bytes(t, n) * (size_t)rows;
    const int ncopies = (int)((workset_bytes + wbytes - 1) / wbytes);
    float *x = xalloc(sizeof(float) * (size_t)n);
    uint8_t **mats = xalloc(sizeof(uint8_t *) * ncopies);
    srand(1);
    for (int64_t i = 0; i < n; i++) /* one random row, quantised, repeated: content is irrelevant */
        x[i] = frand();
    mats[0] = xalloc(wbytes);
    kq_quantize_row(t, x, mats[0], n);
    for (int64_t r = 1; r < rows; r++)
        memcpy(mats[0] + r * kq_row_bytes(t, n), mats[0], kq_row_bytes(t, n));
    for (int c = 1; c < ncopies; c++) {
        mats[c] = xalloc(wbytes);
        memcpy(mats[c], mats[0], wbytes);
    }
    const size_t as = kq_act_row_bytes(t, n);
    uint8_t *act = xalloc(as * 64);
    for (int tok = 0; tok < 64; tok++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = frand();
        kq_quantize_act(t, x, act + tok * as, n);
    }
    float *y = xalloc(sizeof(float) * (size_t)rows * 64);
    const int iters = ncopies * (int)(1 + (1u << 30) / (ncopies * wbytes)); /* >= 1 GiB read */
    struct mm_job job = {t, rows, n, 1, mats, ncopies, iters, act, y, NULL, 1, 0};
    for (int thr = 1; thr <= 2; thr++) {
        const double dt = mm_time(job, thr), gbs = wbytes / dt / 1e9;
        printf("%-5s decode  %d thr: %7.2f ms  %6.2f GB/s  %3.0f%% of triad\n", kq_type_name(t),
               thr, dt * 1e3, gbs, 100.0 * gbs / tri[thr - 1]);
    }
    job.nt = 64, job.ncopies = 1, job.iters = 3;
    for (int thr = 1; thr <= 2; thr++) {
        const double dt = mm_time(job, thr);
        printf("%-5s prefill %d thr: %7.2f ms  %6.1f GFLOP/s (64 tokens)\n", kq_type_name(t), thr,
               dt * 1e3, 2.0 * rows * n * 64 / dt / 1e9);
    }
    for (int c = 0; c < ncopies; c++)
        free(mats[c]);
    free(mats), free(x), free(act), free(y);
}

static int parse_type(const char *s, enum kq_type *t)
{
    static const enum kq_type all[] = {KQ_F32,  KQ_F16,  KQ_BF16, KQ_Q8_0,
                                       KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, kq_type_name(all[i])) == 0)
            return *t = all[i], 0;
    return -1;
}

int main(int argc, char **argv)
{
    int64_t rows = 4096, n = 8192;
    char types[256] = "q8_0,q4_K,f16";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--n") == 0)
            n = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--ws") == 0)
            workset_bytes = (size_t)atoll(argv[i + 1]) << 20;
        else if (strcmp(argv[i], "--types") == 0)
            snprintf(types, sizeof types, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--isa") == 0)
            kq_isa_force(strcmp(argv[i + 1], "scalar") == 0 ? KQ_ISA_SCALAR
                         : strcmp(argv[i + 1], "avx2") == 0 ? KQ_ISA_AVX2
                                                            : KQ_ISA_AVX512);
        else {
            fprintf(stderr, "usage: kqbench [--rows R] [--n N] [--types a,b] [--isa I] [--ws MiB]\n");
            return 2;
        }
    }
    const double tri[2] = {triad(1), triad(2)};
    printf("isa %s, %lld x %lld weights\ntriad: 1 thr %.2f GB/s, 2 thr %.2f GB/s\n",
           kq_isa_name(kq_isa_active()), (long long)rows, (long long)n, tri[0], tri[1]);
    for (char *s = strtok(types, ","); s; s = strtok(NULL, ",")) {
        enum kq_type t;
        if (parse_type(s, &t) != 0 || n % kq_block_elems(t) != 0) {
            fprintf(stderr, "kqbench: bad type %s (or n not a multiple of its block)\n", s);
            return 2;
        }
        bench_type(t, rows, n, tri);
    }
    return 0;
}
