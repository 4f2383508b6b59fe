// Fuzzes the GGUF reader and everything that consumes a parsed file: metadata
// conversions, model configuration and tensor checks, and dequantization of the tensors.
// Any crash, sanitizer report, hang or large allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/runtime/dequantize.h"
#include "src/runtime/gguf.h"
#include "src/runtime/model_config.h"

namespace {

void TouchValue(const hetero::GgufValue& value, int depth) {
  (void)value.ToUint64();
  (void)value.ToInt64();
  (void)value.ToDouble();
  (void)value.ToBool();
  (void)value.ToString();
  auto array = value.ToArray();
  if (!array.ok()) return;
  const hetero::GgufArray& a = **array;
  if (!a.raw.empty()) {
    volatile uint8_t sink = a.raw[a.raw.size() - 1];
    (void)sink;
  }
  for (const auto& s : a.strings) {
    if (!s.empty()) {
      volatile char sink = s.back();
      (void)sink;
    }
  }
  for (const hetero::GgufValue& inner : a.arrays) TouchValue(inner, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = hetero::GgufFile::Parse(absl::Span<const uint8_t>(data, size), "fuzz");
  if (!file.ok()) return 0;
  const hetero::GgufFile& f = **file;
  for (const hetero::GgufKeyValue& kv : f.metadata()) TouchValue(kv.value, 0);
  (void)f.GetUint32("general.alignment");
  (void)f.GetString("general.architecture");

  auto model = hetero::ReadModelArchitecture(f);
  if (model.ok()) (void)hetero::ValidateModelTensors(f, *model);

  std::vector<float> out;
  for (const hetero::GgufTensorInfo& t : f.tensors()) {
    // Tensor data lies inside the input, so element counts are bounded by its size
    // (times at most 32 for 1-bit-ish formats); cap anyway to keep iterations fast.
    if (t.n_elements > (1u << 20)) continue;
    out.resize(t.n_elements);
    (void)hetero::DequantizeTensor(t, absl::MakeSpan(out));
  }
  return 0;
}
