#pragma once

// The readers of model files, datasets and catalogs take a path, so a harness hands them its
// input as a file: one memfd, rewritten for every input, named by its /proc/self/fd path.
// Memory only, nothing left behind, and the reader opens it as it opens any regular file.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace brisk::fuzz {

class FuzzInputFile {
 public:
  FuzzInputFile() : fd_(memfd_create("brisk-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;
  ~FuzzInputFile() { ::close(fd_); }

  // Replaces the file's contents; returns the path to read them from.
  const std::string& hold(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t written = 0;
    while (written < size) {
      const ssize_t n = ::pwrite(fd_, data + written, size - written, off_t(written));
      if (n <= 0) std::abort();
      written += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace brisk::fuzz
