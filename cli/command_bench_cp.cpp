#include "bench/context_parallel_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/device.h"

namespace dt::cli {

int command_bench_cp(int argc, char** argv, int first) {
  Args args("bench cp",
            "run ring attention under mpirun (the ranks are the context-parallel group) with plain and zig-zag chunks "
            "and measure each rank's attention time, the bytes sent against the ring's count, the communication "
            "hidden behind compute, and the activations per rank by cp");
  declare_model_flags(args, "llama-tiny");
  args.flag("batch", "1", "sequences per micro-batch")
      .flag("seq", "1024", "tokens per sequence (cut to a multiple of 2 x the ranks)")
      .flag("repeats", "3", "timed forward and backward passes (the median is reported)")
      .flag("device", "cpu", "cpu (f32) or cuda (bf16; ranks may share one GPU)");
  if (!args.parse(argc, argv, first)) return 0;
  run_context_bench({.model = model_from_flags(args),
                     .batch_size = static_cast<int>(args.get_int("batch")),
                     .seq_len = static_cast<int>(args.get_int("seq")),
                     .repeats = static_cast<int>(args.get_int("repeats")),
                     .device = device_from_name(args.get("device"))});
  return 0;
}

}  // namespace dt::cli
