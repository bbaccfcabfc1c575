// Tensor: a non-owning, contiguous, row-major view of memory.
//
// A Tensor is a dtype, a shape, a device and a pointer; it never allocates or frees. Memory
// belongs to a Buffer (core/buffer.h); parameters, gradients and activations are views into a
// few large buffers. Copying a Tensor copies the view, not the data.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace dt {

enum class Device : uint8_t { cpu, cuda };
std::string_view device_name(Device device);

// Up to kMaxDims dimensions, stored inline.
class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <typename It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }

  int ndim() const { return ndim_; }
  int64_t operator[](int axis) const;  // negative counts from the end
  int64_t numel() const;
  void push_back(int64_t dim);
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  bool operator==(const Shape& other) const;
  std::string to_string() const;  // "(4, 768)"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device = Device::cpu;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int axis) const { return shape[axis]; }
  int ndim() const { return shape.ndim(); }
  bool defined() const { return data != nullptr; }

  // Typed pointer; checks that T matches the dtype (16/8-bit floats are read as uint16_t/uint8_t).
  template <typename T>
  T* ptr() const {
    DT_CHECK(dtype_size(dtype) == sizeof(T), "tensor of ", dtype_name(dtype), " read as ", sizeof(T),
             "-byte elements");
    return static_cast<T*>(data);
  }

  // The same memory with another shape of equal element count.
  Tensor reshape(Shape new_shape) const;
  // Rows [first, first + count) along the first dimension.
  Tensor slice_rows(int64_t first, int64_t count) const;
  std::string describe() const;  // "f32(4, 768) on cpu"
};

}  // namespace dt
