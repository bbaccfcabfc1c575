#include "core/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace dt {
namespace {

// A raw allocator over malloc with a capacity, counting its calls.
struct FakeDevice {
  explicit FakeDevice(size_t capacity) : capacity(capacity) {}
  size_t capacity, held = 0;
  int allocations = 0, frees = 0;
  std::map<void*, size_t> blocks;
  CachingAllocator::Backend backend() {
    return {.allocate =
                [this](size_t bytes) -> void* {
                  if (held + bytes > capacity) return nullptr;
                  void* p = std::malloc(bytes);
                  blocks[p] = bytes, held += bytes, ++allocations;
                  return p;
                },
            .free =
                [this](void* p) {
                  held -= blocks.at(p), blocks.erase(p), ++frees;
                  std::free(p);
                }};
  }
};

TEST(CachingAllocator, SizeClassesAre512BytesUpTo1MiBThen2MiB) {
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::size_class((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::size_class((size_t{5} << 20) + 7), size_t{6} << 20);
}

// A training step allocates and frees the same sizes every time: after the first step, the
// raw allocator is never called again.
TEST(CachingAllocator, TheSteadyStateNeverCallsTheRawAllocator) {
  FakeDevice device(size_t{1} << 30);
  CachingAllocator cache(device.backend());
  const std::vector<size_t> step = {4096, 3 << 20, 100, 4096, 70000};
  for (int s = 0; s < 5; ++s) {
    std::vector<void*> live;
    for (size_t bytes : step) live.push_back(cache.allocate(bytes, 0));
    std::set<void*> distinct(live.begin(), live.end());
    EXPECT_EQ(distinct.size(), live.size());  // blocks in use are never handed out twice
    for (void* p : live) cache.free(p, 0);
    EXPECT_EQ(device.allocations, 5) << "step " << s;
  }
  EXPECT_EQ(cache.stats().in_use_bytes, 0u);
  EXPECT_EQ(cache.stats().cached_bytes, 2 * 4096 + (size_t{4} << 20) + 512 + 70144);
}

TEST(CachingAllocator, ABlockFreedOnOneStreamIsNotHandedToAnother) {
  FakeDevice device(size_t{1} << 30);
  CachingAllocator cache(device.backend());
  void* a = cache.allocate(1000, 1);
  cache.free(a, 1);
  void* b = cache.allocate(1000, 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.allocate(1000, 1), a);
  cache.free(b, 2);
  cache.free(a, 1);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  FakeDevice device(size_t{8} << 20);
  CachingAllocator cache(device.backend());
  cache.free(cache.allocate(size_t{6} << 20, 0), 0);  // cached, holding 6 of the 8 MiB
  void* big = cache.allocate(size_t{4} << 20, 0);     // fits only once the cache is released
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(device.frees, 1);
  EXPECT_EQ(cache.allocate(size_t{6} << 20, 0), nullptr);  // really out of memory
  cache.free(big, 0);
  cache.release_cached();
  EXPECT_EQ(device.held, 0u);
}

}  // namespace
}  // namespace dt
