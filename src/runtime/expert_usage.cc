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
// The format's objects have two keys; a few more leave room for the schema check's own
// "unknown key" message, and the cap keeps the repeated-key search short.
constexpr size_t kMaxKeys = 8;
constexpr int kMaxDepth = 4;  // open containers around a count: document, layers, a layer, its evaluations

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("expert usage: ", what)); }

// A pass over the text that builds nothing: it refuses nesting deeper than the format's,
// more values than kMaxValues and a key repeated in one object as they are read, so a
// hostile document costs a scan, not a DOM of millions of nodes, before it is refused.
class BoundsCheck final : public nlohmann::json_sax<json> {
 public:
  // Empty when the text is JSON within the bounds; otherwise why not.
  const std::string& refusal() const { return refusal_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    if (!Value()) return false;
    keys_.emplace_back();
    return Open();
  }
  bool key(string_t& key) override {
    std::vector<std::string>& keys = keys_.back();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return Refuse(absl::StrCat("the key \"", key, "\" appears twice in one object"));
    }
    if (keys.size() == kMaxKeys) return Refuse(absl::StrCat("an object has more than ", kMaxKeys, " keys"));
    keys.push_back(key);
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --open_;
    return true;
  }
  bool start_array(std::size_t) override { return Value() && Open(); }
  bool end_array() override {
    --open_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return Refuse(absl::StrCat("not JSON: ", e.what()));
  }

 private:
  // Every value, containers included, counts; one inside kMaxDepth open containers is too deep.
  bool Value() {
    if (open_ > kMaxDepth) return Refuse(absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
    if (++values_ > kMaxValues) return Refuse(absl::StrCat("more than ", kMaxValues, " values"));
    return true;
  }
  bool Open() {
    ++open_;
    return true;
  }
  bool Refuse(std::string why) {
    refusal_ = std::move(why);
    return false;
  }

  int open_ = 0;
  size_t values_ = 0;
  std::vector<std::vector<std::string>> keys_;  // per open object, its keys so far
  std::string refusal_;
};

}  // namespace

std::string ExpertUsageToJson(const ExpertUsage& usage) {
  json layers = json::array();
  for (const ExpertUsage::Layer& l : usage.layers) {
    layers.push_back(json{{"layer", l.layer}, {"evaluations", l.evaluations}});
  }
  return json{{"expert_usage_version", 1}, {"layers", std::move(layers)}}.dump() + "\n";
}

absl::StatusOr<ExpertUsage> ParseExpertUsage(std::string_view text) {
  // Two passes over the text: the check, then the document. Real files are kilobytes, read
  // once when an engine opens; the check is what keeps a hostile one cheap.
  BoundsCheck bounds;
  if (!json::sax_parse(text.begin(), text.end(), &bounds)) return Bad(bounds.refusal());
  const json v = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return Bad("not JSON");  // the check above would have said why first
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
