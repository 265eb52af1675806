#include "dist/mpi/mpi_beat.h"

#include <mutex>
#include <vector>

#include "ddp/dist/errors.h"
#include "dist/mpi/mpi_dtypes.h"

namespace ddp::mpi {
namespace {

constexpr int kTag = 1;
const int64_t kDoneMessage = detail::BeatChannel::kDone;  // the buffer of every "done" send: outlives them

struct Channel {
  std::mutex mu;
  CommPtr comm;
  int rank = 0, size = 1;
  bool closed = false;
  std::vector<int64_t> in, out, heard;    // per peer: receive buffer, send buffer, newest value
  std::vector<MPI_Request> recvs, sends;  // per peer
  bool sends_left = false;                // close() let go of a send still reading `out`

  ErrorContext ctx() const { return ErrorContext{"mpi", rank, size, "heartbeat"}; }
  void throw_closed() const {
    throw CommError(ctx().prefix() + "the heartbeat's channel is closed (MPI_Finalize or the group's end)");
  }
  void post_recv(int p) {
    check(ctx(), MPI_Irecv(&in[p], 1, MPI_INT64_T, p, kTag, comm->handle, &recvs[p]), "MPI_Irecv");
  }
  // Cancels the receives and lets go of the sends (they complete or die with MPI); under mu.
  void close() {
    if (closed) return;
    closed = true;
    for (int p = 0; p < size; ++p) {
      if (recvs[p] != MPI_REQUEST_NULL) {
        MPI_Cancel(&recvs[p]);
        MPI_Wait(&recvs[p], MPI_STATUS_IGNORE);  // a cancelled receive completes locally
      }
      if (sends[p] != MPI_REQUEST_NULL) {
        int flag = 0;
        if (MPI_Test(&sends[p], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) {
          MPI_Request_free(&sends[p]);
          sends_left = true;
        }
      }
    }
  }
};

class MpiBeatChannel final : public detail::BeatChannel {
 public:
  MpiBeatChannel(Runtime& rt, CommPtr comm, int rank, int size) : ch_(std::make_shared<Channel>()) {
    Channel& c = *ch_;
    c.comm = std::move(comm);
    c.rank = rank;
    c.size = size;
    c.in.assign(size, 0);
    c.out.assign(size, 0);
    c.heard.assign(size, kNone);
    c.recvs.assign(size, MPI_REQUEST_NULL);
    c.sends.assign(size, MPI_REQUEST_NULL);
    std::lock_guard<std::mutex> lock(c.mu);
    for (int p = 0; p < size; ++p)
      if (p != rank) c.post_recv(p);
    // MPI_Finalize (the application's, or ours at exit) closes it first; weak: the channel may end before.
    rt.before_finalize([weak = std::weak_ptr<Channel>(ch_)] {
      if (auto c = weak.lock()) {
        std::lock_guard<std::mutex> lock(c->mu);
        c->close();
      }
    });
  }
  ~MpiBeatChannel() override {
    std::lock_guard<std::mutex> lock(ch_->mu);
    ch_->close();
    if (ch_->sends_left) {  // MPI may still read the send buffers: keep them (a few bytes) until exit
      static auto* kept = new std::vector<std::shared_ptr<Channel>>();
      kept->push_back(ch_);
    }
  }

  void publish(int64_t value) override {
    Channel& c = *ch_;
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.closed) c.throw_closed();
    for (int p = 0; p < c.size; ++p) {
      if (p == c.rank) continue;
      if (value == kDone) {  // never waits for a peer that took nothing: a request of its own, freed
        MPI_Request r = MPI_REQUEST_NULL;
        check(c.ctx(), MPI_Isend(&kDoneMessage, 1, MPI_INT64_T, p, kTag, c.comm->handle, &r), "MPI_Isend");
        MPI_Request_free(&r);
        continue;
      }
      if (c.sends[p] != MPI_REQUEST_NULL) {
        int flag = 0;
        check(c.ctx(), MPI_Test(&c.sends[p], &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (!flag) continue;  // the peer has not taken the last one
      }
      c.out[p] = value;
      check(c.ctx(), MPI_Isend(&c.out[p], 1, MPI_INT64_T, p, kTag, c.comm->handle, &c.sends[p]), "MPI_Isend");
    }
  }

  int64_t latest(int peer) override {
    Channel& c = *ch_;
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.closed) c.throw_closed();
    while (c.recvs[peer] != MPI_REQUEST_NULL) {
      int flag = 0;
      check(c.ctx(), MPI_Test(&c.recvs[peer], &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) break;
      c.heard[peer] = c.in[peer];
      if (c.heard[peer] != kDone) c.post_recv(peer);  // nothing follows "done"
    }
    return c.heard[peer];
  }

  std::string where() const override { return "MPI"; }

 private:
  std::shared_ptr<Channel> ch_;
};

}  // namespace

std::unique_ptr<detail::BeatChannel> make_beat_channel(Runtime& rt, CommPtr comm, int rank, int size) {
  return std::make_unique<MpiBeatChannel>(rt, std::move(comm), rank, size);
}

}  // namespace ddp::mpi
