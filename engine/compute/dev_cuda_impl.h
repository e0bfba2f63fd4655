/*
 * dev_cuda_impl — the CUDA device's internal constructor, shared by dev_cuda.c (which defines
 * it) and backend_registry.c (the only caller, inside its #ifdef ladder). Users include
 * dev_cuda.h and call dev_cuda_create, which works in every build.
 */
#ifndef DELTAD_DEV_CUDA_IMPL_H
#define DELTAD_DEV_CUDA_IMPL_H

#include <stddef.h>

struct dev;

/* dev_cuda.c's constructor (CUDA builds only; it exists only when dev_cuda.c is compiled):
 * the CUDA device on GPU `gpu`, or a negative DD_E* with the reason in err. Transferred:
 * dev_destroy. */
int dev_cuda__create(int gpu, struct dev **out, char *err, size_t errlen);

#endif
