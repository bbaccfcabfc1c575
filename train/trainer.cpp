#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_checkpoint.h"
#include "comm/mpi.h"
#include "comm/world.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/fault_injection.h"
#include "core/trace.h"
#include "core/version.h"
#include "data/data_loader.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "kernels/cross_entropy.h"
#include "model/inference.h"
#include "parallel/launch_check.h"
#include "parallel/parallel_run.h"
#include "plan/memory.h"
#include "train/batch_buffers.h"
#include "train/evaluate.h"
#include "train/generate.h"
#include "train/metrics.h"
#include "train/preflight.h"
#include "train/progress.h"
#include "train/step.h"
#include "train/stop_request.h"
#include "train/throughput.h"
#include "train/training_checkpoint.h"

namespace dt {

namespace {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush())
    throw Error(str("cannot write ", path.string(), ": check that log.run_dir is writable and the disk has space"));
}

// The weights init.from names: a safetensors file, or a Hugging Face directory's. Read on the
// CPU, then copied where the parameters live.
void load_init_from(const RunConfig& config, FlatTensors& params) {
  std::filesystem::path file = config.init.from;
  if (std::filesystem::is_directory(file)) file /= "model.safetensors";
  // The whole model read on the host; this rank's slices of it taken (all of it on one rank).
  const ParameterLayout whole_layout(config.model);
  FlatTensors host(whole_layout, MemTag::workspace, Device::cpu);
  ckpt::load_hf_safetensors(host, file);
  copy_slices(host, params);
}

// One sample of the model's current parameters, decoded, for the log.
std::string sample_text(const RunConfig& config, const FlatTensors& model_params, const Tokenizer& tokenizer) {
  // Inference runs on the CPU (model/inference.h): a model on a GPU is sampled from a host copy.
  std::optional<FlatTensors> host_copy;
  if (model_params.all().device != Device::cpu) {
    host_copy.emplace(model_params.layout(), MemTag::workspace, Device::cpu);
    copy_bytes(host_copy->all().data, Device::cpu, model_params.all().data, model_params.all().device,
               model_params.all().bytes());
  }
  const FlatTensors& params = host_copy ? *host_copy : model_params;
  std::vector<int32_t> prompt = tokenizer.encode(config.sample.prompt);
  if (prompt.empty()) prompt.push_back(tokenizer.eot_token());
  const int room = config.model.max_seq_len - static_cast<int>(prompt.size());
  if (room < 1) return "(the sample's prompt fills the model's context; shorten sample.prompt)";
  InferenceSession session(params, static_cast<int>(prompt.size()) + std::min(room, config.sample.max_tokens));
  const GenerateOptions options{.max_new_tokens = session.max_tokens() - static_cast<int>(prompt.size()),
                                .sampling = {.temperature = config.sample.temperature,
                                             .top_k = config.sample.top_k,
                                             .top_p = config.sample.top_p,
                                             .seed = config.sample.seed},
                                .stop_token = tokenizer.eot_token()};
  const std::vector<int32_t> generated = generate(session, prompt, options);
  return config.sample.prompt + tokenizer.decode(generated);
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// The whole run's memory per rank against the GPU's, before anything is allocated
// (train/preflight.h): a run that will not fit stops, naming the cheapest changes that would.
void check_gpu_memory(const RunConfig& config, bool lead) {
  if (config.train.target_device() != Device::cuda) return;
  const std::string gpu = device_description(Device::cuda);
  const std::string warning = check_run_fits(config, static_cast<double>(device_free_bytes(Device::cuda)), gpu,
                                             profile_for_gpu(gpu));
  if (!warning.empty() && lead) std::fprintf(stderr, "%s\n", warning.c_str());
}

// The parallel run the configuration lays out (parallel/parallel_run.h).
ParallelOptions parallel_options(const RunConfig& config) {
  return {.model = config.model, .micro_batch_size = config.train.micro_batch_size, .seq_len = config.data.seq_len,
          .recompute = config.train.recompute, .precision = config.train.precision,
          .device = config.train.target_device(), .dims = config.dims(), .zero = config.zero(),
          .bucket_mb = config.parallel.bucket_mb, .adamw = config.adamw,
          .pp_schedule = config.parallel.pp_schedule, .pp_virtual = config.parallel.pp_virtual,
          .micro_batches = config.accumulation_steps(), .cp_zigzag = config.parallel.cp_zigzag,
          .sp = config.parallel.sp, .backend = config.parallel.backend, .linear_states = {}};
}

// Sets the model's first parameters (and the optimizer's, the loader's and the scaler's state on
// a resume): the latest checkpoint, else init.from, else the random initialisation. Returns
// where they came from, for the header; sets summary.first_step.
std::string start_parameters(const RunConfig& config, Communicator& control, ParallelRun& run, DataLoader& loader,
                             LossScaler* scaler, TrainSummary& summary) {
  const std::filesystem::path checkpoints = config.checkpoint_dir();
  const bool resume = config.checkpoint.resume && !checkpoints.empty() && std::filesystem::exists(checkpoints / "latest");
  // Every rank must resume, or none: they read the same checkpoint directory.
  const double resuming = all_reduce_value(control, resume ? 1 : 0, ReduceOp::sum);
  if (resuming != 0 && resuming != control.size())
    throw Error(str("some ranks find a checkpoint in ", checkpoints.string(), " and others do not; put checkpoint.dir ",
                    "(or log.run_dir) on a filesystem every rank shares"));
  // Where ZeRO shards the f32 parameters no rank keeps them whole: every rank starts from a
  // whole host copy (the checkpoint, init.from or the random initialisation) and takes its parts
  // of it. The optimizer takes its parts of a checkpoint's moments the same way.
  DataParallel& data_parallel = run.data_parallel();
  std::optional<FlatTensors> start_copy;
  if (data_parallel.policy().shards_f32_parameters())
    start_copy.emplace(run.model().layout(), MemTag::workspace, Device::cpu);
  FlatTensors& start_params = start_copy ? *start_copy : run.model().params();
  std::string origin;
  if (resume) {
    const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(checkpoints));
    const TrainingProgress progress =
        load_training_checkpoint(checkpoint, start_params, data_parallel.optimizer(), scaler,
                                 &run.model().linear_states());
    summary.first_step = progress.step;
    loader.restore(progress.loader);
    origin = str("resumed from ", checkpoint.directory().string(), " (step ", progress.step, ")");
  } else if (!config.init.from.empty()) {
    load_init_from(config, start_params);
    origin = str("weights from ", config.init.from);
  } else {
    init_parameters(start_params, config.init.seed);
    origin = str("random initialisation, seed ", config.init.seed);
  }
  data_parallel.take_parameters(start_params);
  return origin;
}

// Rank 0 merges every rank's part of the Chrome trace into run_dir/trace.json.
std::filesystem::path merge_trace_parts(const RunConfig& config, int ranks) {
  std::vector<std::filesystem::path> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(config.log.run_dir / str("trace_rank", r, ".jsonl"));
  trace::merge_chrome_trace(config.log.run_dir / "trace.json", parts);
  for (const auto& part : parts) std::filesystem::remove(part);
  return config.log.run_dir / "trace.json";
}

// The run's header, printed once for the job by the lead rank: version, model, batch, layout.
void print_header(const RunConfig& config, const ParallelRun& run, const std::string& origin, int64_t train_tokens) {
  const ModelConfig& mc = config.model;
  const ProcessGroups& groups = run.groups();
  const int tp = groups.dims.tp, pp = groups.dims.pp, cp = groups.dims.cp;
  const int accumulation = config.accumulation_steps();
  const ZeroPolicy zero = config.zero();
  std::printf("dtrain %s\n", dtrain_version().c_str());
  std::printf("model %s: %d layers, d_model %d, %d heads, %lld parameters | %s\n",
              std::string(model_family_name(mc.family)).c_str(), mc.n_layer, mc.d_model, mc.n_head,
              static_cast<long long>(ParameterLayout(mc).num_parameters()), origin.c_str());
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
                                  " chunks), attention in a ring"))
                    .c_str(),
                zero.shards_optimizer_state
                    ? str(" | ZeRO stage ", zero.stage, ": ", zero.sharded(), " sharded over the ", groups.dims.dp,
                          " dp ranks").c_str()
                    : "");
  if (!config.log.run_dir.empty()) std::printf("run directory %s\n", config.log.run_dir.string().c_str());
}

bool due(int64_t step, int64_t every) { return every > 0 && step % every == 0; }

}  // namespace

TrainSummary run_training(const RunConfig& config) {
  check_run_inputs(config);
  const ModelConfig& mc = config.model;
  const int B = config.train.micro_batch_size, T = config.data.seq_len;
  const int64_t total_steps = config.train.steps;

  const TokenDataset train_data(TokenDataset::shards_in(config.data.dir, config.data.train_prefix), mc.vocab_size);
  std::unique_ptr<TokenDataset> val_data;
  if (config.eval.batches > 0 && TokenDataset::has_shards(config.data.dir, config.data.val_prefix))
    val_data = std::make_unique<TokenDataset>(TokenDataset::shards_in(config.data.dir, config.data.val_prefix),
                                              mc.vocab_size);
  std::unique_ptr<Tokenizer> tokenizer;
  if (!config.data.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(config.data.tokenizer));
  const Device device = config.train.target_device();
  // The job's ranks, checked before anything large is allocated: started alike, as many as the
  // parallel layout needs. `control` exchanges host values (the launch check, stop requests);
  // the groups move the model's buffers.
  const std::unique_ptr<Communicator> control = make_world(Device::cpu, "mpi", nullptr, "control");
  check_same_launch(*control, resolved_toml(config));
  set_collective_timeout(config.parallel.timeout_s);
  const int accumulation = config.accumulation_steps();
  check_gpu_memory(config, /*lead=*/control->rank() == 0);
  // The groups, the model and its parallel wrappers (parallel/parallel_run.h).
  ParallelRun run(parallel_options(config), *control);
  const ProcessGroups& groups = run.groups();
  const bool lead = run.lead();
  DataLoader loader(train_data, T, B, config.data.seed, config.data.shuffle, groups.coords.dp, groups.dims.dp);
  Transformer& model = run.model();
  DataParallel& data_parallel = run.data_parallel();
  pipeline::PipelineParallel* pipeline = run.pipeline();
  ContextParallel* context = run.context();
  const int T_local = context ? context->local_len() : T;
  AdamW& optimizer = data_parallel.optimizer();
  std::unique_ptr<LossScaler> scaler;
  if (config.loss_scale.enabled) scaler = std::make_unique<LossScaler>(config.loss_scale.config);

  TrainSummary summary;
  const std::filesystem::path checkpoints = config.checkpoint_dir();
  const std::string origin = start_parameters(config, *control, run, loader, scaler.get(), summary);
  if (summary.first_step >= total_steps)
    throw Error(str("the checkpoint in ", checkpoints.string(), " is at step ", summary.first_step,
                    " and train.steps = ", total_steps, ": nothing to do; raise train.steps to continue training, "
                    "or set checkpoint.resume = false (or another checkpoint.dir) to start over"));

  std::unique_ptr<MetricsLog> metrics;
  if (lead && !config.log.run_dir.empty()) {
    metrics = std::make_unique<MetricsLog>(config.log.run_dir, summary.first_step, config.log.tensorboard);
    write_text_file(config.log.run_dir / "config.toml", resolved_toml(config));
    write_text_file(config.log.run_dir / "version.txt", dtrain_version() + "\n");
  }

  const int64_t tokens_per_step = config.tokens_per_step();
  if (lead) print_header(config, run, origin, train_data.size());

  // MFU is measured against this machine's GEMM peak in the run's precision, taken now.
  // With several ranks, the peak of the job is the sum of theirs.
  const double peak_flops =
      all_reduce_value(*control, measure_gemm_peak_gflop_per_s(config.train.precision, device) * 1e9, ReduceOp::sum);
  reset_peak_memory(device);  // the measurement's buffers are not the run's
  const StepFlops flops = training_flops(mc, T, tokens_per_step, config.train.recompute);
  std::fflush(stdout);

  // What the loader reads (whole sequences), and under context parallelism this rank's tokens of
  // them, which the model runs.
  BatchBuffers step_batches(accumulation, B, T, context ? Device::cpu : device);
  std::optional<BatchBuffers> own_batches;
  if (context) own_batches.emplace(accumulation, B, T_local, device);
  BatchBuffers& model_batches = own_batches ? *own_batches : step_batches;
  BatchBuffers eval_batch(1, B, T_local, device);
  // The ranks the layout needs evaluate (ParallelRun::evaluates), the lead reports; a sample is
  // of the whole model, gathered on the lead.
  const auto validate = [&](int64_t step, ProgressDisplay& progress) {
    if (!val_data || !run.evaluates()) return;
    const Evaluation e = evaluate(model, *val_data, config.eval.batches, eval_batch, pipeline, context);
    if (!lead) return;
    summary.val_loss = e.loss;
    if (metrics) metrics->log_validation(step, e.loss);
    progress.message(str("step ", step, ": validation loss ", fixed(e.loss, 4), " (perplexity ",
                         fixed(std::exp(e.loss), 2), ", ", e.tokens, " tokens)"));
  };
  const auto sample = [&](int64_t step, ProgressDisplay& progress) {
    if (!tokenizer) return;
    const ParallelRun::WholeParameters params = run.gather_whole_parameters();
    if (!params.whole()) return;
    progress.message(str("step ", step, ": sample: ", sample_text(config, *params.whole(), *tokenizer)));
  };
  // Every rank calls the save: what is sharded each rank writes its parts of, what every rank of
  // a dp group holds whole its rank 0 writes, each tp rank its own slices (train/training_checkpoint.h).
  const auto save = [&](int64_t step, ProgressDisplay& progress) {
    if (checkpoints.empty()) return;
    const TrainingProgress at{step, loader.state()};
    const std::filesystem::path saved =
        save_training_checkpoint(checkpoints, config.checkpoint.keep_last, *control, model.layout(),
                                 checkpoint_share(data_parallel, model.params(), &model.linear_states()), optimizer,
                                 scaler.get(), at);
    if (!lead) return;
    summary.last_checkpoint = saved;
    progress.message(str("step ", step, ": saved checkpoint ", saved.string()));
  };

  // Spans of compute and communication: the overlap summary of each step with several ranks, and
  // the Chrome trace with log.trace. Each rank writes its part; rank 0 merges them at the end.
  trace::enable(groups.world->size() > 1 || config.log.trace);
  const std::filesystem::path trace_part =
      config.log.trace ? config.log.run_dir / str("trace_rank", groups.world->rank(), ".jsonl") : "";
  if (!trace_part.empty()) {
    std::filesystem::create_directories(config.log.run_dir);
    std::filesystem::remove(trace_part);
  }
  const StopRequest stop;
  const auto run_start = std::chrono::steady_clock::now();
  ProgressDisplay progress(lead ? config.log.progress : "off", summary.first_step, total_steps, config.log.every);
  int64_t step = summary.first_step;
  int stop_signal = 0;  // SIGINT or SIGTERM, once any rank has received one
  while (step < total_steps && stop_signal == 0) {
    if (fault_injected("step-stalls", step + 1)) std::this_thread::sleep_for(std::chrono::minutes(10));
    if (fault_injected("step-kills-rank", step + 1)) std::raise(SIGKILL);
    for (int m = 0; m < step_batches.count(); ++m) loader.next(step_batches.host(m).tokens, step_batches.host(m).targets);
    const auto start = std::chrono::steady_clock::now();
    for (int m = 0; context && m < step_batches.count(); ++m) {
      context->take_own(step_batches.host(m).tokens, own_batches->host(m).tokens, 0);
      context->take_own(step_batches.host(m).targets, own_batches->host(m).targets, kernels::kIgnoreIndex);
    }
    model_batches.upload();
    const float lr = config.lr.at(step);
    const StepStats stats = train_step(model, data_parallel, model_batches.on_device(), lr, config.train.grad_clip,
                                       scaler.get(), step + 1, pipeline);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++step;
    summary.last_loss = stats.loss;
    const std::vector<trace::Span> spans = trace::take();
    const trace::Overlap overlap = trace::overlap(spans);
    if (!trace_part.empty()) trace::append_chrome_events(trace_part, groups.world->rank(), spans);
    const double mfu = flops.model / seconds / peak_flops, hfu = flops.hardware / seconds / peak_flops;
    const double tokens_per_s = static_cast<double>(tokens_per_step) / seconds;
    if (metrics)
      metrics->log_step({.step = step, .loss = stats.loss, .lr = lr, .grad_norm = stats.grad_norm,
                         .tokens = tokens_per_step, .tokens_per_s = tokens_per_s, .step_ms = seconds * 1e3,
                         .mfu = mfu, .hfu = hfu, .loss_scale = stats.loss_scale, .skipped = !stats.applied,
                         .communication_ms = overlap.communication_ms, .hidden_fraction = overlap.hidden_fraction(),
                         .memory = memory_stats(device)});
    progress.step({.step = step, .loss = stats.loss, .lr = lr, .grad_norm = stats.grad_norm,
                   .tokens_per_s = tokens_per_s, .mfu = mfu, .hfu = hfu, .step_ms = seconds * 1e3,
                   .loss_scale = scaler ? stats.loss_scale : 0, .communication_ms = overlap.communication_ms,
                   .hidden_fraction = overlap.hidden_fraction(), .skipped_by = stats.applied ? "" : stats.nonfinite});
    // Every rank stops after this step if any received a signal, and knows which (to name it).
    stop_signal = static_cast<int>(all_reduce_value(*control, stop.signal_number(), ReduceOp::max));
    if (step == total_steps || stop_signal != 0) break;
    const bool lead_works = due(step, config.eval.every) || due(step, config.sample.every) ||
                            due(step, config.checkpoint.every);
    if (due(step, config.eval.every)) validate(step, progress);
    if (due(step, config.sample.every)) sample(step, progress);
    if (due(step, config.checkpoint.every)) save(step, progress);
    // The other ranks wait out rank 0's evaluation, sample and checkpoint write here, untimed,
    // rather than in the next step's first collective, where the watchdog would count it.
    if (lead_works && control->size() > 1) control->barrier(/*timed=*/false).wait();
  }
  summary.last_step = step;
  summary.stopped_by_signal = stop_signal != 0;
  if (summary.stopped_by_signal) {
    progress.message(str("received ", stop_signal == SIGINT ? "SIGINT" : "SIGTERM", " during step ", step,
                         ": saving a checkpoint and stopping; run the same command to resume"));
  } else {
    validate(step, progress);
    sample(step, progress);
  }
  save(step, progress);
  if (!trace_part.empty()) {
    control->barrier().wait();  // every rank's part is written (a host barrier: NCCL's does not block)
    if (lead)
      progress.message(str("trace of every rank's compute and communication: ",
                           merge_trace_parts(config, groups.world->size()).string()));
  }
  progress.message(str("trained steps ", summary.first_step + 1, "-", step, " (", (step - summary.first_step) * tokens_per_step,
                       " tokens) in ", format_duration(std::chrono::duration<double>(
                                           std::chrono::steady_clock::now() - run_start).count())));
  if (scaler)
    progress.message(str("loss scaling: ", scaler->skipped_steps(), " steps skipped, final scale ", scaler->scale()));
  progress.message(str("memory", device == Device::cpu ? "" : " (GPU)", ": ", format_memory_stats(memory_stats(device))));
  return summary;
}

}  // namespace dt
