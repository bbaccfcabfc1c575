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
#include "train/batch_buffers.h"
#include "train/checkpoint_saver.h"
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

}  // namespace

ParallelOptions parallel_options(const RunConfig& config) {
  return {.model = config.model, .micro_batch_size = config.train.micro_batch_size, .seq_len = config.data.seq_len,
          .recompute = config.train.recompute, .precision = config.train.precision,
          .device = config.train.target_device(), .dims = config.dims(), .zero = config.zero(),
          .bucket_mb = config.parallel.bucket_mb, .adamw = config.adamw,
          .pp_schedule = config.parallel.pp_schedule, .pp_virtual = config.parallel.pp_virtual,
          .micro_batches = config.accumulation_steps(), .cp_zigzag = config.parallel.cp_zigzag,
          .sp = config.parallel.sp, .backend = config.parallel.backend, .linear_states = {}, .fp8 = config.fp8,
          .qat = config.train.qat_recipe()};
}

namespace {

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

// A resumed run with no steps left stops, saying how to go on or start over.
void check_steps_left(const RunConfig& config, int64_t first_step) {
  if (first_step >= config.train.steps)
    throw Error(str("the checkpoint in ", config.checkpoint_dir().string(), " is at step ", first_step,
                    " and train.steps = ", config.train.steps, ": nothing to do; raise train.steps to continue "
                    "training, or set checkpoint.resume = false (or another checkpoint.dir) to start over"));
}

// The run's data: the training split, the validation split (when evaluated and present) and the
// tokenizer samples are decoded with (when named).
struct RunData {
  explicit RunData(const RunConfig& config)
      : train(TokenDataset::shards_in(config.data.dir, config.data.train_prefix), config.model.vocab_size) {
    if (config.eval.batches > 0 && TokenDataset::has_shards(config.data.dir, config.data.val_prefix))
      val = std::make_unique<TokenDataset>(TokenDataset::shards_in(config.data.dir, config.data.val_prefix),
                                           config.model.vocab_size);
    if (!config.data.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(config.data.tokenizer));
  }
  const TokenDataset train;
  std::unique_ptr<const TokenDataset> val;
  std::unique_ptr<const Tokenizer> tokenizer;
};

// A step's micro-batches: what the loader reads (whole sequences), and under context parallelism
// this rank's tokens of them, which the model runs.
class StepBatches {
 public:
  StepBatches(const RunConfig& config, ContextParallel* context)
      : context_(context),
        read_(config.accumulation_steps(), config.train.micro_batch_size, config.data.seq_len,
              context ? Device::cpu : config.train.target_device()) {
    if (context)
      own_.emplace(config.accumulation_steps(), config.train.micro_batch_size, context->local_len(),
                   config.train.target_device());
  }

  // This rank's share of the next global batch.
  void read(DataLoader& loader) {
    for (int m = 0; m < read_.count(); ++m) loader.next(read_.host(m).tokens, read_.host(m).targets);
  }

  // The micro-batches the model runs, on its device.
  const std::vector<MicroBatch>& for_model() {
    for (int m = 0; context_ && m < read_.count(); ++m) {
      context_->take_own(read_.host(m).tokens, own_->host(m).tokens, 0);
      context_->take_own(read_.host(m).targets, own_->host(m).targets, kernels::kIgnoreIndex);
    }
    BatchBuffers& model_batches = own_ ? *own_ : read_;
    model_batches.upload();
    return model_batches.on_device();
  }

 private:
  ContextParallel* const context_;
  BatchBuffers read_;
  std::optional<BatchBuffers> own_;
};

bool due(int64_t step, int64_t every) { return every > 0 && step % every == 0; }

// What the run does between steps every eval.every, sample.every and checkpoint.every steps,
// and once more at its end: validate, sample, save a checkpoint. Every rank calls each alike.
class Milestones {
 public:
  Milestones(const RunConfig& config, ParallelRun& run, Communicator& control, const DataLoader& loader,
             const LossScaler* scaler, const RunData& data, RunReport& report, TrainSummary& summary)
      : config_(config), run_(run), control_(control), loader_(loader), scaler_(scaler), data_(data),
        report_(report), summary_(summary),
        eval_batch_(1, config.train.micro_batch_size,
                    run.context() ? run.context()->local_len() : config.data.seq_len, config.train.target_device()) {
    // Every rank saves: what is sharded each rank writes its parts of, what every rank of a dp
    // group holds whole its rank 0 writes, each tp rank its own slices
    // (train/training_checkpoint.h).
    if (config.checkpoint_dir().empty()) return;
    saver_.emplace(config.checkpoint_dir(), config.checkpoint.keep_last, config.checkpoint.async, control,
                   run.model().layout(),
                   checkpoint_share(run.data_parallel(), run.model().params(), &run.model().linear_states()),
                   [this](const CheckpointSaver::Saved& saved) {
                     summary_.last_checkpoint = saved.directory;
                     report_.checkpoint(saved.step, saved.directory, saved.stall_s, saved.save_s);
                   });
  }

  // After `step`, unless it was the last.
  void after_step(int64_t step) {
    const bool lead_works = due(step, config_.eval.every) || due(step, config_.sample.every) ||
                            due(step, config_.checkpoint.every);
    if (due(step, config_.eval.every)) validate(step);
    if (due(step, config_.sample.every)) sample(step);
    if (due(step, config_.checkpoint.every)) save(step);
    // The other ranks wait out rank 0's evaluation, sample and checkpoint write here, untimed,
    // rather than in the next step's first collective, where the watchdog would count it.
    if (lead_works && control_.size() > 1) control_.barrier(/*timed=*/false).wait();
  }

  // The ranks the layout needs evaluate (ParallelRun::evaluates), the lead reports.
  void validate(int64_t step) {
    if (!data_.val || !run_.evaluates()) return;
    const Evaluation e =
        evaluate(run_.model(), *data_.val, config_.eval.batches, eval_batch_, run_.pipeline(), run_.context());
    if (!run_.lead()) return;
    summary_.val_loss = e.loss;
    report_.validation(step, e);
  }

  // A sample is of the whole model, gathered on the lead.
  void sample(int64_t step) {
    if (!data_.tokenizer) return;
    const ParallelRun::WholeParameters params = run_.gather_whole_parameters();
    if (!params.whole()) return;
    report_.sample(step, sample_text(config_, *params.whole(), *data_.tokenizer));
  }

  // Every rank calls each: a save of the state after `step` (asynchronous: in place some steps
  // later), a poll after every step (completing an asynchronous save), and the run's last save,
  // in place when it returns.
  void save(int64_t step) {
    if (saver_) saver_->save(run_.data_parallel().optimizer(), scaler_, {step, loader_.state()});
  }
  void poll_save() {
    if (saver_) saver_->poll();
  }
  void save_last(int64_t step) {
    save(step);
    if (saver_) saver_->wait();
  }

 private:
  const RunConfig& config_;
  ParallelRun& run_;
  Communicator& control_;
  const DataLoader& loader_;
  const LossScaler* const scaler_;
  const RunData& data_;
  RunReport& report_;
  TrainSummary& summary_;
  BatchBuffers eval_batch_;
  std::optional<CheckpointSaver> saver_;  // none without a checkpoint directory
};

// Faults the tests inject before `step` (core/fault_injection.h): a rank that stalls, one that
// dies, one that waits for a stop signal (so that a signal sent from outside surely arrives
// mid-run, however fast the steps).
void inject_step_faults(int64_t step, const StopRequest& stop) {
  if (fault_injected("step-stalls", step)) std::this_thread::sleep_for(std::chrono::minutes(10));
  if (fault_injected("step-kills-rank", step)) std::raise(SIGKILL);
  if (fault_injected("step-waits-for-signal", step))
    while (stop.signal_number() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

TrainSummary run_training(const RunConfig& config) {
  check_run_inputs(config);
  const RunData data(config);
  // The job's ranks, checked before anything large is allocated: started alike, as many as the
  // parallel layout needs. `control` exchanges host values (the launch check, stop requests);
  // the groups move the model's buffers.
  const std::unique_ptr<Communicator> control = make_world(Device::cpu, "mpi", nullptr, "control");
  check_same_launch(*control, resolved_toml(config));
  set_collective_timeout(config.parallel.timeout_s);
  check_gpu_memory(config, /*lead=*/control->rank() == 0);
  // The groups, the model and its parallel wrappers (parallel/parallel_run.h).
  ParallelRun run(parallel_options(config), *control);
  const ProcessGroups& groups = run.groups();
  DataLoader loader(data.train, config.data.seq_len, config.train.micro_batch_size, config.data.seed,
                    config.data.shuffle, groups.coords.dp, groups.dims.dp);
  std::unique_ptr<LossScaler> scaler;
  if (config.loss_scale.enabled) scaler = std::make_unique<LossScaler>(config.loss_scale.config);

  TrainSummary summary;
  const std::string origin = start_parameters(config, *control, run, loader, scaler.get(), summary);
  check_steps_left(config, summary.first_step);
  // The run directory, the header and the GEMM peak MFU is against (train/run_report.h).
  RunReport report(config, run, *control, origin, data.train.size(), summary.first_step);
  StepBatches batches(config, run.context());
  Milestones milestones(config, run, *control, loader, scaler.get(), data, report, summary);
  const StopRequest stop;
  report.start();

  int64_t step = summary.first_step;
  int stop_signal = 0;  // SIGINT or SIGTERM, once any rank has received one
  while (step < config.train.steps && stop_signal == 0) {
    inject_step_faults(step + 1, stop);
    batches.read(loader);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<MicroBatch>& micro_batches = batches.for_model();
    const float lr = config.lr.at(step);
    const StepStats stats = train_step(run.model(), run.data_parallel(), micro_batches, lr, config.train.grad_clip,
                                       scaler.get(), step + 1, run.pipeline());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++step;
    summary.last_loss = stats.loss;
    report.step(step, lr, stats, seconds);
    // Every rank stops after this step if any received a signal, and knows which (to name it).
    stop_signal = static_cast<int>(all_reduce_value(*control, stop.signal_number(), ReduceOp::max));
    milestones.poll_save();
    if (step == config.train.steps || stop_signal != 0) break;
    milestones.after_step(step);
  }

  summary.last_step = step;
  summary.stopped_by_signal = stop_signal != 0;
  if (summary.stopped_by_signal) {
    report.stopping(step, stop_signal);
  } else {
    milestones.validate(step);
    milestones.sample(step);
  }
  milestones.save_last(step);
  report.finish(step, scaler.get());
  return summary;
}

}  // namespace dt
