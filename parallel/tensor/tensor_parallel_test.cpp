// Tensor parallelism against one rank: ctest runs each cell under mpirun as MpiTpCell.npN.<cell>
// (CMakeLists.txt), the world split into dp × tp (tests/layout_cell.h). Run without mpirun, the
// cells skip.
#include "parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/layout_cell.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

class MpiTpCell : public ::testing::TestWithParam<testing::LayoutCell> {};

TEST_P(MpiTpCell, MatchesOneRank) {
  DT_SKIP_WITHOUT_MPIRUN();
  testing::expect_layout_matches_one_rank(GetParam());
}

// Named family_precision_dpD_zeroS, then _sp with sequence parallelism, then the recomputation
// policy where there is one; CMakeLists.txt runs those whose dp divides the world with at least 2
// tensor-parallel ranks.
std::vector<testing::LayoutCell> cells() {
  std::vector<testing::LayoutCell> out;
  for (const char* family : {"gpt2", "llama"}) {
    for (const DType precision : {DType::f32, DType::bf16})
      for (const auto& [dp, zero] : {std::pair{1, 0}, std::pair{2, 0}, std::pair{2, 1}, std::pair{2, 3}})
        for (const bool sp : {false, true})
          out.push_back({.family = family, .precision = precision, .dp = dp, .zero = zero, .sp = sp});
    for (const bool sp : {false, true}) out.push_back({.family = family, .dp = 2, .zero = 2, .sp = sp});
    for (const Recompute recompute : {Recompute::selective, Recompute::full})
      out.push_back({.family = family, .sp = true, .recompute = recompute});
    // FP8: in f32 storage, where the quantized operands are the only difference from bf16's
    // bounds' causes and a wrong amax group shows, and in bf16, the storage it trains in.
    for (const Float8Scaling fp8 : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise}) {
      for (const auto& [dp, sp] : {std::pair{1, false}, std::pair{1, true}, std::pair{2, true}})
        out.push_back({.family = family, .dp = dp, .zero = dp == 2 ? 1 : 0, .sp = sp, .fp8 = fp8});
      out.push_back({.family = family, .precision = DType::bf16, .sp = true, .fp8 = fp8});
    }
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiTpCell, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return testing::cell_name(info.param); });

}  // namespace
}  // namespace dt
