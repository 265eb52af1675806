#include "ddp/data/image_transforms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "ddp/errors.h"

namespace ddp::data {
namespace {

[[noreturn]] void bad(const char* fn, const std::string& what) {
  throw ddp::InvalidArgument(std::string(fn) + ": " + what);
}

void check_image(const char* fn, const at::Tensor& image) {
  if (!image.defined() || image.dim() != 3 || image.scalar_type() != at::kByte)
    bad(fn, "image must be uint8 [C, H, W] as decode_image returns it, got " +
                (image.defined() ? c10::str(image.scalar_type(), " ", image.sizes()) : std::string("undefined")));
}

// Python's int(round(x)): half to even, as the default rounding mode does.
int64_t py_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

double uniform(double lo, double hi, at::Generator& gen) {
  return at::empty({1}, at::kFloat).uniform_(lo, hi, gen).item<double>();  // torch.empty(1).uniform_(lo, hi)
}

}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, at::Generator& gen, std::pair<double, double> scale,
                                std::pair<double, double> ratio) {
  if (height < 1 || width < 1) bad("random_resized_crop", "empty image");
  if (!(scale.first <= scale.second) || !(ratio.first <= ratio.second) || !(ratio.first > 0))
    bad("random_resized_crop", "scale and ratio must be (low, high) with low <= high and ratio > 0");
  const double area = double(height) * double(width);
  // torch.log(torch.tensor(ratio)) and torch.exp: float32 ATen ops, as torchvision computes them.
  at::Tensor log_ratio = at::log(at::tensor({float(ratio.first), float(ratio.second)}, at::kFloat));
  const double log_lo = log_ratio[0].item<double>(), log_hi = log_ratio[1].item<double>();
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(scale.first, scale.second, gen);
    const double aspect = at::empty({1}, at::kFloat).uniform_(log_lo, log_hi, gen).exp_().item<double>();
    const int64_t w = py_round(std::sqrt(target_area * aspect));
    const int64_t h = py_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = at::randint(0, height - h + 1, {1}, gen, at::kLong).item<int64_t>();
      const int64_t j = at::randint(0, width - w + 1, {1}, gen, at::kLong).item<int64_t>();
      return {i, j, h, w};
    }
  }
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio.first)
    h = py_round(double(w) / ratio.first);
  else if (in_ratio > ratio.second)
    w = py_round(double(h) * ratio.second);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

at::Tensor resize_image(const at::Tensor& image, int64_t out_h, int64_t out_w) {
  check_image("resize_image", image);
  if (out_h < 1 || out_w < 1) bad("resize_image", "output size must be positive");
  if (image.size(1) == out_h && image.size(2) == out_w) return image.clone();
  at::Tensor x = image.unsqueeze(0).to(at::kFloat);
  at::Tensor y = at::_upsample_bilinear2d_aa(x, {out_h, out_w}, /*align_corners=*/false);
  return y.round_().clamp_(0, 255).to(at::kByte).squeeze(0);
}

at::Tensor resize_shorter(const at::Tensor& image, int64_t size) {
  check_image("resize_shorter", image);
  if (size < 1) bad("resize_shorter", "size must be >= 1, got " + std::to_string(size));
  const int64_t h = image.size(1), w = image.size(2);
  if (h <= w) return resize_image(image, size, static_cast<int64_t>(double(size) * double(w) / double(h)));
  return resize_image(image, static_cast<int64_t>(double(size) * double(h) / double(w)), size);
}

at::Tensor center_crop(const at::Tensor& image, int64_t size) {
  check_image("center_crop", image);
  if (size < 1) bad("center_crop", "size must be >= 1, got " + std::to_string(size));
  at::Tensor img = image;
  int64_t h = img.size(1), w = img.size(2);
  if (h < size || w < size) {  // torchvision pads with zeros first: (size - side) // 2 before, the rest after
    const int64_t ph = std::max<int64_t>(size - h, 0), pw = std::max<int64_t>(size - w, 0);
    img = at::constant_pad_nd(img, {pw / 2, (pw + 1) / 2, ph / 2, (ph + 1) / 2}, 0);
    h = img.size(1);
    w = img.size(2);
  }
  const int64_t top = py_round(double(h - size) / 2.0), left = py_round(double(w - size) / 2.0);
  return img.narrow(1, top, size).narrow(2, left, size).contiguous();
}

at::Tensor random_resized_crop(const at::Tensor& image, int64_t size, at::Generator& gen) {
  check_image("random_resized_crop", image);
  if (size < 1) bad("random_resized_crop", "size must be >= 1, got " + std::to_string(size));
  const CropBox b = random_resized_crop_box(image.size(1), image.size(2), gen);
  return resize_image(image.narrow(1, b.top, b.height).narrow(2, b.left, b.width), size, size);
}

at::Tensor random_horizontal_flip_image(const at::Tensor& image, double p, at::Generator& gen) {
  check_image("random_horizontal_flip_image", image);
  if (!(p >= 0 && p <= 1)) bad("random_horizontal_flip_image", "p must be in [0, 1], got " + std::to_string(p));
  const bool flip = at::rand({1}, gen).item<double>() < p;
  return flip ? image.flip({2}) : image;
}

}  // namespace ddp::data
