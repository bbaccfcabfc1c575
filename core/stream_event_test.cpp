#include "core/stream_event.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "tests/cuda_testing.h"

namespace dt {
namespace {

TEST(StreamEvent, OnTheCpuARecordedEventIsCompleteAndTimesTheHost) {
  StreamEvent start(Device::cpu), end(Device::cpu);
  start.record(Stream::compute);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(Stream::communication);
  end.make_wait(Stream::compute);
  end.synchronize();
  EXPECT_TRUE(end.complete());
  EXPECT_GE(end.elapsed_ms_since(start), 20.0);
  EXPECT_LT(end.elapsed_ms_since(start), 2000.0);
}

TEST(StreamEvent, UsingAnEventBeforeRecordingItIsAnError) {
  const StreamEvent never(Device::cpu);
  EXPECT_THROW(never.make_wait(Stream::compute), Error);
  EXPECT_THROW(never.complete(), Error);
}

// Work on the compute stream, an event after it, the communication stream made to wait: the
// event completes, the streams' order is kept, and the device times the work.
TEST(StreamEvent, OnTheGpuOrdersTheStreamsAndTimesTheWork) {
  DT_SKIP_WITHOUT_CUDA();
  StreamEvent start(Device::cuda), ready(Device::cuda);
  const Buffer big(size_t{256} << 20, MemTag::workspace, Device::cuda, false);
  start.record(Stream::compute);
  zero_bytes(big.data(), Device::cuda, big.bytes());  // queued on the compute stream
  ready.record(Stream::compute);
  ready.make_wait(Stream::communication);
  StreamEvent after_wait(Device::cuda);
  after_wait.record(Stream::communication);
  after_wait.synchronize();
  EXPECT_TRUE(ready.complete());  // the communication stream passed its wait
  EXPECT_GT(ready.elapsed_ms_since(start), 0.0);
  StreamEvent moved = std::move(ready);
  EXPECT_TRUE(moved.complete());
}

}  // namespace
}  // namespace dt
