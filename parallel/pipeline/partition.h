// How a model's blocks are cut into a pipeline's stages: contiguous runs of blocks, every stage
// at least one, the first stage with the embeddings and the last with the head, chosen so that
// the largest stage's forward FLOPs per token (model/flops.h: its blocks, and the head's output
// projection on the last) is as small as it can be — the stage that takes longest sets the
// pipeline's pace. Any block count works (7 blocks over 4 stages); with a large vocabulary the
// last stage takes fewer blocks.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/stage.h"

namespace dt::pipeline {

// The units of each of `stages` stages for sequences of seq_len tokens. Throws dt::ConfigError
// when there are more stages than blocks.
std::vector<StageUnits> partition_stages(const ModelConfig& config, int stages, int seq_len);

}  // namespace dt::pipeline
