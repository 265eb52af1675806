#include "ddp/data/transforms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "ddp/errors.h"

namespace ddp::data {
namespace {

[[noreturn]] void bad(const char* fn, const std::string& what) {
  throw ddp::InvalidArgument(std::string(fn) + ": " + what);
}

void check_batch(const char* fn, const at::Tensor& batch) {
  if (!batch.defined()) bad(fn, "batch is an undefined tensor");
  if (batch.dim() != 4)
    bad(fn, "batch must have 4 dimensions [B, C, H, W], got " + std::to_string(batch.dim()) + " (sizes " +
                c10::str(batch.sizes()) + "); add a batch dimension with unsqueeze(0)");
}

}  // namespace

at::Tensor normalize(const at::Tensor& images, const std::vector<double>& mean, const std::vector<double>& std) {
  check_batch("normalize", images);
  if (images.scalar_type() != at::kByte)
    bad("normalize", std::string("images must be uint8 pixels (0..255), got ") + c10::toString(images.scalar_type()));
  const int64_t c = images.size(1);
  if (static_cast<int64_t>(mean.size()) != c || static_cast<int64_t>(std.size()) != c)
    bad("normalize", "mean and std need one value per channel: images have " + std::to_string(c) +
                         " channels, mean has " + std::to_string(mean.size()) + " and std " +
                         std::to_string(std.size()));
  for (size_t i = 0; i < std.size(); ++i)
    if (!(std[i] > 0) || !std::isfinite(std[i]) || !std::isfinite(mean[i]))
      bad("normalize", "std[" + std::to_string(i) + "] must be positive and finite and mean[" + std::to_string(i) +
                           "] finite, got std " + std::to_string(std[i]) + ", mean " + std::to_string(mean[i]));
  auto channel = [c](const std::vector<double>& v) {
    return at::tensor(std::vector<float>(v.begin(), v.end())).view({1, c, 1, 1});
  };
  return images.to(at::kFloat).div_(255).sub_(channel(mean)).div_(channel(std));
}

namespace {
// Sample i's h x w window at (off[2i], off[2i+1]) of `padded`.
at::Tensor crop_at(const at::Tensor& padded, const at::Tensor& offsets, int64_t h, int64_t w) {
  const int64_t b = padded.size(0);
  at::Tensor out = at::empty({b, padded.size(1), h, w}, padded.options());
  const int64_t* off = offsets.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) out[i].copy_(padded[i].narrow(1, off[2 * i], h).narrow(2, off[2 * i + 1], w));
  return out;
}
}  // namespace

at::Tensor random_crop(const at::Tensor& batch, int64_t padding, at::Generator& gen) {
  check_batch("random_crop", batch);
  if (padding < 0) bad("random_crop", "padding must be >= 0, got " + std::to_string(padding));
  const int64_t b = batch.size(0), h = batch.size(2), w = batch.size(3);
  // Offsets into the padded image, in [0, 2p]; an offset p is the identity.
  at::Tensor offsets = at::randint(0, 2 * padding + 1, {b, 2}, gen, at::kLong);
  if (padding == 0) return batch.clone();
  return crop_at(at::constant_pad_nd(batch, {padding, padding, padding, padding}, 0), offsets, h, w);
}

at::Tensor random_window(const at::Tensor& padded, int64_t h, int64_t w, at::Generator& gen) {
  check_batch("random_window", padded);
  if (h < 1 || w < 1 || h > padded.size(2) || w > padded.size(3))
    bad("random_window", "the window " + std::to_string(h) + "x" + std::to_string(w) + " must fit in the " +
                             std::to_string(padded.size(2)) + "x" + std::to_string(padded.size(3)) + " images");
  const int64_t b = padded.size(0);
  at::Tensor rows = at::randint(0, padded.size(2) - h + 1, {b, 1}, gen, at::kLong);
  at::Tensor cols = at::randint(0, padded.size(3) - w + 1, {b, 1}, gen, at::kLong);
  return crop_at(padded, at::cat({rows, cols}, 1).contiguous(), h, w);
}

at::Tensor random_horizontal_flip(const at::Tensor& batch, double p, at::Generator& gen) {
  check_batch("random_horizontal_flip", batch);
  if (!(p >= 0 && p <= 1)) bad("random_horizontal_flip", "p must be in [0, 1], got " + std::to_string(p));
  const int64_t b = batch.size(0);
  at::Tensor flip = at::rand({b}, gen) < p;  // rand is in [0, 1): p = 1 always flips, p = 0 never
  at::Tensor out = batch.clone(at::MemoryFormat::Contiguous);
  at::Tensor which = flip.nonzero().view({-1});
  if (which.numel() > 0) out.index_copy_(0, which, batch.index_select(0, which).flip({3}));
  return out;
}

at::Tensor cutout(const at::Tensor& batch, int64_t size, at::Generator& gen) {
  check_batch("cutout", batch);
  if (size < 0) bad("cutout", "size must be >= 0, got " + std::to_string(size));
  const int64_t b = batch.size(0), h = batch.size(2), w = batch.size(3);
  at::Tensor cy = at::randint(0, std::max<int64_t>(h, 1), {b, 1, 1}, gen, at::kLong);
  at::Tensor cx = at::randint(0, std::max<int64_t>(w, 1), {b, 1, 1}, gen, at::kLong);
  at::Tensor y0 = cy - size / 2, x0 = cx - size / 2;
  at::Tensor rows = at::arange(h, at::kLong).view({1, h, 1});
  at::Tensor cols = at::arange(w, at::kLong).view({1, 1, w});
  // [B, H, W]: inside the square (the parts outside the image simply match no pixel).
  at::Tensor mask = (rows >= y0) & (rows < y0 + size) & (cols >= x0) & (cols < x0 + size);
  return batch.masked_fill(mask.unsqueeze(1), 0);
}

}  // namespace ddp::data
