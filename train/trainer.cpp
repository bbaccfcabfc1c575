#include "train/trainer.h"

#include <chrono>
#include <csignal>
#include <cstdio>
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
#include "train/preflight.h"
#include "train/run_report.h"
#include "train/step.h"
#include "train/stop_request.h"
#include "train/training_checkpoint.h"

namespace dt {

namespace {

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
          .sp = config.parallel.sp, .backend = config.parallel.backend};
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
        load_training_checkpoint(checkpoint, start_params, data_parallel.optimizer(), scaler);
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

  // The run directory, the header and the GEMM peak MFU is against (train/run_report.h).
  RunReport report(config, run, *control, origin, train_data.size(), summary.first_step);

  // What the loader reads (whole sequences), and under context parallelism this rank's tokens of
  // them, which the model runs.
  BatchBuffers step_batches(accumulation, B, T, context ? Device::cpu : device);
  std::optional<BatchBuffers> own_batches;
  if (context) own_batches.emplace(accumulation, B, T_local, device);
  BatchBuffers& model_batches = own_batches ? *own_batches : step_batches;
  BatchBuffers eval_batch(1, B, T_local, device);
  // The ranks the layout needs evaluate (ParallelRun::evaluates), the lead reports; a sample is
  // of the whole model, gathered on the lead.
  const auto validate = [&](int64_t step) {
    if (!val_data || !run.evaluates()) return;
    const Evaluation e = evaluate(model, *val_data, config.eval.batches, eval_batch, pipeline, context);
    if (!lead) return;
    summary.val_loss = e.loss;
    report.validation(step, e);
  };
  const auto sample = [&](int64_t step) {
    if (!tokenizer) return;
    const ParallelRun::WholeParameters params = run.gather_whole_parameters();
    if (!params.whole()) return;
    report.sample(step, sample_text(config, *params.whole(), *tokenizer));
  };
  // Every rank calls the save: what is sharded each rank writes its parts of, what every rank of
  // a dp group holds whole its rank 0 writes, each tp rank its own slices (train/training_checkpoint.h).
  const auto save = [&](int64_t step) {
    if (checkpoints.empty()) return;
    const TrainingProgress at{step, loader.state()};
    const std::filesystem::path saved =
        save_training_checkpoint(checkpoints, config.checkpoint.keep_last, *control, model.layout(),
                                 checkpoint_share(data_parallel, model.params()), optimizer, scaler.get(), at);
    if (!lead) return;
    summary.last_checkpoint = saved;
    report.checkpoint(step, saved);
  };

  const StopRequest stop;
  report.start();
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
    report.step(step, lr, stats, seconds);
    // Every rank stops after this step if any received a signal, and knows which (to name it).
    stop_signal = static_cast<int>(all_reduce_value(*control, stop.signal_number(), ReduceOp::max));
    if (step == total_steps || stop_signal != 0) break;
    const bool lead_works = due(step, config.eval.every) || due(step, config.sample.every) ||
                            due(step, config.checkpoint.every);
    if (due(step, config.eval.every)) validate(step);
    if (due(step, config.sample.every)) sample(step);
    if (due(step, config.checkpoint.every)) save(step);
    // The other ranks wait out rank 0's evaluation, sample and checkpoint write here, untimed,
    // rather than in the next step's first collective, where the watchdog would count it.
    if (lead_works && control->size() > 1) control->barrier(/*timed=*/false).wait();
  }
  summary.last_step = step;
  summary.stopped_by_signal = stop_signal != 0;
  if (summary.stopped_by_signal) {
    report.stopping(step, stop_signal);
  } else {
    validate(step);
    sample(step);
  }
  save(step);
  report.finish(step, scaler.get());
  return summary;
}

}  // namespace dt
