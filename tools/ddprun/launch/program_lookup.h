// Finding the program to run the way execvp() does, before any child starts.
#pragma once

#include <string>

namespace ddprun {

struct ProgramLookup {
  bool found = false;
  std::string path;   // path to exec (when found)
  std::string error;  // one line naming the program (when not found)
  int exit_code = 0;  // 127: not found, 126: found but cannot be executed
};

// `name` with a '/' is used as is; otherwise each directory of `path_env`
// (colon separated, empty entry = current directory; "/usr/local/bin:/usr/bin:/bin"
// when null) is searched for an executable regular file.
ProgramLookup find_program(const std::string& name, const char* path_env);

}  // namespace ddprun
