// A program with one deliberate fault for the sanitizer it is built with, launched through
// ddprun by canary_test.sh: proves a report in a launched rank reaches a file and fails the run.
//   canary race      two threads write one int (ThreadSanitizer)
//   canary uaf       a read of a freed heap array (AddressSanitizer)
//   canary ub        a signed int overflow (UndefinedBehaviorSanitizer)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

static int shared_value = 0;

int main(int argc, char** argv) {
  const char* kind = argc > 1 ? argv[1] : "";
  volatile int sink = 0;
  if (std::strcmp(kind, "race") == 0) {
    std::thread t([] { shared_value = 1; });
    shared_value = 2;
    t.join();
  } else if (std::strcmp(kind, "uaf") == 0) {
    int* a = new int[4]();
    delete[] a;
    sink = a[1];
  } else if (std::strcmp(kind, "ub") == 0) {
    volatile int big = 2147483647;
    sink = big + 1;
  } else {
    std::fprintf(stderr, "canary: usage: canary race|uaf|ub\n");
    return 2;
  }
  std::printf("canary %s: %d %d\n", kind, shared_value, int(sink));
  return 0;
}
