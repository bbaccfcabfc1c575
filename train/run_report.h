// What a training run tells a person, and when: the header, a line and a metrics record per
// step, messages (validation, samples, checkpoints, a stop) and the summary at the end.
//
// The lead rank prints (train/progress.h) and writes the run directory (log.run_dir):
// config.toml (the resolved configuration), version.txt (the build that ran), metrics.jsonl and
// TensorBoard events (train/metrics.h), and sends the same metrics to MLflow with mlflow.uri. The other ranks print nothing, but every rank calls
// every member alike: the constructor is a collective over `control` (and finish() with
// log.trace, and step() for a model with experts, whose blocks' loads the lead gathers), and
// each rank records its own spans of compute and communication (core/trace.h),
// for the overlap shown with several ranks and for the Chrome trace with log.trace.
//
// MFU and HFU are a step's FLOPs per second (model/flops.h) over the GEMM peak of the job,
// measured in the run's precision when the report is made (train/throughput.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "model/flops.h"
#include "optim/loss_scaler.h"
#include "parallel/parallel_run.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_config.h"
#include "train/step.h"

namespace dt {

class RunReport {
 public:
  // Starts the run directory, prints the header (`origin`: where the first parameters came
  // from; `train_tokens`: the training split's size) and measures the GEMM peak; then resets the
  // peak memory, which the measurement's buffers are not part of. `control` must outlive it.
  RunReport(const RunConfig& config, const ParallelRun& run, Communicator& control, const std::string& origin,
            int64_t train_tokens, int64_t first_step);
  RunReport(const RunReport&) = delete;
  RunReport& operator=(const RunReport&) = delete;

  // Starts the run's clock and the trace of its steps: just before the first step.
  void start();
  // Step `step` (counted from 1) took `seconds` at learning rate `lr`.
  void step(int64_t step, float lr, const StepStats& stats, double seconds);

  void validation(int64_t step, const Evaluation& evaluation);
  void sample(int64_t step, const std::string& text);
  void checkpoint(int64_t step, const std::filesystem::path& saved, double stall_s, double save_s);
  void stopping(int64_t step, int signal);
  // At the end, after step `step`: the merged trace, the steps trained, loss scaling (with a
  // scaler), the peak memory, and the MLflow run ended (KILLED after stopping(), else FINISHED;
  // a run that ends by an error leaves it FAILED).
  void finish(int64_t step, const LossScaler* scaler);

 private:
  const RunConfig& config_;
  // Each expert block's load imbalance over the step (ExpertStats::imbalance) and the routers'
  // losses the model trains with, gathered from every rank's stages into `m`: a collective over
  // control_ where the model has experts.
  void expert_metrics(const StepStats& stats, StepMetrics& m);

  Communicator& control_;
  const Device device_;
  const bool lead_;
  const int rank_, ranks_;
  const int64_t first_step_;
  const int64_t tokens_per_step_;
  const StepFlops flops_;
  double peak_flops_ = 0;
  bool stopped_ = false;  // by a signal
  std::unique_ptr<MetricsLog> metrics_;  // the lead's, with a run directory
  ProgressDisplay progress_;             // after metrics_: a bar's last newline comes first
  std::filesystem::path trace_part_;     // this rank's part of the Chrome trace, with log.trace
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace dt
