// A rank's error, recorded for the launcher (as torchrun's error files).
//
//   int main(int argc, char** argv) {
//     return ddp::run_main("hello", argc, argv, [](int, char**) { ...; return 0; });
//   }
//
// ddprun (like torchrun) gives each rank a path in TORCHELASTIC_ERROR_FILE;
// record_error() writes one JSON object there:
//   {"message": "...", "rank": 0, "pid": 123, "timestamp_us": 1764059701123456,
//    "exit_code": 1, "backtrace": ["ddp::create_backend(...)+0x1c2 (libddp_dist.so.0)", ...]}
// (timestamp_us: wall clock, microseconds since the epoch; backtrace: where the
// exception was thrown, innermost first, when it is known: every throw in a
// process that links ddp records its stack). After a failure
// ddprun reads every rank's file and names the rank whose error came first:
// the root cause, even when another rank exited earlier.
#pragma once
#include <exception>
#include <functional>
#include <string>

namespace ddp {

// Writes the error record to $TORCHELASTIC_ERROR_FILE, with this process's rank
// (error_rank(), else "pid<N>") in place of "{rank}" in it (ddprun's mpi mode:
// mpirun gives every rank the same environment); nothing when it is unset or empty. The first record of a process is
// kept (later, consequential errors do not replace it). Never throws; returns false when nothing was written.
bool record_error(const std::string& message, int exit_code = 1);
bool record_error(const std::exception& error, int exit_code = 1);

// This process's rank for messages: the default group's, else RANK, else
// OMPI_COMM_WORLD_RANK, else -1.
int error_rank();

// Calls fn(argc, argv) and returns its result. An exception escaping fn is
// printed on stderr as "<tool>: rank R: <message>", recorded with
// record_error(), and main returns 1 (no abort, no core dump).
int run_main(const char* tool, int argc, char** argv, const std::function<int(int, char**)>& fn);

}  // namespace ddp
