// PowerSGD, step by step as PyTorch 1.13's powerSGD_hook.py, so that the same
// model, buckets and data give the same parameters (the order of random draws,
// of the P and Q memory, and of every reduction is PyTorch's).
#include "ddp/parallel/powersgd.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "ddp/errors.h"

namespace ddp {
namespace {

// Columns one by one: normalize, then remove its component from the rest.
void gram_schmidt(at::Tensor m, double eps) {
  const int64_t cols = m.size(2);
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = m.narrow(2, i, 1);
    at::Tensor norm = at::linalg_vector_norm(col, 2, at::IntArrayRef{1}, /*keepdim=*/true);
    if (eps == 0)
      col.div_(norm);
    else
      col.div_(norm + eps);
    if (i + 1 < cols) {
      at::Tensor rest = m.narrow(2, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, {1}, /*keepdim=*/true) * col);
    }
  }
}

// A batch of [n, r] matrices, in place: Gram-Schmidt up to rank 2 (and for
// 16-bit types), QR above, as PyTorch's _orthogonalize.
void orthogonalize(at::Tensor m, double eps) {
  if (m.size(2) <= 2 || m.scalar_type() == at::kHalf || m.scalar_type() == at::kBFloat16) {
    gram_schmidt(m, eps);
  } else {
    m.copy_(std::get<0>(at::linalg_qr(m)));
  }
}

// PyTorch forks the CPU generator and seeds it with rng.randint(10^9); a
// generator of our own, seeded alike, draws the same numbers.
at::Generator seeded_generator(PowerSGDState& st) {
  return at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(st.rng.randint(1000000000)));
}

// What a memorized tensor must look like; anything else came from another
// model or bucket layout (a checkpoint of something else).
void check_size(const at::Tensor& t, int64_t numel, const char* what, size_t bucket) {
  if (t.numel() != numel)
    throw InvalidArgument("PowerSGDHook: the " + std::string(what) + " kept for bucket " + std::to_string(bucket) +
                          " has " + std::to_string(t.numel()) + " elements, the bucket needs " + std::to_string(numel) +
                          ": the buckets changed since it was saved (another model, bucket_cap_mb or world size?). "
                          "Start the hook afresh.");
}

// State loaded from a checkpoint arrives on the CPU (object collectives and checkpoint files hold CPU tensors):
// this bucket's memories move to the bucket's device before its step uses them.
void keep_on_device(PowerSGDState& st, size_t b, const at::Device& device) {
  for (auto* kept : {&st.error, &st.p, &st.q}) {
    auto it = kept->find(b);
    if (it != kept->end() && it->second.device() != device) it->second = it->second.to(device);
  }
}

// Plain averaging before start_powerSGD_iter: PyTorch's _allreduce_fut.
Work average(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  buffer.div_(group.size());
  AllReduceOptions o;
  o.async_op = true;
  return group.all_reduce(buffer, o);
}

// Error feedback: what compression sees is the gradients plus last step's
// local error, in memory of its own (kept from step to step: a fresh buffer
// each step costs more in page faults than PowerSGD's arithmetic), so that the
// bucket can take the output while this step's error is measured against it.
// PyTorch adds in place and clones: the same values, one pass more.
at::Tensor with_error(PowerSGDState& st, size_t b, const at::Tensor& input) {
  if (!st.options.use_error_feedback) return input;
  auto it = st.error.find(b);
  if (it == st.error.end()) it = st.error.emplace(b, at::zeros({input.numel()}, input.options())).first;
  check_size(it->second, input.numel(), "error feedback", b);
  at::Tensor& source = st.scratch[b];
  if (!source.defined() || source.numel() != input.numel()) source = at::empty({input.numel()}, input.options());
  at::add_out(source, input, it->second);
  return source;
}

// The same view as `t` (a view into `buffer`) into `other`, laid out as buffer.
at::Tensor same_view(const at::Tensor& t, const at::Tensor& buffer, const at::Tensor& other) {
  const int64_t offset = t.storage_offset() - buffer.storage_offset();  // both in buffer's storage, on any device
  return other.narrow(0, offset, t.numel()).view(t.sizes());
}

// This bucket's error-feedback memory (undefined without error feedback), looked up by the hook: continuations run
// on the group's sequencer while later buckets' hooks change the state's maps, so they use handles only.
at::Tensor error_memory(PowerSGDState& st, size_t b) {
  return st.options.use_error_feedback ? st.error.at(b) : at::Tensor();
}

// This step's local error, into the error's own memory.
void keep_error(at::Tensor error, const at::Tensor& copy, const at::Tensor& output) {
  if (error.defined()) at::sub_out(error, copy, output);
}

// After the last bucket's decompression (every other bucket's continuation ran before it, and the next step's
// hooks come after): without warm start, P and Q are not kept; the step is counted.
void end_of_step(PowerSGDState& st) {
  if (!st.options.warm_start) {
    st.p.clear();
    st.q.clear();
  }
  ++st.iter;
}

}  // namespace

PowerSGDState::PowerSGDState(PowerSGDOptions o) : options(o), rng(o.random_seed) {
  if (o.matrix_approximation_rank < 1)
    throw InvalidArgument("PowerSGD: matrix_approximation_rank must be >= 1, got " +
                          std::to_string(o.matrix_approximation_rank));
  if ((o.use_error_feedback || o.warm_start) && o.start_powerSGD_iter <= 1)
    throw InvalidArgument("PowerSGD: start_powerSGD_iter must be > 1 with error feedback or warm start (got " +
                          std::to_string(o.start_powerSGD_iter) +
                          "): DDP rebuilds its buckets after the first iteration, which would invalidate what the "
                          "hook memorized per bucket");
  if (!(o.min_compression_rate >= 0) || !(o.orthogonalization_epsilon >= 0))
    throw InvalidArgument("PowerSGD: min_compression_rate and orthogonalization_epsilon must be >= 0");
}

double PowerSGDState::compression_rate() const {
  return numel_after_compression > 0 ? double(numel_before_compression) / double(numel_after_compression) : 0.0;
}

PowerSGDHook::PowerSGDHook(PowerSGDOptions options, bool batched)
    : state_(std::make_shared<PowerSGDState>(options)), batched_(batched) {}

Work PowerSGDHook::run(ProcessGroup& group, GradBucket& bucket) {
  if (state_->iter < state_->options.start_powerSGD_iter) {
    if (bucket.is_last()) ++state_->iter;
    return average(group, bucket);
  }
  keep_on_device(*state_, bucket.index, bucket.buffer.device());
  return batched_ ? run_batched(group, bucket) : run_layerwise(group, bucket);
}

Work PowerSGDHook::run_layerwise(ProcessGroup& group, GradBucket& bucket) {
  auto st = state_;
  const PowerSGDOptions& o = st->options;
  const size_t b = bucket.index;
  const int64_t world = group.size();
  at::Tensor input = bucket.buffer;
  at::Tensor source = with_error(*st, b, input);  // read from here, the output goes to input

  // Step I: matrices worth compressing, and the rest (biases, small ones).
  std::vector<at::Tensor> matrices, outputs, uncompressed, flat_parts;
  int64_t p_total = 0, q_total = 0;
  for (const at::Tensor& t : bucket.gradients) {
    const int64_t n = t.dim() > 0 ? t.size(0) : 1, m = n > 0 ? t.numel() / n : 0;
    const int64_t r = std::min({n, m, o.matrix_approximation_rank});
    st->numel_before_compression += n * m;
    if (t.numel() > 0 && double((n + m) * r) * o.min_compression_rate < double(n * m)) {
      matrices.push_back(same_view(t, input, source).view({n, m}));
      outputs.push_back(t.view({n, m}));
      p_total += n * r;
      q_total += m * r;
      st->numel_after_compression += (n + m) * r;
    } else {
      uncompressed.push_back(t);
      flat_parts.push_back(same_view(t, input, source).reshape({-1}));
      st->numel_after_compression += n * m;
    }
  }

  // Step II: the uncompressed tensors, contiguous, for one all_reduce.
  at::Tensor flat = flat_parts.empty() ? at::empty({0}, input.options()) : at::cat(flat_parts);

  // Step III: P and Q memory, allocated on the first compressed step (or every
  // step without warm start); Q random then, else last step's Q.
  const bool randomize = !o.warm_start || !st->p.count(b);
  if (randomize) {
    st->p[b] = at::empty({p_total}, input.options());
    st->q[b] = at::empty({q_total}, input.options());
  } else {
    check_size(st->p[b], p_total, "P", b);
    check_size(st->q[b], q_total, "Q", b);
  }
  // Matrices grouped by shape, in order of first appearance; stacked per shape
  // with batch_tensors_with_same_shape, one [1, n, m] view each otherwise.
  std::vector<std::pair<std::vector<int64_t>, std::vector<size_t>>> by_shape;  // shape, indices into matrices
  for (size_t i = 0; i < matrices.size(); ++i) {
    auto it = std::find_if(by_shape.begin(), by_shape.end(),
                           [&](const auto& e) { return matrices[i].sizes() == at::IntArrayRef(e.first); });
    if (it == by_shape.end())
      by_shape.push_back({matrices[i].sizes().vec(), {i}});
    else
      it->second.push_back(i);
  }
  // Per unit: its input batch, where its output goes (one [1, n, m] view, or a
  // stacked batch's own memory and the views to copy it to), its P and Q.
  std::vector<at::Tensor> batches, outs, ps, qs;
  std::vector<std::vector<at::Tensor>> scatter_to;
  int64_t p_at = 0, q_at = 0;
  for (auto& [shape, indices] : by_shape) {
    std::vector<at::Tensor> units;
    if (o.batch_tensors_with_same_shape && indices.size() > 1) {
      std::vector<at::Tensor> in, to;
      for (size_t i : indices) {
        in.push_back(matrices[i]);
        to.push_back(outputs[i]);
      }
      units.push_back(at::stack(in));
      outs.push_back(at::empty_like(units.back()));
      scatter_to.push_back(to);
    } else {
      for (size_t i : indices) {
        units.push_back(matrices[i].unsqueeze(0));
        outs.push_back(outputs[i].unsqueeze(0));
        scatter_to.emplace_back();
      }
    }
    for (const at::Tensor& u : units) {
      const int64_t k = u.size(0), n = u.size(1), m = u.size(2), r = std::min({n, m, o.matrix_approximation_rank});
      batches.push_back(u);
      ps.push_back(st->p[b].narrow(0, p_at, k * n * r).view({k, n, r}));
      qs.push_back(st->q[b].narrow(0, q_at, k * m * r).view({k, m, r}));
      p_at += k * n * r;
      q_at += k * m * r;
    }
  }
  if (!randomize) {
    for (const at::Tensor& q : qs) orthogonalize(q, o.orthogonalization_epsilon);
  } else {
    at::Generator gen = seeded_generator(*st);  // drawn even when no matrix needs it, as PyTorch
    for (at::Tensor& q : qs) {
      q.copy_(at::randn(q.sizes(), gen, q.options().device(at::kCPU)));  // drawn on the CPU, as PyTorch's
      orthogonalize(q, o.orthogonalization_epsilon);
    }
  }
  // P = M Q, per matrix.
  for (size_t i = 0; i < batches.size(); ++i) at::bmm_out(ps[i], batches[i], qs[i]);

  AllReduceOptions async;
  async.async_op = true;
  Work uncompressed_sum = group.all_reduce(flat, async);  // empty: completes at once, still the group's
  ProcessGroup* g = &group;
  const bool last = bucket.is_last();
  at::Tensor p_memory = st->p[b], q_memory = st->q[b], error = error_memory(*st, b);
  return uncompressed_sum
      .then([g, world, uncompressed, p_memory](at::Tensor sum) {
        // The averaged uncompressed tensors back into the bucket; then sum the Ps
        // (no division: they are orthogonalized next).
        sum.div_(world);
        int64_t offset = 0;
        for (const at::Tensor& t : uncompressed) {
          t.copy_(sum.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
        at::Tensor p = p_memory;
        if (p.numel() > 0) g->all_reduce(p);
        return p;
      })
      .then([st, g, batches, ps, qs, q_memory](at::Tensor) {
        // Q = M^T P with P orthogonal, summed over ranks.
        for (const at::Tensor& p : ps) orthogonalize(p, st->options.orthogonalization_epsilon);
        for (size_t i = 0; i < batches.size(); ++i) {
          at::Tensor q = qs[i];
          at::bmm_out(q, batches[i].transpose(1, 2), ps[i]);
        }
        at::Tensor q = q_memory;
        if (q.numel() > 0) g->all_reduce(q);
        return q;
      })
      .then([st, world, input, source, error, outs, ps, qs, scatter_to, last](at::Tensor q) {
        // Decompress: M = P Q^T / W into the bucket; remember what was lost.
        q.div_(world);
        for (size_t i = 0; i < outs.size(); ++i) {
          at::Tensor out = outs[i];
          at::bmm_out(out, ps[i], qs[i].transpose(1, 2));
          for (size_t k = 0; k < scatter_to[i].size(); ++k) scatter_to[i][k].copy_(out[k]);
        }
        keep_error(error, source, input);
        if (last) end_of_step(*st);
        return input;
      });
}

// The whole bucket as one square matrix, zero-padded: PyTorch's batched_powerSGD_hook.
Work PowerSGDHook::run_batched(ProcessGroup& group, GradBucket& bucket) {
  auto st = state_;
  const PowerSGDOptions& o = st->options;
  const size_t b = bucket.index;
  const int64_t world = group.size(), total = bucket.buffer.numel();
  const auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
  const int64_t r = std::min(side, o.matrix_approximation_rank);  // PyTorch fails an assertion if side < rank
  st->numel_before_compression += total;
  st->numel_after_compression += side * r * 2;
  // PyTorch resizes the bucket in place; a padded copy here.
  at::Tensor& padded_memory = st->padded[b];
  if (!padded_memory.defined() || padded_memory.numel() != side * side)
    padded_memory = at::zeros({side * side}, bucket.buffer.options());
  at::Tensor padded = padded_memory;
  padded.narrow(0, 0, total).copy_(bucket.buffer);
  padded.narrow(0, total, side * side - total).zero_();
  at::Tensor source = with_error(*st, b, padded);
  at::Tensor matrix = source.view({side, side});
  if (!o.warm_start || !st->p.count(b)) {
    st->p[b] = at::empty({side, r}, padded.options());
    at::Generator gen = seeded_generator(*st);
    st->q[b] = at::randn({side, r}, gen, padded.options().device(at::kCPU)).to(padded.device());  // as PyTorch's
  } else {
    check_size(st->p[b], side * r, "P", b);
    check_size(st->q[b], side * r, "Q", b);
  }
  at::Tensor p = st->p[b], q = st->q[b];
  orthogonalize(q.unsqueeze(0), o.orthogonalization_epsilon);
  at::mm_out(p, matrix, q);
  AllReduceOptions async;
  async.async_op = true;
  ProcessGroup* g = &group;
  const bool last = bucket.is_last();
  at::Tensor buffer = bucket.buffer, error = error_memory(*st, b);
  return group.all_reduce(p, async)
      .then([st, g, matrix, p, q](at::Tensor) {
        orthogonalize(p.unsqueeze(0), st->options.orthogonalization_epsilon);
        at::Tensor out = q;
        at::mm_out(out, matrix.t(), p);
        g->all_reduce(out);
        return out;
      })
      .then([st, world, p, padded, source, error, buffer, total, side, last](at::Tensor q) {
        q.div_(world);
        at::Tensor m = padded.view({side, side});
        at::mm_out(m, p, q.t());
        keep_error(error, source, padded);
        buffer.copy_(padded.narrow(0, 0, total));
        if (last) end_of_step(*st);
        return buffer;
      });
}

}  // namespace ddp
