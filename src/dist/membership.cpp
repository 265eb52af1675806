#include "ddp/dist/membership.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "ddp/dist/backend.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "dist/message.h"
#include "dist/wait_report.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;
namespace le = launch_env;

using membership_keys::kRoot;

std::string gen_key(int generation, const std::string& rest) {
  return "gen/" + std::to_string(generation) + "/" + rest;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string join(const std::vector<int>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  return s.str();
}

std::vector<int> parse_ids(const std::vector<uint8_t>& v) {
  std::vector<int> ids;
  std::istringstream s(std::string(v.begin(), v.end()));
  for (std::string item; std::getline(s, item, ',');) ids.push_back(std::stoi(item));
  return ids;
}

std::string prefix(int generation, int id) {
  return "[elastic] member " + std::to_string(id) + ", generation " + std::to_string(generation) + ": ";
}

}  // namespace

Membership::Membership(StorePtr store, int id, int world, MembershipOptions options)
    : store_(make_prefix_store(kRoot, std::move(store))), id_(id), options_(std::move(options)) {
  if (world < 1 || id < 0 || id >= world)
    throw InvalidArgument("[elastic] member id " + std::to_string(id) + " must be in [0, " + std::to_string(world) +
                          ")");
  std::vector<int> everyone(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) everyone[static_cast<size_t>(i)] = i;
  try {
    build(0, everyone);  // the first generation is everyone launched: nothing to agree on
  } catch (const Error& e) {
    members_ = everyone;
    rebuild(e.what());
  }
}

Membership::~Membership() = default;

std::unique_ptr<Membership> Membership::from_environment() {
  const auto recovery = le::choice(le::kRecovery);
  if (!recovery || *recovery != "inplace")
    throw Error(std::string("[elastic] ") + le::kRecovery.name +
                " is not 'inplace': in-place recovery needs the store that ddprun --recovery inplace hosts (start "
                "the job with ddprun --recovery inplace)");
  auto need = [](const le::EnvVar& v) {
    auto t = le::text(v);
    if (!t) throw Error(std::string("[elastic] ") + v.name + " is not set; start the job with ddprun");
    return *t;
  };
  const int rank = std::stoi(need(le::kRank)), world = std::stoi(need(le::kWorldSize));
  const std::string host = need(le::kMasterAddr);
  const int port = std::stoi(need(le::kMasterPort));
  MembershipOptions o;
  o.host = host;
  if (auto b = le::choice(le::kBackend); b && *b != "auto") o.backend = *b;
  if (auto t = le::seconds(le::kTimeout)) o.timeout = Milliseconds(static_cast<int64_t>(*t * 1000));
  if (auto h = le::seconds(le::kHeartbeatTimeout); h && *h > 0)
    o.settle = Milliseconds(static_cast<int64_t>(*h * 1000));
  StorePtr store;
  try {
    store = make_tcp_store(host, port, false, world, o.timeout);
  } catch (...) {
    throw Error("[elastic] rank " + std::to_string(rank) + ": cannot connect to ddprun's store at " + host + ":" +
                std::to_string(port) + ": " + detail::current_exception_message());
  }
  return std::make_unique<Membership>(store, rank, world, o);
}

// Every survivor says it is alive in `generation`; the members are decided once every candidate is either alive
// there or marked lost (by the launcher, at its exit), or when `settle` has passed (the silent ones are marked
// lost then). The first decision stored wins: every member reads the same list.
std::vector<int> Membership::agree_on_members(int generation, const std::vector<int>& candidates) {
  const std::string decided = gen_key(generation, "members");
  store_->set(gen_key(generation, "alive/" + std::to_string(id_)), bytes("1"));
  const auto deadline = Clock::now() + options_.settle;
  for (;;) {
    if (store_->check({decided})) return parse_ids(store_->get(decided));
    std::vector<int> alive, silent;
    for (int c : candidates) {
      if (store_->check({gen_key(generation, "alive/" + std::to_string(c))}))
        alive.push_back(c);
      else if (!store_->check({"lost/" + std::to_string(c)}))
        silent.push_back(c);
    }
    if (silent.empty() || Clock::now() >= deadline) {
      for (int s : silent) store_->set("lost/" + std::to_string(s), bytes("silent"));
      return parse_ids(store_->compareSet(decided, {}, bytes(join(alive))));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Membership::build(int generation, std::vector<int> members) {
  const auto at = std::find(members.begin(), members.end(), id_);
  BackendOptions o;
  o.store = make_prefix_store(gen_key(generation, "pg"), store_);
  o.rank = static_cast<int>(at - members.begin());
  o.world_size = static_cast<int>(members.size());
  o.timeout = options_.timeout;
  o.host = options_.host;
  // No heartbeat: a lost member is the launcher's to report (membership_keys::lost).
  // A member lost before it joins leaves the others waiting for its address: at most `settle` after the first.
  store_->setTimeout(generation == 0 ? options_.timeout : options_.settle);
  generation_ = generation;
  members_ = std::move(members);
  group_ = create_backend(options_.backend, o);
}

GroupPtr Membership::rebuild(const std::string& why) {
  std::string reason = why;
  for (;;) {
    const int next = generation_ + 1;
    const auto start = Clock::now();
    group_.reset();  // closes its connections: peers still blocked in it fail at once
    std::vector<int> members = agree_on_members(next, members_);
    const std::string was = join(members_);
    if (std::find(members.begin(), members.end(), id_) == members.end())
      throw Error(prefix(next, id_) + "this member was counted lost (silent for longer than " +
                  detail::format_seconds(options_.settle.count() / 1000.0) +
                  " s while the others rebuilt); members now " + join(members));
    if (static_cast<int>(members.size()) < options_.min_world)
      throw Error(prefix(next, id_) + "only " + std::to_string(members.size()) + " member(s) left (" + join(members) +
                  "), fewer than the minimum " + std::to_string(options_.min_world));
    try {
      build(next, members);
    } catch (const Error& e) {  // a member was lost while the group formed: once more, among those left
      reason = e.what();
      continue;
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "%smembers %s -> %s, world %d, rank %d, rebuilt in %s s after: %s\n",
                 prefix(next, id_).c_str(), was.c_str(), join(members_).c_str(), group_->size(), group_->rank(),
                 detail::format_seconds(s).c_str(), reason.c_str());
    std::fflush(stderr);
    return group_;
  }
}

}  // namespace ddp
