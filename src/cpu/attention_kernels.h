// Decode attention kernels: AVX-512 (attention_avx512.cc, built with AVX-512 flags, so this
// header stays free of library headers whose inline code that file would otherwise emit
// with AVX-512 instructions), AVX2 (attention_avx2.cc, likewise) and portable
// (attention.cc).
#ifndef HETERO_CPU_ATTENTION_KERNELS_H_
#define HETERO_CPU_ATTENTION_KERNELS_H_

#include <cstddef>

namespace hetero {
namespace internal {
// One decode step of the `group` query heads that share one KV head over n_keys keys:
// key j is at blocks[i / block_tokens] + k_offset + (i % block_tokens) * head_dim with
// i = first_key + j (values at v_offset). `q` and `out` hold group x head_dim floats.
struct DecodeQuery {
  const float* q;
  int group;
  int head_dim;  // a multiple of 16 for the AVX-512 kernel
  int n_keys;
  int first_key;  // within blocks[0]: a sliding window starts mid-block
  const float* const* blocks;
  int block_tokens;
  size_t k_offset;
  size_t v_offset;
  float scale;
  // When set, the kernel leaves `out` unnormalised (the sum over keys of e^(s - max) v) and
  // writes each query head's score maximum and sum of e^(s - max) here (group floats
  // each): one part of a row's keys, merged with its other parts by MergeAttentionParts.
  float* part_max = nullptr;
  float* part_sum = nullptr;
  // When set (AVX-512 and AVX2 kernels), the keys are read transposed from here instead:
  // key j's dimension d at kt[d * kt_ld + j] (TransposeKeysAvx512 / TransposeKeysAvx2), with
  // at least 16 readable columns past the last key. The scores are bit-identical either
  // way, so which form a row was given never shows in its result.
  const float* kt = nullptr;
  size_t kt_ld = 0;
};
// Keys first_key .. first_key + n_keys - 1 of one KV head (blocks, block_tokens, k_offset
// as in DecodeQuery) transposed into kt: key first_key + j's dimension d at kt[d * ld + j]
// (columns 0 .. n_keys - 1 of head_dim rows of stride ld).
void TransposeKeysAvx512(const float* const* blocks, int block_tokens, size_t k_offset, int head_dim, int first_key,
                         int n_keys, float* kt, size_t ld);
// `scores`: group x round_up(n_keys, 16) floats of scratch.
void AttendDecodeAvx512(const DecodeQuery& query, float* scores, float* out);
void AttendDecodePortable(const DecodeQuery& query, float* scores, float* out);
// The same with AVX2 and FMA (attention_avx2.cc; head_dim a multiple of 8).
void AttendDecodeAvx2(const DecodeQuery& query, float* scores, float* out);
// TransposeKeysAvx512's result with AVX2 (8 x 8 squares transposed in registers).
void TransposeKeysAvx2(const float* const* blocks, int block_tokens, size_t k_offset, int head_dim, int first_key,
                       int n_keys, float* kt, size_t ld);
// Which kernels a process attends with (Attention::Kernels decides, once per shape): the
// per-row kernel and MergeAttentionParts' weighted sum of the parts (portable code or fused
// multiply-adds: their bits differ, so a process uses one set).
enum class AttentionKernels { kPortable, kAvx2, kAvx512 };
// The attention of `group` query heads over a row's keys from `parts` parts of them, each
// computed alone with part_max/part_sum set: part p's unnormalised outputs at
// outs + p * group * head_dim, its maxima and sums at max + p * group, sum + p * group.
// Merged in part order, so a row's result does not depend on which thread ran which part.
// kAvx2 / kAvx512 (the CPU checked by the caller): by WeightedPartsAvx2 / WeightedPartsAvx512.
void MergeAttentionParts(int parts, int group, int head_dim, const float* outs, const float* max, const float* sum,
                         float* out, AttentionKernels kernels = AttentionKernels::kPortable);
// MergeAttentionParts' weighted sum in AVX-512 (head_dim a multiple of 16) or AVX2 (of 8)
// fused multiply-adds, one chain per column in part order:
// out = sum over p of weights[p] * outs[p * part_stride ..].
void WeightedPartsAvx512(int parts, const float* weights, const float* outs, size_t part_stride, int head_dim,
                         float* out);
void WeightedPartsAvx2(int parts, const float* weights, const float* outs, size_t part_stride, int head_dim,
                       float* out);
}  // namespace internal

}  // namespace hetero

#endif  // HETERO_CPU_ATTENTION_KERNELS_H_
