// --requeue: after --stop-signal's checkpoint (Slurm's warning before a time limit), rank 0 requeues the Slurm job it
// runs in, as Lightning's auto-requeue does: `scontrol requeue $SLURM_JOB_ID`. Slurm then ends this allocation and
// starts the job again under the same id with SLURM_RESTART_COUNT one more, and ddp-train resumes from the checkpoint.
#pragma once
#include <string>

namespace ddp::train::detail {

// Why --requeue cannot work here (no Slurm job: SLURM_JOB_ID unset; --stop-signal none), or "".
std::string requeue_problem(const std::string& stop_signal);
// Runs scontrol requeue for this job; "" on success, else what failed (scontrol missing, its exit status).
std::string requeue_slurm_job();

}  // namespace ddp::train::detail
