#include "core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/buffer.h"

namespace dt {
namespace {

constexpr MemTag kAllTags[] = {MemTag::parameters,  MemTag::gradients,     MemTag::optimizer_state,
                               MemTag::activations, MemTag::communication, MemTag::workspace,
                               MemTag::checkpoint};

// Other tests in the same process may still hold memory, so every check is a change from the
// stats taken at construction. Peaks are reset first, so a peak change is measured from the
// current bytes at that moment.
class MemoryDelta {
 public:
  MemoryDelta() {
    reset_peak_memory(Device::cpu);
    start_ = memory_stats(Device::cpu);
  }
  int64_t current(MemTag tag) const { return diff(memory_stats(Device::cpu).current(tag), start_.current(tag)); }
  int64_t peak(MemTag tag) const { return diff(memory_stats(Device::cpu).peak(tag), start_.current(tag)); }
  int64_t total_current() const { return diff(memory_stats(Device::cpu).total_current_bytes, start_.total_current_bytes); }
  int64_t total_peak() const { return diff(memory_stats(Device::cpu).total_peak_bytes, start_.total_current_bytes); }

 private:
  static int64_t diff(size_t now, size_t then) { return static_cast<int64_t>(now) - static_cast<int64_t>(then); }
  MemoryStats start_;
};

TEST(Allocator, AllocationsAreCacheLineAligned) {
  for (size_t bytes : {1, 3, 63, 64, 65, 100, 4096, (1 << 20) + 7}) {
    void* ptr = allocate(bytes, MemTag::workspace, Device::cpu);
    ASSERT_NE(ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % kCpuAlignment, 0u) << bytes << " bytes";
    std::memset(ptr, 0xab, bytes);  // every requested byte is usable (a sanitizer build checks it)
    deallocate(ptr, bytes, MemTag::workspace, Device::cpu);
  }
  Buffer buffer(10, MemTag::activations);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kCpuAlignment, 0u);
}

TEST(Allocator, CurrentAndPeakBytesPerTag) {
  const MemoryDelta delta;
  void* params_a = allocate(1000, MemTag::parameters, Device::cpu);
  void* grads = allocate(3000, MemTag::gradients, Device::cpu);
  void* params_b = allocate(500, MemTag::parameters, Device::cpu);
  EXPECT_EQ(delta.current(MemTag::parameters), 1500);
  EXPECT_EQ(delta.current(MemTag::gradients), 3000);
  EXPECT_EQ(delta.total_current(), 4500);

  deallocate(params_a, 1000, MemTag::parameters, Device::cpu);
  EXPECT_EQ(delta.current(MemTag::parameters), 500);
  EXPECT_EQ(delta.peak(MemTag::parameters), 1500);
  EXPECT_EQ(delta.total_current(), 3500);
  EXPECT_EQ(delta.total_peak(), 4500);

  deallocate(grads, 3000, MemTag::gradients, Device::cpu);
  deallocate(params_b, 500, MemTag::parameters, Device::cpu);
  for (MemTag tag : kAllTags) EXPECT_EQ(delta.current(tag), 0) << mem_tag_name(tag);
  EXPECT_EQ(delta.peak(MemTag::gradients), 3000);
  for (MemTag tag : {MemTag::optimizer_state, MemTag::activations, MemTag::communication, MemTag::workspace,
                     MemTag::checkpoint})
    EXPECT_EQ(delta.peak(tag), 0) << mem_tag_name(tag);

  reset_peak_memory(Device::cpu);
  for (MemTag tag : kAllTags) EXPECT_EQ(delta.peak(tag), 0) << mem_tag_name(tag);
  EXPECT_EQ(delta.total_peak(), 0);
}

// allocator.h: the total peak is the peak of the sum, not the sum of the per-tag peaks, so two
// phases that never overlap count once.
TEST(Allocator, TotalPeakIsPeakOfTheSum) {
  const MemoryDelta delta;
  deallocate(allocate(1000, MemTag::activations, Device::cpu), 1000, MemTag::activations, Device::cpu);
  deallocate(allocate(1000, MemTag::workspace, Device::cpu), 1000, MemTag::workspace, Device::cpu);
  EXPECT_EQ(delta.peak(MemTag::activations), 1000);
  EXPECT_EQ(delta.peak(MemTag::workspace), 1000);
  EXPECT_EQ(delta.total_peak(), 1000);
}

TEST(Allocator, BufferLifetimeAndMoves) {
  const MemoryDelta delta;
  {
    Buffer activations(256, MemTag::activations);
    EXPECT_EQ(delta.current(MemTag::activations), 256);
    const auto* bytes = static_cast<const unsigned char*>(activations.data());
    EXPECT_EQ(std::count(bytes, bytes + 256, 0), 256) << "zero-filled by default";

    Buffer moved(std::move(activations));  // ownership moves; nothing is allocated or freed
    EXPECT_EQ(activations.data(), nullptr);
    EXPECT_EQ(activations.bytes(), 0u);
    EXPECT_EQ(moved.bytes(), 256u);
    EXPECT_EQ(moved.tag(), MemTag::activations);
    EXPECT_EQ(delta.current(MemTag::activations), 256);

    Buffer workspace(128, MemTag::workspace);
    EXPECT_EQ(delta.current(MemTag::workspace), 128);
    workspace = std::move(moved);  // frees the workspace bytes, takes over the activations
    EXPECT_EQ(delta.current(MemTag::workspace), 0);
    EXPECT_EQ(delta.current(MemTag::activations), 256);
    EXPECT_EQ(workspace.tag(), MemTag::activations);
    EXPECT_EQ(moved.data(), nullptr);
  }
  for (MemTag tag : kAllTags) EXPECT_EQ(delta.current(tag), 0) << mem_tag_name(tag);
  EXPECT_EQ(delta.peak(MemTag::activations), 256);
  EXPECT_EQ(delta.total_peak(), 384);
}

TEST(Allocator, ZeroBytesIsNullAndUncounted) {
  const MemoryDelta delta;
  EXPECT_EQ(allocate(0, MemTag::parameters, Device::cpu), nullptr);
  deallocate(nullptr, 0, MemTag::parameters, Device::cpu);
  Buffer empty(0, MemTag::parameters);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_EQ(delta.total_current(), 0);
  EXPECT_EQ(delta.total_peak(), 0);
}

TEST(Allocator, FreeingMoreThanAllocatedIsCaught) {
  void* ptr = allocate(64, MemTag::communication, Device::cpu);
  EXPECT_THROW(deallocate(ptr, size_t{1} << 50, MemTag::communication, Device::cpu), Error);
  deallocate(ptr, 64, MemTag::communication, Device::cpu);
}

// Allocates `bytes` under activations, which must fail; returns the error's message.
std::string allocation_failure(size_t bytes) {
  try {
    void* ptr = allocate(bytes, MemTag::activations, Device::cpu);
    deallocate(ptr, bytes, MemTag::activations, Device::cpu);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "allocating " << bytes << " bytes succeeded";
  return "";
}

TEST(Allocator, TooLargeAllocationNamesTagAndSize) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on a request beyond its limit instead of returning null";
#endif
  const MemoryDelta delta;
  const size_t bytes = size_t{1} << 62;  // beyond any x86-64 or AArch64 address space
  const std::string what = allocation_failure(bytes);
  EXPECT_NE(what.find(std::to_string(bytes) + " bytes of activations"), std::string::npos) << what;
  EXPECT_EQ(delta.total_current(), 0);
  EXPECT_EQ(delta.total_peak(), 0);
}

// Rounding SIZE_MAX up to the alignment must not wrap around to a tiny allocation.
TEST(Allocator, SizeNearSizeMaxFailsInsteadOfWrapping) {
  const MemoryDelta delta;
  const std::string what = allocation_failure(SIZE_MAX);
  EXPECT_NE(what.find(std::to_string(SIZE_MAX) + " bytes of activations"), std::string::npos) << what;
  EXPECT_EQ(delta.total_current(), 0);
  EXPECT_EQ(delta.total_peak(), 0);
}

TEST(Allocator, FormatMemoryStatsNamesEveryTag) {
  constexpr size_t kMiB = 1 << 20;
  MemoryStats stats;
  stats.current_bytes[static_cast<int>(MemTag::gradients)] = 3 * kMiB;
  stats.peak_bytes[static_cast<int>(MemTag::gradients)] = 4 * kMiB;
  stats.total_current_bytes = 3 * kMiB;
  stats.total_peak_bytes = 4 * kMiB;
  const std::string text = format_memory_stats(stats);
  for (MemTag tag : kAllTags) EXPECT_NE(text.find(mem_tag_name(tag)), std::string::npos) << text;
  EXPECT_NE(text.find("gradients 3.00 MiB (peak 4.00 MiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("total 3.00 MiB (peak 4.00 MiB)"), std::string::npos) << text;
}

TEST(Allocator, FormatBytesUsesThreeSignificantDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 20)), "1.50 MiB");
  EXPECT_EQ(format_bytes(47.25 * (1 << 30)), "47.2 GiB");
  EXPECT_EQ(format_bytes(812.0 * (1 << 30)), "812 GiB");
}

// allocate and deallocate are called from the loader and progress threads too.
TEST(Allocator, ConcurrentAllocationsKeepExactCounts) {
  const MemoryDelta delta;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      const MemTag tag = kAllTags[t % kNumMemTags];
      for (size_t i = 1; i <= 2000; ++i) {
        void* ptr = allocate(i, tag, Device::cpu);
        deallocate(ptr, i, tag, Device::cpu);
      }
    });
  for (auto& thread : threads) thread.join();
  for (MemTag tag : kAllTags) EXPECT_EQ(delta.current(tag), 0) << mem_tag_name(tag);
  EXPECT_EQ(delta.total_current(), 0);
  EXPECT_LE(delta.total_peak(), 4 * 2000);
}

}  // namespace
}  // namespace dt
