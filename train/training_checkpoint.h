// What a training run saves and resumes from (ckpt/checkpoint.h is the directory format).
//
// Tensors, each under its parameter's name ("h.0.attn.qkv.weight"):
//   model.NAME      the f32 parameters (with bf16/f16 precision, the master weights: the
//                   16-bit compute copy is rounded from them at every forward)
//   adamw.m.NAME    AdamW's first moments
//   adamw.v.NAME    AdamW's second moments
// A ZeRO run saves sharded: each rank writes its own part of every unit of the sharded buffers
// (the moments, and at ZeRO 3 or with 16-bit precision the parameters) to its own file, under names
//   adamw.m.unit.U.part.R    rank R's part of unit U of the layout with the saving run's padding
// and the state records the sharding: {"ranks", "unit_multiple", "buffers"}. Loading reassembles
// the whole buffers from every rank's parts, so a checkpoint resumes under any number of ranks
// and any ZeRO stage, or in one process, and a missing rank's file is named
// (ckpt/checkpoint.h).
// State: the step, AdamW's update count, the data loader's (epoch, position), the loss
// scaler's scale and counters. That is everything the next step reads, so resuming reproduces
// the uninterrupted run bit for bit. The model description is kept too: loading into a model
// that differs names every field that does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "ckpt/checkpoint.h"
#include "data/data_loader.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "parallel/data_parallel.h"

namespace dt {

struct TrainingProgress {
  int64_t step = 0;  // optimizer steps completed
  DataLoaderState loader;
};

// The model description as a checkpoint keeps it: every field of the config.
nlohmann::ordered_json model_description(const ModelConfig& config);

// The model a checkpoint was saved from (for eval, generate and export).
ModelConfig model_config_of(const ckpt::Checkpoint& checkpoint);

// Reads only the parameters of a checkpoint (whole or sharded), each tensor checksummed.
void load_checkpoint_parameters(const ckpt::Checkpoint& checkpoint, FlatTensors& params);

// Saves under `root` (ckpt::save_checkpoint: atomic, keeps the newest keep_last). `params` are
// the model's f32 parameters, whole (under ZeRO 3 a copy gathered for the save).
std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last, FlatTensors& params,
                                               AdamW& optimizer, const LossScaler* scaler,
                                               const TrainingProgress& progress);

// A ZeRO run's save (zero.zero_stage() >= 1): every rank of `zero`'s group calls it, and `control`
// (host memory, the same ranks) orders the steps. Each rank writes only its own parts; rank 0
// also writes the whole parameters where they are not sharded (`params`; nullptr on the other
// ranks and where zero.shards_parameters()), the state and the manifest. Nothing is gathered.
// Returns the step directory on rank 0.
std::filesystem::path save_sharded_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                                       Communicator& control, const FlatTensors* params,
                                                       const DataParallel& zero, const LossScaler* scaler,
                                                       const TrainingProgress& progress);

// Loads a checkpoint directory into the parameters (whole), optimizer and scaler (each tensor
// checksummed) and returns the progress to continue from. Throws dt::Error naming the fields
// when the checkpoint's model description differs from the parameters' model.
TrainingProgress load_training_checkpoint(const ckpt::Checkpoint& checkpoint, FlatTensors& params, AdamW& optimizer,
                                          LossScaler* scaler);

}  // namespace dt
