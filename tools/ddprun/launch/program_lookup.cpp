#include "launch/program_lookup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun {

namespace {

// 0 when `path` is an executable regular file, else an errno value.
int check_executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (!S_ISREG(st.st_mode)) return EACCES;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

ProgramLookup find_program(const std::string& name, const char* path_env) {
  ProgramLookup out;
  if (name.find('/') != std::string::npos) {
    int err = check_executable(name);
    if (err == 0) {
      out.found = true;
      out.path = name;
    } else {
      out.exit_code = (err == ENOENT || err == ENOTDIR) ? 127 : 126;
      out.error = "cannot run program '" + name + "': " + std::strerror(err);
    }
    return out;
  }

  std::string dirs = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int first_error = 0;  // remembers e.g. EACCES of a non-executable match
  size_t start = 0;
  for (;;) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    int err = check_executable(candidate);
    if (err == 0) {
      out.found = true;
      out.path = candidate;
      return out;
    }
    if (err != ENOENT && err != ENOTDIR && first_error == 0) first_error = err;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (first_error != 0) {
    out.exit_code = 126;
    out.error = "cannot run program '" + name + "' found in PATH: " + std::strerror(first_error);
  } else {
    out.exit_code = 127;
    out.error = "program '" + name + "' not found in PATH";
  }
  return out;
}

}  // namespace ddprun
