// Routed experts that a GPU leaves to the host (a GPU memory budget, include/hetero/
// scheduler.h's expert placement): per mixture-of-experts layer, the experts the GPU does
// not hold, evaluated on the CPU for the rows and choices the GPU sends, with their own
// threads. The device calls Evaluate in stream order from its callback thread.
#ifndef HETERO_CPU_HOST_EXPERTS_H_
#define HETERO_CPU_HOST_EXPERTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cpu/experts.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

class ThreadPool;

class HostExperts {
 public:
  // `on_host[layer]`: the experts of that layer the host evaluates (empty for a layer that
  // has no experts or keeps them all on the device).
  static absl::StatusOr<std::unique_ptr<HostExperts>> Create(const GgufFile& file, const ModelDefinition& definition,
                                                             const std::vector<std::vector<bool>>& on_host, int threads);
  ~HostExperts();

  // out (rows x n_embd) = each row's weighted sum over its chosen experts held here.
  absl::Status Evaluate(int layer, int rows, const float* h, const int32_t* choices, const float* weights, float* out);

  // Per pass of the device: BeginPass, then the pass's Evaluate calls, then per row the
  // evaluations made here, the bytes its rows moved over the bus and the time spent.
  void BeginPass(int rows);
  const std::vector<int64_t>& pass_evaluations() const { return pass_evaluations_; }
  uint64_t pass_bytes_per_row() const { return pass_bytes_per_row_; }
  double pass_ms() const { return pass_ms_; }
  // Bytes the host holds for its experts beyond the mapped file.
  size_t bytes() const;
  int experts() const { return experts_; }

 private:
  HostExperts() = default;
  struct Layer {
    std::unique_ptr<CpuExperts> block;
    std::vector<bool> here;
    int used = 0;
    int n_embd = 0;
  };
  std::unique_ptr<ThreadPool> pool_;
  LinearContext dnnl_;
  std::vector<Layer> layers_;
  LinearScratch scratch_;
  std::vector<int64_t> pass_evaluations_;
  uint64_t pass_bytes_per_row_ = 0;
  double pass_ms_ = 0;
  int experts_ = 0;
};

}  // namespace hetero

#endif  // HETERO_CPU_HOST_EXPERTS_H_
