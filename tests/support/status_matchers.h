// gmock matchers for absl::Status and absl::StatusOr (Debian's Abseil ships none).
#ifndef HETERO_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define HETERO_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace hetero::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// Matches a Status or StatusOr whose code is `code` and whose message matches
// `message_matcher` (any string matcher, e.g. HasSubstr("...")).
MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()), result_listener);
}

MATCHER_P(StatusIs, code, std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.ok();
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_STATUS_MATCHERS_H_
