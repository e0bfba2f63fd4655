/*
 * kqbench — throughput of the CPU matmul kernels (kernels/cpu/kq.h) against memory bandwidth.
 *
 *   kqbench [--rows R] [--n N] [--types q8_0,q4_K,f16] [--isa scalar|avx2|avx2-novnni|avx512]
 *           [--ws MiB] [--reps K] [--cpu-time 1]
 *
 * Types are kq_type_name's, the stored layouts included (q8_0x, q4_0x, q4_Kx: what the engine
 * keeps Q8_0, Q4_0, Q4_K weights in where kq_repack_type says so). --isa avx2-novnni is AVX2
 * with AVX-VNNI off (kq_avx2_vnni_force), the path of AVX2 CPUs without it.
 *
 * 1. Bandwidth: a STREAM-like triad (a = b + 3 c over 3 x 128 MiB of doubles; bytes = 3 x 8 per
 *    element, write-allocate not counted) with 1 and 2 threads.
 * 2. Decode: kq_matmul with one token over R x N weights, 1 and 2 threads splitting the rows
 *    with a barrier after every matmul (as the CPU device runs it). Copies of the matrix are
 *    cycled until 256 MiB (--ws) are touched, so weights come from DRAM; a small --ws with a
 *    small matrix measures in-cache kernel speed instead. Reports GB/s of weight bytes read and
 *    the fraction of the triad figure for the same thread count.
 * 3. Prefill: 64 tokens against one matrix, GFLOP/s (2 * R * N * 64 per matmul).
 * 4. With --batch LIST (e.g. 1,2,3,4,8,16): batched decode, B tokens against weights from DRAM
 *    as in 2, for each B: time per matmul, B tokens / time, and the efficiency against B times
 *    the B = 1 rate (1.00 = a batch costs no more than one token).
 *
 * Triad and decode runs alternate K times (--reps, default 7) and the best of each is kept, so a
 * busy machine slows both alike instead of skewing the fraction. --cpu-time times each thread by
 * its own CPU clock (the slowest thread counts) instead of the wall clock: on a shared machine
 * that leaves out the time other processes held the core.
 *
 * Threads: main plus one worker per extra thread; workers only run triads or matmuls.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kq.h" // defines: kq_matmul, kq_quantize_row, kq_isa_*

#define MAXTHR 2

static size_t workset_bytes = 256u << 20; /* --ws MiB: weight bytes cycled through in decode */
static int reps = 7;                      /* --reps: alternations of triad and decode */
static int use_cpu_time;                  /* --cpu-time: per-thread CPU clock, see above */
static char batch_list[256];              /* --batch: token counts of the batched decode */

static double now(void)
{
    struct timespec ts;
    clock_gettime(use_cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
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

/* One thread's work and the time it took by its own clock. */
struct timed {
    void *(*fn)(void *);
    void *arg;
    double secs;
};

static void *timed_run(void *p)
{
    struct timed *t = p;
    const double t0 = now();
    t->fn(t->arg);
    t->secs = now() - t0;
    return NULL;
}

/* Run fn(arg[k]) on nthr threads (the caller is thread 0); returns the slowest thread's time. */
static double run_threads(void *(*fn)(void *), void *args, size_t arg_size, int nthr)
{
    pthread_t th[MAXTHR];
    struct timed tm[MAXTHR];
    for (int k = 0; k < nthr; k++)
        tm[k] = (struct timed){fn, (char *)args + k * arg_size, 0.0};
    for (int k = 1; k < nthr; k++)
        pthread_create(&th[k], NULL, timed_run, &tm[k]);
    timed_run(&tm[0]);
    double worst = tm[0].secs;
    for (int k = 1; k < nthr; k++) {
        pthread_join(th[k], NULL);
        worst = tm[k].secs > worst ? tm[k].secs : worst;
    }
    return worst;
}

/* ================================ triad ===================================================== */

struct triad_arg {
    double *a;
    const double *b, *c;
    size_t n;
};

static void *triad_run(void *p)
{
    struct triad_arg *t = p;
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < t->n; i++)
            t->a[i] = t->b[i] + 3.0 * t->c[i];
    return NULL;
}

/* One triad measurement (two passes) over a, b, c [n] with nthr threads, in GB/s. */
static double triad_once(double *a, const double *b, const double *c, size_t n, int nthr)
{
    struct triad_arg arg[MAXTHR];
    for (int k = 0; k < nthr; k++) {
        const size_t lo = n * k / nthr, hi = n * (k + 1) / nthr;
        arg[k] = (struct triad_arg){a + lo, b + lo, c + lo, hi - lo};
    }
    return 2.0 * 3 * 8 * n / run_threads(triad_run, arg, sizeof arg[0], nthr) / 1e9;
}

/* ================================ matmul ==================================================== */

struct mm_job {
    enum kq_type t;
    int64_t rows, n, nt;
    uint8_t **mats; /* [ncopies] weight matrices, rows x kq_row_bytes */
    int ncopies, iters;
    const uint8_t *act; /* [nt] activation rows */
    float *y;           /* [nt][rows] */
    pthread_barrier_t *bar;
    int nthr, id;
};

/* Thread id's share of the rows of `iters` matmuls, with a barrier after each. */
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

/* Seconds per matmul of one measurement with nthr threads. */
static double mm_once(const struct mm_job *base, int nthr)
{
    pthread_barrier_t bar;
    struct mm_job job[MAXTHR];
    pthread_barrier_init(&bar, NULL, (unsigned)nthr);
    for (int k = 0; k < nthr; k++) {
        job[k] = *base;
        job[k].bar = &bar, job[k].nthr = nthr, job[k].id = k;
    }
    const double dt = run_threads(mm_run, job, sizeof job[0], nthr) / base->iters;
    pthread_barrier_destroy(&bar);
    return dt;
}

#define MAX_NT 64 /* activation rows made: the prefill's 64, the most --batch takes */

/* Weights (ncopies identical matrices) and MAX_NT activation rows for type t. */
static void make_problem(struct mm_job *j, enum kq_type t, int64_t rows, int64_t n)
{
    const size_t rb = kq_row_bytes(t, n), wbytes = rb * (size_t)rows;
    float *x = xalloc(sizeof(float) * (size_t)n);
    *j = (struct mm_job){.t = t, .rows = rows, .n = n, .nt = 1};
    j->ncopies = (int)((workset_bytes + wbytes - 1) / wbytes);
    j->iters = j->ncopies * (int)(1 + (1u << 30) / (j->ncopies * wbytes)); /* >= 1 GiB read */
    j->mats = xalloc(sizeof(uint8_t *) * j->ncopies);
    for (int64_t i = 0; i < n; i++) /* one random row, repeated: the content is irrelevant */
        x[i] = frand();
    for (int c = 0; c < j->ncopies; c++) {
        j->mats[c] = xalloc(wbytes);
        kq_quantize_row(t, x, j->mats[c], n);
        for (int64_t r = 1; r < rows; r++)
            memcpy(j->mats[c] + r * rb, j->mats[c], rb);
    }
    uint8_t *act = xalloc(kq_act_row_bytes(t, n) * MAX_NT);
    for (int tok = 0; tok < MAX_NT; tok++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = frand();
        kq_quantize_act(t, x, act + tok * kq_act_row_bytes(t, n), n);
    }
    j->act = act;
    j->y = xalloc(sizeof(float) * (size_t)rows * MAX_NT);
    free(x);
}

static void free_problem(struct mm_job *j)
{
    for (int c = 0; c < j->ncopies; c++)
        free(j->mats[c]);
    free(j->mats), free((void *)j->act), free(j->y);
}

/* --batch: each listed token count against the DRAM-cycled weights, 1 and MAXTHR threads. */
static void bench_batch(struct mm_job *job, double wbytes)
{
    char list[sizeof batch_list], *save = NULL;
    double t1[MAXTHR + 1] = {0};
    snprintf(list, sizeof list, "%s", batch_list);
    for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        const long long b = atoll(s);
        job->nt = b < 1 ? 1 : b > MAX_NT ? MAX_NT : b;
        for (int thr = 1; thr <= MAXTHR; thr++) {
            double dt = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                const double d = mm_once(job, thr);
                dt = d < dt ? d : dt;
            }
            if (job->nt == 1)
                t1[thr] = dt;
            printf("%-5s batch %2lld %d thr: %7.3f ms  %8.1f tok/s  %6.2f GB/s  eff %.2f\n",
                   kq_type_name(job->t), (long long)job->nt, thr, dt * 1e3, job->nt / dt,
                   wbytes / dt / 1e9, t1[thr] > 0 ? t1[thr] / dt : 0.0);
        }
    }
}

static void bench_type(enum kq_type t, int64_t rows, int64_t n, double *a, const double *b,
                       const double *c, size_t tn)
{
    struct mm_job job;
    make_problem(&job, t, rows, n);
    const double wbytes = (double)kq_row_bytes(t, n) * rows;
    for (int thr = 1; thr <= MAXTHR; thr++) {
        double tri = 0.0, dt = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            const double g = triad_once(a, b, c, tn, thr), d = mm_once(&job, thr);
            tri = g > tri ? g : tri;
            dt = d < dt ? d : dt;
        }
        printf("%-5s decode  %d thr: %7.3f ms  %6.2f GB/s  triad %6.2f GB/s  %3.0f%%\n",
               kq_type_name(t), thr, dt * 1e3, wbytes / dt / 1e9, tri,
               100.0 * wbytes / dt / 1e9 / tri);
    }
    if (*batch_list)
        bench_batch(&job, wbytes);
    job.nt = 64, job.ncopies = 1, job.iters = 2;
    for (int thr = 1; thr <= MAXTHR; thr++) {
        double dt = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            const double d = mm_once(&job, thr);
            dt = d < dt ? d : dt;
        }
        printf("%-5s prefill %d thr: %7.3f ms  %6.1f GFLOP/s (64 tokens)\n", kq_type_name(t), thr,
               dt * 1e3, 2.0 * rows * n * 64 / dt / 1e9);
    }
    free_problem(&job);
}

static int parse_type(const char *s, enum kq_type *t)
{
    static const enum kq_type all[] = {KQ_F32,   KQ_F16,   KQ_BF16, KQ_Q8_0,  KQ_Q4_0,
                                       KQ_Q4_K,  KQ_Q5_K,  KQ_Q6_K, KQ_Q8_0X, KQ_Q4_0X,
                                       KQ_Q4_KX, KQ_Q5_KX, KQ_Q6_KX};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, kq_type_name(all[i])) == 0)
            return *t = all[i], 0;
    return -1;
}

/* Force the ISA named s (avx2-novnni: AVX2 with AVX-VNNI off). */
static void force_isa(const char *s)
{
    const bool novnni = strcmp(s, "avx2-novnni") == 0;
    kq_isa_force(strcmp(s, "scalar") == 0           ? KQ_ISA_SCALAR
                 : novnni || strcmp(s, "avx2") == 0 ? KQ_ISA_AVX2
                                                    : KQ_ISA_AVX512);
    if (novnni)
        kq_avx2_vnni_force(false);
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
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) : 1;
        else if (strcmp(argv[i], "--types") == 0)
            snprintf(types, sizeof types, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--cpu-time") == 0)
            use_cpu_time = atoi(argv[i + 1]) != 0;
        else if (strcmp(argv[i], "--batch") == 0)
            snprintf(batch_list, sizeof batch_list, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--isa") == 0)
            force_isa(argv[i + 1]);
        else
            argc = 0; /* unknown option: usage */
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "usage: kqbench [--rows R] [--n N] [--types a,b] [--isa I] [--ws MiB] "
                        "[--reps K] [--cpu-time 0|1] [--batch 1,2,4,..]\n");
        return 2;
    }
    const size_t tn = (128u << 20) / sizeof(double);
    double *a = xalloc(tn * 8), *b = xalloc(tn * 8), *c = xalloc(tn * 8);
    for (size_t i = 0; i < tn; i++)
        a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
    printf("isa %s%s, %lld x %lld weights, %s clock\n", kq_isa_name(kq_isa_active()),
           kq_isa_active() != KQ_ISA_AVX2 ? ""
           : kq_avx2_vnni()               ? " + avx-vnni"
                                          : " (no avx-vnni)",
           (long long)rows, (long long)n, use_cpu_time ? "per-thread CPU" : "wall");
    for (char *s = strtok(types, ","); s; s = strtok(NULL, ",")) {
        enum kq_type t;
        if (parse_type(s, &t) != 0 || n % kq_block_elems(t) != 0) {
            fprintf(stderr, "kqbench: bad type %s (or n not a multiple of its block)\n", s);
            return 2;
        }
        bench_type(t, rows, n, a, b, c, tn);
    }
    free(a), free(b), free(c);
    return 0;
}
