/*
 * testutil — what the test programs that run the tiny fixture models share: finding the models
 * (or skipping when tests/run.sh has not generated them), loading the one every server-side test
 * uses, and polling a request to its end. Linked into every test program (the tests' helper
 * library); test.h stays the header-only check harness.
 *
 * Threads: call from the test's main thread.
 */
#ifndef DELTAD_TESTUTIL_H
#define DELTAD_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/compute/device.h" // defines: struct dev, dev_cpu_create, dev_strict_create
#include "engine/model/model.h"    // defines: struct model
#include "engine/sched/eng.h"      // defines: eng_req_t, struct eng_delta

/* The device of the forward tests: an unbound CPU device of n_threads, wrapped in the strict
 * device (dev_strict_create: device memory the host cannot touch) when the environment has
 * DELTAD_TEST_DEVICE=strict (tests/golden/test_strict.sh), or the CUDA device of the next GPU
 * (round robin, so a group's devices are distinct GPUs) with DELTAD_TEST_DEVICE=cuda
 * (tests/cuda/test_cuda_forward.sh, under kcpu). Transferred: dev_destroy. */
int testutil_dev_cpu(int n_threads, struct dev **out, char *err, size_t errlen);

/* The exit status of a skipped test program, as test.h's TEST_SKIP returns it. */
#define TESTUTIL_SKIP_RC 77

/* Fills models[size] with "<build>/models", build being argv[1] or "build/cpu". Returns true
 * when the fixture tiny-qwen35.gguf is there; otherwise prints "SKIP: <path> missing ..." and
 * returns false, and main returns TESTUTIL_SKIP_RC. */
bool testutil_models_dir(int argc, char **argv, char *models, size_t size);

/* Loads <build>/models/tiny-qwen35.gguf into *m (transferred: model_free). Returns 0; or
 * TESTUTIL_SKIP_RC after the SKIP line when it is missing; or 1 after a "cannot load" line. main
 * returns any non-zero value as its exit status. */
int testutil_load_tiny(int argc, char **argv, struct model **m);

void testutil_sleep_ms(int ms);

/* Takes the deltas of r until one is done, calling on_delta(d, ud) on each (d is freed after the
 * call), sleeping 1 ms whenever nothing was ready. Returns true when the request finished, false
 * after max_polls polls. */
bool testutil_req_drain(eng_req_t *r, int max_polls,
                        void (*on_delta)(const struct eng_delta *d, void *ud), void *ud);

#endif
