// What compute devices this process can use: the CPU's features, and whether the CUDA
// backend module is installed and finds a GPU. The CUDA module (libhetero-cuda.so) is
// loaded at run time, so libhetero itself runs on machines without CUDA or a driver.
#ifndef HETERO_DEVICES_H_
#define HETERO_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hetero/export.h"

namespace hetero {

struct HETERO_EXPORT CpuInfo {
  std::string name;  // processor brand string
  int logical_cpus = 0;
  // CPUs this process may actually use: the affinity mask, capped by a cgroup CPU quota
  // (containers). The default thread count.
  int usable_cpus = 0;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // Feature names present, space separated ("avx2 fma avx512f ...").
  std::string FeatureList() const;
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  uint64_t total_memory_bytes = 0;
  int multiprocessor_count = 0;
};

struct CudaInfo {
  bool module_found = false;  // libhetero-cuda.so was found (loaded only where the NVIDIA driver is)
  std::string module_path;
  bool available = false;     // at least one usable GPU
  int driver_version = 0;     // e.g. 13000; 0 without a driver
  int runtime_version = 0;
  std::vector<CudaDeviceInfo> devices;
  // Why CUDA is not used (no module, no driver, stub driver, no device, disabled) or a
  // summary of what was found. Always set.
  std::string notice;
};

struct DeviceReport {
  CpuInfo cpu;
  CudaInfo cuda;
};

// Probes once per process (thread-safe) and returns the cached report. Set
// HETERO_DISABLE_CUDA=1 to skip the CUDA module, or HETERO_CUDA_MODULE=/path/to/module.so
// to load a specific one.
HETERO_EXPORT const DeviceReport& QueryDevices();

}  // namespace hetero

#endif  // HETERO_DEVICES_H_
