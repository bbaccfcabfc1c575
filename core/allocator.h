// The allocator: every byte dtrain allocates goes through here, tagged by what it holds.
//
// Each allocation names a MemTag. Current and peak bytes are kept per tag and in total, per
// device, so a run can report where its memory went and the planner's predictions can be
// tested against what was really used. Thread-safe: allocate and free may be called from any
// thread (the data loader's prefetch thread, the communication progress thread).
//
// On the CPU, memory is 64-byte aligned (one cache line, one AVX-512 register). A CUDA
// caching allocator will implement the same interface for Device::cuda.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace dt {

// `checkpoint`: the host staging an asynchronous checkpoint save copies its tensors into.
enum class MemTag : uint8_t { parameters, gradients, optimizer_state, activations, communication, workspace, checkpoint };
constexpr int kNumMemTags = 7;
std::string_view mem_tag_name(MemTag tag);

struct MemoryStats {
  std::array<size_t, kNumMemTags> current_bytes{};
  std::array<size_t, kNumMemTags> peak_bytes{};
  size_t total_current_bytes = 0;
  size_t total_peak_bytes = 0;  // peak of the sum, not the sum of the peaks

  size_t current(MemTag tag) const { return current_bytes[static_cast<int>(tag)]; }
  size_t peak(MemTag tag) const { return peak_bytes[static_cast<int>(tag)]; }
};

constexpr size_t kCpuAlignment = 64;

// Allocates `bytes` on `device` under `tag`; throws dt::Error (naming the tag, the size and the
// bytes already held per tag) when the device is out of memory. Zero bytes returns nullptr.
void* allocate(size_t bytes, MemTag tag, Device device);
// Frees memory from allocate(); `bytes`, `tag` and `device` must be those it was allocated with.
void deallocate(void* ptr, size_t bytes, MemTag tag, Device device);

MemoryStats memory_stats(Device device);
// Sets every peak to the current value, to measure the peak of a phase (e.g. one step).
void reset_peak_memory(Device device);
// "812 B", "1.38 MiB", "2.90 GiB": three significant digits in binary units.
std::string format_bytes(double bytes);
// Current and peak bytes of each tag and of the total, on one line for logs:
// "parameters 1.2 MiB (peak 1.2 MiB), ..., total 5.1 MiB (peak 6.0 MiB)".
std::string format_memory_stats(const MemoryStats& stats);

}  // namespace dt
