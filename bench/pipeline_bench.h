// `dtrain bench pp`, under mpirun with every rank of the job one pipeline rank (one thread each):
// each schedule run by the executor (parallel/pipeline/executor.h) on a model's stages, its
// measured idle fraction beside theory, and the activation memory each rank holds beside the
// micro-batches the schedule keeps in flight there.
//
//   bubble      per rank, (elapsed − busy) / busy over one step of m micro-batches, busy being the
//               time in forward, backward and weight passes; the worst rank's, median of the
//               repeats. Theory (parallel/pipeline/schedule_render.h) assumes a forward, an input
//               pass and a weight pass of equal length; the measured lengths are printed.
//   memory      each rank's activations tag after the step (its stages' buffers: one per
//               micro-batch held at once), and the most micro-batches the schedule holds there.
// Each rank holds the whole model's parameters and runs its stages (the partition of
// parallel/pipeline/partition.h); nothing is updated.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace dt {

struct PipelineBenchOptions {
  ModelConfig model;
  int batch_size = 2;
  int seq_len = 64;
  int micro_batches = 8;
  int virtual_stages = 2;  // for interleaved
  int repeats = 3;
  std::vector<std::string> schedules;
};

void run_pipeline_bench(const PipelineBenchOptions& options);

}  // namespace dt
