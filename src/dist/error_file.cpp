// Error files for the launcher (TORCHELASTIC_ERROR_FILE), see error_file.h.
#include "ddp/dist/error_file.h"
#include "ddp/errors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ddp/dist/init.h"
#include "ddp/dist/launch_env.h"
#include "throw_trace.h"

namespace ddp {

namespace {

bool write_whole(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int error_rank() {
  try {
    if (is_initialized()) return get_rank();
  } catch (...) {
  }
  namespace le = launch_env;
  return le::first_valid_count({&le::kRank, &le::kOmpiRank}).value_or(-1);
}

namespace {

bool record(const std::string& message, int exit_code, const std::vector<std::string>& backtrace,
            int caused_by_rank = -1) {
  try {
    const auto value = launch_env::text(launch_env::kErrorFile);
    if (!value) return false;
    std::string file = *value;
    const size_t slot = file.find("{rank}");
    if (slot != std::string::npos) {
      const int rank = error_rank();
      file.replace(slot, 6, rank >= 0 ? std::to_string(rank) : "pid" + std::to_string(::getpid()));
    }
    const char* path = file.c_str();
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    nlohmann::json record = {
        {"message", message},
        {"rank", error_rank()},
        {"pid", static_cast<long>(::getpid())},
        {"timestamp_us", std::chrono::duration_cast<std::chrono::microseconds>(now).count()},
        {"exit_code", exit_code},
    };
    if (!backtrace.empty()) record["backtrace"] = backtrace;
    if (caused_by_rank >= 0) record["caused_by_rank"] = caused_by_rank;  // a PeerFailure
    // O_EXCL: the first error of the process is the one that counts.
    int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno != EEXIST)
        std::fprintf(stderr, "ddp: cannot write the error file %s (TORCHELASTIC_ERROR_FILE): %s\n", path,
                     std::strerror(errno));
      return false;
    }
    bool ok = write_whole(fd, record.dump() + "\n");
    ::close(fd);
    return ok;
  } catch (...) {
    return false;  // e.g. bad_alloc: the message on stderr is what is left
  }
}

}  // namespace

bool record_error(const std::string& message, int exit_code) { return record(message, exit_code, {}); }

bool record_error(const std::exception& error, int exit_code) {
  std::vector<std::string> backtrace;
  try {
    backtrace = detail::throw_backtrace(error);
  } catch (...) {
  }
  const auto* peer = dynamic_cast<const PeerFailure*>(&error);
  return record(error.what(), exit_code, backtrace, peer ? peer->failed_rank() : -1);
}

int run_main(const char* tool, int argc, char** argv, const std::function<int(int, char**)>& fn) {
  try {
    return fn(argc, argv);
  } catch (const std::exception& e) {
    record_error(e, 1);
    std::fprintf(stderr, "%s: rank %d: %s\n", tool, error_rank(), e.what());
  } catch (...) {
    record_error("unknown exception (not derived from std::exception)", 1);
    std::fprintf(stderr, "%s: rank %d: unknown exception\n", tool, error_rank());
  }
  return 1;
}

}  // namespace ddp
