// The CUDA module's block decoders (src/gpu/cuda_blocks.cuh), compiled by nvcc as host
// functions, behind a plain C++ interface: a test built by the host compiler checks them
// against the CPU's reference dequantizer on a machine without a GPU.
#ifndef HETERO_TESTS_SUPPORT_CUDA_BLOCK_DECODERS_HOST_H_
#define HETERO_TESTS_SUPPORT_CUDA_BLOCK_DECODERS_HOST_H_

#include <cstdint>
#include <vector>

namespace hetero::testing {

// The module's formats (HETERO_CUDA_WEIGHTS_*) whose GEMV reads blocks, float16 included.
std::vector<int> CudaGemvFormats();

// Elements and bytes of one block of `format` as the module addresses it ({1, 0} unknown).
struct CudaBlockGeometry {
  int elements, bytes;
};
CudaBlockGeometry CudaGemvBlock(int format);

// The sixteen weights of unit `unit` (elements 16 unit .. 16 unit + 15) of row `row` of a
// row-major matrix of `k` columns in `format`, as the GEMV kernels decode them; false for a
// format they do not read.
bool CudaDecodeUnit(int format, const void* weights, int row, int k, int unit, float* w);

// The prompt path's dequantize kernel's body over every unit of a rows x k matrix: the
// matrix as row-major float16 bits into `out` (rows x k); false for an unknown format.
bool CudaDequantizeToHalf(int format, const void* weights, int rows, int k, uint16_t* out);

// The embedding kernel's body over every unit of row `token` of an n_vocab x n_embd table:
// that row times `scale` into `out` (n_embd floats); false for an unknown format.
bool CudaEmbedRow(int format, const void* table, int n_embd, int token, float scale, float* out);

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_CUDA_BLOCK_DECODERS_HOST_H_
