// Cost of schema-constrained decoding per generated token, on the default model's
// vocabulary (49,152 tokens), replaying the tokens of a real generic-format tool call:
//   Lazy:      what the device worker pays when the model's own token is allowed (the
//              common case): copy of the logits, SetBudget, Allows, Accept;
//   FullMask:  the worst case, a full vocabulary mask at every step with an empty mask
//              cache (a fresh constraint per replay), as if every sampled token were refused;
//   *NearBudgetEnd: the same with every token within the last 64 of the budget, where
//              tokens are also checked for room to complete the call after them.
// Compare with a decode step of the same model (backend_benchmark, BM_DecodeStep/1), and
// with the share measured in real runs (hetero-agent prints it). docs/PERFORMANCE.md.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "hetero/tools.h"
#include "src/runtime/tools/tool_call_constraint.h"

namespace hetero::internal {
namespace {

constexpr char kDefaultModelPath[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Two tools like the example calculator and unit converter.
constexpr char kCalculatorSchema[] =
    R"({"type": "object", "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 64}},
        "required": ["expression"]})";
constexpr char kConvertSchema[] =
    R"({"type": "object", "properties": {"value": {"type": "number"},
        "from": {"type": "string", "enum": ["km", "mi", "m", "ft", "kg", "lb", "c", "f"]},
        "to": {"type": "string", "enum": ["km", "mi", "m", "ft", "kg", "lb", "c", "f"]}},
        "required": ["value", "from", "to"]})";
constexpr char kReply[] =
    R"({"tool_calls": [{"name": "calculator", "arguments": {"expression": "12.5 * 8 - 3"}},)"
    R"( {"name": "convert_units", "arguments": {"value": 42.195, "from": "km", "to": "mi"}}]})";

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<VocabBytes> vocab;
  ToolRegistry tools;
  std::shared_ptr<const Grammar> grammar;
  std::vector<int32_t> reply_tokens;
};

const Fixture* GetFixture() {
  static const Fixture* fixture = []() -> const Fixture* {
    if (!std::filesystem::exists(kDefaultModelPath)) return nullptr;
    auto f = std::make_unique<Fixture>();
    auto model = Model::Load(kDefaultModelPath);
    if (!model.ok()) return nullptr;
    f->model = std::move(*model);
    auto tokenizer = Tokenizer::Create(*f->model);
    if (!tokenizer.ok()) return nullptr;
    f->tokenizer = std::move(*tokenizer);
    f->vocab = std::make_shared<VocabBytes>(*f->tokenizer);
    auto handler = [](const std::string& a) -> absl::StatusOr<std::string> { return a; };
    if (!f->tools.Register({"calculator", "Evaluates arithmetic.", kCalculatorSchema, handler}).ok()) return nullptr;
    if (!f->tools.Register({"convert_units", "Converts units.", kConvertSchema, handler}).ok()) return nullptr;
    f->grammar = Grammar::GenericReply({"calculator", "convert_units"},
                                       {&f->tools.schema(0).root(), &f->tools.schema(1).root()});
    auto tokens = f->tokenizer->Encode(kReply, /*add_bos=*/false, /*parse_special=*/false);
    if (!tokens.ok()) return nullptr;
    f->reply_tokens = std::move(*tokens);
    return f.release();
  }();
  return fixture;
}

// Replays the reply's tokens through a fresh constraint per iteration. `mask_every_step`:
// build the full mask at each step (the worst case) instead of only checking the token;
// `near_budget_end`: the whole replay falls within the budget's last tokens.
void ReplayReply(benchmark::State& state, bool mask_every_step, bool near_budget_end) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("default model not present (run bash scripts/setup.sh --model)");
  std::vector<float> logits(f->tokenizer->vocab_size(), 0.5f), copy;
  const int first_budget = near_budget_end ? static_cast<int>(f->reply_tokens.size()) + 8 : 256;
  for (auto _ : state) {
    ToolCallConstraint constraint(f->vocab, f->grammar, ToolCallFormat::kGeneric);
    int remaining = first_budget;
    for (int32_t token : f->reply_tokens) {
      constraint.SetBudget(remaining--);
      if (mask_every_step) {
        std::fill(logits.begin(), logits.end(), 0.5f);
        if (!constraint.Mask(absl::MakeSpan(logits))) return state.SkipWithError("no token allowed");
      } else {
        copy.assign(logits.begin(), logits.end());  // the worker keeps the unmasked logits
      }
      if (!constraint.Allows(token)) return state.SkipWithError("the replayed reply left the grammar");
      constraint.Accept(token);
    }
    benchmark::DoNotOptimize(logits.data());
    benchmark::DoNotOptimize(copy.data());
  }
  // items_per_second is tokens per second: its inverse is the cost per token.
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f->reply_tokens.size()));
  state.counters["tokens"] = static_cast<double>(f->reply_tokens.size());
}

void BM_ConstraintLazy(benchmark::State& state) { ReplayReply(state, false, false); }
void BM_ConstraintLazyNearBudgetEnd(benchmark::State& state) { ReplayReply(state, false, true); }
void BM_ConstraintFullMaskEveryStep(benchmark::State& state) { ReplayReply(state, true, false); }
void BM_ConstraintFullMaskNearBudgetEnd(benchmark::State& state) { ReplayReply(state, true, true); }
BENCHMARK(BM_ConstraintLazy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ConstraintLazyNearBudgetEnd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ConstraintFullMaskEveryStep)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ConstraintFullMaskNearBudgetEnd)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace hetero::internal
