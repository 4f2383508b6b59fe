// IEEE binary16 and bfloat16 <-> binary32 conversions, exact and portable (no F16C needed),
// used by the dequantizers and by tests that write model files.
#ifndef HETERO_RUNTIME_FP16_H_
#define HETERO_RUNTIME_FP16_H_

#include <cstdint>
#include <cstring>

namespace hetero {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Exact: every binary16 value (subnormals, infinities) is representable. NaNs keep their
// payload and come out quiet, as from F16C and ggml.
// Rebiases the exponent with integer arithmetic and normalises subnormals with one exact
// float subtraction; all three cases are computed and selected without branches, so
// loops over it vectorize.
inline float Fp16ToFp32(uint16_t h) {
  constexpr uint32_t kExponentMask = 0x7C00u << 13;  // binary16 exponent, shifted into place
  const uint32_t bits = static_cast<uint32_t>(h & 0x7FFFu) << 13;
  const uint32_t exponent = bits & kExponentMask;
  const uint32_t normal = bits + ((127 - 15) << 23);      // rebiased exponent
  const uint32_t inf_nan = (normal + ((128 - 16) << 23)) |  // exponent all ones
                           ((bits & 0x7FE000u) != 0 ? 0x400000u : 0u);  // NaN: quiet bit
  // Subnormal or zero: 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24, exactly.
  const uint32_t subnormal = FloatToBits(BitsToFloat(normal + (1u << 23)) - BitsToFloat(113u << 23));
  const uint32_t magnitude = exponent == kExponentMask ? inf_nan : exponent == 0 ? subnormal : normal;
  return BitsToFloat(magnitude | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// Round to nearest, ties to even; overflow gives infinity; NaN stays NaN (quiet).
// An fp16 value stored at `p` (any alignment, e.g. a GGUF block's scale).
inline float LoadFp16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

inline uint16_t Fp32ToFp16(float f) {
  const uint32_t bits = FloatToBits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: value = abs_float * 2^24 rounded to an integer.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t q = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float Bf16ToFp32(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even, NaN kept quiet (as ggml does).
inline uint16_t Fp32ToBf16(float f) {
  uint32_t bits = FloatToBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace hetero

#endif  // HETERO_RUNTIME_FP16_H_
