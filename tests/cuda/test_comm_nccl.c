/*
 * test_comm_nccl — the NCCL communicator (engine/compute/comm_nccl.c) on up to three GPUs, one
 * host thread per rank as the tensor-parallel forward drives it: allreduces of the F32 wire
 * format (small calls) and of the BF16 wire format (calls at or above the group's threshold,
 * after comm_reserve), several rounds in a row. Every rank must end with the same bits, within
 * 1e-6 (F32) or 2e-2 (BF16: each input rounded to 8 bits of mantissa, the sum rounded again)
 * of the sum of the f32 inputs, relative to its largest magnitude.
 *
 * Exit: 0 pass, 1 fail, 77 no GPU or a build without NCCL (SKIP with the reason).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/comm.h" // defines: comm_create, comm_allreduce, comm_reserve
#include "kernels/cuda/kcuda.h"  // defines: kc_stream_create, kc_malloc, kc_upload

#define MAX_RANKS 3
#define ROUNDS 3

static const int64_t sizes[2] = {1000, 140000}; /* F32, BF16 (>= 131072 for any group <= 3) */

struct rank {
    struct comm *c;
    int rank, device, n_ranks;
    float *in[ROUNDS][2]; /* host inputs */
    float *out[ROUNDS][2];
    int failed;
};

static float frand(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static void *rank_main(void *arg)
{
    struct rank *r = arg;
    char err[256];
    kc_stream *s;
    if (kc_stream_create(r->device, 0, &s, err, sizeof err)) {
        printf("FAIL: rank %d: %s\n", r->rank, err);
        r->failed = 1;
        return NULL;
    }
    float *d = kc_malloc((size_t)sizes[1] * sizeof(float));
    for (int k = 0; k < ROUNDS; k++)
        for (int i = 0; i < 2; i++) {
            const size_t bytes = (size_t)sizes[i] * sizeof(float);
            kc_upload(s, d, r->in[k][i], bytes);
            kc_stream_sync(s);
            comm_allreduce(r->c, r->rank, d, sizes[i]);
            kc_download(s, r->out[k][i], d, bytes);
            kc_stream_sync(s);
        }
    kc_free(d);
    kc_stream_destroy(s);
    return NULL;
}

int main(void)
{
    char err[256] = "";
    const int n_dev = kc_device_count(err, sizeof err);
    if (n_dev <= 0) {
        printf("SKIP: no CUDA device (%s)\n", err[0] ? err : "none found");
        return 77;
    }
    const int n = n_dev < MAX_RANKS ? n_dev : MAX_RANKS;
    const int devs[MAX_RANKS] = {0, 1, 2};
    struct comm *c = comm_create(COMM_NCCL, n, devs, err, sizeof err);
    if (!c) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    comm_reserve(c, sizes[1]);
    struct rank ranks[MAX_RANKS];
    uint64_t seed = 0x243f6a8885a308d3ull;
    for (int q = 0; q < n; q++) {
        ranks[q] = (struct rank){.c = c, .rank = q, .device = devs[q], .n_ranks = n};
        for (int k = 0; k < ROUNDS; k++)
            for (int i = 0; i < 2; i++) {
                ranks[q].in[k][i] = malloc((size_t)sizes[i] * sizeof(float));
                ranks[q].out[k][i] = malloc((size_t)sizes[i] * sizeof(float));
                for (int64_t e = 0; e < sizes[i]; e++)
                    ranks[q].in[k][i][e] = frand(&seed) * (float)(1 + q + k);
            }
    }
    pthread_t th[MAX_RANKS];
    for (int q = 0; q < n; q++)
        pthread_create(&th[q], NULL, rank_main, &ranks[q]);
    for (int q = 0; q < n; q++)
        pthread_join(th[q], NULL);
    int passes = 0, fails = 0;
    for (int q = 0; q < n; q++)
        fails += ranks[q].failed;
    for (int k = 0; k < ROUNDS && !fails; k++)
        for (int i = 0; i < 2; i++) {
            double md = 0.0, mr = 0.0;
            int64_t differ = 0;
            for (int64_t e = 0; e < sizes[i]; e++) {
                float ref = 0.0f;
                for (int q = 0; q < n; q++)
                    ref += ranks[q].in[k][i][e];
                const float got = ranks[0].out[k][i][e];
                const double dd = isnan(got) ? INFINITY : fabs((double)got - ref);
                md = dd > md ? dd : md;
                mr = fabs(ref) > mr ? fabs(ref) : mr;
                for (int q = 1; q < n; q++)
                    differ += memcmp(&ranks[q].out[k][i][e], &got, sizeof got) != 0;
            }
            const double e = mr > 0.0 ? md / mr : md, tol = i ? 2e-2 : 1e-6;
            const int ok = e <= tol && differ == 0;
            printf("%s allreduce %d ranks, %6lld elements (%s), round %d  err %.3e  tol %.1e  "
                   "ranks differing %lld\n",
                   ok ? "ok  " : "FAIL", n, (long long)sizes[i], i ? "bf16" : "f32", k, e, tol,
                   (long long)differ);
            ok ? passes++ : fails++;
        }
    for (int q = 0; q < n; q++)
        for (int k = 0; k < ROUNDS; k++)
            for (int i = 0; i < 2; i++)
                free(ranks[q].in[k][i]), free(ranks[q].out[k][i]);
    comm_destroy(c);
    printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}
