#include "output/output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <sstream>

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

std::string seconds_text(double s) {
  std::ostringstream out;
  out.precision(s < 10 ? 2 : 3);
  out << s << " s";
  return out.str();
}

std::string clock_time() {
  std::time_t t = std::time(nullptr);
  struct tm tm_now;
  char text[16] = "?";
  if (::localtime_r(&t, &tm_now) != nullptr) std::strftime(text, sizeof text, "%H:%M:%S", &tm_now);
  return text;
}

}  // namespace ddprun
