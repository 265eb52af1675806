// The timeline's files (ddp/dist/timeline.h): each rank writes FILE.rank{N}, and rank 0 of ddp-train/ddp-bench
// or ddprun (DDP_TIMELINE, at the job's end) joins them into FILE. No LibTorch here: ddprun compiles this file
// too (it does not link ddp::dist).
#pragma once

#include <string>

namespace ddp::timeline_files {

// "t.json", 3 -> "t.rank3.json"; "t" -> "t.rank3" .
std::string rank_file(const std::string& path, int rank);

// Joins the rank files of ranks [0, world) that exist into path. Returns the
// number joined (0: none, path untouched); -1 with *error set when one is not
// trace JSON or path cannot be written (written whole or not at all: tmp + rename).
int merge(const std::string& path, int world, std::string* error);

}  // namespace ddp::timeline_files
