// `dtrain bench tp`, run under mpirun with every rank of the job in one tensor-parallel group:
// one rank's communication and activation memory under tensor parallelism, with and without
// sequence parallelism, measured beside the counts they should be.
//
//   communication   the tp group's collectives over one micro-batch's forward and backward, by
//                   kind: how many and the bytes of their whole buffers (Communicator::traffic),
//                   beside the count the algorithm implies (parallel/tensor/tensor_parallel.h),
//                   and the bytes each rank sends with ring algorithms.
//   activations     the bytes one more block keeps per micro-batch on this rank, measured
//                   through the allocator (models of 2 and 1 layers), beside Korthikanti et
//                   al.'s (2022) s·b·h·(10 + 24/t) for tensor parallelism and s·b·h·34/t with
//                   sequence parallelism, their 16-bit figures with attention recomputed (the
//                   flash-style attention here keeps no s×s scores either).
#pragma once

#include "core/dtype.h"
#include "model/config.h"
#include "model/recompute.h"

namespace dt {

struct TensorParallelBenchOptions {
  ModelConfig model;
  int batch_size = 4;
  int seq_len = 256;
  DType precision = DType::bf16;
  Recompute recompute = Recompute::none;
};

// Prints both tables on rank 0; every rank of the world takes part. Throws dt::Error when a
// measured count differs from the expected one.
void run_tensor_parallel_bench(const TensorParallelBenchOptions& options);

}  // namespace dt
