#include "ddp/dist/membership.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "ddp/dist/backend.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "dist/member_pulse.h"
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

std::string id_list(const std::vector<int>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  return s.str();
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::istringstream s(text);
  for (std::string item; std::getline(s, item, ',');) ids.push_back(std::stoi(item));
  return ids;
}

int to_int(const std::vector<uint8_t>& v) { return std::stoi(std::string(v.begin(), v.end())); }

std::string prefix(int generation, int id) {
  return "[elastic] member " + std::to_string(id) + ", generation " + std::to_string(generation) + ": ";
}

std::string lost_key(int id) { return "lost/" + std::to_string(id); }

// What a member's lost mark says, in words: a rebuild's own verdicts ("silent", "late"), else the launcher's how.
std::string lost_because(const std::string& how, const MembershipOptions& o) {
  if (how == "silent")
    return "its pulse was still for " + detail::format_seconds(o.settle.count() / 1000.0) +
           " s (the heartbeat timeout): stopped, or cut off from the store";
  if (how == "late")
    return "alive, but it did not come within the timeout of " + detail::format_seconds(o.timeout.count() / 1000.0) +
           " s";
  return "lost: " + how;
}

// Judges the members a round waits for (neither there nor marked lost): one whose pulse has been still for
// `settle` is "silent" (stopped, cut off); one whose pulse moves but who has not come within the collective timeout
// of the round's start is "late". Both are then marked lost, with that word as the how.
class Absence {
 public:
  Absence(StorePtr store, const MembershipOptions& o)
      : store_(store), settle_(o.settle), timeout_(o.timeout), start_(Clock::now()), pulses_(store, o.settle / 10) {}
  // Why `id` is given up on ("silent", "late"), or "" while it is waited for.
  std::string verdict(int id) {
    if (pulses_.still(id) >= settle_) return "silent";
    return Clock::now() - start_ >= timeout_ ? "late" : "";
  }
  void mark(const std::vector<std::pair<int, std::string>>& gone) {
    for (const auto& [id, how] : gone) store_->set(lost_key(id), bytes(how));
  }

 private:
  StorePtr store_;
  Milliseconds settle_, timeout_;
  Clock::time_point start_;
  detail::PulseWatch pulses_;
};

std::string gone_list(const std::vector<std::pair<int, std::string>>& gone, const MembershipOptions& o) {
  std::string s;
  for (const auto& [id, how] : gone) s += (s.empty() ? "" : "; ") + std::to_string(id) + ": " + lost_because(how, o);
  return s;
}

}  // namespace

Membership::Membership(StorePtr store, int id, int world, MembershipOptions options)
    : store_(make_prefix_store(kRoot, std::move(store))), id_(id), first_world_(world), options_(std::move(options)) {
  if (world < 1 || id < 0 || id >= world)
    throw InvalidArgument("[elastic] member id " + std::to_string(id) + " must be in [0, " + std::to_string(world) +
                          ")");
  store_->set(membership_keys::pid_key(options_.node, ::getpid()), bytes(std::to_string(id)));
  start_pulse();
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

void Membership::start_pulse() {
  StorePtr beat = options_.pulse_store ? make_prefix_store(kRoot, options_.pulse_store) : store_;
  pulse_ = std::make_unique<detail::MemberPulse>(beat, id_, options_.settle / 10,
                                                 "[elastic] member " + std::to_string(id_) + ": ");
}

namespace {

// What ddprun --recovery inplace gives a rank: its launch rank and world, a connection to the store it hosts, and
// the options (backend, timeout, and the heartbeat timeout for `settle`).
struct LauncherEnv {
  StorePtr store;
  int rank = 0, world = 0;
  MembershipOptions options;
};

LauncherEnv launcher_env() {
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
  LauncherEnv e;
  e.rank = std::stoi(need(le::kRank));
  e.world = std::stoi(need(le::kWorldSize));
  const std::string host = need(le::kMasterAddr);
  const int port = std::stoi(need(le::kMasterPort));
  e.options.host = host;
  if (auto b = le::choice(le::kBackend); b && *b != "auto") e.options.backend = *b;
  if (auto t = le::seconds(le::kTimeout)) e.options.timeout = Milliseconds(static_cast<int64_t>(*t * 1000));
  if (auto h = le::seconds(le::kHeartbeatTimeout); h && *h > 0)
    e.options.settle = Milliseconds(static_cast<int64_t>(*h * 1000));
  e.options.node = static_cast<int>(le::count(le::kGroupRank).value_or(0));
  try {
    e.store = make_tcp_store(host, port, false, e.world, e.options.timeout);
    // c10d connects in whole seconds: at least 1. A beat that cannot reach the store ends within that.
    e.options.pulse_store = make_tcp_store(host, port, false, e.world, std::max(e.options.settle, Milliseconds(1000)));
  } catch (...) {
    throw Error("[elastic] rank " + std::to_string(e.rank) + ": cannot connect to ddprun's store at " + host + ":" +
                std::to_string(port) + ": " + detail::current_exception_message());
  }
  return e;
}

}  // namespace

std::unique_ptr<Membership> Membership::from_environment() {
  LauncherEnv e = launcher_env();
  return std::make_unique<Membership>(e.store, e.rank, e.world, e.options);
}

std::unique_ptr<Membership> Membership::join_from_environment() {
  LauncherEnv e = launcher_env();
  return join(e.store, e.world, e.options);
}

// A decision as stored: "ids;consumed".
Membership::Decision Membership::parse_decision(const std::vector<uint8_t>& v) {
  const std::string text(v.begin(), v.end());
  const auto semi = text.find(';');
  return {parse_ids(text.substr(0, semi)), std::stoi(text.substr(semi + 1))};
}

// Every member says it is alive in `generation`; the members are decided once every candidate is alive there,
// marked lost (by the launcher, at its exit) or given up on (Absence: silent or late, marked lost then). The first
// decision stored wins: every member reads the same list.
Membership::Decision Membership::agree_on_members(int generation, const std::vector<int>& candidates, int consumed) {
  const std::string decided = gen_key(generation, "members");
  store_->set(gen_key(generation, "alive/" + std::to_string(id_)), bytes("1"));
  Absence absence(store_, options_);
  for (;;) {
    if (store_->check({decided})) return parse_decision(store_->get(decided));
    std::vector<int> alive;
    std::vector<std::pair<int, std::string>> gone;
    bool waiting = false;
    for (int c : candidates) {
      if (store_->check({gen_key(generation, "alive/" + std::to_string(c))}))
        alive.push_back(c);
      else if (store_->check({lost_key(c)}))
        continue;
      else if (std::string why = absence.verdict(c); !why.empty())
        gone.emplace_back(c, why);
      else
        waiting = true;
    }
    if (!waiting) {
      absence.mark(gone);
      std::sort(alive.begin(), alive.end());
      return parse_decision(store_->compareSet(decided, {}, bytes(id_list(alive) + ";" + std::to_string(consumed))));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Every member says it is ready to form `generation`'s group, and waits until all are: a member lost meanwhile
// (marked by the launcher) fails this round at once, where gloo's rendezvous would wait for its address until the
// store's timeout; so does one given up on (Absence), marked lost then.
void Membership::wait_until_ready(int generation, const std::vector<int>& members) {
  store_->set(gen_key(generation, "ready/" + std::to_string(id_)), bytes("1"));
  Absence absence(store_, options_);
  for (;;) {
    std::vector<std::pair<int, std::string>> gone;
    bool waiting = false;
    for (int m : members) {
      if (store_->check({gen_key(generation, "ready/" + std::to_string(m))})) continue;
      if (store_->check({lost_key(m)}))
        throw Error(prefix(generation, id_) + "member " + std::to_string(m) + " was lost while the group formed");
      if (std::string why = absence.verdict(m); !why.empty())
        gone.emplace_back(m, why);
      else
        waiting = true;
    }
    if (!gone.empty()) {
      absence.mark(gone);
      throw Error(prefix(generation, id_) + "counted lost while the group formed: member " + gone_list(gone, options_));
    }
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
  // Given up once a member rebuilds after a failure, or the launcher marked one lost: the others stop waiting in it.
  o.given_up = [store = store_, over = gen_key(generation, "over"), members] {
    if (store->check({over})) return true;
    for (int m : members)
      if (store->check({lost_key(m)})) return true;
    return false;
  };
  // No group heartbeat: a lost member is the launcher's to report (membership_keys::lost), a still one the
  // rebuild's (its pulse).
  // A member lost before it joins leaves the others waiting for its address: at most `settle` after the first.
  store_->setTimeout(generation == 0 ? options_.timeout : options_.settle);
  generation_ = generation;
  members_ = std::move(members);
  if (generation > 0) wait_until_ready(generation, members_);  // the first: ranks start at their own pace
  group_ = create_backend(options_.backend, o);
  store_->set("current", bytes(std::to_string(generation)));  // membership_keys::current: joiners wait for the next
}

GroupPtr Membership::rebuild(const std::string& why) { return next_generation(why, false); }

GroupPtr Membership::admit() { return next_generation("admitting the members that asked to join", true); }

// Whether every member of `generation` is marked lost (a joiner then has nobody to be admitted by).
bool Membership::everyone_lost(int generation) {
  std::vector<int> members;
  if (generation == 0) {
    for (int i = 0; i < first_world_; ++i) members.push_back(i);
  } else if (store_->check({gen_key(generation, "members")})) {
    members = parse_decision(store_->get(gen_key(generation, "members"))).members;
  }
  if (members.empty()) return false;
  for (int m : members)
    if (!store_->check({lost_key(m)})) return false;
  return true;
}

void Membership::finish() { store_->set("finished", bytes("1")); }

int Membership::joiners_waiting() { return static_cast<int>(store_->add("joiners", 0)) - consumed_; }

// The next generation: the members that are left, with_joiners also those waiting to join; once more among those
// left when a member is lost while it forms.
GroupPtr Membership::next_generation(std::string reason, bool with_joiners) {
  for (;;) {
    const int next = generation_ + 1;
    const auto start = Clock::now();
    // After a failure, the group is given up: members still waiting in it stop (their peers may have left the
    // collective, or be stuck in it themselves); then it is let go without joining its blocked workers.
    if (!with_joiners) store_->set(gen_key(generation_, "over"), bytes("1"));
    group_.reset();
    std::vector<int> candidates = members_;
    int consumed = consumed_;
    if (with_joiners) {
      const int count = static_cast<int>(store_->add("joiners", 0));
      for (; consumed < count; ++consumed) {  // each joiner writes its id right after taking its number
        const std::string key = "joiner/" + std::to_string(consumed + 1);
        store_->wait({key}, options_.settle);
        candidates.push_back(to_int(store_->get(key)));
      }
    }
    const Decision d = agree_on_members(next, candidates, consumed);
    const std::string was = id_list(members_);
    consumed_ = d.consumed;
    if (std::find(d.members.begin(), d.members.end(), id_) == d.members.end()) {
      const auto mark =
          store_->check({lost_key(id_)}) ? store_->get(lost_key(id_)) : bytes("not there when the others decided");
      throw Error(prefix(next, id_) + "this member was counted lost while the others rebuilt (" +
                  lost_because(std::string(mark.begin(), mark.end()), options_) + "); members now " +
                  id_list(d.members));
    }
    if (static_cast<int>(d.members.size()) < options_.min_world)
      throw Error(prefix(next, id_) + "only " + std::to_string(d.members.size()) + " member(s) left (" +
                  id_list(d.members) + "), fewer than the minimum " + std::to_string(options_.min_world));
    try {
      build(next, d.members);
    } catch (const Error& e) {  // a member was lost while the group formed: once more, among those left
      reason = e.what();
      with_joiners = false;
      continue;
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "%smembers %s -> %s, world %d, rank %d, formed in %s s: %s\n", prefix(next, id_).c_str(),
                 was.c_str(), id_list(members_).c_str(), group_->size(), group_->rank(),
                 detail::format_seconds(s).c_str(), reason.c_str());
    std::fflush(stderr);
    return group_;
  }
}

Membership::Membership(StorePtr store, int first_world, MembershipOptions options)
    : store_(make_prefix_store(kRoot, std::move(store))),
      id_(-1),
      first_world_(first_world),
      options_(std::move(options)) {}

std::unique_ptr<Membership> Membership::join(StorePtr store, int first_world, MembershipOptions options) {
  std::unique_ptr<Membership> m(new Membership(std::move(store), first_world, std::move(options)));
  const int number = static_cast<int>(m->store_->add("joiners", 1));
  m->id_ = first_world + number - 1;
  m->store_->set(membership_keys::pid_key(m->options_.node, ::getpid()), bytes(std::to_string(m->id_)));
  m->start_pulse();
  m->store_->set("joiner/" + std::to_string(number), bytes(std::to_string(m->id_)));
  std::fprintf(stderr, "[elastic] member %d: asked to join; the members admit joiners at their next step boundary\n",
               m->id_);
  std::fflush(stderr);
  const auto deadline = Clock::now() + m->options_.timeout;
  int said = -1;  // the generation this joiner said it is alive in
  for (;;) {
    const int current = m->store_->check({"current"}) ? to_int(m->store_->get("current")) : 0;
    const int next = current + 1;
    if (said != next) m->store_->set(gen_key(next, "alive/" + std::to_string(m->id_)), bytes("1"));
    said = next;
    if (m->store_->check({gen_key(next, "members")})) {
      const Decision d = parse_decision(m->store_->get(gen_key(next, "members")));
      if (std::find(d.members.begin(), d.members.end(), m->id_) != d.members.end()) {
        m->consumed_ = d.consumed;
        try {
          m->build(next, d.members);
        } catch (const Error& e) {  // a member was lost while the group formed: once more, among those left
          m->next_generation(e.what(), false);
        }
        std::fprintf(stderr, "%sjoined: members %s, world %d, rank %d\n", prefix(m->generation_, m->id_).c_str(),
                     id_list(m->members_).c_str(), m->group_->size(), m->group_->rank());
        std::fflush(stderr);
        return m;
      }
      if (d.consumed >= number)
        throw Error(prefix(next, m->id_) + "this joiner was counted lost before it was admitted");
    }
    if (m->everyone_lost(current))
      throw Error(prefix(next, m->id_) + "every member of generation " + std::to_string(current) +
                  " was lost: there is no running job left to join");
    if (m->store_->check({"finished"})) {
      std::fprintf(stderr, "%sthe members finished the job before admitting this joiner\n",
                   prefix(next, m->id_).c_str());
      return nullptr;
    }
    if (Clock::now() >= deadline)
      throw Error(prefix(next, m->id_) + "not admitted within " +
                  detail::format_seconds(m->options_.timeout.count() / 1000.0) +
                  " s: the members admit joiners at their step boundaries (are they training?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace ddp
