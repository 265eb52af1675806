#include "inplace.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <chrono>
#include <sstream>

#include "ddp/dist/collectives.h"
#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"
#include "ddp/parallel/optimizer_state.h"
#include "random_streams.h"
#include "trainer_job.h"

namespace ddp::train::detail {
namespace {

using Clock = std::chrono::steady_clock;

// The loop position at the last optimizer step this rank completed: a step's micro-batches before its
// reduction communicate nothing, so a failure is at a step's last micro-batch or after the step.
std::vector<int64_t> committed_position(const LoopState& s, int64_t accumulate) {
  return {s.step, s.epoch, s.micro / accumulate * accumulate};
}

// The lowest rank holding the latest committed position (step, then epoch: a rank may have finished an epoch's
// evaluation that another failed in), and that position.
std::pair<int, std::vector<int64_t>> latest(const std::vector<c10::IValue>& positions) {
  int best = 0;
  std::vector<int64_t> top = positions[0].toIntVector();
  for (size_t r = 1; r < positions.size(); ++r) {
    std::vector<int64_t> p = positions[r].toIntVector();
    if (p > top) best = static_cast<int>(r), top = std::move(p);
  }
  return {best, top};
}

std::string join(const std::vector<int>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? ", " : "") << ids[i];
  return s.str();
}

// FNV-1a over the bytes of the model's parameters and the optimizer's state. Not the buffers: DDP broadcasts rank
// 0's at each forward, so each rank's last forward leaves its own (BatchNorm's running statistics), as in PyTorch.
uint64_t digest(Job& j) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&h](const at::Tensor& t) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& t : j.task.model.ptr()->parameters()) add(t);
  const c10::IValue opt = optimizer_state_dict(j.strategy->optimizer());
  std::vector<c10::IValue> todo{opt};
  while (!todo.empty()) {  // the state's tensors, in the dict's order
    c10::IValue v = todo.back();
    todo.pop_back();
    if (v.isTensor()) add(v.toTensor());
    if (v.isGenericDict())
      for (const auto& kv : v.toGenericDict()) todo.push_back(kv.value());
    if (v.isList())
      for (const auto& e : v.toListRef()) todo.push_back(e);
  }
  return h;
}

// The on_world_change callbacks, then rank 0's lr_scale on every rank (they may differ: a callback with a rank's
// own view), multiplied into the job's.
void tell_user(Job& j, int old_world, int64_t step) {
  WorldChange c;
  c.from = old_world;
  c.to = j.group->size();
  c.generation = j.membership->generation();
  c.step = step;
  c.global_batch = *j.cfg.batch_size * j.launch_world;
  std::exception_ptr error;
  try {
    for (auto& callback : j.on_world_change) callback(c);
  } catch (...) {
    error = std::current_exception();
  }
  const int failed = lowest_rank_where(error != nullptr, j.group);  // a callback that threw anywhere ends every rank
  if (error) std::rethrow_exception(error);
  if (failed >= 0)
    throw PeerFailed<Error>("Trainer: an on_world_change callback threw on rank " + std::to_string(failed) +
                                " (its error is in that rank's output)",
                            failed);
  at::Tensor scale = at::tensor({c.lr_scale}, at::kDouble);
  j.group->broadcast(scale);
  j.lr_scale *= scale.item<double>();
}

}  // namespace

void CommittedBuffers::take(const torch::nn::Module& model) {
  // Every buffer, every step: batch norm's kernels update running statistics without bumping their version, so
  // what changed cannot be told (a copy as large as what DDP broadcasts before each forward).
  const auto live = model.buffers();
  if (copies_.size() != live.size()) copies_.clear();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) {
    if (i < copies_.size() && copies_[i].sizes() == live[i].sizes() && copies_[i].dtype() == live[i].dtype() &&
        copies_[i].device() == live[i].device())
      copies_[i].copy_(live[i]);
    else if (i < copies_.size())
      copies_[i] = live[i].detach().clone();
    else
      copies_.push_back(live[i].detach().clone());
  }
}

void CommittedBuffers::put_back(torch::nn::Module& model) const {
  const auto live = model.buffers();
  if (live.size() != copies_.size()) return;  // none taken yet: nothing ran since the set-up
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) live[i].copy_(copies_[i]);
}

void check_replicas(Job& j) {
  const uint64_t mine = digest(j);
  const auto all = all_gather_object(c10::IValue(static_cast<int64_t>(mine)), j.group);
  std::vector<int> differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r].toInt() != all[0].toInt()) differ.push_back(static_cast<int>(r));
  if (!differ.empty())
    throw Error("ddp-train: after in-place recovery the replicas differ: rank(s) " + join(differ) +
                " hold other parameters or optimizer state than rank 0");
  std::ostringstream line;
  line << "replicas identical after in-place recovery: " << all.size() << " rank(s), parameters and optimizer digest "
       << std::hex << mine;
  j.logs.console().line(line.str());
}

std::unique_ptr<Membership> membership_from_launcher() {
  const auto recovery = launch_env::choice(launch_env::kRecovery);
  if (!recovery || *recovery != "inplace") return nullptr;
  return Membership::from_environment();
}

bool joining_from_launcher() {
  return launch_env::choice(launch_env::kRecovery) == std::optional<std::string>("inplace") &&
         launch_env::count(launch_env::kJoin).value_or(0) == 1;
}

void check_recoverable(const TrainConfig& cfg) {
  auto refuse = [](const std::string& what) {
    throw InvalidArgument("ddp-train: " + what +
                          " cannot recover in place (ddprun --recovery inplace): its state or its group would not "
                          "survive a lost rank; drop it, or use --recovery restart");
  };
  if (cfg.strategy != "ddp") refuse("--strategy " + cfg.strategy);
  if (cfg.comm_hook != "allreduce" && cfg.comm_hook != "fp16" && cfg.comm_hook != "bf16")
    refuse("--comm-hook " + cfg.comm_hook);
  if (cfg.ema_every && *cfg.ema_every > 0) refuse("--ema-every");
  if (cfg.sync_bn) refuse("--sync-bn");
  if (cfg.data_mode == "shards") refuse("--data shards (a lost rank's shard would be lost with it; --data sampler)");
  if (cfg.nan_check && cfg.nan_check_at == "next-step")
    refuse("--nan-check-at next-step (a step's weights are committed before its check is read; --nan-check-at step)");
}

namespace {
// About when the process started (this library is loaded with it): how long a joiner took to train.
const Clock::time_point kLoaded = Clock::now();
}  // namespace

// What a rank holds when its world changes: its committed position, its optimizer's state and bucket order, and
// its view of the world it leaves.
struct HeldState {
  std::vector<int64_t> position;  // step, epoch, micro-batch, world, launch world (the global batch's ranks)
  c10::IValue optimizer;
  std::vector<int64_t> bucket_order;
  bool was_leader = false;
  bool joining = false;
  std::vector<int> old_members;
  Clock::time_point start = Clock::now();
};

namespace {

// Takes what the rank holds (unless a change that another loss interrupted took it already: the parts were not
// built again since, and the model was not touched), then every part that holds the group lets it go, so that
// the membership can give it up and let it go (its peers still waiting in it then fail too).
const HeldState& hold_and_release(Job& j, const LoopState& s, bool joining) {
  if (!j.held) {
    auto h = std::make_shared<HeldState>();
    // A joiner holds nothing yet: its position is below every member's.
    h->position = joining ? std::vector<int64_t>{-1, -1, -1, 0, 0} : committed_position(s, j.cfg.accumulate);
    if (!joining) h->position.insert(h->position.end(), {int64_t{j.group->size()}, int64_t{j.launch_world}});
    h->optimizer = optimizer_state_dict(j.strategy->optimizer());
    h->bucket_order = j.strategy->bucket_order();
    h->was_leader = !joining && j.group->rank() == 0;
    if (!joining) j.committed_buffers.put_back(*j.task.model.ptr());
    h->joining = joining;
    if (j.membership) h->old_members = j.membership->members();
    j.held = std::move(h);
  }
  // Rank 0's save in flight (--async-save) finishes, agreeing with no one: the group may be broken.
  if (j.checkpoints.active())
    if (const std::string failed = j.checkpoints.manager().abandon(); !failed.empty())
      j.logs.console().warning("the checkpoint save in flight when the world changed failed: " + failed);
  j.strategy.reset();
  j.hook.reset();
  j.evaluator = Evaluator();
  j.data = TrainData();
  j.checkpoints = Checkpoints();
  j.group.reset();
  return *j.held;
}

// Every rank of the new world: the latest position any rank holds is the committed state; the lowest rank holding
// it sends its parameters, buffers, optimizer state and bucket order; the parts are built over the new world.
void adopt(Job& j, LoopState& s, const HeldState& h, const std::string& what) {
  const auto [source, top] = latest(all_gather_object(c10::IValue(h.position), j.group));
  const bool mine = j.group->rank() == source;
  // Received into copies, put in place only once everything came: a source lost halfway leaves the model whole.
  std::vector<at::Tensor> live, incoming;
  for (const auto& p : j.task.model.ptr()->parameters()) live.push_back(p);
  for (const auto& b : j.task.model.ptr()->buffers()) live.push_back(b);
  for (const auto& t : live) incoming.push_back(mine ? t.detach() : t.detach().clone());
  broadcast_coalesced(incoming, source, j.group);
  const c10::IValue state = broadcast_object(mine ? h.optimizer : c10::IValue(), source, j.group);
  const c10::IValue order = broadcast_object(mine ? c10::IValue(h.bucket_order) : c10::IValue(), source, j.group);
  if (!mine) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < live.size(); ++i) live[i].copy_(incoming[i]);
  }
  const bool moved = h.position != top;  // this rank's own position was not the committed one
  s.step = top[0];
  s.epoch = top[1];
  s.micro = top[2];
  if (moved || s.micro == 0) s.loss_sum = 0, s.loss_count = 0;
  // The generators start afresh (random_streams.h): the failed step's draws are not part of the committed state.
  at::manual_seed(stream_seed(j.cfg.seed, Stream::kDropout, j.group->rank(), s.step));
  const int old_world = static_cast<int>(top[3]);
  j.launch_world = static_cast<int>(top[4]);  // a joiner's, and a resumed run's kept from its checkpoint
  set_up_group_parts(j);
  j.strategy->load_optimizer_state(state);
  j.strategy->load_bucket_order(order.toIntVector());
  if (j.group->rank() == 0 && !h.was_leader) j.logs.open(j.cfg.out_dir, true, j.cfg.progress);  // a new rank 0
  tell_user(j, old_world, s.step);
  j.lr.scale(j.lr_scale);  // the learning rates were made afresh with the strategy
  const double seconds = std::chrono::duration<double>(Clock::now() - h.start).count();
  std::ostringstream line;
  line << what << ": world " << old_world << " -> " << j.group->size() << " (members " << join(h.old_members) << " -> "
       << join(j.membership->members()) << ", generation " << j.membership->generation() << "), going on from step "
       << s.step << " (epoch " << s.epoch + 1 << ") in " << seconds << " s; global batch "
       << *j.cfg.batch_size * j.launch_world << " samples kept, this rank's share " << j.data.batch_size();
  j.logs.console().line(line.str());
  if (h.joining)
    j.logs.console().rank_message("joined the running job as rank " + std::to_string(j.group->rank()) + " of " +
                                  std::to_string(j.group->size()) + " at step " + std::to_string(s.step) + ", " +
                                  std::to_string(std::chrono::duration<double>(Clock::now() - kLoaded).count()) +
                                  " s after its start");
  j.held.reset();  // the new world holds the committed state
  j.logs.event("world_change", {{"from", int64_t{old_world}},
                                {"to", int64_t{j.group->size()}},
                                {"generation", int64_t{j.membership->generation()}},
                                {"step", s.step},
                                {"seconds", seconds}});
}

}  // namespace

void recover_in_place(Job& j, LoopState& s, const std::string& why) {
  const HeldState& h = hold_and_release(j, s, false);
  j.group = j.membership->rebuild(why);
  adopt(j, s, h, "in-place recovery");
}

void admit_in_place(Job& j, LoopState& s) {
  const HeldState& h = hold_and_release(j, s, false);
  j.group = j.membership->admit();
  // The joiners that asked may all be lost before the generation formed: it formed without them.
  const bool came = j.membership->members() != h.old_members;
  adopt(j, s, h, came ? "admitted new ranks" : "admitted no new rank (those that asked to join were lost first)");
}

bool join_in_place(Job& j, LoopState& s) {
  hold_and_release(j, s, true);
  j.owned_membership = Membership::join_from_environment();
  if (!j.owned_membership) return false;  // the job finished first
  j.membership = j.owned_membership.get();
  j.group = j.membership->group();
  j.held->old_members = j.membership->members();
  adopt(j, s, *j.held, "joined the running job");
  return true;
}

}  // namespace ddp::train::detail
