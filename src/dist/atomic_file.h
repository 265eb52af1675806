// Replacing a file whole or not at all, the one way every layer writes files others read (checkpoints, shards,
// manifests, timelines, reports): a temporary beside the file (<path>.tmp.<pid>.<n>), written, fsync'd, renamed over
// the file, its directory fsync'd. Until commit() renames it, any failure or an AtomicFile destroyed uncommitted
// removes the temporary and leaves the file as it was.
//
//   ddp::detail::write_file_atomic("run/latest", name);          // small files in one call
//   ddp::detail::AtomicFile f("shard-3.bin");                     // or streamed
//   f.write(header, sizeof header); f.write(data, n); f.commit();
//
// Errors: ddp::Error "cannot write <path>: <step> <temporary>: <errno text> (<what to do>)", step one of creating,
// writing, fsync of, closing, renaming; a directory that cannot be synced after the rename says the file is written but
// may not survive a crash.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace ddp::detail {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates the temporary
  ~AtomicFile();                          // uncommitted: the temporary is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void commit();  // fsync, close, rename over the path, fsync the directory
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& step);
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, const void* data, size_t size);

// " (free some space or write elsewhere)" and the like for a write's errno; empty where there is nothing to say.
std::string io_error_hint(int err);
inline void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, contents.data(), contents.size());
}

}  // namespace ddp::detail
