#include "dist/listen_wait.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Attempt {
  bool refused = false;  // at once: nothing listens yet, worth trying again soon
  std::string why;       // "" when accepted
};

// One non-blocking connect to any address of host:port, waiting up to `limit`.
Attempt try_connect(const std::string& host, int port, Milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list); rc != 0)
    return {false, "'" + host + "' does not resolve to an address (" + gai_strerror(rc) + ")"};
  Attempt out;
  for (addrinfo* a = list; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof(err);
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, limit.count()))) != 1)
        err = ETIMEDOUT;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    close(fd);
    if (err == 0) {
      out = Attempt();
      break;
    }
    out.refused = err == ECONNREFUSED;
    out.why = err == ECONNREFUSED
                  ? "connections are refused: nothing listens on port " + std::to_string(port) + " there (yet)"
              : err == ETIMEDOUT ? "nothing answers (no host at that address, or a firewall drops the packets)"
                                 : std::string("connect: ") + std::strerror(err);
  }
  freeaddrinfo(list);
  return out;
}

}  // namespace

std::string wait_until_listening(const std::string& host, int port, Milliseconds timeout, Milliseconds interval,
                                 const std::function<void(Milliseconds, const std::string&)>& report) {
  const auto start = Clock::now();
  // The first report after 5 s, so that a wrong address shows at once what is tried; then every interval.
  Milliseconds next_report = std::min(interval, Milliseconds(5000));
  for (;;) {
    auto elapsed = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    const Milliseconds left = timeout - elapsed;
    const Attempt a = try_connect(host, port, std::min(left, Milliseconds(1000)));
    if (a.why.empty()) return a.why;
    elapsed = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    if (elapsed >= timeout) return a.why;
    if (elapsed >= next_report) {
      report(elapsed, a.why);
      next_report = interval;
      while (next_report <= elapsed) next_report += interval;
    }
    // Refused at once (rank 0 not listening yet): again soon. A name that does not resolve: not 20 times a second.
    const Milliseconds pause(a.refused ? 50 : 500);
    std::this_thread::sleep_for(std::min(pause, std::max(Milliseconds(0), timeout - elapsed)));
  }
}

}  // namespace ddp::detail
