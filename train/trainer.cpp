#include "train/trainer.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "core/allocator.h"
#include "data/byte_text.h"
#include "model/transformer.h"
#include "train/metrics.h"
#include "train/step.h"
#include "train/throughput.h"

namespace dt {

double run_training(const TrainOptions& o) {
  o.lr.validate();
  o.adamw.validate();
  if (o.loss_scaler) o.loss_scaler->validate();
  if (o.micro_batches < 1) throw Error(str("micro-batches = ", o.micro_batches, " must be at least 1"));
  if (o.model.vocab_size != kByteVocabSize)
    throw Error(str("model.vocab_size = ", o.model.vocab_size, " but byte-level text has ", kByteVocabSize,
                    " tokens; set --vocab-size ", kByteVocabSize));
  const ByteText text(o.text_path, o.seq_len);
  Transformer model(o.model, o.batch_size, o.seq_len, o.recompute, o.precision);
  init_parameters(model.params(), o.seed);
  AdamW optimizer(model.layout(), o.adamw);

  std::vector<Buffer> inputs;
  std::vector<MicroBatch> micro_batches;
  for (int m = 0; m < o.micro_batches; ++m) {
    const size_t bytes = static_cast<size_t>(o.batch_size) * o.seq_len * sizeof(int32_t);
    inputs.emplace_back(bytes, MemTag::workspace);
    inputs.emplace_back(bytes, MemTag::workspace);
    micro_batches.push_back({inputs[2 * m].view(DType::i32, {o.batch_size, o.seq_len}),
                             inputs[2 * m + 1].view(DType::i32, {o.batch_size, o.seq_len})});
  }
  std::printf("model %s: %d layers, d_model %d, %d heads, %lld parameters | %d x %d tokens x %d micro-batches | %s (%lld bytes)\n",
              std::string(model_family_name(o.model.family)).c_str(), o.model.n_layer, o.model.d_model,
              o.model.n_head, static_cast<long long>(model.layout().num_parameters()), o.batch_size, o.seq_len,
              o.micro_batches, o.text_path.c_str(), static_cast<long long>(text.size()));

  std::optional<LossScaler> scaler;
  if (o.loss_scaler) scaler.emplace(*o.loss_scaler);
  std::optional<MetricsLog> metrics;
  if (!o.run_dir.empty()) metrics.emplace(o.run_dir);
  // MFU is measured against this machine's GEMM peak in the run's precision, taken now.
  const double peak_flops = measure_gemm_peak_gflop_per_s(o.precision) * 1e9;
  reset_peak_memory(Device::cpu);  // the measurement's buffers are not the run's
  const double flops_per_step =
      step_flops(o.model, model.layout().num_parameters(), o.batch_size, o.seq_len) * o.micro_batches;
  double loss = 0;
  int64_t sample = 0;
  const int64_t tokens_per_step = static_cast<int64_t>(o.batch_size) * o.seq_len * o.micro_batches;
  for (int64_t step = 0; step < o.lr.total_steps; ++step) {
    for (const MicroBatch& mb : micro_batches) {
      text.fill(mb.tokens, mb.targets, sample);
      sample += o.batch_size;
    }
    const auto start = std::chrono::steady_clock::now();
    const float lr = o.lr.at(step);
    const StepStats stats =
        train_step(model, optimizer, micro_batches, lr, o.max_grad_norm, scaler ? &*scaler : nullptr, step + 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    loss = stats.loss;
    const double mfu = flops_per_step / seconds / peak_flops;
    if (metrics)
      metrics->log_step({.step = step + 1,
                         .loss = stats.loss,
                         .lr = lr,
                         .grad_norm = stats.grad_norm,
                         .tokens = tokens_per_step,
                         .tokens_per_s = static_cast<double>(tokens_per_step) / seconds,
                         .step_ms = seconds * 1e3,
                         .mfu = mfu,
                         .loss_scale = stats.loss_scale,
                         .skipped = !stats.applied,
                         .memory = memory_stats(Device::cpu)});
    const std::string scale = scaler ? str(" | loss scale ", stats.loss_scale) : "";
    if (!stats.applied) {
      std::printf("step %5lld/%lld | loss %.4f | skipped: the gradient of %s is not finite%s\n",
                  static_cast<long long>(step + 1), static_cast<long long>(o.lr.total_steps), stats.loss,
                  stats.nonfinite.c_str(), scale.c_str());
      std::fflush(stdout);
      continue;
    }
    std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.3f%s | %.1f ms | %.0f tok/s | MFU %.1f%%\n",
                static_cast<long long>(step + 1), static_cast<long long>(o.lr.total_steps), stats.loss, lr,
                stats.grad_norm, scale.c_str(), seconds * 1e3, static_cast<double>(tokens_per_step) / seconds,
                100 * mfu);
    std::fflush(stdout);
  }
  if (scaler) std::printf("loss scaling: %lld steps skipped, final scale %g\n", static_cast<long long>(scaler->skipped_steps()),
                          scaler->scale());
  std::printf("memory: %s\n", format_memory_stats(memory_stats(Device::cpu)).c_str());
  return loss;
}

}  // namespace dt
