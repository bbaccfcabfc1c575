// The training loop of the first quickstart: a GPT-2 on a text file's bytes, on the CPU, in
// one process. It prints one line per step with the loss, learning rate, gradient norm, step
// time and throughput. (The configured trainer with token shards, checkpoints and evaluation
// replaces the data source, not the loop's shape.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace dt {

struct TrainOptions {
  ModelConfig model;
  std::string text_path;
  int batch_size = 4;      // sequences per micro-batch
  int seq_len = 64;
  int micro_batches = 1;   // gradient accumulation steps per optimizer step
  LrSchedule lr;
  AdamWConfig adamw;
  float max_grad_norm = 1.0f;
  uint64_t seed = 1337;
  Recompute recompute = Recompute::none;
  DType precision = DType::f32;  // storage of activations and compute weights (model/transformer.h)
  std::optional<LossScalerConfig> loss_scaler;  // dynamic loss scaling (fp16); none by default
  std::string run_dir;  // where metrics.jsonl and TensorBoard events go; "" writes none
};

// Returns the loss of the last step.
double run_training(const TrainOptions& options);

}  // namespace dt
