// FieldProblems (core/field_problems.h): problems under the caller's names, mentions of other
// fields under the same names, fields the caller checks itself left out, and the thrown form.
#include "core/field_problems.h"

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace dt {
namespace {

// A validator as the optimizer's and the model's are written: fields by their own names.
void check_range(int low, int high, FieldProblems& p) {
  p.require(low >= 0, "low", low, "must be at least 0");
  p.require(high >= low, "high", high, str("must be at least ", p.name("low"), " = ", low));
}

TEST(FieldProblems, AValidatorReportsUnderTheCallersNames) {
  FieldProblems named({{"low", "range.low"}, {"high", "range.high"}});
  check_range(-2, -3, named);
  ASSERT_EQ(named.all().size(), 2u);
  EXPECT_EQ(named.all()[0].field, "range.low");
  EXPECT_EQ(named.all()[1].field, "range.high");
  EXPECT_EQ(named.all()[1].value, "-3");
  EXPECT_EQ(named.all()[1].what, "must be at least range.low = -2");
  FieldProblems own_check(FieldNames{{"low", ""}});  // the caller checks low itself
  check_range(-2, -3, own_check);
  ASSERT_EQ(own_check.all().size(), 1u);
  EXPECT_EQ(own_check.all()[0].field, "high");
}

TEST(FieldProblems, ThrownTheyListEveryProblemUnderTheFieldsOwnNames) {
  FieldProblems problems;
  check_range(-2, -3, problems);
  EXPECT_EQ(testing::error_of([&] { problems.throw_if_any("invalid range:"); }),
            "invalid range:\n  low = -2: must be at least 0\n  high = -3: must be at least low = -2");
  FieldProblems none;
  EXPECT_NO_THROW(none.throw_if_any("nothing:"));
}

}  // namespace
}  // namespace dt
