#ifndef HETERO_SRC_CPU_WEIGHT_ARENA_H_
#define HETERO_SRC_CPU_WEIGHT_ARENA_H_

#include <cstddef>

namespace hetero::internal {

// Memory for the kernels' packed weight copies, carved from large anonymous mappings that
// ask the kernel for transparent huge pages (2 MiB on x86). Decode streams every weight
// once per token: with 4 KiB pages each 4 KiB of weights costs a TLB walk and stops the
// hardware prefetchers at the page's edge, while the file's own pages, which a program that
// maps the file reads (llama.cpp), come from the page cache in large folios. Most matrices
// are below 2 MiB (an expert of a mixture, a small model's projections), so one mapping per
// matrix would rarely hold an aligned huge page: they share regions instead.
//
// A region is unmapped when every allocation in it has been freed; a freed allocation in a
// region that lives on gives back the whole huge pages it covered (two models loaded side
// by side share regions). Space is never reused. Pages are touched only by the caller and
// regions are mapped MAP_NORESERVE, so a region's unused tail costs address space, not
// memory. Freeing what the arena did not allocate aborts. Thread-safe. Under
// AddressSanitizer the arena is bypassed (plain operator new), so overruns between
// neighbouring copies stay detectable.
void* AllocateWeights(size_t bytes);
void FreeWeights(void* p, size_t bytes);
// The bytes the arena holds mapped now (0 where it is bypassed): for tests and diagnostics.
size_t WeightArenaMappedBytes();
// Whether allocations come from the arena (false under AddressSanitizer).
bool WeightArenaInUse();

}  // namespace hetero::internal

#endif  // HETERO_SRC_CPU_WEIGHT_ARENA_H_
