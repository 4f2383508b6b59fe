// Entry points of libhetero-cuda.so. The module links the CUDA runtime statically and the
// driver only through it (never libcuda directly), so it loads on machines without a
// driver and reports "no device" instead of failing to start.
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "src/gpu/cuda_module_abi.h"

#define HETERO_CUDA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

void SetMessage(hetero_cuda_probe_result* result, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

void SetMessage(hetero_cuda_probe_result* result, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(result->message, sizeof(result->message), format, args);
  va_end(args);
}

// Errors that mean "this machine has no usable GPU", not "something broke".
bool MeansNoDevice(cudaError_t error) {
  return error == cudaErrorInsufficientDriver ||  // 35: no driver, or one too old
         error == cudaErrorStubLibrary ||         // 34: the toolkit's stub libcuda
         error == cudaErrorNoDevice;              // 100: driver present, no GPU
}

}  // namespace

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_module_abi_version(void) {
  return HETERO_CUDA_MODULE_ABI_VERSION;
}

HETERO_CUDA_MODULE_EXPORT void hetero_cuda_module_probe(hetero_cuda_probe_result* result,
                                                        hetero_cuda_device_desc* devices,
                                                        int32_t max_devices) {
  std::memset(result, 0, sizeof(*result));
  int runtime_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  result->runtime_version = runtime_version;
  int driver_version = 0;
  cudaDriverGetVersion(&driver_version);  // 0 without a driver
  result->driver_version = driver_version;

  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    result->cuda_error = static_cast<int32_t>(error);
    result->status = MeansNoDevice(error) ? HETERO_CUDA_PROBE_NO_DEVICE : HETERO_CUDA_PROBE_ERROR;
    SetMessage(result, "cudaGetDeviceCount failed: %s (%d): %s", cudaGetErrorName(error),
               static_cast<int>(error), cudaGetErrorString(error));
    cudaGetLastError();  // reset the runtime's last-error state
    return;
  }
  result->device_count = count;
  if (count == 0) {
    result->status = HETERO_CUDA_PROBE_NO_DEVICE;
    SetMessage(result, "the CUDA driver reports no devices");
    return;
  }
  for (int i = 0; i < count && i < max_devices; ++i) {
    cudaDeviceProp prop;
    error = cudaGetDeviceProperties(&prop, i);
    if (error != cudaSuccess) {
      result->cuda_error = static_cast<int32_t>(error);
      result->status = HETERO_CUDA_PROBE_ERROR;
      SetMessage(result, "cudaGetDeviceProperties(%d) failed: %s (%d)", i,
                 cudaGetErrorName(error), static_cast<int>(error));
      return;
    }
    hetero_cuda_device_desc& d = devices[i];
    std::snprintf(d.name, sizeof(d.name), "%s", prop.name);
    d.compute_capability_major = prop.major;
    d.compute_capability_minor = prop.minor;
    d.total_memory_bytes = prop.totalGlobalMem;
    d.multiprocessor_count = prop.multiProcessorCount;
  }
  result->status = HETERO_CUDA_PROBE_OK;
  SetMessage(result, "%d CUDA device(s), driver %d, runtime %d", count, driver_version,
             runtime_version);
}
