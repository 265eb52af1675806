// Image files to pixels: JPEG through libjpeg-turbo (TurboJPEG API, accurate
// IDCT, fancy upsampling: what PIL's libjpeg does by default) and PNG through
// libspng. The result is what PIL's Image.open(path).convert("RGB") gives:
// grey replicated to three channels, alpha and palette transparency dropped.
//
//   at::Tensor img = ddp::data::decode_image("/data/train/n01440764/x.JPEG");  // uint8 [3, H, W]
//
// The format is found from the file's first bytes, not its name. A missing,
// truncated or corrupt file (libjpeg-turbo's warnings included, as PIL refuses
// a truncated JPEG) throws ddp::data::DataError naming the file and the decoder's
// message. Thread-safe: each call has its own decoder.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ddp/data/data_error.h"

namespace ddp::data {

// RGB uint8 [3, H, W] of a JPEG or PNG file.
at::Tensor decode_image(const std::string& path);
// The same for a file already in memory; `name` is what errors call it.
at::Tensor decode_image_bytes(const uint8_t* bytes, size_t size, const std::string& name);

}  // namespace ddp::data
