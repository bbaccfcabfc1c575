// A cache of device memory blocks in front of a raw allocator (cudaMalloc), so that a training
// run calls the raw allocator only while its first steps find their working set, never in the
// steady state: cudaMalloc and cudaFree synchronize the device and cost tens of microseconds.
//
// Sizes are rounded up to a size class: multiples of 512 bytes up to 1 MiB, multiples of 2 MiB
// above. A freed block goes back to the free list of its class and of the stream it was freed
// on, and is handed out again only for that class on that stream: work queued on one stream
// runs in order, so the next user cannot overtake the previous one, while another stream
// could. When the raw allocator fails, every free block is released and the allocation tried
// once more.
//
// Pure C++ with the raw allocator injected, so its policy is tested on the CPU
// (core/caching_allocator_test.cpp); core/cuda/runtime.cpp puts cudaMalloc behind it.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dt {

class CachingAllocator {
 public:
  struct Backend {
    std::function<void*(size_t bytes)> allocate;  // nullptr when out of memory
    std::function<void(void* ptr)> free;
  };
  struct Stats {
    size_t raw_allocations = 0;  // calls to Backend::allocate that succeeded, ever
    size_t in_use_bytes = 0;     // handed out, by size class
    size_t cached_bytes = 0;     // free, kept for reuse
  };

  explicit CachingAllocator(Backend backend);
  ~CachingAllocator();  // gives every free block back; blocks still in use are a caller's leak
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t size_class(size_t bytes);

  // A block of at least `bytes` for work on `stream`; nullptr when the device is out of memory
  // even after releasing the cache. bytes > 0.
  void* allocate(size_t bytes, uint64_t stream);
  // Returns a block from allocate() to the cache, for reuse by later work on `stream`.
  void free(void* ptr, uint64_t stream);
  // Gives every free block back to the backend.
  void release_cached();
  Stats stats() const;

 private:
  void release_cached_locked();

  Backend backend_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> in_use_;                          // block -> its size class
  std::map<std::pair<uint64_t, size_t>, std::vector<void*>> free_;  // (stream, class) -> blocks
  Stats stats_;
};

}  // namespace dt
