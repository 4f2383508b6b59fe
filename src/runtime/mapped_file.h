// A read-only memory mapping of a whole file. Model weights are read in place from the
// mapping, never copied.
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
  // Maps `path` read-only. An empty file yields an empty span (nothing is mapped).
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Tells the kernel that the pages inside `range` (part of this mapping) will not be read
  // soon: they leave the process's resident set and are read again from the page cache if
  // touched. A hint only; ranges outside the mapping are ignored.
  void AdviseUnneeded(absl::Span<const uint8_t> range) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_MAPPED_FILE_H_
