// A whole model file in memory. By default it is read into private memory when opened
// (copy-on-open): a file truncated, rewritten or deleted afterwards cannot touch the
// loaded model, and one that shrinks while being read is a clear error at load. A
// memory mapping would share the page cache and start faster, but the kernel answers a
// read of a mapped page past a truncated file's end with SIGBUS, which would kill the host
// process; HETERO_MAP_MODEL=1 chooses the mapping anyway, for files known not to change.
#ifndef HETERO_RUNTIME_MAPPED_FILE_H_
#define HETERO_RUNTIME_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetero {

class MappedFile {
 public:
  // Reads (or, with HETERO_MAP_MODEL=1, maps) `path`. An empty file yields an empty span.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  bool mapped() const { return mapped_; }
  // Mapped files only: tells the kernel that the pages inside `range` will not be read
  // soon: they leave the process's resident set and are read again from the page cache if
  // touched. A hint only; ranges outside the file are ignored. (A copy keeps its pages:
  // freed private pages would read back as zeros.)
  void AdviseUnneeded(absl::Span<const uint8_t> range) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, bool mapped)
      : path_(std::move(path)), data_(data), size_(size), mapped_(mapped) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
  bool mapped_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_MAPPED_FILE_H_
