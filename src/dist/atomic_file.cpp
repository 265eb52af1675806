// AtomicFile: write beside, fsync, rename over, fsync the directory (see atomic_file.h).
#include "dist/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ddp/errors.h"

namespace ddp::detail {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("creating");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& step) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error("cannot write " + path_ + ": " + step + " " + tmp_ + ": " + std::strerror(err) + io_error_hint(err));
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd_, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      fail("writing");
    }
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync of");
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("closing");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("renaming");
  committed_ = true;
  // The rename is durable once the directory is synced.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || (::fsync(dfd) != 0 && errno != EINVAL)) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    throw Error(path_ + ": written, but syncing its directory " + dir +
                " failed (the file may not survive a crash): " + std::strerror(err));
  }
  ::close(dfd);
}

std::string io_error_hint(int err) {
  if (err == EACCES || err == EPERM || err == EROFS) return " (choose a writable location or fix the permissions)";
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return " (free some space or write elsewhere)";
  if (err == ENOTDIR || err == EEXIST) return " (a file is in the way of a directory on that path)";
  if (err == ENOENT) return " (its directory does not exist)";
  return "";
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicFile f(path);
  f.write(data, size);
  f.commit();
}

}  // namespace ddp::detail
