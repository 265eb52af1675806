// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice).
#pragma once

namespace ddp::test {

int free_port();

}  // namespace ddp::test
