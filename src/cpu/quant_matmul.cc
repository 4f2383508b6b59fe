#include "src/cpu/quant_matmul.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/quant_blocks.h"
#include "src/cpu/thread_pool.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"

namespace hetero {
namespace {

constexpr int kBlock = 32;

// The weight offset of one block: Q4_0's -8 d, Q4_1's minimum, Q8_0's -128 d sum(q).
float BlockOffset(TensorType type, const uint8_t* blk) {
  switch (type) {
    case TensorType::kQ4_0:
      return -8.0f * LoadFp16(blk);
    case TensorType::kQ4_1:
      return LoadFp16(blk + 2);
    default: {  // Q8_0
      const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
      int sum = 0;
      for (int i = 0; i < kBlock; ++i) sum += q[i];
      return -128.0f * static_cast<float>(sum) * LoadFp16(blk);
    }
  }
}

bool HaveAvx512Vnni() {
  static const bool have = [] {
    const CpuInfo& cpu = DetectCpu();
    return cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512_vnni;
  }();
  return have;
}

bool HaveAvx2() {
  static const bool have = [] {
    const CpuInfo& cpu = DetectCpu();
    return cpu.avx2 && cpu.fma;
  }();
  return have;
}

// The AVX2 kernels on the packed copy also convert its fp16 scales with F16C.
bool HaveAvx2F16c() { return HaveAvx2() && DetectCpu().f16c; }

}  // namespace

bool QuantMatmulUsesAvx512() { return HaveAvx512Vnni(); }


const char* QuantMatmulKernelName() {
  if (HaveAvx512Vnni()) return "avx512-vnni";
  return HaveAvx2() ? "avx2" : "portable";
}

// Q4_0, Q4_1 and Q8_0 have kernels of their own; the other formats go through quant_blocks.h.
bool IsClassicFormat(TensorType type) {
  return type == TensorType::kQ4_0 || type == TensorType::kQ4_1 || type == TensorType::kQ8_0;
}

bool QuantizedWeights::Supports(TensorType type) { return IsClassicFormat(type) || internal::IsBlockFormat(type); }

// Whether the block format `type` is packed into units here, and so run by a SIMD kernel.
bool PacksBlockFormat(TensorType type) {
  if (!internal::IsBlockFormat(type) || internal::GetPackedUnitLayout(type).runs == 0) return false;
  return HaveAvx512Vnni() || (HaveAvx2F16c() && internal::QuantBlockGroupAvx2Supports(type));
}

bool QuantMatmulIsFast(TensorType type) { return IsClassicFormat(type) || PacksBlockFormat(type); }

QuantizedWeights QuantizedWeights::FromBlocks(TensorType type, int n, int k, const uint8_t* blocks,
                                              const PackedSourceFn& packed_source) {
  QuantizedWeights w;
  w.type = type;
  w.n = n;
  w.k = k;
  w.blocks = blocks;
  const TensorTypeTraits& traits = GetTensorTypeTraits(type);
  w.row_bytes = static_cast<size_t>(k / traits.block_size) * traits.type_size;
  if (IsClassicFormat(type) ? HaveAvx512Vnni() || HaveAvx2F16c() : PacksBlockFormat(type)) w.Pack(packed_source);
  if (!IsClassicFormat(type)) return w;  // the per-row offsets are the classic kernels' only
  // Offsets for the rows the per-row AVX-512 kernel reads (those past the packed groups).
  const size_t first = static_cast<size_t>(w.packed_rows) * (k / kBlock);
  const size_t last = static_cast<size_t>(n) * (k / kBlock);
  const size_t bytes = GetTensorTypeTraits(type).type_size;
  if (HaveAvx512Vnni()) {
    w.offsets.resize(last - first);
    for (size_t b = first; b < last; ++b) w.offsets[b - first] = BlockOffset(type, blocks + b * bytes);
  }
  return w;
}

namespace internal {

PackedUnitLayout GetPackedUnitLayout(TensorType type) {
  PackedUnitLayout l;
  // Scale bytes per unit: fp16 per row, and per run (or half) one byte per row.
  size_t scale_bytes = 0;
  switch (type) {
    case TensorType::kQ5_0: l.runs = 1; l.hi_planes = 1; scale_bytes = 32; break;
    case TensorType::kQ5_1: l.runs = 1; l.hi_planes = 1; scale_bytes = 64; break;
    case TensorType::kIQ4_NL: l.runs = 1; scale_bytes = 32; break;
    case TensorType::kQ4_K: l.runs = 8; scale_bytes = 8 * 16 * 2 + 64; break;  // scales, minima; d, dmin
    case TensorType::kQ5_K: l.runs = 8; l.hi_planes = 1; scale_bytes = 8 * 16 * 2 + 64; break;
    case TensorType::kQ6_K: l.runs = 8; l.hi_planes = 2; scale_bytes = 16 * 16 + 32; break;  // per half; d
    case TensorType::kIQ4_XS: l.runs = 8; scale_bytes = 8 * 16 + 32; break;  // per run; d
    // 3 and 2 code bits in 4: units 1.35x and 1.76x the file's bytes, still far below a bf16
    // copy (4.7x, 6.1x) and 100x faster than reading the blocks one row at a time.
    case TensorType::kQ3_K: l.runs = 8; scale_bytes = 16 * 16 + 32; break;  // per half; d
    case TensorType::kQ2_K: l.runs = 8; scale_bytes = 16 * 16 + 64; break;  // per half; d, dmin
    default: return l;
  }
  l.hi_at = static_cast<size_t>(l.runs) * 256;
  l.scales_at = l.hi_at + static_cast<size_t>(l.runs) * l.hi_planes * 64;
  l.bytes = (l.scales_at + scale_bytes + 63) / 64 * 64;
  return l;
}

}  // namespace internal

namespace {

// Reports the source rows packed so far to a PackedSourceFn, a few MiB at a time.
class PackedSourceReporter {
 public:
  PackedSourceReporter(const QuantizedWeights& w, const QuantizedWeights::PackedSourceFn& fn) : w_(w), fn_(fn) {}
  // Rows [0, rows) are packed; `last`: no more will be.
  void Packed(int rows, bool last) {
    if (!fn_) return;
    const size_t end = static_cast<size_t>(rows) * w_.row_bytes;
    if (end > reported_ && (last || end - reported_ >= kStretchBytes)) {
      fn_(w_.blocks + reported_, end - reported_);
      reported_ = end;
    }
  }

 private:
  static constexpr size_t kStretchBytes = size_t{4} << 20;
  const QuantizedWeights& w_;
  const QuantizedWeights::PackedSourceFn& fn_;
  size_t reported_ = 0;
};

// The block formats' units: see QuantizedWeights and PackedUnitLayout.
void PackBlockFormat(QuantizedWeights& w, const QuantizedWeights::PackedSourceFn& packed_source) {
  const internal::PackedUnitLayout l = internal::GetPackedUnitLayout(w.type);
  if (l.runs == 0) return;  // read from the file blocks by the portable kernel
  constexpr int kRows = QuantizedWeights::kGroupRows;
  const int units = w.k / (32 * l.runs);
  const int groups = w.n / kRows;
  const size_t block_bytes = GetTensorTypeTraits(w.type).type_size;
  w.packed_rows = groups * kRows;
  w.packed.resize(static_cast<size_t>(groups) * units * l.bytes / sizeof(CacheLine));
  PackedSourceReporter reporter(w, packed_source);
  uint8_t codes[32];
  for (int g = 0; g < groups; ++g) {
    // The allocation is uninitialised (see `packed`); the masks below are ORed in.
    std::memset(reinterpret_cast<uint8_t*>(w.packed.data()) + static_cast<size_t>(g) * units * l.bytes, 0,
                static_cast<size_t>(units) * l.bytes);
    for (int u = 0; u < units; ++u) {
      uint8_t* unit = reinterpret_cast<uint8_t*>(w.packed.data()) + (static_cast<size_t>(g) * units + u) * l.bytes;
      uint8_t* scales = unit + l.scales_at;
      for (int lane = 0; lane < kRows; ++lane) {
        const uint8_t* row = w.blocks + static_cast<size_t>(g * kRows + lane) * w.row_bytes;
        for (int r = 0; r < l.runs; ++r) {
          const int run = u * l.runs + r;
          internal::ExtractCodes(w.type, row, run, codes);
          uint8_t* tile = unit + 256 * r;
          // Byte i of run t, lane j: element 4t+i in the low nibble, 16+4t+i in the high one.
          for (int t = 0; t < 4; ++t) {
            for (int i = 0; i < 4; ++i) {
              tile[64 * t + 4 * lane + i] =
                  static_cast<uint8_t>((codes[4 * t + i] & 0x0F) | ((codes[16 + 4 * t + i] & 0x0F) << 4));
            }
          }
          // Higher bits, as pairs (see PackedUnitLayout): tile vector v (v < 4: low nibbles,
          // else high), byte 4 lane + i of vector v / 4, bits 2 (v % 4) and up.
          if (l.hi_planes == 2) {
            uint8_t* pairs = unit + l.hi_at + static_cast<size_t>(r) * 128;
            for (int v = 0; v < 8; ++v) {
              for (int i = 0; i < 4; ++i) {
                const int e = v < 4 ? 4 * v + i : 16 + 4 * (v - 4) + i;
                pairs[64 * (v / 4) + 4 * lane + i] |= static_cast<uint8_t>(((codes[e] >> 4) & 3) << (2 * (v % 4)));
              }
            }
          }
          // Or as masks: plane p, tile vector v, bit 4 lane + i.
          for (int p = 0; p < (l.hi_planes == 2 ? 0 : l.hi_planes); ++p) {
            uint8_t* masks = unit + l.hi_at + (static_cast<size_t>(r) * l.hi_planes + p) * 64;
            for (int v = 0; v < 8; ++v) {
              uint64_t mask;
              std::memcpy(&mask, masks + 8 * v, 8);
              for (int i = 0; i < 4; ++i) {
                const int e = v < 4 ? 4 * v + i : 16 + 4 * (v - 4) + i;
                mask |= static_cast<uint64_t>((codes[e] >> (4 + p)) & 1) << (4 * lane + i);
              }
              std::memcpy(masks + 8 * v, &mask, 8);
            }
          }
        }
        // Scales, regrouped so that 16 rows' values of one run are contiguous.
        const uint8_t* blk = row + static_cast<size_t>(u) * block_bytes;
        switch (w.type) {
          case TensorType::kQ5_0:
          case TensorType::kIQ4_NL:
            std::memcpy(scales + 2 * lane, blk, 2);
            break;
          case TensorType::kQ5_1:
            std::memcpy(scales + 2 * lane, blk, 2);
            std::memcpy(scales + 32 + 2 * lane, blk + 2, 2);
            break;
          case TensorType::kQ4_K:
          case TensorType::kQ5_K:
            for (int r = 0; r < 8; ++r) UnpackK4ScaleMin(blk + 4, r, scales + 16 * r + lane, scales + 128 + 16 * r + lane);
            std::memcpy(scales + 256 + 2 * lane, blk, 2);
            std::memcpy(scales + 288 + 2 * lane, blk + 2, 2);
            break;
          case TensorType::kQ6_K:
            for (int h = 0; h < 16; ++h) scales[16 * h + lane] = blk[192 + h];
            std::memcpy(scales + 256 + 2 * lane, blk + 208, 2);
            break;
          case TensorType::kQ3_K: {
            int8_t unpacked[16];
            UnpackQ3KScales(blk + 96, unpacked);
            for (int h = 0; h < 16; ++h) scales[16 * h + lane] = static_cast<uint8_t>(static_cast<int8_t>(unpacked[h] - 32));
            std::memcpy(scales + 256 + 2 * lane, blk + 108, 2);
            break;
          }
          case TensorType::kQ2_K:
            for (int h = 0; h < 16; ++h) scales[16 * h + lane] = blk[h];  // scale low nibble, minimum high
            std::memcpy(scales + 256 + 2 * lane, blk + 80, 2);
            std::memcpy(scales + 288 + 2 * lane, blk + 82, 2);
            break;
          case TensorType::kIQ4_XS:
            for (int r = 0; r < 8; ++r) {
              scales[16 * r + lane] = static_cast<uint8_t>(static_cast<int8_t>(UnpackIq4XsScale(blk, r) - 32));
            }
            std::memcpy(scales + 128 + 2 * lane, blk, 2);
            break;
          default:
            break;
        }
      }
    }
    reporter.Packed((g + 1) * kRows, g + 1 == groups);
  }
}

}  // namespace

void QuantizedWeights::Pack(const PackedSourceFn& packed_source) {
  if (!IsClassicFormat(type)) {
    PackBlockFormat(*this, packed_source);
    return;
  }
  PackedSourceReporter reporter(*this, packed_source);
  const int nb = k / kBlock;
  const int groups = n / kGroupRows;
  const size_t group_bytes = ClassicGroupBytes(type, nb);
  const size_t block_bytes = GetTensorTypeTraits(type).type_size;
  packed_rows = groups * kGroupRows;
  packed.resize(static_cast<size_t>(groups) * group_bytes / sizeof(CacheLine));
  const bool q8 = type == TensorType::kQ8_0;
  const int qs_at = type == TensorType::kQ4_1 ? 4 : 2;
  for (int g = 0; g < groups; ++g) {
    uint8_t* group = reinterpret_cast<uint8_t*>(packed.data()) + static_cast<size_t>(g) * group_bytes;
    std::memset(group, 0, group_bytes);  // the allocation is uninitialised (see `packed`)
    for (int b = 0; b < nb; ++b) {
      const ClassicTile at = ClassicTileAt(type, b);
      for (int lane = 0; lane < kGroupRows; ++lane) {
        const uint8_t* blk = blocks + static_cast<size_t>(g * kGroupRows + lane) * row_bytes + b * block_bytes;
        // Run t of lane j holds quant bytes 4t..4t+3 (Q4: low nibbles are elements 4t..4t+3
        // and high nibbles 16+4t.., exactly as the file packs them).
        for (int t = 0; t < (q8 ? 8 : 4); ++t) {
          uint8_t* run = group + at.quants + 64 * t + 4 * lane;
          std::memcpy(run, blk + qs_at + 4 * t, 4);
          if (q8) {
            for (int i = 0; i < 4; ++i) run[i] ^= 0x80;  // int8 w as uint8 w + 128
          }
        }
        std::memcpy(group + at.scales + 2 * lane, blk, 2);  // scale d (fp16)
        if (type == TensorType::kQ4_1) std::memcpy(group + at.scales + 32 + 2 * lane, blk + 2, 2);  // minimum (fp16)
      }
    }
    reporter.Packed((g + 1) * kGroupRows, g + 1 == groups);
  }
}

void QuantizedActivations::Resize(int n_rows, int n_cols) {
  rows = n_rows;
  cols = n_cols;
  const size_t n = static_cast<size_t>(rows) * cols;
  q.resize(n);
  q_biased.resize(n);
  d.resize(n / kBlock);
  d_sum.resize(n / kBlock);
  q4_0_offsets.resize(n / kBlock);
  q8_0_offsets.resize(n / kBlock);
  half_sums.resize(n / 16);
  q6_k_half_offsets.resize(n / 16);
  if (HaveAvx512Vnni()) d_lanes.resize(n / kBlock * 8);
}

void QuantizedActivations::QuantizeRow(const float* x, int m) {
  if (HaveAvx512Vnni()) {
    internal::QuantizeRowsAvx512(x, 1, cols, cols, *this, m);  // d_lanes too
  } else if (HaveAvx2()) {
    internal::QuantizeRowsAvx2(x, 1, cols, cols, *this, m);
  } else {
    internal::QuantizeRowsPortable(x, 1, cols, cols, *this, m);
  }
}

void QuantizedActivations::Quantize(const float* x, int n_rows, int n_cols, int ld) {
  with_remainder = false;
  Resize(n_rows, n_cols);
  // Rows are independent: a batch's rows quantize in parallel, each exactly as alone.
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int m) { QuantizeRow(x + static_cast<size_t>(m) * ld, m); });
}

void QuantizedActivations::QuantizeWithRemainder(const float* x, int n_rows, int n_cols, int ld) {
  with_remainder = true;
  Resize(2 * n_rows, n_cols);
  const size_t width = static_cast<size_t>(n_cols);
  const bool one_pass = HaveAvx512Vnni();  // both rows from one pass over x
  if (!one_pass) remainder_input.resize(static_cast<size_t>(n_rows) * width);
  // One step per input row (decode's single row runs inline, no hand-off to the threads).
  ParallelFor(n_rows, ThreadPool::Schedule::kStatic, [&](int m) {
    const float* src = x + static_cast<size_t>(m) * ld;
    if (one_pass) {
      internal::QuantizeRowWithRemainderAvx512(src, *this, m);
      return;
    }
    QuantizeRow(src, 2 * m);
    const int8_t* qm = q.data() + 2 * static_cast<size_t>(m) * width;
    const float* dm = d.data() + 2 * static_cast<size_t>(m) * (width / kBlock);
    float* rest = remainder_input.data() + static_cast<size_t>(m) * width;
    for (size_t b = 0; b < width / kBlock; ++b) {
      for (size_t i = b * kBlock; i < (b + 1) * kBlock; ++i) rest[i] = src[i] - dm[b] * static_cast<float>(qm[i]);
    }
    QuantizeRow(rest, 2 * m + 1);
  });
}

namespace internal {

void QuantizeRowsPortable(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row) {
  const int nb = cols / kBlock;
  for (int m = first_row; m < first_row + rows; ++m) {
    for (int b = 0; b < nb; ++b) {
      const float* src = x + static_cast<size_t>(m - first_row) * ld + b * kBlock;
      float amax = 0.0f;
      for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(src[i]));
      const float d = amax / 127.0f;
      const float id = d > 0.0f ? 1.0f / d : 0.0f;
      const size_t base = static_cast<size_t>(m) * cols + b * kBlock;
      int sum = 0, first_half = 0;
      for (int i = 0; i < kBlock; ++i) {
        const int v = static_cast<int>(std::nearbyint(src[i] * id));  // ties to even, as the SIMD path
        a.q[base + i] = static_cast<int8_t>(v);
        a.q_biased[base + i] = static_cast<uint8_t>(v + 128);
        sum += v;
        if (i == 15) first_half = sum;
      }
      a.half_sums[base / 16] = first_half;
      a.half_sums[base / 16 + 1] = sum - first_half;
      a.q6_k_half_offsets[base / 16] = -32 * first_half;
      a.q6_k_half_offsets[base / 16 + 1] = -32 * (sum - first_half);
      a.d[static_cast<size_t>(m) * nb + b] = d;
      a.d_sum[static_cast<size_t>(m) * nb + b] = d * static_cast<float>(sum);
      a.q4_0_offsets[static_cast<size_t>(m) * nb + b] = -8 * sum;
      a.q8_0_offsets[static_cast<size_t>(m) * nb + b] = -128 * sum;
    }
  }
}

namespace {

// The block formats: per run of 32, the codes' values against the activations, per half.
float BlockFormatDotPortable(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m) {
  const int runs = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  const int8_t* qa = a.q.data() + static_cast<size_t>(m) * a.cols;
  const float* ad = a.d.data() + static_cast<size_t>(m) * runs;
  uint8_t codes[32];
  float sum = 0.0f;
  for (int r = 0; r < runs; ++r) {
    internal::ExtractCodes(w.type, wrow, r, codes);
    for (int h = 0; h < 2; ++h) {
      float scale, offset;
      internal::ExtractScaleOffset(w.type, wrow, 2 * r + h, &scale, &offset);
      int dot = 0, act_sum = 0;
      for (int i = 16 * h; i < 16 * h + 16; ++i) {
        dot += internal::CodeValue(w.type, codes[i]) * qa[32 * r + i];
        act_sum += qa[32 * r + i];
      }
      sum += scale * ad[r] * static_cast<float>(dot) + offset * ad[r] * static_cast<float>(act_sum);
    }
  }
  return sum;
}

}  // namespace

float QuantDotPortable(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m) {
  if (!IsClassicFormat(w.type)) return BlockFormatDotPortable(w, row, a, m);
  const int nb = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  const float* ad = a.d.data() + static_cast<size_t>(m) * nb;
  const float* ads = a.d_sum.data() + static_cast<size_t>(m) * nb;
  float sum = 0.0f;
  for (int b = 0; b < nb; ++b) {
    int dot = 0;
    if (w.type == TensorType::kQ8_0) {
      const uint8_t* blk = wrow + b * 34;
      const auto* qw = reinterpret_cast<const int8_t*>(blk + 2);
      const uint8_t* qa = a.q_biased.data() + static_cast<size_t>(m) * a.cols + b * kBlock;
      for (int j = 0; j < kBlock; ++j) dot += qw[j] * qa[j];
      sum += LoadFp16(blk) * ad[b] * static_cast<float>(dot) + BlockOffset(w.type, blk) * ad[b];
    } else {
      const int8_t* qa = a.q.data() + static_cast<size_t>(m) * a.cols + b * kBlock;
      const uint8_t* blk = wrow + b * (w.type == TensorType::kQ4_0 ? 18 : 20);
      const uint8_t* qs = blk + (w.type == TensorType::kQ4_0 ? 2 : 4);
      for (int j = 0; j < 16; ++j) dot += (qs[j] & 0x0F) * qa[j] + (qs[j] >> 4) * qa[j + 16];
      sum += LoadFp16(blk) * ad[b] * static_cast<float>(dot) + BlockOffset(w.type, blk) * ads[b];
    }
  }
  return sum;
}

void DequantizeRowsToBf16Portable(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out) {
  std::vector<float> row(w.k);
  for (int j = row_begin; j < row_end; ++j) {
    Dequantize(w.type, absl::MakeConstSpan(w.blocks + static_cast<size_t>(j) * w.row_bytes, w.row_bytes),
               absl::MakeSpan(row))
        .IgnoreError();  // supported type and whole rows: cannot fail
    uint16_t* o = out + static_cast<size_t>(j - row_begin) * w.k;
    for (int i = 0; i < w.k; ++i) o[i] = Fp32ToBf16(row[i]);
  }
}

}  // namespace internal

void DequantizeRowsToBf16(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out) {
  static const bool bf16 = [] {
    const CpuInfo& cpu = DetectCpu();
    return cpu.avx512f && cpu.avx512bw && cpu.avx512_bf16;
  }();
  if (bf16 && IsClassicFormat(w.type)) {
    internal::DequantizeRowsToBf16Avx512(w, row_begin, row_end, out);
  } else {
    internal::DequantizeRowsToBf16Portable(w, row_begin, row_end, out);
  }
}

namespace {

// The pieces a product is cut into for the threads: one per packed group of 16 outputs, then
// one per output row past the last group (or one per row where nothing is packed).
int WorkItems(const QuantizedWeights& w) {
  if (w.packed.empty()) return w.n;
  return w.packed_rows / QuantizedWeights::kGroupRows + (w.n - w.packed_rows);
}

// Whether work item i runs an AVX-512 group kernel (QuantGroupAvx512 or
// QuantBlockGroupAvx512). Those add a remainder pair's products themselves as they store
// (StoreTileRows); every other kernel writes both rows, which RunWorkItemAndSum then sums.
bool RunsAvx512GroupKernel(const QuantizedWeights& w, int i) {
  return HaveAvx512Vnni() && !w.packed.empty() && i < w.packed_rows / QuantizedWeights::kGroupRows;
}

void RunWorkItem(const QuantizedWeights& w, const QuantizedActivations& a, int i, float* y, int ldy) {
  const bool classic = IsClassicFormat(w.type);
  if (RunsAvx512GroupKernel(w, i)) {
    if (classic) {
      internal::QuantGroupAvx512(w, i, a, y, ldy);
    } else {
      internal::QuantBlockGroupAvx512(w, i, a, y, ldy);
    }
    return;
  }
  const bool simd = HaveAvx512Vnni() && classic;
  const int groups = w.packed_rows / QuantizedWeights::kGroupRows;
  if (!w.packed.empty() && i < groups) {  // no AVX-512 VNNI here: the AVX2 group kernels
    if (classic) {
      internal::QuantGroupAvx2(w, i, a, y, ldy);
    } else {
      internal::QuantBlockGroupAvx2(w, i, a, y, ldy);
    }
    return;
  }
  const int j = w.packed.empty() ? i : w.packed_rows + (i - groups);
  if (simd) {
    internal::QuantRowsAvx512(w, j, a, y, ldy);
  } else if (classic && HaveAvx2()) {
    internal::QuantRowsAvx2(w, j, a, y, ldy);
  } else {
    for (int m = 0; m < a.rows; ++m) y[static_cast<size_t>(m) * ldy + j] = internal::QuantDotPortable(w, j, a, m);
  }
}


// The outputs [begin, end) work item i computes.
std::pair<int, int> ItemOutputs(const QuantizedWeights& w, int i) {
  const int groups = w.packed.empty() ? 0 : w.packed_rows / QuantizedWeights::kGroupRows;
  if (i < groups) return {i * QuantizedWeights::kGroupRows, (i + 1) * QuantizedWeights::kGroupRows};
  const int j = w.packed.empty() ? i : w.packed_rows + (i - groups);
  return {j, j + 1};
}

// RunWorkItem, then, where `a` holds remainders and the kernel leaves both rows, the sum of
// each row's two products, from `pairs` (a.rows x w.n, this product's own) into y.
void RunWorkItemAndSum(const QuantizedWeights& w, const QuantizedActivations& a, int i, float* y, int ldy,
                       float* pairs) {
  if (!a.with_remainder || RunsAvx512GroupKernel(w, i)) {
    RunWorkItem(w, a, i, y, ldy);
    return;
  }
  RunWorkItem(w, a, i, pairs, w.n);
  const auto [begin, end] = ItemOutputs(w, i);
  for (int m = 0; m < a.output_rows(); ++m) {
    const float* first = pairs + 2 * static_cast<size_t>(m) * w.n;
    const float* rest = first + w.n;
    float* out = y + static_cast<size_t>(m) * ldy;
    for (int j = begin; j < end; ++j) out[j] = first[j] + rest[j];
  }
}

// The calling thread's buffer for the products of remainders, reused across calls.
float* PairScratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

size_t PairFloats(const QuantizedWeights& w, const QuantizedActivations& a) {
  return a.with_remainder ? static_cast<size_t>(a.rows) * w.n : 0;
}

// Runs `loop` at the prefetch distance the tuner plans for a product of `rows` rows, and
// reports what it asks for: the time of a loop it measures, the bytes of the others.
template <typename Loop>
void TimeWeightRead(int rows, uint64_t bytes, Loop&& loop) {
  switch (internal::PlanWeightRead(rows)) {
    case internal::WeightReadPlan::kUntimed:
      loop();
      return;
    case internal::WeightReadPlan::kCounted:
      loop();
      internal::CountWeightRead(bytes);
      return;
    case internal::WeightReadPlan::kTimed: {
      const auto start = std::chrono::steady_clock::now();
      loop();
      const auto took = std::chrono::steady_clock::now() - start;
      internal::RecordWeightRead(bytes, static_cast<uint64_t>(std::chrono::nanoseconds(took).count()));
      return;
    }
  }
}

// The file's bytes of the matrix: the packed copy the AVX-512 kernels read is within 11% of
// it (Q4_0's), and the tuner compares rates of the same products, so this is close enough.
uint64_t WeightBytes(const QuantizedWeights& w) { return static_cast<uint64_t>(w.n) * w.row_bytes; }

}  // namespace

// Outputs are split over threads; each thread streams its own weight rows once and meets
// every activation row with them while they are in cache.
void QuantMatmul(const QuantizedWeights& w, const QuantizedActivations& a, float* y, int ldy) {
  float* pairs = a.with_remainder ? PairScratch(PairFloats(w, a)) : nullptr;
  TimeWeightRead(a.rows, WeightBytes(w), [&] {  // the kernels' rows: two per input row with remainders
    ParallelFor(WorkItems(w), ThreadPool::Schedule::kStatic,
                [&](int i) { RunWorkItemAndSum(w, a, i, y, ldy, pairs); });
  });
}

void QuantMatmulMany(absl::Span<const QuantMatmulTask> tasks, const QuantizedActivations& a, bool dynamic) {
  absl::InlinedVector<int, 33> starts(tasks.size() + 1);
  int total = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    starts[t] = total;
    total += WorkItems(*tasks[t].weights);
  }
  starts[tasks.size()] = total;
  int rows = 0;
  uint64_t bytes = 0;
  absl::InlinedVector<size_t, 33> pair_starts(tasks.size() + 1);
  for (size_t t = 0; t < tasks.size(); ++t) {
    const QuantMatmulTask& task = tasks[t];
    const QuantizedActivations& input = task.activations != nullptr ? *task.activations : a;
    bytes += WeightBytes(*task.weights);
    rows = std::max(rows, input.rows);
    pair_starts[t + 1] = pair_starts[t] + PairFloats(*task.weights, input);
  }
  float* pairs = pair_starts.back() > 0 ? PairScratch(pair_starts.back()) : nullptr;
  TimeWeightRead(rows, bytes, [&] {
    ParallelFor(total, dynamic ? ThreadPool::Schedule::kDynamic : ThreadPool::Schedule::kStatic, [&](int i) {
      const size_t t = std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1;
      const QuantMatmulTask& task = tasks[t];
      RunWorkItemAndSum(*task.weights, task.activations != nullptr ? *task.activations : a, i - starts[t], task.y,
                        task.ldy, pairs + pair_starts[t]);
    });
  });
}

}  // namespace hetero
