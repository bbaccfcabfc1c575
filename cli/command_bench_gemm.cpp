#include "bench/gemm_bench.h"
#include "cli/commands.h"
#include "cli/model_flags.h"

namespace dt::cli {

int command_bench_gemm(int argc, char** argv, int first) {
  Args args("bench gemm",
            "time a training step's matrix products: OpenBLAS fp32 against oneDNN fp32 and bf16 (fp32 accumulation)");
  declare_model_flags(args, "gpt2-124m");
  args.flag("batch", "8", "sequences per step")
      .flag("seq", "256", "tokens per sequence")
      .flag("reps", "5", "timed repetitions per product (the median is reported)")
      .flag("threads", "0", "OpenMP threads (0: OMP_NUM_THREADS or all cores)");
  if (!args.parse(argc, argv, first)) return 0;
  run_gemm_bench({.model = model_from_flags(args),
                  .batch_size = static_cast<int>(args.get_int("batch")),
                  .seq_len = static_cast<int>(args.get_int("seq")),
                  .reps = static_cast<int>(args.get_int("reps")),
                  .threads = static_cast<int>(args.get_int("threads"))});
  return 0;
}

}  // namespace dt::cli
