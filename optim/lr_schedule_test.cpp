#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{.peak_lr = 1.0f, .min_lr_ratio = 0.1f, .warmup_steps = 4, .total_steps = 104};
  EXPECT_FLOAT_EQ(s.at(0), 0.25f);
  EXPECT_FLOAT_EQ(s.at(3), 1.0f);
  EXPECT_FLOAT_EQ(s.at(4), 1.0f);
  EXPECT_FLOAT_EQ(s.at(54), 0.55f);  // halfway: (peak + min) / 2
  EXPECT_FLOAT_EQ(s.at(104), 0.1f);
  EXPECT_FLOAT_EQ(s.at(500), 0.1f);
}

TEST(LrSchedule, LinearAndWsd) {
  const LrSchedule linear{.peak_lr = 1.0f, .min_lr_ratio = 0.0f, .warmup_steps = 0, .total_steps = 10,
                          .decay = LrDecay::linear};
  EXPECT_FLOAT_EQ(linear.at(5), 0.5f);
  const LrSchedule wsd{.peak_lr = 2.0f, .min_lr_ratio = 0.0f, .warmup_steps = 2, .total_steps = 20,
                       .decay = LrDecay::wsd, .decay_steps = 4};
  EXPECT_FLOAT_EQ(wsd.at(10), 2.0f);
  EXPECT_FLOAT_EQ(wsd.at(16), 2.0f);
  EXPECT_FLOAT_EQ(wsd.at(18), 1.0f);
  EXPECT_FLOAT_EQ(wsd.at(20), 0.0f);
}

TEST(LrSchedule, InvalidValuesAreNamed) {
  const LrSchedule bad{.peak_lr = -1.0f, .warmup_steps = 20, .total_steps = 10};
  try {
    bad.validate();
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lr = -1"), std::string::npos) << what;
    EXPECT_NE(what.find("warmup_steps = 20: must be in [0, steps = 10]"), std::string::npos) << what;
  }
  EXPECT_THROW(lr_decay_from_name("cosin"), Error);
}

// Under a run configuration's keys (train/run_config.cpp), the fields a bound mentions too.
TEST(LrSchedule, ProblemsComeUnderTheCallersNames) {
  const LrSchedule wsd{.warmup_steps = 3, .total_steps = 5, .decay = LrDecay::wsd, .decay_steps = 4};
  FieldProblems keys({{"steps", "train.steps"}, {"warmup_steps", "optim.warmup_steps"},
                      {"decay_steps", "optim.decay_steps"}});
  wsd.check(keys);
  ASSERT_EQ(keys.all().size(), 1u);
  EXPECT_EQ(keys.all()[0].field, "optim.decay_steps");
  EXPECT_EQ(keys.all()[0].what, "must be in [0, train.steps - optim.warmup_steps = 2]");
}

}  // namespace
}  // namespace dt
