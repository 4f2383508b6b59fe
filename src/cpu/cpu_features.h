// Run-time detection of the x86 vector extensions the CPU kernels dispatch on (CPUID plus
// the OS's XSAVE state, so a feature counts only when the kernel enables its registers).
#ifndef HETERO_CPU_CPU_FEATURES_H_
#define HETERO_CPU_CPU_FEATURES_H_

#include "hetero/devices.h"

namespace hetero {

// Detected once per process.
const CpuInfo& DetectCpu();

}  // namespace hetero

#endif  // HETERO_CPU_CPU_FEATURES_H_
