#include "core/allocator.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/device.h"
#include "core/error.h"

#ifdef DTRAIN_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace dt {

namespace {

constexpr std::string_view kTagNames[kNumMemTags] = {"parameters",    "gradients",     "optimizer_state",
                                                     "activations",   "communication", "workspace",
                                                     "checkpoint"};

struct Accounting {
  std::mutex mutex;
  MemoryStats stats;

  void add(size_t bytes, MemTag tag) {
    std::lock_guard lock(mutex);
    const int t = static_cast<int>(tag);
    stats.current_bytes[t] += bytes;
    stats.total_current_bytes += bytes;
    stats.peak_bytes[t] = std::max(stats.peak_bytes[t], stats.current_bytes[t]);
    stats.total_peak_bytes = std::max(stats.total_peak_bytes, stats.total_current_bytes);
  }
  void remove(size_t bytes, MemTag tag) {
    std::lock_guard lock(mutex);
    const int t = static_cast<int>(tag);
    DT_CHECK(stats.current_bytes[t] >= bytes, "freeing ", bytes, " bytes of ", kTagNames[t], " but only ",
             stats.current_bytes[t], " are allocated");
    stats.current_bytes[t] -= bytes;
    stats.total_current_bytes -= bytes;
  }
};

Accounting& accounting(Device device) {
  static Accounting cpu, cuda;
  return device == Device::cpu ? cpu : cuda;
}

}  // namespace

std::string_view mem_tag_name(MemTag tag) { return kTagNames[static_cast<int>(tag)]; }

namespace {

// 64-byte aligned host memory; nullptr when out of memory.
void* allocate_host(size_t bytes) {
  // A size within one alignment of SIZE_MAX (an overflowed product, a corrupt header) would
  // round up to 0 and "succeed"; treat it as the out-of-memory it is.
  if (bytes > SIZE_MAX - (kCpuAlignment - 1)) return nullptr;
  return std::aligned_alloc(kCpuAlignment, (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
}

}  // namespace

void* allocate(size_t bytes, MemTag tag, Device device) {
  if (bytes == 0) return nullptr;
  require_device(device);
  void* ptr = nullptr;
  std::string where = "host memory";
  if (device == Device::cpu) {
    ptr = allocate_host(bytes);
  } else {
#ifdef DTRAIN_WITH_CUDA
    ptr = cuda::allocate(bytes);
    where = str("GPU memory on ", cuda::device_info().name, " (", format_bytes(cuda::device_info().total_bytes),
                ", after releasing its cached free blocks)");
#endif
  }
  if (ptr == nullptr)
    throw Error(str("out of ", where, " allocating ", bytes, " bytes of ", mem_tag_name(tag),
                    "; already held: ", format_memory_stats(memory_stats(device)),
                    ". Reduce the micro-batch size or sequence length, or enable recomputation"));
  accounting(device).add(bytes, tag);
  return ptr;
}

void deallocate(void* ptr, size_t bytes, MemTag tag, Device device) {
  if (ptr == nullptr) return;
  accounting(device).remove(bytes, tag);
  if (device == Device::cpu) {
    std::free(ptr);
    return;
  }
#ifdef DTRAIN_WITH_CUDA
  cuda::free(ptr);
#endif
}

MemoryStats memory_stats(Device device) {
  Accounting& a = accounting(device);
  std::lock_guard lock(a.mutex);
  return a.stats;
}

void reset_peak_memory(Device device) {
  Accounting& a = accounting(device);
  std::lock_guard lock(a.mutex);
  a.stats.peak_bytes = a.stats.current_bytes;
  a.stats.total_peak_bytes = a.stats.total_current_bytes;
}

std::string format_bytes(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 5) bytes /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : std::fabs(bytes) < 10 ? "%.2f %s" : std::fabs(bytes) < 100 ? "%.1f %s" : "%.0f %s",
                bytes, kUnits[unit]);
  return text;
}

std::string format_memory_stats(const MemoryStats& stats) {
  std::string out;
  for (int t = 0; t < kNumMemTags; ++t)
    out += str(kTagNames[t], " ", format_bytes(static_cast<double>(stats.current_bytes[t])), " (peak ",
               format_bytes(static_cast<double>(stats.peak_bytes[t])), "), ");
  return out + str("total ", format_bytes(static_cast<double>(stats.total_current_bytes)), " (peak ",
                   format_bytes(static_cast<double>(stats.total_peak_bytes)), ")");
}

}  // namespace dt
