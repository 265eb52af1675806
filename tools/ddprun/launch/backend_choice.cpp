#include "launch/backend_choice.h"

#include <elf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "ddp/dist/launch_env.h"
#include "launch/program_lookup.h"

namespace ddprun {

LaunchBackend choose_backend(const Options& o, const MpiProbe& p) {
  LaunchBackend c;
  const bool several_nodes = o.rdzv_backend == Rdzv::kC10d || o.nnodes > 1;
  if (o.backend != Backend::kAuto) {
    c.backend = o.backend;
    c.reason = std::string("--backend ") + backend_name(o.backend);
  } else if (p.inherited == "gloo" || p.inherited == "mpi") {
    c.backend = p.inherited == "mpi" ? Backend::kMpi : Backend::kGloo;
    c.reason = std::string(ddp::launch_env::kBackend.name) + "=" + p.inherited + " in the environment";
    if (c.backend == Backend::kMpi && several_nodes)
      c.error =
          "DDP_BACKEND=mpi in the environment, but ddprun's mpi mode runs one node only (this job has " +
          std::string(o.rdzv_backend == Rdzv::kC10d ? "the c10d rendezvous" : "--nnodes " + std::to_string(o.nnodes)) +
          "); unset DDP_BACKEND or pass --backend gloo";
  } else if (o.recovery == Recovery::kInplace) {
    c.reason = "auto: --recovery inplace: a gloo group can be rebuilt without the rank it lost";
  } else if (o.rdzv_backend == Rdzv::kC10d) {
    c.reason = "auto: the c10d rendezvous (elastic, several nodes): mpirun's world is fixed at launch";
  } else if (o.nnodes > 1) {
    c.reason = "auto: " + std::to_string(o.nnodes) +
               " nodes: across hosts mpirun needs its own launch agent "
               "(ssh); gloo needs only TCP";
  } else if (!p.program_links_ddp) {
    c.reason = "auto: the program does not link ddp (a libddp_* library), so only RANK/MASTER_ADDR can reach it";
  } else if (p.gpus > 0 && p.nccl_built) {
    c.reason = "auto: " + std::to_string(p.gpus) + " GPU" + (p.gpus == 1 ? "" : "s") +
               " on this node: a rank on a GPU takes nccl, one on the CPU gloo";
  } else if (!p.built) {
    c.reason = "auto: this build has no mpi backend";
  } else if (!p.mpirun_found) {
    c.reason = "auto: mpirun not found on PATH (apt-get install openmpi-bin for the faster mpi backend)";
  } else {
    c.backend = Backend::kMpi;
    c.reason = "auto: one node, " + (p.version.empty() ? std::string("mpirun found") : p.version);
  }
  const bool auto_gloo = o.backend == Backend::kAuto && p.inherited != "gloo" && p.inherited != "mpi";
  if (auto_gloo && c.backend == Backend::kGloo) c.on_gpu = Backend::kNccl;
  return c;
}

bool elf_needs(const std::string& path, const std::string& prefix) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof(eh))) return false;
  if (std::string(reinterpret_cast<char*>(eh.e_ident), 4) != ELFMAG || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum > 4096)
    return false;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  in.seekg(static_cast<std::streamoff>(eh.e_shoff));
  if (!in.read(reinterpret_cast<char*>(sections.data()), sections.size() * sizeof(Elf64_Shdr))) return false;
  auto read = [&in](const Elf64_Shdr& s) {
    std::string bytes(s.sh_size < (64u << 20) ? s.sh_size : 0, '\0');
    in.seekg(static_cast<std::streamoff>(s.sh_offset));
    if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) bytes.clear();
    return bytes;
  };
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sections.size()) continue;
    const std::string dyn = read(s), strtab = read(sections[s.sh_link]);
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn.size(); off += sizeof(Elf64_Dyn)) {
      const auto* d = reinterpret_cast<const Elf64_Dyn*>(dyn.data() + off);
      if (d->d_tag == DT_NULL) break;
      if (d->d_tag == DT_NEEDED && d->d_un.d_val < strtab.size() &&
          strtab.compare(d->d_un.d_val, prefix.size(), prefix) == 0)
        return true;
    }
  }
  return false;
}

namespace {

// "OpenMPI 4.1.4" from "mpirun (Open MPI) 4.1.4"; empty if mpirun says otherwise.
std::string mpirun_version(const std::string& mpirun) {
  std::string command = "'" + mpirun + "' --version 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char line[256] = {0};
  const bool got = std::fgets(line, sizeof(line), pipe) != nullptr;
  ::pclose(pipe);
  if (!got) return "";
  std::string text(line);
  const std::string tag = "(Open MPI) ";
  const size_t at = text.find(tag);
  if (at == std::string::npos) return "";
  std::string version = text.substr(at + tag.size());
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ')) version.pop_back();
  return "OpenMPI " + version;
}

// NVIDIA's device files, as the driver makes them; CUDA_VISIBLE_DEVICES="" or -1 hides them all.
[[maybe_unused]] int count_gpus() {
  const auto visible = ddp::launch_env::process()(ddp::launch_env::kCudaVisibleDevices.name);
  if (visible && (visible->empty() || *visible == "-1")) return 0;
  int n = 0;
  while (n < 64 && access(("/dev/nvidia" + std::to_string(n)).c_str(), F_OK) == 0) ++n;
  return n;
}

}  // namespace

MpiProbe probe_mpi(const Options& options, const std::string& program_path) {
  MpiProbe p;
#ifdef DDP_HAVE_MPI
  p.built = true;
#endif
  p.inherited = ddp::launch_env::text(ddp::launch_env::kBackend).value_or("");
  if (options.backend != Backend::kAuto) return p;
#ifdef DDP_HAVE_NCCL
  p.nccl_built = true;
  p.gpus = count_gpus();
#endif
  p.program_links_ddp = elf_needs(program_path, "libddp_");  // any layer: each links libddp_dist
  ProgramLookup mpirun = find_program("mpirun", std::getenv("PATH"));
  p.mpirun_found = mpirun.found;
  p.mpirun_path = mpirun.path;
  // mpirun --version only when it decides something (it takes ~50 ms).
  MpiProbe would = p;
  would.version = "x";
  if (p.mpirun_found && choose_backend(options, would).backend == Backend::kMpi)
    p.version = mpirun_version(p.mpirun_path);
  return p;
}

}  // namespace ddprun
