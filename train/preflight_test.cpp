// The memory pre-flight of a GPU run (train/preflight.h), without a GPU: the free memory is a
// parameter. A run that does not fit names what it needs, what the GPU has and the changes that
// fit, cheapest first; each named change does fit, none repeats a cheaper one with more; nothing
// fitting says to use more GPUs; the unsafe key turns the stop into a warning.
#include "train/preflight.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/allocator.h"
#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

const std::string kConfig = str(DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml");

RunConfig four_ranks(std::vector<std::string> more = {}) {
  more.insert(more.end(), {"parallel.dp=4", "train.device=\"cuda\""});
  return load_run_config(kConfig, more);
}

TEST(Preflight, ARunThatDoesNotFitNamesTheChangesThatFitCheapestFirst) {
  const RunConfig config = four_ranks();
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  const double needed = static_cast<double>(run_memory_plan(config).total());
  const double available = 0.5 * needed;
  const std::vector<MemoryRemedy> remedies = memory_remedies(config, available, h100, 10);
  ASSERT_FALSE(remedies.empty());
  for (size_t i = 0; i < remedies.size(); ++i) {
    // Each does fit: its changes applied, as the trainer would read them.
    std::vector<std::string> changed = {"parallel.dp=4", "train.device=\"cuda\""};
    changed.insert(changed.end(), remedies[i].changes.begin(), remedies[i].changes.end());
    EXPECT_LE(static_cast<double>(run_memory_plan(load_run_config(kConfig, changed)).total()), available);
    if (i > 0) {
      EXPECT_GE(remedies[i].step_seconds, remedies[i - 1].step_seconds);
    }
    // None goes further on every knob than another named one.
    for (size_t j = 0; j < remedies.size(); ++j) {
      if (i == j) continue;
      const MemoryRemedy &a = remedies[j], &b = remedies[i];
      EXPECT_FALSE(a.zero_stage <= b.zero_stage && static_cast<int>(a.recompute) <= static_cast<int>(b.recompute) &&
                   a.micro_batch_size >= b.micro_batch_size)
          << "remedy " << i << " goes further than remedy " << j;
    }
  }
  const std::string e = testing::error_of([&] { check_run_fits(config, available, "NVIDIA H100 80GB HBM3", h100); });
  EXPECT_NE(e.find(str("this run needs ", format_bytes(needed), " of GPU memory on its largest rank")),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(str("the NVIDIA H100 80GB HBM3 has ", format_bytes(available), " free")), std::string::npos) << e;
  EXPECT_NE(e.find("what would fit, cheapest first by the step time the planner predicts on H100 SXM: "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(remedies[0].changes[0]), std::string::npos) << e;
  EXPECT_NE(e.find("set train.unsafe_skip_memory_check = true to try anyway"), std::string::npos) << e;
}

TEST(Preflight, NothingThatFitsSaysToUseMoreGpus) {
  const RunConfig config = four_ranks();
  const std::string e =
      testing::error_of([&] { check_run_fits(config, 1e6, "NVIDIA H100 80GB HBM3", load_hardware_profile("h100-sxm")); });
  EXPECT_NE(e.find("no higher parallel.zero_stage, train.recompute or smaller train.micro_batch_size fits: use more "
                   "GPUs with parallel.tp, parallel.pp or parallel.cp"),
            std::string::npos)
      << e;
}

TEST(Preflight, ARunThatFitsPassesAndTheUnsafeKeyWarnsInstead) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  EXPECT_EQ(check_run_fits(four_ranks(), h100.memory_bytes, "NVIDIA H100 80GB HBM3", h100), "");
  const std::string warning =
      check_run_fits(four_ranks({"train.unsafe_skip_memory_check=true"}), 1e6, "NVIDIA H100 80GB HBM3", h100);
  EXPECT_NE(warning.find("warning: this run needs"), std::string::npos) << warning;
  EXPECT_NE(warning.find("running anyway (train.unsafe_skip_memory_check = true)"), std::string::npos) << warning;
}

TEST(Preflight, GpusAreRankedOnTheirOwnProfile) {
  EXPECT_EQ(profile_for_gpu("NVIDIA H100 80GB HBM3").name, "H100 SXM");
  EXPECT_EQ(profile_for_gpu("NVIDIA H200").name, "H200 SXM");
  EXPECT_EQ(profile_for_gpu("NVIDIA A100-SXM4-80GB").name, "A100 80GB SXM");
  EXPECT_EQ(profile_for_gpu("NVIDIA L4").name, "H100 SXM");
}

}  // namespace
}  // namespace dt
