#include "ddp/dist/slurm_env.h"

#include <cctype>
#include <utility>

#include "ddp/errors.h"

namespace ddp::slurm {
namespace le = launch_env;
namespace {

constexpr size_t kMaxHosts = 1 << 20;

[[noreturn]] void malformed(const std::string& what, const std::string& text, const std::string& why) {
  throw InvalidArgument("[init] " + what + " '" + text + "' is not a Slurm host list: " + why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The items of one bracket's contents: "01-04,07" -> 01 02 03 04 07.
std::vector<std::string> expand_ranges(const std::string& inside, const std::string& what, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= inside.size()) {
    const size_t comma = std::min(inside.find(',', start), inside.size());
    const std::string item = inside.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      malformed(what, list, "'[" + inside + "]' holds '" + item + "', not a number or a range N-M");
    const long a = std::stol(lo), b = std::stol(hi);
    if (a > b) malformed(what, list, "the range '" + item + "' runs backwards");
    if (out.size() + size_t(b - a) >= kMaxHosts) malformed(what, list, "more than 2^20 hosts");
    for (long k = a; k <= b; ++k) {
      std::string n = std::to_string(k);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');  // [08-10]: the low bound's width
      out.push_back(n);
    }
    start = comma + 1;
  }
  return out;
}

// One host expression ("rack[1-2]-node[01-02]"): every bracket multiplied out, the first outermost.
std::vector<std::string> expand_one(const std::string& expr, const std::string& what, const std::string& list) {
  std::vector<std::string> hosts{""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const std::string literal = expr.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (literal.find(']') != std::string::npos) malformed(what, list, "a ']' without its '['");
    for (auto& h : hosts) h += literal;
    if (open == std::string::npos) break;
    const size_t close = expr.find(']', open);
    if (close == std::string::npos) malformed(what, list, "a '[' without its ']'");
    const auto items = expand_ranges(expr.substr(open + 1, close - open - 1), what, list);
    if (hosts.size() * items.size() > kMaxHosts) malformed(what, list, "more than 2^20 hosts");
    std::vector<std::string> next;
    for (const auto& h : hosts)
      for (const auto& item : items) next.push_back(h + item);
    hosts = std::move(next);
    i = close + 1;
  }
  return hosts;
}

// A launcher variable's Slurm source: the variable and, for a count, the range it must be in.
std::optional<Derived> counted(const le::EnvVar& from, const le::EnvFn& env) {
  if (auto n = le::count(from, env)) return Derived{std::to_string(*n), from.name, false};
  return std::nullopt;
}

std::optional<Derived> first_host(const le::EnvFn& env) {
  for (const le::EnvVar* v : {&le::kSlurmStepNodelist, &le::kSlurmJobNodelist})
    if (auto list = le::text(*v, env))
      return Derived{expand_hostlist(*list, v->name).front(), std::string("the first host of ") + v->name, true};
  return std::nullopt;
}

std::optional<Derived> local_world(const le::EnvFn& env) {
  const auto spec = le::text(le::kSlurmStepTasksPerNode, env);
  const auto node = le::count(le::kSlurmNodeId, env);
  if (!spec || !node) return std::nullopt;
  const auto per_node = expand_tasks_per_node(*spec, le::kSlurmStepTasksPerNode.name);
  if (*node >= static_cast<int>(per_node.size()))
    throw InvalidArgument(std::string("[init] ") + le::kSlurmNodeId.name + "=" + std::to_string(*node) +
                          " is past the " + std::to_string(per_node.size()) + " node(s) of " +
                          le::kSlurmStepTasksPerNode.name + "='" + *spec + "'");
  return Derived{std::to_string(per_node[*node]),
                 std::string("this node's entry of ") + le::kSlurmStepTasksPerNode.name, true};
}

// The variables srun can stand in for, in the order a first line names them.
const le::EnvVar* const kDerivable[] = {&le::kRank,      &le::kWorldSize,      &le::kLocalRank,  &le::kLocalWorldSize,
                                        &le::kGroupRank, &le::kGroupWorldSize, &le::kMasterAddr, &le::kMasterPort};

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& what) {
  if (list.empty()) malformed(what, list, "it is empty");
  std::vector<std::string> out;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c != ',' || depth > 0) continue;
    const std::string expr = list.substr(start, i - start);
    if (expr.empty()) malformed(what, list, "an empty host between commas");
    for (auto& h : expand_one(expr, what, list)) out.push_back(std::move(h));
    if (out.size() > kMaxHosts) malformed(what, list, "more than 2^20 hosts");
    start = i + 1;
  }
  if (depth > 0) malformed(what, list, "a '[' without its ']'");
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& spec, const std::string& what) {
  auto bad = [&](const std::string& why) -> std::vector<int> {
    throw InvalidArgument("[init] " + what + "='" + spec + "' is not Slurm's tasks per node (as 2(x3),1): " + why);
  };
  if (spec.empty()) return bad("it is empty");
  std::vector<int> out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const std::string n = item.substr(0, paren);
    std::string times = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')') return bad("'" + item + "' lacks its ')'");
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(n) || !all_digits(times) || n.size() > 6 || times.size() > 6)
      return bad("'" + item + "' is not N or N(xM)");
    const int tasks = std::stoi(n), repeat = std::stoi(times);
    if (out.size() + size_t(repeat) > kMaxHosts) return bad("more than 2^20 nodes");
    out.insert(out.end(), size_t(repeat), tasks);
    start = comma + 1;
  }
  return out;
}

int port_of_job(const std::string& job_id) {
  if (!all_digits(job_id))
    throw InvalidArgument(std::string("[init] ") + le::kSlurmJobId.name + "='" + job_id +
                          "' is not a number: set MASTER_PORT to the port rank 0's store should listen on");
  const std::string last = job_id.size() > 4 ? job_id.substr(job_id.size() - 4) : job_id;
  return 15000 + std::stoi(last);
}

bool srun_task(const le::EnvFn& env) {
  return le::text(le::kSlurmProcId, env) && le::text(le::kSlurmStepNumTasks, env) && !le::text(le::kRank, env) &&
         !le::text(le::kWorldSize, env) && !le::text(le::kOmpiSize, env);
}

std::optional<Derived> derive(const std::string& name, const le::EnvFn& env) {
  if (const auto set = env(name); (set && !set->empty()) || !srun_task(env)) return std::nullopt;
  if (name == le::kRank.name) return counted(le::kSlurmProcId, env);
  if (name == le::kWorldSize.name) return counted(le::kSlurmStepNumTasks, env);
  if (name == le::kLocalRank.name) return counted(le::kSlurmLocalId, env);
  if (name == le::kLocalWorldSize.name) return local_world(env);
  if (name == le::kGroupRank.name) return counted(le::kSlurmNodeId, env);
  if (name == le::kGroupWorldSize.name) return counted(le::kSlurmStepNumNodes, env);
  if (name == le::kMasterAddr.name) return first_host(env);
  if (name == le::kMasterPort.name) {
    if (auto id = le::text(le::kSlurmJobId, env))
      return Derived{std::to_string(port_of_job(*id)),
                     std::string("15000 + the last four digits of ") + le::kSlurmJobId.name, true};
  }
  return std::nullopt;
}

le::EnvFn with_slurm(le::EnvFn env) {
  if (!srun_task(env)) return env;
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    if (auto v = env(name); v && !v->empty()) return v;
    if (auto d = derive(name, env)) return d->value;
    return std::nullopt;
  };
}

le::EnvFn process() { return with_slurm(le::process()); }

std::string placement(const le::EnvFn& env) {
  std::string out;
  for (const le::EnvVar* v : kDerivable) {
    const auto d = derive(v->name, env);
    if (!d) continue;
    out += (out.empty() ? "" : ", ") + std::string(v->name) +
           (d->computed ? " " + d->value + " (" + d->source + ")" : " from " + d->source);
  }
  return out;
}

std::string not_started_by_srun(const le::EnvFn& env) {
  if (le::text(le::kRank, env) || le::text(le::kWorldSize, env) || le::text(le::kOmpiSize, env) ||
      le::text(le::kSlurmStepNumTasks, env))
    return "";
  const auto tasks = le::first_valid_count({&le::kSlurmNtasks}, env);
  if (!tasks || *tasks < 2) return "";
  return "this process runs in a Slurm job of " + std::to_string(*tasks) + " tasks (" + le::kSlurmNtasks.name +
         ") but srun did not start it: start one rank per task with 'srun ddp-train ...', or set WORLD_SIZE=1 to "
         "train alone";
}

}  // namespace ddp::slurm
