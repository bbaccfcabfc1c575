#include "train/run_report.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/trace.h"
#include "core/version.h"
#include "train/throughput.h"

namespace dt {

namespace {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush())
    throw Error(str("cannot write ", path.string(), ": check that log.run_dir is writable and the disk has space"));
}

// The MLflow run that tracks this training run, when mlflow.uri names a server.
std::unique_ptr<MlflowTracker> mlflow_tracker(const RunConfig& config, int64_t first_step) {
  if (config.mlflow.uri.empty()) return nullptr;
  const std::filesystem::path run_dir = std::filesystem::absolute(config.log.run_dir);
  return std::make_unique<MlflowTracker>(MlflowRun{
      .uri = config.mlflow.uri, .experiment = config.mlflow.experiment,
      .name = config.mlflow.run_name.empty() ? run_dir.filename().string() : config.mlflow.run_name,
      .params = resolved_values(config),
      .tags = {{"dtrain.version", dtrain_version()}, {"dtrain.run_dir", run_dir.string()}},
      .run_dir = run_dir, .resume = first_step > 0, .end_wait_s = config.mlflow.end_wait_s});
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// The run's header, printed once for the job by the lead rank: version, model, batch, layout.
void print_header(const RunConfig& config, const ParallelRun& run, const std::string& origin, int64_t train_tokens) {
  const ModelConfig& mc = config.model;
  const ProcessGroups& groups = run.groups();
  const int tp = groups.dims.tp, pp = groups.dims.pp, cp = groups.dims.cp, ep = groups.dims.ep;
  const int accumulation = config.accumulation_steps();
  const ZeroPolicy zero = config.zero();
  std::printf("dtrain %s\n", dtrain_version().c_str());
  const ParameterLayout layout(mc);
  // A mixture of experts: its experts, and the parameters a token's forward reads.
  const std::string experts =
      mc.moe.experts == 0 ? ""
                          : str(", ", mc.moe.experts, " experts (top ", mc.moe.routing.top_k, ")");
  const std::string active =
      mc.moe.experts == 0 ? "" : str(" (", layout.active_parameters(), " active)");
  std::printf("model %s: %d layers, d_model %d, %d heads%s, %lld parameters%s | %s\n",
              std::string(model_family_name(mc.family)).c_str(), mc.n_layer, mc.d_model, mc.n_head,
              experts.c_str(), static_cast<long long>(layout.num_parameters()), active.c_str(), origin.c_str());
  std::printf("batch %d sequences x %d tokens = %lld tokens per step (%d micro-batch%s of %d) | %lld tokens in %s\n",
              config.global_batch_size(), config.data.seq_len, static_cast<long long>(config.tokens_per_step()),
              accumulation, accumulation == 1 ? "" : "es", config.train.micro_batch_size,
              static_cast<long long>(train_tokens), config.data.dir.string().c_str());
  if (groups.world->size() > 1)
    std::printf("%s over %s: each dp rank trains on its share of every step's batch%s%s\n",
                groups.dims.describe().c_str(), groups.world->backend().c_str(),
                str(tp == 1 ? ""
                            : str(" | each of the ", tp, " tp ranks holds a slice of every block and of the "
                                  "vocabulary", config.parallel.sp ? ", and its part of each micro-batch's tokens "
                                  "between them" : ""),
                    pp == 1 ? ""
                            : str(" | ", pp, " pipeline ranks of ", run.schedule()->stages(), " stages run the ",
                                  run.schedule()->name, " schedule over ", accumulation, " micro-batches"),
                    cp == 1 ? ""
                            : str(" | each sequence's ", run.context()->padded_len(), " tokens over the ", cp,
                                  " cp ranks (", config.parallel.cp_zigzag ? "zig-zag" : "plain",
                                  " chunks), attention in a ring"),
                    ep == 1 ? ""
                            : str(" | each expert block's ", mc.moe.experts, " experts over the ", ep, " ep ranks (",
                                  mc.moe.experts / ep,
                                  mc.moe.experts % ep == 0 ? "" : str(" or ", mc.moe.experts / ep + 1),
                                  " a rank), their rows sent there and back by all-to-all"))
                    .c_str(),
                zero.shards_optimizer_state
                    ? str(" | ZeRO stage ", zero.stage, ": ", zero.sharded(), " sharded over the ", groups.dims.dp,
                          " dp ranks").c_str()
                    : "");
  if (!config.log.run_dir.empty()) std::printf("run directory %s\n", config.log.run_dir.string().c_str());
}

// Rank 0 merges every rank's part of the Chrome trace into run_dir/trace.json.
std::filesystem::path merge_trace_parts(const RunConfig& config, int ranks) {
  std::vector<std::filesystem::path> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(config.log.run_dir / str("trace_rank", r, ".jsonl"));
  trace::merge_chrome_trace(config.log.run_dir / "trace.json", parts);
  for (const auto& part : parts) std::filesystem::remove(part);
  return config.log.run_dir / "trace.json";
}

}  // namespace

RunReport::RunReport(const RunConfig& config, const ParallelRun& run, Communicator& control,
                     const std::string& origin, int64_t train_tokens, int64_t first_step)
    : config_(config),
      control_(control),
      device_(config.train.target_device()),
      lead_(run.lead()),
      rank_(run.groups().world->rank()),
      ranks_(run.groups().world->size()),
      first_step_(first_step),
      tokens_per_step_(config.tokens_per_step()),
      flops_(training_flops(config.model, config.data.seq_len, tokens_per_step_, config.train.recompute)),
      progress_(lead_ ? config.log.progress : "off", first_step, config.train.steps, config.log.every) {
  if (lead_ && !config.log.run_dir.empty()) {
    metrics_ = std::make_unique<MetricsLog>(config.log.run_dir, first_step, config.log.tensorboard,
                                            mlflow_tracker(config, first_step));
    write_text_file(config.log.run_dir / "config.toml", resolved_toml(config));
    write_text_file(config.log.run_dir / "version.txt", dtrain_version() + "\n");
  }
  if (lead_) print_header(config, run, origin, train_tokens);
  // The peak of this machine's GEMMs in the run's precision, taken now; with several ranks the
  // job's is the sum of theirs.
  peak_flops_ = all_reduce_value(control, measure_gemm_peak_gflop_per_s(config.train.precision, device_) * 1e9,
                                 ReduceOp::sum);
  reset_peak_memory(device_);  // the measurement's buffers are not the run's
  std::fflush(stdout);
}

void RunReport::start() {
  // Spans of compute and communication: the overlap summary of each step with several ranks, and
  // the Chrome trace with log.trace. Each rank writes its part; rank 0 merges them at the end.
  trace::enable(ranks_ > 1 || config_.log.trace);
  if (config_.log.trace) {
    trace_part_ = config_.log.run_dir / str("trace_rank", rank_, ".jsonl");
    std::filesystem::create_directories(config_.log.run_dir);
    std::filesystem::remove(trace_part_);
  }
  run_start_ = std::chrono::steady_clock::now();
}

void RunReport::expert_metrics(const StepStats& stats, StepMetrics& m) {
  const MoeConfig& moe = config_.model.moe;
  if (moe.experts == 0) return;
  // Each rank knows its stages' blocks: a block's values are its holders' (0 elsewhere, and none
  // is negative), their max. Per layer: imbalance, balance loss, z-loss, dropped share.
  const size_t L = static_cast<size_t>(config_.model.n_layer);
  std::vector<double> by_layer(4 * L, 0.0);
  for (const ExpertStats& block : stats.expert_stats) {
    const size_t l = static_cast<size_t>(block.layer);
    by_layer[l] = block.imbalance(), by_layer[L + l] = block.aux_loss, by_layer[2 * L + l] = block.z_loss;
    by_layer[3 * L + l] = block.dropped_fraction();
  }
  all_reduce_values(control_, by_layer, ReduceOp::max);
  for (int l = 0; l < config_.model.n_layer; ++l) {
    if (!config_.model.moe_block(l)) continue;
    const size_t i = static_cast<size_t>(l);
    m.expert_imbalance.emplace_back(l, by_layer[i]);
    if (moe.aux_loss_coef > 0) m.expert_aux_loss.emplace_back(l, by_layer[L + i]);
    if (moe.z_loss_coef > 0) m.router_z_loss.emplace_back(l, by_layer[2 * L + i]);
    if (moe.capacity_factor > 0) m.expert_dropped.emplace_back(l, by_layer[3 * L + i]);
  }
}

void RunReport::step(int64_t step, float lr, const StepStats& stats, double seconds) {
  const std::vector<trace::Span> spans = trace::take();
  const trace::Overlap overlap = trace::overlap(spans);
  if (!trace_part_.empty()) trace::append_chrome_events(trace_part_, rank_, spans);
  const double mfu = flops_.model / seconds / peak_flops_, hfu = flops_.hardware / seconds / peak_flops_;
  const double tokens_per_s = static_cast<double>(tokens_per_step_) / seconds;
  StepMetrics metrics{.step = step, .loss = stats.loss, .lr = lr, .grad_norm = stats.grad_norm,
                      .tokens = tokens_per_step_, .tokens_per_s = tokens_per_s, .step_ms = seconds * 1e3,
                      .mfu = mfu, .hfu = hfu, .loss_scale = stats.loss_scale, .skipped = !stats.applied,
                      .communication_ms = overlap.communication_ms, .hidden_fraction = overlap.hidden_fraction(),
                      .memory = memory_stats(device_)};
  expert_metrics(stats, metrics);
  if (metrics_) {
    metrics_->log_step(metrics);
    for (const std::string& news : metrics_->take_tracking_news()) progress_.message(news);
  }
  progress_.step({.step = step, .loss = stats.loss, .lr = lr, .grad_norm = stats.grad_norm,
                  .tokens_per_s = tokens_per_s, .mfu = mfu, .hfu = hfu, .step_ms = seconds * 1e3,
                  .loss_scale = config_.loss_scale.enabled ? stats.loss_scale : 0,
                  .communication_ms = overlap.communication_ms, .hidden_fraction = overlap.hidden_fraction(),
                  .skipped_by = stats.applied ? "" : stats.nonfinite});
}

void RunReport::validation(int64_t step, const Evaluation& evaluation) {
  if (metrics_) metrics_->log_validation(step, evaluation.loss);
  progress_.message(str("step ", step, ": validation loss ", fixed(evaluation.loss, 4), " (perplexity ",
                        fixed(std::exp(evaluation.loss), 2), ", ", evaluation.tokens, " tokens)"));
}

void RunReport::sample(int64_t step, const std::string& text) {
  progress_.message(str("step ", step, ": sample: ", text));
}

void RunReport::checkpoint(int64_t step, const std::filesystem::path& saved, double stall_s, double save_s) {
  if (metrics_) metrics_->log_checkpoint(step, stall_s * 1e3, save_s * 1e3);
  const std::string took = stall_s == save_s ? str(fixed(save_s, 2), " s")
                                             : str("in place after ", fixed(save_s, 2), " s; training paused ",
                                                   fixed(stall_s, 3), " s");
  progress_.message(str("step ", step, ": saved checkpoint ", saved.string(), " (", took, ")"));
}

void RunReport::stopping(int64_t step, int signal) {
  stopped_ = true;
  progress_.message(str("received ", signal == SIGINT ? "SIGINT" : "SIGTERM", " during step ", step,
                        ": saving a checkpoint and stopping; run the same command to resume"));
}

void RunReport::finish(int64_t step, const LossScaler* scaler) {
  if (!trace_part_.empty()) {
    control_.barrier().wait();  // every rank's part is written (a host barrier: NCCL's does not block)
    if (lead_)
      progress_.message(str("trace of every rank's compute and communication: ",
                            merge_trace_parts(config_, ranks_).string()));
  }
  progress_.message(str("trained steps ", first_step_ + 1, "-", step, " (", (step - first_step_) * tokens_per_step_,
                        " tokens) in ", format_duration(std::chrono::duration<double>(
                                            std::chrono::steady_clock::now() - run_start_).count())));
  if (scaler)
    progress_.message(str("loss scaling: ", scaler->skipped_steps(), " steps skipped, final scale ", scaler->scale()));
  progress_.message(
      str("memory", device_ == Device::cpu ? "" : " (GPU)", ": ", format_memory_stats(memory_stats(device_))));
  if (metrics_)
    if (const std::string account = metrics_->end_tracking(stopped_ ? RunEnd::killed : RunEnd::finished,
                                                           [&](const std::string& line) { progress_.message(line); });
        !account.empty())
      progress_.message(account);
}

}  // namespace dt
