// ddprun_probe: a small program the launcher tests run under ddprun.
//
//   env                   print the launcher variables as NAME=value (or NAME=<unset>)
//   args A...             print each argument as arg[i]=A
//   spam N E              N stdout lines, every E-th line also to stderr
//   longline N            one stdout line of N 'x', then "tail" without a newline
//   exit C                exit with code C
//   fail R C              rank R exits with code C after 0.2 s; the others sleep 60 s
//   signal R S            rank R raises signal S after 0.2 s; the others sleep 60 s
//   ignore-term R C       rank R exits with code C after 0.3 s; the others report
//                         and ignore SIGTERM, then sleep 60 s
//   orphan S              start a child that sleeps S s holding stdout, print
//                         "parent done" and exit 0 at once
//   term-report           print "ready", sleep 60 s; on SIGTERM/SIGINT print
//                         "got SIGTERM"/"got SIGINT" and exit 0
//   term-slow S C [R]     print "ready pid=<pid>", sleep 60 s; on SIGTERM go on S s more (a slow last
//                         step and checkpoint), print "saved after SIGTERM" and exit with code C (after
//                         DDP_EXIT_LINGER s when C != 0, as the ddp runtime does); with R
//                         only rank R does (the others end at SIGTERM)
//   pid-sleep S           print "ready pid=<pid>", sleep S s, exit 0
//   restart R N C [DIR]   print "elastic" and the agent variables (RESTART_COUNT=k ...);
//                         on attempts k < N rank R (every rank if R < 0) exits with
//                         code C after 0.2 s while the others sleep 60 s; from
//                         attempt N on print "done attempt=k" and exit 0; with DIR,
//                         rank R first waits (up to 30 s) until the others printed
//                         theirs (files DIR/said.k.r), which a loaded machine may delay
//   early-exit R DIR      rank R writes its pid to DIR/early.pid and exits 0 after
//                         0.1 s; the others wait until that process is gone (reaped
//                         by ddprun), then fail with code 3 and "Connection reset by peer"
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

int my_rank() {
  if (const char* r = std::getenv("RANK")) return std::atoi(r);
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) return std::atoi(r);
  return -1;
}

void say(const std::string& line, int fd = STDOUT_FILENO) {
  std::string text = line + "\n";
  ssize_t ignored = ::write(fd, text.data(), text.size());
  (void)ignored;
}

void sleep_seconds(double s) {
  struct timespec left;
  left.tv_sec = static_cast<time_t>(s);
  left.tv_nsec = static_cast<long>((s - static_cast<double>(left.tv_sec)) * 1e9);
  while (nanosleep(&left, &left) != 0) {
  }
}

void touch(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}

// Waits (up to 30 s) until every rank of `world` but `self` has made its file PREFIX<rank>.
void wait_for_files(const std::string& prefix, int self, int world) {
  for (int r = 0, polls = 0; r < world && polls < 3000;) {
    if (r == self || ::access((prefix + std::to_string(r)).c_str(), F_OK) == 0) {
      ++r;
    } else {
      sleep_seconds(0.01);
      ++polls;
    }
  }
}

extern "C" void report_and_ignore(int) {
  const char msg[] = "got SIGTERM, ignoring it\n";
  ssize_t ignored = ::write(STDOUT_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

volatile sig_atomic_t g_got_term = 0;

extern "C" void note_term(int) { g_got_term = 1; }

extern "C" void report_and_exit(int sig) {
  const char* msg = sig == SIGINT ? "got SIGINT\n" : "got SIGTERM\n";
  ssize_t ignored = ::write(STDOUT_FILENO, msg, std::strlen(msg));
  (void)ignored;
  _exit(0);
}

int usage() {
  say("usage: ddprun_probe "
      "env|args|spam|longline|exit|fail|signal|ignore-term|orphan|term-report|term-slow|pid-sleep|early-exit ...",
      STDERR_FILENO);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  const int rank = my_rank();
  auto arg = [&](int i) { return i < argc ? std::atoi(argv[i]) : 0; };

  if (mode == "env") {
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                             "MASTER_PORT", "OMP_NUM_THREADS", "DDP_BACKEND", "DDP_LAUNCHER", "OMPI_COMM_WORLD_RANK"}) {
      const char* value = std::getenv(name);
      say(std::string(name) + "=" + (value != nullptr ? value : "<unset>"));
    }
    return 0;
  }
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) say("arg[" + std::to_string(i - 2) + "]=" + argv[i]);
    return 0;
  }
  if (mode == "spam") {
    // stdout through stdio's full buffering, so that lines straddle chunks.
    const int n = arg(2), every = arg(3);
    for (int i = 0; i < n; ++i) {
      std::printf("spam rank=%d i=%d %s\n", rank, i, std::string(static_cast<size_t>(i % 97), 'x').c_str());
      if (every > 0 && i % every == 0) std::fprintf(stderr, "spam-err rank=%d i=%d\n", rank, i);
    }
    std::fflush(stdout);
    return 0;
  }
  if (mode == "longline") {
    std::string line(static_cast<size_t>(arg(2)), 'x');
    line += "\ntail";
    std::fwrite(line.data(), 1, line.size(), stdout);
    return 0;
  }
  if (mode == "exit") return arg(2);
  if (mode == "fail" || mode == "signal" || mode == "ignore-term") {
    const int target = arg(2), value = arg(3);
    if (rank == target) {
      sleep_seconds(mode == "ignore-term" ? 0.3 : 0.2);
      if (mode == "signal") {
        say("probe rank " + std::to_string(rank) + " raising signal " + std::to_string(value), STDERR_FILENO);
        ::raise(value);
        sleep_seconds(5);
        return 99;
      }
      say("probe rank " + std::to_string(rank) + " failing with code " + std::to_string(value), STDERR_FILENO);
      return value;
    }
    if (mode == "ignore-term") {
      struct sigaction action = {};
      action.sa_handler = report_and_ignore;
      sigaction(SIGTERM, &action, nullptr);
    }
    say("ready");
    sleep_seconds(600);  // far beyond any deadline: a test that waits for it has found a hang
    return 0;
  }
  if (mode == "restart") {
    auto env = [](const char* name) {
      const char* value = std::getenv(name);
      return std::string(value != nullptr ? value : "<unset>");
    };
    const int target = arg(2), attempts = arg(3), code = arg(4);
    const int k = std::atoi(env("TORCHELASTIC_RESTART_COUNT").c_str());
    say("elastic RESTART_COUNT=" + env("TORCHELASTIC_RESTART_COUNT") + " MAX_RESTARTS=" +
        env("TORCHELASTIC_MAX_RESTARTS") + " RUN_ID=" + env("TORCHELASTIC_RUN_ID") + " ROLE_NAME=" + env("ROLE_NAME") +
        " ROLE_RANK=" + env("ROLE_RANK") + " ROLE_WORLD_SIZE=" + env("ROLE_WORLD_SIZE") +
        " GROUP_WORLD_SIZE=" + env("GROUP_WORLD_SIZE") + " RANK=" + env("RANK") + " WORLD_SIZE=" + env("WORLD_SIZE"));
    if (k >= attempts) {
      say("done attempt=" + std::to_string(k));
      return 0;
    }
    const std::string said = argc > 5 ? std::string(argv[5]) + "/said." + std::to_string(k) + "." : "";
    if (target < 0 || rank == target) {
      if (!said.empty() && target >= 0) {
        wait_for_files(said, rank, std::atoi(env("WORLD_SIZE").c_str()));
      }
      sleep_seconds(0.2);
      say("probe rank " + std::to_string(rank) + " failing with code " + std::to_string(code) + " on attempt " +
              std::to_string(k),
          STDERR_FILENO);
      return code;
    }
    if (!said.empty()) touch(said + std::to_string(rank));
    say("ready");
    sleep_seconds(600);
    return 0;
  }
  if (mode == "pid-sleep") {
    say("ready pid=" + std::to_string(::getpid()));
    sleep_seconds(std::atof(argc > 2 ? argv[2] : "0"));
    return 0;
  }
  if (mode == "early-exit" && argc > 3) {
    const std::string pid_file = std::string(argv[3]) + "/early.pid";
    if (rank == arg(2)) {
      sleep_seconds(0.1);
      const std::string tmp = pid_file + ".tmp";
      if (FILE* f = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(f, "%ld\n", static_cast<long>(::getpid()));
        std::fclose(f);
        std::rename(tmp.c_str(), pid_file.c_str());
      }
      say("probe rank " + std::to_string(rank) + " done early");
      return 0;
    }
    long early = 0;
    for (int i = 0; i < 6000 && early == 0; ++i) {  // up to 60 s: a hang, not slowness
      if (FILE* f = std::fopen(pid_file.c_str(), "r")) {
        if (std::fscanf(f, "%ld", &early) != 1) early = 0;
        std::fclose(f);
      }
      if (early == 0) sleep_seconds(0.01);
    }
    for (int i = 0; i < 6000 && early > 0 && ::kill(static_cast<pid_t>(early), 0) == 0; ++i) sleep_seconds(0.01);
    say("probe rank " + std::to_string(rank) + ": recv from rank " + std::to_string(arg(2)) +
            ": Connection reset by peer",
        STDERR_FILENO);
    return 3;
  }
  if (mode == "orphan") {
    if (fork() == 0) {
      sleep_seconds(arg(2));
      _exit(0);
    }
    say("parent done");
    return 0;
  }
  if (mode == "term-report") {
    struct sigaction action = {};
    action.sa_handler = report_and_exit;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    say("ready");
    sleep_seconds(600);  // far beyond any deadline: a test that waits for it has found a hang
    return 0;
  }
  if (mode == "term-slow") {
    struct sigaction action = {};
    action.sa_handler = note_term;
    if (argc < 5 || arg(4) == rank) sigaction(SIGTERM, &action, nullptr);
    say("ready pid=" + std::to_string(::getpid()));
    for (int i = 0; i < 6000 && g_got_term == 0; ++i) sleep_seconds(0.01);
    if (g_got_term == 0) return 1;  // 60 s without the signal
    sleep_seconds(std::atof(argv[2]));
    say("saved after SIGTERM");
    // As the ddp runtime does at a non-zero exit: under ddprun's mpi launch, the first rank to exit ends the others.
    if (const char* linger = std::getenv("DDP_EXIT_LINGER"); linger != nullptr && arg(3) != 0)
      sleep_seconds(std::atof(linger));
    return arg(3);
  }
  return usage();
}
