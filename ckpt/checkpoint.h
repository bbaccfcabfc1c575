// Training checkpoints: one directory per saved step, written so that a crash at any moment
// leaves the last good checkpoint loadable.
//
//   ROOT/step_000001200/manifest.json        format version, step, model description, the
//                                            caller's small state (JSON), and for every tensor
//                                            its name, dtype, shape, file and CRC-32C
//   ROOT/step_000001200/tensors.safetensors  the tensors (parameters, master weights, moments)
//   ROOT/latest                              the name of the newest complete step directory
//
// Several processes may write one checkpoint, each its own tensor file (ZeRO's ranks each save
// their shard: tensors_00001_of_00004.safetensors); the manifest lists every tensor with the file
// that holds it, so a checkpoint is complete only with every file it names. Rank 0 begins the
// save (begin_checkpoint), every rank writes its file (write_checkpoint_file), and once all are
// written rank 0 finishes it (finish_checkpoint); the callers synchronise between the steps.
//
// Saving writes ROOT/step_N.tmp, syncs every file and the directory, renames it into place,
// then replaces ROOT/latest atomically (temporary file, fsync, rename) and removes all but the
// newest keep_last step directories, each renamed to step_N.old first, so that a crash during a
// removal leaves no step directory with files missing. Loading verifies each tensor's checksum as it is read and
// names the tensor and the previous checkpoint when one fails. docs/formats.md describes the
// files as a user sees them; what a training run saves is train/training_checkpoint.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/tensor.h"

namespace dt::ckpt {

constexpr int kCheckpointFormatVersion = 1;

struct CheckpointContent {
  int64_t step = 0;
  nlohmann::json model;  // the model description, to refuse loading into another model
  nlohmann::json state;  // small state: a run's AdamW step count, loader position, loss scaler
  std::vector<std::pair<std::string, Tensor>> tensors;
};

// Saves `content` under root (created if needed), its tensors in one file; returns the step
// directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const CheckpointContent& content,
                                      int keep_last);

// The three steps of a save from several processes. begin_checkpoint creates the step's
// temporary directory (removing one a crash left). write_checkpoint_file writes `tensors` there
// as `file`, durably, with each tensor's checksum in the file's metadata.
// finish_checkpoint reads the headers of `files` (all written by now), writes the manifest with
// `content`'s step, model and state (content.tensors is not used) and puts the directory in place
// as save_checkpoint does; a file that is missing is an error naming it.
void begin_checkpoint(const std::filesystem::path& root, int64_t step);
void write_checkpoint_file(const std::filesystem::path& root, int64_t step, const std::string& file,
                           const std::vector<std::pair<std::string, Tensor>>& tensors);
std::filesystem::path finish_checkpoint(const std::filesystem::path& root, const CheckpointContent& content,
                                        const std::vector<std::string>& files, int keep_last);
// The name of rank `rank`'s tensor file of a checkpoint written by `ranks` processes:
// tensors_R_of_N.safetensors, or tensors.safetensors when one process writes.
std::string shard_file_name(int rank, int ranks);

// The step directories in place under root (step_ and nine digits: not a save's ".tmp" nor a
// removal's ".old"), oldest first.
std::vector<std::filesystem::path> step_directories(const std::filesystem::path& root);

class Checkpoint {
 public:
  // The newest complete checkpoint under root; throws dt::Error when there is none.
  static std::filesystem::path latest(const std::filesystem::path& root);

  // A step directory as given, or the latest under a checkpoint root.
  static std::filesystem::path step_or_latest(const std::filesystem::path& directory);
  // Reads and checks the manifest of a step directory.
  explicit Checkpoint(std::filesystem::path directory);

  const std::filesystem::path& directory() const { return directory_; }
  int64_t step() const { return manifest_.at("step").get<int64_t>(); }
  const nlohmann::json& model() const { return manifest_.at("model"); }
  const nlohmann::json& state() const { return manifest_.at("state"); }
  const nlohmann::json& manifest() const { return manifest_; }
  std::vector<std::string> tensor_names() const;

  // Reads tensor `name` into destination (same dtype and shape) and verifies its checksum.
  void read_into(const std::string& name, const Tensor& destination) const;
  // Verifies every tensor's checksum; throws on the first that fails.
  void verify() const;

 private:
  [[noreturn]] void checksum_failed(const std::string& name, uint32_t stored, uint32_t computed) const;
  // What to do when this checkpoint cannot be read: resume from the previous one, if any.
  std::string previous_advice() const;
  const nlohmann::json& entry(const std::string& name) const;
  std::filesystem::path directory_;
  nlohmann::json manifest_;
  std::map<std::string, SafetensorsReader> files_;  // every file the manifest names, by name
};

}  // namespace dt::ckpt
