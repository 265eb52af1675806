// torchvision's ImageNet transforms on one decoded image (uint8 [3, H, W], as
// decode_image returns it), drawing randomness only from the generator given,
// in the order and with the calls torchvision makes on torch's global
// generator: with the same seed, the same crops and flips.
//
//   // train: RandomResizedCrop(224) + RandomHorizontalFlip(); val: Resize(256) + CenterCrop(224)
//   at::Tensor a = ddp::data::random_horizontal_flip_image(ddp::data::random_resized_crop(img, 224, gen), 0.5, gen);
//   at::Tensor b = ddp::data::center_crop(ddp::data::resize_shorter(img, 256), 224);
//
// Resizing is bilinear with antialiasing (ATen's _upsample_bilinear2d_aa, the
// port of PIL's resampler torchvision uses for tensors with antialias=True),
// rounded to uint8: within 1 of PIL's resize (PIL rounds after each pass).
// Bad arguments throw ddp::InvalidArgument.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace ddp::data {

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// RandomResizedCrop.get_params: 10 tries of area in `scale` x H*W and log-uniform
// aspect ratio in `ratio`, then the centre-crop fallback.
CropBox random_resized_crop_box(int64_t height, int64_t width, at::Generator& gen,
                                std::pair<double, double> scale = {0.08, 1.0},
                                std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0});
// Bilinear, antialiased: uint8 [3, H, W] -> uint8 [3, out_h, out_w].
at::Tensor resize_image(const at::Tensor& image, int64_t out_h, int64_t out_w);
// Resize(size): the shorter side becomes `size`, the longer int(size * long / short).
at::Tensor resize_shorter(const at::Tensor& image, int64_t size);
// CenterCrop(size): offsets round((H - size) / 2) (half to even); zero padding if the image is smaller.
at::Tensor center_crop(const at::Tensor& image, int64_t size);
// RandomResizedCrop(size): crop box as above, resized to size x size.
at::Tensor random_resized_crop(const at::Tensor& image, int64_t size, at::Generator& gen);
// RandomHorizontalFlip(p): flips when torch.rand(1) < p.
at::Tensor random_horizontal_flip_image(const at::Tensor& image, double p, at::Generator& gen);

}  // namespace ddp::data
