// kcuda — device discovery for the CUDA backend. Kernels proper land with issue "CUDA device".
#include <cuda_runtime.h>
#include <stdio.h>

#include "kcuda.h" // defines: kcuda_device_count

extern "C" int kcuda_device_count(char *err, unsigned long errlen)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (err && errlen)
            snprintf(err, errlen, "%s", cudaGetErrorString(rc));
        return 0;
    }
    return n;
}
