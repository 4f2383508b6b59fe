// Device discovery: CPU features, and the CUDA module found, loaded and reporting cleanly
// (on machines without a driver: "no device", never a crash or a failed start).
#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/devices.h"
#include "src/gpu/cuda_module_loader.h"

namespace hetero {
namespace {

using ::testing::HasSubstr;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DevicesTest, CpuIsAlwaysThere) {
  const DeviceReport& report = QueryDevices();
  EXPECT_GE(report.cpu.logical_cpus, 1);
  // Feature implications the detection must respect.
  if (report.cpu.avx512_bf16 || report.cpu.avx512_vnni) {
    EXPECT_TRUE(report.cpu.avx512f);
  }
  if (report.cpu.amx_bf16) {
    EXPECT_TRUE(report.cpu.amx_tile);
  }
  std::printf("cpu: %s (%d logical), features: %s\n", report.cpu.name.c_str(), report.cpu.logical_cpus,
              report.cpu.FeatureList().c_str());
}

TEST(DevicesTest, CudaReportIsConsistent) {
  const CudaInfo& cuda = QueryDevices().cuda;
  EXPECT_FALSE(cuda.notice.empty());
  std::printf("cuda: module %s, available %d: %s\n", cuda.module_found ? cuda.module_path.c_str() : "(none)",
              cuda.available, cuda.notice.c_str());
#if HETERO_CUDA_MODULE_BUILT
  EXPECT_TRUE(cuda.module_found) << "the build made libhetero-cuda.so but it was not loaded: " << cuda.notice;
  // Without the NVIDIA driver the module is found but not loaded, so no runtime reports in.
  if (cuda.notice.find("libcuda.so.1 is not installed") == std::string::npos) {
    EXPECT_GT(cuda.runtime_version, 0);
  }
#endif
  if (cuda.available) {
    ASSERT_FALSE(cuda.devices.empty());
    for (const CudaDeviceInfo& d : cuda.devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GE(d.compute_capability_major, 7);
      EXPECT_GT(d.total_memory_bytes, 0u);
    }
  } else {
    EXPECT_TRUE(cuda.devices.empty());
    EXPECT_THAT(cuda.notice, HasSubstr("CPU only"));
  }
}

TEST(DevicesTest, DisabledByEnvironment) {
  ScopedEnv env("HETERO_DISABLE_CUDA", "1");
  const CudaInfo cuda = LoadCudaModuleAndProbe();
  EXPECT_FALSE(cuda.module_found);
  EXPECT_FALSE(cuda.available);
  EXPECT_THAT(cuda.notice, HasSubstr("disabled by HETERO_DISABLE_CUDA"));
}

TEST(DevicesTest, ExplicitModulePathThatDoesNotExist) {
  ScopedEnv env("HETERO_CUDA_MODULE", "/no/such/libhetero-cuda.so");
  EXPECT_THAT(CudaModuleCandidates(), ::testing::ElementsAre("/no/such/libhetero-cuda.so"));
  const CudaInfo cuda = LoadCudaModuleAndProbe();
  EXPECT_FALSE(cuda.module_found);
  EXPECT_THAT(cuda.notice, HasSubstr("/no/such/libhetero-cuda.so does not exist"));
}

TEST(DevicesTest, ModuleWithoutEntryPointsIsRefused) {
  // Any shared object that is not a hetero module: libhetero itself.
  ScopedEnv env("HETERO_CUDA_MODULE", HETERO_CORE_LIBRARY_PATH);
  const CudaInfo cuda = LoadCudaModuleAndProbe();
  EXPECT_TRUE(cuda.module_found);
  EXPECT_FALSE(cuda.available);
  EXPECT_THAT(cuda.notice, HasSubstr("lacks the hetero entry points"));
}

TEST(DevicesTest, FileThatIsNotASharedObject) {
  ScopedEnv env("HETERO_CUDA_MODULE", HETERO_TEST_DATA_DIR "/README.md");
  const CudaInfo cuda = LoadCudaModuleAndProbe();
  EXPECT_FALSE(cuda.module_found);
  EXPECT_THAT(cuda.notice, HasSubstr("failed to load"));
}

}  // namespace
}  // namespace hetero
