#include "checkpoint_test_util.h"

#include "ddp/dist/errors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ddp::testing {

NetImpl::NetImpl() {
  conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)));
  bn = register_module("bn", torch::nn::BatchNorm2d(2));
  head = register_module(
      "head", torch::nn::Sequential(torch::nn::Linear(8, 4), torch::nn::ReLU(), Inner(torch::nn::Linear(4, 3))));
  scale = register_parameter("scale", at::ones({3}));
  shift = register_buffer("shift", at::zeros({3}));
}

at::Tensor NetImpl::forward(at::Tensor x) { return head->forward(bn(conv(x)).flatten(1)) * scale + shift; }

const std::vector<std::string>& net_keys() {
  static const std::vector<std::string> keys = {"scale",           "shift",          "conv.weight",
                                                "conv.bias",       "bn.weight",      "bn.bias",
                                                "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                                                "head.0.weight",   "head.0.bias",    "head.2.0.weight",
                                                "head.2.0.bias"};
  return keys;
}

TempDir::TempDir() {
  std::string tmpl = ::testing::TempDir() + "ddp-ckpt-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kByte:
      return "uint8";
    default:
      throw std::runtime_error("reference files: unsupported dtype");
  }
}

at::ScalarType dtype_of(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  if (name == "int64") return at::kLong;
  if (name == "uint8") return at::kByte;
  throw std::runtime_error("reference files: unknown dtype " + name);
}

}  // namespace

void write_ref(const std::string& stem, const RefTensors& tensors) {
  std::ofstream txt(stem + ".txt"), bin(stem + ".bin", std::ios::binary);
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor t = tensor.detach().contiguous();
    const size_t nbytes = t.numel() * t.element_size();
    txt << name << ' ' << dtype_name(t.scalar_type()) << ' ' << t.dim();
    for (int64_t d : t.sizes()) txt << ' ' << d;
    txt << ' ' << offset << ' ' << nbytes << '\n';
    bin.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
    offset += nbytes;
  }
}

std::map<std::string, at::Tensor> read_ref(const std::string& stem) {
  std::ifstream txt(stem + ".txt"), bin(stem + ".bin", std::ios::binary);
  if (!txt || !bin) throw std::runtime_error("cannot open reference " + stem + ".txt/.bin");
  const std::string data((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  std::string line;
  while (std::getline(txt, line)) {
    std::istringstream s(line);
    std::string name, dtype;
    int64_t ndim = 0;
    s >> name >> dtype >> ndim;
    std::vector<int64_t> sizes(static_cast<size_t>(ndim));
    for (auto& d : sizes) s >> d;
    size_t offset = 0, nbytes = 0;
    s >> offset >> nbytes;
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype_of(dtype)));
    if (nbytes != t.numel() * t.element_size() || offset + nbytes > data.size())
      throw std::runtime_error("reference " + stem + ": bad entry " + line);
    std::memcpy(t.data_ptr(), data.data() + offset, nbytes);
    out[name] = t;
  }
  return out;
}

std::string bitwise_difference(const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined() || !want.defined()) return "undefined tensor";
  if (got.scalar_type() != want.scalar_type())
    return std::string("dtype ") + c10::toString(got.scalar_type()) + " != " + c10::toString(want.scalar_type());
  if (got.sizes() != want.sizes()) return "shape " + c10::str(got.sizes()) + " != " + c10::str(want.sizes());
  const at::Tensor a = got.detach().contiguous(), b = want.detach().contiguous();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) != 0)
    return "values differ: " + c10::str(a.flatten().slice(0, 0, 4)) + " vs " + c10::str(b.flatten().slice(0, 0, 4));
  return "";
}

train::CheckpointContents interop_contents(at::Tensor& draw) {
  train::CheckpointContents c;
  c.epoch = 3;
  c.step = 12;
  c.rng = train::get_rng_state();
  draw = at::rand({5});
  c.config.insert("lr", 0.05);
  c.config.insert("name", std::string("interop"));
  c.config.insert("flag", true);
  c.sampler.insert("epoch", int64_t(3));
  c.sampler.insert("seed", int64_t(17));
  c.schedule.insert("warmup", 0.5);
  c.extra.insert("note", std::string("from C++"));
  return c;
}

std::pair<int, std::string> run_oracle(const std::string& args) {
  // DDP_ORACLE_PYTHON: the other LibTorch line's Python (checkpoint_crossline_test.sh), else this line's.
  const char* other = std::getenv("DDP_ORACLE_PYTHON");
  const std::string cmd =
      std::string(other && *other ? other : DDP_PYTHON) + " " + CHECKPOINT_ORACLE + " " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace ddp::testing
