#include "parallel/launch_check.h"

#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <vector>

#include "core/buffer.h"
#include "core/checksum.h"
#include "core/version.h"

namespace dt {

namespace {

uint32_t executable_hash() {
  std::ifstream exe("/proc/self/exe", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(exe)), std::istreambuf_iterator<char>());
  return crc32c(bytes.data(), bytes.size(), crc32c(dtrain_version().data(), dtrain_version().size()));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Rank 0's text on every rank: its length, then its bytes, as 32-bit words.
std::string rank0_text(Communicator& world, const std::string& text) {
  uint32_t length = static_cast<uint32_t>(text.size());
  world.broadcast({.data = &length, .dtype = DType::u32, .shape = {1}}, 0).wait();
  std::vector<uint32_t> words((length + 3) / 4, 0);
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  world.broadcast({.data = words.data(), .dtype = DType::u32, .shape = {static_cast<int64_t>(words.size())}}, 0).wait();
  return std::string(reinterpret_cast<const char*>(words.data()), length);
}

}  // namespace

std::string differing_lines(const std::string& a, const std::string& b, int rank_b) {
  const std::vector<std::string> la = lines_of(a), lb = lines_of(b);
  const std::set<std::string> sa(la.begin(), la.end()), sb(lb.begin(), lb.end());
  std::string out;
  for (const std::string& line : la)
    if (!sb.count(line)) out += str("\n  rank 0: ", line);
  for (const std::string& line : lb)
    if (!sa.count(line)) out += str("\n  rank ", rank_b, ": ", line);
  return out;
}

void check_same_launch(Communicator& world, const std::string& config_text) {
  if (world.size() == 1) return;
  DT_CHECK(world.device() == Device::cpu, "the launch check exchanges host values; give it a CPU communicator");
  const uint32_t mine[2] = {crc32c(config_text.data(), config_text.size()), executable_hash()};
  std::vector<uint32_t> all(2 * static_cast<size_t>(world.size()));
  world.all_gather({.data = all.data(), .dtype = DType::u32, .shape = {static_cast<int64_t>(all.size())}},
                   {.data = const_cast<uint32_t*>(mine), .dtype = DType::u32, .shape = {2}})
      .wait();
  std::vector<int> other_config, other_binary;
  for (int r = 1; r < world.size(); ++r) {
    if (all[2 * r] != all[0]) other_config.push_back(r);
    if (all[2 * r + 1] != all[1]) other_binary.push_back(r);
  }
  if (other_config.empty() && other_binary.empty()) return;
  // Every rank takes part in the broadcast before any of them throws.
  const std::string reference = rank0_text(world, config_text);
  std::string message = "the ranks of this job were not started alike:";
  for (const int r : other_binary)
    message += str("\n rank ", r, " runs a different dtrain binary than rank 0 (",
                   "rebuild, and start every rank from the same build)");
  for (const int r : other_config) {
    message += str("\n rank ", r, " has a different run configuration than rank 0");
    if (r == world.rank()) message += str(":", differing_lines(reference, config_text, r));
  }
  if (!other_config.empty())
    message += "\n (each differing rank prints its lines; start every rank with the same file and overrides)";
  throw Error(message);
}

}  // namespace dt
