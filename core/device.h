// Devices as the layers above kernels/ see them: whether one can be used, and moving bytes
// between them. No CUDA header here; core/cuda/ holds what needs one.
#pragma once

#include <cstddef>
#include <string>

#include "core/tensor.h"

namespace dt {

// Whether this build has the CUDA backend (nvcc was found at configure time).
bool cuda_built();
// "" when a CUDA device can be used; else why not, with the fix: no backend in this build, no
// driver, no device. For messages and for tests that skip without a GPU.
std::string cuda_unavailable_reason();
// Throws dt::Error saying why and what to do when `device` cannot be used here.
void require_device(Device device);

// Copies bytes between any two devices; returns when the copy is complete.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Sets bytes to zero, in order with the kernels queued on the device.
void zero_bytes(void* dst, Device device, size_t bytes);
// Waits for everything queued on the device (nothing to wait for on the CPU).
void synchronize(Device device);

}  // namespace dt
