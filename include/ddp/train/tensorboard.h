// Scalars for TensorBoard, written without TensorFlow or protobuf: one event
// file per writer, in the TFRecord format TensorBoard reads.
//
//   ddp::train::SummaryWriter tb("runs/mnist");        // runs/mnist/events.out.tfevents....
//   for (int64_t step = 1; ...; ++step)
//     tb.add_scalar("train/loss", loss, step);
//   // then: tensorboard --logdir runs
//
// The file is named like PyTorch's (events.out.tfevents.<unix seconds>.<host>.<pid>.<n>)
// so ranks and runs never collide; in a distributed job usually only rank 0 writes.
// Records reach the disk at the latest flush_secs (default 2 s) after add_scalar (a background thread),
// at once every 100 records, and on flush()/close()/destruction. A failed write
// (disk full, unwritable directory) throws ddp::Error naming the file and errno
// text, from the call that hit it or, if the background thread hit it, from the
// next call. All members may be called from several threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace ddp::train {

class SummaryWriter {
 public:
  // Creates log_dir (like mkdir -p) and opens events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>
  // (PyTorch's naming), writing first an Event with file_version "brain.Event:2".
  // flush_secs: the longest a record waits in memory (PyTorch's flush_secs; > 0).
  explicit SummaryWriter(const std::string& log_dir, double flush_secs = 2);
  ~SummaryWriter();                                                                            // flushes and closes
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = -1);  // -1: now
  void flush();
  void close();
  const std::string& path() const;  // the event file

  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::train
