// An ImageNet-style folder of images, root/<class>/**/<file>, indexed as
// torchvision.datasets.ImageFolder indexes it: classes are the sorted names of
// root's subdirectories (symlinks followed, hidden ones included), class i is
// the i-th; each class's files are found by a sorted walk of its directory and
// kept when their extension, case-insensitively, is one of torchvision's
// IMG_EXTENSIONS. Only the names are read here; pixels are decoded when a
// batch is loaded (load_image_batch), on the loader's worker threads, and only
// for the indices asked for.
//
//   ddp::data::ImageFolder train("/data/imagenet/train");
//   ddp::data::ImagePipeline p;  p.train = true;  p.size = 224;
//   ddp::data::Batch b = ddp::data::load_image_batch(train, {0, 5, 9}, p, gen);  // float [3, 3, 224, 224], int64 [3]
//
// Errors are ddp::data::DataError naming the directory or file: root missing,
// no class directory, a class without an image, an image in a format torchvision
// accepts but this reader does not decode (.bmp, .ppm, .pgm, .tif, .tiff, .webp),
// and (at load time) a corrupt image.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/data/data_error.h"

namespace ddp::data {

class ImageFolder {
 public:
  explicit ImageFolder(const std::string& root);

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }  // index = label
  int64_t size() const { return static_cast<int64_t>(paths_.size()); }
  const std::string& path(int64_t i) const { return paths_.at(static_cast<size_t>(i)); }
  int64_t label(int64_t i) const { return labels_.at(static_cast<size_t>(i)); }
  at::Tensor labels() const;  // int64 [size()]

 private:
  std::string root_;
  std::vector<std::string> classes_, paths_;
  std::vector<int64_t> labels_;
};

// How a batch is made from files: train: RandomResizedCrop(size) + RandomHorizontalFlip(0.5);
// eval: Resize(resize) + CenterCrop(size). Then normalised with mean and std.
struct ImagePipeline {
  bool train = true;
  int64_t size = 224;
  int64_t resize = 256;                              // eval only: the shorter side before the centre crop
  std::vector<double> mean = {0.485, 0.456, 0.406};  // ImageNet's, as torchvision's references use
  std::vector<double> std = {0.229, 0.224, 0.225};
};

// Decodes and transforms folder's samples `indices`, in order; samples draw their
// randomness from gen one after the other. Returns float [B, 3, size, size] and int64 [B].
Batch load_image_batch(const ImageFolder& folder, const std::vector<int64_t>& indices, const ImagePipeline& pipeline,
                       at::Generator& gen);

}  // namespace ddp::data
