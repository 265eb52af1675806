// Writing whole lines to ddprun's own stdout/stderr.
#pragma once

#include <string>
#include <string_view>

namespace ddprun {

// Writes all of data to fd, retrying on EINTR, partial writes and EAGAIN.
// Returns false on a real error (e.g. EPIPE when the reader went away).
bool write_all(int fd, std::string_view data);

// Writes prefix + line + '\n' with a single write() call (retried only if
// the kernel takes part of it), so that lines from different ranks never mix.
bool write_line(int fd, std::string_view prefix, std::string_view line);

// "ddprun: <message>\n" on stderr.
void report(std::string_view message);

// "[rank N] "
std::string rank_prefix(int rank);

// "0.25 s", "2 s", "30.5 s": a duration with 2 (3 from 10 s) significant digits.
std::string seconds_text(double s);

// "07:55:01": the local time now.
std::string clock_time();

}  // namespace ddprun
