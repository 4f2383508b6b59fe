// The backend registration: the one place that knows the concrete backends. It creates the
// engine's devices (the CPU, then each GPU the CUDA module finds, or a test's stand-ins) and
// gives the transfer layer its page-locked memory. Nothing else outside src/cpu and src/gpu
// includes their headers.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hetero/devices.h"
#include "src/cpu/cpu_backend.h"
#include "src/gpu/cuda_backend.h"
#include "src/gpu/cuda_host_memory.h"
#include "src/runtime/device_registry.h"
#include "src/runtime/pinned_host_memory.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/test_hooks.h"

namespace hetero {

bool FindPinnedHostAllocator(HostAllocator* out) { return CudaPinnedHostAllocator(out); }

absl::StatusOr<std::vector<DeviceSlot>> CreateDeviceBackends(const Model& model, const BackendRequest& request) {
  std::vector<DeviceSlot> slots;
  CpuBackendOptions cpu;
  if (request.cpu_threads > 0) cpu.threads = request.cpu_threads;
  cpu.precision = request.cpu_precision;
  cpu.max_sequences = request.max_sequences;
  cpu.share_kv_prefixes = request.share_kv_prefixes;
  cpu.kv_block_tokens = request.kv_block_tokens;
  cpu.kv_capacity_tokens = request.kv_capacity_tokens;
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu_backend, CpuBackend::Create(model, cpu));
  slots.push_back(DeviceSlot{Device::kCpu, std::move(cpu_backend), ""});

  if (const std::shared_ptr<const internal::TestHooks> hooks = internal::CurrentTestHooks();
      hooks != nullptr && hooks->gpu_backend) {
    for (int ordinal = 0; ordinal < hooks->stand_in_gpus; ++ordinal) {  // stand-ins for GPUs (tests)
      absl::StatusOr<std::unique_ptr<Backend>> gpu = hooks->gpu_backend(
          model, request.kv_block_tokens, request.kv_capacity_tokens, request.max_sequences, ordinal);
      if (gpu.ok()) {
        slots.push_back(DeviceSlot{Device::Gpu(ordinal), std::move(*gpu), ""});
      } else {
        slots.push_back(DeviceSlot{Device::Gpu(ordinal), nullptr, std::string(gpu.status().message())});
      }
    }
    return slots;
  }
  const CudaInfo& cuda = QueryDevices().cuda;
  if (!cuda.available) {
    slots.push_back(DeviceSlot{Device::kGpu, nullptr, cuda.notice});
    return slots;
  }
  for (const CudaDeviceInfo& info : cuda.devices) {
    CudaBackendOptions gpu;
    gpu.device = info.index;
    gpu.max_sequences = request.max_sequences;
    gpu.kv_capacity_tokens = request.kv_capacity_tokens;
    gpu.kv_block_tokens = request.kv_block_tokens;
    gpu.share_kv_prefixes = request.share_kv_prefixes;
    gpu.memory_budget_bytes = request.gpu_memory_budget_bytes;
    gpu.place_experts = request.place_experts;
    gpu.host_threads = cpu.threads;
    gpu.expert_usage = request.expert_usage;
    absl::StatusOr<std::unique_ptr<CudaBackend>> created = CudaBackend::Create(model, gpu);
    if (!created.ok() && request.gpu_memory_budget_bytes > 0 && absl::IsResourceExhausted(created.status())) {
      // The caller's budget cannot work: say so at load rather than run without the GPU.
      return absl::ResourceExhaustedError(absl::StrCat("GPU memory budget on ", info.name, ": ",
                                                       created.status().message()));
    }
    if (created.ok()) {
      slots.push_back(DeviceSlot{Device::Gpu(info.index), std::move(*created), ""});
    } else {
      // Too little device memory, or a device error: the other devices do the work.
      slots.push_back(DeviceSlot{Device::Gpu(info.index), nullptr,
                                 absl::StrCat("the CUDA backend could not start on ", info.name, ": ",
                                              created.status().message())});
    }
  }
  return slots;
}

}  // namespace hetero
