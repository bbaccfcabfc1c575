// Context parallelism against one rank: ctest runs each cell under mpirun as MpiCpCell.npN.<cell>
// (CMakeLists.txt), the world split into dp × cp × tp (tests/layout_cell.h): cp 2, 3 and 4, with
// zig-zag and plain chunks, for gpt2 (learned positions) and llama (rotary angles), then with
// dp 2 at ZeRO 1, ZeRO 2 and 3 over the cp ranks, with recomputation and in bf16; the cp 2 cells also run on 4 ranks, with tp 2.
// A mixture of experts at cp 2 (f32, bf16, full recomputation) and dp 2 × cp 2 at ZeRO 3.
// Sequences of 48 tokens. Run without mpirun, the cells skip.
#include "parallel/context/context_parallel.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/layout_cell.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

using testing::LayoutCell;

class MpiCpCell : public ::testing::TestWithParam<LayoutCell> {};

TEST_P(MpiCpCell, MatchesOneRank) {
  DT_SKIP_WITHOUT_MPIRUN();
  testing::expect_layout_matches_one_rank(GetParam());
}

std::vector<LayoutCell> cells() {
  std::vector<LayoutCell> out;
  for (const char* family : {"gpt2", "llama"}) {
    for (const int cp : {2, 3, 4})
      for (const bool zigzag : {true, false}) out.push_back({.family = family, .cp = cp, .zigzag = zigzag});
    out.push_back({.family = family, .dp = 2, .zero = 1, .cp = 2});  // dp 2 × cp 2
    // ZeRO 2 and 3 shard over the cp ranks alone: they join dp.
    out.push_back({.family = family, .zero = 2, .cp = 2});
    out.push_back({.family = family, .zero = 3, .cp = 2});
    out.push_back({.family = family, .recompute = Recompute::selective, .cp = 2});
    out.push_back({.family = family, .recompute = Recompute::full, .cp = 2});
    out.push_back({.family = family, .precision = DType::bf16, .cp = 2});
    out.push_back({.family = family, .cp = 2, .padded = true});  // 45 tokens over 4 chunks
    out.push_back({.family = family, .cp = 3, .zigzag = false, .padded = true});
    // FP8: an activation's amax over the cp ranks' rows (tensorwise), or at the step's end (delayed).
    for (const Float8Scaling fp8 : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise})
      out.push_back({.family = family, .cp = 2, .fp8 = fp8});
    out.push_back({.family = family, .dp = 2, .zero = 1, .cp = 2, .fp8 = Float8Scaling::tensorwise});
  }
  // Experts: each cp rank routes its own tokens, and the loads are summed over dp × cp.
  out.push_back({.family = "moe", .cp = 2});
  out.push_back({.family = "moe", .precision = DType::bf16, .cp = 2});
  out.push_back({.family = "moe", .recompute = Recompute::full, .cp = 2});
  out.push_back({.family = "moe", .dp = 2, .zero = 3, .cp = 2});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiCpCell, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return testing::cell_name(info.param); });

}  // namespace
}  // namespace dt
