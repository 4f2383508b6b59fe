// The AVX-512 group kernels' last step, shared by quant_matmul_avx512.cc and
// quant_matmul_blocks_avx512.cc (both compiled with -mavx512f; include nowhere else).
#ifndef HETERO_SRC_CPU_TILE_STORE_AVX512_H_
#define HETERO_SRC_CPU_TILE_STORE_AVX512_H_

#include <immintrin.h>

#include <cassert>
#include <cstddef>

#include "src/cpu/quant_matmul.h"

namespace hetero::internal {

// Stores a tile's R rows of 16 outputs at `column`. Where `a` holds remainders its rows come
// in pairs (an input row's int8 blocks, then its remainder's; tiles start at even rows and
// are even in size, as a.rows is), and the tile stores each pair's sum in the input row's
// output row: the float add that a scratch of both products and a second pass would make,
// without the scratch.
template <int R>
inline void StoreTileRows(const __m512 (&acc)[R], const QuantizedActivations& a, int m0, float* y, int ldy,
                          int column) {
  if constexpr (R % 2 != 0) {
    assert(!a.with_remainder && "remainder pairs come in even tiles");
  } else {
    if (a.with_remainder) {
#pragma GCC unroll 4
      for (int r = 0; r < R; r += 2) {
        _mm512_storeu_ps(y + static_cast<size_t>((m0 + r) / 2) * ldy + column, _mm512_add_ps(acc[r], acc[r + 1]));
      }
      return;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + static_cast<size_t>(m0 + r) * ldy + column, acc[r]);
}

}  // namespace hetero::internal

#endif  // HETERO_SRC_CPU_TILE_STORE_AVX512_H_
