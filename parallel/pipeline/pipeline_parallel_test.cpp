// Pipeline parallelism against one rank: ctest runs each cell under mpirun as
// MpiPpCell.npN.<cell> (CMakeLists.txt), the world split into dp × tp × pp (tests/layout_cell.h):
// every schedule over 2, 3 and 4 stages with one block more than stages (uneven), for gpt2
// (tied), llama (untied) and llama with a tied embedding; then pipelines composed with data and
// tensor parallelism, ZeRO 1, sequence parallelism and bf16, up to dp 2 × tp 2 × pp 2 on 8
// ranks; and a mixture of experts over pp 2 and 3, and dp 2 × pp 2. Run without mpirun, the cells
// skip.
#include "parallel/pipeline/pipeline_parallel.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/layout_cell.h"
#include "tests/mpi_testing.h"

namespace dt::pipeline {
namespace {

using testing::LayoutCell;

class MpiPpCell : public ::testing::TestWithParam<LayoutCell> {};

TEST_P(MpiPpCell, MatchesOneRank) {
  DT_SKIP_WITHOUT_MPIRUN();
  testing::expect_layout_matches_one_rank(GetParam());
}

// Each schedule with micro-batch counts it takes: fewer than twice the stages, and twice.
LayoutCell pipeline_cell(std::string family, int pp, std::string schedule) {
  const bool interleaved = schedule == "interleaved";
  return {.family = std::move(family), .pp = pp, .schedule = std::move(schedule),
          .virtual_stages = interleaved ? 2 : 1, .accumulations = {interleaved ? pp : pp + 1, 2 * pp}};
}

std::vector<LayoutCell> cells() {
  std::vector<LayoutCell> out;
  for (const int pp : {2, 3, 4})
    for (const char* schedule : {"afab", "1f1b", "interleaved", "zb-h1", "zb-v"})
      for (const char* family : {"gpt2", "llama", "llama_tied"}) out.push_back(pipeline_cell(family, pp, schedule));
  // Composed with the other dimensions: the tp size is what the world leaves (CMakeLists.txt
  // runs the 4-rank cells on 4 ranks, the sp cells on 8).
  for (const char* family : {"gpt2", "llama"}) {
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      LayoutCell dp = pipeline_cell(family, 2, schedule);  // dp 2 × pp 2
      dp.dp = 2, dp.zero = 1;
      out.push_back(dp);
      LayoutCell bf16 = dp;
      bf16.precision = DType::bf16;
      out.push_back(bf16);
    }
    for (const char* schedule : {"1f1b", "interleaved", "zb-h1", "zb-v"}) {
      LayoutCell all = pipeline_cell(family, 2, schedule);  // dp 2 × tp 2 × pp 2, sp
      all.dp = 2, all.zero = 1, all.sp = true;
      out.push_back(all);
    }
  }
  // Experts: stages of one and two expert blocks, each rank's loads reduced over its stage's
  // dp replicas alone.
  out.push_back(pipeline_cell("moe", 2, "1f1b"));
  out.push_back(pipeline_cell("moe", 3, "zb-v"));
  LayoutCell moe_dp = pipeline_cell("moe", 2, "zb-h1");
  moe_dp.dp = 2, moe_dp.zero = 1;
  out.push_back(moe_dp);
  // FP8 under each schedule kind: the stages' blocks on their own ranks, the weight-gradient pass
  // apart (zb_h1), a delayed history agreed over the stage's ranks only.
  for (const Float8Scaling fp8 : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise})
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      LayoutCell cell = pipeline_cell("llama", 2, schedule);
      cell.fp8 = fp8;
      out.push_back(cell);
    }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiPpCell, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return testing::cell_name(info.param); });

}  // namespace
}  // namespace dt::pipeline
