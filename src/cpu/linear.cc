#include "src/cpu/linear.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

absl::Status DnnlError(const dnnl::error& e, absl::string_view what) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what(), " (status ", static_cast<int>(e.status), ")"));
}

// y = x W^T with W given as {k, n} in layout `weights_md`; m is a run-time dimension.
dnnl::matmul::primitive_desc MatmulDesc(const dnnl::engine& engine, int n, int k, Type src_type, const memory::desc& weights_md) {
  const memory::desc src_md({DNNL_RUNTIME_DIM_VAL, k}, src_type, Tag::ab);
  const memory::desc dst_md({DNNL_RUNTIME_DIM_VAL, n}, Type::f32, Tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, weights_md, dst_md), engine);
}

void ToBf16(const float* x, size_t count, uint16_t* out) {
  for (size_t i = 0; i < count; ++i) out[i] = Fp32ToBf16(x[i]);
}

// Runs `primitive` on x (m x k, f32 or converted to bf16) into y (m x n f32).
absl::Status RunMatmul(const LinearContext& ctx, const dnnl::matmul& primitive, const memory& weights, bool bf16_src,
                       const float* x, int m, int n, int k, float* y, LinearScratch& scratch) {
  try {
    void* src_handle = const_cast<float*>(x);
    if (bf16_src) {
      scratch.src_bf16.resize(static_cast<size_t>(m) * k);
      ToBf16(x, static_cast<size_t>(m) * k, scratch.src_bf16.data());
      src_handle = scratch.src_bf16.data();
    }
    memory src({{m, k}, bf16_src ? Type::bf16 : Type::f32, Tag::ab}, ctx.engine, src_handle);
    memory dst({{m, n}, Type::f32, Tag::ab}, ctx.engine, y);
    primitive.execute(ctx.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    ctx.stream.wait();
  } catch (const dnnl::error& e) {
    return DnnlError(e, "matmul");
  }
  return absl::OkStatus();
}

class OneDnnLinear : public Linear {
 public:
  OneDnnLinear(const LinearContext& ctx, int n, int k, MatmulPrecision precision, dnnl::matmul primitive, memory weights)
      : Linear(n, k), ctx_(ctx), precision_(precision), primitive_(std::move(primitive)), weights_(std::move(weights)) {}

  absl::Status Forward(const float* x, int m, float* y, LinearScratch& scratch) const override {
    return RunMatmul(ctx_, primitive_, weights_, precision_ == MatmulPrecision::kBf16, x, m, n_, k_, y, scratch);
  }
  size_t resident_bytes() const override { return weights_.get_desc().get_size(); }
  std::string Describe() const override {
    return absl::StrCat(precision_ == MatmulPrecision::kBf16 ? "bf16" : "f32", " oneDNN");
  }

 private:
  const LinearContext& ctx_;
  MatmulPrecision precision_;
  dnnl::matmul primitive_;
  memory weights_;
};

// Generated tokens' steps quantize with remainders where the backend asks (VNNI kernels,
// CpuPrecision::kAuto; quant_matmul.h): the integer work doubles on the same weight reads,
// and greedy decoding follows the model, not the rounding.
void QuantizeInput(const float* x, int m, int k, const LinearScratch& scratch, QuantizedActivations& a) {
  if (scratch.remainders) {
    a.QuantizeWithRemainder(x, m, k, k);
  } else {
    a.Quantize(x, m, k, k);
  }
}

// Whether QuantLinear's kernels read the file's blocks of the packed rows too: the bf16
// prompt path dequantizes them. (Where nothing is packed, packed_rows is 0 and every row
// is read from the file.)
bool ReadsPackedRowsFromSource(int bf16_min_rows) { return bf16_min_rows != kNeverBf16; }

class QuantLinear : public Linear {
 public:
  QuantLinear(const LinearContext& ctx, QuantizedWeights weights, int bf16_min_rows, dnnl::matmul bf16_primitive)
      : Linear(weights.n, weights.k),
        ctx_(ctx),
        weights_(std::move(weights)),
        bf16_min_rows_(bf16_min_rows),
        bf16_primitive_(std::move(bf16_primitive)) {}

  absl::Status Forward(const float* x, int m, float* y, LinearScratch& scratch) const override {
    if (m < bf16_min_rows_ || scratch.decode) {
      QuantizeInput(x, m, k_, scratch, scratch.activations);
      QuantMatmul(weights_, scratch.activations, y, n_);
      return absl::OkStatus();
    }
    // Compute bound: bf16 GEMM on a transient bf16 copy of this one matrix. The rows of a
    // GGUF matrix are exactly oneDNN's {k, n} "ba" layout.
    const size_t count = static_cast<size_t>(n_) * k_;
    scratch.weights_bf16.resize(count);
    // Each thread converts its own share of the rows.
    ParallelForRanges(static_cast<size_t>(n_), [&](size_t begin, size_t end) {
      DequantizeRowsToBf16(weights_, static_cast<int>(begin), static_cast<int>(end),
                           scratch.weights_bf16.data() + begin * k_);
    });
    try {
      memory weights({{k_, n_}, Type::bf16, Tag::ba}, ctx_.engine, scratch.weights_bf16.data());
      return RunMatmul(ctx_, bf16_primitive_, weights, /*bf16_src=*/true, x, m, n_, k_, y, scratch);
    } catch (const dnnl::error& e) {
      return DnnlError(e, "memory");
    }
  }
  size_t resident_bytes() const override {
    return weights_.offsets.size() * sizeof(float) + weights_.packed.size() * sizeof(CacheLine);
  }
  bool reads_source_weights() const override {
    return ReadsPackedRowsFromSource(bf16_min_rows_) || weights_.packed_rows < n_;
  }
  const QuantizedWeights* IntegerPath(int m, const LinearScratch& scratch) const override {
    return m < bf16_min_rows_ || scratch.decode ? &weights_ : nullptr;
  }
  std::string Describe() const override {
    const std::string layout = weights_.packed.empty() ? "" : " packed";
    if (bf16_min_rows_ == kNeverBf16) return absl::StrCat("native ", TensorTypeName(weights_.type), layout);
    return absl::StrCat("native ", TensorTypeName(weights_.type), layout, " (bf16 oneDNN from ", bf16_min_rows_, " rows)");
  }

 private:
  const LinearContext& ctx_;
  QuantizedWeights weights_;
  int bf16_min_rows_;
  dnnl::matmul bf16_primitive_;
};

absl::StatusOr<std::pair<int, int>> MatrixShape(const GgufTensorInfo& tensor) {
  if (tensor.dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", PrintableName(tensor.name), "' is not a matrix"));
  }
  return std::make_pair(static_cast<int>(tensor.dims[1]), static_cast<int>(tensor.dims[0]));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> MakeOneDnnLinear(const LinearContext& ctx, const GgufTensorInfo& tensor,
                                                         MatmulPrecision precision) {
  HETERO_ASSIGN_OR_RETURN(auto shape, MatrixShape(tensor));
  const auto [n, k] = shape;
  std::vector<float> values(static_cast<size_t>(n) * k);
  HETERO_RETURN_IF_ERROR(DequantizeTensor(tensor, absl::MakeSpan(values)));
  const bool bf16 = precision == MatmulPrecision::kBf16;
  try {
    const Type type = bf16 ? Type::bf16 : Type::f32;
    auto pd = MatmulDesc(ctx.engine, n, k, type, memory::desc({k, n}, type, Tag::any));
    std::vector<uint16_t> values_bf16;
    void* plain_handle = values.data();
    if (bf16) {
      values_bf16.resize(values.size());
      ToBf16(values.data(), values.size(), values_bf16.data());
      plain_handle = values_bf16.data();
    }
    memory plain({{k, n}, type, Tag::ba}, ctx.engine, plain_handle);
    memory weights(pd.weights_desc(), ctx.engine);
    dnnl::stream stream(ctx.engine);
    dnnl::reorder(plain, weights).execute(stream, plain, weights);
    stream.wait();
    return std::unique_ptr<Linear>(new OneDnnLinear(ctx, n, k, precision, dnnl::matmul(pd), std::move(weights)));
  } catch (const dnnl::error& e) {
    return DnnlError(e, absl::StrCat("preparing '", PrintableName(tensor.name), "'"));
  }
}

absl::StatusOr<std::unique_ptr<Linear>> MakeQuantLinear(const LinearContext& ctx, const GgufTensorInfo& tensor,
                                                        int bf16_min_rows,
                                                        const QuantizedWeights::PackedSourceFn& release_source) {
  if (!QuantizedWeights::Supports(tensor.type)) {
    return absl::InvalidArgumentError(absl::StrCat("no native kernel for ", TensorTypeName(tensor.type)));
  }
  HETERO_ASSIGN_OR_RETURN(auto shape, MatrixShape(tensor));
  const auto [n, k] = shape;
  try {
    // Only built when used: CPUs without AVX-512 have no bf16 matmul in oneDNN.
    dnnl::matmul bf16_primitive;
    if (bf16_min_rows != kNeverBf16) {
      bf16_primitive = dnnl::matmul(MatmulDesc(ctx.engine, n, k, Type::bf16, memory::desc({k, n}, Type::bf16, Tag::ba)));
    }
    // Packing reports the source rows it copied only where no kernel reads them again.
    const QuantizedWeights::PackedSourceFn none;
    const QuantizedWeights::PackedSourceFn& while_packing = ReadsPackedRowsFromSource(bf16_min_rows) ? none : release_source;
    auto linear = std::unique_ptr<Linear>(new QuantLinear(
        ctx, QuantizedWeights::FromBlocks(tensor.type, n, k, tensor.data.data(), while_packing), bf16_min_rows,
        std::move(bf16_primitive)));
    if (release_source && !linear->reads_source_weights()) release_source(tensor.data.data(), tensor.data.size());
    return linear;
  } catch (const dnnl::error& e) {
    return DnnlError(e, absl::StrCat("preparing '", PrintableName(tensor.name), "'"));
  }
}

absl::Status ForwardSameInput(absl::Span<const Linear* const> linears, const float* x, int m,
                              absl::Span<float* const> ys, LinearScratch& scratch) {
  absl::InlinedVector<QuantMatmulTask, 8> tasks;
  bool fused = !linears.empty() && linears.size() == ys.size();
  for (size_t i = 0; fused && i < linears.size(); ++i) {
    const QuantizedWeights* w = linears[i]->IntegerPath(m, scratch);
    fused = w != nullptr && linears[i]->k() == linears[0]->k();
    if (fused) tasks.push_back({w, ys[i], linears[i]->n()});
  }
  if (!fused) {
    for (size_t i = 0; i < linears.size(); ++i) HETERO_RETURN_IF_ERROR(linears[i]->Forward(x, m, ys[i], scratch));
    return absl::OkStatus();
  }
  const int k = linears[0]->k();
  QuantizeInput(x, m, k, scratch, scratch.activations);
  QuantMatmulMany(tasks, scratch.activations);
  return absl::OkStatus();
}

absl::Status ForwardEach(absl::Span<const LinearProduct> products, LinearScratch& scratch) {
  absl::InlinedVector<QuantMatmulTask, 16> tasks;
  bool fused = true;
  for (const LinearProduct& p : products) {
    const QuantizedWeights* w = p.linear->IntegerPath(p.m, scratch);
    if (w == nullptr) {
      fused = false;
      break;
    }
    tasks.push_back({w, p.y, p.linear->n()});
  }
  if (!fused) {
    for (const LinearProduct& p : products) HETERO_RETURN_IF_ERROR(p.linear->Forward(p.x, p.m, p.y, scratch));
    return absl::OkStatus();
  }
  // One quantized copy per distinct input (an expert's gate and up share theirs).
  absl::InlinedVector<size_t, 16> input_of(products.size());
  size_t inputs = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    const LinearProduct& p = products[i];
    size_t same = 0;
    while (same < i && !(products[same].x == p.x && products[same].m == p.m && products[same].linear->k() == p.linear->k())) {
      ++same;
    }
    if (same < i) {
      input_of[i] = input_of[same];
      continue;
    }
    if (scratch.inputs.size() <= inputs) scratch.inputs.resize(inputs + 1);
    QuantizeInput(p.x, p.m, p.linear->k(), scratch, scratch.inputs[inputs]);
    input_of[i] = inputs++;
  }
  for (size_t i = 0; i < products.size(); ++i) tasks[i].activations = &scratch.inputs[input_of[i]];
  bool uneven = false;
  for (const LinearProduct& p : products) uneven = uneven || p.m != products.front().m;
  QuantMatmulMany(tasks, scratch.activations, /*dynamic=*/uneven);
  return absl::OkStatus();
}

}  // namespace hetero
