// FieldProblems (core/field_problems.h): problems under the caller's names, mentions of other
// fields under the same names, fields the caller checks itself left out, and the thrown form.
#include "core/field_problems.h"

#include <gtest/gtest.h>

#include "optim/lr_schedule.h"
#include "tests/testing.h"

namespace dt {
namespace {

TEST(FieldProblems, AValidatorReportsUnderTheCallersNames) {
  const LrSchedule schedule{.peak_lr = -1, .warmup_steps = 3, .total_steps = 5, .decay = LrDecay::wsd,
                            .decay_steps = 4};
  FieldProblems named({{"lr", ""}, {"steps", "train.steps"}, {"warmup_steps", "optim.warmup_steps"},
                       {"decay_steps", "optim.decay_steps"}});
  schedule.check(named);
  ASSERT_EQ(named.all().size(), 1u);  // lr is the caller's to check
  const FieldProblem& p = named.all().front();
  EXPECT_EQ(p.field, "optim.decay_steps");
  EXPECT_EQ(p.value, "4");
  EXPECT_EQ(p.what, "must be in [0, train.steps - optim.warmup_steps = 2]");
}

TEST(FieldProblems, ThrownTheyListEveryProblemUnderTheFieldsOwnNames) {
  const LrSchedule schedule{.peak_lr = -1, .warmup_steps = 9, .total_steps = 5};
  EXPECT_EQ(testing::error_of([&] { schedule.validate(); }),
            "invalid learning-rate schedule:\n  lr = -1: must be finite and at least 0\n"
            "  warmup_steps = 9: must be in [0, steps = 5]");
  FieldProblems none;
  EXPECT_NO_THROW(none.throw_if_any("nothing:"));
}

}  // namespace
}  // namespace dt
