#include "ddp/data/synthetic.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

namespace ddp {

Classification make_classification(const ClassificationOptions& o) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("make_classification: " + what); };
  if (o.n_samples < 1 || o.n_classes < 1 || o.n_clusters_per_class < 1 || o.n_informative < 1)
    bad("n_samples, n_classes, n_clusters_per_class and n_informative must be positive");
  if (o.n_informative + o.n_redundant > o.n_features)
    bad("n_informative + n_redundant (" + std::to_string(o.n_informative + o.n_redundant) + ") exceeds n_features (" +
        std::to_string(o.n_features) + ")");
  if (o.flip_y < 0 || o.flip_y > 1) bad("flip_y must be in [0, 1]");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const int64_t n = o.n_samples, inf = o.n_informative, clusters = o.n_classes * o.n_clusters_per_class;

  // Cluster centroids at hypercube vertices: each coordinate +-class_sep.
  at::Tensor centroids = (at::bernoulli(at::full({clusters, inf}, 0.5), gen) * 2 - 1) * o.class_sep;
  at::Tensor x = at::empty({n, o.n_features});
  at::Tensor y = at::empty({n}, at::kLong);
  at::Tensor informative = x.narrow(1, 0, inf);
  int64_t start = 0;
  for (int64_t k = 0; k < clusters; ++k) {
    const int64_t count = n / clusters + (k < n % clusters ? 1 : 0);
    if (count == 0) continue;
    // Gaussian samples with a random covariance, moved to the centroid.
    at::Tensor mix = at::rand({inf, inf}, gen) * 2 - 1;
    at::Tensor samples = at::randn({count, inf}, gen).matmul(mix) + centroids[k];
    informative.narrow(0, start, count).copy_(samples);
    y.narrow(0, start, count).fill_(k % o.n_classes);
    start += count;
  }
  if (o.n_redundant > 0) {
    at::Tensor mix = at::rand({inf, o.n_redundant}, gen) * 2 - 1;
    x.narrow(1, inf, o.n_redundant).copy_(informative.matmul(mix));
  }
  const int64_t noise = o.n_features - inf - o.n_redundant;
  if (noise > 0) x.narrow(1, inf + o.n_redundant, noise).copy_(at::randn({n, noise}, gen));
  if (o.flip_y > 0) {
    at::Tensor flip = at::rand({n}, gen) < o.flip_y;
    y.masked_scatter_(flip, at::randint(o.n_classes, {n}, gen, at::kLong).masked_select(flip));
  }
  at::Tensor rows = at::randperm(n, gen, at::kLong), cols = at::randperm(o.n_features, gen, at::kLong);
  return {x.index_select(0, rows).index_select(1, cols).contiguous(), y.index_select(0, rows).contiguous()};
}

}  // namespace ddp
