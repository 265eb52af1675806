// The heartbeat's channel over MPI: every beat is one int64 message to every
// peer on a communicator only the heartbeat uses (a duplicate of
// MPI_COMM_WORLD made with the group's). It runs on the heartbeat's thread
// beside the communication thread, so it needs MPI_THREAD_MULTIPLE
// (Runtime::concurrent()).
//   receive: one MPI_Irecv posted per peer; latest() takes every message that
//            has arrived and posts the next;
//   send:    a new beat goes to a peer once its previous one completed (a
//            stopped peer that takes none gets one, not thousands);
//   done:    kDone on a request of its own to every peer, then freed;
//   close:   at the channel's end or first thing in MPI_Finalize, pending
//            receives are cancelled and sends freed; the channel then throws
//            "closed" (the heartbeat stops watching quietly).
#pragma once
#include <memory>

#include "dist/beat_channel.h"
#include "dist/mpi/mpi_group.h"

namespace ddp::mpi {

std::unique_ptr<detail::BeatChannel> make_beat_channel(Runtime& rt, CommPtr comm, int rank, int size);

}  // namespace ddp::mpi
