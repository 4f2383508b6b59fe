// What the module's model runtime is built from: checked CUDA and cuBLAS calls (a failure
// names the call and the error), device and pinned buffers freed with their owner, a weight
// matrix on the device, and the current-device guard.
#ifndef HETERO_GPU_CUDA_RESOURCES_CUH_
#define HETERO_GPU_CUDA_RESOURCES_CUH_

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "src/gpu/cuda_blocks.cuh"
#include "src/gpu/cuda_module_abi.h"

namespace hetero::gpu {

// Makes a model's GPU current for a call and gives the calling thread its own back after:
// the engine's threads (a worker per GPU, a session saving its state) may use several GPUs.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    error_ = previous_ == device ? cudaSuccess : cudaSetDevice(device);
    if (previous_ == device) previous_ = -1;  // nothing to restore
  }
  ~CurrentDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// A failed CUDA or cuBLAS call: the call, its error name and code.
struct Failure {
  int32_t code = HETERO_CUDA_OK;
  std::string message;
  bool ok() const { return code == HETERO_CUDA_OK; }
};

inline Failure FromCuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  cudaGetLastError();
  Failure f;
  f.code = e == cudaErrorMemoryAllocation ? HETERO_CUDA_OUT_OF_MEMORY : HETERO_CUDA_DEVICE_ERROR;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed: %s (%d): %s", call, cudaGetErrorName(e), static_cast<int>(e),
                cudaGetErrorString(e));
  f.message = buf;
  return f;
}

inline Failure FromCublas(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  Failure f;
  f.code = s == CUBLAS_STATUS_ALLOC_FAILED ? HETERO_CUDA_OUT_OF_MEMORY : HETERO_CUDA_DEVICE_ERROR;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed: %s (%d)", call, cublasGetStatusName(s), static_cast<int>(s));
  f.message = buf;
  return f;
}

inline Failure Invalid(const std::string& message) { return {HETERO_CUDA_INVALID_ARGUMENT, message}; }

#define HETERO_CUDA_TRY(call)                                  \
  do {                                                         \
    if (Failure f_ = FromCuda((call), #call); !f_.ok()) return f_; \
  } while (0)
#define HETERO_CUBLAS_TRY(call)                                  \
  do {                                                           \
    if (Failure f_ = FromCublas((call), #call); !f_.ok()) return f_; \
  } while (0)
#define HETERO_FAILURE_TRY(expr)              \
  do {                                        \
    if (Failure f_ = (expr); !f_.ok()) return f_; \
  } while (0)

inline int32_t Report(const Failure& f, char* message, size_t size) {
  if (!f.ok() && message != nullptr && size > 0) std::snprintf(message, size, "%s", f.message.c_str());
  return f.code;
}

// Device memory freed with its owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  Failure Allocate(size_t n, const char* what) {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    if (n == 0) return {};
    if (Failure f = FromCuda(cudaMalloc(&ptr, n), what); !f.ok()) {
      ptr = nullptr;
      return f;
    }
    bytes = n;
    return {};
  }
  Failure Upload(const void* host, size_t n, const char* what) {
    HETERO_FAILURE_TRY(Allocate(n, what));
    if (n > 0) HETERO_CUDA_TRY(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice));
    return {};
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  ~PinnedBuffer() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  Failure Allocate(size_t n) {
    if (ptr != nullptr) cudaFreeHost(ptr);
    ptr = nullptr;
    bytes = 0;
    HETERO_CUDA_TRY(cudaHostAlloc(&ptr, n, cudaHostAllocDefault));
    bytes = n;
    return {};
  }
};

struct Matrix {
  int format = 0;
  int rows = 0, cols = 0;
  DeviceBuffer blocks;    // quantized blocks (none for F16)
  DeviceBuffer own_f16;   // an F16 matrix's weights, unless they live in a layer's fused buffer
  const __half* f16 = nullptr;  // an F16 matrix's weights (null for a block format)

  // Uploads `m`: a block format's blocks (its float16 field is ignored), or an F16 matrix's
  // weights, to `f16_dest` when given (room for rows x cols).
  Failure Upload(const hetero_cuda_matrix& m, const char* name, __half* f16_dest = nullptr) {
    if (m.rows <= 0 || m.cols <= 0 || m.cols % 32 != 0 || (m.format == HETERO_CUDA_WEIGHTS_F16 && m.f16 == nullptr)) {
      return Invalid(std::string("matrix ") + name + ": bad shape or no float16 weights");
    }
    const BlockGeometry block = GemvBlock(m.format);
    if (block.bytes == 0) {
      return Invalid(std::string("matrix ") + name + ": unknown weight format " + std::to_string(m.format));
    }
    if (m.cols % block.elements != 0) {
      return Invalid(std::string("matrix ") + name + ": columns not a whole number of its format's blocks");
    }
    format = m.format;
    rows = m.rows;
    cols = m.cols;
    if (format != HETERO_CUDA_WEIGHTS_F16) {
      const size_t expected = static_cast<size_t>(rows) * (cols / block.elements) * block.bytes;
      if (m.blocks == nullptr || m.blocks_bytes != expected) {
        return Invalid(std::string("matrix ") + name + ": block data size does not match its shape");
      }
      return blocks.Upload(m.blocks, expected, "cudaMalloc(weight blocks)");
    }
    const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(__half);
    if (f16_dest != nullptr) {
      HETERO_CUDA_TRY(cudaMemcpy(f16_dest, m.f16, bytes, cudaMemcpyHostToDevice));
      f16 = f16_dest;
      return {};
    }
    HETERO_FAILURE_TRY(own_f16.Upload(m.f16, bytes, "cudaMalloc(float16 weights)"));
    f16 = own_f16.as<__half>();
    return {};
  }
  bool is_f16() const { return format == HETERO_CUDA_WEIGHTS_F16; }
  size_t elements() const { return static_cast<size_t>(rows) * cols; }
  const void* gemv_weights() const { return format == HETERO_CUDA_WEIGHTS_F16 ? static_cast<const void*>(f16) : blocks.ptr; }
  size_t device_bytes() const { return blocks.bytes + own_f16.bytes; }
};

}  // namespace hetero::gpu

#endif  // HETERO_GPU_CUDA_RESOURCES_CUH_
