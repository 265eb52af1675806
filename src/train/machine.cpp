#include "ddp/train/machine.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace ddp::train {

bool CpuInfo::has(const std::string& flag) const { return std::find(flags.begin(), flags.end(), flag) != flags.end(); }

CpuInfo parse_cpuinfo(const std::string& text, int cores) {
  CpuInfo cpu;
  cpu.model = "unknown";
  cpu.cores = cores;
  std::istringstream in(text);
  bool have_model = false, have_flags = false;
  for (std::string line; std::getline(in, line) && !(have_model && have_flags);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (key == "model name" && !have_model) {
      cpu.model = value;
      have_model = true;
    } else if (key == "flags" && !have_flags) {
      std::istringstream words(value);
      for (std::string f; words >> f;) cpu.flags.push_back(f);
      have_flags = true;
    }
  }
  return cpu;
}

CpuInfo cpu_info() {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream text;
  text << f.rdbuf();
  return parse_cpuinfo(text.str(), static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

std::string describe(const CpuInfo& cpu) {
  auto join = [](const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
  };
  std::vector<std::string> have, missing;
  for (const char* f : {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"})
    (cpu.has(f) ? have : missing).push_back(f);
  std::string out = cpu.model + ", " + std::to_string(cpu.cores) + (cpu.cores == 1 ? " core (" : " cores (");
  out += join(have, " ");
  if (!missing.empty()) out += (have.empty() ? "no " : "; no ") + join(missing, ", ");
  return out + ")";
}

}  // namespace ddp::train
