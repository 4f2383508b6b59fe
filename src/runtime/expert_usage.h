// Expert-usage statistics (include/hetero/scheduler.h's ExpertUsage, whose file I/O is
// public) as the engine uses them: checked against the model, given to the placement.
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
// Each facts layer's usage from the usage entry of the same layer index (left empty,
// uniform, where `usage` has none or every count is zero).
void FillExpertLayerUsage(const ExpertUsage& usage, std::vector<ExpertLayerFacts>& layers);

}  // namespace hetero

#endif  // HETERO_RUNTIME_EXPERT_USAGE_H_
