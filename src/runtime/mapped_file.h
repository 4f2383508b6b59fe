// A whole model file in memory. By default it is read into private memory when opened
// (copy-on-open): a file truncated, rewritten or deleted afterwards cannot touch what the
// loaded model reads, and one that shrinks while being read is a clear error at load. (The
// pages of matrices a backend has repacked are given back, see AdviseUnneeded; only a later
// backend loading the same model would read those again.) A
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
  // Tells the kernel that the whole pages inside `range` will not be read again (a matrix a
  // backend has repacked): they leave the process's resident set. A mapping reads them back
  // from the page cache if touched. A copy replaces them with a mapping of the same bytes of
  // the file (still open), so a stray read still sees the right bytes, from the page cache;
  // only those pages then depend on the file staying as it was (a truncated file would fault
  // on them), and nothing is done if the file's size has changed since it was read. A hint
  // only; ranges outside the file are ignored.
  void AdviseUnneeded(absl::Span<const uint8_t> range) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, bool mapped, int fd = -1)
      : path_(std::move(path)), data_(data), size_(size), mapped_(mapped), fd_(fd) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
  bool mapped_;
  int fd_;  // a copy's file, kept open for AdviseUnneeded; -1 otherwise
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_MAPPED_FILE_H_
