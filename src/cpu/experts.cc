#include "src/cpu/experts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "src/cpu/cpu_ops.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

void Activate(FfnActivation activation, float* gate, const float* up, size_t count) {
  if (activation == FfnActivation::kGeluTanh) {
    GeluTanhMul(gate, up, count);
  } else {
    SiluMul(gate, up, count);
  }
}

// sum x[i] w[i] in one fixed order: 16 running sums (vectorised by the compiler), then
// added pairwise.
float RouterDot(const float* x, const float* w, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * w[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += x[i] * w[i];
  for (int width = 8; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuExperts>> CpuExperts::Create(const GgufFile& file, const ExpertsDefinition& d,
                                                               FfnActivation activation,
                                                               const MakeLinearFn& make_linear,
                                                               const std::vector<bool>* only) {
  if (only != nullptr && only->size() != static_cast<size_t>(d.count)) {
    return absl::InvalidArgumentError("CpuExperts: the mask does not name every expert");
  }
  auto block = std::unique_ptr<CpuExperts>(new CpuExperts());
  block->def_ = d;
  block->activation_ = activation;
  const GgufTensorInfo& router = *file.FindTensor(d.router);
  block->n_embd_ = static_cast<int>(router.dims[0]);
  HETERO_ASSIGN_OR_RETURN(block->router_, LoadFloatTensor(file, d.router));
  block->experts_.resize(d.count);
  for (int e = 0; e < d.count; ++e) {
    if (only != nullptr && !(*only)[e]) continue;
    Expert& x = block->experts_[e];
    HETERO_ASSIGN_OR_RETURN(x.gate, make_linear(ExpertMatrix(file, d.gate, e)));
    HETERO_ASSIGN_OR_RETURN(x.up, make_linear(ExpertMatrix(file, d.up, e)));
    HETERO_ASSIGN_OR_RETURN(x.down, make_linear(ExpertMatrix(file, d.down, e)));
  }
  if (d.has_shared()) {
    HETERO_ASSIGN_OR_RETURN(block->shared_gate_input_, LoadFloatTensor(file, d.shared_gate_input));
    HETERO_ASSIGN_OR_RETURN(block->shared_.gate, make_linear(*file.FindTensor(d.shared_gate)));
    HETERO_ASSIGN_OR_RETURN(block->shared_.up, make_linear(*file.FindTensor(d.shared_up)));
    HETERO_ASSIGN_OR_RETURN(block->shared_.down, make_linear(*file.FindTensor(d.shared_down)));
  }
  block->usage_ = std::make_unique<std::atomic<uint64_t>[]>(d.count);
  block->rows_of_.resize(d.count);
  return block;
}

std::vector<const Linear*> CpuExperts::matrices() const {
  std::vector<const Linear*> out;
  for (const Expert* x = experts_.data(); x != experts_.data() + experts_.size(); ++x) {
    if (x->gate == nullptr) continue;
    out.insert(out.end(), {x->gate.get(), x->up.get(), x->down.get()});
  }
  if (shared_.gate != nullptr) out.insert(out.end(), {shared_.gate.get(), shared_.up.get(), shared_.down.get()});
  return out;
}

void CpuExperts::Route(const float* h, int rows) {
  const int n = def_.count, k = def_.used, E = n_embd_;
  logits_.resize(static_cast<size_t>(rows) * n);
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int r) {
    for (int e = 0; e < n; ++e) {
      logits_[static_cast<size_t>(r) * n + e] =
          RouterDot(h + static_cast<size_t>(r) * E, router_.data() + static_cast<size_t>(e) * E, E);
    }
  });
  choices_.resize(static_cast<size_t>(rows) * k);
  weights_.resize(static_cast<size_t>(rows) * k);
  slots_.resize(static_cast<size_t>(rows) * k);
  probs_.resize(n);
  for (std::vector<int>& r : rows_of_) r.clear();
  std::vector<int>& order = order_;
  order.resize(n);
  for (int r = 0; r < rows; ++r) {
    const float* logit = logits_.data() + static_cast<size_t>(r) * n;
    const float top = *std::max_element(logit, logit + n);
    double sum = 0;
    for (int e = 0; e < n; ++e) sum += probs_[e] = std::exp(logit[e] - top);
    for (int e = 0; e < n; ++e) probs_[e] = static_cast<float>(probs_[e] / sum);
    // The k most probable; equal probabilities go to the lower expert id.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b); });
    std::sort(order.begin(), order.begin() + k);
    double chosen = 0;
    for (int i = 0; i < k; ++i) chosen += probs_[order[i]];
    for (int i = 0; i < k; ++i) {
      const int e = order[i];
      choices_[static_cast<size_t>(r) * k + i] = e;
      weights_[static_cast<size_t>(r) * k + i] =
          def_.normalize_weights ? static_cast<float>(probs_[e] / chosen) : probs_[e];
      rows_of_[e].push_back(r);
    }
  }
  for (int e = 0; e < n; ++e) {
    if (!rows_of_[e].empty()) usage_[e].fetch_add(rows_of_[e].size(), std::memory_order_relaxed);
  }
}

std::vector<uint64_t> CpuExperts::usage() const {
  std::vector<uint64_t> out(def_.count);
  for (int e = 0; e < def_.count; ++e) out[e] = usage_[e].load(std::memory_order_relaxed);
  return out;
}

absl::Status CpuExperts::Forward(const float* h, int rows, float* out, LinearScratch& scratch) {
  Route(h, rows);
  HETERO_RETURN_IF_ERROR(RoutedSum(h, rows, out, scratch));
  return AddShared(h, rows, out, scratch);
}

absl::Status CpuExperts::ForwardChosen(const float* h, int rows, const int32_t* choices, const float* weights,
                                       const std::vector<bool>& here, float* out, LinearScratch& scratch) {
  const int n = def_.count, k = def_.used;
  if (here.size() != static_cast<size_t>(n)) return absl::InvalidArgumentError("ForwardChosen: mask size");
  choices_.assign(choices, choices + static_cast<size_t>(rows) * k);
  weights_.assign(weights, weights + static_cast<size_t>(rows) * k);
  for (std::vector<int>& r : rows_of_) r.clear();
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < k; ++i) {
      const int e = choices_[static_cast<size_t>(r) * k + i];
      if (e < 0 || e >= n) return absl::InvalidArgumentError(absl::StrCat("ForwardChosen: expert id ", e, " of ", n));
      if (!here[e]) continue;
      if (experts_[e].gate == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("ForwardChosen: expert ", e, " was not loaded here"));
      }
      rows_of_[e].push_back(r);
    }
  }
  return RoutedSum(h, rows, out, scratch);
}

absl::Status CpuExperts::RoutedSum(const float* h, int rows, float* out, LinearScratch& scratch) {
  const int E = n_embd_, F = def_.n_ff, k = def_.used;
  // Stack each chosen expert's rows (in expert order) and give every choice its slot there.
  const size_t total = static_cast<size_t>(rows) * k;
  gathered_.resize(total * E);
  gate_.resize(total * F);
  up_.resize(total * F);
  down_.resize(total * E);
  std::vector<LinearProduct>& gate_up = gate_up_;
  std::vector<LinearProduct>& down = down_products_;
  gate_up.clear();
  down.clear();
  std::vector<int>& first_slot = first_slot_;
  first_slot.assign(def_.count, 0);
  int slot = 0;
  for (int e = 0; e < def_.count; ++e) {
    const std::vector<int>& mine = rows_of_[e];
    if (mine.empty()) continue;
    first_slot[e] = slot;
    const int m = static_cast<int>(mine.size());
    // Every row chose it (decode's single token, for one): its input is h itself.
    const float* x = h;
    if (m != rows) {
      x = gathered_.data() + static_cast<size_t>(slot) * E;
      for (int i = 0; i < m; ++i) {
        std::copy_n(h + static_cast<size_t>(mine[i]) * E, E, gathered_.data() + static_cast<size_t>(slot + i) * E);
      }
    }
    float* g = gate_.data() + static_cast<size_t>(slot) * F;
    gate_up.push_back({experts_[e].gate.get(), x, m, g});
    gate_up.push_back({experts_[e].up.get(), x, m, up_.data() + static_cast<size_t>(slot) * F});
    down.push_back({experts_[e].down.get(), g, m, down_.data() + static_cast<size_t>(slot) * E});
    slot += m;
  }
  HETERO_RETURN_IF_ERROR(ForwardEach(gate_up, scratch));
  Activate(activation_, gate_.data(), up_.data(), total * F);
  HETERO_RETURN_IF_ERROR(ForwardEach(down, scratch));
  // Each row's sum over its experts, in expert order.
  std::vector<int>& next = next_;
  next.assign(def_.count, 0);
  for (int r = 0; r < rows; ++r) {
    float* y = out + static_cast<size_t>(r) * E;
    std::fill_n(y, E, 0.0f);
    for (int i = 0; i < k; ++i) {
      const int e = choices_[static_cast<size_t>(r) * k + i];
      if (next[e] >= static_cast<int>(rows_of_[e].size())) continue;  // not evaluated here (ForwardChosen)
      const float* part = down_.data() + static_cast<size_t>(first_slot[e] + next[e]++) * E;
      AddScaledInPlace(y, part, weights_[static_cast<size_t>(r) * k + i], E);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuExperts::AddShared(const float* h, int rows, float* out, LinearScratch& scratch) {
  const int E = n_embd_;
  if (shared_.gate == nullptr) return absl::OkStatus();
  const int S = def_.shared_n_ff;
  shared_gate_.resize(static_cast<size_t>(rows) * S);
  shared_up_.resize(static_cast<size_t>(rows) * S);
  shared_down_.resize(static_cast<size_t>(rows) * E);
  {
    const Linear* gate_up_shared[] = {shared_.gate.get(), shared_.up.get()};
    float* outs[] = {shared_gate_.data(), shared_up_.data()};
    HETERO_RETURN_IF_ERROR(ForwardSameInput(gate_up_shared, h, rows, outs, scratch));
  }
  Activate(activation_, shared_gate_.data(), shared_up_.data(), static_cast<size_t>(rows) * S);
  HETERO_RETURN_IF_ERROR(shared_.down->Forward(shared_gate_.data(), rows, shared_down_.data(), scratch));
  for (int r = 0; r < rows; ++r) {
    const float* x = h + static_cast<size_t>(r) * E;
    double dot = 0;
    for (int i = 0; i < E; ++i) dot += static_cast<double>(x[i]) * shared_gate_input_[i];
    const float share = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
    AddScaledInPlace(out + static_cast<size_t>(r) * E, shared_down_.data() + static_cast<size_t>(r) * E, share, E);
  }
  return absl::OkStatus();
}

}  // namespace hetero
