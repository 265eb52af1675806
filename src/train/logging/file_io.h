// POSIX file helpers shared by the log writers; every failure is a ddp::Error
// that names the file and the errno text.
#pragma once
#include <cstddef>
#include <string>

namespace ddp::train::detail {

// Creates `dir` and its missing parents (mkdir -p). `who` starts the message.
void make_dirs(const std::string& dir, const std::string& who);

// The directory part of `path` ("" when it has none).
std::string parent_dir(const std::string& path);

// open(2) with O_WRONLY | O_CLOEXEC | `flags`, mode 0644; returns the fd, or -1
// with errno EEXIST when O_EXCL was asked and the file exists.
int open_file(const std::string& path, int flags, const std::string& who);

// Writes all n bytes (retrying short writes and EINTR).
void write_all(int fd, const char* data, size_t n, const std::string& path, const std::string& who);

// close(2), reporting a failure (NFS and some file systems report write errors here).
void close_file(int fd, const std::string& path, const std::string& who);

// "<who>: cannot <what> '<path>': <strerror(err)>"
[[noreturn]] void throw_io_error(const std::string& who, const std::string& what, const std::string& path, int err);

}  // namespace ddp::train::detail
