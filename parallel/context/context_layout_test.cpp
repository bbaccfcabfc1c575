// Which tokens each context-parallel rank holds: zig-zag pairs an early chunk with a late one so
// that every rank's causal attention work is the same; plain gives rank r chunk r; every token
// belongs to one rank; a length that does not split is refused with what would.
#include "parallel/context/context_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

TEST(ContextLayout, EveryTokenHasOneRankAndZigZagBalancesTheWork) {
  for (const bool zigzag : {true, false})
    for (const int cp : {1, 2, 3, 4}) {
      const int64_t T = 8 * cp;
      std::set<int64_t> seen;
      std::vector<int64_t> work;  // per rank: the (query, key) pairs its queries attend to
      for (int r = 0; r < cp; ++r) {
        const ContextLayout layout{.ranks = cp, .rank = r, .zigzag = zigzag, .seq_len = T};
        layout.validate();
        const std::vector<int64_t> positions = layout.positions();
        EXPECT_EQ(static_cast<int64_t>(positions.size()), T / cp);
        int64_t pairs = 0;
        for (const int64_t p : positions) {
          EXPECT_TRUE(seen.insert(p).second) << p;
          pairs += p + 1;
        }
        work.push_back(pairs);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), T);
      if (zigzag) {
        EXPECT_EQ(*std::min_element(work.begin(), work.end()), *std::max_element(work.begin(), work.end()));
      } else if (cp > 1) {
        EXPECT_GT(work.back(), 2 * work.front());  // the last rank's queries see the whole sequence
      }
    }
  EXPECT_EQ((ContextLayout{.ranks = 4, .rank = 1, .zigzag = true, .seq_len = 16}.own_chunks()),
            (std::vector<int>{1, 6}));
}

TEST(ContextLayout, ALengthThatDoesNotSplitNamesWhatWould) {
  const std::string e = testing::error_of([] { ContextLayout{.ranks = 3, .rank = 0, .zigzag = true, .seq_len = 10}.validate(); });
  EXPECT_NE(e.find("cuts each sequence into 6 chunks of equal length, and 10 tokens do not split so; use a multiple "
                   "of 6"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace dt
