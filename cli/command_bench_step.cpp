#include "bench/step_bench.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/device.h"

namespace dt::cli {

int command_bench_step(int argc, char** argv, int first) {
  Args args("bench step", "time training steps (forward, backward, clip, AdamW) of a model shape on the CPU or a GPU");
  declare_model_flags(args, "gpt2-124m");
  args.flag("batch", "8", "sequences per step")
      .flag("seq", "256", "tokens per sequence")
      .flag("steps", "10", "timed steps (the median is reported)")
      .flag("warmup", "2", "untimed steps before timing")
      .flag("threads", "0", "OpenMP threads (0: OMP_NUM_THREADS or all cores)")
      .flag("device", "cpu", "cpu or cuda")
      .flag("fp8", "none", "FP8 recipe of the blocks' linear layers (with --precision bf16): none, tensorwise, delayed or blockwise");
  declare_run_flags(args);
  if (!args.parse(argc, argv, first)) return 0;
  run_step_bench({.model = model_from_flags(args),
                  .batch_size = static_cast<int>(args.get_int("batch")),
                  .seq_len = static_cast<int>(args.get_int("seq")),
                  .steps = static_cast<int>(args.get_int("steps")),
                  .warmup = static_cast<int>(args.get_int("warmup")),
                  .threads = static_cast<int>(args.get_int("threads")),
                  .recompute = recompute_from_flags(args),
                  .precision = precision_from_flags(args),
                  .fp8 = float8_scaling_from_name(args.get("fp8")),
                  .device = device_from_name(args.get("device"))});
  return 0;
}

}  // namespace dt::cli
