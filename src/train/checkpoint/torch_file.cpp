// Reading torch.save files, writing files atomically; save_atomic and load_checkpoint.
#include "train/checkpoint/torch_format.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"

namespace ddp::train {
namespace detail {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Checks what can be said about the file before the zip reader sees it.
void check_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot read: " + errno_text(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a checkpoint file");
  if (st.st_size == 0) throw Error(path + ": is empty (an interrupted write, or not a checkpoint)");
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, "PK\x03\x04", 4) != 0)
    throw Error(path + ": not a zip archive as torch.save writes (a legacy torch.save file with "
                       "_use_new_zipfile_serialization=False, or not a PyTorch file at all)");
}

[[noreturn]] void abandon(int fd, const std::string& tmp, const std::string& path, const std::string& what) {
  const int err = errno;
  if (fd >= 0) ::close(fd);
  ::unlink(tmp.c_str());
  throw Error("cannot write " + path + ": " + what + ": " + errno_text(err));
}

}  // namespace

c10::IValue read_torch_file(const std::string& path) {
  check_file(path);
  verify_zip_records(path);
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (!reader.hasRecord("data.pkl")) throw Error(path + ": zip archive without data.pkl: not a torch.save file");
    auto record = reader.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(std::get<0>(record).get()), std::get<1>(record));
    const std::string fixed = rewrite_pickle_for_libtorch(pickle, path + " (data.pkl)");
    size_t pos = 0;
    auto read = [&](char* buf, size_t n) {
      n = std::min(n, fixed.size() - pos);
      std::memcpy(buf, fixed.data() + pos, n);
      pos += n;
      return n;
    };
    auto read_record = [&](const std::string& name) { return std::get<0>(reader.getRecord("data/" + name)); };
    torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::Device(c10::kCPU));
    unpickler.set_version(reader.version());
    return unpickler.parse_ivalue();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(path + ": not a readable torch.save file (truncated or corrupt?): " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(path + ": not a readable torch.save file (truncated or corrupt?): " + e.what());
  }
}

void write_file_atomic(const std::string& path, const char* data, size_t size) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write " + path + ": creating " + tmp + ": " + errno_text(errno));
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      abandon(fd, tmp, path, "writing " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) abandon(fd, tmp, path, "fsync of " + tmp);
  const int closed = ::close(fd);
  if (closed != 0) abandon(-1, tmp, path, "closing " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon(-1, tmp, path, "renaming " + tmp + " over it");
  // The rename is durable once the directory is synced.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || (::fsync(dfd) != 0 && errno != EINVAL)) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    throw Error(path + ": written, but syncing its directory " + dir + " failed (the file may not survive a crash): " +
                errno_text(err));
  }
  ::close(dfd);
}

}  // namespace detail

void save_atomic(const c10::IValue& obj, const std::string& path) {
  std::vector<char> bytes;
  try {
    bytes = detail::torch_save_bytes(obj, path);
  } catch (const c10::Error& e) {
    throw InvalidArgument(path + ": cannot serialise the object: " + e.what_without_backtrace());
  }
  detail::write_file_atomic(path, bytes.data(), bytes.size());
}

c10::IValue load_checkpoint(const std::string& path) { return detail::read_torch_file(path); }

}  // namespace ddp::train
