// Library-side logging entry point; see include/hetero/log.h for the user side.
#ifndef HETERO_RUNTIME_LOG_INTERNAL_H_
#define HETERO_RUNTIME_LOG_INTERNAL_H_

#include <string_view>

#include "hetero/log.h"

namespace hetero::internal {

// Sends `message` to the installed callback if `level` passes its threshold.
void Log(LogLevel level, std::string_view message);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_LOG_INTERNAL_H_
