// A training run's saves, synchronous or asynchronous (checkpoint.async).
//
// A synchronous save returns once the checkpoint is in place (save_training_checkpoint): the
// step loop stands still while every rank writes and syncs its file.
//
// An asynchronous save returns once this rank's share is copied into host staging, allocated
// when the saver is made (MemTag::checkpoint; pinned when the share lives on a GPU) and reused
// by every save. A thread then writes and syncs the rank's file while training goes on. After
// each step every rank calls poll(): while a save is in flight, one all-reduce of an int over
// `control` tells every rank whether all files are written, and once they are, a thread of rank
// 0 writes the manifest and puts the directory in place exactly as a synchronous save does. The
// directory and `latest` change only then, so a process killed at any moment of an asynchronous
// save leaves the last complete checkpoint, as a synchronous save does. A save waits for the one
// before it to complete, and so does wait() (the end of a run).
//
// A write that fails (a full disk) is rethrown on its rank by the next poll(), save() or wait().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/device.h"
#include "train/training_checkpoint.h"

namespace dt {

class CheckpointSaver {
 public:
  // A completed save, as rank 0 reports it: the step directory, how long the step loop stood
  // still for it, and how long it took from save() until it was in place.
  struct Saved {
    int64_t step = 0;
    std::filesystem::path directory;
    double stall_s = 0;
    double save_s = 0;
  };
  using OnSaved = std::function<void(const Saved&)>;

  // Saves `share` (views of the run's buffers, read at each save) under root, keeping the newest
  // keep_last. Every rank of `control` makes one alike. `on_saved` is called on rank 0 as each
  // save completes.
  CheckpointSaver(std::filesystem::path root, int keep_last, bool async, Communicator& control,
                  const ParameterLayout& layout, CheckpointShare share, OnSaved on_saved);
  // Waits for a thread in flight, without finishing its save (its temporary directory stays, as
  // a crash would leave it).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Saves the share's values as they are now, with the optimizer's steps, the scaler and
  // `progress` in the manifest. Every rank calls it alike.
  void save(const AdamW& optimizer, const LossScaler* scaler, const TrainingProgress& progress);
  // After each step, every rank: completes a save whose files are all written.
  void poll();
  // Every rank: returns once the save in flight (if any) is in place.
  void wait();

  // The host staging of an asynchronous saver (0 for a synchronous one).
  size_t staging_bytes() const { return staging_.bytes(); }

 private:
  enum class Phase { idle, writing, finishing };  // finishing: rank 0 alone
  // Runs `work` on a thread; `done_` is set when it returns or throws.
  void start(std::function<void()> work);
  // Joins the thread (once) and rethrows what it threw.
  void join();
  void start_finishing();
  void completed();

  const std::filesystem::path root_;
  const int keep_last_;
  const bool async_;
  Communicator& control_;
  const ParameterLayout& layout_;
  const CheckpointShare share_;
  const OnSaved on_saved_;
  // Asynchronous: the staging and its pinning, each value of the share with its view in the
  // staging, the tensors named in the staging, and the save's files.
  Buffer staging_;
  std::optional<HostPinning> pinning_;
  std::vector<std::pair<Tensor, Tensor>> copies_;
  std::vector<std::pair<std::string, Tensor>> staged_tensors_;
  CheckpointFiles files_;

  Phase phase_ = Phase::idle;
  ckpt::CheckpointContent content_;  // of the save in flight
  std::chrono::steady_clock::time_point started_;
  double stall_s_ = 0;
  std::filesystem::path directory_;  // rank 0's, once in place
  double save_s_ = 0;
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

}  // namespace dt
