#include "server/metrics.h"

#include <cstdio>

namespace hetero::serve {

namespace {

std::string Number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

void Header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Histogram::Observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets_[i];
      break;
    }
  }
  ++count_;
  sum_ += seconds;
}

void Histogram::Write(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  Header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out += name + "_bucket{le=\"" + Number(kBounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + Number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::CountGeneration(const TaskReport& report) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prompt_tokens_ += static_cast<uint64_t>(report.prompt_tokens);
    generated_tokens_ += static_cast<uint64_t>(report.generated_tokens);
    for (const StageReport& s : report.stages) joules_[{DeviceName(s.device), s.joules_estimated}] += s.joules;
  }
  if (report.time_to_first_token_ms > 0) time_to_first_token_.Observe(report.time_to_first_token_ms / 1e3);
  if (report.generated_tokens > 1 && report.total_ms > report.time_to_first_token_ms) {
    time_per_output_token_.Observe((report.total_ms - report.time_to_first_token_ms) / 1e3 /
                                   (report.generated_tokens - 1));
  }
}

std::string Metrics::Render(const Engine& engine, int running, int waiting) const {
  const EngineStats stats = engine.stats();
  std::string out;
  Header(out, "hetero_num_requests_running", "gauge", "Requests being served now.");
  out += "hetero_num_requests_running " + std::to_string(running) + "\n";
  Header(out, "hetero_num_requests_waiting", "gauge", "Requests waiting for a slot or in the engine's queue.");
  out += "hetero_num_requests_waiting " + std::to_string(waiting + stats.queued_tasks) + "\n";
  Header(out, "hetero_kv_cache_usage_perc", "gauge", "KV-cache tokens in use over capacity, all devices (0 to 1).");
  out += "hetero_kv_cache_usage_perc " +
         Number(stats.kv_capacity_tokens > 0 ? static_cast<double>(stats.kv_used_tokens) / stats.kv_capacity_tokens : 0) +
         "\n";
  std::lock_guard<std::mutex> lock(mu_);
  Header(out, "hetero_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    out += "hetero_requests_total{endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  }
  Header(out, "hetero_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
  out += "hetero_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  Header(out, "hetero_generation_tokens_total", "counter", "Generated tokens of finished generations.");
  out += "hetero_generation_tokens_total " + std::to_string(generated_tokens_) + "\n";
  Header(out, "hetero_energy_joules_total", "counter",
         "Joules of finished generations per device; estimated=\"true\" where no meter measured them.");
  for (const auto& [key, joules] : joules_) {
    out += "hetero_energy_joules_total{device=\"" + key.first + "\",estimated=\"" + (key.second ? "true" : "false") +
           "\"} " + Number(joules) + "\n";
  }
  time_to_first_token_.Write(out, "hetero_time_to_first_token_seconds", "Time to the first generated token.");
  time_per_output_token_.Write(out, "hetero_time_per_output_token_seconds", "Time per generated token after the first.");
  return out;
}

}  // namespace hetero::serve
