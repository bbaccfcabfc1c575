#include "core/device.h"

#include <unistd.h>

#include <cstring>

#include "core/error.h"

#ifdef DTRAIN_WITH_CUDA
#include <cuda_profiler_api.h>

#include "core/cuda/runtime.h"
#endif

namespace dt {

Device device_from_name(std::string_view name) {
  for (const Device device : {Device::cpu, Device::cuda})
    if (device_name(device) == name) return device;
  throw Error(str("unknown device '", name, "'; valid devices are cpu, cuda"));
}

bool cuda_built() {
#ifdef DTRAIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string cuda_unavailable_reason() {
#ifdef DTRAIN_WITH_CUDA
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error == cudaErrorNoDevice || (error == cudaSuccess && count == 0))
      return std::string("no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    if (error == cudaErrorInsufficientDriver)
      return std::string("the NVIDIA driver is missing or older than this build's CUDA runtime (") +
             std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
             "); install or update the driver";
    if (error != cudaSuccess)
      return str("the CUDA runtime cannot start: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
    return std::string();
  }();
  return reason;
#else
  return "this build of dtrain has no CUDA backend (nvcc was not found when it was configured); install the CUDA "
         "toolkit and rebuild, or use device = \"cpu\"";
#endif
}

void require_device(Device device) {
  if (device == Device::cpu) return;
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty()) throw Error(str("cannot use device \"cuda\": ", reason, "; or set train.device = \"cpu\""));
}

std::string device_description(Device device) {
  require_device(device);
  if (device == Device::cpu) return "cpu";
#ifdef DTRAIN_WITH_CUDA
  return cuda::device_info().name;
#else
  return "cuda";
#endif
}

CudaSystem cuda_system() {
  CudaSystem s;
  s.unavailable = cuda_unavailable_reason();
  if (!s.unavailable.empty()) return s;
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaDriverGetVersion(&s.driver_version));
  DT_CUDA_CHECK(cudaRuntimeGetVersion(&s.runtime_version));
  int count = 0;
  DT_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    DT_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    s.gpus.push_back({.ordinal = d, .name = prop.name, .total_bytes = prop.totalGlobalMem,
                      .compute_capability = prop.major * 10 + prop.minor});
  }
  s.peer_access.assign(static_cast<size_t>(count), std::vector<bool>(static_cast<size_t>(count), false));
  for (int i = 0; i < count; ++i)
    for (int j = 0; j < count; ++j) {
      int can = i == j;
      if (i != j) DT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, i, j));
      s.peer_access[i][j] = can != 0;
    }
#endif
  return s;
}

size_t device_free_bytes(Device device) {
  require_device(device);
  if (device == Device::cpu) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  }
#ifdef DTRAIN_WITH_CUDA
  size_t free = 0, total = 0;
  DT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
#else
  return 0;
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef DTRAIN_WITH_CUDA
  // In order with the kernels that produced src or will read dst.
  const cudaStream_t stream = cuda::compute_stream();
  DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  DT_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  require_device(Device::cuda);
#endif
}

HostPinning::HostPinning(void* data, size_t bytes, Device from) {
  if (from == Device::cpu || bytes == 0) return;
  require_device(from);
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaHostRegister(data, bytes, cudaHostRegisterDefault));
  pinned_ = data;
#else
  (void)data;
#endif
}

HostPinning::~HostPinning() {
#ifdef DTRAIN_WITH_CUDA
  if (pinned_ != nullptr) cudaHostUnregister(pinned_);
#endif
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
               Device device) {
  if (row_bytes == 0 || rows == 0) return;
  if (device == Device::cpu) {
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, row_bytes);
    return;
  }
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                  cuda::compute_stream()));
#else
  require_device(device);
#endif
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    std::memset(dst, 0, bytes);
    return;
  }
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cuda::compute_stream()));
#else
  require_device(device);
#endif
}

void synchronize(Device device) {
  if (device == Device::cpu) return;
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaStreamSynchronize(cuda::compute_stream()));
#else
  require_device(device);
#endif
}

void profiled_region(Device device, [[maybe_unused]] bool open) {
  if (device == Device::cpu) return;
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(open ? cudaProfilerStart() : cudaProfilerStop());
#else
  require_device(device);
#endif
}

}  // namespace dt
