#include "src/runtime/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace hetero::internal {
namespace {

absl::Status PathError(int error, const std::string& what) {
  const std::string why = absl::StrCat(what, ": ", std::strerror(error));
  if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(why);
  if (error == ENOSPC) return absl::ResourceExhaustedError(why);
  return absl::InvalidArgumentError(why);
}

}  // namespace

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(::fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {  // a directory, a device
    std::fclose(f);
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "' (not a regular file)"));
  }
  if (static_cast<uintmax_t>(st.st_size) > max_bytes) {
    std::fclose(f);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is larger than ", max_bytes, " bytes"));
  }
  std::string bytes;
  char chunk[1 << 16];
  size_t got = 0;
  while (bytes.size() <= max_bytes && (got = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.append(chunk, got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  if (bytes.size() > max_bytes) {  // it grew while read
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is larger than ", max_bytes, " bytes"));
  }
  return bytes;
}

absl::Status WriteFileWhole(const std::string& path, std::string_view bytes) {
  static std::atomic<uint64_t> writes{0};
  const std::string temporary = absl::StrCat(path, ".tmp.", getpid(), ".", writes++);
  std::FILE* f = std::fopen(temporary.c_str(), "wb");
  if (f == nullptr) return PathError(errno, absl::StrCat("cannot write '", path, "'"));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int write_error = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(temporary.c_str());
    return PathError(written ? errno : write_error, absl::StrCat("writing '", temporary, "' failed"));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    // The directory is there (the temporary file was made in it): `path` itself cannot be
    // replaced (a directory, say).
    return absl::InvalidArgumentError(absl::StrCat("cannot replace '", path, "': ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace hetero::internal
