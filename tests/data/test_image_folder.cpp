// ImageFolder against its oracles: torchvision's ImageFolder (classes, sample
// order), PIL (decoded pixels, exactly), torchvision's transforms (crop boxes
// and flips exactly from the same seed; resized pixels within 1, the rounding
// PIL does between its two passes), and the errors a broken folder gives.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "data/data_test_util.h"
#include "ddp/data/batch_loader.h"
#include "ddp/data/image_decode.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/image_transforms.h"
#include "ddp/data/transforms.h"

namespace ddp::testing {
namespace {

constexpr int64_t kSize = 32, kResize = 36;

// One generated folder and the oracle's view of it, shared by the tests.
struct Fixture {
  TempDir dir;
  std::string root = dir.file("data/train"), out = dir.file("oracle");
  Fixture() {
    const std::string make =
        std::string(DDP_PYTHON " ") + MAKE_IMAGE_FOLDER + " " + dir.file("data") + " --classes 10 --train 7 --val 1";
    const std::string oracle = std::string(DDP_PYTHON " ") + IMAGE_FOLDER_ORACLE + " " + root + " " + out + " " +
                               std::to_string(kSize) + " " + std::to_string(kResize);
    if (std::system(make.c_str()) != 0 || std::system(oracle.c_str()) != 0)
      throw std::runtime_error("the generator or oracle failed: needs python3-pil and python3-torchvision");
  }
  std::vector<std::string> lines(const std::string& name) const {
    std::ifstream in(out + "/" + name);
    std::vector<std::string> v;
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }
  at::Tensor hwc(const std::string& name, int64_t h, int64_t w) const {  // -> CHW
    std::string bytes = read_bytes(out + "/" + name);
    EXPECT_EQ(int64_t(bytes.size()), h * w * 3) << name;
    return at::from_blob(bytes.data(), {h, w, 3}, at::kByte).permute({2, 0, 1}).clone();
  }
};

Fixture& fixture() {
  static auto* f = new Fixture();  // built once; the directory lives until the process ends
  return *f;
}

int64_t max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kInt) - b.to(at::kInt)).abs().max().item<int64_t>();
}

TEST(ImageFolder, ClassesAndSampleOrderAreTorchvisions) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  EXPECT_EQ(folder.classes(), f.lines("classes.txt"));
  auto samples = f.lines("samples.txt");
  ASSERT_EQ(folder.size(), int64_t(samples.size()));
  ASSERT_EQ(folder.size(), 70);
  for (int64_t i = 0; i < folder.size(); ++i)
    EXPECT_EQ(std::to_string(folder.label(i)) + " " + folder.path(i), samples[i]) << "sample " << i;
  EXPECT_TRUE(at::equal(folder.labels(), at::arange(10, at::kLong).repeat_interleave(7)));
}

TEST(ImageFolder, DecodingEqualsPilExactly) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  auto sizes = f.lines("sizes.txt");
  for (int64_t i = 0; i < folder.size(); ++i) {
    int64_t h = 0, w = 0;
    std::istringstream(sizes[i]) >> h >> w;
    at::Tensor ours = data::decode_image(folder.path(i));
    ASSERT_EQ(ours.sizes(), (at::IntArrayRef{3, h, w})) << folder.path(i);
    EXPECT_EQ(max_diff(ours, f.hwc(std::to_string(i) + ".rgb", h, w)), 0) << folder.path(i);
  }
}

TEST(ImageFolder, ResizeAndCenterCropWithinOneOfTorchvision) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  int64_t worst = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    at::Tensor ours = data::center_crop(data::resize_shorter(data::decode_image(folder.path(i)), kResize), kSize);
    worst = std::max(worst, max_diff(ours, f.hwc(std::to_string(i) + ".val", kSize, kSize)));
  }
  EXPECT_LE(worst, 1);
}

TEST(ImageFolder, RandomResizedCropAndFlipAreTorchvisionsForTheSameSeed) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  auto boxes = f.lines("boxes.txt");
  int64_t worst = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    at::Tensor img = data::decode_image(folder.path(i));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(i));
    data::CropBox b = data::random_resized_crop_box(img.size(1), img.size(2), gen);
    const bool flip = at::rand({1}, gen).item<double>() < 0.5;
    std::ostringstream got;
    got << b.top << " " << b.left << " " << b.height << " " << b.width << " " << int(flip);
    EXPECT_EQ(got.str(), boxes[i]) << "sample " << i;
    gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(i));
    at::Tensor ours = data::random_horizontal_flip_image(data::random_resized_crop(img, kSize, gen), 0.5, gen);
    worst = std::max(worst, max_diff(ours, f.hwc(std::to_string(i) + ".train", kSize, kSize)));
  }
  EXPECT_LE(worst, 1);
}

TEST(ImageFolder, CentreCropFallbackAfterTenMisses) {
  // scale (2, 3) never fits: the fallback crops the centre at the nearest allowed ratio.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(1));
  data::CropBox b = data::random_resized_crop_box(10, 40, gen, {2.0, 3.0});
  EXPECT_EQ(b.height, 10);
  EXPECT_EQ(b.width, 13);  // round(10 * 4/3)
  EXPECT_EQ(b.top, 0);
  EXPECT_EQ(b.left, 13);  // (40 - 13) // 2
}

TEST(ImageFolder, BatchesThroughTheLoaderAreNormalisedAndInOrder) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  data::ImagePipeline p;
  p.train = false;
  p.size = kSize;
  p.resize = kResize;
  data::BatchLoaderOptions o;
  o.batch_size = 4;
  o.workers = 3;
  o.prefetch = 3;
  data::BatchLoader loader(
      folder.size(),
      [&](const std::vector<int64_t>& idx, at::Generator& gen) { return data::load_image_batch(folder, idx, p, gen); },
      o);
  std::vector<int64_t> order = {69, 3, 17, 40, 5, 0, 22, 61, 33, 8};
  loader.start_epoch(order, 0);
  int64_t k = 0;
  while (auto b = loader.next()) {
    for (int64_t j = 0; j < b->data.size(0); ++j, ++k) {
      const int64_t i = order[k];
      EXPECT_EQ(b->target[j].item<int64_t>(), folder.label(i));
      at::Tensor want = data::normalize(f.hwc(std::to_string(i) + ".val", kSize, kSize).unsqueeze(0), p.mean, p.std);
      EXPECT_LE((b->data[j] - want[0]).abs().max().item<double>(), 1.0 / 255 / 0.224 + 1e-5) << "sample " << i;
    }
  }
  EXPECT_EQ(k, int64_t(order.size()));
}

template <typename Fn>
std::string data_error(Fn fn) {
  try {
    fn();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

template <typename Fn>
void expect_error(Fn fn, const std::string& part) {
  const std::string msg = data_error(fn);
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

TEST(ImageFolder, CorruptJpegNamesTheFile) {
  Fixture& f = fixture();
  data::ImageFolder folder(f.root);
  const std::string bad = f.dir.file("cut.jpg");
  std::string bytes = read_bytes(folder.path(6));  // a .jpg (kind 6)
  write_bytes(bad, bytes.substr(0, bytes.size() / 2));
  expect_error([&] { data::decode_image(bad); }, bad + ": corrupt or truncated JPEG");
  write_bytes(bad, "not an image at all");
  expect_error([&] { data::decode_image(bad); }, bad + ": neither a JPEG");
  // Inside a folder: the batch that holds it fails, naming it.
  TempDir d;
  std::filesystem::create_directories(d.file("a"));
  write_bytes(d.file("a/x.jpg"), bytes.substr(0, 200));
  data::ImageFolder broken(d.path());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(0));
  expect_error([&] { data::load_image_batch(broken, {0}, {}, gen); }, d.file("a/x.jpg"));
}

TEST(ImageFolder, EmptyClassNoClassesAndUnsupportedFormatsAreNamed) {
  TempDir d;
  expect_error([&] { data::ImageFolder x(d.file("missing")); }, d.file("missing") + ": no such directory");
  expect_error([&] { data::ImageFolder x(d.path()); }, d.path() + ": no class directory");
  std::filesystem::create_directories(d.file("cat"));
  std::filesystem::create_directories(d.file("dog"));
  write_bytes(d.file("cat/a.png"), "x");
  write_bytes(d.file("dog/readme.txt"), "x");
  expect_error([&] { data::ImageFolder x(d.path()); }, d.file("dog") + ": class 'dog' has no image");
  write_bytes(d.file("dog/b.BMP"), "x");
  expect_error([&] { data::ImageFolder x(d.path()); }, d.file("dog/b.BMP") + ": an image format");
}

}  // namespace
}  // namespace ddp::testing
