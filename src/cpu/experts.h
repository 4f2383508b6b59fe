// A mixture-of-experts feed-forward block on the CPU (ExpertsDefinition in
// src/runtime/models/model_definition.h). The router runs in f32 whatever the weights'
// format, so the choice of experts does not move with the matrix precision; it is our own
// loop, not oneDNN: a row's logits are summed in one fixed order whatever the row count
// (routing must not depend on the other tokens of a step), and a decode step calls no
// OpenMP region whose spinning threads would take the cores from our own pool. Each step's
// tokens are grouped by expert: every chosen expert's weights are read once per step, and
// all chosen experts' products run as one parallel step (ForwardEach). A token's outputs
// are summed in expert order, so its result does not depend on the other tokens of the step.
#ifndef HETERO_CPU_EXPERTS_H_
#define HETERO_CPU_EXPERTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cpu/linear.h"
#include "src/runtime/gguf.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

class CpuExperts {
 public:
  // How the backend builds one expert matrix (its choice of kernel and precision).
  using MakeLinearFn = std::function<absl::StatusOr<std::unique_ptr<Linear>>(const GgufTensorInfo&)>;

  // `only` (count entries): create just the marked experts' matrices (ForwardChosen's).
  static absl::StatusOr<std::unique_ptr<CpuExperts>> Create(const GgufFile& file, const ExpertsDefinition& definition,
                                                            FfnActivation activation, const MakeLinearFn& make_linear,
                                                            const std::vector<bool>* only = nullptr);

  // out (rows x n_embd) = the block's output for its input h (rows x n_embd).
  absl::Status Forward(const float* h, int rows, float* out, LinearScratch& scratch);

  // The routed experts alone, for a device that chose them and holds the others (the GPU's
  // experts on the host): out (rows x n_embd) = each row's sum of weight x expert(h) over
  // its chosen experts (choices, weights: rows x used) that `here` marks, zeros for rows
  // with none. No router, no shared expert. Every marked expert must have been created.
  absl::Status ForwardChosen(const float* h, int rows, const int32_t* choices, const float* weights,
                             const std::vector<bool>& here, float* out, LinearScratch& scratch);

  // Every matrix the block holds (experts, shared expert), for the backend's summary.
  std::vector<const Linear*> matrices() const;
  // Bytes the block holds beside its matrices (the router's f32 weights).
  size_t router_bytes() const { return router_.size() * sizeof(float); }
  // How often Forward's router chose each expert since load (ForwardChosen's choices were
  // counted by the device that made them). Safe to read while another thread runs a step.
  std::vector<uint64_t> usage() const;

 private:
  struct Expert {
    std::unique_ptr<Linear> gate, up, down;
  };
  // Fills choices_ (rows x used expert ids, ascending), weights_ and slots_ from the
  // router's logits, and rows_of_.
  void Route(const float* h, int rows);
  // out = the routed experts' weighted sum for the choices in choices_/weights_, over the
  // experts with rows in rows_of_.
  absl::Status RoutedSum(const float* h, int rows, float* out, LinearScratch& scratch);
  absl::Status AddShared(const float* h, int rows, float* out, LinearScratch& scratch);

  ExpertsDefinition def_;
  FfnActivation activation_;
  int n_embd_ = 0;
  std::vector<float> router_;  // [count][n_embd]
  std::vector<Expert> experts_;
  Expert shared_;
  std::vector<float> shared_gate_input_;
  std::unique_ptr<std::atomic<uint64_t>[]> usage_;  // per expert
  // Work buffers, reused across steps.
  std::vector<float> logits_, probs_;
  std::vector<int> choices_;
  std::vector<float> weights_;
  std::vector<int> slots_;  // per choice: its row in the experts' stacked outputs
  std::vector<std::vector<int>> rows_of_;  // per expert: its rows this step, ascending
  std::vector<float> gathered_, gate_, up_, down_;
  std::vector<float> shared_gate_, shared_up_, shared_down_;
  std::vector<int> order_, first_slot_, next_;
  std::vector<LinearProduct> gate_up_, down_products_;
};

}  // namespace hetero

#endif  // HETERO_CPU_EXPERTS_H_
