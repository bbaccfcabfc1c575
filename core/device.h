// Devices as the layers above kernels/ see them: whether one can be used, and moving bytes
// between them. No CUDA header here; core/cuda/ holds what needs one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace dt {

// Parses "cpu" or "cuda"; throws dt::Error naming the valid values.
Device device_from_name(std::string_view name);

// Whether this build has the CUDA backend (nvcc was found at configure time).
bool cuda_built();
// "" when a CUDA device can be used; else why not, with the fix: no backend in this build, no
// driver, no device. For messages and for tests that skip without a GPU.
std::string cuda_unavailable_reason();
// Throws dt::Error saying why and what to do when `device` cannot be used here.
void require_device(Device device);

// What the device is, for logs: "cpu", or CUDA's name for the GPU ("NVIDIA H100 80GB HBM3").
std::string device_description(Device device);

// The CUDA side of this machine as `dtrain doctor` reports it: versions, every GPU, and which
// pairs reach each other peer to peer. `unavailable` is cuda_unavailable_reason() (and the rest
// empty) when no GPU can be used.
struct GpuInfo {
  int ordinal = 0;
  std::string name;
  size_t total_bytes = 0;
  int compute_capability = 0;  // 90 for sm_90
};
struct CudaSystem {
  std::string unavailable;
  int driver_version = 0, runtime_version = 0;  // 13000 for 13.0
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<bool>> peer_access;  // [i][j]: GPU i can access GPU j's memory
};
CudaSystem cuda_system();

// Bytes the device can still allocate (its free memory; for the CPU, what the OS reports
// available).
size_t device_free_bytes(Device device);

// Copies bytes between any two devices; returns when the copy is complete.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// The elements of t as a vector on the CPU, copied from wherever t is (for checks and sums of
// small tensors: token ids, per-token losses). T must have t's element size.
template <typename T>
std::vector<T> host_values(const Tensor& t) {
  std::vector<T> values(static_cast<size_t>(t.numel()));
  DT_CHECK(sizeof(T) == dtype_size(t.dtype), "host_values of ", t.describe(), " as ", sizeof(T), "-byte elements");
  copy_bytes(values.data(), Device::cpu, t.data, t.device, t.bytes());
  return values;
}

// Page-locks the `bytes` of host memory at `data` while it lives (cudaHostRegister), so that
// copies from a GPU into it run at the link's speed; nothing when `from` is the CPU.
class HostPinning {
 public:
  HostPinning(void* data, size_t bytes, Device from);
  ~HostPinning();
  HostPinning(const HostPinning&) = delete;
  HostPinning& operator=(const HostPinning&) = delete;

 private:
  void* pinned_ = nullptr;
};

// Copies `rows` rows of row_bytes each within one device, row i from src + i * src_pitch to
// dst + i * dst_pitch (columns of a matrix into another's), in order with the kernels queued on
// the device.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
               Device device);
// Sets bytes to zero, in order with the kernels queued on the device.
void zero_bytes(void* dst, Device device, size_t bytes);
// Waits for everything queued on the device (nothing to wait for on the CPU).
void synchronize(Device device);
// Opens and closes the region a GPU profiler records when started with collection off
// (`ncu --profile-from-start off`, nsys's cudaProfilerApi capture); nothing without one, or on the CPU.
void profiled_region(Device device, bool open);

}  // namespace dt
