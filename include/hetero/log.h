// Logging. The library never writes to stdout or stderr itself: messages go to the
// callback installed here, and are dropped when none is installed.
#ifndef HETERO_LOG_H_
#define HETERO_LOG_H_

#include <functional>
#include <string_view>

#include "hetero/export.h"

namespace hetero {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using LogCallback = std::function<void(LogLevel level, std::string_view message)>;

// Installs `callback` for messages at `min_level` or above (an empty callback silences the
// library). Thread-safe; the callback may be called from any thread and must be too.
HETERO_EXPORT void SetLogCallback(LogCallback callback, LogLevel min_level = LogLevel::kInfo);

// A ready-made callback that writes "hetero: <level>: <message>" lines to stderr.
HETERO_EXPORT void LogToStderr(LogLevel level, std::string_view message);

}  // namespace hetero

#endif  // HETERO_LOG_H_
