#include <cstdlib>
#include <filesystem>
#include <system_error>

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
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const std::string& Model::path() const { return impl_->gguf->source_name(); }
uint64_t Model::file_size() const { return impl_->gguf->file_size(); }
uint32_t Model::gguf_version() const { return impl_->gguf->version(); }
const std::vector<TensorSummary>& Model::tensors() const { return impl_->tensors; }
uint64_t Model::parameter_count() const { return impl_->parameter_count; }
const std::vector<std::string>& Model::unused_tensors() const { return impl_->unused_tensors; }

}  // namespace hetero
