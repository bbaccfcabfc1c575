#include "train/tensorboard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

TEST(TensorBoard, TheTensorboardPackageReadsEveryScalarBack) {
  testing::TempDir dir;
  std::string expected;
  std::string path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path().string();
    for (int64_t step = 1; step <= 30; ++step) {
      const double loss = 5.0 / std::sqrt(static_cast<double>(step)), lr = 1e-3 * step;
      writer.add_scalar("train/loss", loss, step);
      writer.add_scalar("train/lr", lr, step);
      expected += str("train/loss ", step, " ", static_cast<float>(loss), "\n", "train/lr ", step, " ",
                      static_cast<float>(lr), "\n");
    }
    writer.add_scalar("val/loss", 2.5, 1'000'000'000'000);  // a step past int32
    expected += "val/loss 1000000000000 2.5\n";
  }
  ASSERT_EQ(testing::run_reference_script("tensorboard_reader.py", path + " " + dir.file("scalars.txt")), 0);
  std::ifstream in(dir.file("scalars.txt"));
  std::string tag;
  int64_t step = 0;
  double value = 0;
  std::string got;
  while (in >> tag >> step >> value) got += str(tag, " ", step, " ", static_cast<float>(value), "\n");
  EXPECT_EQ(got, expected);
}

TEST(TensorBoard, AnUnwritableDirectoryIsNamed) {
  testing::TempDir dir;
  try {
    TensorBoardWriter writer(dir.path() / "missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create TensorBoard event file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing/events.out.tfevents."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
