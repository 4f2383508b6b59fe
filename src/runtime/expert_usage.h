// Expert-usage statistics (include/hetero/scheduler.h's ExpertUsage) as the engine keeps
// them: checked against the model, read from and written to files, and given to the
// expert placement.
#ifndef HETERO_RUNTIME_EXPERT_USAGE_H_
#define HETERO_RUNTIME_EXPERT_USAGE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/scheduler.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

// OK when every layer `usage` names is a mixture-of-experts layer of `model` with as many
// routed experts; otherwise InvalidArgument naming the first that is not (`what` opens it).
absl::Status CheckExpertUsageFitsModel(const ExpertUsage& usage, const ModelDefinition& model, std::string_view what);
// The file Engine::SaveExpertUsage wrote (at most 16 MiB); NotFound when it does not exist.
absl::StatusOr<ExpertUsage> ReadExpertUsageFile(const std::string& path);
// Written whole or not at all (a temporary file renamed over `path`).
absl::Status WriteExpertUsageFile(const ExpertUsage& usage, const std::string& path);
// Each facts layer's usage from the usage entry of the same layer index (left empty,
// uniform, where `usage` has none or every count is zero).
void FillExpertLayerUsage(const ExpertUsage& usage, std::vector<ExpertLayerFacts>& layers);

}  // namespace hetero

#endif  // HETERO_RUNTIME_EXPERT_USAGE_H_
