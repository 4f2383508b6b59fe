// Block layouts and arithmetic follow ggml's reference dequantizers exactly, including the
// order of float operations, so results are bit-identical. This file is compiled with
// -ffp-contract=off: a fused multiply-add would round differently.
#include "src/runtime/dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/runtime/fp16.h"

namespace hetero {
namespace {

constexpr int kQK = 32;
constexpr int kQK_K = 256;

inline float ReadFp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// Dequantizes `n_blocks` consecutive blocks.
using RowDequantizer = void (*)(const uint8_t* blocks, size_t n_blocks, float* y);

// F32, F16 and BF16 are "blocks" of one element.
void DequantF32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void DequantF16(const uint8_t* b, float* y) { y[0] = ReadFp16(b); }
void DequantBF16(const uint8_t* b, float* y) {
  uint16_t v;
  std::memcpy(&v, b, 2);
  y[0] = Bf16ToFp32(v);
}

// Q4_0: { f16 d; u8 qs[16] }, low nibbles are elements 0..15, high nibbles 16..31.
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = x0 * d;
    y[j + kQK / 2] = x1 * d;
  }
}

// Q4_1: { f16 d; f16 m; u8 qs[16] }.
void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const float m = ReadFp16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    const int x0 = qs[j] & 0x0F;
    const int x1 = qs[j] >> 4;
    y[j] = x0 * d + m;
    y[j + kQK / 2] = x1 * d + m;
  }
}

// Q5_0: { f16 d; u8 qh[4]; u8 qs[16] }, qh holds the fifth bit of each element.
void DequantQ5_0(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
    const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
    const int x0 = ((qs[j] & 0x0F) | xh0) - 16;
    const int x1 = ((qs[j] >> 4) | xh1) - 16;
    y[j] = x0 * d;
    y[j + kQK / 2] = x1 * d;
  }
}

// Q5_1: { f16 d; f16 m; u8 qh[4]; u8 qs[16] }.
void DequantQ5_1(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const float m = ReadFp16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
    const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
    const int x0 = (qs[j] & 0x0F) | xh0;
    const int x1 = (qs[j] >> 4) | xh1;
    y[j] = x0 * d + m;
    y[j + kQK / 2] = x1 * d + m;
  }
}

// Q8_0: { f16 d; i8 qs[32] }.
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = qs[j] * d;
}

// Q2_K: { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin }: 16 groups of 16, each with a 4-bit
// scale and a 4-bit min; 2-bit quants.
void DequantQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = ReadFp16(b + 16 + 64);
  const float dmin = ReadFp16(b + 16 + 64 + 2);
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = scales[is++];
      float dl = d * (sc & 0x0F);
      float ml = dmin * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l] >> shift) & 3) - ml;
      sc = scales[is++];
      dl = d * (sc & 0x0F);
      ml = dmin * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16] >> shift) & 3) - ml;
      shift += 2;
    }
    q += 32;
  }
}

// Q3_K: { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d }: 16 groups with 6-bit signed
// scales packed in 12 bytes; 2 low bits in qs plus a high bit in hmask (set means +0,
// clear means -4).
void DequantQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const float d_all = ReadFp16(b + 32 + 64 + 12);
  int8_t scales[16];
  UnpackQ3KScales(b + 32 + 64, scales);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) {
        *y++ = dl * (static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      }
      dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) {
        *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      }
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

// Q4_K: { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }: 8 groups of 32.
void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const float dmin = ReadFp16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < kQK_K; j += 64) {
    uint8_t sc, mn;
    UnpackK4ScaleMin(scales, is + 0, &sc, &mn);
    const float d1 = d * sc;
    const float m1 = dmin * mn;
    UnpackK4ScaleMin(scales, is + 1, &sc, &mn);
    const float d2 = d * sc;
    const float m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// Q5_K: { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }.
void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const float dmin = ReadFp16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQK_K; j += 64) {
    uint8_t sc, mn;
    UnpackK4ScaleMin(scales, is + 0, &sc, &mn);
    const float d1 = d * sc;
    const float m1 = dmin * mn;
    UnpackK4ScaleMin(scales, is + 1, &sc, &mn);
    const float d2 = d * sc;
    const float m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

// Q6_K: { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }: 16 groups of 16, 6-bit quants.
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 128 + 64);
  const float d = ReadFp16(b + 128 + 64 + 16);
  for (int n = 0; n < kQK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// IQ4_NL: { f16 d; u8 qs[16] }: 4-bit indices into a fixed non-uniform grid of 16 int8
// levels; low nibbles are elements 0..15, high nibbles 16..31.
void DequantIQ4_NL(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * kIq4Levels[qs[j] & 0x0F];
    y[j + kQK / 2] = d * kIq4Levels[qs[j] >> 4];
  }
}

// IQ4_XS: { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128] }: 8 groups of 32, each with a
// 6-bit scale (4 low bits in scales_l, 2 high bits in scales_h) biased by 32, over the
// IQ4_NL grid.
void DequantIQ4_XS(const uint8_t* b, float* y) {
  const float d = ReadFp16(b);
  const uint8_t* qs = b + 8;
  for (int g = 0; g < kQK_K / 32; ++g) {
    const float dl = d * (UnpackIq4XsScale(b, g) - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4Levels[qs[j] & 0x0F];
      y[j + 16] = dl * kIq4Levels[qs[j] >> 4];
    }
    y += 32;
    qs += 16;
  }
}

// Q8_K: { f32 d; i8 qs[256]; i16 bsums[16] } (bsums only speed up dot products).
void DequantQ8_K(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
  for (int j = 0; j < kQK_K; ++j) y[j] = d * qs[j];
}

// The block function is a template argument so it is inlined into the loop (the one-
// element "blocks" of F16/BF16 then vectorize).
template <void (*kBlock)(const uint8_t*, float*), TensorType kType>
void DequantRows(const uint8_t* blocks, size_t n_blocks, float* y) {
  constexpr TensorTypeTraits kTraits = GetTensorTypeTraits(kType);
  for (size_t i = 0; i < n_blocks; ++i) {
    kBlock(blocks + i * kTraits.type_size, y + i * kTraits.block_size);
  }
}

RowDequantizer FindDequantizer(TensorType type) {
  switch (type) {
    case TensorType::kF32: return DequantRows<DequantF32, TensorType::kF32>;
    case TensorType::kF16: return DequantRows<DequantF16, TensorType::kF16>;
    case TensorType::kBF16: return DequantRows<DequantBF16, TensorType::kBF16>;
    case TensorType::kQ4_0: return DequantRows<DequantQ4_0, TensorType::kQ4_0>;
    case TensorType::kQ4_1: return DequantRows<DequantQ4_1, TensorType::kQ4_1>;
    case TensorType::kQ5_0: return DequantRows<DequantQ5_0, TensorType::kQ5_0>;
    case TensorType::kQ5_1: return DequantRows<DequantQ5_1, TensorType::kQ5_1>;
    case TensorType::kQ8_0: return DequantRows<DequantQ8_0, TensorType::kQ8_0>;
    case TensorType::kQ2_K: return DequantRows<DequantQ2_K, TensorType::kQ2_K>;
    case TensorType::kQ3_K: return DequantRows<DequantQ3_K, TensorType::kQ3_K>;
    case TensorType::kQ4_K: return DequantRows<DequantQ4_K, TensorType::kQ4_K>;
    case TensorType::kQ5_K: return DequantRows<DequantQ5_K, TensorType::kQ5_K>;
    case TensorType::kQ6_K: return DequantRows<DequantQ6_K, TensorType::kQ6_K>;
    case TensorType::kQ8_K: return DequantRows<DequantQ8_K, TensorType::kQ8_K>;
    case TensorType::kIQ4_NL: return DequantRows<DequantIQ4_NL, TensorType::kIQ4_NL>;
    case TensorType::kIQ4_XS: return DequantRows<DequantIQ4_XS, TensorType::kIQ4_XS>;
    default: return nullptr;
  }
}

}  // namespace

void UnpackQ3KScales(const uint8_t* packed, int8_t* scales) {
  constexpr uint32_t kMask1 = 0x03030303;
  constexpr uint32_t kMask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kMask2) | (((tmp >> 4) & kMask1) << 4);
  aux[3] = ((aux[1] >> 4) & kMask2) | (((tmp >> 6) & kMask1) << 4);
  aux[0] = (aux[0] & kMask2) | (((tmp >> 0) & kMask1) << 4);
  aux[1] = (aux[1] & kMask2) | (((tmp >> 2) & kMask1) << 4);
  std::memcpy(scales, aux, 16);
}

absl::Status Dequantize(TensorType type, absl::Span<const uint8_t> src, absl::Span<float> dst) {
  const TensorTypeTraits* traits = FindTensorTypeTraits(static_cast<uint32_t>(type));
  if (traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown tensor type id ", static_cast<uint32_t>(type)));
  }
  RowDequantizer dequant = FindDequantizer(type);
  if (dequant == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("weight type ", traits->name, " is not supported by hetero (supported: ",
                     DequantizableTypeList(), ")"));
  }
  if (dst.size() % traits->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(dst.size(), " elements is not a multiple of ",
                                                   traits->name, "'s block size ",
                                                   traits->block_size));
  }
  const size_t n_blocks = dst.size() / traits->block_size;
  if (src.size() != n_blocks * traits->type_size) {
    return absl::InvalidArgumentError(absl::StrCat(dst.size(), " ", traits->name, " elements need ",
                                                   n_blocks * traits->type_size, " bytes, got ",
                                                   src.size()));
  }
  dequant(src.data(), n_blocks, dst.data());
  return absl::OkStatus();
}

absl::Status DequantizeTensor(const GgufTensorInfo& tensor, absl::Span<float> dst) {
  if (dst.size() != tensor.n_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", PrintableName(tensor.name), "' has ",
                                                   tensor.n_elements, " elements, destination holds ",
                                                   dst.size()));
  }
  absl::Status status = Dequantize(tensor.type, tensor.data, dst);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("tensor '", PrintableName(tensor.name), "': ", status.message()));
}

absl::StatusOr<std::vector<float>> LoadFloatTensor(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("tensor '", name, "' is missing"));
  std::vector<float> v(t->n_elements);
  absl::Status s = DequantizeTensor(*t, absl::MakeSpan(v));
  if (!s.ok()) return s;
  return v;
}

}  // namespace hetero
