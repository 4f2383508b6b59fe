// Chooses how far ahead the integer kernels prefetch their weights (weight_prefetch.h)
// from decode's own measured read rate, while it runs.
//
// Why at run time: the best distance is a property of the machine on the day, not of the
// CPU model. On one two-core AMD EPYC VM 8 KiB ahead beat 4 KiB by 11-23% in Q8_0 decode;
// on another day (the same CPU model, its memory slower: a plain read at 32 GB/s, not 57)
// prefetching only the unit in hand beat 8 KiB by 10-28%. The distance
// changes no result, only speed, so it can be tried live.
//
// How: memory-bound loops (decode's matrix products of a few rows) report the weight bytes
// they read and the time they took. Every candidate distance is tried for a block of
// `block_bytes` of reads, in `probe_passes` passes, each pass starting one candidate further
// on (with as many passes as candidates, each candidate runs once at every position, so a
// steady drift of the machine favours none). Each rate is taken relative to its pass's
// mean (the machine's speed moves between passes by more than the candidates differ), and
// the candidate with the best median relative rate is kept for `settled_blocks` blocks;
// then the probe runs again. The incumbent stays unless another beats it by `keep_margin`.
// A probe reads 16 blocks of 128 MiB (about 23 tokens of a 92 MB model), three quarters at
// distances that may be slower; then 256 GiB run at the chosen one.
#ifndef HETERO_CPU_PREFETCH_TUNER_H_
#define HETERO_CPU_PREFETCH_TUNER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hetero::internal {

class PrefetchTuner {
 public:
  struct Options {
    // Bytes ahead; 0 asks for the lines of the unit in hand (its second half ahead of use).
    // Duplicates are dropped; `initial` is added if missing.
    std::vector<uint32_t> candidates = {0, 4096, 8192, 16384};
    // The distance chosen until the first probe has ended (products not being measured run
    // at chosen()), and the incumbent that probe must beat.
    uint32_t initial = 8192;
    uint64_t block_bytes = 128ull << 20;
    int probe_passes = 4;
    int settled_blocks = 2048;
    double keep_margin = 0.03;
  };

  explicit PrefetchTuner(Options options);

  // One memory-bound loop read `bytes` of weights in `nanoseconds` at distance(). Returns
  // the distance to measure next. While settled only the bytes count (toward the next probe).
  uint32_t Record(uint64_t bytes, uint64_t nanoseconds);

  // The distance the next measured loop should run at: the probe's candidate, or chosen().
  uint32_t distance() const { return probing_ ? options_.candidates[ProbeIndex()] : chosen_; }
  // The distance the last finished probe chose; `initial` until one has finished.
  uint32_t chosen() const { return chosen_; }
  bool probing() const { return probing_; }
  int probes_finished() const { return probes_finished_; }
  // The last finished probe's median rate per candidate relative to its passes' means.
  const std::vector<double>& probe_rates() const { return probe_rates_; }
  const std::vector<uint32_t>& candidates() const { return options_.candidates; }
  uint64_t block_bytes() const { return options_.block_bytes; }

 private:
  void StartProbe();
  void FinishProbe();
  // The index of the candidate the probe's current block measures.
  size_t ProbeIndex() const;

  Options options_;
  uint32_t chosen_;
  bool probing_ = true;
  int probes_finished_ = 0;
  int block_ = 0;  // blocks done in this probe, or since it settled
  uint64_t block_read_ = 0;
  uint64_t block_nanoseconds_ = 0;
  std::vector<std::vector<double>> rates_;  // per candidate, one bytes/ns per pass
  std::vector<double> probe_rates_;
};

}  // namespace hetero::internal

#endif  // HETERO_CPU_PREFETCH_TUNER_H_
