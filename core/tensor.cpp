#include "core/tensor.h"

namespace dt {

std::string_view device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::operator[](int axis) const {
  const int a = axis < 0 ? axis + ndim_ : axis;
  DT_CHECK(a >= 0 && a < ndim_, "axis ", axis, " of shape ", to_string());
  return dims_[a];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t dim) {
  DT_CHECK(ndim_ < kMaxDims, "more than ", kMaxDims, " dimensions");
  DT_CHECK(dim >= 0, "negative dimension ", dim);
  dims_[ndim_++] = dim;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (int i = 0; i < ndim_; ++i) s += str(i ? ", " : "", dims_[i]);
  return s + (ndim_ == 1 ? ",)" : ")");
}

Tensor Tensor::reshape(Shape new_shape) const {
  DT_CHECK(new_shape.numel() == numel(), "reshape ", shape.to_string(), " to ", new_shape.to_string());
  Tensor t = *this;
  t.shape = new_shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t first, int64_t count) const {
  DT_CHECK(ndim() >= 1 && first >= 0 && count >= 0 && first + count <= dim(0), "rows [", first, ", ",
           first + count, ") of ", describe());
  Tensor t = *this;
  const int64_t row_elems = dim(0) == 0 ? 0 : numel() / dim(0);
  t.data = static_cast<char*>(data) + static_cast<size_t>(first * row_elems) * dtype_size(dtype);
  Shape s;
  s.push_back(count);
  for (int i = 1; i < ndim(); ++i) s.push_back(shape[i]);
  t.shape = s;
  return t;
}

std::string Tensor::describe() const {
  return str(dtype_name(dtype), shape.to_string(), " on ", device_name(device));
}

}  // namespace dt
