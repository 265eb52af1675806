// The --backend auto rule (backend_choice.h), with mpirun's presence injected,
// and the ELF check it uses on real programs.
#include <gtest/gtest.h>

#include <fstream>

#include "launch/backend_choice.h"
#include "launcher_test_util.h"

using namespace ddprun;

namespace {

// One node, mpirun found, the mpi backend built, a ddp program: the case for mpi.
MpiProbe usable() {
  MpiProbe p;
  p.built = true;
  p.mpirun_found = true;
  p.mpirun_path = "/usr/bin/mpirun";
  p.version = "OpenMPI 4.1.4";
  p.program_links_ddp = true;
  return p;
}

TEST(BackendChoice, AutoPicksMpiOnOneNodeWithOpenMpi) {
  Options o;
  LaunchBackend c = choose_backend(o, usable());
  EXPECT_EQ(c.backend, Backend::kMpi);
  EXPECT_EQ(c.reason, "auto: one node, OpenMPI 4.1.4");
  EXPECT_EQ(c.error, "");
  o.max_restarts = 3;  // ddprun restarts mpirun: still mpi
  o.nproc_per_node = 3;
  EXPECT_EQ(choose_backend(o, usable()).backend, Backend::kMpi);
}

TEST(BackendChoice, AutoPicksGlooWithoutMpirun) {
  MpiProbe p = usable();
  p.mpirun_found = false;
  LaunchBackend c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "auto: mpirun not found on PATH (apt-get install openmpi-bin for the faster mpi backend)");
}

TEST(BackendChoice, AutoPicksGlooWithoutTheMpiBackend) {
  MpiProbe p = usable();
  p.built = false;
  LaunchBackend c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "auto: this build has no mpi backend");
}

TEST(BackendChoice, AutoPicksGlooForAProgramWithoutDdp) {
  MpiProbe p = usable();
  p.program_links_ddp = false;  // e.g. python3 or a shell script: they read RANK, which mpirun cannot set per rank
  LaunchBackend c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason,
            "auto: the program does not link ddp (a libddp_* library), so only RANK/MASTER_ADDR can reach it");
}

TEST(BackendChoice, AutoPicksGlooAcrossNodes) {
  Options o;
  o.nnodes = 2;
  LaunchBackend c = choose_backend(o, usable());
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "auto: 2 nodes: across hosts mpirun needs its own launch agent (ssh); gloo needs only TCP");
  Options e;
  e.rdzv_backend = Rdzv::kC10d;  // --backend mpi is refused here; auto picks what works
  e.max_restarts = 2;
  c = choose_backend(e, usable());
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "auto: the c10d rendezvous (elastic, several nodes): mpirun's world is fixed at launch");
  EXPECT_EQ(c.error, "");
}

TEST(BackendChoice, AutoLaunchesForNcclOnANodeWithGpus) {
  MpiProbe p = usable();
  p.nccl_built = true;
  p.gpus = 2;
  LaunchBackend c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kGloo);  // gloo's launch: the store nccl meets on; the rank's device decides
  EXPECT_EQ(c.reason, "auto: 2 GPUs on this node: a rank on a GPU takes nccl, one on the CPU gloo");
  EXPECT_EQ(c.on_gpu, Backend::kNccl);  // exported as DDP_BACKEND_ON_GPU: the rank's device decides
  p.nccl_built = false;                 // Debian's LibTorch: no nccl to take
  EXPECT_EQ(choose_backend(Options(), p).backend, Backend::kMpi);
  p.nccl_built = true;
  p.gpus = 0;
  EXPECT_EQ(choose_backend(Options(), p).backend, Backend::kMpi);
  Options o;
  o.backend = Backend::kNccl;
  c = choose_backend(o, usable());
  EXPECT_EQ(c.backend, Backend::kNccl);
  EXPECT_EQ(c.reason, "--backend nccl");
  EXPECT_EQ(c.on_gpu, Backend::kAuto);
  o.backend = Backend::kGloo;  // the user's gloo is kept on a GPU too
  EXPECT_EQ(choose_backend(o, p).on_gpu, Backend::kAuto);
  p.inherited = "gloo";  // so is an inherited DDP_BACKEND=gloo
  EXPECT_EQ(choose_backend(Options(), p).on_gpu, Backend::kAuto);
}

TEST(BackendChoice, GivenBackendIsKept) {
  Options o;
  o.backend = Backend::kGloo;
  LaunchBackend c = choose_backend(o, usable());
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "--backend gloo");
  o.backend = Backend::kMpi;
  MpiProbe none;  // main reports a missing mpirun for --backend mpi itself
  c = choose_backend(o, none);
  EXPECT_EQ(c.backend, Backend::kMpi);
  EXPECT_EQ(c.reason, "--backend mpi");
}

TEST(BackendChoice, InheritedDdpBackendWinsOverAuto) {
  MpiProbe p = usable();
  p.inherited = "gloo";
  LaunchBackend c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "DDP_BACKEND=gloo in the environment");
  p = MpiProbe();
  p.inherited = "mpi";
  c = choose_backend(Options(), p);
  EXPECT_EQ(c.backend, Backend::kMpi);
  EXPECT_EQ(c.error, "");
  Options two;
  two.nnodes = 2;
  c = choose_backend(two, p);
  EXPECT_EQ(c.error,
            "DDP_BACKEND=mpi in the environment, but ddprun's mpi mode runs one node only (this job has "
            "--nnodes 2); unset DDP_BACKEND or pass --backend gloo");
  p.inherited = "local";  // not a launcher's choice: the rule applies
  EXPECT_EQ(choose_backend(Options(), p).reason,
            "auto: the program does not link ddp (a libddp_* library), so only "
            "RANK/MASTER_ADDR can reach it");
}

TEST(BackendChoice, ElfNeedsReadsDynamicSection) {
  EXPECT_TRUE(elf_needs(ddprun_test::error_probe_path(), "libddp_dist.so"));  // links ddp::dist
  EXPECT_FALSE(elf_needs(ddprun_test::probe_path(), "libddp_dist.so"));       // plain POSIX
  EXPECT_TRUE(elf_needs(ddprun_test::probe_path(), "libc.so"));
  EXPECT_FALSE(elf_needs("/bin/sh-does-not-exist", "libc.so"));
  const std::string script = ::testing::TempDir() + "/backend_choice_script.sh";
  std::ofstream(script) << "#!/bin/sh\n# libddp_dist.so\n";
  EXPECT_FALSE(elf_needs(script, "libddp_dist.so"));
}

TEST(BackendChoice, ProbeSkipsMpirunForAGivenBackend) {
  Options o;
  o.backend = Backend::kGloo;
  MpiProbe p = probe_mpi(o, ddprun_test::error_probe_path());
  EXPECT_FALSE(p.program_links_ddp);  // not looked at
  EXPECT_FALSE(p.mpirun_found);
  EXPECT_EQ(p.version, "");
}

}  // namespace
