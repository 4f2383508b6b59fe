// The relative L2 distance the backend tests compare logits by: |got - want| / |want|, in
// float64.
#ifndef HETERO_TESTS_SUPPORT_RELATIVE_L2_H_
#define HETERO_TESTS_SUPPORT_RELATIVE_L2_H_

#include <algorithm>
#include <cmath>

#include "absl/types/span.h"

namespace hetero::testing {

inline double RelativeL2(absl::Span<const float> got, absl::Span<const float> want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_RELATIVE_L2_H_
