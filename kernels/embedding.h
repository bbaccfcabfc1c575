// Token and learned position embeddings.
//
//   embedding_forward:            out[n, :] = table[ids[n] - first_id, :]      (sets out)
//   embedding_backward:           dtable[ids[n] - first_id, :] += dout[n, :]   (accumulates)
//   position_embedding_forward:   out[b, t, :] += wpe[t, :]                    (accumulates into out)
//   position_embedding_backward:  dwpe[t, :] += sum_b dout[b, t, :]            (accumulates)
//
// Shapes: ids (N) i32; table, dtable (Vp, C); out, dout (N, C) or (B, T, C); wpe, dwpe (L, C)
// with L >= T (only the first T rows are read or written).
// Dtypes: table, wpe, out, dout share one storage type (f32, f64, bf16 or f16); dtable and dwpe
// are f32 (f64 with f64): gradients accumulated over many rows. embedding_forward copies stored
// values; position_embedding_forward adds in f32 and rounds out once; the backwards add the
// exactly widened dout into f32.
// embedding_backward is deterministic: the same ids and dout give the same bits whatever the
// thread count's schedule (no floating-point atomics; each row of dtable is owned by one thread).
// Ids must be in [0, Vp); the model checks them against V before calling (an id out of range
// is a user error there, an internal error here).
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id = 0);
void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id = 0);
void position_embedding_forward(Tensor out, Tensor wpe);
void position_embedding_backward(Tensor dwpe, Tensor dout);

namespace cpu {
void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id);
void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id);
void position_embedding_forward(Tensor out, Tensor wpe);
void position_embedding_backward(Tensor dwpe, Tensor dout);
}  // namespace cpu

namespace cuda {
void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id);
void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id);
void position_embedding_forward(Tensor out, Tensor wpe);
void position_embedding_backward(Tensor dwpe, Tensor dout);
}  // namespace cuda

}  // namespace dt::kernels
