#include "core/cuda/runtime.h"

#include <memory>
#include <mutex>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/error.h"

namespace dt::cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  throw Error(str(call, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ") at ", file, ":",
                  line));
}

namespace {

cudaStream_t create_stream() {
  require_device(Device::cuda);
  cudaStream_t stream = nullptr;
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

CachingAllocator& cache() {
  // Never destroyed: blocks may still be freed by static Buffers after main returns, when the
  // CUDA runtime may already be shutting down.
  static CachingAllocator* cache = new CachingAllocator(
      {.allocate =
           [](size_t bytes) -> void* {
             void* ptr = nullptr;
             const cudaError_t error = cudaMalloc(&ptr, bytes);
             if (error == cudaErrorMemoryAllocation) {
               cudaGetLastError();  // clear the sticky-free error so later calls do not see it
               return nullptr;
             }
             DT_CUDA_CHECK(error);
             return ptr;
           },
       .free = [](void* ptr) { DT_CUDA_CHECK(cudaFree(ptr)); }});
  return *cache;
}

// The caching allocator's stream key of the compute stream.
uint64_t compute_key() { return reinterpret_cast<uint64_t>(compute_stream()); }

}  // namespace

cudaStream_t compute_stream() {
  static const cudaStream_t stream = create_stream();
  return stream;
}

cudaStream_t communication_stream() {
  static const cudaStream_t stream = create_stream();
  return stream;
}

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    require_device(Device::cuda);
    DeviceInfo i;
    DT_CUDA_CHECK(cudaGetDevice(&i.ordinal));
    cudaDeviceProp prop{};
    DT_CUDA_CHECK(cudaGetDeviceProperties(&prop, i.ordinal));
    i.name = prop.name;
    i.sm_count = prop.multiProcessorCount;
    i.compute_capability = prop.major * 10 + prop.minor;
    i.total_bytes = prop.totalGlobalMem;
    return i;
  }();
  return info;
}

void* allocate(size_t bytes) { return cache().allocate(bytes, compute_key()); }

void free(void* ptr) { cache().free(ptr, compute_key()); }

}  // namespace dt::cuda
