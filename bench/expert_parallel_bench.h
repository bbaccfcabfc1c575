// `dtrain bench ep`, under mpirun with every rank of the job one expert-parallel rank (dp = ep =
// the ranks, one thread each): a mixture-of-experts model trained for a few steps on random
// tokens (parallel/expert/expert_parallel.h), each step reported:
//
//   time        the slowest rank's step, and the expert all-to-alls' share of it (the backend's
//               spans of the ep group's all_to_all), with the part compute hid
//   traffic     the bytes each rank's all-to-alls sent (their input buffers, Communicator::traffic),
//               beside the count the routing implies: per expert block, a forward and a backward
//               each send this rank's assignments to their experts and the rows its experts got
//               back, 2 · (P · k + received) rows of C values; any difference fails the run
//   imbalance   each expert block's busiest expert over the mean (tokens routed, all ranks), the
//               worst block's, and the ranks' received rows, the busiest rank's over the mean: what
//               the slowest rank waits for
//
// Dropless (a capacity would drop rows the count does not know of). On the CPU in f32; on a GPU
// (--device cuda) in bf16 through the MPI backend, so ranks may share one GPU.
#pragma once

#include "core/device.h"
#include "model/config.h"

namespace dt {

struct ExpertBenchOptions {
  ModelConfig model;
  int batch_size = 2;
  int seq_len = 64;
  int steps = 5;
  Device device = Device::cpu;
};

void run_expert_bench(const ExpertBenchOptions& options);

}  // namespace dt
