#include "core/caching_allocator.h"

#include "core/error.h"

namespace dt {

namespace {
constexpr size_t kSmallGranule = 512, kSmallLimit = size_t{1} << 20, kLargeGranule = size_t{2} << 20;
size_t round_up(size_t bytes, size_t granule) { return (bytes + granule - 1) / granule * granule; }
}  // namespace

CachingAllocator::CachingAllocator(Backend backend) : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() { release_cached(); }

size_t CachingAllocator::size_class(size_t bytes) {
  return bytes <= kSmallLimit ? round_up(bytes, kSmallGranule) : round_up(bytes, kLargeGranule);
}

void* CachingAllocator::allocate(size_t bytes, uint64_t stream) {
  DT_CHECK(bytes > 0, "CachingAllocator::allocate of 0 bytes");
  const size_t size = size_class(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  if (auto it = free_.find({stream, size}); it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= size;
  } else {
    ptr = backend_.allocate(size);
    if (ptr == nullptr) {
      release_cached_locked();
      ptr = backend_.allocate(size);
    }
    if (ptr == nullptr) return nullptr;
    ++stats_.raw_allocations;
  }
  in_use_.emplace(ptr, size);
  stats_.in_use_bytes += size;
  return ptr;
}

void CachingAllocator::free(void* ptr, uint64_t stream) {
  std::lock_guard lock(mutex_);
  const auto it = in_use_.find(ptr);
  DT_CHECK(it != in_use_.end(), "CachingAllocator::free of a block it did not hand out");
  const size_t size = it->second;
  in_use_.erase(it);
  stats_.in_use_bytes -= size;
  free_[{stream, size}].push_back(ptr);
  stats_.cached_bytes += size;
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [key, blocks] : free_)
    for (void* ptr : blocks) backend_.free(ptr);
  free_.clear();
  stats_.cached_bytes = 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace dt
