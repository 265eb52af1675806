// The store keys that a launcher shares with ddp::Membership (membership.h). Torch-free: ddprun includes it.
#pragma once
#include <string>

namespace ddp::membership_keys {

// Every key of the protocol is under this prefix (c10d's PrefixStore joins a prefix and a key with "/").
inline constexpr const char* kRoot = "ddp_elastic";

// Set once the member with this id (its launch rank) is gone for good: a rebuild stops waiting for it, and it
// never joins a later generation. ddprun sets it when the rank exits; the value says how ("SIGKILL", "exit 3").
inline std::string lost(int id) { return std::string(kRoot) + "/lost/" + std::to_string(id); }

// Set (to the generation) once the members formed a group: ranks a launcher starts after that (a node that comes
// back) join the running job instead of starting it.
inline std::string current() { return std::string(kRoot) + "/current"; }

// Each member writes its id under its node (its launcher's node rank, GROUP_RANK) and process id, so that a
// launcher that sees a process end knows which member was lost (a replacement's id is not its launch rank).
inline std::string pid_key(int node, long process) {  // below kRoot
  return "pid/" + std::to_string(node) + "/" + std::to_string(process);
}
inline std::string pid(int node, long process) { return std::string(kRoot) + "/" + pid_key(node, process); }

}  // namespace ddp::membership_keys
