#include "parallel/context/context_layout.h"

#include "core/error.h"

namespace dt {

std::vector<int> ContextLayout::chunks_of(int r) const {
  if (!zigzag) return {r};
  return {r, 2 * ranks - 1 - r};
}

std::vector<int64_t> ContextLayout::positions() const {
  std::vector<int64_t> out;
  for (const int c : own_chunks())
    for (int64_t t = 0; t < chunk_len(); ++t) out.push_back(c * chunk_len() + t);
  return out;
}

void ContextLayout::validate() const {
  DT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "context-parallel rank ", rank, " of ", ranks);
  if (seq_len < chunks() || seq_len % chunks() != 0)
    throw Error(str("context parallelism over ", ranks, " ranks", zigzag ? " (zig-zag)" : "", " cuts each sequence into ",
                    chunks(), " chunks of equal length, and ", seq_len, " tokens do not split so; use a multiple of ",
                    chunks()));
}

}  // namespace dt
