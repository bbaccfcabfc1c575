#include "bench/expert_parallel_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/device.h"

namespace dt::cli {

int command_bench_ep(int argc, char** argv, int first) {
  Args args("bench ep",
            "train a mixture of experts under mpirun with its experts spread over the ranks (dp = ep = the ranks) "
            "and measure each step's time and all-to-all time, the bytes sent against the routing's count, and the "
            "load imbalance over experts and over ranks");
  declare_model_flags(args, "moe-tiny");
  args.flag("batch", "2", "sequences per micro-batch on each rank")
      .flag("seq", "64", "tokens per sequence")
      .flag("steps", "5", "timed training steps, after one untimed")
      .flag("device", "cpu", "cpu (f32) or cuda (bf16; ranks may share one GPU)");
  if (!args.parse(argc, argv, first)) return 0;
  run_expert_bench({.model = model_from_flags(args),
                    .batch_size = static_cast<int>(args.get_int("batch")),
                    .seq_len = static_cast<int>(args.get_int("seq")),
                    .steps = static_cast<int>(args.get_int("steps")),
                    .device = device_from_name(args.get("device"))});
  return 0;
}

}  // namespace dt::cli
