/*
 * kcpu_impl.h — internals shared by the kcpu runtime files (sched.cpp, cudart.cpp, cublas.cpp,
 * nccl.cpp); kernels see only kcpu.h.
 */
#ifndef KCPU_IMPL_H
#define KCPU_IMPL_H

#include <stddef.h>

#include "kcpu.h" // defines: kcpu::site, kcpu::cfg

namespace kcpu
{

/* Print "kcpu: <message>" and abort: an emulated device fault is a broken program. */
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "kcpu: <message>" (a failing API call that returns an error code). */
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* True when [p, p + bytes) lies inside one live device allocation. */
bool is_device(const void *p, size_t bytes);
/* True when p lies inside (or one past the end of) a live device allocation. */
bool is_device_ptr(const void *p);
/* The GPU whose live allocation holds p (one past the end included), or -1. */
int device_of(const void *p);
/* The calling thread's current GPU (cudaSetDevice), and the GPU stream st belongs to (the
 * current one for the legacy stream NULL). */
int current_device();
int stream_device(cudaStream_t st);
/* Record err as the thread's last error (cudaGetLastError) and return it. */
cudaError_t set_error(cudaError_t err);

} // namespace kcpu

#endif
