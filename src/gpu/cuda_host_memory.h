// Page-locked host memory from the CUDA module (cudaHostAlloc), for the transfer layer.
#ifndef HETERO_GPU_CUDA_HOST_MEMORY_H_
#define HETERO_GPU_CUDA_HOST_MEMORY_H_

#include "hetero/transfer.h"

namespace hetero {

// False when no module with a usable GPU is loaded (or it lacks the allocator).
bool CudaPinnedHostAllocator(HostAllocator* out);

}  // namespace hetero

#endif  // HETERO_GPU_CUDA_HOST_MEMORY_H_
