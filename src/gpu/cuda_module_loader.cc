#include "src/gpu/cuda_module_loader.h"

#include <dlfcn.h>

#include <atomic>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "src/gpu/cuda_module_abi.h"

namespace hetero {
namespace {

constexpr char kModuleFileName[] = "libhetero-cuda.so";
constexpr int kMaxDevices = 64;

bool EnvIsTrue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Directory of the shared object (or executable) this code was linked into.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(info.dli_fname, ec);
  if (ec) p = info.dli_fname;
  return p.parent_path().string();
}

// The module CudaProbe() loaded with a usable device; set once, under its static's guard.
std::atomic<void*> g_usable_module{nullptr};

}  // namespace

const CudaInfo& CudaProbe() {
  static const CudaInfo* info = new CudaInfo(LoadCudaModuleAndProbe());  // the module stays loaded
  return *info;
}

void* CudaModuleSymbol(const char* name) {
  void* handle = g_usable_module.load();
  return handle == nullptr ? nullptr : dlsym(handle, name);
}

std::vector<std::string> CudaModuleCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("HETERO_CUDA_MODULE"); env != nullptr && *env != '\0') {
    out.push_back(env);
    return out;  // an explicit choice is the only candidate
  }
  const std::string dir = OwnDirectory();
  if (!dir.empty()) {
    out.push_back(absl::StrCat(dir, "/", kModuleFileName));
    out.push_back(absl::StrCat(dir, "/../lib/", kModuleFileName));
  }
  out.push_back(kModuleFileName);  // LD_LIBRARY_PATH, rpath, system directories
  return out;
}

CudaInfo LoadCudaModuleAndProbe() {
  CudaInfo info;
  if (EnvIsTrue("HETERO_DISABLE_CUDA")) {
    info.notice = "CUDA disabled by HETERO_DISABLE_CUDA; running on the CPU only";
    return info;
  }
  const std::vector<std::string> candidates = CudaModuleCandidates();
  const char* explicit_module = std::getenv("HETERO_CUDA_MODULE");
  if (explicit_module != nullptr && std::string_view(explicit_module).find('/') != std::string_view::npos &&
      !std::filesystem::exists(explicit_module)) {
    info.notice = absl::StrCat("HETERO_CUDA_MODULE=", explicit_module,
                               " does not exist; running on the CPU only");
    return info;
  }
  // Without the NVIDIA driver there can be no device, and loading the module would map the
  // CUDA runtime and cuBLAS for nothing (about 150 MB resident, measured 2026-12-02). An
  // explicitly named module is always loaded (tests name stand-ins).
  if (explicit_module == nullptr || *explicit_module == '\0') {
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {  // stays open: the module needs it
      for (const std::string& candidate : candidates) {
        if (candidate.find('/') != std::string::npos && std::filesystem::exists(candidate)) {
          info.module_found = true;
          info.module_path = candidate;
          break;
        }
      }
      info.notice = "no CUDA device (the NVIDIA driver's libcuda.so.1 is not installed, so the CUDA module "
                    "was not loaded); running on the CPU only";
      return info;
    }
  }
  void* handle = nullptr;
  std::string last_error;
  for (const std::string& candidate : candidates) {
    const bool is_path = candidate.find('/') != std::string::npos;
    if (is_path && !std::filesystem::exists(candidate)) continue;
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      info.module_path = candidate;
      break;
    }
    const char* err = dlerror();
    // A module that exists but fails to load (a missing dependency, a bad file) is worth
    // reporting; a module that is simply absent is not.
    if (err != nullptr && (is_path || std::string_view(err).find("No such file") == std::string_view::npos)) {
      last_error = err;
    }
  }
  if (handle == nullptr) {
    info.notice = last_error.empty()
                      ? absl::StrCat("CUDA module ", kModuleFileName,
                                     " not installed; running on the CPU only")
                      : absl::StrCat("CUDA module failed to load (", last_error,
                                     "); running on the CPU only");
    return info;
  }
  info.module_found = true;
  auto abi_version = reinterpret_cast<hetero_cuda_module_abi_version_fn>(
      dlsym(handle, HETERO_CUDA_MODULE_ABI_VERSION_SYMBOL));
  auto probe = reinterpret_cast<hetero_cuda_module_probe_fn>(
      dlsym(handle, HETERO_CUDA_MODULE_PROBE_SYMBOL));
  if (abi_version == nullptr || probe == nullptr) {
    info.notice = absl::StrCat("CUDA module ", info.module_path,
                               " lacks the hetero entry points; running on the CPU only");
    return info;  // the handle stays open: unloading CUDA runtimes at run time is unsafe
  }
  if (abi_version() != HETERO_CUDA_MODULE_ABI_VERSION) {
    info.notice = absl::StrCat("CUDA module ", info.module_path, " has ABI version ",
                               abi_version(), ", this libhetero needs ",
                               HETERO_CUDA_MODULE_ABI_VERSION, "; running on the CPU only");
    return info;
  }
  hetero_cuda_probe_result result = {};
  std::vector<hetero_cuda_device_desc> devices(kMaxDevices);
  probe(&result, devices.data(), kMaxDevices);
  result.message[sizeof(result.message) - 1] = '\0';
  info.driver_version = result.driver_version;
  info.runtime_version = result.runtime_version;
  switch (result.status) {
    case HETERO_CUDA_PROBE_OK:
      for (int i = 0; i < result.device_count && i < kMaxDevices; ++i) {
        const hetero_cuda_device_desc& d = devices[i];
        CudaDeviceInfo dev;
        dev.index = i;
        dev.name = std::string(d.name, strnlen(d.name, sizeof(d.name)));
        dev.compute_capability_major = d.compute_capability_major;
        dev.compute_capability_minor = d.compute_capability_minor;
        dev.total_memory_bytes = d.total_memory_bytes;
        dev.multiprocessor_count = d.multiprocessor_count;
        info.devices.push_back(std::move(dev));
      }
      info.available = !info.devices.empty();
      info.notice = result.message;
      if (info.available) g_usable_module.store(handle);
      break;
    case HETERO_CUDA_PROBE_NO_DEVICE:
      info.notice = absl::StrCat("no CUDA device (", result.message, "); running on the CPU only");
      break;
    default:
      info.notice = absl::StrCat("CUDA error (", result.message, "); running on the CPU only");
      break;
  }
  return info;
}

}  // namespace hetero
