// Block layouts as ggml defines them (see dequantize.cc, which is tested bit for bit against
// the gguf package): the element order inside a block and where each field lives.
#include "src/cpu/quant_blocks.h"

#include <cstring>

#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"

namespace hetero::internal {
namespace {

inline uint8_t Nibble(const uint8_t* qs, int e) { return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4); }

size_t BlockBytes(TensorType type) { return GetTensorTypeTraits(type).type_size; }

}  // namespace

bool IsBlockFormat(TensorType type) {
  switch (type) {
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

int BlockColumns(TensorType type) { return static_cast<int>(GetTensorTypeTraits(type).block_size); }

int CodeBits(TensorType type) {
  switch (type) {
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ5_K:
      return 5;
    case TensorType::kQ6_K:
      return 6;
    case TensorType::kQ2_K:
      return 2;
    case TensorType::kQ3_K:
      return 3;
    default:
      return 4;
  }
}

int CodeBias(TensorType type) {
  switch (type) {
    case TensorType::kQ5_0: return 16;
    case TensorType::kQ6_K: return 32;
    case TensorType::kQ3_K: return 4;
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS: return -1;
    default: return 0;
  }
}

int CodeValue(TensorType type, int code) {
  return UsesIq4Grid(type) ? kIq4Levels[code & 0x0F] : code - CodeBias(type);
}

std::vector<int> Fp16FieldOffsets(TensorType type) {
  switch (type) {
    case TensorType::kQ4_0:
    case TensorType::kQ5_0:
    case TensorType::kQ8_0:
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS: return {0};
    case TensorType::kQ4_1:
    case TensorType::kQ5_1:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: return {0, 2};
    case TensorType::kQ2_K: return {80, 82};
    case TensorType::kQ3_K: return {108};
    case TensorType::kQ6_K: return {208};
    default: return {};
  }
}

void ExtractCodes(TensorType type, const uint8_t* row, int run, uint8_t* codes) {
  const int per_block = BlockColumns(type) / 32;  // runs of 32 per block
  const uint8_t* b = row + static_cast<size_t>(run / per_block) * BlockBytes(type);
  const int j = run % per_block;  // run inside a super-block
  switch (type) {
    case TensorType::kQ5_0:
    case TensorType::kQ5_1: {
      const int at = type == TensorType::kQ5_0 ? 2 : 4;
      uint32_t qh;
      std::memcpy(&qh, b + at, 4);
      for (int e = 0; e < 32; ++e) codes[e] = Nibble(b + at + 4, e) | (((qh >> e) & 1) << 4);
      break;
    }
    case TensorType::kIQ4_NL:
      for (int e = 0; e < 32; ++e) codes[e] = Nibble(b + 2, e);
      break;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: {
      // Each 32 bytes of quants hold two runs: low nibbles the first, high nibbles the next.
      const bool q5 = type == TensorType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (q5 ? 48 : 16) + 32 * (j / 2);
      for (int e = 0; e < 32; ++e) {
        uint8_t c = (j % 2 == 0) ? (qs[e] & 0x0F) : (qs[e] >> 4);
        if (q5) c |= ((qh[e] >> j) & 1) << 4;
        codes[e] = c;
      }
      break;
    }
    case TensorType::kQ6_K: {
      // Per 128 weights: ql 64 bytes, qh 32 bytes; run jj of the four takes ql's low or high
      // nibbles (first or second 32 bytes) and 2 bits of qh.
      const int jj = j % 4;
      const uint8_t* ql = b + 64 * (j / 4) + (jj % 2) * 32;
      const uint8_t* qh = b + 128 + 32 * (j / 4);
      for (int e = 0; e < 32; ++e) {
        const uint8_t lo = jj < 2 ? (ql[e] & 0x0F) : (ql[e] >> 4);
        codes[e] = lo | (((qh[e] >> (2 * jj)) & 3) << 4);
      }
      break;
    }
    case TensorType::kIQ4_XS:
      for (int e = 0; e < 32; ++e) codes[e] = Nibble(b + 8 + 16 * j, e);
      break;
    case TensorType::kQ2_K:
    case TensorType::kQ3_K: {
      // Per 128 weights, 32 bytes of 2-bit quants; run jj of the four takes bits 2 jj.
      const bool q3 = type == TensorType::kQ3_K;
      const int jj = j % 4;
      const uint8_t* qs = b + (q3 ? 32 : 16) + 32 * (j / 4);
      for (int e = 0; e < 32; ++e) {
        uint8_t c = (qs[e] >> (2 * jj)) & 3;
        if (q3) c |= ((b[e] >> j) & 1) << 2;  // hmask bit j: set means +0, clear -4
        codes[e] = c;
      }
      break;
    }
    default:
      std::memset(codes, 0, 32);
      break;
  }
}

void ExtractScaleOffset(TensorType type, const uint8_t* row, int half, float* scale, float* offset) {
  const int per_block = BlockColumns(type) / 16;  // halves per block
  const uint8_t* b = row + static_cast<size_t>(half / per_block) * BlockBytes(type);
  const int h = half % per_block;  // half inside a super-block
  *offset = 0.0f;
  switch (type) {
    case TensorType::kQ5_0:
    case TensorType::kIQ4_NL:
      *scale = LoadFp16(b);
      break;
    case TensorType::kQ5_1:
      *scale = LoadFp16(b);
      *offset = LoadFp16(b + 2);
      break;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: {
      uint8_t sc, mn;
      UnpackK4ScaleMin(b + 4, h / 2, &sc, &mn);
      *scale = LoadFp16(b) * sc;
      *offset = -(LoadFp16(b + 2) * mn);
      break;
    }
    case TensorType::kQ6_K:
      *scale = LoadFp16(b + 208) * static_cast<int8_t>(b[192 + h]);
      break;
    case TensorType::kIQ4_XS:
      *scale = LoadFp16(b) * (UnpackIq4XsScale(b, h / 2) - 32);
      break;
    case TensorType::kQ2_K: {
      const uint8_t sc = b[h];
      *scale = LoadFp16(b + 80) * (sc & 0x0F);
      *offset = -(LoadFp16(b + 82) * (sc >> 4));
      break;
    }
    case TensorType::kQ3_K: {
      int8_t scales[16];
      UnpackQ3KScales(b + 96, scales);
      *scale = LoadFp16(b + 108) * (scales[h] - 32);
      break;
    }
    default:
      *scale = 0.0f;
      break;
  }
}

}  // namespace hetero::internal
