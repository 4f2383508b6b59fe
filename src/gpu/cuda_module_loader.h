// Finds and loads the CUDA backend module (libhetero-cuda.so) at run time.
#ifndef HETERO_GPU_CUDA_MODULE_LOADER_H_
#define HETERO_GPU_CUDA_MODULE_LOADER_H_

#include <string>
#include <vector>

#include "hetero/devices.h"

namespace hetero {

// Search order: $HETERO_CUDA_MODULE (a path), then the directory holding libhetero (or the
// executable, for static builds) and its ../lib, then the dynamic loader's own search.
// $HETERO_DISABLE_CUDA=1 skips the module. Never fails: problems land in `notice`.
CudaInfo LoadCudaModuleAndProbe();

// LoadCudaModuleAndProbe's answer, probed once per process (thread-safe): what the GPU
// backend reads, and what QueryDevices() reports.
const CudaInfo& CudaProbe();

// A symbol of the module CudaProbe() loaded, or null when no module with a usable device
// was loaded (or it lacks the symbol).
void* CudaModuleSymbol(const char* name);

// Candidate paths in search order (exposed for tests).
std::vector<std::string> CudaModuleCandidates();

}  // namespace hetero

#endif  // HETERO_GPU_CUDA_MODULE_LOADER_H_
