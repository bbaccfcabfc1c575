// Shared argument checks for the ops' dispatch functions.
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

// Throws (naming the op and the argument) unless `t` has `shape`.
void expect_shape(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape);
// Throws unless every defined tensor in `ts` is on the device of `ts[0]` and has dtype `dtype`.
void expect_same_device_and_dtype(std::string_view op, std::initializer_list<Tensor> ts, DType dtype);
// Throws unless a and b occupy disjoint memory: for kernels that read one while writing the
// other, where a partial overlap (an (N, F) output inside an (N, 2F) input) is as wrong as
// equal pointers.
void expect_disjoint(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                     const Tensor& b);
// Throws unless dtype is f32 or f64: the CPU kernels' float types.
void expect_float_dtype(std::string_view op, const Tensor& t);
// Throws unless dtype is f32, f64, bf16 or f16: the storage types (kernels/README.md).
void expect_storage_dtype(std::string_view op, const Tensor& t);
// Throws, naming the op and the argument, unless `t` has dtype `dtype` and is on `device`: for
// ops whose tensors do not all share one dtype (16-bit activations with f32 statistics).
void expect_dtype(std::string_view op, std::string_view arg, const Tensor& t, DType dtype, Device device);
// The residual add fused into a norm forward (kernels/layernorm.h): a and b like res, out clear of
// all three, and res either exactly a or b (each element is read before it is written, by the
// one thread that owns it) or clear of them.
void expect_residual_operands(std::string_view op, const Tensor& res, const Tensor& out, const Tensor& a,
                              const Tensor& b);
// The dtype of gradients accumulated for parameters stored as `storage`: f64 for f64, else f32.
DType accumulation_dtype(DType storage);

// Calls cpu::op_name(args...) for CPU tensors and cuda::op_name(args...) for CUDA tensors. A
// build without the CUDA backend says so instead (core/device.h names the reason and the fix).
#ifdef DTRAIN_WITH_CUDA
#define DT_DISPATCH_CUDA_CASE(op_name, ...) return ::dt::kernels::cuda::op_name(__VA_ARGS__);
#else
#define DT_DISPATCH_CUDA_CASE(op_name, ...)                                                       \
  ::dt::require_device(::dt::Device::cuda);                                                       \
  throw ::dt::Error(::dt::str(#op_name ": this build of dtrain has no CUDA backend"));
#endif
#define DT_DISPATCH_DEVICE(op_name, device, ...)                                                  \
  do {                                                                                            \
    switch (device) {                                                                             \
      case ::dt::Device::cpu:                                                                     \
        return ::dt::kernels::cpu::op_name(__VA_ARGS__);                                          \
      case ::dt::Device::cuda:                                                                    \
        DT_DISPATCH_CUDA_CASE(op_name, __VA_ARGS__)                                               \
    }                                                                                             \
    __builtin_unreachable();                                                                      \
  } while (0)

}  // namespace dt::kernels
