#include "cli/commands.h"
#include "cli/model_flags.h"
#include "data/byte_text.h"
#include "train/trainer.h"

namespace dt::cli {

int command_train(int argc, char** argv, int first) {
  Args args("train", "train a GPT-2 on the bytes of a text file (CPU, one process)");
  declare_model_flags(args, "gpt2-mini");
  args.flag("text", "/usr/share/common-licenses/GPL-3", "text file to train on; its bytes are the tokens")
      .flag("batch", "8", "sequences per micro-batch")
      .flag("seq", "128", "tokens per sequence")
      .flag("micro-batches", "1", "micro-batches accumulated per optimizer step")
      .flag("steps", "50", "optimizer steps")
      .flag("lr", "1e-3", "peak learning rate")
      .flag("min-lr-ratio", "0.1", "final learning rate as a fraction of the peak")
      .flag("warmup", "10", "linear warm-up steps")
      .flag("decay", "cosine", "learning-rate decay after warm-up: cosine, linear or wsd")
      .flag("decay-steps", "0", "wsd only: steps of the final linear decay")
      .flag("weight-decay", "0.1", "AdamW decoupled weight decay on matrices (never on biases or norms)")
      .flag("decay-embeddings", "false", "true: weight decay also on wte and wpe")
      .flag("beta1", "0.9", "AdamW first-moment decay")
      .flag("beta2", "0.95", "AdamW second-moment decay")
      .flag("eps", "1e-8", "AdamW epsilon")
      .flag("grad-clip", "1.0", "global gradient-norm clip (0 disables)")
      .flag("seed", "1337", "seed of the parameter initialisation")
      .flag("run-dir", "", "directory for metrics.jsonl and TensorBoard event files (none when empty)")
      .flag("loss-scale", "0", "initial dynamic loss scale, for fp16 training (0: no loss scaling)")
      .flag("loss-scale-growth-interval", "2000", "finite steps in a row after which the loss scale doubles")
      .flag("loss-scale-min", "1", "a loss scale below this stops the run as diverged");
  declare_run_flags(args);
  if (!args.parse(argc, argv, first)) return 0;
  TrainOptions o;
  o.model = model_from_flags(args);
  if (!args.was_given("vocab-size")) o.model.vocab_size = kByteVocabSize;
  o.text_path = args.get("text");
  o.batch_size = static_cast<int>(args.get_int("batch"));
  o.seq_len = static_cast<int>(args.get_int("seq"));
  o.micro_batches = static_cast<int>(args.get_int("micro-batches"));
  o.lr = {.peak_lr = static_cast<float>(args.get_double("lr")),
          .min_lr_ratio = static_cast<float>(args.get_double("min-lr-ratio")),
          .warmup_steps = args.get_int("warmup"),
          .total_steps = args.get_int("steps"),
          .decay = lr_decay_from_name(args.get("decay")),
          .decay_steps = args.get_int("decay-steps")};
  o.adamw = {.beta1 = static_cast<float>(args.get_double("beta1")),
             .beta2 = static_cast<float>(args.get_double("beta2")),
             .eps = static_cast<float>(args.get_double("eps")),
             .weight_decay = static_cast<float>(args.get_double("weight-decay")),
             .decay_embeddings = args.get_bool("decay-embeddings")};
  o.max_grad_norm = static_cast<float>(args.get_double("grad-clip"));
  o.seed = static_cast<uint64_t>(args.get_int("seed"));
  o.recompute = recompute_from_flags(args);
  o.precision = precision_from_flags(args);
  o.run_dir = args.get("run-dir");
  if (const double scale = args.get_double("loss-scale"); scale != 0)
    o.loss_scaler = LossScalerConfig{.initial_scale = static_cast<float>(scale),
                                     .growth_interval = args.get_int("loss-scale-growth-interval"),
                                     .min_scale = static_cast<float>(args.get_double("loss-scale-min"))};
  run_training(o);
  return 0;
}

}  // namespace dt::cli
