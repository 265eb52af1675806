// Synthetic classification data, generated the way scikit-learn's
// make_classification does: Gaussian clusters
// around the vertices of a hypercube in the informative dimensions, linear
// mixes of them as redundant features, noise for the rest, some labels
// flipped, rows and columns shuffled. The same seed gives the same data on
// every rank (the values differ from scikit-learn's: another generator).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ddp {

struct ClassificationOptions {
  int64_t n_samples = 100;
  int64_t n_features = 20;
  int64_t n_informative = 2;
  int64_t n_redundant = 2;
  int64_t n_classes = 2;
  int64_t n_clusters_per_class = 2;
  double class_sep = 1.0;
  double flip_y = 0.01;
  uint64_t seed = 0;
};

struct Classification {
  at::Tensor x;  // float32 [n_samples, n_features]
  at::Tensor y;  // int64 [n_samples], in [0, n_classes)
};

// Throws std::invalid_argument naming the option when sizes do not fit.
Classification make_classification(const ClassificationOptions& opts);

}  // namespace ddp
