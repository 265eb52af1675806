// The C++ standard library's functions resolve to libstdc++.so.6, not to the private copies that PyPI's
// LibTorch exports (libtorch_cpu.so: 142 std::filesystem functions; 2.11's libtorch.so: 64 more, built
// against another libstdc++). A binary listing libtorch*.so before libstdc++.so.6 in its NEEDED entries
// binds to those copies, and 2.11's crash in std::filesystem::remove_all (FSDP's sharded checkpoints).
// ddp::torch links libstdc++ first, for ddp's binaries and for every consumer of ddp::torch.
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace {

std::string library_of(void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "(no library)";
  return info.dli_fname;
}

TEST(LinkOrder, StdFilesystemComesFromLibstdcxx) {
  // LibTorch is in the process (with --as-needed an unused one would not be): its copies could bind.
  EXPECT_EQ(at::ones({3}).sum().item<double>(), 3.0);
  ASSERT_NE(library_of(reinterpret_cast<void*>(&at::_ops::ones::call)).find("libtorch_cpu"), std::string::npos);
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&);
  using Status = std::filesystem::file_status (*)(const std::filesystem::path&);
  RemoveAll remove_all = &std::filesystem::remove_all;  // two functions compiled into libstdc++.so, not inline
  Status status = &std::filesystem::status;
  for (auto [name, fn] : {std::pair{"remove_all", reinterpret_cast<void*>(remove_all)},
                          std::pair{"status", reinterpret_cast<void*>(status)}}) {
    const std::string lib = library_of(fn);
    EXPECT_NE(lib.find("libstdc++.so"), std::string::npos) << "std::filesystem::" << name << " resolves to " << lib;
  }
}

TEST(LinkOrder, RemoveAllRemovesATree) {  // what crashed under 2.11 with the wrong binding
  const auto root = std::filesystem::temp_directory_path() / ("ddp-remove-all-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f.bin") << "x";
  std::ofstream(root / "g.bin") << "y";
  EXPECT_EQ(std::filesystem::remove_all(root), 5u);  // f.bin, b, a, g.bin and root
  EXPECT_FALSE(std::filesystem::exists(root));
}

}  // namespace
