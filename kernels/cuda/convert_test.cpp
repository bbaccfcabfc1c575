// convert on the GPU against the CPU: both round to nearest even, so the bits agree.
#include "kernels/convert.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/cuda_testing.h"

namespace dt::kernels {
namespace {

TEST(CudaConvert, EqualsTheCpuBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  const testing::OwnedTensor x = testing::random_normal(DType::f32, {100003}, 9, 5.0);
  const testing::OwnedTensor on_gpu = testing::copy_to(x.t, Device::cuda);
  for (const DType to : {DType::bf16, DType::f16, DType::f64}) {
    const testing::OwnedTensor cpu = testing::zeros(to, x.t.shape);
    convert(cpu.t, x.t);
    Buffer gpu_buffer(cpu.t.bytes(), MemTag::workspace, Device::cuda);
    const Tensor gpu = gpu_buffer.view(to, x.t.shape);
    convert(gpu, on_gpu.t);
    const testing::OwnedTensor back = testing::copy_to(gpu, Device::cpu);
    EXPECT_EQ(std::memcmp(back.t.data, cpu.t.data, cpu.t.bytes()), 0) << dtype_name(to);
  }
}

}  // namespace
}  // namespace dt::kernels
