// Software prefetch for the integer kernels' weight streams. In decode every weight byte
// comes from memory once per token; the hardware prefetchers start over at every page and
// every new matrix (a mixture of experts reads dozens of small ones a step), so a kernel
// asks for the lines a fixed distance ahead of the ones it multiplies.
//
// Measured on an AMD EPYC (Zen 4, 2 threads), tg128 interleaved, medians of three:
//  - the block formats (one unit's share per run of 32 columns): granite-3.0-1b-a400m-shaped
//    MoE in Q4_K_M 64 -> 88 tok/s, the default model's shape in Q4_K_M 189 -> 204 and in
//    Q6_K 132 -> 169; where the weights stall the kernel most (Q6_K's bit masks) the most;
//  - Q8_0 (one tile per block of 32): the MoE shape 39.4 -> 42.7, the default model's 113 -> 125;
//  - Q4_0/Q4_1: a whole tile per block measured slower at 4 KiB (Q4_1 238 -> 201); one
//    pair's unit per pair of blocks at 8 KiB (below), against the same build without:
//    BM_QuantGemv Q4_1 +1-6% in eight of eight interleaved runs, decode -4% to +5% (noise).
// The distance: 4 KiB until 2026-12-05; then 8 KiB, with no request past the matrix's end
// (on the two-core EPYC, against 4 KiB, interleaved, tg128: the default model's shape Q8_0
// +11-23%, Q6_K +12-19%, Q4_K_M +2-11%; granite-shaped MoE Q8_0 +10-20%; 8 KiB without the
// limit had cost the MoE files, each expert being a separate allocation). Since 2026-12-06
// it is tuned while decode runs (prefetch_tuner.h), 8 KiB until the first probe has ended:
// another VM of the same CPU model did best with only the unit in hand.
#ifndef HETERO_CPU_WEIGHT_PREFETCH_H_
#define HETERO_CPU_WEIGHT_PREFETCH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hetero::internal {

// How far ahead, in bytes; set by PlanWeightRead (prefetch_tuner.cc), read by the kernels.
extern std::atomic<uint32_t> weight_prefetch_bytes;

// Products of this many activation rows or fewer are bound by reading their weights.
inline constexpr int kMemoryBoundRows = 4;

enum class WeightReadPlan {
  kUntimed,  // run it; nothing to report
  kTimed,    // time it and RecordWeightRead: the tuner is measuring this distance
  kCounted,  // run it and CountWeightRead its bytes (settled: they bring the next probe)
};
// Before a product of `rows` activation rows: sets the distance its kernels use (the
// probe's candidate for a memory-bound product while the tuner probes, else the chosen
// one) and says what to report after it.
WeightReadPlan PlanWeightRead(int rows);
void RecordWeightRead(uint64_t bytes, uint64_t nanoseconds);
void CountWeightRead(uint64_t bytes);

// The `bytes` that follow `at` + weight_prefetch_bytes, one request per cache line, none at
// or past `end` (the end of the matrix's weights): past it lie other allocations, which a
// mixture's small expert matrices would otherwise pull in by the kilobyte. (A prefetch
// never faults; the limit is about bandwidth, not safety.)
inline void PrefetchWeights(const uint8_t* at, size_t bytes, const uint8_t* end) {
  const uint8_t* from = at + weight_prefetch_bytes.load(std::memory_order_relaxed);
  if (from + bytes > end) bytes = from < end ? static_cast<size_t>(end - from) : 0;
  for (size_t line = 0; line < bytes; line += 64) __builtin_prefetch(from + line, 0, 3);
}

}  // namespace hetero::internal

#endif  // HETERO_CPU_WEIGHT_PREFETCH_H_
