#include "timeline_files.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ddp/errors.h"
#include "dist/atomic_file.h"

namespace ddp::timeline_files {

std::string rank_file(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

int merge(const std::string& path, int world, std::string* error) {
  using nlohmann::json;
  json all = json::array();
  int found = 0;
  for (int r = 0; r < world; ++r) {
    const std::string file = rank_file(path, r);
    std::ifstream in(file);
    if (!in) continue;
    try {
      json one;
      in >> one;
      for (auto& e : one.at("traceEvents")) all.push_back(std::move(e));
    } catch (const std::exception& e) {
      *error = file + " is not trace JSON (" + e.what() + ")";
      return -1;
    }
    ++found;
  }
  if (found == 0) return 0;
  try {
    ddp::detail::write_file_atomic(path,
                                   json{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}}.dump() + "\n");
  } catch (const Error& e) {
    *error = e.what();
    return -1;
  }
  return found;
}

}  // namespace ddp::timeline_files
