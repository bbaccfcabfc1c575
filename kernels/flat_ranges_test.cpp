#include "kernels/flat_ranges.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt::kernels {
namespace {

TEST(FlatRanges, AppendMergesTouchingRangesAndSkipsEmptyOnes) {
  std::vector<FlatRange> ranges;
  append_range(ranges, {0, 16});
  append_range(ranges, {16, 40});
  append_range(ranges, {40, 40});
  append_range(ranges, {48, 50});
  EXPECT_EQ(ranges, (std::vector<FlatRange>{{0, 40}, {48, 50}}));
}

TEST(FlatRanges, OverlappingUnorderedEmptyOrOutsideRangesAreRefused) {
  const std::vector<FlatRange> good{{0, 4}, {4, 9}, {12, 20}};
  EXPECT_NO_THROW(expect_ranges("op", good, 20));
  for (const std::vector<FlatRange>& bad : std::vector<std::vector<FlatRange>>{
           {{0, 4}, {3, 9}},    // overlap
           {{8, 12}, {0, 4}},   // out of order
           {{0, 0}},            // empty
           {{-1, 4}},           // before the buffer
           {{16, 21}}})         // past its end
    EXPECT_THROW(
        {
          try {
            expect_ranges("adamw_update", bad, 20);
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("adamw_update: range"), std::string::npos) << e.what();
            throw;
          }
        },
        Error);
}

}  // namespace
}  // namespace dt::kernels
