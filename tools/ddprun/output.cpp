#include "output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone made our stdout non-blocking; wait until it drains.
      struct pollfd p = {fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    return false;
  }
  return true;
}

bool write_line(int fd, std::string_view prefix, std::string_view line) {
  std::string buffer;
  buffer.reserve(prefix.size() + line.size() + 1);
  buffer.append(prefix);
  buffer.append(line);
  buffer.push_back('\n');
  return write_all(fd, buffer);
}

void report(std::string_view message) { write_line(STDERR_FILENO, "ddprun: ", message); }

std::string rank_prefix(int rank) { return "[rank " + std::to_string(rank) + "] "; }

}  // namespace ddprun
