#include "core/error.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace dt {
namespace {

TEST(Error, ContextIsPrependedOutermostFirst) {
  Error error("expected 768 columns, found 512");
  error.add_context("tensor h.0.attn.qkv.weight");
  error.add_context("while loading checkpoint run/step_100");
  EXPECT_STREQ(error.what(),
               "while loading checkpoint run/step_100: tensor h.0.attn.qkv.weight: expected 768 columns, found 512");
  EXPECT_EQ(error.message(), "expected 768 columns, found 512");
  EXPECT_EQ(error.context(),
            (std::vector<std::string>{"while loading checkpoint run/step_100", "tensor h.0.attn.qkv.weight"}));
}

TEST(Error, WithContextReturnsTheValueOrAddsContext) {
  EXPECT_EQ(with_context("unused", [] { return 42; }), 42);
  try {
    with_context("while loading config c.json", [] {
      with_context("field n_head", [] { throw Error("must be positive, got -1"); });
    });
    FAIL() << "expected dt::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "while loading config c.json: field n_head: must be positive, got -1");
  }
}

// Only dt::Error carries context; anything else passes through untouched.
TEST(Error, WithContextLeavesOtherExceptionsAlone) {
  try {
    with_context("while parsing", [] { throw std::runtime_error("plain"); });
    FAIL() << "expected std::runtime_error";
  } catch (const Error&) {
    FAIL() << "a std::runtime_error became a dt::Error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "plain");
  }
}

// DT_CHECK's message names the statement, the detail values, the function and file:line.
TEST(DtCheck, FailureReportsStatementDetailAndLocation) {
  const int rows = 3, cols = 4;
  int line = 0;
  try {
    line = __LINE__ + 1;
    DT_CHECK(rows == cols, "rows ", rows, " != cols ", cols);
    FAIL() << "DT_CHECK did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& part : {std::string("internal check failed: rows == cols (rows 3 != cols 4)"),
                                    std::string("TestBody"), std::string("error_test.cpp:") + std::to_string(line)})
      EXPECT_NE(what.find(part), std::string::npos) << "missing '" << part << "' in: " << what;
  }
}

TEST(DtCheck, PassesSilentlyAndEvaluatesItsConditionOnce) {
  int evaluations = 0;
  DT_CHECK(++evaluations == 1);
  EXPECT_EQ(evaluations, 1);
  EXPECT_THROW(DT_CHECK(++evaluations == 0), Error);
  EXPECT_EQ(evaluations, 2);
}

TEST(DtCheck, WithoutDetailHasNoEmptyParentheses) {
  try {
    DT_CHECK(1 + 1 == 3);
    FAIL() << "DT_CHECK did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("internal check failed: 1 + 1 == 3 in "), std::string::npos) << what;
    EXPECT_EQ(what.find("()"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dt
