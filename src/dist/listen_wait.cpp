#include "dist/listen_wait.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

// One non-blocking connect to any address of host:port, waiting up to `limit`.
bool try_connect(const std::string& host, int port, Milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list) != 0) return false;
  bool ok = false;
  for (addrinfo* a = list; a && !ok; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, limit.count()))) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
      }
    }
    close(fd);
  }
  freeaddrinfo(list);
  return ok;
}

}  // namespace

bool wait_until_listening(const std::string& host, int port, Milliseconds timeout, Milliseconds interval,
                          const std::function<void(Milliseconds)>& report) {
  const auto start = Clock::now();
  Milliseconds next_report = interval;
  for (;;) {
    auto elapsed = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    if (elapsed >= timeout) return false;
    const Milliseconds left = timeout - elapsed;
    if (try_connect(host, port, std::min(left, Milliseconds(1000)))) return true;
    elapsed = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    if (elapsed >= next_report && elapsed < timeout) {
      report(elapsed);
      while (next_report <= elapsed) next_report += interval;
    }
    // Refused at once (nothing listens yet): try again soon.
    std::this_thread::sleep_for(std::min(Milliseconds(50), std::max(Milliseconds(0), timeout - elapsed)));
  }
}

}  // namespace ddp::detail
