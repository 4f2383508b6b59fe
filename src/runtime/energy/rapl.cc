// RAPL energy counters from the powercap sysfs tree.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hetero/energy.h"

namespace hetero {
namespace {

absl::StatusOr<uint64_t> ReadUint(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return absl::UnavailableError(absl::StrCat("cannot read ", path.string()));
  uint64_t value;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::DataLossError(absl::StrCat(path.string(), ": '", text, "' is not a count"));
  }
  return value;
}

// One domain: energy_uj counts microjoules and wraps at max_energy_range_uj.
class RaplCounter : public EnergyCounter {
 public:
  RaplCounter(std::filesystem::path dir, std::string domain, uint64_t range_uj, uint64_t first_uj)
      : dir_(std::move(dir)), domain_(std::move(domain)), range_uj_(range_uj), last_uj_(first_uj) {}

  std::string name() const override { return "rapl:" + domain_; }
  Device device() const override { return Device::kCpu; }
  bool estimated() const override { return false; }

  absl::StatusOr<double> ReadJoules() override {
    absl::StatusOr<uint64_t> now = ReadUint(dir_ / "energy_uj");
    if (!now.ok()) return now.status();
    std::lock_guard<std::mutex> lock(mu_);
    // The counter wrapped past max_energy_range_uj (a read per wrap period is assumed:
    // minutes to hours at package power).
    const uint64_t delta = *now >= last_uj_ ? *now - last_uj_ : range_uj_ - last_uj_ + *now;
    total_uj_ += delta;
    last_uj_ = *now;
    return static_cast<double>(total_uj_) * 1e-6;
  }

 private:
  std::filesystem::path dir_;
  std::string domain_;
  uint64_t range_uj_;
  std::mutex mu_;
  uint64_t last_uj_;
  uint64_t total_uj_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<EnergyCounter>> FindRaplCounters(const std::string& root, std::string* why_none) {
  std::vector<std::unique_ptr<EnergyCounter>> counters;
  std::vector<std::string> skipped;
  std::error_code ec;
  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string leaf = entry.path().filename().string();
    // "intel-rapl:0" (package), "intel-rapl:0:2" (subdomain); AMD kernels use the same.
    if (leaf.rfind("intel-rapl:", 0) == 0) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    std::ifstream name_file(dir / "name");
    std::string domain;
    if (!name_file || !std::getline(name_file, domain)) continue;
    domain = std::string(absl::StripAsciiWhitespace(domain));
    // Packages and DRAM: core/uncore are parts of the package and would count twice.
    if (domain.rfind("package-", 0) != 0 && domain != "dram") continue;
    absl::StatusOr<uint64_t> range = ReadUint(dir / "max_energy_range_uj");
    absl::StatusOr<uint64_t> first = ReadUint(dir / "energy_uj");
    if (!range.ok() || !first.ok() || *range == 0) {
      skipped.push_back(absl::StrCat(dir.filename().string(), " (", domain, "): ",
                                     !first.ok() ? first.status().message()
                                     : !range.ok() ? range.status().message()
                                                   : "max_energy_range_uj is 0"));
      continue;
    }
    const std::string suffix = domain == "dram" ? absl::StrCat("dram-", dir.filename().string()) : domain;
    counters.push_back(std::make_unique<RaplCounter>(dir, suffix, *range, *first));
  }
  if (why_none != nullptr && counters.empty()) {
    if (ec) {
      *why_none = absl::StrCat("no RAPL counters: ", root, " cannot be read (", ec.message(),
                               "; no powercap support in this kernel or container)");
    } else if (skipped.empty()) {
      *why_none = absl::StrCat("no RAPL counters: ", root, " has no package or dram domain");
    } else {
      *why_none = absl::StrCat("no RAPL counters readable (energy_uj needs root since Linux 5.10): ",
                               absl::StrJoin(skipped, "; "));
    }
  }
  return counters;
}

}  // namespace hetero
