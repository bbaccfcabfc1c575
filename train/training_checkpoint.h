// What a training run saves and resumes from (ckpt/checkpoint.h is the directory format).
//
// Three flat buffers of the parameter layout are saved, each tensor under its parameter's name
// ("h.0.attn.qkv.weight"):
//   model.NAME      the f32 parameters (with bf16/f16 precision, the master weights: the
//                   16-bit compute copy is rounded from them)
//   adamw.m.NAME    AdamW's first moments
//   adamw.v.NAME    AdamW's second moments
// and, where the model declares per-linear state (model/linear_state.h; no run does yet), each
// linear layer's under its global name ("h.3.attn.qkv.amax_history"), whole:
//   linear_state.NAME
// Every rank writes its share to its own file, in one path for every layout: a buffer that
// every rank of the group holds whole (the parameters below ZeRO 3 in f32, the moments at ZeRO
// 0) is written by rank 0 alone; a sharded one by every rank, each its parts. A parameter that
// a part holds whole is saved under its name; a piece of one in the whole tensor's coordinates
// (ckpt/tensor_pieces.h): NAME[B:E], its elements B to E in row-major order, or
// NAME[R0:R1,C0:C1], a tensor-parallel rank's columns. Under tensor parallelism each rank saves
// the slices it owns (a tensor every tp rank holds, by tp rank 0); under expert parallelism each
// ep rank's experts are written by the first rank holding them. One process is the case where
// one rank writes every tensor whole. Names are global, independent of the saving run's padding,
// rank count, tensor-parallel and expert-parallel size, so a checkpoint loads under any layout — any number of
// ranks, any ZeRO stage, any tensor-parallel size — or in one process, each rank reading the
// pieces that overlap its slice; a missing piece is named. A per-linear state, the same on every
// rank holding its block, is written once, by the rank that is rank 0 of its dp × cp group and
// of its tp group (one per pipeline stage), and read whole by every holder under any layout; with
// none declared nothing is added, and a checkpoint's states must be the model's, name for name.
// (Checkpoints of earlier versions, sharded as
// BUFFER.unit.U.part.R with {"sharding": ...} in the state, load too.)
// State: the step, AdamW's update count, the data loader's (epoch, position), the loss
// scaler's scale and counters. That is everything the next step reads, so resuming reproduces
// the uninterrupted run bit for bit. The model description is kept too: loading into a model
// that differs names every field that does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

#include "ckpt/checkpoint.h"
#include "data/data_loader.h"
#include "model/linear_state.h"
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

// A rank's share of a checkpoint: for each buffer ("model", "adamw.m", "adamw.v"), the ranges
// of its layout it writes and the f32 values of each (range.size() elements, any device). Of
// those, the elements it owns are saved.
struct CheckpointShare {
  struct Piece {
    kernels::FlatRange range;
    Tensor values;
  };
  std::vector<std::pair<std::string, std::vector<Piece>>> buffers;
  // Tensors saved whole under these names (f32, any device): the per-linear states it writes.
  std::vector<std::pair<std::string, Tensor>> whole;

  // Calls visit(values) for each piece, then each whole tensor.
  void for_each_value(const std::function<void(const Tensor&)>& visit) const;
};
// A data-parallel run's: this rank's parts of what is sharded, and on rank 0 of the dp group
// what every rank of it holds whole (under tensor parallelism, each tp rank's shard) but the
// experts, which rank 0 of the expert group writes (under expert parallelism each ep rank's
// experts), with the model's per-linear states on the rank that is also tp rank 0.
// `params`: the model's f32 parameters (unused where they are sharded); `linear_states`: the
// model's (none: it declares none).
CheckpointShare checkpoint_share(const DataParallel& dp, const FlatTensors& params,
                                 const LinearStates* linear_states = nullptr);
// The name a per-linear state is saved under: "linear_state.h.3.attn.qkv.amax_history".
std::string linear_state_tensor_name(const std::string& name);

// The steps of a save, which save_training_checkpoint and an asynchronous save
// (train/checkpoint_saver.h) compose.
// The tensors `share` saves, by name: each parameter a piece covers, whole or the part it holds,
// as views of the pieces' values, and the whole tensors.
std::vector<std::pair<std::string, Tensor>> checkpoint_tensors(const ParameterLayout& layout,
                                                              const CheckpointShare& share);
// `share` with each piece's and whole tensor's values replaced by copy(values).
CheckpointShare share_copy(const CheckpointShare& share, const std::function<Tensor(const Tensor&)>& copy);
// The bytes of `share`'s values: what a copy of it holds.
size_t checkpoint_share_bytes(const CheckpointShare& share);
// The tensor files of a save: one for each rank of `control` that `writes`, in rank order, and
// this rank's ("" when it writes none). Every rank of `control` calls it.
struct CheckpointFiles {
  std::vector<std::string> all;
  std::string own;
};
CheckpointFiles checkpoint_files(Communicator& control, bool writes);
// The manifest's content of a save of `progress`: the model, AdamW's steps, the scaler, the loader.
ckpt::CheckpointContent checkpoint_content(const ParameterLayout& layout, const AdamW& optimizer,
                                           const LossScaler* scaler, const TrainingProgress& progress);

// Saves under `root` (atomic, keeps the newest keep_last): every rank of `control` (the job's)
// calls it with its share, and `control` orders the steps (rank 0 makes the directory, the ranks
// with something to save write their files, rank 0 writes the manifest and puts it in place).
// `layout`: this rank's. Returns the step directory on rank 0.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               Communicator& control, const ParameterLayout& layout,
                                               const CheckpointShare& share, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress);
// One process's save: the whole parameters and the optimizer's parts, and the model's per-linear
// states (none: it declares none).
std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               const FlatTensors& params, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress,
                                               const LinearStates* linear_states = nullptr);

// Loads a checkpoint directory into the parameters (whole), optimizer, scaler and per-linear
// states (each tensor checksummed) and returns the progress to continue from. Throws dt::Error
// naming the fields when the checkpoint's model description differs from the parameters' model,
// and, before reading anything, naming the tensors when its per-linear states are not the ones
// `linear_states` declares (none: the model declares none).
TrainingProgress load_training_checkpoint(const ckpt::Checkpoint& checkpoint, FlatTensors& params, AdamW& optimizer,
                                          LossScaler* scaler, LinearStates* linear_states = nullptr);

// Reads the per-linear states `states` holds from `checkpoint`, by name, whatever layout saved
// them. Throws dt::Error naming the tensor, its file and the fix when the checkpoint holds one the
// model does not declare or lacks one it does (of any block, held here or not).
void load_linear_states(const ckpt::Checkpoint& checkpoint, LinearStates& states);
// The same check alone, for a model whose states are `states` (nullptr: none).
void check_linear_states(const ckpt::Checkpoint& checkpoint, const LinearStates* states);

}  // namespace dt
