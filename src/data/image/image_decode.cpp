#include "ddp/data/image_decode.h"

#include <ATen/ATen.h>
#include <spng.h>
#include <turbojpeg.h>

#include <fstream>
#include <memory>
#include <vector>

namespace ddp::data {
namespace {

const char* kAdvice = "; re-encode or remove the file (it is read as PIL's Image.open(...).convert(\"RGB\") would)";

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw DataError(name + ": " + what + kAdvice);
}

// Interleaved HWC pixels (owned by `buffer`) -> contiguous CHW.
at::Tensor to_chw(std::vector<uint8_t>& buffer, int64_t h, int64_t w) {
  return at::from_blob(buffer.data(), {h, w, 3}, at::kByte).permute({2, 0, 1}).contiguous();
}

at::Tensor decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name) {
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
  if (!tj) fail(name, std::string("cannot start libjpeg-turbo: ") + tjGetErrorStr2(nullptr));
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  auto* src = const_cast<unsigned char*>(bytes);
  if (tjDecompressHeader3(tj.get(), src, static_cast<unsigned long>(size), &w, &h, &subsamp, &colorspace) != 0)
    fail(name,
         std::string("corrupt or truncated JPEG: unreadable header (libjpeg-turbo: ") + tjGetErrorStr2(tj.get()) + ")");
  if (w <= 0 || h <= 0) fail(name, "JPEG of size " + std::to_string(w) + "x" + std::to_string(h));
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  // Warnings (e.g. a truncated scan, which libjpeg fills with grey) are errors too, as in PIL.
  if (tjDecompress2(tj.get(), src, static_cast<unsigned long>(size), rgb.data(), w, 0, h, TJPF_RGB,
                    TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0)
    fail(name, std::string("corrupt or truncated JPEG (libjpeg-turbo: ") + tjGetErrorStr2(tj.get()) + ")");
  return to_chw(rgb, h, w);
}

at::Tensor decode_png(const uint8_t* bytes, size_t size, const std::string& name) {
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> ctx(spng_ctx_new(0), spng_ctx_free);
  if (!ctx) fail(name, "cannot start libspng (out of memory)");
  auto check = [&](int err, const char* step) {
    if (err != 0) fail(name, std::string("corrupt PNG: ") + step + " failed (libspng: " + spng_strerror(err) + ")");
  };
  check(spng_set_png_buffer(ctx.get(), bytes, size), "reading the buffer");
  spng_ihdr ihdr{};
  check(spng_get_ihdr(ctx.get(), &ihdr), "reading the header");
  if (ihdr.bit_depth == 16)
    fail(name, "16-bit PNG; only 8-bit (and lower) PNGs are supported, as PIL converts 16-bit ones lossily");
  size_t len = 0;
  check(spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &len), "sizing the image");
  const int64_t h = ihdr.height, w = ihdr.width;
  if (len != static_cast<size_t>(h * w * 3)) fail(name, "unexpected decoded size " + std::to_string(len));
  std::vector<uint8_t> rgb(len);
  check(spng_decode_image(ctx.get(), rgb.data(), len, SPNG_FMT_RGB8, 0), "decoding the pixels");
  return to_chw(rgb, h, w);
}

}  // namespace

at::Tensor decode_image_bytes(const uint8_t* bytes, size_t size, const std::string& name) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return decode_jpeg(bytes, size, name);
  if (size >= 8 && std::equal(kPng, kPng + 8, bytes)) return decode_png(bytes, size, name);
  fail(name, size == 0 ? std::string("empty file, expected a JPEG or PNG image")
                       : "neither a JPEG (FF D8 FF) nor a PNG (89 50 4E 47 ...) by its first bytes");
}

at::Tensor decode_image(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the image file (missing or not readable)");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(size > 0 ? static_cast<size_t>(size) : 0);
  if (size < 0 || !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw DataError(path + ": read error after " + std::to_string(in.gcount()) + " bytes");
  return decode_image_bytes(bytes.data(), bytes.size(), path);
}

}  // namespace ddp::data
