// Constrained decoding hook of the device worker: a job may carry a TokenConstraint, which
// says which next tokens keep the output valid. The worker samples as usual, and only when
// the sampled token is not allowed masks the logits and samples again, which draws from
// exactly the masked distribution while paying for a full mask only on those steps.
#ifndef HETERO_RUNTIME_TOKEN_CONSTRAINT_H_
#define HETERO_RUNTIME_TOKEN_CONSTRAINT_H_

#include <cstdint>

#include "absl/types/span.h"

namespace hetero {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool Allows(int32_t token) = 0;
  // Sets the logits of tokens that are not allowed to -infinity; false when none is allowed.
  virtual bool Mask(absl::Span<float> logits) = 0;
  // The token was chosen (it is allowed).
  virtual void Accept(int32_t token) = 0;
  // Tokens the job may still generate (before each step), so that a constraint can steer
  // toward a complete output before the budget ends.
  virtual void SetBudget(int remaining_tokens) {}
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKEN_CONSTRAINT_H_
