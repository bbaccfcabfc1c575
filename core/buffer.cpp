#include "core/buffer.h"

#include <utility>

#include "core/device.h"

namespace dt {

Buffer::Buffer(size_t bytes, MemTag tag, Device device, bool zero)
    : data_(allocate(bytes, tag, device)), bytes_(bytes), tag_(tag), device_(device) {
  if (zero) this->zero();
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      tag_(other.tag_),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tag_ = other.tag_;
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() {
  deallocate(data_, bytes_, tag_, device_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::view(DType dtype, Shape shape, size_t offset_bytes) const {
  Tensor t{.data = static_cast<char*>(data_) + offset_bytes, .dtype = dtype, .shape = shape, .device = device_};
  DT_CHECK(offset_bytes + t.bytes() <= bytes_, "view of ", t.bytes(), " bytes at offset ", offset_bytes,
           " in a buffer of ", bytes_, " bytes");
  return t;
}

void Buffer::zero() { zero_bytes(data_, device_, bytes_); }

}  // namespace dt
