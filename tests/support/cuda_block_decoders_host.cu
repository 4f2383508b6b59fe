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

}  // namespace hetero::testing
