#include "model/qk_norm.h"

#include "core/device.h"

namespace dt {

namespace {

// The first rows × width elements of `scratch`, as (rows, width).
Tensor rows_of(Tensor scratch, int64_t rows, int64_t width) {
  return scratch.reshape({scratch.numel()}).slice_rows(0, rows * width).reshape({rows, width});
}

// Columns [first, first + block.dim(1)) of `matrix`, copied into `block` (to_block) or from it.
void copy_columns(Tensor matrix, int64_t first, Tensor block, bool to_block) {
  const size_t element = dtype_size(matrix.dtype), width = static_cast<size_t>(block.dim(1)) * element;
  char* columns = static_cast<char*>(matrix.data) + static_cast<size_t>(first) * element;
  const size_t pitch = static_cast<size_t>(matrix.dim(1)) * element, rows = static_cast<size_t>(matrix.dim(0));
  if (to_block)
    copy_rows(block.data, width, columns, pitch, width, rows, matrix.device);
  else
    copy_rows(columns, pitch, block.data, width, width, rows, matrix.device);
}

}  // namespace

QkNorm::QkNorm(const ParameterLayout& layout, int layer)
    : q_(layout, block_prefix(layer) + "attn.q_norm"),
      k_(layout, block_prefix(layer) + "attn.k_norm"),
      q_width_(layout.find(block_prefix(layer) + "attn.q_norm.weight").shape[0]) {}

void QkNorm::forward(const FlatTensors& weights, Tensor qkv, const QkActivations& a) const {
  const int64_t N = qkv.dim(0);
  for (const auto& [norm, first, in, rstd] : parts(a)) {
    const Tensor out = rows_of(a.rows, N, in.dim(1));
    copy_columns(qkv, first, in, true);
    norm->forward(weights, out, Tensor{}, rstd, in);
    copy_columns(qkv, first, out, false);
  }
}

void QkNorm::backward(const FlatTensors& weights, const FlatTensors& grads, Tensor dqkv, const QkActivations& a,
                      Tensor drows) const {
  const int64_t N = dqkv.dim(0);
  for (const auto& [norm, first, in, rstd] : parts(a)) {
    const Tensor dout = rows_of(a.rows, N, in.dim(1)), dinp = rows_of(drows, N, in.dim(1));
    copy_columns(dqkv, first, dout, true);
    zero_bytes(dinp.data, dinp.device, dinp.bytes());  // the norm adds the input's gradient
    // Every row is here (the norm's rows are all of qkv's): nothing to sum over a group.
    norm->backward(weights, grads, dinp, dout, in, Tensor{}, rstd, ParallelRegions::single_rank());
    copy_columns(dqkv, first, dinp, false);
  }
}

}  // namespace dt
