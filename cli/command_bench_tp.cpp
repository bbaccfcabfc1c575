#include "bench/tensor_parallel_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"

namespace dt::cli {

int command_bench_tp(int argc, char** argv, int first) {
  Args args("bench tp",
            "one rank's communication and activation memory under tensor parallelism, with and without sequence "
            "parallelism, measured beside their expected counts (run it under mpirun: the ranks are the tp group)");
  declare_model_flags(args, "gpt2-124m");
  args.flag("batch", "4", "sequences per micro-batch").flag("seq", "256", "tokens per sequence");
  declare_run_flags(args);
  if (!args.parse(argc, argv, first)) return 0;
  run_tensor_parallel_bench({.model = model_from_flags(args),
                             .batch_size = static_cast<int>(args.get_int("batch")),
                             .seq_len = static_cast<int>(args.get_int("seq")),
                             .precision = precision_from_flags(args),
                             .recompute = recompute_from_flags(args)});
  return 0;
}

}  // namespace dt::cli
