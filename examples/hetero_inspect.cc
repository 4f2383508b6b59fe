// hetero-inspect: prints what a GGUF model is (architecture, configuration, tensors,
// weight types, size) and which devices hetero would use for it.
//
//   hetero-inspect [--json] [MODEL.gguf]
//
// Without a path the model is found as everywhere in hetero: $HETERO_MODEL, then
// models/SmolLM2-135M-Instruct.Q4_1.gguf. A bad file prints one "error: ..." line on
// stderr and exits with status 1.
#include <cstdio>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hetero/devices.h"
#include "hetero/model.h"
#include "hetero/version.h"

namespace {

struct TypeStats {
  int tensors = 0;
  uint64_t bytes = 0;
  uint64_t elements = 0;
};

const char* RopeStyleName(hetero::RopeStyle s) {
  return s == hetero::RopeStyle::kNeox ? "neox" : "normal";
}

const char* RopeScalingName(hetero::RopeScaling s) {
  return s == hetero::RopeScaling::kLinear ? "linear" : "none";
}

std::string OneLine(const std::string& s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", OneLine(message).c_str());
  return 1;
}

void PrintUsage() {
  std::printf(
      "usage: hetero-inspect [--json] [MODEL.gguf]\n"
      "Prints a GGUF model's architecture, configuration, tensors and weight types.\n"
      "Without MODEL: $HETERO_MODEL, then %s.\n",
      hetero::kDefaultModelPath);
}

nlohmann::json ToJson(const hetero::Model& model, const std::map<std::string, TypeStats>& types,
                      const hetero::DeviceReport& devices) {
  const hetero::ModelConfig& c = model.config();
  nlohmann::json j;
  j["path"] = model.path();
  j["file_size_bytes"] = model.file_size();
  j["gguf_version"] = model.gguf_version();
  j["name"] = c.name;
  j["architecture"] = c.architecture;
  j["config"] = {
      {"n_layers", c.n_layers},
      {"n_embd", c.n_embd},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"head_dim_v", c.head_dim_v},
      {"n_ff", c.n_ff},
      {"n_vocab", c.n_vocab},
      {"context_length", c.context_length},
      {"rope_dim", c.rope_dim},
      {"rope_freq_base", c.rope_freq_base},
      {"rope_style", RopeStyleName(c.rope_style)},
      {"rope_scaling", RopeScalingName(c.rope_scaling)},
      {"rope_scaling_factor", c.rope_scaling_factor},
      {"rope_freq_factors", c.has_rope_freq_factors},
      {"rms_norm_eps", c.rms_norm_eps},
      {"tied_embeddings", c.tied_embeddings},
      {"attention_bias", c.attention_bias},
      {"sliding_window", c.sliding_window},
      {"features", c.features},
  };
  j["tensor_count"] = model.tensors().size();
  j["parameter_count"] = model.parameter_count();
  j["decode_weight_bytes"] = model.decode_weight_bytes();
  j["unused_tensors"] = model.unused_tensors();
  nlohmann::json types_json = nlohmann::json::object();
  for (const auto& [name, s] : types) {
    types_json[name] = {{"tensors", s.tensors}, {"bytes", s.bytes}, {"elements", s.elements}};
  }
  j["types"] = types_json;
  nlohmann::json cuda_devices = nlohmann::json::array();
  for (const hetero::CudaDeviceInfo& d : devices.cuda.devices) {
    cuda_devices.push_back({{"index", d.index},
                            {"name", d.name},
                            {"compute_capability", absl::StrFormat("%d.%d", d.compute_capability_major,
                                                                   d.compute_capability_minor)},
                            {"total_memory_bytes", d.total_memory_bytes}});
  }
  j["devices"] = {
      {"cpu", {{"name", devices.cpu.name},
               {"logical_cpus", devices.cpu.logical_cpus},
               {"usable_cpus", devices.cpu.usable_cpus},
               {"features", devices.cpu.FeatureList()}}},
      {"cuda", {{"available", devices.cuda.available},
                {"module_found", devices.cuda.module_found},
                {"notice", devices.cuda.notice},
                {"devices", cuda_devices}}},
  };
  return j;
}

void PrintText(const hetero::Model& model, const std::map<std::string, TypeStats>& types,
               const hetero::DeviceReport& devices) {
  const hetero::ModelConfig& c = model.config();
  auto mib = [](uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::printf("hetero-inspect %s\n", hetero::VersionString());
  std::printf("model:            %s\n", model.path().c_str());
  std::printf("name:             %s\n", c.name.empty() ? "(none)" : c.name.c_str());
  std::printf("file size:        %llu bytes (%.1f MiB)\n",
              static_cast<unsigned long long>(model.file_size()), mib(model.file_size()));
  std::printf("gguf version:     %u\n", model.gguf_version());
  std::printf("architecture:     %s\n", c.architecture.c_str());
  std::printf("layers:           %d\n", c.n_layers);
  std::printf("hidden:           %d\n", c.n_embd);
  std::printf("heads:            %d\n", c.n_heads);
  std::printf("kv heads:         %d\n", c.n_kv_heads);
  std::printf("head dim:         %d (values %d)\n", c.head_dim, c.head_dim_v);
  std::printf("ffn:              %d\n", c.n_ff);
  std::printf("vocab:            %d\n", c.n_vocab);
  std::printf("context:          %d\n", c.context_length);
  std::printf("rope:             %s, %d dims, base %g, scaling %s (factor %g)%s\n",
              RopeStyleName(c.rope_style), c.rope_dim, c.rope_freq_base,
              RopeScalingName(c.rope_scaling), c.rope_scaling_factor,
              c.has_rope_freq_factors ? ", per-frequency factors" : "");
  std::printf("rms norm eps:     %g\n", c.rms_norm_eps);
  std::printf("embeddings:       %s\n", c.tied_embeddings ? "tied (output uses token_embd)" : "separate output matrix");
  std::printf("attention bias:   %s\n", c.attention_bias ? "yes" : "no");
  for (size_t i = 0; i < c.features.size(); ++i) {
    std::printf("%s%s\n", i == 0 ? "also:             " : "                  ", c.features[i].c_str());
  }
  std::printf("tensors:          %zu\n", model.tensors().size());
  std::printf("parameters:       %llu (%.1f M)\n",
              static_cast<unsigned long long>(model.parameter_count()),
              static_cast<double>(model.parameter_count()) / 1e6);
  std::printf("decode reads:     %.1f MB of weights per token\n", static_cast<double>(model.decode_weight_bytes()) / 1e6);
  std::printf("types:\n");
  for (const auto& [name, s] : types) {
    std::printf("  %-8s %4d tensors  %12llu elements  %8.2f MiB  (%.2f bits/weight)\n",
                name.c_str(), s.tensors, static_cast<unsigned long long>(s.elements), mib(s.bytes),
                s.elements ? 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.elements) : 0.0);
  }
  if (!model.unused_tensors().empty()) {
    std::printf("unused tensors:   %zu (first: %s)\n", model.unused_tensors().size(),
                model.unused_tensors().front().c_str());
  }
  std::printf("cpu:              %s, %d logical CPUs (%d usable), %s\n", devices.cpu.name.c_str(),
              devices.cpu.logical_cpus, devices.cpu.usable_cpus, devices.cpu.FeatureList().c_str());
  if (devices.cuda.available) {
    for (const hetero::CudaDeviceInfo& d : devices.cuda.devices) {
      std::printf("cuda:%d:           %s, sm_%d%d, %.1f GiB, %d SMs\n", d.index, d.name.c_str(),
                  d.compute_capability_major, d.compute_capability_minor,
                  static_cast<double>(d.total_memory_bytes) / (1024.0 * 1024.0 * 1024.0),
                  d.multiprocessor_count);
    }
  } else {
    std::printf("cuda:             unavailable: %s\n", devices.cuda.notice.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "-h" || arg == "--help") {
      PrintUsage();
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return Fail(absl::StrFormat("unknown option '%s' (try --help)", arg));
    } else if (path.empty()) {
      path = std::string(arg);
    } else {
      return Fail("more than one model path given");
    }
  }
  absl::StatusOr<std::string> resolved = hetero::ResolveModelPath(path);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  absl::StatusOr<std::unique_ptr<hetero::Model>> model = hetero::Model::Load(*resolved);
  if (!model.ok()) return Fail(std::string(model.status().message()));

  std::map<std::string, TypeStats> types;
  for (const hetero::TensorSummary& t : (*model)->tensors()) {
    TypeStats& s = types[t.type];
    ++s.tensors;
    s.bytes += t.n_bytes;
    s.elements += t.n_elements;
  }
  const hetero::DeviceReport& devices = hetero::QueryDevices();
  if (json) {
    std::printf("%s\n", ToJson(**model, types, devices).dump(2).c_str());
  } else {
    PrintText(**model, types, devices);
  }
  return 0;
}
