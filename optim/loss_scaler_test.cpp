#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt {
namespace {

TEST(LossScaler, GrowsAfterARunOfFiniteStepsAndBacksOffOnOverflow) {
  LossScaler scaler({.initial_scale = 1024, .growth_interval = 3});
  EXPECT_TRUE(scaler.update(true, 1));
  EXPECT_TRUE(scaler.update(true, 2));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_TRUE(scaler.update(true, 3));
  EXPECT_EQ(scaler.scale(), 2048);  // third finite step in a row
  EXPECT_FALSE(scaler.update(false, 4));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // An overflow restarts the run of finite steps.
  EXPECT_TRUE(scaler.update(true, 5));
  EXPECT_TRUE(scaler.update(true, 6));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_TRUE(scaler.update(true, 7));
  EXPECT_EQ(scaler.scale(), 2048);
}

TEST(LossScaler, GrowthStopsBeforeTheScaleItselfOverflows) {
  LossScaler scaler({.initial_scale = 2e38f, .growth_interval = 1, .min_scale = 1});
  scaler.update(true, 1);
  EXPECT_EQ(scaler.scale(), 2e38f);
}

TEST(LossScaler, AScaleBelowTheFloorStopsTheRunAsDiverged) {
  LossScaler scaler({.initial_scale = 4, .min_scale = 1});
  EXPECT_FALSE(scaler.update(false, 10));  // 2
  EXPECT_FALSE(scaler.update(false, 11));  // 1: at the floor, still allowed
  try {
    scaler.update(false, 12);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged at step 12: gradients were not finite even with the loss "
                                         "scale at 1, and the next scale 0.5 is below the floor min_scale = 1 (3 steps "
                                         "skipped so far)"),
              std::string::npos)
        << e.what();
  }
}

TEST(LossScaler, InvalidSettingsAreListedTogether) {
  try {
    LossScaler({.initial_scale = -1, .backoff_factor = 1.5f, .growth_interval = 0});
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("initial_scale = -1: must be finite and above 0"), std::string::npos) << what;
    EXPECT_NE(what.find("backoff_factor = 1.5: must be in (0, 1)"), std::string::npos) << what;
    EXPECT_NE(what.find("growth_interval = 0: must be at least 1"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dt
