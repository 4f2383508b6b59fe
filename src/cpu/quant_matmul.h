// Matrix products on quantized weight blocks: the weights stay in their file format (Q4_0,
// Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K..Q6_K, IQ4_XS: 2.6 to 8.5 bits per
// weight instead of 16 for bf16) or are regrouped at about the same size, activations are
// quantized to int8 per 32-element block, and the blocks meet in integer dot products
// (AVX-512 VNNI vpdpbusd where the CPU has it, else AVX2 vpmaddubsw on the same packed copy
// for every format but IQ4_NL/IQ4_XS, portable C++ otherwise).
#ifndef HETERO_CPU_QUANT_MATMUL_H_
#define HETERO_CPU_QUANT_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "src/cpu/weight_arena.h"
#include "src/runtime/tensor_type.h"

namespace hetero {

// Rows of activations, each quantized per block of 32: x ~= d[b] * q[32 b .. 32 b + 31].
struct QuantizedActivations {
  int rows = 0;
  int cols = 0;                 // a multiple of 32
  std::vector<int8_t> q;        // rows * cols
  std::vector<uint8_t> q_biased;  // q + 128, the unsigned operand for signed (Q8_0) weights
  std::vector<float> d;         // rows * cols / 32
  std::vector<float> d_sum;     // d[b] * sum(q of block b): the terms weight offsets multiply
  std::vector<int32_t> half_sums;  // sum(q) per 16 elements (Q6_K's per-16 scales need them)
  // -8 * sum(q) and -128 * sum(q) per block: a Q4_0 block's zero point (8), or the bias of
  // Q8_0 weights stored plus 128, times this block's sum: the start of the integer dot
  // product, which then needs no float offset term.
  std::vector<int32_t> q4_0_offsets;
  std::vector<int32_t> q8_0_offsets;
  // -32 * half_sums: a Q6_K half's code bias (32) times its sum, the start of its dot product.
  std::vector<int32_t> q6_k_half_offsets;
  // d repeated over 8 lanes per block, so the SIMD kernels load a block pair's scales as
  // one vector: rows * cols / 32 * 8 floats.
  std::vector<float> d_lanes;

  // Whether each input row is two rows here: row 2 m its int8 blocks, row 2 m + 1 the int8
  // blocks of what they leave (x - d q), whose products QuantMatmul adds. One rounding of
  // int8 per 32 moves a small model's logits by a few percent, enough to change greedy
  // tokens far from a near-tie; the second brings that to ~1e-4 for the price of twice the
  // integer work on the same weight reads (docs/PERFORMANCE.md, "Decode's second int8 pass").
  bool with_remainder = false;
  // QuantizeWithRemainder's remainders, one row each, where they are computed apart (the
  // AVX-512 quantizer makes both rows in one pass and leaves this empty).
  std::vector<float> remainder_input;

  // Quantizes `rows` rows of `cols` floats (row stride `ld`). Reuses capacity.
  void Quantize(const float* x, int rows, int cols, int ld);
  // The same rows with their remainders: 2 x rows rows here, with_remainder set.
  void QuantizeWithRemainder(const float* x, int rows, int cols, int ld);
  // Rows of the products' outputs: rows, or half of them with remainders.
  int output_rows() const { return with_remainder ? rows / 2 : rows; }

 private:
  void Resize(int n_rows, int n_cols);
  void QuantizeRow(const float* x, int m);  // x: cols floats, into row m
};

// 64 bytes, aligned so that a packed tile's vectors never straddle cache lines.
struct alignas(64) CacheLine {
  uint8_t bytes[64];
};

// The packed copies' allocator: memory from the weight arena (huge pages where the system
// gives them, weight_arena.h), and new elements left uninitialised: packing zeroes each row
// group's bytes just before filling them, so a large packed copy's pages become resident as
// packing reaches them (while the source's go), not all at once.
template <typename T>
struct PackedWeightAllocator {
  using value_type = T;
  PackedWeightAllocator() = default;
  template <typename U>
  PackedWeightAllocator(const PackedWeightAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(internal::AllocateWeights(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { internal::FreeWeights(p, n * sizeof(T)); }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const PackedWeightAllocator<U>&) const noexcept {
    return true;  // stateless: any instance frees what another allocated
  }
};

// Weights of one matrix in a native block format: `n` rows (outputs) of `k` columns
// (inputs), each row its blocks (of 32, or super-blocks of 256), as stored in GGUF.
struct QuantizedWeights {
  TensorType type = TensorType::kQ4_0;  // any type Supports() accepts
  int n = 0;
  int k = 0;
  const uint8_t* blocks = nullptr;     // n * row_bytes, usually inside the mapped file
  size_t row_bytes = 0;
  // Per block of rows [packed_rows, n) (the per-row AVX-512 kernel's), the weight offset
  // that multiplies the activations' block sum: Q4_0's -8 d, Q4_1's minimum, Q8_0's
  // -128 d sum(q) (its activations are biased by 128). Empty without AVX-512 VNNI.
  std::vector<float> offsets;
  // The SIMD kernels' copy (AVX-512 VNNI, or AVX2 with F16C), in groups of 16 rows: per
  // group and block, a tile holding the 16 rows' quants interleaved in 4-byte runs (so one
  // vpdpbusd with a broadcast activation word advances 16 outputs, and no horizontal sums
  // are needed), then the 16 scales as fp16, then Q4_1's 16 minima (fp16) (ClassicTileAt).
  // Rows from packed_rows on (n % 16 of them) are read from `blocks`.
  // The other formats (quant_blocks.h) pack into units of one block (or super-block) of
  // columns per 16 rows: per run of 32 columns the low 4 bits of the codes in the same
  // interleaved tile, then per run the higher code bits (one 64-bit mask per tile vector
  // for the fifth bit; Q6_K's two as pairs, PackedUnitLayout), then the format's
  // scales regrouped by row (PackedUnitLayout).
  std::vector<CacheLine, PackedWeightAllocator<CacheLine>> packed;
  int packed_rows = 0;
  // The packed copy as bytes (tiles span several cache lines).
  const uint8_t* packed_bytes() const { return reinterpret_cast<const uint8_t*>(packed.data()); }
  const uint8_t* packed_end() const { return packed_bytes() + packed.size() * sizeof(CacheLine); }

  static constexpr int kGroupRows = 16;
  // Where the packed copy of Q4_0, Q4_1 and Q8_0 keeps block b of a group of 16 rows (byte
  // offsets from the group's start). Q4_0 and Q4_1: one 320-byte tile per block, its quants,
  // the 16 scales and (Q4_1) the 16 minima. Q8_0's quants are stored plus 128, unsigned, so
  // its offset is -128 d times the activations' block sum (as Q4_0's is -8 d) and it needs
  // no per-block weight sums: two blocks share a 1088-byte unit, both quants, then both
  // scales (34 bytes per 32 weights, as in the file, instead of 36). Q4_0 in pairs (576
  // bytes) read fewer bytes but decoded about 5% slower on an AMD EPYC, so it keeps its
  // padded tile.
  struct ClassicTile {
    size_t quants;
    size_t scales;  // 16 fp16; Q4_1's minima follow at +32
  };
  // Inline: the kernels compute it per block, with `type` a constant.
  static constexpr ClassicTile ClassicTileAt(TensorType type, int block) {
    const size_t pair = static_cast<size_t>(block / 2);
    const size_t second = static_cast<size_t>(block % 2);
    switch (type) {
      case TensorType::kQ4_0:
      case TensorType::kQ4_1: return {static_cast<size_t>(block) * 320, static_cast<size_t>(block) * 320 + 256};
      default: return {pair * 1088 + second * 512, pair * 1088 + 1024 + second * 32};  // Q8_0
    }
  }
  // Bytes of a group's packed copy for `blocks` blocks of columns.
  static constexpr size_t ClassicGroupBytes(TensorType type, int blocks) {
    const size_t pairs = static_cast<size_t>((blocks + 1) / 2);
    switch (type) {
      case TensorType::kQ4_0:
      case TensorType::kQ4_1: return static_cast<size_t>(blocks) * 320;
      default: return pairs * 1088;  // Q8_0
    }
  }

  // Whether native kernels run `type` (no bf16 or f32 copy); k must be a whole number of
  // the type's blocks.
  static bool Supports(TensorType type);
  // Told, while Pack runs, of each stretch of the source blocks it has finished copying
  // into `packed`: whole row groups, in order, about 4 MiB at a time, never the rows past
  // the last group (the kernels read those from the source). The loader drops those file
  // pages at once, so a large matrix's file bytes and packed copy are never both resident.
  using PackedSourceFn = std::function<void(const uint8_t* begin, size_t bytes)>;
  // Prepares a view of file blocks, their offsets (AVX-512 VNNI) and, where a SIMD kernel
  // runs `type`, the packed copy.
  static QuantizedWeights FromBlocks(TensorType type, int n, int k, const uint8_t* blocks,
                                     const PackedSourceFn& packed_source = {});
  // Builds `packed` (FromBlocks calls this when a SIMD kernel for `type` runs here).
  void Pack(const PackedSourceFn& packed_source = {});
};

// y[m * ldy + j] = sum_k W[j, k] * x[m, k] for rows m of `a` (its output_rows()) and
// outputs j in [0, w.n), split over the current thread pool (thread_pool.h).
void QuantMatmul(const QuantizedWeights& w, const QuantizedActivations& a, float* y, int ldy);

// Several products as one parallel step: one hand-off to the threads instead of one per
// matrix. Each task multiplies `activations` where it names its own (a mixture of experts'
// chosen experts, each with its tokens), else the shared `a` (a layer's q, k and v; gate
// and up). Each output is computed exactly as QuantMatmul computes it. `dynamic`: tasks of
// unequal rows, balanced as the threads go.
struct QuantMatmulTask {
  const QuantizedWeights* weights;
  float* y;
  int ldy;
  const QuantizedActivations* activations = nullptr;
};
void QuantMatmulMany(absl::Span<const QuantMatmulTask> tasks, const QuantizedActivations& a, bool dynamic = false);

// Rows [row_begin, row_end) of `w` as bf16 (round to nearest even), row-major n x k: the
// transient copy the bf16 GEMM path multiplies. AVX-512 BF16 where available.
void DequantizeRowsToBf16(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out);

// Whether the native kernels beat a dequantized oneDNN copy for `type` on this CPU: always
// for Q4_0/Q4_1/Q8_0; for the other formats only where their packed units run (AVX-512
// VNNI, or AVX2 for all but IQ4_NL/IQ4_XS); their portable kernel is correct but 100x slower.
bool QuantMatmulIsFast(TensorType type);
// Whether the AVX-512 VNNI kernels are in use on this CPU.
bool QuantMatmulUsesAvx512();
// Which kernel QuantMatmul runs here: "avx512-vnni", "avx2" or "portable".
const char* QuantMatmulKernelName();

namespace internal {
// Where things lie in a packed unit of the block formats (16 rows x BlockColumns columns).
struct PackedUnitLayout {
  int runs = 0;           // runs of 32 columns: 1, or 8 for a super-block
  int hi_planes = 0;      // code bits above the low nibble: 0, 1 or 2
  // Stored per run: one plane as a 64-bit mask per tile vector (bit 4 lane + i), which a
  // masked add of 16 applies; two planes (Q6_K) as pairs: two 64-byte vectors, the first
  // for tile vectors 0-3 and the second for 4-7, whose byte 4 lane + i holds tile vector
  // v's two bits at bits 2 (v % 4), so that a shift and one bitwise merge apply them (half
  // the instructions of two masks).
  size_t hi_at = 0;       // byte offsets inside the unit
  size_t scales_at = 0;
  size_t bytes = 0;       // whole cache lines
};
// The layout for `type`, or runs == 0 where the AVX-512 kernels do not pack it.
PackedUnitLayout GetPackedUnitLayout(TensorType type);
// Outputs [16 g, 16 g + 16) for every activation row, from the packed units of a block format.
// Where a.with_remainder, for every output row (each pair's sum; StoreTileRows).
void QuantBlockGroupAvx512(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy);
// The same with AVX2 (and FMA, F16C), for the formats QuantBlockGroupAvx2Supports accepts.
bool QuantBlockGroupAvx2Supports(TensorType type);
void QuantBlockGroupAvx2(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy);

// The portable kernels, also the reference the SIMD ones are tested against.
// Rows of x (stride ld) become rows first_row.. of `a` (sized by the caller).
void QuantizeRowsPortable(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row = 0);
float QuantDotPortable(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m);
// AVX-512 versions (only call when the CPU supports avx512f/bw/vl/vnni).
// Also writes d_lanes: `a` must be sized (QuantizedActivations::Resize), d_lanes included.
void QuantizeRowsAvx512(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row = 0);
// Row m of an input (x: a.cols floats) as rows 2 m and 2 m + 1 of `a`, its int8 blocks and
// those of its remainder, in one pass; the same bits as QuantizeRowsAvx512 of x and of the
// remainder x - d q (product rounded, then the difference). a must be sized.
void QuantizeRowWithRemainderAvx512(const float* x, QuantizedActivations& a, int m);
// y[m * ldy + row] for every activation row m: weight row `row` (not in a packed group)
// against all of them.
void QuantRowsAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy);
// Outputs [16 g, 16 g + 16) for every activation row m, from the packed tiles; where
// a.with_remainder, for every output row (each pair's sum; StoreTileRows).
void QuantGroupAvx512(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy);
// Outputs [16 g, 16 g + 16) for every activation row from the packed tiles, with AVX2, FMA
// and F16C (no AVX-512 VNNI).
void QuantGroupAvx2(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy);
// QuantizeRowsPortable with AVX2 (only call when the CPU has avx2 and fma): the same bits.
void QuantizeRowsAvx2(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row = 0);
// AVX2 version of QuantDotPortable over all activation rows (only call when the CPU has
// avx2 and fma); reads `blocks`, no packed copy.
void QuantRowsAvx2(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy);
void DequantizeRowsToBf16Portable(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out);
void DequantizeRowsToBf16Avx512(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out);
}  // namespace internal

}  // namespace hetero

#endif  // HETERO_CPU_QUANT_MATMUL_H_
