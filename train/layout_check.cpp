#include "train/layout_check.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "comm/single_process.h"
#include "core/error.h"
#include "optim/loss_scaler.h"
#include "parallel/parallel_run.h"
#include "parallel/pipeline/schedule.h"
#include "train/global_batch.h"
#include "train/step.h"
#include "train/trainer.h"

namespace dt {

namespace {

constexpr int kHeadSize = 8;
// An odd vocabulary, as the layout matrix's: tensor parallelism splits its rows unevenly.
constexpr int kVocab = 997;

// `width` of the configured model scaled as its d_model is, in multiples of 8.
int scaled_width(int width, double scale) {
  if (width == 0) return 0;
  return std::max(8, static_cast<int>(std::lround(width * scale / 8)) * 8);
}

ModelConfig small_model(const RunConfig& config, int seq_len) {
  const ModelConfig& configured = config.model;
  ModelConfig m = configured;
  m.d_model = configured.n_head * kHeadSize;
  const double scale = static_cast<double>(m.d_model) / configured.d_model;
  m.ffn_hidden_size = scaled_width(configured.ffn_hidden(), scale);
  m.moe.expert_hidden = scaled_width(configured.moe.expert_hidden, scale);
  m.moe.shared_hidden = scaled_width(configured.moe.shared_hidden, scale);
  m.vocab_size = kVocab;
  m.max_seq_len = seq_len;
  // Two blocks; under a pipeline one more than its stages, so that they are uneven; past the
  // dense ones where the model has experts.
  const auto& p = config.parallel;
  m.n_layer = p.pp == 1 ? 2
                        : pipeline::make_schedule(p.pp_schedule, p.pp, config.accumulation_steps(), p.pp_virtual)
                                  .stages() + 1;
  if (m.moe.experts > 0) m.n_layer = std::max(m.n_layer, m.moe.first_dense_layers + 1);
  return m;
}

// This rank's parameters from the random initialisation of `seed`: every rank builds them whole
// where ZeRO shards them and takes its parts (as the trainer does).
void initialize(ParallelRun& run, uint64_t seed) {
  DataParallel& data_parallel = run.data_parallel();
  std::optional<FlatTensors> start;
  if (data_parallel.policy().shards_f32_parameters()) start.emplace(run.model().layout(), MemTag::workspace);
  FlatTensors& params = start ? *start : run.model().params();
  init_parameters(params, seed);
  data_parallel.take_parameters(params);
}

}  // namespace

RunConfig layout_check_config(const RunConfig& config, CheckedModel model, uint64_t seed) {
  RunConfig c = config;
  c.init.seed = seed;
  if (model == CheckedModel::configured) return c;
  const int accumulation = config.accumulation_steps();
  c.data.seq_len = config.parallel.cp == 1 ? 16 : 24 * config.parallel.cp;
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 2 * config.parallel.dp * accumulation;
  c.model = small_model(config, c.data.seq_len);
  c.model_preset.clear();
  c.parallel.bucket_mb = 0.05;
  c.fp8.block = 4;
  const std::string problems = run_config_problems(c);
  if (!problems.empty())
    throw ConfigError(str("the check's small model (", c.model.n_layer, " layers, d_model ", c.model.d_model, ", ",
                          c.model.n_head, " heads) does not suit the layout:", problems,
                          "\ncheck the configured model itself with --model configured"));
  return c;
}

std::optional<Divergence> LayoutCheck::first_divergence() const {
  for (size_t s = 0; s < steps.size(); ++s) {
    const StepComparison& c = steps[s];
    Divergence divergence{.step = static_cast<int>(s) + 1, .apart = {}};
    const auto bound = [&](Apart::Value value, std::string what, double difference, double limit) {
      if (!(difference < limit)) divergence.apart.push_back({value, std::move(what), difference, limit});
    };
    bound(Apart::Value::loss, "the loss", relative_difference(c.loss, c.reference_loss),
          s == 0 ? bounds.first_loss : bounds.losses);
    bound(Apart::Value::grad_norm, "the gradient norm", relative_difference(c.grad_norm, c.reference_grad_norm),
          s == 0 ? bounds.first_norm : bounds.norms);
    for (const TensorDifference& d : c.parameters)
      bound(Apart::Value::parameter, d.name, d.difference, bounds.parameters);
    if (!divergence.apart.empty()) return divergence;
  }
  return std::nullopt;
}

LayoutCheck check_layout(const RunConfig& check_config, Communicator& control) {
  // The bounds' regime: AdamW's defaults, a constant learning rate, clipping at 1.
  ParallelOptions layout = parallel_options(check_config);
  layout.adamw = {};
  const int B = layout.micro_batch_size, T = layout.seq_len, accumulation = layout.micro_batches;
  const int dp = layout.dims.dp, global_micro_batches = dp * accumulation;
  LayoutCheck check;
  check.bounds = equivalence_bounds(layout.precision, layout.fp8.scaling, layout.dims.cp);
  const auto make_scaler = [&]() -> std::unique_ptr<LossScaler> {
    if (!check_config.loss_scale.enabled) return nullptr;
    return std::make_unique<LossScaler>(check_config.loss_scale.config);
  };

  ParallelRun run(layout, control);
  initialize(run, check_config.init.seed);
  const std::unique_ptr<LossScaler> scaler = make_scaler();
  BatchBuffers own(accumulation, B, run.context() ? run.context()->local_len() : T, layout.device);

  // One rank's reference, on the lead only: the whole global batch each step, every micro-batch
  // of it accumulated, nothing split.
  std::optional<ParallelRun> one;
  std::unique_ptr<LossScaler> one_scaler;
  std::optional<BatchBuffers> all;
  if (run.lead()) {
    ParallelOptions alone = layout;
    alone.dims = {};
    alone.zero = ZeroPolicy::of(0, layout.precision, 1);
    alone.micro_batches = global_micro_batches;
    alone.sp = false;
    one.emplace(alone, std::make_unique<SingleProcessCommunicator>(layout.device));
    initialize(*one, check_config.init.seed);
    one_scaler = make_scaler();
    all.emplace(global_micro_batches, B, T, layout.device);
  }

  for (int step = 0; step < kEquivalenceSteps; ++step) {
    const GlobalBatch batch(global_micro_batches * B, T, layout.model.vocab_size, step);
    StepComparison compared;
    if (one) {
      take_rank_micro_batches(batch, 1, 0, nullptr, *all);
      const StepStats a = train_step(one->model(), one->data_parallel(), all->on_device(), kEquivalenceLr, 1.0f,
                                     one_scaler.get(), step + 1);
      compared.reference_loss = a.loss, compared.reference_grad_norm = a.grad_norm;
    }
    take_rank_micro_batches(batch, dp, run.groups().coords.dp, run.context(), own);
    const StepStats b = train_step(run.model(), run.data_parallel(), own.on_device(), kEquivalenceLr, 1.0f,
                                   scaler.get(), step + 1, run.pipeline());
    compared.loss = b.loss, compared.grad_norm = b.grad_norm;
    const ParallelRun::WholeParameters whole = run.gather_whole_parameters();
    if (!one) continue;
    const ParallelRun::WholeParameters reference = one->gather_whole_parameters();
    compared.parameters = parameter_differences(*reference.whole(), *whole.whole());
    check.steps.push_back(std::move(compared));
  }
  return check;
}

}  // namespace dt
