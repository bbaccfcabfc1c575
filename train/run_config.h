// The run configuration: one TOML file that says everything about a training run, with dotted
// overrides from the command line ("optim.lr=3e-4").
//
//   [model]       preset = "gpt2-124m", or family + sizes; explicit fields override a preset's
//   [init]        from = "" (a safetensors file or a Hugging Face directory), seed
//   [data]        dir, train_prefix, val_prefix, tokenizer, seq_len, shuffle, seed
//   [train]       steps, micro_batch_size, global_batch_size, device, precision, fp8, qat,
//                 recompute, grad_clip
//   [fp8]         format, amax_history, amax_compute, margin, pow2_scales, block (model/float8_recipe.h)
//   [optim]       lr, min_lr_ratio, warmup_steps, decay, decay_steps, beta1, beta2, eps,
//                 weight_decay, decay_embeddings
//   [loss_scale]  enabled, initial, growth_interval, min_scale
//   [parallel]    dp, tp, pp, cp, ep, zero_stage, sp, pp_schedule, pp_virtual, cp_zigzag,
//                 bucket_mb, timeout_s, backend
//   [checkpoint]  dir, every, keep_last, async, resume
//   [log]         run_dir, every, progress, tensorboard, trace
//   [mlflow]      uri, experiment, run_name, end_wait_s (train/mlflow_tracker.h)
//   [eval]        every, batches
//   [sample]      every, prompt, max_tokens, temperature, top_k, top_p, seed
//
// load_run_config() validates everything before anything large is allocated and reports every
// problem at once (unknown keys with a did-you-mean, wrong types, values out of range,
// combinations that disagree), each naming the file, the key, the value and the fix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "model/qat_recipe.h"
#include "model/config.h"
#include "model/float8_recipe.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "parallel/parallel_dims.h"
#include "parallel/zero_policy.h"
#include "plan/memory.h"
#include "plan/step_time.h"

namespace dt {

struct RunConfig {
  std::filesystem::path source;  // the TOML file ("" when built in code)

  std::string model_preset;  // "" when the model is given field by field
  ModelConfig model;

  struct Init {
    std::string from;  // "": random initialisation; else a .safetensors file or an HF directory
    uint64_t seed = 1337;
  } init;

  struct Data {
    std::filesystem::path dir;          // token shards (llm.c format)
    std::string train_prefix = "train";  // train_*.bin
    std::string val_prefix = "val";      // val_*.bin; no validation when none exist and eval is off
    std::filesystem::path tokenizer;     // tokenizer.json, for samples and export ("" = none)
    int seq_len = 256;
    bool shuffle = true;
    uint64_t seed = 1234;
  } data;

  struct Train {
    int64_t steps = 1000;
    int micro_batch_size = 8;    // sequences per micro-batch per data-parallel rank
    int global_batch_size = 8;   // sequences per optimizer step, over all ranks
    std::string device = "cpu";  // "cpu" or "cuda"
    DType precision = DType::f32;
    Recompute recompute = Recompute::none;
    // Quantization-aware training: "none", or the format ("int8", "q8_0", "q4_0") the linear
    // layers' weights are fake-quantized in (model/quantized_weights.h).
    std::string qat = "none";
    // With qat: "int8" fake-quantizes the linear layers' inputs too, per token (model/qat_recipe.h).
    std::string qat_activations = "none";
    float grad_clip = 1.0f;      // 0 disables clipping
    // A GPU run that the memory plan says will not fit stops before allocating, unless this is
    // set: then it warns and tries, at the risk of running out of memory mid-step.
    bool unsafe_skip_memory_check = false;
    Device target_device() const { return device_from_name(device); }
    std::optional<kernels::WeightFormat> qat_format() const {
      return qat == "none" ? std::nullopt : std::optional(kernels::parse_weight_format(qat));
    }
    std::optional<QatRecipe> qat_recipe() const {
      if (!qat_format()) return std::nullopt;
      return QatRecipe{.weights = *qat_format(), .activations = qat_activations == "int8"};
    }
  } train;

  // train.fp8 (the recipe's scaling) and the [fp8] keys (model/float8_recipe.h).
  Float8Recipe fp8;

  LrSchedule lr;       // [optim] lr, min_lr_ratio, warmup_steps, decay, decay_steps; total = train.steps
  AdamWConfig adamw;   // [optim] beta1, beta2, eps, weight_decay, decay_embeddings

  struct LossScale {
    bool enabled = false;
    LossScalerConfig config;
  } loss_scale;

  struct Parallel {
    int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
    int zero_stage = 0;
    bool sp = false;  // sequence parallelism, over the tp ranks
    std::string pp_schedule = "1f1b";
    int pp_virtual = 1;  // virtual stages per pipeline rank (interleaved)
    bool cp_zigzag = true;  // context parallelism's chunks: zig-zag (balanced) or plain
    double bucket_mb = 25;
    double timeout_s = 600;  // a collective waiting longer: the watchdog reports and ends the job
    std::string backend = "auto";  // "auto" (NCCL for CUDA, MPI for the CPU), "mpi" or "nccl"
  } parallel;

  struct Checkpointing {
    std::filesystem::path dir;  // "" = <run_dir>/checkpoints
    int64_t every = 0;          // steps between saves; 0 = only at the end and on SIGTERM/SIGINT
    int keep_last = 3;
    bool async = false;         // write while training goes on (train/checkpoint_saver.h)
    bool resume = true;         // continue from the latest checkpoint in dir when one exists
  } checkpoint;

  struct Log {
    std::filesystem::path run_dir;  // metrics.jsonl, TensorBoard events, config snapshot
    int64_t every = 10;             // steps between plain lines when not on a terminal
    std::string progress = "auto";  // "auto" (bar on a terminal), "bar" or "plain"
    bool tensorboard = true;
    bool trace = false;  // <run_dir>/trace.json: every rank's compute and communication (Perfetto)
  } log;

  struct Mlflow {
    std::string uri;  // an MLflow server, http(s)://host:port; "" = not tracked
    std::string experiment = "dtrain";
    std::string run_name;   // "" = log.run_dir's last component
    double end_wait_s = 60;  // at the end, how long to keep sending what is queued
  } mlflow;

  struct Eval {
    int64_t every = 0;  // steps between validation passes; 0 = only at the end
    int batches = 20;   // micro-batches of validation data per pass
  } eval;

  struct Sample {
    int64_t every = 0;  // steps between samples; 0 = only at the end (when a tokenizer is set)
    std::string prompt;
    int max_tokens = 64;
    float temperature = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    uint64_t seed = 42;
  } sample;

  // Micro-batches accumulated per optimizer step on each data-parallel rank.
  // The parallel layout the parallel.* keys describe: the one source of the sizes that the
  // process groups are made from (parallel/parallel_dims.h).
  ParallelDims dims() const {
    return {.dp = parallel.dp, .cp = parallel.cp, .tp = parallel.tp, .pp = parallel.pp, .ep = parallel.ep};
  }
  int accumulation_steps() const { return global_batch_size() / (train.micro_batch_size * dims().dp); }
  int global_batch_size() const { return train.global_batch_size; }
  int64_t tokens_per_step() const { return static_cast<int64_t>(train.global_batch_size) * data.seq_len; }
  // The ZeRO policy parallel.zero_stage names (one that exists), of train.precision over the
  // dp × cp ranks, which ZeRO shards over.
  ZeroPolicy zero() const { return ZeroPolicy::of(parallel.zero_stage, train.precision, dims().dp * dims().cp); }
  // checkpoint.dir, else <run_dir>/checkpoints; empty (no checkpoints) when neither is set.
  std::filesystem::path checkpoint_dir() const {
    if (!checkpoint.dir.empty()) return checkpoint.dir;
    return log.run_dir.empty() ? std::filesystem::path() : log.run_dir / "checkpoints";
  }
};

// Reads `path`, applies `overrides` ("section.key=value", parsed as TOML values, bare words as
// strings), fills every default, and validates. Throws dt::Error listing every problem.
RunConfig load_run_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});

// The files a run reads, checked, every problem listed in one dt::Error: data.dir is set and
// holds train shards (<train_prefix>*.bin) with at least one sequence of data.seq_len + 1
// tokens, val shards exist when eval.every > 0, and data.tokenizer exists when set.
// load_run_config() checks values only, so that `dtrain config show` (and the planner) work on
// a machine without the data; the trainer calls this before allocating anything.
void check_run_inputs(const RunConfig& config);

// The fully resolved configuration as TOML, every default written out: what
// `dtrain config show` prints and what the run directory keeps as config.toml. Loading it
// gives back the same RunConfig.
std::string resolved_toml(const RunConfig& config);
// The same keys and values as (section.name, value) pairs, strings without their TOML quotes:
// the parameters an experiment tracker records.
std::vector<std::pair<std::string, std::string>> resolved_values(const RunConfig& config);

// Whether a configuration built in code (a variation of a loaded one) passes every check
// load_run_config() makes of its values; the problems it finds, each on an indented line of its
// own ("" when none).
bool run_config_valid(const RunConfig& config);
std::string run_config_problems(const RunConfig& config);

// The memory one rank of the run holds (plan/memory.h), from the configuration alone: the rank
// at `rank`, or without one the largest share; and the run's layout as the step-time model takes it (plan/step_time.h),
// on nodes of gpus_per_node.
MemoryPlan run_memory_plan(const RunConfig& config, std::optional<ParallelDims::Coords> rank = {});
StepLayout run_step_layout(const RunConfig& config, int gpus_per_node);

// The quantities people otherwise compute by hand: global batch in sequences and tokens,
// micro-batches per step, padded vocabulary, parameter count, FLOPs per token, and, when the
// training shards can be opened, tokens per epoch and steps per epoch. Human-readable lines.
std::string derived_quantities(const RunConfig& config);

}  // namespace dt
