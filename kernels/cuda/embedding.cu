// Token and position embeddings (kernels/embedding.h) on the GPU.
//
// The forwards are copies and adds over (N, C): memory bound, so each thread moves 16-byte packs
// (4 f32, 2 f64, 8 bf16/f16) when C and the pointers allow, else single elements, in grid-stride
// loops over one wave of blocks (kernels/cuda/elementwise.cuh's grid).
//
// The backwards must be deterministic (no floating-point atomics) and in fact give the CPU's
// bits, because they add in the CPU's order:
//
//   position_embedding_backward: one thread per (t, pack of columns) adds dout[0, t], dout[1, t],
//     ... into dwpe[t] in batch order, as the CPU's thread owning position t does.
//   embedding_backward: tokens repeat, so rows of dtable receive several additions. The token
//     positions are sorted by id with CUB's stable radix sort, which keeps equal ids in position
//     order; a run of equal ids is then summed by one warp per 32 packs of columns, starting
//     from dtable[id] and adding dout rows in position order — the order of the CPU's loop over
//     n. A token that appears very often (padding, end of text) is one long serial run; the
//     warp loads ahead (unrolled by 4) to keep several rows in flight.
//
// ids are on the device normally; ids in host memory (what the dispatch's range check reads
// today) are copied to a workspace first, in order on the compute stream.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "core/buffer.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/embedding.h"

namespace dt::kernels::cuda {

namespace {

// can_pack (storage.cuh) for the stored tensors, and the f32 (f64) gradient table aligned for
// its pack of V = kPackWidth<S> elements (sizeof(T) * V bytes).
template <typename S>
bool can_pack_with_gradient(int64_t C, std::initializer_list<const void*> storage, const void* gradient) {
  return can_pack<S>(C, storage) && aligned_to(gradient, sizeof(compute_t<S>) * kPackWidth<S>);
}

// The grid-stride kernels' blocks (kernels/cuda/elementwise.cuh), at least one.
constexpr int kThreads = kElementwiseThreads;
unsigned grid_for(int64_t work) { return std::max(1u, one_wave_grid(work)); }

// ids as a device pointer: the tensor itself, or its copy in `staging` when it is in host memory.
const int32_t* device_ids(const Tensor& ids, Buffer& staging) {
  if (ids.device == Device::cuda) return static_cast<const int32_t*>(ids.data);
  staging = Buffer(ids.bytes(), MemTag::workspace, Device::cuda, /*zero=*/false);
  // From pageable memory this returns once the ids are staged, so they may change afterwards.
  DT_CUDA_CHECK(cudaMemcpyAsync(staging.data(), ids.data, ids.bytes(), cudaMemcpyHostToDevice, compute_stream()));
  return static_cast<const int32_t*>(staging.data());
}

// out[n, :] = table[ids[n] - first_id, :], pack by pack; zeros for an id the table does not hold.
template <typename S, int V>
__global__ void embedding_forward_kernel(S* out, const int32_t* ids, const S* table, int64_t first_id, int64_t rows,
                                         int64_t N, int64_t C) {
  using P = Pack<S, V>;
  const int64_t packs_per_row = C / V, total = N * packs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs_per_row, p = i % packs_per_row, row = ids[n] - first_id;
    P value;
    if (row >= 0 && row < rows) {
      value = reinterpret_cast<const P*>(table + row * C)[p];
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) store(&value.v[k], compute_t<S>(0));
    }
    reinterpret_cast<P*>(out + n * C)[p] = value;
  }
}

// out[b, t, :] += wpe[t, :] over out (B, T, C) seen as N = B * T rows.
template <typename S, int V>
__global__ void position_forward_kernel(S* out, const S* wpe, int64_t N, int64_t T_len, int64_t C) {
  using P = Pack<S, V>;
  const int64_t packs_per_row = C / V, total = N * packs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs_per_row, p = i % packs_per_row, t = n % T_len;
    P o = reinterpret_cast<P*>(out + n * C)[p];
    const P w = reinterpret_cast<const P*>(wpe + t * C)[p];
#pragma unroll
    for (int k = 0; k < V; ++k) store(&o.v[k], load(o.v[k]) + load(w.v[k]));
    reinterpret_cast<P*>(out + n * C)[p] = o;
  }
}

// dwpe[t, :] += dout[0, t, :] + dout[1, t, :] + ..., added one batch row at a time.
template <typename S, int V>
__global__ void position_backward_kernel(compute_t<S>* dwpe, const S* dout, int64_t B, int64_t T_len, int64_t C) {
  using T = compute_t<S>;
  const int64_t packs_per_row = C / V, total = T_len * packs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / packs_per_row, p = i % packs_per_row;
    Pack<T, V> acc = reinterpret_cast<const Pack<T, V>*>(dwpe + t * C)[p];
    for (int64_t b = 0; b < B; ++b) {
      const Pack<S, V> d = reinterpret_cast<const Pack<S, V>*>(dout + (b * T_len + t) * C)[p];
#pragma unroll
      for (int k = 0; k < V; ++k) acc.v[k] += load(d.v[k]);
    }
    reinterpret_cast<Pack<T, V>*>(dwpe + t * C)[p] = acc;
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// The sort's keys: each id's row of the table, or `rows` for an id the table does not hold (one
// run, sorted last, that adds nothing).
__global__ void table_rows_kernel(uint32_t* keys, const int32_t* ids, int64_t first_id, int64_t rows, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = ids[i] - first_id;
    keys[i] = static_cast<uint32_t>(row >= 0 && row < rows ? row : rows);
  }
}

// Warp w (over blockIdx.x) looks at sorted entry i = w; if it starts a run of equal rows below
// `rows`, the warp adds that run's dout rows, in position order, into dtable[row] for the 32
// packs of columns of blockIdx.y.
template <typename S, int V>
__global__ void embedding_backward_kernel(compute_t<S>* dtable, const S* dout, const uint32_t* sorted_ids,
                                          const int32_t* sorted_positions, int64_t rows, int64_t N, int64_t C) {
  using T = compute_t<S>;
  constexpr unsigned kFullMask = 0xffffffffu;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (i >= N) return;  // whole warps return together: i is the same for every lane
  const uint32_t id = sorted_ids[i];
  if (id == rows) return;                         // ids the table does not hold
  if (i > 0 && sorted_ids[i - 1] == id) return;  // not the first of its run
  // The run's end: 32 entries at a time, the first that differs found by a ballot.
  int64_t end = i + 1;
  for (;;) {
    const int64_t j = end + lane;
    const unsigned same = __ballot_sync(kFullMask, j < N && sorted_ids[j] == id);
    if (same != kFullMask) {
      end += __ffs(~same) - 1;
      break;
    }
    end += 32;
  }
  const int64_t p = static_cast<int64_t>(blockIdx.y) * 32 + lane;
  if (p >= C / V) return;
  T* row = dtable + static_cast<int64_t>(id) * C;
  Pack<T, V> acc = reinterpret_cast<const Pack<T, V>*>(row)[p];
#pragma unroll 4
  for (int64_t j = i; j < end; ++j) {
    const Pack<S, V> d = reinterpret_cast<const Pack<S, V>*>(dout + static_cast<int64_t>(sorted_positions[j]) * C)[p];
#pragma unroll
    for (int k = 0; k < V; ++k) acc.v[k] += load(d.v[k]);
  }
  reinterpret_cast<Pack<T, V>*>(row)[p] = acc;
}

// Bits that distinguish keys below `rows`: the radix sort looks at no more.
int id_bits(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < rows) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id) {
  const int64_t N = ids.numel(), C = table.dim(1), rows = table.dim(0);
  if (N == 0 || C == 0) return;
  Buffer staging;
  const int32_t* id = device_ids(ids, staging);
  dispatch_storage(table.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(out);
    const S* w = storage_ptr<S>(table);
    if (can_pack<S>(C, {o, w})) {
      constexpr int V = kPackWidth<S>;
      embedding_forward_kernel<S, V><<<grid_for(N * (C / V)), kThreads, 0, compute_stream()>>>(o, id, w, first_id, rows,
                                                                                         N, C);
    } else {
      embedding_forward_kernel<S, 1><<<grid_for(N * C), kThreads, 0, compute_stream()>>>(o, id, w, first_id, rows, N,
                                                                                     C);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id) {
  const int64_t N = ids.numel(), C = dtable.dim(1), rows = dtable.dim(0);
  if (N == 0 || C == 0) return;
  DT_CHECK(N <= INT_MAX, "embedding_backward: ", N, " tokens; the sort takes at most ", INT_MAX);
  Buffer staging;
  const int32_t* id = device_ids(ids, staging);
  const cudaStream_t stream = compute_stream();

  // Token positions sorted by their row of the table; stable, so equal ids keep position order.
  const auto count = static_cast<int>(N);
  const auto index_bytes = static_cast<size_t>(N) * sizeof(int32_t);
  Buffer keys(index_bytes, MemTag::workspace, Device::cuda, false);
  table_rows_kernel<<<grid_for(N), kThreads, 0, stream>>>(static_cast<uint32_t*>(keys.data()), id, first_id, rows, N);
  DT_CUDA_CHECK_LAUNCH();
  Buffer positions(index_bytes, MemTag::workspace, Device::cuda, false);
  Buffer sorted_ids(index_bytes, MemTag::workspace, Device::cuda, false);
  Buffer sorted_positions(index_bytes, MemTag::workspace, Device::cuda, false);
  iota_kernel<<<grid_for(N), kThreads, 0, stream>>>(static_cast<int32_t*>(positions.data()), N);
  DT_CUDA_CHECK_LAUNCH();
  const auto* keys_in = static_cast<const uint32_t*>(keys.data());
  auto* keys_out = static_cast<uint32_t*>(sorted_ids.data());
  const auto* values_in = static_cast<const int32_t*>(positions.data());
  auto* values_out = static_cast<int32_t*>(sorted_positions.data());
  const int end_bit = id_bits(rows + 1);
  size_t temp_bytes = 0;
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, values_in, values_out, count,
                                                0, end_bit, stream));
  Buffer temp(std::max<size_t>(temp_bytes, 1), MemTag::workspace, Device::cuda, false);
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in, keys_out, values_in, values_out,
                                                count, 0, end_bit, stream));

  dispatch_storage(dout.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    T* dw = static_cast<T*>(dtable.data);
    const S* dy = storage_ptr<S>(dout);
    constexpr int kWarps = kThreads / 32;
    const auto row_groups = static_cast<unsigned>((N + kWarps - 1) / kWarps);
    if (can_pack_with_gradient<S>(C, {dy}, dw)) {
      constexpr int V = kPackWidth<S>;
      const dim3 grid(row_groups, static_cast<unsigned>((C / V + 31) / 32));
      embedding_backward_kernel<S, V><<<grid, kThreads, 0, stream>>>(dw, dy, keys_out, values_out, rows, N, C);
    } else {
      const dim3 grid(row_groups, static_cast<unsigned>((C + 31) / 32));
      embedding_backward_kernel<S, 1><<<grid, kThreads, 0, stream>>>(dw, dy, keys_out, values_out, rows, N, C);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
  // The workspaces go back to the caching allocator, stream-ordered on the compute stream: no
  // later user of their memory can overtake the kernels above.
}

void position_embedding_forward(Tensor out, Tensor wpe) {
  const int64_t B = out.dim(0), T_len = out.dim(1), C = out.dim(2), N = B * T_len;
  if (N == 0 || C == 0) return;
  dispatch_storage(wpe.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(out);
    const S* w = storage_ptr<S>(wpe);
    if (can_pack<S>(C, {o, w})) {
      constexpr int V = kPackWidth<S>;
      position_forward_kernel<S, V><<<grid_for(N * (C / V)), kThreads, 0, compute_stream()>>>(o, w, N, T_len, C);
    } else {
      position_forward_kernel<S, 1><<<grid_for(N * C), kThreads, 0, compute_stream()>>>(o, w, N, T_len, C);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

void position_embedding_backward(Tensor dwpe, Tensor dout) {
  const int64_t B = dout.dim(0), T_len = dout.dim(1), C = dout.dim(2);
  if (B == 0 || T_len == 0 || C == 0) return;
  dispatch_storage(dout.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    T* dw = static_cast<T*>(dwpe.data);
    const S* dy = storage_ptr<S>(dout);
    if (can_pack_with_gradient<S>(C, {dy}, dw)) {
      constexpr int V = kPackWidth<S>;
      position_backward_kernel<S, V><<<grid_for(T_len * (C / V)), kThreads, 0, compute_stream()>>>(dw, dy, B, T_len,
                                                                                                    C);
    } else {
      position_backward_kernel<S, 1><<<grid_for(T_len * C), kThreads, 0, compute_stream()>>>(dw, dy, B, T_len, C);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
