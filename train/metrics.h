// What a run records for a person to read: metrics.jsonl and TensorBoard events in the run
// directory, and, with an MLflow server, the same scalars there (train/mlflow_tracker.h).
//
// metrics.jsonl holds one JSON object per step:
//   {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms", "mfu",
//    "hfu", "loss_scale", "skipped", "communication_ms", "communication_hidden",
//    "peak_bytes": {"parameters": ..., ...}}
// (grad_norm, lr, mfu and hfu are null on a skipped step), with a mixture of experts also
// "expert_imbalance": {"h.1": ..., ...} and, where the model trains with them, "expert_aux_loss",
// "router_z_loss" and (within a capacity) "expert_dropped" alike, {"step", "val_loss"} when evaluated, and
// {"step", "checkpoint_stall_ms", "checkpoint_save_ms"} once a checkpoint of that step is in place
// (an asynchronous save's line comes some steps later). The same numbers go to
// TensorBoard as train/loss, train/lr, train/grad_norm, train/tokens_per_s, train/mfu, train/hfu,
// train/loss_scale, moe/imbalance/h.<l>, moe/aux_loss/h.<l>, moe/z_loss/h.<l>, moe/dropped/h.<l>
// val/loss, checkpoint/stall_ms and checkpoint/save_ms, and to MLflow as metrics of those names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "train/mlflow_tracker.h"
#include "train/tensorboard.h"

namespace dt {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // tokens in this step
  double tokens_per_s = 0;
  double step_ms = 0;
  double mfu = 0;  // achieved model FLOP/s over the measured GEMM peak (train/throughput.h)
  double hfu = 0;  // the same with recomputation's extra FLOPs counted
  float loss_scale = 1;
  bool skipped = false;
  // Communication of the step (core/trace.h): the union of its collectives' times, and the
  // share of it that compute covered. 0 and 1 with one rank.
  double communication_ms = 0;
  double hidden_fraction = 1;
  MemoryStats memory;  // peak bytes per tag are recorded
  // Each expert block's step (model/expert_balance.h), as (block, value): the busiest expert's load
  // over the mean, the routers' losses the model trains with and the share of assignments dropped
  // over a capacity (each none where the model has none); none for a dense model. "loss" is the
  // token losses' mean alone, comparable with a dense model's.
  std::vector<std::pair<int, double>> expert_imbalance = {}, expert_aux_loss = {}, router_z_loss = {},
                                      expert_dropped = {};
};

class MetricsLog {
 public:
  // Creates the run directory if needed and starts a new event file (when tensorboard).
  // metrics.jsonl starts empty, or, resuming from resumed_step > 0, keeps its lines up to that
  // step (a killed run may have logged steps after its last checkpoint; they are redone).
  // `mlflow`: the run's tracker, when it has one.
  MetricsLog(const std::filesystem::path& run_dir, int64_t resumed_step = 0, bool tensorboard = true,
             std::unique_ptr<MlflowTracker> mlflow = nullptr);

  void log_step(const StepMetrics& m);
  void log_validation(int64_t step, double loss);
  // A checkpoint of `step` in place: how long the step loop stood still for it, and how long it
  // took until it was in place (train/checkpoint_saver.h).
  void log_checkpoint(int64_t step, double stall_ms, double save_ms);
  const std::filesystem::path& metrics_path() const { return metrics_path_; }

  // What the MLflow tracker has to tell a person since the last call (none without one).
  std::vector<std::string> take_tracking_news();
  // Ends the MLflow run as `end` (MlflowTracker::end): a line saying where it is and what reached
  // it ("" without one).
  std::string end_tracking(RunEnd end, const std::function<void(const std::string&)>& say);

 private:
  void write_line(const std::string& line);
  // Scalars of `step`, (name, value), to TensorBoard and MLflow.
  void record(const std::vector<std::pair<std::string, double>>& scalars, int64_t step);
  std::filesystem::path metrics_path_;
  std::ofstream metrics_;
  std::optional<TensorBoardWriter> events_;
  std::unique_ptr<MlflowTracker> mlflow_;
};

}  // namespace dt
