/*
 * kcuda — extern "C" entry points of the CUDA kernels (the .cu files of kernels/cuda). Only the probe
 * exists so far; the kernels arrive with issue "CUDA device". Built with `make CUDA=1`.
 */
#ifndef DELTAD_KCUDA_H
#define DELTAD_KCUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no GPU); writes the CUDA error
 * string to err when it returns 0 because of an error. */
int kcuda_device_count(char *err, unsigned long errlen);

#ifdef __cplusplus
}
#endif

#endif
