// Pinned host memory for the transfer layer, and the bandwidth measurement behind
// `hetero-bench --transfer`.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/gpu/cuda_module_abi.h"

#define HETERO_CUDA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

int32_t Fail(cudaError_t e, const char* call, char* message, size_t size) {
  cudaGetLastError();
  if (message != nullptr && size > 0) {
    std::snprintf(message, size, "%s failed: %s (%d): %s", call, cudaGetErrorName(e), static_cast<int>(e),
                  cudaGetErrorString(e));
  }
  return e == cudaErrorMemoryAllocation ? HETERO_CUDA_OUT_OF_MEMORY : HETERO_CUDA_DEVICE_ERROR;
}

#define HETERO_TRY(call)                                                  \
  do {                                                                    \
    const cudaError_t e_ = (call);                                        \
    if (e_ != cudaSuccess) return Fail(e_, #call, message, message_size); \
  } while (0)

}  // namespace

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_host_alloc(uint64_t bytes, void** out, char* message,
                                                         size_t message_size) {
  if (out == nullptr || bytes == 0) {
    if (message != nullptr && message_size > 0) std::snprintf(message, message_size, "host_alloc: bad arguments");
    return HETERO_CUDA_INVALID_ARGUMENT;
  }
  *out = nullptr;
  HETERO_TRY(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
  return HETERO_CUDA_OK;
}

HETERO_CUDA_MODULE_EXPORT void hetero_cuda_host_free(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}

// Copies `bytes` each way `repetitions` times on one stream, timed with events.
HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_measure_bandwidth(int32_t device, uint64_t bytes, int32_t repetitions,
                                                                int32_t pinned, double* host_to_device_gb_s,
                                                                double* device_to_host_gb_s, char* message,
                                                                size_t message_size) {
  if (bytes == 0 || repetitions <= 0 || host_to_device_gb_s == nullptr || device_to_host_gb_s == nullptr) {
    if (message != nullptr && message_size > 0) std::snprintf(message, message_size, "bandwidth: bad arguments");
    return HETERO_CUDA_INVALID_ARGUMENT;
  }
  HETERO_TRY(cudaSetDevice(device));
  void* host = nullptr;
  void* dev = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  int32_t status = HETERO_CUDA_OK;
  auto cleanup = [&] {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (dev != nullptr) cudaFree(dev);
    if (host != nullptr) {
      if (pinned) {
        cudaFreeHost(host);
      } else {
        std::free(host);
      }
    }
  };
  auto run = [&]() -> int32_t {
    if (pinned) {
      HETERO_TRY(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
    } else {
      host = std::malloc(bytes);
      if (host == nullptr) return HETERO_CUDA_OUT_OF_MEMORY;
    }
    std::memset(host, 1, bytes);
    HETERO_TRY(cudaMalloc(&dev, bytes));
    HETERO_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    HETERO_TRY(cudaEventCreate(&start));
    HETERO_TRY(cudaEventCreate(&stop));
    for (int direction = 0; direction < 2; ++direction) {
      const bool to_device = direction == 0;
      // One untimed copy first: page faults and lazy context work.
      HETERO_TRY(to_device ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream)
                           : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
      HETERO_TRY(cudaEventRecord(start, stream));
      for (int i = 0; i < repetitions; ++i) {
        HETERO_TRY(to_device ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream)
                             : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
      }
      HETERO_TRY(cudaEventRecord(stop, stream));
      HETERO_TRY(cudaEventSynchronize(stop));
      float ms = 0.0f;
      HETERO_TRY(cudaEventElapsedTime(&ms, start, stop));
      const double gb_s = static_cast<double>(bytes) * repetitions / (ms * 1e-3) / 1e9;
      (to_device ? *host_to_device_gb_s : *device_to_host_gb_s) = gb_s;
    }
    return HETERO_CUDA_OK;
  };
  status = run();
  cleanup();
  return status;
}
