// The training run that `dtrain train CONFIG.toml` starts, on every rank of the job alike (one
// process without a launcher), on the CPU or a GPU:
//
//   1. check the run's inputs (train/run_config.h) before allocating anything large, that every
//      rank was started alike (parallel/launch_check.h) and, on a GPU, that the run fits
//      (train/preflight.h);
//   2. build this rank's part of the run (parallel/parallel_run.h), then resume from the latest
//      checkpoint in checkpoint_dir() when checkpoint.resume and one exists, else load init.from,
//      else initialise from init.seed;
//   3. train to train.steps, one optimizer step per global batch (accumulation_steps()
//      micro-batches), showing progress (train/progress.h) and logging metrics
//      (train/metrics.h); validate every eval.every steps, sample every sample.every steps,
//      checkpoint every checkpoint.every steps;
//   4. at the end, or after the step in progress when SIGTERM or SIGINT reaches any rank
//      (train/stop_request.h): save a checkpoint; at the end also validate and sample once more.
//
// docs/architecture.md#the-life-of-a-training-run follows a run through the code; what a run
// prints and writes is docs/training.md's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "parallel/parallel_run.h"
#include "train/run_config.h"

namespace dt {

struct TrainSummary {
  int64_t first_step = 0;  // steps already done when this process started (0, or the resumed step)
  int64_t last_step = 0;   // steps done when it stopped
  double last_loss = 0;
  std::optional<double> val_loss;  // the last validation, when there was one
  bool stopped_by_signal = false;
  std::filesystem::path last_checkpoint;  // "" when none was saved
};

TrainSummary run_training(const RunConfig& config);

// The parallel run the configuration lays out (parallel/parallel_run.h).
ParallelOptions parallel_options(const RunConfig& config);

}  // namespace dt
