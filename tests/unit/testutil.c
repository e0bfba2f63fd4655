/*
 * testutil — the shared set-up of the model-running test programs (testutil.h). Test-only;
 * prints in the formats tests/run.sh reads (SKIP lines) and never aborts.
 */
#include "testutil.h" // defines: testutil_*

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/compute/dev_cuda.h" // defines: dev_cuda_create, dev_cuda_count
#include "engine/util.h"             // defines: dd_errf

/* The fixture every model test needs; mkmodel writes the others next to it. */
#define TESTUTIL_PROBE "tiny-qwen35.gguf"

bool testutil_models_dir(int argc, char **argv, char *models, size_t size)
{
    const char *b = argc > 1 ? argv[1] : "build/cpu";
    snprintf(models, size, "%s/models", b);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/" TESTUTIL_PROBE, models);
    if (access(probe, R_OK) == 0)
        return true;
    printf("SKIP: %s missing (tests/run.sh generates it with mkmodel)\n", probe);
    return false;
}

int testutil_load_tiny(int argc, char **argv, struct model **m)
{
    char models[512], path[600], err[512];
    if (!testutil_models_dir(argc, argv, models, sizeof models))
        return TESTUTIL_SKIP_RC;
    snprintf(path, sizeof path, "%s/" TESTUTIL_PROBE, models);
    if (model_load(path, m, err, sizeof err) != 0) {
        printf("cannot load %s: %s\n", path, err);
        return 1;
    }
    return 0;
}

void testutil_sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

bool testutil_req_drain(eng_req_t *r, int max_polls,
                        void (*on_delta)(const struct eng_delta *d, void *ud), void *ud)
{
    for (int polls = 0; polls < max_polls; polls++) {
        struct eng_delta d;
        bool any = eng_req_take(r, &d);
        on_delta(&d, ud);
        bool done = d.done;
        eng_delta_free(&d);
        if (done)
            return true;
        if (!any)
            testutil_sleep_ms(1);
    }
    return false;
}

int testutil_dev_cpu(int n_threads, struct dev **out, char *err, size_t errlen)
{
    struct dev *d;
    const char *kind = getenv("DELTAD_TEST_DEVICE");
    if (kind && strcmp(kind, "cuda") == 0) { /* successive calls take successive GPUs */
        static int next;
        const int n = dev_cuda_count();
        if (n < 1) {
            dd_errf(err, errlen, "DELTAD_TEST_DEVICE=cuda: no GPU in this build or machine");
            return DD_EUNSUPPORTED;
        }
        return dev_cuda_create(next++ % n, out, err, errlen);
    }
    int rc = dev_cpu_create(n_threads, NULL, &d, err, errlen);
    if (rc)
        return rc;
    if (kind && strcmp(kind, "strict") == 0)
        return dev_strict_create(d, out, err, errlen);
    *out = d;
    return 0;
}
