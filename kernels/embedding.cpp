#include "kernels/embedding.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
void check_ids(std::string_view op, const Tensor& ids, int64_t first_id) {
  DT_CHECK(ids.dtype == DType::i32, op, ": ids ", ids.describe(), " must be i32");
  DT_CHECK(first_id >= 0, op, ": first id ", first_id, " is negative");
  const std::vector<int32_t> host = host_values<int32_t>(ids);  // a copy when ids are on a GPU
  const int32_t* p = host.data();
  for (int64_t i = 0; i < ids.numel(); ++i) DT_CHECK(p[i] >= 0, op, ": id ", p[i], " at ", i, " is negative");
}
}  // namespace

void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id) {
  constexpr std::string_view op = "embedding_forward";
  expect_storage_dtype(op, table);
  expect_dtype(op, "out", out, table.dtype, table.device);
  DT_CHECK(table.ndim() == 2, op, ": table ", table.describe());
  expect_shape(op, "out", out, {ids.numel(), table.dim(1)});
  check_ids(op, ids, first_id);
  DT_DISPATCH_DEVICE(embedding_forward, table.device, out, ids, table, first_id);
}

void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id) {
  constexpr std::string_view op = "embedding_backward";
  expect_storage_dtype(op, dout);
  expect_dtype(op, "dtable", dtable, accumulation_dtype(dout.dtype), dout.device);
  DT_CHECK(dtable.ndim() == 2, op, ": dtable ", dtable.describe());
  expect_shape(op, "dout", dout, {ids.numel(), dtable.dim(1)});
  check_ids(op, ids, first_id);
  DT_DISPATCH_DEVICE(embedding_backward, dout.device, dtable, ids, dout, first_id);
}

void position_embedding_forward(Tensor out, Tensor wpe) {
  constexpr std::string_view op = "position_embedding_forward";
  expect_storage_dtype(op, wpe);
  expect_dtype(op, "out", out, wpe.dtype, wpe.device);
  DT_CHECK(out.ndim() == 3 && wpe.ndim() == 2 && out.dim(2) == wpe.dim(1) && out.dim(1) <= wpe.dim(0), op, ": out ",
           out.describe(), " needs (B, T, C) with T <= rows of wpe ", wpe.describe());
  DT_DISPATCH_DEVICE(position_embedding_forward, wpe.device, out, wpe);
}

void position_embedding_backward(Tensor dwpe, Tensor dout) {
  constexpr std::string_view op = "position_embedding_backward";
  expect_storage_dtype(op, dout);
  expect_dtype(op, "dwpe", dwpe, accumulation_dtype(dout.dtype), dout.device);
  DT_CHECK(dout.ndim() == 3 && dwpe.ndim() == 2 && dout.dim(2) == dwpe.dim(1) && dout.dim(1) <= dwpe.dim(0), op,
           ": dout ", dout.describe(), " needs (B, T, C) with T <= rows of dwpe ", dwpe.describe());
  DT_DISPATCH_DEVICE(position_embedding_backward, dout.device, dwpe, dout);
}

}  // namespace dt::kernels
