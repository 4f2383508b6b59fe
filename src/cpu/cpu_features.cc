#include "src/cpu/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <cstring>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "src/runtime/log_internal.h"

namespace hetero {
namespace {

#if defined(__x86_64__) || defined(__i386__)

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs Cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return Regs{};
  return r;
}

unsigned long long Xgetbv0() {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

bool Bit(unsigned reg, int bit) { return (reg >> bit) & 1u; }

CpuInfo Detect() {
  CpuInfo info;
  info.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const unsigned max_ext = __get_cpuid_max(0x80000000, nullptr);
  if (max_ext >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      Regs r = Cpuid(0x80000002 + i, 0);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    info.name = std::string(absl::StripAsciiWhitespace(brand));
  }
  if (max_leaf < 1) return info;
  const Regs l1 = Cpuid(1, 0);
  const bool osxsave = Bit(l1.ecx, 27);
  const unsigned long long xcr0 = osxsave ? Xgetbv0() : 0;
  const bool avx_state = (xcr0 & 0x6) == 0x6;             // SSE and AVX registers
  const bool avx512_state = avx_state && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM halves
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;     // XTILECFG, XTILEDATA
  info.fma = avx_state && Bit(l1.ecx, 12);
  info.f16c = avx_state && Bit(l1.ecx, 29);
  if (max_leaf < 7) return info;
  const Regs l7 = Cpuid(7, 0);
  const Regs l7s1 = Cpuid(7, 1);
  info.avx2 = avx_state && Bit(l7.ebx, 5);
  info.avx512f = avx512_state && Bit(l7.ebx, 16);
  info.avx512bw = info.avx512f && Bit(l7.ebx, 30);
  info.avx512vl = info.avx512f && Bit(l7.ebx, 31);
  info.avx512_vnni = info.avx512f && Bit(l7.ecx, 11);
  info.avx512_bf16 = info.avx512f && Bit(l7s1.eax, 5);
  info.amx_tile = amx_state && Bit(l7.edx, 24);
  info.amx_bf16 = info.amx_tile && Bit(l7.edx, 22);
  info.amx_int8 = info.amx_tile && Bit(l7.edx, 25);
  return info;
}

#else

CpuInfo Detect() {
  CpuInfo info;
  info.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  return info;
}

#endif


// HETERO_CPU_ISA caps what the kernels may use, so the fallback paths of a machine
// without AVX-512 can be run (and tested) on one with it; oneDNN is capped to match.
CpuInfo ApplyIsaCap(CpuInfo info) {
  const char* env = std::getenv("HETERO_CPU_ISA");
  if (env == nullptr || *env == '\0') return info;
  const std::string cap = absl::AsciiStrToLower(env);
  dnnl::cpu_isa dnnl_cap = dnnl::cpu_isa::all;
  if (cap == "avx2") {
    dnnl_cap = dnnl::cpu_isa::avx2;
  } else if (cap == "baseline" || cap == "sse41") {
    dnnl_cap = dnnl::cpu_isa::sse41;
    info.avx2 = info.fma = info.f16c = false;
  } else if (cap != "avx512" && cap != "native") {
    internal::Log(LogLevel::kWarning,
                  absl::StrCat("HETERO_CPU_ISA='", env, "' is not one of avx512, avx2, baseline; ignored"));
    return info;
  }
  if (cap != "avx512" && cap != "native") {
    info.avx512f = info.avx512bw = info.avx512vl = info.avx512_vnni = info.avx512_bf16 = false;
    info.amx_tile = info.amx_bf16 = info.amx_int8 = false;
    try {
      dnnl::set_max_cpu_isa(dnnl_cap);
    } catch (const dnnl::error& e) {
      internal::Log(LogLevel::kWarning,
                    absl::StrCat("HETERO_CPU_ISA: oneDNN was already in use, its ISA is not capped (", e.what(), ")"));
    }
  }
  return info;
}

}  // namespace

// The CPUs a container may use: cgroup v2 cpu.max ("max 100000" or "200000 100000"), or
// v1's cfs quota and period; 0 when there is no quota.
int CgroupCpuQuota() {
  auto read = [](const char* path) {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text;
  };
  double quota = -1, period = 0;
  const std::string v2 = read("/sys/fs/cgroup/cpu.max");
  if (!v2.empty()) {
    std::istringstream fields(v2);
    std::string q;
    fields >> q >> period;
    if (q != "max") quota = std::atof(q.c_str());
  } else {
    const std::string q = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    const std::string p = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!q.empty() && !p.empty()) {
      quota = std::atof(q.c_str());
      period = std::atof(p.c_str());
    }
  }
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(quota / period)));
}

int UsableCpus(int logical) {
  int usable = logical;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) usable = CPU_COUNT(&set);
  if (const int quota = CgroupCpuQuota(); quota > 0) usable = std::min(usable, quota);
  return std::max(1, usable);
}

const CpuInfo& DetectCpu() {
  static const CpuInfo info = [] {
    CpuInfo detected = ApplyIsaCap(Detect());
    detected.usable_cpus = UsableCpus(detected.logical_cpus);
    return detected;
  }();
  return info;
}

std::string CpuInfo::FeatureList() const {
  std::vector<const char*> names;
  if (avx2) names.push_back("avx2");
  if (fma) names.push_back("fma");
  if (f16c) names.push_back("f16c");
  if (avx512f) names.push_back("avx512f");
  if (avx512bw) names.push_back("avx512bw");
  if (avx512vl) names.push_back("avx512vl");
  if (avx512_vnni) names.push_back("avx512_vnni");
  if (avx512_bf16) names.push_back("avx512_bf16");
  if (amx_tile) names.push_back("amx_tile");
  if (amx_bf16) names.push_back("amx_bf16");
  if (amx_int8) names.push_back("amx_int8");
  return absl::StrJoin(names, " ");
}

}  // namespace hetero
