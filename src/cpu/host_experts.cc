#include "src/cpu/host_experts.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::StatusOr<std::unique_ptr<HostExperts>> HostExperts::Create(const GgufFile& file, const ModelDefinition& definition,
                                                                 const std::vector<std::vector<bool>>& on_host,
                                                                 int threads) {
  if (on_host.size() != definition.layers.size()) return absl::InvalidArgumentError("HostExperts: one mask per layer");
  auto host = std::unique_ptr<HostExperts>(new HostExperts());
  host->pool_ = std::make_unique<ThreadPool>(std::max(1, threads));
  host->layers_.resize(definition.layers.size());
  const bool bf16 = DetectCpu().avx512_bf16;
  // The CPU backend's kernels: native blocks where it has them, else oneDNN.
  const CpuExperts::MakeLinearFn make = [&](const GgufTensorInfo& t) -> absl::StatusOr<std::unique_ptr<Linear>> {
    if (QuantizedWeights::Supports(t.type)) return MakeQuantLinear(host->dnnl_, t, kNeverBf16);
    return MakeOneDnnLinear(host->dnnl_, t, bf16 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
  };
  for (size_t i = 0; i < on_host.size(); ++i) {
    const ExpertsDefinition& e = definition.layers[i].experts;
    if (on_host[i].empty()) continue;
    if (!e.present() || on_host[i].size() != static_cast<size_t>(e.count)) {
      return absl::InvalidArgumentError(absl::StrCat("HostExperts: layer ", i, "'s mask does not match its experts"));
    }
    ExpertsDefinition routed = e;
    routed.shared_gate_input.clear();  // the device runs the shared expert
    routed.shared_gate.clear();
    routed.shared_up.clear();
    routed.shared_down.clear();
    routed.shared_n_ff = 0;
    Layer& l = host->layers_[i];
    HETERO_ASSIGN_OR_RETURN(l.block, CpuExperts::Create(file, routed, definition.activation, make, &on_host[i]));
    l.here = on_host[i];
    l.used = e.used;
    l.n_embd = static_cast<int>(file.FindTensor(e.router)->dims[0]);
    for (bool b : l.here) host->experts_ += b ? 1 : 0;
  }
  return host;
}

HostExperts::~HostExperts() = default;

void HostExperts::BeginPass(int rows) {
  pass_evaluations_.assign(rows, 0);
  pass_bytes_per_row_ = 0;
  pass_ms_ = 0;
}

absl::Status HostExperts::Evaluate(int layer, int rows, const float* h, const int32_t* choices, const float* weights,
                                   float* out) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()) || layers_[layer].block == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no host experts for layer ", layer));
  }
  const auto start = std::chrono::steady_clock::now();
  Layer& l = layers_[layer];
  const ScopedThreadPool use_pool(pool_.get());
  HETERO_RETURN_IF_ERROR(l.block->ForwardChosen(h, rows, choices, weights, l.here, out, scratch_));
  if (static_cast<int>(pass_evaluations_.size()) < rows) pass_evaluations_.resize(rows, 0);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < l.used; ++k) pass_evaluations_[r] += l.here[choices[static_cast<size_t>(r) * l.used + k]] ? 1 : 0;
  }
  // Down: the row's input, choices and weights; up: its sum.
  pass_bytes_per_row_ += 2 * sizeof(float) * l.n_embd + (sizeof(int32_t) + sizeof(float)) * l.used;
  pass_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

size_t HostExperts::bytes() const {
  size_t total = 0;
  for (const Layer& l : layers_) {
    if (l.block == nullptr) continue;
    for (const Linear* m : l.block->matrices()) total += m->resident_bytes();
    total += l.block->router_bytes();
  }
  return total;
}

}  // namespace hetero
