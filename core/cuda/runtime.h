// The CUDA runtime as dtrain uses it: errors turned into dt::Error, the streams every kernel
// launches on, and device memory through the caching allocator (core/caching_allocator.h).
// Included only by core/cuda/*.cpp and kernels/cuda/*.cu; everything above sees core/device.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace dt::cuda {

// Throws dt::Error naming the call (with its arguments as written), the CUDA error's name and
// text, and the source line.
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);

#define DT_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t dt_cuda_error_ = (call);                                       \
    if (dt_cuda_error_ != cudaSuccess)                                               \
      ::dt::cuda::throw_cuda_error(dt_cuda_error_, #call, __FILE__, __LINE__);       \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, not at the next call.
#define DT_CUDA_CHECK_LAUNCH() DT_CUDA_CHECK(cudaGetLastError())

// The stream compute kernels run on, and the one collectives will run on (issue 7), each
// created on first use for the current device. Work on one stream runs in order.
cudaStream_t compute_stream();
cudaStream_t communication_stream();

// Properties of the current device, read once.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int compute_capability = 0;  // 90 for sm_90
  size_t total_bytes = 0;
};
const DeviceInfo& device_info();

// Device memory for work on the compute stream, through the caching allocator; nullptr when the
// device is out of memory even after the cache is released (core/allocator.cpp says so).
void* allocate(size_t bytes);
void free(void* ptr);

}  // namespace dt::cuda
