#include "src/cpu/cpu_features.h"

#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

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

}  // namespace

const CpuInfo& DetectCpu() {
  static const CpuInfo info = Detect();
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
