// ImageNet-style recipes: torchvision's ResNet-18 / ResNet-50 on any folder of
// JPEGs and PNGs laid out as ImageNet is (DATA/train/<class>/*, DATA/val/<class>/*),
// with the reference schedule: SGD momentum 0.9, weight decay 1e-4, lr 0.1 per 256
// samples of global batch, cosine (or --schedule step:N:0.1), RandomResizedCrop +
// flip for training, Resize + CenterCrop for evaluation (docs/data.md).
#include <ATen/ATen.h>

#include <filesystem>
#include <memory>

#include "common.h"
#include "ddp/data/image_folder.h"
#include "ddp/train/evaluate.h"
#include "ddp/train/models/resnet.h"
#include "ddp/train/models/resnet50.h"
#include "dist/host_memory.h"

namespace ddp::train::detail {
namespace {

const char* kLayout =
    "expected ImageNet's layout: train/<class>/<images> and val/<class>/<images>, the same class folders in both "
    "(e.g. train/n01440764/x.JPEG); images .jpg, .jpeg or .png";

std::shared_ptr<data::ImageFolder> open_split(const std::string& dir, const std::string& split) {
  const std::string path = dir + "/" + split;
  if (!std::filesystem::is_directory(path))
    throw data::DataError(dir + ": no " + split + "/ subfolder (--data-dir); " + kLayout);
  return std::make_shared<data::ImageFolder>(path);
}

// Batches of samples picked[i] of the folder.
data::FetchBatch fetcher(std::shared_ptr<data::ImageFolder> folder, data::ImagePipeline pipeline,
                         std::vector<int64_t> picked) {
  return [folder, pipeline, picked = std::move(picked)](const std::vector<int64_t>& idx, at::Generator& gen) {
    std::vector<int64_t> files(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) files[i] = picked.at(static_cast<size_t>(idx[i]));
    return data::load_image_batch(*folder, files, pipeline, gen);
  };
}

void defaults_imagefolder(TrainConfig& cfg, int world_size) {
  fill<int64_t>(cfg.epochs, 90);
  fill<int64_t>(cfg.batch_size, 64);
  fill(cfg.lr, 0.1 * double(*cfg.batch_size * world_size) / 256.0);
  fill(cfg.momentum, 0.9);
  fill(cfg.weight_decay, 1e-4);
  fill(cfg.label_smoothing, 0.0);
  fill(cfg.schedule, "cosine");
  fill<int64_t>(cfg.warmup, 0);
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill<int64_t>(cfg.image_size, 224);
  fill(cfg.precision, "auto");
  fill(cfg.data_mode, "sampler");  // files are read per batch: each rank decodes only its sampler's share
  fill(cfg.data_dir, default_data_dir("imagenet"));
}

Recipe make_imagefolder(TrainConfig& cfg, ProcessGroup& group) {
  if (cfg.data_mode != "sampler")
    throw InvalidArgument("ddp-train: " + cfg.recipe +
                          " reads its images per batch through the DistributedSampler; "
                          "--data " +
                          cfg.data_mode + " is not supported (use --data sampler)");
  require_data_dir(cfg.data_dir, "imagenet",
                   "put an ImageNet-style folder there: train/<class>/*.jpg and val/<class>/*.jpg (.jpeg and .png "
                   "too), e.g. ImageNet's ILSVRC2012 with val/ sorted into class folders, or a subset such as "
                   "Imagenette");
  auto train = open_split(cfg.data_dir, "train");
  auto val = open_split(cfg.data_dir, "val");
  if (train->classes() != val->classes())
    throw data::DataError(cfg.data_dir + ": train/ has " + std::to_string(train->classes().size()) +
                          " classes and val/ " + std::to_string(val->classes().size()) + ", or their names differ; " +
                          kLayout);
  const int64_t classes = static_cast<int64_t>(train->classes().size());
  const int64_t size = *cfg.image_size;
  data::ImagePipeline tp, vp;
  tp.train = true;
  tp.size = size;
  vp.train = false;
  vp.size = size;
  vp.resize = (size * 256 + 112) / 224;  // 256 for 224, in proportion otherwise

  Recipe r;
  r.name = cfg.recipe;
  // A folder is sorted by class: the first N samples would be whole classes only.
  auto train_picked = evenly_spaced(cfg.limit_train, train->size());
  auto test_picked = evenly_spaced(cfg.limit_test, val->size());
  const auto train_total = static_cast<int64_t>(train_picked.size());
  r.train = FetchData{fetcher(train, tp, std::move(train_picked)), train_total, {}};
  const auto test_total = static_cast<int64_t>(test_picked.size());
  r.test = FetchData{fetcher(val, vp, std::move(test_picked)), test_total, {}};  // the Trainer takes this rank's
  if (cfg.recipe == "imagefolder-resnet50") {
    models::ResNet50 net(classes);
    r.groups.push_back(all_parameters(*net, *cfg.weight_decay));
    r.model = torch::nn::AnyModule(net);
  } else {
    models::ResNet18 net(models::ResNet18Options{classes, false});
    r.groups.push_back(all_parameters(*net, *cfg.weight_decay));
    r.model = torch::nn::AnyModule(net);
  }
  return r;
}

[[maybe_unused]] const bool registered =
    register_recipe({"imagefolder-resnet18", "torchvision's ResNet-18 on an ImageNet-style folder",
                     defaults_imagefolder, make_imagefolder}) &&
    register_recipe({"imagefolder-resnet50", "torchvision's ResNet-50 (v1.5) on an ImageNet-style folder",
                     defaults_imagefolder, make_imagefolder});

}  // namespace
}  // namespace ddp::train::detail
