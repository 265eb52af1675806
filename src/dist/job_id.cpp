#include "dist/job_id.h"

#include <cstdlib>

#include "ddp/dist/launch_env.h"
#include "dist/error_context.h"
#include "dist/message.h"

namespace ddp::detail {

std::string job_id() { return launch_env::text(launch_env::kRunId).value_or("none"); }

void check_job_id(Store& store, const Rendezvous& r) {
  ErrorContext ctx{r.backend, r.rank, r.world_size, "init"};
  const std::string where = r.host + ":" + std::to_string(r.port);
  const std::string mine = job_id();
  std::string theirs;
  try {
    if (r.rank == 0) {
      store.set(kJobIdKey, std::vector<uint8_t>(mine.begin(), mine.end()));
      return;
    }
    std::vector<uint8_t> v = store.get(kJobIdKey);  // waits until rank 0 has set it
    theirs.assign(v.begin(), v.end());
  } catch (...) {
    throw Error(ctx.prefix() + "cannot exchange the job id with the store at " + where + ": " +
                current_exception_message() + "; is rank 0 running?");
  }
  if (theirs == mine) return;
  const std::string port =
      r.method == "env" ? "MASTER_PORT " + std::to_string(r.port) : "port " + std::to_string(r.port);
  throw Error(ctx.prefix() + "the store at " + where + " belongs to job '" + theirs + "', not to this job '" + mine +
              "': another job is using " + port + "; choose another port");
}

}  // namespace ddp::detail
