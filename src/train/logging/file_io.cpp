#include "train/logging/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/errors.h"
#include "dist/atomic_file.h"

namespace ddp::train::detail {

void throw_io_error(const std::string& who, const std::string& what, const std::string& path, int err) {
  throw Error(who + ": cannot " + what + " '" + path + "': " + std::strerror(err) + ddp::detail::io_error_hint(err));
}

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void make_dirs(const std::string& dir, const std::string& who) {
  if (dir.empty()) return;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw_io_error(who, "create directory", dir, ENOTDIR);
    return;
  }
  std::string parent = parent_dir(dir);
  if (!parent.empty() && parent != dir) make_dirs(parent, who);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw_io_error(who, "create directory", dir, errno);
  // EEXIST: another process made it meanwhile, or a non-directory is there.
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw_io_error(who, "create directory", dir, ENOTDIR);
}

int open_file(const std::string& path, int flags, const std::string& who) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == EEXIST && (flags & O_EXCL)) return -1;
    throw_io_error(who, "open", path, errno);
  }
  return fd;
}

void write_all(int fd, const char* data, size_t n, const std::string& path, const std::string& who) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_io_error(who, "write to", path, errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void close_file(int fd, const std::string& path, const std::string& who) {
  if (::close(fd) != 0 && errno != EINTR) throw_io_error(who, "close", path, errno);
}

}  // namespace ddp::train::detail
