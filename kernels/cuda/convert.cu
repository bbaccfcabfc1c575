// convert (kernels/convert.h) on the GPU: one element per thread, a grid-stride loop. Memory
// bound; it runs once per optimizer step over the parameters (the f32 master weights rounded
// into the 16-bit copy), a small fraction of a step.
#include "kernels/convert.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

template <typename D, typename S>
__global__ void convert_kernel(D* out, const S* in, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out + i, static_cast<compute_t<D>>(load(in[i])));
}

}  // namespace

void convert(Tensor dst, Tensor src) {
  const int64_t n = src.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = std::min<unsigned>(blocks_for(n, kThreads), 65535u * 8);
  dispatch_storage(src.dtype, [&]<typename S>() {
    dispatch_storage(dst.dtype, [&]<typename D>() {
      convert_kernel<D, S><<<blocks, kThreads, 0, compute_stream()>>>(storage_ptr<D>(dst), storage_ptr<S>(src), n);
      DT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace dt::kernels::cuda
