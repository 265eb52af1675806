// What machine a run or a benchmark ran on, for logs and benchmark tables:
//
//   ddp::train::CpuInfo cpu = ddp::train::cpu_info();
//   std::cout << ddp::train::describe(cpu);
//   // Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores (avx2 avx512f avx512_vnni; no avx512_bf16, amx_bf16)
#pragma once
#include <string>
#include <vector>

namespace ddp::train {

struct CpuInfo {
  std::string model;               // /proc/cpuinfo's "model name"
  int cores = 0;                   // online logical CPUs
  std::vector<std::string> flags;  // every flag of the first CPU
  bool has(const std::string& flag) const;
};

// Reads /proc/cpuinfo (model "unknown" and no flags where it cannot).
CpuInfo cpu_info();
// Parses the text of a /proc/cpuinfo.
CpuInfo parse_cpuinfo(const std::string& text, int cores);

// The flags that decide kernel speed here, each present or listed as missing:
// avx2, avx512f, avx512_vnni, avx512_bf16, amx_bf16.
std::string describe(const CpuInfo& cpu);

}  // namespace ddp::train
