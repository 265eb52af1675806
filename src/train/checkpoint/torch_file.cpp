// Reading torch.save files; save_atomic and load_checkpoint.
#include "train/checkpoint/torch_format.h"

#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"
#include "dist/atomic_file.h"

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
    throw Error(path +
                ": not a zip archive as torch.save writes (a legacy torch.save file with "
                "_use_new_zipfile_serialization=False, or not a PyTorch file at all)");
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
    // One storage per record, however many tensors the pickle builds on it (tied weights, views), as torch.load
    // keeps them: the storage context hands the second reference the storage the first one read.
    torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::Device(c10::kCPU),
                                    /*use_storage_device=*/false, torch::jit::Unpickler::defaultTypeParser,
                                    std::make_shared<torch::jit::DeserializationStorageContext>());
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

}  // namespace detail

void save_atomic(const c10::IValue& obj, const std::string& path) {
  std::vector<char> bytes;
  try {
    bytes = detail::torch_save_bytes(obj, path);
  } catch (const c10::Error& e) {
    throw InvalidArgument(path + ": cannot serialise the object: " + e.what_without_backtrace());
  }
  ddp::detail::write_file_atomic(path, bytes.data(), bytes.size());
}

c10::IValue load_checkpoint(const std::string& path) { return detail::read_torch_file(path); }

}  // namespace ddp::train
