#include "src/runtime/expert_usage.h"

#include <algorithm>
#include <string>
#include <vector>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/runtime/file_io.h"

namespace hetero {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxLayers = 65536;
constexpr size_t kMaxExperts = 65536;
// Real files are kilobytes (DeepSeek-V3's 58 layers of 256 experts: ~150 KB); the caps
// bound what a hostile file costs before it is refused.
constexpr uintmax_t kMaxFileBytes = 16u << 20;
constexpr size_t kMaxValues = size_t{1} << 21;
constexpr int kMaxDepth = 4;  // document, layers, a layer, its evaluations, a count

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("expert usage: ", what)); }

// Thrown from the parser's callback to stop at the first value past the document's shape.
struct Refused {
  std::string why;
};

// The document as parsed, refusing (by throwing Refused) nesting deeper than the format's,
// more values than kMaxValues, and a key repeated in one object, as they are read.
json ParseBounded(std::string_view text) {
  size_t values = 0;
  std::vector<std::vector<std::string>> keys;  // per open object, its keys so far
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxDepth) throw Refused{absl::StrCat("nested deeper than ", kMaxDepth, " levels")};
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!keys.empty()) {
          if (std::find(keys.back().begin(), keys.back().end(), key) != keys.back().end()) {
            throw Refused{absl::StrCat("the key \"", key, "\" appears twice in one object")};
          }
          keys.back().push_back(key);
        }
        break;
      }
      case json::parse_event_t::value:
        if (++values > kMaxValues) throw Refused{absl::StrCat("more than ", kMaxValues, " values")};
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), check);
}

}  // namespace

std::string ExpertUsageToJson(const ExpertUsage& usage) {
  json layers = json::array();
  for (const ExpertUsage::Layer& l : usage.layers) {
    layers.push_back(json{{"layer", l.layer}, {"evaluations", l.evaluations}});
  }
  return json{{"expert_usage_version", 1}, {"layers", std::move(layers)}}.dump() + "\n";
}

absl::StatusOr<ExpertUsage> ParseExpertUsage(std::string_view text) {
  json v;
  try {
    v = ParseBounded(text);
  } catch (const Refused& r) {
    return Bad(r.why);
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("not JSON: ", e.what()));
  }
  if (!v.is_object()) return Bad("the document is not a JSON object");
  for (const auto& [key, value] : v.items()) {
    if (key != "expert_usage_version" && key != "layers") return Bad(absl::StrCat("unknown key \"", key, "\""));
  }
  const auto version = v.find("expert_usage_version");
  if (version == v.end() || !version->is_number_unsigned() || version->get<uint64_t>() != 1) {
    return Bad("\"expert_usage_version\" must be 1");
  }
  const auto layers = v.find("layers");
  if (layers == v.end() || !layers->is_array()) return Bad("\"layers\" must be an array");
  if (layers->size() > kMaxLayers) return Bad(absl::StrCat(layers->size(), " layers, more than ", kMaxLayers));
  ExpertUsage usage;
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string where = absl::StrCat("layers[", i, "]");
    if (!l.is_object()) return Bad(absl::StrCat(where, " is not an object"));
    for (const auto& [key, value] : l.items()) {
      if (key != "layer" && key != "evaluations") return Bad(absl::StrCat(where, " has an unknown key \"", key, "\""));
    }
    const auto layer = l.find("layer");
    if (layer == l.end() || !layer->is_number_unsigned() || layer->get<uint64_t>() >= kMaxLayers) {
      return Bad(absl::StrCat(where, ".layer must be an integer from 0 to ", kMaxLayers - 1));
    }
    const int index = static_cast<int>(layer->get<uint64_t>());
    if (!usage.layers.empty() && index <= usage.layers.back().layer) {
      return Bad(absl::StrCat(where, ".layer (", index, ") does not follow layer ", usage.layers.back().layer));
    }
    const auto evaluations = l.find("evaluations");
    if (evaluations == l.end() || !evaluations->is_array() || evaluations->empty() ||
        evaluations->size() > kMaxExperts) {
      return Bad(absl::StrCat(where, ".evaluations must be an array of 1 to ", kMaxExperts, " counts"));
    }
    ExpertUsage::Layer out{index, {}};
    out.evaluations.reserve(evaluations->size());
    for (size_t e = 0; e < evaluations->size(); ++e) {
      const json& n = (*evaluations)[e];
      if (!n.is_number_unsigned()) {
        return Bad(absl::StrCat(where, ".evaluations[", e, "] is not a non-negative integer"));
      }
      out.evaluations.push_back(n.get<uint64_t>());
    }
    usage.layers.push_back(std::move(out));
  }
  return usage;
}

absl::StatusOr<ExpertUsage> AddExpertUsage(const ExpertUsage& a, const ExpertUsage& b) {
  ExpertUsage sum;
  size_t i = 0, j = 0;
  while (i < a.layers.size() || j < b.layers.size()) {
    if (j == b.layers.size() || (i < a.layers.size() && a.layers[i].layer < b.layers[j].layer)) {
      sum.layers.push_back(a.layers[i++]);
    } else if (i == a.layers.size() || b.layers[j].layer < a.layers[i].layer) {
      sum.layers.push_back(b.layers[j++]);
    } else {
      const ExpertUsage::Layer& x = a.layers[i++];
      const ExpertUsage::Layer& y = b.layers[j++];
      if (x.evaluations.size() != y.evaluations.size()) {
        return Bad(absl::StrCat("layer ", x.layer, " has ", x.evaluations.size(), " experts in one count and ",
                                y.evaluations.size(), " in the other"));
      }
      ExpertUsage::Layer z{x.layer, x.evaluations};
      for (size_t e = 0; e < z.evaluations.size(); ++e) {
        if (z.evaluations[e] > std::numeric_limits<uint64_t>::max() - y.evaluations[e]) {
          return Bad(absl::StrCat("layer ", x.layer, " expert ", e, ": the sum overflows"));
        }
        z.evaluations[e] += y.evaluations[e];
      }
      sum.layers.push_back(std::move(z));
    }
  }
  return sum;
}

absl::Status CheckExpertUsageFitsModel(const ExpertUsage& usage, const ModelDefinition& model, std::string_view what_view) {
  const std::string what(what_view);
  for (const ExpertUsage::Layer& l : usage.layers) {
    if (l.layer < 0 || static_cast<size_t>(l.layer) >= model.layers.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": layer ", l.layer, " is past the model's ", model.layers.size(), " layers"));
    }
    const ExpertsDefinition& e = model.layers[l.layer].experts;
    if (!e.present()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the model's layer ", l.layer, " has no mixture of experts"));
    }
    if (l.evaluations.size() != static_cast<size_t>(e.count)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": layer ", l.layer, " counts ", l.evaluations.size(),
                                                     " experts; the model's has ", e.count));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertUsage> ReadExpertUsageFile(const std::string& path) {
  absl::StatusOr<std::string> text = internal::ReadFileBounded(path, kMaxFileBytes);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("expert usage: ", text.status().message()));
  absl::StatusOr<ExpertUsage> usage = ParseExpertUsage(*text);
  if (!usage.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("expert usage file '", path, "': ", usage.status().message()));
  }
  return usage;
}

absl::Status WriteExpertUsageFile(const ExpertUsage& usage, const std::string& path) {
  if (path.empty()) return Bad("empty path");
  absl::Status written = internal::WriteFileWhole(path, ExpertUsageToJson(usage));
  if (!written.ok()) return absl::Status(written.code(), absl::StrCat("expert usage: ", written.message()));
  return absl::OkStatus();
}

void FillExpertLayerUsage(const ExpertUsage& usage, std::vector<ExpertLayerFacts>& layers) {
  for (ExpertLayerFacts& f : layers) {
    f.usage.clear();
    for (const ExpertUsage::Layer& l : usage.layers) {
      if (l.layer != f.layer || l.evaluations.size() != static_cast<size_t>(f.experts)) continue;
      if (std::all_of(l.evaluations.begin(), l.evaluations.end(), [](uint64_t n) { return n == 0; })) continue;
      f.usage.assign(l.evaluations.begin(), l.evaluations.end());
    }
  }
}

}  // namespace hetero
