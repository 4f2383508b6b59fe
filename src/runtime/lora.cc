#include "src/runtime/lora.h"

#include <atomic>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hetero/model.h"
#include "src/runtime/backend.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

constexpr absl::string_view kSuffixA = ".lora_a";
constexpr absl::string_view kSuffixB = ".lora_b";

// Where a base tensor is used: a matrix slot of a layer (or the output) and its rows.
struct Use {
  LoraMatrix* matrix;
  TensorSlice slice;
};

struct Pair {
  const GgufTensorInfo* a = nullptr;
  const GgufTensorInfo* b = nullptr;
};

std::string Dims(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&s, i ? ", " : "", dims[i]);
  return s + "]";
}

std::atomic<uint64_t> next_adapter_id{1};

}  // namespace

uint64_t SequenceAdapter::kv_domain() const {
  if (adapter == nullptr) return 0;
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  return adapter->id << 32 | scale_bits | uint64_t{1} << 63;
}

absl::StatusOr<std::shared_ptr<const LoraAdapter>> ReadLoraAdapter(const GgufFile& file, const Model& model) {
  const std::string& source = file.source_name();
  const auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter ", source, ": ", what));
  };
  const auto string_key = [&](absl::string_view key) -> absl::StatusOr<std::string> {
    if (file.FindValue(key) == nullptr) return invalid(absl::StrCat("no '", key, "' key (not a LoRA adapter file?)"));
    HETERO_ASSIGN_OR_RETURN(absl::string_view value, file.GetString(key));
    return std::string(value);
  };
  HETERO_ASSIGN_OR_RETURN(const std::string general_type, string_key("general.type"));
  if (general_type != "adapter") {
    return invalid(absl::StrCat("general.type is '", PrintableName(general_type), "', not 'adapter' (a model file?)"));
  }
  HETERO_ASSIGN_OR_RETURN(const std::string adapter_type, string_key("adapter.type"));
  if (adapter_type != "lora") {
    return invalid(absl::StrCat("adapter.type is '", PrintableName(adapter_type), "'; only 'lora' is supported"));
  }
  const ModelConfig& config = model.config();
  HETERO_ASSIGN_OR_RETURN(const std::string architecture, string_key("general.architecture"));
  if (architecture != config.architecture) {
    return invalid(absl::StrCat("it adapts a '", PrintableName(architecture), "' model; this model is '",
                                config.architecture, "'"));
  }
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->id = next_adapter_id.fetch_add(1);
  adapter->path = source;
  if (file.FindValue("adapter.lora.alpha") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(const double alpha, file.GetDouble("adapter.lora.alpha"));
    if (!(alpha >= 0.0 && alpha < 1e6)) return invalid(absl::StrCat("adapter.lora.alpha is ", alpha));
    adapter->alpha = static_cast<float>(alpha);
  }

  // The definition's matrices by tensor name.
  const ModelDefinition& d = model.impl().definition;
  adapter->layers.resize(d.layers.size());
  std::map<std::string, std::vector<Use>> uses;
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const LayerDefinition& l = d.layers[i];
    LoraLayer& a = adapter->layers[i];
    const std::pair<const TensorSlice*, LoraMatrix*> slots[] = {{&l.q, &a.q},       {&l.k, &a.k},   {&l.v, &a.v},
                                                                {&l.o, &a.o},       {&l.gate, &a.gate},
                                                                {&l.up, &a.up},     {&l.down, &a.down}};
    for (const auto& [slice, matrix] : slots) {
      if (slice->present()) uses[slice->tensor].push_back({matrix, *slice});
    }
  }
  if (d.output != d.token_embd) uses[d.output].push_back({&adapter->output, TensorSlice{d.output}});

  // Pair every lora_a with its lora_b.
  std::map<std::string, Pair> pairs;
  for (const GgufTensorInfo& t : file.tensors()) {
    const absl::string_view name = t.name;
    if (absl::EndsWith(name, kSuffixA)) {
      pairs[std::string(name.substr(0, name.size() - kSuffixA.size()))].a = &t;
    } else if (absl::EndsWith(name, kSuffixB)) {
      pairs[std::string(name.substr(0, name.size() - kSuffixB.size()))].b = &t;
    } else {
      return absl::UnimplementedError(absl::StrCat("LoRA adapter ", source, ": tensor '", PrintableName(name),
                                                   "' is not a lora_a/lora_b matrix (adapting norms or other "
                                                   "vectors is not supported)"));
    }
  }
  if (pairs.empty()) return invalid("it has no lora_a/lora_b tensors");

  const GgufFile& base = *model.impl().gguf;
  for (const auto& [name, pair] : pairs) {
    const std::string printable = PrintableName(name);
    if (pair.a == nullptr || pair.b == nullptr) {
      return invalid(absl::StrCat("'", printable, "' has ", pair.a ? "lora_a but no lora_b" : "lora_b but no lora_a"));
    }
    const GgufTensorInfo* w = base.FindTensor(name);
    if (w == nullptr) return invalid(absl::StrCat("it adapts '", printable, "', which the model does not have"));
    auto it = uses.find(name);
    if (it == uses.end()) {
      return absl::UnimplementedError(absl::StrCat("LoRA adapter ", source, ": adapting '", printable,
                                                   "' is not supported (only the attention and dense FFN matrices "
                                                   "and a separate output matrix are)"));
    }
    const int64_t inputs = w->dims[0], outputs = w->dims.size() > 1 ? w->dims[1] : 1;
    const std::vector<int64_t>& da = pair.a->dims;
    const std::vector<int64_t>& db = pair.b->dims;
    if (da.size() != 2 || db.size() != 2 || da[0] != inputs || db[1] != outputs || da[1] != db[0] || da[1] < 1) {
      return invalid(absl::StrCat("'", printable, "': lora_a is ", Dims(da), " and lora_b ", Dims(db), "; for ",
                                  printable, " ", Dims(w->dims), " they must be [", inputs, ", rank] and [rank, ",
                                  outputs, "]"));
    }
    const int rank = static_cast<int>(da[1]);
    std::vector<float> a(static_cast<size_t>(rank) * inputs), b(static_cast<size_t>(outputs) * rank);
    HETERO_RETURN_IF_ERROR(DequantizeTensor(*pair.a, absl::MakeSpan(a)));
    HETERO_RETURN_IF_ERROR(DequantizeTensor(*pair.b, absl::MakeSpan(b)));
    for (const Use& use : it->second) {
      LoraMatrix& m = *use.matrix;
      const int64_t row_begin = use.slice.row_begin;
      const int64_t rows = use.slice.rows > 0 ? use.slice.rows : outputs;
      m.rank = rank;
      m.inputs = static_cast<int>(inputs);
      m.outputs = static_cast<int>(rows);
      m.alpha_over_rank = adapter->alpha > 0 ? adapter->alpha / static_cast<float>(rank) : 1.0f;
      m.a = a;
      m.b_t.resize(static_cast<size_t>(rank) * rows);
      for (int j = 0; j < rank; ++j) {
        for (int64_t o = 0; o < rows; ++o) m.b_t[j * rows + o] = b[(row_begin + o) * rank + j];
      }
      adapter->bytes += (m.a.size() + m.b_t.size()) * sizeof(float);
    }
    ++adapter->adapted_matrices;
  }
  return std::shared_ptr<const LoraAdapter>(std::move(adapter));
}

absl::StatusOr<std::shared_ptr<const LoraAdapter>> LoadLoraAdapter(const std::string& path, const Model& model) {
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return ReadLoraAdapter(*file, model);
}

}  // namespace hetero
