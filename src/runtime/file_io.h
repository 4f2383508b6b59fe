// Whole-file reads and writes for the library's own small files (session state, expert
// usage): a read bounded in size, a write that lands whole or not at all. Errors name the
// path.
#ifndef HETERO_RUNTIME_FILE_IO_H_
#define HETERO_RUNTIME_FILE_IO_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hetero::internal {

// The file's bytes; NotFound when it is missing, not a regular file or unreadable,
// InvalidArgument when it is larger than `max_bytes`.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes);

// Writes `bytes` to a temporary file beside `path` (named by process and call, so that
// concurrent writers do not share it) and renames it over `path`. NotFound when the
// directory does not exist, ResourceExhausted for a full disk, else InvalidArgument.
absl::Status WriteFileWhole(const std::string& path, std::string_view bytes);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_FILE_IO_H_
