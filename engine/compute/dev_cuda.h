/*
 * dev_cuda — the CUDA device (one GPU) behind the device interface of device.h.
 *
 * Today's device table passes host pointers (weights in the mmap, f32 activations), so this
 * device is the first step of issue 8: it runs every matmul on the GPU (weights uploaded once,
 * on first use, and kept; activations copied per call) and leaves the other ops on the calling
 * thread (no `parallel`). It makes `cuda` selectable and its matmuls checkable against the
 * CPU; the fast path (weights, caches and activations resident on the GPU, the decode step in
 * a CUDA graph) needs the forward pass to call device ops for every op (see the plan in
 * tests/cuda/README.md).
 *
 * Thread safety: driven by one thread (the engine thread), like every device.
 */
#ifndef DELTAD_DEV_CUDA_H
#define DELTAD_DEV_CUDA_H

#include <stddef.h>

struct dev;

/* The CUDA device on GPU `gpu` (0-based). Fails with a clear message when the build has no
 * CUDA (make CUDA=1) or no usable GPU is present. Implemented in backend_registry.c (the one
 * #ifdef ladder), which calls dev_cuda.c in CUDA builds. Transferred:
 * dev_destroy. */
int dev_cuda_create(int gpu, struct dev **out, char *err, size_t errlen);

#endif
