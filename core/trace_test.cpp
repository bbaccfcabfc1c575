#include "core/trace.h"

#include <gtest/gtest.h>

namespace dt::trace {
namespace {

Span span(Track track, double begin_ms, double end_ms) { return {track, "", begin_ms * 1e3, end_ms * 1e3}; }

// Communication is hidden where the thread computes; where it waits inside a compute span for a
// collective (tensor parallelism's sums), that is neither compute nor hidden.
TEST(Trace, OverlapCountsCommunicationHiddenOnlyBehindComputeThatIsNotWaiting) {
  const Overlap none = overlap({span(Track::compute, 0, 10), span(Track::communication, 2, 6)});
  EXPECT_DOUBLE_EQ(none.compute_ms, 10);
  EXPECT_DOUBLE_EQ(none.communication_ms, 4);
  EXPECT_DOUBLE_EQ(none.hidden_ms, 4);
  // The thread waits 4-6 and 8-9 (two waits, one inside the other at 4-5).
  const Overlap waits = overlap({span(Track::compute, 0, 10), span(Track::communication, 2, 6),
                                 span(Track::waiting, 4, 6), span(Track::waiting, 4, 5), span(Track::waiting, 8, 9),
                                 span(Track::communication, 8, 12)});
  EXPECT_DOUBLE_EQ(waits.compute_ms, 7);
  EXPECT_DOUBLE_EQ(waits.communication_ms, 8);
  EXPECT_DOUBLE_EQ(waits.hidden_ms, 3);  // 2-4 and 9-10
  EXPECT_DOUBLE_EQ(waits.hidden_fraction(), 3.0 / 8);
}

}  // namespace
}  // namespace dt::trace
