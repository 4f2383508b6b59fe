// Early-return helpers for absl::Status / absl::StatusOr. Debian's Abseil (20220623) ships
// no status macros, so the project defines its own, prefixed to avoid clashes.
#ifndef HETERO_RUNTIME_STATUS_MACROS_H_
#define HETERO_RUNTIME_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HETERO_STATUS_CONCAT_INNER_(a, b) a##b
#define HETERO_STATUS_CONCAT_(a, b) HETERO_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define HETERO_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::absl::Status hetero_status_ = (expr);             \
    if (!hetero_status_.ok()) return hetero_status_;    \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise
// assigns the value to `lhs` (which may be a declaration, e.g. `auto x`).
#define HETERO_ASSIGN_OR_RETURN(lhs, rexpr) \
  HETERO_ASSIGN_OR_RETURN_IMPL_(HETERO_STATUS_CONCAT_(hetero_statusor_, __LINE__), lhs, rexpr)

#define HETERO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // HETERO_RUNTIME_STATUS_MACROS_H_
