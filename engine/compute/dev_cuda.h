/*
 * dev_cuda — the CUDA device (one GPU) behind the device interface of device.h.
 *
 * Every op of the device interface runs on the GPU on one stream; weights, caches and
 * activations live in GPU memory (the group uploads the weights at start-up). Under
 * `make KCPU=1` the same code runs on the CUDA-on-CPU emulator (tools/kcpu).
 *
 * Thread safety: driven by one thread (the engine thread), like every device.
 */
#ifndef DELTAD_DEV_CUDA_H
#define DELTAD_DEV_CUDA_H

#include <stdbool.h>
#include <stddef.h>

struct dev;

/* The CUDA device on GPU `gpu` (0-based). Fails with a clear message when the build has no
 * CUDA (make CUDA=1) or no usable GPU is present. Implemented in backend_registry.c (the one
 * #ifdef ladder), which calls dev_cuda.c in CUDA builds. Transferred:
 * dev_destroy. */
int dev_cuda_create(int gpu, struct dev **out, char *err, size_t errlen);

/* Whether this build has the CUDA device (make CUDA=1, or the kcpu emulation). */
bool dev_cuda_built(void);

/* GPUs the driver reports (0 without CUDA, a driver or a GPU). */
int dev_cuda_count(void);

/* GPU `gpu` for `deltad info`: "NAME, sm_XY, N GiB, N SMs" into desc, its PCI bus id into
 * busid ("" when unknown), free and total memory (0 when unknown). */
void dev_cuda_info(int gpu, char *desc, size_t dlen, char *busid, size_t blen, size_t *free_b,
                   size_t *total_b);

#endif
