#include "core/device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "tests/cuda_testing.h"

namespace dt {
namespace {

TEST(Device, TheCpuIsAlwaysThereAndCopiesBytes) {
  EXPECT_NO_THROW(require_device(Device::cpu));
  const std::vector<int> from = {1, 2, 3};
  std::vector<int> to(3);
  copy_bytes(to.data(), Device::cpu, from.data(), Device::cpu, 3 * sizeof(int));
  EXPECT_EQ(to, from);
}

// Without a usable GPU, asking for one stops with the reason and the fix, before any
// allocation; the reason is what skipped CUDA tests print.
TEST(Device, AMissingGpuIsNamedWithTheFix) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is available here";
  try {
    Buffer b(1024, MemTag::activations, Device::cuda);
    ADD_FAILURE() << "allocated on a device that cannot be used";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot use device \"cuda\": " + cuda_unavailable_reason()), std::string::npos) << message;
    EXPECT_NE(message.find("train.device = \"cpu\""), std::string::npos) << message;
  }
  EXPECT_EQ(memory_stats(Device::cuda).total_current_bytes, 0u);
}

TEST(Device, BytesRoundTripThroughTheGpu) {
  DT_SKIP_WITHOUT_CUDA();
  const testing::OwnedTensor host = testing::random_normal(DType::f32, {1000}, 3);
  const testing::OwnedTensor device = testing::copy_to(host.t, Device::cuda);
  const testing::OwnedTensor back = testing::copy_to(device.t, Device::cpu);
  EXPECT_EQ(std::memcmp(back.t.data, host.t.data, host.t.bytes()), 0);
  Buffer zeroed(4096, MemTag::workspace, Device::cuda);  // zeroed on the device
  std::vector<char> bytes(4096, 1);
  copy_bytes(bytes.data(), Device::cpu, zeroed.data(), Device::cuda, bytes.size());
  EXPECT_EQ(bytes, std::vector<char>(4096, 0));
  EXPECT_GE(memory_stats(Device::cuda).peak(MemTag::workspace), 4096u);
}

}  // namespace
}  // namespace dt
