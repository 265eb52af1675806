// Master port checks done before launching.
#pragma once

#include <string>

namespace ddprun {

struct PortCheck {
  enum Result { kFree, kInUse, kNotLocal, kUnresolved, kError };
  Result result = kFree;
  std::string detail;  // strerror()/gai_strerror() text for kInUse/kError
};

// Binds a TCP socket with SO_REUSEADDR to host:port and closes it again.
// kInUse on EADDRINUSE, kNotLocal on EADDRNOTAVAIL (the address belongs to
// another machine), kUnresolved when host cannot be resolved, kError when
// bind() fails for another reason (e.g. EACCES for a privileged port).
PortCheck check_port(const std::string& host, int port);

// A currently free TCP port on 127.0.0.1 (bind to port 0), or -1.
int pick_free_port(std::string* error);

}  // namespace ddprun
