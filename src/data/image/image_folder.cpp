#include "ddp/data/image_folder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "ddp/data/image_decode.h"
#include "ddp/data/image_transforms.h"
#include "ddp/data/transforms.h"

namespace ddp::data {
namespace fs = std::filesystem;
namespace {

const char* kLayout = "expected root/<class name>/<images> as torchvision's ImageFolder reads it";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// 1: decoded here, 0: not an image, -1: an image torchvision reads but this reader does not.
int image_kind(const std::string& name) {
  static const char* decoded[] = {".jpg", ".jpeg", ".png"};
  static const char* other[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  const std::string l = lower(name);
  for (const char* e : decoded)
    if (ends_with(l, e)) return 1;
  for (const char* e : other)
    if (ends_with(l, e)) return -1;
  return 0;
}

// os.walk(dir, followlinks=True), sorted by directory path: each directory's files, sorted.
void walk_sorted(const fs::path& dir, std::vector<std::string>& out) {
  std::vector<std::string> dirs{dir.string()};
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
    if (e.is_directory()) dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());  // std::string compares bytes unsigned: Python's order for UTF-8 names
  for (const auto& d : dirs) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(d))
      if (!e.is_directory()) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.push_back(d + "/" + f);
  }
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root) : root_(root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw DataError(root + ": no such directory; " + kLayout);
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) throw DataError(root + ": no class directory (the folder has no subdirectories); " + kLayout);
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    walk_sorted(fs::path(root) / classes_[c], files);
    const size_t before = paths_.size();
    for (const auto& f : files) {
      const int kind = image_kind(f);
      if (kind < 0)
        throw DataError(f +
                        ": an image format this reader does not decode (only .jpg, .jpeg and .png); "
                        "convert it or move it out of " +
                        root);
      if (kind == 0) continue;
      paths_.push_back(f);
      labels_.push_back(static_cast<int64_t>(c));
    }
    if (paths_.size() == before)
      throw DataError(root + "/" + classes_[c] + ": class '" + classes_[c] +
                      "' has no image (.jpg, .jpeg or .png, any case); remove the directory or add its images");
  }
}

at::Tensor ImageFolder::labels() const { return at::tensor(labels_, at::kLong); }

Batch load_image_batch(const ImageFolder& folder, const std::vector<int64_t>& indices, const ImagePipeline& p,
                       at::Generator& gen) {
  const int64_t n = static_cast<int64_t>(indices.size());
  at::Tensor pixels = at::empty({n, 3, p.size, p.size}, at::kByte);
  at::Tensor target = at::empty({n}, at::kLong);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[k];
    if (i < 0 || i >= folder.size())
      throw ddp::InvalidArgument("load_image_batch: index " + std::to_string(i) + " outside [0, " +
                                 std::to_string(folder.size()) + ") of " + folder.root());
    at::Tensor img = decode_image(folder.path(i));
    if (p.train) {
      img = random_horizontal_flip_image(random_resized_crop(img, p.size, gen), 0.5, gen);
    } else {
      img = center_crop(resize_shorter(img, p.resize), p.size);
    }
    pixels[k].copy_(img);
    target[k] = folder.label(i);
  }
  return {normalize(pixels, p.mean, p.std), target};
}

}  // namespace ddp::data
