// Page-locked host memory for the transfer layer, from whichever backend provides it.
#ifndef HETERO_RUNTIME_PINNED_HOST_MEMORY_H_
#define HETERO_RUNTIME_PINNED_HOST_MEMORY_H_

#include "hetero/transfer.h"

namespace hetero {

// Fills `out` with an allocator of page-locked memory when a backend that has one (CUDA,
// with a usable GPU) is present; false otherwise. Defined by the backend registration
// (src/backends/), so the transfer layer names no backend.
bool FindPinnedHostAllocator(HostAllocator* out);

}  // namespace hetero

#endif  // HETERO_RUNTIME_PINNED_HOST_MEMORY_H_
