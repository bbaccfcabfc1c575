// attention_block_forward and attention_block_backward (kernels/attention_block.h) on the GPU.
//
// 16-bit blocks run on cuDNN's fused attention (kernels/cuda/cudnn_attention.h) where it takes
// them: the forward writes the block's own (out_b, lse_b), out_b in the storage dtype, and
// merge_kernel folds it into the f32 (out, lse); the backward writes the block's dq, dk, dv in
// the storage dtype and add_widened_kernel adds them into the f32 dq and dkv. Both small kernels
// touch each element once, in one thread: deterministic, as cuDNN's backward is asked to be.
//
// Everything else (f32, f64, head sizes cuDNN does not take, a tensor-parallel rank's heads,
// unaligned buffers) runs the plain per-row kernels, with the CPU's math
// (kernels/cpu/attention_block.cpp), which also stay the reference cuDNN is tested against
// (kernels/cuda/attention_block_test.cpp): forward is one thread per (sequence, query head,
// query row) with an online softmax over the block's keys; backward computes each row's
// D = rowsum(dout * out) first, then dq with one thread per query row and dk, dv with one thread
// per (sequence, key/value head, key row), which walks the query heads that read it and the rows
// that attend to it. No two threads write one element: deterministic, without atomics. Head
// sizes up to 256, as the attention kernels (kernels/cuda/attention.cu).
#include <cstdint>
#include <string>
#include <utility>

#include "core/buffer.h"
#include "kernels/attention_block.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

constexpr int kMaxHeadSize = 256;

struct BlockDims {
  int64_t B, Tq, Tk, HS, q_row, kv_row, out_row;
  int NH, NKV, group, phase;
  bool causal;
};

template <typename S>
__device__ compute_t<S> dot(const S* a, const S* b, int64_t n) {
  compute_t<S> sum = 0;
  for (int64_t c = 0; c < n; ++c) sum += load(a[c]) * load(b[c]);
  return sum;
}

template <typename S>
__global__ void forward_kernel(BlockDims d, compute_t<S>* out, compute_t<S>* lse, const S* q, const S* kv, bool first) {
  using T = compute_t<S>;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.B * d.NH * d.Tq) return;
  const int64_t i = idx % d.Tq, b = idx / d.Tq / d.NH;
  const int h = static_cast<int>(idx / d.Tq % d.NH), g = (h + d.phase) / d.group;
  const T scale = T(1) / sqrt(static_cast<T>(d.HS));
  const S* qi = q + (b * d.Tq + i) * d.q_row + h * d.HS;
  T o[kMaxHeadSize];
  for (int64_t c = 0; c < d.HS; ++c) o[c] = 0;
  T m = -INFINITY, sum = 0;
  const int64_t keys = d.causal ? i + 1 : d.Tk;
  for (int64_t j = 0; j < keys; ++j) {
    const S* kj = kv + (b * d.Tk + j) * d.kv_row + g * d.HS;
    const S* vj = kv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
    const T s = dot(qi, kj, d.HS) * scale;
    if (s > m) {  // rescale what is summed so far to the new maximum
      const T r = exp(m - s);
      sum *= r;
      for (int64_t c = 0; c < d.HS; ++c) o[c] *= r;
      m = s;
    }
    const T p = exp(s - m);
    sum += p;
    for (int64_t c = 0; c < d.HS; ++c) o[c] += p * load(vj[c]);
  }
  const T block_lse = m + log(sum);
  T* oi = out + (b * d.Tq + i) * d.out_row + h * d.HS;
  T& li = lse[(b * d.NH + h) * d.Tq + i];
  const T merged = first ? block_lse : fmax(li, block_lse) + log1p(exp(-fabs(li - block_lse)));
  const T keep = first ? T(0) : exp(li - merged), add = exp(block_lse - merged) / sum;
  for (int64_t c = 0; c < d.HS; ++c) oi[c] = (first ? T(0) : oi[c] * keep) + o[c] * add;
  li = merged;
}

template <typename S>
__global__ void row_dot_kernel(BlockDims d, compute_t<S>* D, const S* dout, const S* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.B * d.NH * d.Tq) return;
  const int64_t i = idx % d.Tq, b = idx / d.Tq / d.NH;
  const int h = static_cast<int>(idx / d.Tq % d.NH);
  const int64_t row = (b * d.Tq + i) * d.out_row + h * d.HS;
  D[idx] = dot(dout + row, out + row, d.HS);
}

template <typename S>
__global__ void dq_kernel(BlockDims d, compute_t<S>* dq, const compute_t<S>* D, const S* dout, const S* q, const S* kv,
                          const compute_t<S>* lse) {
  using T = compute_t<S>;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.B * d.NH * d.Tq) return;
  const int64_t i = idx % d.Tq, b = idx / d.Tq / d.NH;
  const int h = static_cast<int>(idx / d.Tq % d.NH), g = (h + d.phase) / d.group;
  const T scale = T(1) / sqrt(static_cast<T>(d.HS));
  const int64_t row = (b * d.Tq + i) * d.out_row + h * d.HS;
  const S* qi = q + (b * d.Tq + i) * d.q_row + h * d.HS;
  const T li = lse[idx], Di = D[idx];
  const int64_t keys = d.causal ? i + 1 : d.Tk;
  for (int64_t j = 0; j < keys; ++j) {
    const S* kj = kv + (b * d.Tk + j) * d.kv_row + g * d.HS;
    const S* vj = kv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
    const T p = exp(dot(qi, kj, d.HS) * scale - li);
    const T ds = p * (dot(dout + row, vj, d.HS) - Di) * scale;
    for (int64_t c = 0; c < d.HS; ++c) dq[row + c] += ds * load(kj[c]);
  }
}

template <typename S>
__global__ void dkv_kernel(BlockDims d, compute_t<S>* dkv, const compute_t<S>* D, const S* dout, const S* q,
                           const S* kv, const compute_t<S>* lse) {
  using T = compute_t<S>;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.B * d.NKV * d.Tk) return;
  const int64_t j = idx % d.Tk, b = idx / d.Tk / d.NKV;
  const int g = static_cast<int>(idx / d.Tk % d.NKV);
  const T scale = T(1) / sqrt(static_cast<T>(d.HS));
  const S* kj = kv + (b * d.Tk + j) * d.kv_row + g * d.HS;
  const S* vj = kv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
  T* dkj = dkv + (b * d.Tk + j) * d.kv_row + g * d.HS;
  T* dvj = dkv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
  const int first_h = g * d.group - d.phase > 0 ? g * d.group - d.phase : 0;
  const int end_h = (g + 1) * d.group - d.phase < d.NH ? (g + 1) * d.group - d.phase : d.NH;
  for (int h = first_h; h < end_h; ++h)
    for (int64_t i = d.causal ? j : 0; i < d.Tq; ++i) {
      const int64_t r = (b * d.NH + h) * d.Tq + i, row = (b * d.Tq + i) * d.out_row + h * d.HS;
      const S* qi = q + (b * d.Tq + i) * d.q_row + h * d.HS;
      const T p = exp(dot(qi, kj, d.HS) * scale - lse[r]);
      const T ds = p * (dot(dout + row, vj, d.HS) - D[r]) * scale;
      for (int64_t c = 0; c < d.HS; ++c) {
        dkj[c] += ds * load(qi[c]);
        dvj[c] += p * load(dout[row + c]);
      }
    }
}

BlockDims dims_of(const Tensor& q, const Tensor& kv, const AttentionHeads& h, BlockMask mask) {
  const int64_t HS = q.dim(2) / (h.n_head + 2 * int64_t{h.n_kv_head});
  DT_CHECK(HS <= kMaxHeadSize, "attention blocks on the GPU take head sizes up to ", kMaxHeadSize, ", not ", HS);
  return {.B = q.dim(0), .Tq = q.dim(1), .Tk = kv.dim(1), .HS = HS, .q_row = q.dim(2), .kv_row = kv.dim(2),
          .out_row = h.n_head * HS, .NH = h.n_head, .NKV = h.n_kv_head, .group = h.group, .phase = h.phase,
          .causal = mask == BlockMask::causal};
}

// Folds a block's own attention (out_b (B, Tq, NH*HS) in the storage dtype, lse_b (B, NH, Tq))
// into the accumulators (out, lse) as the header's merge does, or with `first` sets them. One
// warp per (position, head) row, whose lanes walk its HS columns: every lane reads the row's old
// lse before lane 0 writes the new one.
template <typename S>
__global__ void merge_kernel(BlockDims d, float* out, float* lse, const S* out_b, const float* lse_b, bool first) {
  constexpr int kWarp = 32;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;  // (b, i, h)
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= d.B * d.Tq * d.NH) return;  // the whole warp
  const int64_t h = row % d.NH, i = row / d.NH % d.Tq, b = row / d.NH / d.Tq;
  const int64_t at = (b * d.NH + h) * d.Tq + i;
  const float block_lse = lse_b[at];
  const float merged = first ? block_lse : fmaxf(lse[at], block_lse) + log1pf(expf(-fabsf(lse[at] - block_lse)));
  const float keep = first ? 0.0f : expf(lse[at] - merged), add = expf(block_lse - merged);
  float* o = out + row * d.HS;
  const S* ob = out_b + row * d.HS;
  for (int64_t c = lane; c < d.HS; c += kWarp) o[c] = (first ? 0.0f : o[c] * keep) + load(ob[c]) * add;
  __syncwarp();
  if (lane == 0) lse[at] = merged;
}

// acc[i] += part[i], part widened from the storage dtype.
template <typename S>
__global__ void add_widened_kernel(float* acc, const S* part, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] += load(part[i]);
}

// GPU scratch of like's shape in `dtype`, freed to the stream-ordered cache when it goes.
Buffer scratch_like(const Tensor& like, DType dtype) {
  return Buffer(static_cast<size_t>(like.numel()) * dtype_size(dtype), MemTag::workspace, Device::cuda,
                /*zero=*/false);
}

// Calls fn.template operator()<S>() for bf16 or f16, the dtypes cuDNN takes.
template <typename Fn>
void dispatch_16bit(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) return fn.template operator()<bf16>();
  DT_CHECK(dtype == DType::f16, "attention blocks on cuDNN take bf16 and f16, not ", dtype_name(dtype));
  fn.template operator()<f16>();
}

void cudnn_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                         bool first) {
  const BlockDims d = dims_of(q, kv, heads, mask);
  const Buffer out_b = scratch_like(out, q.dtype), lse_b = scratch_like(lse, DType::f32);
  cudnn_attention_block_forward(out_b.view(q.dtype, out.shape), lse_b.view(DType::f32, lse.shape), q, kv, heads,
                                mask);
  dispatch_16bit(q.dtype, [&]<typename S>() {
    constexpr int kRowsPerBlock = kElementwiseThreads / 32;
    merge_kernel<S><<<blocks_for(d.B * d.Tq * d.NH, kRowsPerBlock), kElementwiseThreads, 0, compute_stream()>>>(
        d, static_cast<float*>(out.data), static_cast<float*>(lse.data), static_cast<const S*>(out_b.data()),
        static_cast<const float*>(lse_b.data()), first);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void cudnn_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                          AttentionHeads heads, BlockMask mask) {
  const Buffer dq_b = scratch_like(dq, q.dtype), dkv_b = scratch_like(dkv, q.dtype);
  cudnn_attention_block_backward(dq_b.view(q.dtype, dq.shape), dkv_b.view(q.dtype, dkv.shape), dout, q, kv, out, lse,
                                 heads, mask);
  dispatch_16bit(q.dtype, [&]<typename S>() {
    for (const auto& [acc, part] : {std::pair{dq, &dq_b}, std::pair{dkv, &dkv_b}}) {
      add_widened_kernel<S><<<one_wave_grid(acc.numel()), kElementwiseThreads, 0, compute_stream()>>>(
          static_cast<float*>(acc.data), static_cast<const S*>(part->data()), acc.numel());
      DT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

void per_row_attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads,
                                     BlockMask mask, bool first) {
  const BlockDims d = dims_of(q, kv, heads, mask);
  if (d.B * d.NH * d.Tq == 0) return;
  dispatch_storage(q.dtype, [&]<typename S>() {
    forward_kernel<S><<<blocks_for(d.B * d.NH * d.Tq, kElementwiseThreads), kElementwiseThreads, 0,
                        compute_stream()>>>(d, static_cast<compute_t<S>*>(out.data),
                                            static_cast<compute_t<S>*>(lse.data), storage_ptr<S>(q),
                                            storage_ptr<S>(kv), first);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void per_row_attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out,
                                      Tensor lse, AttentionHeads heads, BlockMask mask) {
  const BlockDims d = dims_of(q, kv, heads, mask);
  if (d.B * d.NH * d.Tq == 0) return;
  dispatch_storage(q.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t rows = d.B * d.NH * d.Tq;
    const Buffer D(static_cast<size_t>(rows) * sizeof(T), MemTag::workspace, Device::cuda, /*zero=*/false);
    T* Dp = static_cast<T*>(D.data());
    const unsigned row_blocks = blocks_for(rows, kElementwiseThreads);
    row_dot_kernel<S><<<row_blocks, kElementwiseThreads, 0, compute_stream()>>>(d, Dp, storage_ptr<S>(dout),
                                                                                storage_ptr<S>(out));
    dq_kernel<S><<<row_blocks, kElementwiseThreads, 0, compute_stream()>>>(
        d, static_cast<T*>(dq.data), Dp, storage_ptr<S>(dout), storage_ptr<S>(q), storage_ptr<S>(kv),
        static_cast<const T*>(lse.data));
    dkv_kernel<S><<<blocks_for(d.B * d.NKV * d.Tk, kElementwiseThreads), kElementwiseThreads, 0, compute_stream()>>>(
        d, static_cast<T*>(dkv.data), Dp, storage_ptr<S>(dout), storage_ptr<S>(q), storage_ptr<S>(kv),
        static_cast<const T*>(lse.data));
    DT_CUDA_CHECK_LAUNCH();
  });
}

// cuDNN where it takes the block, as kernels/cuda/attention.cu dispatches the whole sequence's
// attention; the per-row kernels for the rest.
void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first) {
  if (q.dim(0) * q.dim(1) == 0) return;
  if (cudnn_attention_block_refusal(q, kv, heads, mask, /*backward=*/false, {q.data, kv.data}).empty())
    return cudnn_block_forward(out, lse, q, kv, heads, mask, first);
  per_row_attention_block_forward(out, lse, q, kv, heads, mask, first);
}

void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask) {
  if (q.dim(0) * q.dim(1) == 0) return;
  if (cudnn_attention_block_refusal(q, kv, heads, mask, /*backward=*/true,
                                    {q.data, kv.data, dout.data, out.data, lse.data})
          .empty())
    return cudnn_block_backward(dq, dkv, dout, q, kv, out, lse, heads, mask);
  per_row_attention_block_backward(dq, dkv, dout, q, kv, out, lse, heads, mask);
}

std::string attention_block_kernels(const Tensor& q, const Tensor& kv, AttentionHeads heads, BlockMask mask) {
  const std::string forward = cudnn_attention_block_refusal(q, kv, heads, mask, false, {q.data, kv.data});
  const std::string backward =
      forward.empty() ? cudnn_attention_block_refusal(q, kv, heads, mask, true, {q.data, kv.data}) : forward;
  return attention_kernels_chosen(forward, backward, "dtrain's per-row kernels");
}

}  // namespace dt::kernels::cuda
