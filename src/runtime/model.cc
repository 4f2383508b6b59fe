#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hetero/model.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/model_config.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::StatusOr<std::string> ResolveModelPath(const std::string& explicit_path) {
  std::string path;
  std::string origin;
  if (!explicit_path.empty()) {
    path = explicit_path;
    origin = "the given path";
  } else if (const char* env = std::getenv("HETERO_MODEL"); env != nullptr && *env != '\0') {
    path = env;
    origin = "$HETERO_MODEL";
  } else {
    path = kDefaultModelPath;
    origin = "the default model path";
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return path;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model path '", path, "' (", origin, ") is a directory; give the path of a .gguf file in it"));
  }
  if (std::filesystem::exists(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("model path '", path, "' (", origin, ") is not a regular file"));
  }
  std::string message = absl::StrCat("model file '", path, "' (", origin, ") not found");
  if (path == kDefaultModelPath) {
    absl::StrAppend(&message, "; fetch the default model with `bash scripts/setup.sh --model` "
                              "(or `make model`) from the repository root, or pass a GGUF path "
                              "or set HETERO_MODEL");
  }
  return absl::NotFoundError(message);
}

namespace {

// Model::decode_weight_bytes of a validated file.
uint64_t DecodeWeightBytes(const GgufFile& file, const ModelDefinition& definition,
                           const std::vector<std::string>& unused_tensors) {
  struct Share {
    int used, count;
  };
  absl::flat_hash_map<std::string, Share> routed;  // expert tensors: the chosen share
  for (const LayerDefinition& layer : definition.layers) {
    const ExpertsDefinition& e = layer.experts;
    if (!e.present() || e.count < 1) continue;
    for (const std::string* name : {&e.gate, &e.up, &e.down}) routed[*name] = Share{e.used, e.count};
  }
  const absl::flat_hash_set<std::string> unused(unused_tensors.begin(), unused_tensors.end());
  uint64_t bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    const std::string name(t.name);
    if (unused.contains(name)) continue;
    if (name == definition.token_embd && definition.output != definition.token_embd) {
      const int64_t rows = t.dims.size() > 1 ? t.dims[1] : 1;  // a lookup reads one row
      bytes += t.n_bytes / static_cast<uint64_t>(std::max<int64_t>(rows, 1));
    } else if (auto it = routed.find(name); it != routed.end()) {
      bytes += t.n_bytes / static_cast<uint64_t>(it->second.count) * static_cast<uint64_t>(it->second.used);
    } else {
      bytes += t.n_bytes;
    }
  }
  return bytes;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  HETERO_ASSIGN_OR_RETURN(impl->gguf, GgufFile::Open(path));
  HETERO_ASSIGN_OR_RETURN(ModelArchitecture architecture, ReadModelArchitecture(*impl->gguf));
  HETERO_ASSIGN_OR_RETURN(impl->unused_tensors, ValidateModelTensors(*impl->gguf, architecture));
  impl->config = std::move(architecture.config);
  impl->definition = std::move(architecture.definition);
  if (!impl->unused_tensors.empty()) {
    internal::Log(LogLevel::kWarning,
                  absl::StrCat("model '", path, "': ", impl->unused_tensors.size(),
                               " tensor(s) not used by the ", impl->config.architecture,
                               " architecture, e.g. '", PrintableName(impl->unused_tensors.front()), "'"));
  }
  impl->tensors.reserve(impl->gguf->tensors().size());
  for (const GgufTensorInfo& t : impl->gguf->tensors()) {
    impl->tensors.push_back(TensorSummary{std::string(t.name), TensorTypeName(t.type), t.dims,
                                          t.n_elements, t.n_bytes});
    impl->parameter_count += t.n_elements;
  }
  impl->decode_weight_bytes = DecodeWeightBytes(*impl->gguf, impl->definition, impl->unused_tensors);
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const std::string& Model::path() const { return impl_->gguf->source_name(); }
uint64_t Model::file_size() const { return impl_->gguf->file_size(); }
uint32_t Model::gguf_version() const { return impl_->gguf->version(); }
const std::vector<TensorSummary>& Model::tensors() const { return impl_->tensors; }
uint64_t Model::parameter_count() const { return impl_->parameter_count; }
uint64_t Model::decode_weight_bytes() const { return impl_->decode_weight_bytes; }
const std::vector<std::string>& Model::unused_tensors() const { return impl_->unused_tensors; }

}  // namespace hetero
