// Writing the inputs of the PyTorch reference scripts (tests/reference/).
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/safetensors.h"
#include "model/config.h"
#include "optim/adamw.h"
#include "tests/gradcheck.h"

namespace dt::testing {

// Metadata values written so that they round-trip exactly through text.
void set_numeric_metadata(ckpt::SafetensorsWriter& writer, std::initializer_list<std::pair<const char*, double>> values);
// The model description that transformer_reference.py's Description reads.
void set_model_metadata(ckpt::SafetensorsWriter& writer, const ModelConfig& config);

// The training run both training references read (transformer_reference.py,
// mixed_precision_reference.py): its length, its micro-batches and AdamW's settings.
struct ReferenceTraining {
  int steps = 0, micro_batches = 0;
  float lr = 0, max_grad_norm = 0;
  AdamWConfig adamw;
};
void set_training_metadata(ckpt::SafetensorsWriter& writer, const ReferenceTraining& training);

// Every micro-batch of the run, int32 tokens and targets of `shape` (B, T) filled by
// fill(step, k, tokens, targets), written as s<step>.mb<k>.tokens and .targets and returned in
// that order (step-major).
struct MicroBatchInputs {
  std::vector<OwnedTensor> tokens, targets;
};
MicroBatchInputs add_micro_batches(ckpt::SafetensorsWriter& writer, const ReferenceTraining& training, Shape shape,
                                   const std::function<void(int step, int k, Tensor tokens, Tensor targets)>& fill);

}  // namespace dt::testing
