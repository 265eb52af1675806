// DDP_TIMELINE=FILE: the ranks write FILE.rank{N} (ddp/dist/timeline.h); at the
// job's end ddprun joins those of its ranks into FILE.
#pragma once

#include <string>

namespace ddprun {

// "t.json", 3 -> "t.rank3.json"; "t" -> "t.rank3" (as ddp::timeline::rank_file).
std::string timeline_rank_file(const std::string& path, int rank);

// Joins the rank files of ranks [0, world) that exist into path. Returns the
// number joined (0: none, path untouched); -1 with *error set when one is not
// trace JSON or path cannot be written.
int merge_timeline(const std::string& path, int world, std::string* error);

}  // namespace ddprun
