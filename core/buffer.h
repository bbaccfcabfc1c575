// Buffer: owns one allocation from the allocator; Tensors are views into it.
//
// Move-only. The flat parameter, gradient and optimizer-state buffers of a model are Buffers;
// named parameters are views at fixed offsets.
#pragma once

#include "core/allocator.h"
#include "core/tensor.h"

namespace dt {

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` under `tag`; zero-filled when `zero` (the default).
  Buffer(size_t bytes, MemTag tag, Device device = Device::cpu, bool zero = true);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemTag tag() const { return tag_; }
  Device device() const { return device_; }

  // A view of `shape` elements of `dtype` starting `offset_bytes` into the buffer.
  Tensor view(DType dtype, Shape shape, size_t offset_bytes = 0) const;
  void zero();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemTag tag_ = MemTag::workspace;
  Device device_ = Device::cpu;
};

}  // namespace dt
