// The element-wise and attention steps of the transformer on the CPU, in f32.
#ifndef HETERO_CPU_CPU_OPS_H_
#define HETERO_CPU_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "hetero/model.h"

namespace hetero {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `n`.
void RmsNorm(const float* x, const float* weight, int rows, int n, float eps, float* out);

// The cos and sin of every rotated pair's angle at each row's position, times the attention
// factor (rows x rope_dim / 2 each): what Rope::Apply multiplies by, computed once for a
// forward pass and used by every layer that shares the Rope (the angles in double, each
// row's once rather than once per layer and per q and k).
struct RopeAngles {
  std::vector<float> cos, sin;
};

// Rotary position embedding, in place, on `rows` rows of `heads` x `head_dim` values at the
// positions given to Angles(). Normal style rotates pairs (2i, 2i+1), NeoX pairs (i, i + d/2),
// over the first rope_dim dimensions, with a layer's base and linear factor, the model's
// per-pair factors (empty: none) and attention factor (scales the rotated dimensions).
class Rope {
 public:
  Rope(const ModelConfig& config, double base, double linear_factor, const std::vector<float>& freq_factors,
       float attn_factor);
  RopeAngles Angles(const int32_t* positions, int rows) const;
  // `angles` from Angles() over the same rows.
  void Apply(float* x, int rows, int heads, const RopeAngles& angles) const;
  // The angle per position of each rotated pair (src/runtime/rope.h).
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  int head_dim_;
  int rope_dim_;
  bool neox_;
  float attn_factor_;
  std::vector<double> inv_freq_;  // per rotated pair, scaling and factors folded in
};

// gate[i] = silu(gate[i]) * up[i].
void SiluMul(float* gate, const float* up, size_t count);
// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form (Gemma's GeGLU).
void GeluTanhMul(float* gate, const float* up, size_t count);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, size_t count);
// x[i] += scale * y[i].
void AddScaledInPlace(float* x, const float* y, float scale, size_t count);
// x[i] *= scale.
void ScaleInPlace(float* x, float scale, size_t count);

}  // namespace hetero

#endif  // HETERO_CPU_CPU_OPS_H_
