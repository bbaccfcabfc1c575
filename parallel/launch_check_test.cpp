#include "parallel/launch_check.h"

#include <gtest/gtest.h>

#include "comm/mpi.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

TEST(LaunchCheck, DifferingLinesNameBothSides) {
  EXPECT_EQ(differing_lines("[train]\nsteps = 100\nlr = 1\n", "[train]\nsteps = 200\nlr = 1\n", 3),
            "\n  rank 0: steps = 100\n  rank 3: steps = 200");
  EXPECT_EQ(differing_lines("a\nb\n", "a\nb\n", 1), "");
}

TEST(Mpi, ALaunchWithADifferentConfigNamesTheRankAndTheLines) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const std::string same = "[train]\nsteps = 100\nmicro_batch_size = 8\n";
  EXPECT_NO_THROW(check_same_launch(*world, same));
  const std::string mine = world->rank() == 1 ? "[train]\nsteps = 200\nmicro_batch_size = 8\n" : same;
  try {
    check_same_launch(*world, mine);
    ADD_FAILURE() << "rank 1's configuration was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 1 has a different run configuration than rank 0"), std::string::npos) << message;
    if (world->rank() == 1) {
      EXPECT_NE(message.find("rank 0: steps = 100\n  rank 1: steps = 200"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace dt
