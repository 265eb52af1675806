// dist/atomic_file.h: a file replaced whole or not at all (failed writes: tests/train/test_checkpoint_files.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ddp/errors.h"
#include "dist/atomic_file.h"

namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("ddp-atomic-" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
  std::string read(const std::string& name) const {
    std::ifstream in(path / name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  size_t entries() const { return std::distance(fs::directory_iterator(path), fs::directory_iterator()); }
};

TEST(AtomicFile, CommitReplacesTheFileWhole) {
  Dir d;
  const std::string file = (d.path / "f.bin").string();
  ddp::detail::write_file_atomic(file, std::string("old"));
  ddp::detail::AtomicFile f(file);
  f.write("new ", 4);
  EXPECT_EQ(d.read("f.bin"), "old");  // not yet
  f.write("contents", 8);
  f.commit();
  EXPECT_EQ(d.read("f.bin"), "new contents");
  EXPECT_EQ(d.entries(), 1u);  // no temporary left
}

TEST(AtomicFile, UncommittedLeavesTheOldFileAndNoTemporary) {
  Dir d;
  const std::string file = (d.path / "f.bin").string();
  ddp::detail::write_file_atomic(file, std::string("old"));
  {
    ddp::detail::AtomicFile f(file);
    f.write("half", 4);
    EXPECT_EQ(d.entries(), 2u);  // the file and its temporary
  }                              // an exception between writes ends here too
  EXPECT_EQ(d.read("f.bin"), "old");
  EXPECT_EQ(d.entries(), 1u);
}

TEST(AtomicFile, ErrorNamesTheFileTheStepAndWhatToDo) {
  Dir d;
  ddp::detail::write_file_atomic((d.path / "plain").string(), std::string("x"));
  const std::string file = (d.path / "plain" / "f.bin").string();  // a file where a directory should be
  try {
    ddp::detail::write_file_atomic(file, std::string("y"));
    FAIL() << "expected ddp::Error";
  } catch (const ddp::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot write " + file + ": creating " + file + ".tmp."), std::string::npos) << msg;
    EXPECT_NE(msg.find("Not a directory (a file is in the way of a directory on that path)"), std::string::npos) << msg;
  }
}

}  // namespace
