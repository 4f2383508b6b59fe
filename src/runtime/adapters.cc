// LoRA adapters at the engine's level: Engine::LoadAdapter, Session::SetAdapter (the
// adapter itself: src/runtime/lora.h; applying it: each backend's matrix products).
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "hetero/engine.h"
#include "src/runtime/engine_impl.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::StatusOr<SequenceAdapter> Engine::Impl::FindAdapter(const std::string& name, float scale) const {
  if (!std::isfinite(scale)) return absl::InvalidArgumentError(absl::StrCat("adapter scale ", scale, " is not finite"));
  SequenceAdapter adapter;
  if (name.empty()) return adapter;
  MutexLock lock(&mu);
  auto it = adapters.find(name);
  if (it == adapters.end()) {
    std::string loaded;
    for (const auto& [n, a] : adapters) absl::StrAppend(&loaded, loaded.empty() ? "" : ", ", "'", n, "'");
    return absl::NotFoundError(absl::StrCat("no LoRA adapter named '", name, "' is loaded (",
                                            loaded.empty() ? "none is" : absl::StrCat("loaded: ", loaded), ")"));
  }
  adapter.adapter = it->second;
  adapter.scale = scale;
  return adapter;
}

absl::Status Engine::LoadAdapter(const std::string& name, const std::string& path) {
  if (name.empty()) return absl::InvalidArgumentError("LoadAdapter: the adapter's name is empty");
  {
    MutexLock lock(&impl_->mu);
    if (impl_->adapters.contains(name)) {
      return absl::AlreadyExistsError(absl::StrCat("LoadAdapter: an adapter named '", name, "' is loaded already"));
    }
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("LoadAdapter: '", path, "' is a directory, not an adapter file"));
  }
  HETERO_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> adapter, LoadLoraAdapter(path, *impl_->model));
  MutexLock lock(&impl_->mu);
  if (!impl_->adapters.emplace(name, std::move(adapter)).second) {
    return absl::AlreadyExistsError(absl::StrCat("LoadAdapter: an adapter named '", name, "' is loaded already"));
  }
  return absl::OkStatus();
}

std::vector<std::string> Engine::adapters() const {
  MutexLock lock(&impl_->mu);
  std::vector<std::string> names;
  for (const auto& [name, adapter] : impl_->adapters) names.push_back(name);
  return names;
}

absl::Status Session::SetAdapter(const std::string& name, float scale) {
  State& s = *state_;
  HETERO_ASSIGN_OR_RETURN(SequenceAdapter adapter, s.engine->FindAdapter(name, scale));
  MutexLock lock(&s.mu);
  if (s.running) return absl::FailedPreconditionError("SetAdapter: a Run is in progress on this session");
  if (s.kv.adapter_name == name && (name.empty() || s.kv.adapter.scale == scale)) return absl::OkStatus();
  ReleaseSessionKv(*s.engine->devices, s.kv);  // computed with the previous adapter
  s.kv.adapter_name = name;
  s.kv.adapter = std::move(adapter);
  return absl::OkStatus();
}

std::pair<std::string, float> Session::adapter() const {
  State& s = *state_;
  MutexLock lock(&s.mu);
  return {s.kv.adapter_name, s.kv.adapter.active() ? s.kv.adapter.scale : 1.0f};
}

}  // namespace hetero
