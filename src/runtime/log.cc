#include <cstdio>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "src/runtime/sync.h"
#include "hetero/log.h"
#include "src/runtime/log_internal.h"

namespace hetero {
namespace {

struct LogSink {
  Mutex mutex;
  // Shared so a message in flight keeps its callback alive while another thread replaces it.
  std::shared_ptr<const LogCallback> callback ABSL_GUARDED_BY(mutex);
  LogLevel min_level ABSL_GUARDED_BY(mutex) = LogLevel::kInfo;
};

LogSink& Sink() {
  static LogSink* sink = new LogSink();  // never destroyed: logging may happen at exit
  return *sink;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void SetLogCallback(LogCallback callback, LogLevel min_level) {
  LogSink& sink = Sink();
  MutexLock lock(&sink.mutex);
  sink.callback = callback ? std::make_shared<const LogCallback>(std::move(callback)) : nullptr;
  sink.min_level = min_level;
}

void LogToStderr(LogLevel level, std::string_view message) {
  std::fprintf(stderr, "hetero: %s: %.*s\n", LevelName(level), static_cast<int>(message.size()),
               message.data());
}

namespace internal {

void Log(LogLevel level, std::string_view message) {
  std::shared_ptr<const LogCallback> callback;
  {
    LogSink& sink = Sink();
    MutexLock lock(&sink.mutex);
    if (sink.callback == nullptr || level < sink.min_level) return;
    callback = sink.callback;
  }
  (*callback)(level, message);
}

}  // namespace internal
}  // namespace hetero
