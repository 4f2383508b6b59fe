#include "src/gpu/cuda_host_memory.h"

#include "hetero/devices.h"
#include "src/gpu/cuda_module_abi.h"
#include "src/gpu/cuda_module_loader.h"

namespace hetero {

bool CudaPinnedHostAllocator(HostAllocator* out) {
  if (!CudaProbe().available) return false;
  auto alloc = reinterpret_cast<hetero_cuda_host_alloc_fn>(CudaModuleSymbol(HETERO_CUDA_HOST_ALLOC_SYMBOL));
  auto release = reinterpret_cast<hetero_cuda_host_free_fn>(CudaModuleSymbol(HETERO_CUDA_HOST_FREE_SYMBOL));
  if (alloc == nullptr || release == nullptr) return false;
  out->allocate = [alloc](size_t bytes) -> void* {
    void* p = nullptr;
    char message[256];
    return alloc(bytes, &p, message, sizeof message) == HETERO_CUDA_OK ? p : nullptr;
  };
  out->release = [release](void* p, size_t) { release(p); };
  out->pinned = true;
  return true;
}

}  // namespace hetero
