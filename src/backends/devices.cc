#include "hetero/devices.h"

#include "src/cpu/cpu_features.h"
#include "src/gpu/cuda_module_loader.h"
#include "src/runtime/log_internal.h"

namespace hetero {

const DeviceReport& QueryDevices() {
  static const DeviceReport* report = [] {
    auto* r = new DeviceReport();  // never destroyed: the CUDA module stays loaded too
    r->cpu = DetectCpu();
    r->cuda = CudaProbe();
    internal::Log(r->cuda.available ? LogLevel::kInfo : LogLevel::kWarning, r->cuda.notice);
    return r;
  }();
  return *report;
}

}  // namespace hetero
