#include "launch/net_check.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun {

PortCheck check_port(const std::string& host, int port) {
  PortCheck out;
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    out.result = PortCheck::kUnresolved;
    out.detail = ::gai_strerror(rc);
    return out;
  }
  // Every address the name resolves to is tried; "in use" on any of them wins.
  bool any_free = false, any_error = false;
  for (struct addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int err = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    ::close(fd);
    if (err == 0) {
      any_free = true;
    } else if (err == EADDRINUSE) {
      out.result = PortCheck::kInUse;
      out.detail = std::strerror(err);
      ::freeaddrinfo(list);
      return out;
    } else if (err != EADDRNOTAVAIL && !any_error) {
      any_error = true;
      out.detail = std::strerror(err);
    }
  }
  out.result = any_free ? PortCheck::kFree : any_error ? PortCheck::kError : PortCheck::kNotLocal;
  ::freeaddrinfo(list);
  return out;
}

int pick_free_port(std::string* error) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  } else {
    *error = std::strerror(errno);
  }
  ::close(fd);
  return port;
}

}  // namespace ddprun
