// srun as a launcher (ddp/dist/slurm_env.h): Slurm's host lists and tasks per node expanded as Slurm writes them,
// a task srun started placed from Slurm's variables, anything set explicitly winning, and the cases that are not
// srun's (ddprun or mpirun under Slurm, a batch script without srun) left alone or refused with what to do.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddp/dist/slurm_env.h"
#include "ddp/errors.h"
#include "dist/env.h"

namespace ddp {
namespace {

namespace le = launch_env;
using Pairs = std::vector<std::pair<std::string, std::string>>;

// What srun gives rank 3 of 4, 2 per node, on node08 (its second node), in job 4242.
Pairs srun_rank3() {
  return {{"SLURM_PROCID", "3"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_NODELIST", "node[07-08]"},
          {"SLURM_JOB_NODELIST", "node[07-08]"},
          {"SLURM_JOB_ID", "4242"}};
}

Pairs with(Pairs env, const Pairs& more) {
  env.insert(env.end(), more.begin(), more.end());
  return env;
}

detail::Rendezvous resolve(const Pairs& env) { return detail::resolve_rendezvous({}, le::fixed(env), false); }

std::string refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

using Hosts = std::vector<std::string>;

TEST(SlurmHostlist, ExpandsAsSlurmWritesThem) {
  EXPECT_EQ(slurm::expand_hostlist("node[01-04,07],gpu5"),
            (Hosts{"node01", "node02", "node03", "node04", "node07", "gpu5"}));
  EXPECT_EQ(slurm::expand_hostlist("a[8-10]"), (Hosts{"a8", "a9", "a10"}));
  EXPECT_EQ(slurm::expand_hostlist("a[08-10]"), (Hosts{"a08", "a09", "a10"}));
  EXPECT_EQ(slurm::expand_hostlist("rack[1-2]-n[01-02]"), (Hosts{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(slurm::expand_hostlist("host"), (Hosts{"host"}));
  EXPECT_EQ(slurm::expand_hostlist("n[5],m"), (Hosts{"n5", "m"}));
  EXPECT_EQ(slurm::expand_hostlist("10.0.0.[1-2]"), (Hosts{"10.0.0.1", "10.0.0.2"}));
}

TEST(SlurmHostlist, MalformedListsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "it is empty"},
      {"n[1-", "a '[' without its ']'"},
      {"n]1", "a ']' without its '['"},
      {"n[3-1]", "the range '3-1' runs backwards"},
      {"n[a-b]", "'[a-b]' holds 'a-b', not a number or a range N-M"},
      {"a,,b", "an empty host between commas"},
      {"n[1-2000000]", "more than 2^20 hosts"},
  };
  for (const auto& [list, why] : cases) {
    const std::string msg = refusal([&] { slurm::expand_hostlist(list, "SLURM_STEP_NODELIST"); });
    EXPECT_NE(msg.find("SLURM_STEP_NODELIST '" + list + "' is not a Slurm host list: " + why), std::string::npos)
        << msg;
  }
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(slurm::expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(slurm::expand_tasks_per_node("4"), (std::vector<int>{4}));
  for (const std::string bad : {"", "2(x", "x", "2(x3", "-1"})
    EXPECT_NE(refusal([&] {
                slurm::expand_tasks_per_node(bad, "SLURM_STEP_TASKS_PER_NODE");
              }).find("SLURM_STEP_TASKS_PER_NODE='" + bad + "' is not Slurm's tasks per node"),
              std::string::npos)
        << bad;
}

TEST(SlurmPort, FromTheJobIdsLastFourDigits) {
  EXPECT_EQ(slurm::port_of_job("123"), 15123);
  EXPECT_EQ(slurm::port_of_job("987654"), 22654);
  EXPECT_EQ(slurm::port_of_job("10000"), 15000);
  EXPECT_NE(refusal([] { slurm::port_of_job("12_3"); }).find("SLURM_JOB_ID='12_3' is not a number: set MASTER_PORT"),
            std::string::npos);
}

TEST(SlurmPlacement, AnSrunTaskFindsEverythingInSlurmsVariables) {
  const le::EnvFn env = slurm::with_slurm(le::fixed(srun_rank3()));
  EXPECT_EQ(env("RANK"), "3");
  EXPECT_EQ(env("WORLD_SIZE"), "4");
  EXPECT_EQ(env("LOCAL_RANK"), "1");
  EXPECT_EQ(env("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env("GROUP_RANK"), "1");
  EXPECT_EQ(env("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(env("MASTER_ADDR"), "node07");
  EXPECT_EQ(env("MASTER_PORT"), "19242");
  EXPECT_EQ(env("DDP_BACKEND"), std::nullopt);  // nothing else is made up
  const detail::Rendezvous r = resolve(srun_rank3());
  EXPECT_EQ(r.backend, "gloo");
  EXPECT_EQ(r.method, "env");
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.host, "node07");
  EXPECT_EQ(r.port, 19242);
  EXPECT_EQ(r.placement,
            "RANK from SLURM_PROCID, WORLD_SIZE from SLURM_STEP_NUM_TASKS, LOCAL_RANK from SLURM_LOCALID, "
            "LOCAL_WORLD_SIZE 2 (this node's entry of SLURM_STEP_TASKS_PER_NODE), GROUP_RANK from SLURM_NODEID, "
            "GROUP_WORLD_SIZE from SLURM_STEP_NUM_NODES, MASTER_ADDR node07 (the first host of SLURM_STEP_NODELIST), "
            "MASTER_PORT 19242 (15000 + the last four digits of SLURM_JOB_ID)");
}

TEST(SlurmPlacement, WhatIsSetExplicitlyWins) {
  const Pairs env = with(srun_rank3(), {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"LOCAL_RANK", "0"}});
  const detail::Rendezvous r = resolve(env);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.host, "10.0.0.1");
  EXPECT_EQ(r.port, 29500);
  EXPECT_EQ(slurm::with_slurm(le::fixed(env))("LOCAL_RANK"), "0");
  EXPECT_EQ(r.placement.find("MASTER"), std::string::npos) << r.placement;
  EXPECT_EQ(r.placement.find("LOCAL_RANK "), std::string::npos) << r.placement;
  // Without the step's node list, the job's.
  Pairs job_list;
  for (const auto& kv : srun_rank3())
    if (kv.first != "SLURM_STEP_NODELIST") job_list.push_back(kv);
  EXPECT_NE(resolve(job_list).placement.find("MASTER_ADDR node07 (the first host of SLURM_JOB_NODELIST)"),
            std::string::npos);
}

TEST(SlurmPlacement, OtherLaunchersUnderSlurmAreLeftAlone) {
  // ddprun under srun (srun ddprun ...): its ranks have RANK and WORLD_SIZE; Slurm's say where ddprun runs.
  const Pairs ddprun = with(
      srun_rank3(),
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "node07"}, {"MASTER_PORT", "29400"}, {"LOCAL_RANK", "1"}});
  EXPECT_FALSE(slurm::srun_task(le::fixed(ddprun)));
  EXPECT_EQ(resolve(ddprun).rank, 5);
  EXPECT_EQ(resolve(ddprun).placement, "");
  EXPECT_EQ(slurm::with_slurm(le::fixed(ddprun))("GROUP_RANK"), std::nullopt);
  // mpirun in an allocation starts its daemons with srun: their step is not the ranks'.
  const Pairs mpirun = with(srun_rank3(), {{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  EXPECT_FALSE(slurm::srun_task(le::fixed(mpirun)));
  EXPECT_EQ(slurm::with_slurm(le::fixed(mpirun))("LOCAL_RANK"), std::nullopt);
}

TEST(SlurmPlacement, ABatchScriptWithoutSrunIsToldWhatToDo) {
  const Pairs batch = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "7"}};
  EXPECT_FALSE(slurm::srun_task(le::fixed(batch)));
  EXPECT_NE(refusal([&] { resolve(batch); })
                .find("this process runs in a Slurm job of 4 tasks (SLURM_NTASKS) but srun did not start it: start "
                      "one rank per task with 'srun ddp-train ...'"),
            std::string::npos);
  EXPECT_EQ(resolve(with(batch, {{"WORLD_SIZE", "1"}})).world_size, 1);
  EXPECT_EQ(resolve({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).backend, "local");  // a job of one task
}

TEST(SlurmPlacement, MalformedSlurmVariablesAreNamed) {
  Pairs env = srun_rank3();
  for (auto& kv : env)
    if (kv.first == "SLURM_STEP_NODELIST") kv.second = "node[07-";
  EXPECT_NE(refusal([&] { resolve(env); }).find("SLURM_STEP_NODELIST 'node[07-' is not a Slurm host list"),
            std::string::npos);
  env = srun_rank3();
  for (auto& kv : env)
    if (kv.first == "SLURM_NODEID") kv.second = "2";
  EXPECT_NE(refusal([&] {
              slurm::with_slurm(le::fixed(env))("LOCAL_WORLD_SIZE");
            }).find("SLURM_NODEID=2 is past the 2 node(s) of SLURM_STEP_TASKS_PER_NODE='2(x2)'"),
            std::string::npos);
  env = with(srun_rank3(), {});
  for (auto& kv : env)
    if (kv.first == "SLURM_PROCID") kv.second = "three";
  EXPECT_NE(refusal([&] { resolve(env); }).find("SLURM_PROCID"), std::string::npos);
}

}  // namespace
}  // namespace ddp
