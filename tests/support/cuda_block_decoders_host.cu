#include "tests/support/cuda_block_decoders_host.h"

#include "src/gpu/cuda_blocks.cuh"

namespace hetero::testing {

std::vector<int> CudaGemvFormats() {
  std::vector<int> formats;
  for (int f = 0; f < 64; ++f) {
    if (gpu::WithGemvFormat(f, [](auto) {})) formats.push_back(f);
  }
  return formats;
}

CudaBlockGeometry CudaGemvBlock(int format) {
  const gpu::BlockGeometry g = gpu::GemvBlock(format);
  return {g.elements, g.bytes};
}

bool CudaDecodeUnit(int format, const void* weights, int row, int k, int unit, float* w) {
  return gpu::WithGemvFormat(format, [&](auto f) { gpu::LoadUnit<decltype(f)::value>(weights, row, k, unit, w); });
}

bool CudaDequantizeToHalf(int format, const void* weights, int rows, int k, uint16_t* out) {
  return gpu::WithGemvFormat(format, [&](auto f) {
    const size_t units = static_cast<size_t>(rows) * (k / 16);
    for (size_t i = 0; i < units; ++i) {
      gpu::DequantizeUnitToHalf<decltype(f)::value>(weights, k, i, reinterpret_cast<__half*>(out));
    }
  });
}

bool CudaEmbedRow(int format, const void* table, int n_embd, int token, float scale, float* out) {
  return gpu::WithGemvFormat(format, [&](auto f) {
    for (int unit = 0; unit < n_embd / 16; ++unit) gpu::EmbedUnit<decltype(f)::value>(table, n_embd, token, unit, scale, out);
  });
}

}  // namespace hetero::testing
