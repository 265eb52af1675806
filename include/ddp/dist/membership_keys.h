// The store keys that a launcher shares with ddp::Membership (membership.h). Torch-free: ddprun includes it.
#pragma once
#include <string>

namespace ddp::membership_keys {

// Every key of the protocol is under this prefix (c10d's PrefixStore joins a prefix and a key with "/").
inline constexpr const char* kRoot = "ddp_elastic";

// Set once the member with this id (its launch rank) is gone for good: a rebuild stops waiting for it, and it
// never joins a later generation. ddprun sets it when the rank exits; the value says how ("SIGKILL", "exit 3").
inline std::string lost(int id) { return std::string(kRoot) + "/lost/" + std::to_string(id); }

}  // namespace ddp::membership_keys
