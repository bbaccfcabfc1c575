// The check every multi-rank run makes first: that all ranks were started with the same run
// configuration and the same dtrain binary. Ranks that disagree would otherwise meet in
// collectives of different sizes, or in none, and hang or corrupt each other's buffers.
//
// Each rank hashes its resolved configuration (every default filled in) and its executable;
// the hashes are gathered, and on a mismatch every rank stops with an error naming the ranks that
// differ from rank 0 and how: the configuration lines that differ, or that the binaries do.
#pragma once

#include <string>

#include "comm/communicator.h"

namespace dt {

// A collective over `world`. `config_text` is the resolved configuration (train/run_config.h's
// resolved_toml). Throws dt::Error on every rank when any rank differs.
void check_same_launch(Communicator& world, const std::string& config_text);

// The lines of `a` that `b` lacks and those of `b` that `a` lacks, as "  rank 0: <line>" and
// "  rank R: <line>", for the message.
std::string differing_lines(const std::string& a, const std::string& b, int rank_b);

}  // namespace dt
