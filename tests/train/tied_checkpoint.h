// Tied tensors through a checkpoint file, both ways a save writes one: save_atomic on the tensors themselves (the
// synchronous save) and on host_snapshot's copy (save_async). A weight, the same weight under a second name and a
// row of it load as views of one storage, with their values; another tensor keeps a storage of its own. On `device`:
// the CPU (test_checkpoint), a GPU (test_cuda), whose storages the writer copies to the host, each once.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "ddp/train/checkpoint.h"

namespace ddp::testing {

inline void expect_ties_survive_a_file(const at::Device& device, const std::string& dir) {
  const at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4}).to(device);
  const at::Tensor other = at::full({2}, 7.0f).to(device);
  auto d = train::plain_dict();
  d.insert("weight", w);
  d.insert("tied", w);
  d.insert("row", w[1]);
  d.insert("other", other);
  for (const bool snapshot : {false, true}) {
    const std::string what = device.str() + (snapshot ? ", host_snapshot then save_atomic" : ", save_atomic");
    const std::string path = dir + (snapshot ? "/snapshot.pt" : "/direct.pt");
    train::save_atomic(snapshot ? train::host_snapshot(d) : c10::IValue(d), path);
    const auto got = train::load_checkpoint(path).toGenericDict();
    const at::Tensor gw = got.at("weight").toTensor(), gt = got.at("tied").toTensor();
    const at::Tensor gr = got.at("row").toTensor(), go = got.at("other").toTensor();
    EXPECT_TRUE(gw.equal(w.cpu()) && gt.equal(w.cpu()) && gr.equal(w[1].cpu()) && go.equal(other.cpu())) << what;
    const c10::StorageImpl* one = gw.storage().unsafeGetStorageImpl();
    EXPECT_EQ(gt.storage().unsafeGetStorageImpl(), one) << what << ": the tied weight has a storage of its own";
    EXPECT_EQ(gr.storage().unsafeGetStorageImpl(), one) << what << ": the row has a storage of its own";
    EXPECT_EQ(gr.storage_offset(), 4) << what;
    EXPECT_NE(go.storage().unsafeGetStorageImpl(), one) << what;
  }
}

}  // namespace ddp::testing
