#include "src/runtime/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/runtime/test_hooks.h"

namespace hetero {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open '", path, "'"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return std::unique_ptr<MappedFile>(new MappedFile(path, nullptr, 0, false));
  }
  const char* map_env = std::getenv("HETERO_MAP_MODEL");
  const bool map = map_env != nullptr && std::string_view(map_env) == "1";
  if (map) {
    void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (data == MAP_FAILED) return ErrnoStatus(err, absl::StrCat("cannot map '", path, "'"));
    return std::unique_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(data), size, true));
  }

  // Copy-on-open: private anonymous pages (munmap frees them like a mapping), filled by read.
  void* memory = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot allocate ", size, " bytes for '", path, "'"));
  }
  ::madvise(memory, size, MADV_HUGEPAGE);  // fewer page faults while filling it
  auto* bytes = static_cast<uint8_t*>(memory);
  const std::shared_ptr<const internal::TestHooks> hooks = internal::CurrentTestHooks();
  constexpr size_t kChunk = size_t{8} << 20;
  size_t done = 0;
  absl::Status status;
  while (done < size) {
    const ssize_t got = ::read(fd, bytes + done, std::min(kChunk, size - done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      status = ErrnoStatus(errno, absl::StrCat("cannot read '", path, "'"));
      break;
    }
    if (got == 0) {
      status = absl::DataLossError(absl::StrCat("'", path, "' shrank while it was being read: ", done, " of ", size,
                                                " bytes were there (was it truncated or rewritten?)"));
      break;
    }
    done += static_cast<size_t>(got);
    if (hooks != nullptr && hooks->model_file_read) hooks->model_file_read(done, size);
  }
  // A file that grew or was replaced in place while being read is no better.
  if (status.ok() && (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size)) {
    status = absl::DataLossError(absl::StrCat("'", path, "' changed size while it was being read (", size, " bytes, now ",
                                              static_cast<long long>(st.st_size), ")"));
  }
  if (!status.ok()) {
    ::close(fd);
    ::munmap(memory, size);
    return status;
  }
  ::mprotect(memory, size, PROT_READ);  // weights are read-only from here on
  return std::unique_ptr<MappedFile>(new MappedFile(path, bytes, size, false, fd));
}

void MappedFile::AdviseUnneeded(absl::Span<const uint8_t> range) const {
  if (data_ == nullptr || range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only: neighbours may still be in use.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
  if (end <= begin) return;
  if (mapped_) {
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    return;
  }
  struct stat st;
  if (fd_ < 0 || ::fstat(fd_, &st) != 0 || static_cast<size_t>(st.st_size) != size_) return;
  // The copy starts page-aligned at file offset 0, so address and file offset agree per page.
  const off_t offset = static_cast<off_t>(begin - reinterpret_cast<uintptr_t>(data_));
  // Mapped aside first, then moved over the copy's pages in one step: on any failure the
  // copy stays as it was.
  void* fresh = ::mmap(nullptr, end - begin, PROT_READ, MAP_PRIVATE, fd_, offset);
  if (fresh == MAP_FAILED) return;
  if (::mremap(fresh, end - begin, end - begin, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(begin)) ==
      MAP_FAILED) {
    ::munmap(fresh, end - begin);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace hetero
