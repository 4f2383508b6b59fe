// hetero-serve's Prometheus metrics: request counters by endpoint and status, token counters,
// time-to-first-token and time-per-output-token histograms, joules per device, and the
// gauges a router reads (requests waiting and running, KV-cache use), in the text format.
#ifndef HETERO_SERVER_METRICS_H_
#define HETERO_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "hetero/engine.h"

namespace hetero::serve {

class Histogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1.0,  2.5,   5.0,  10.0, 30.0};
  void Observe(double seconds);
  void Write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBounds.size()> buckets_{};  // cumulative at write time
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  void CountRequest(const std::string& endpoint, int status);
  // A finished generation: its tokens, timings and joules per stage device.
  void CountGeneration(const TaskReport& report);
  // The text format; `running` and `waiting` are the server's requests now.
  std::string Render(const Engine& engine, int running, int waiting) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::pair<std::string, bool>, double> joules_;  // (device, estimated)
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
};

}  // namespace hetero::serve

#endif  // HETERO_SERVER_METRICS_H_
