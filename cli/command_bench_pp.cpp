#include <sstream>

#include "bench/pipeline_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"

namespace dt::cli {

int command_bench_pp(int argc, char** argv, int first) {
  Args args("bench pp",
            "run each pipeline schedule with the executor under mpirun (the ranks are the pipeline's) and measure its "
            "bubble against theory and the activation memory per rank");
  declare_model_flags(args, "gpt2-tiny");
  args.flag("batch", "2", "sequences per micro-batch")
      .flag("seq", "64", "tokens per sequence")
      .flag("microbatches", "8", "micro-batches per step")
      .flag("virtual", "2", "virtual stages per rank for interleaved")
      .flag("repeats", "3", "timed steps per schedule (the median is reported)")
      .flag("schedules", "afab,1f1b,interleaved,zb-h1,zb-v", "schedules to run, comma-separated");
  if (!args.parse(argc, argv, first)) return 0;
  PipelineBenchOptions o{.model = model_from_flags(args),
                         .batch_size = static_cast<int>(args.get_int("batch")),
                         .seq_len = static_cast<int>(args.get_int("seq")),
                         .micro_batches = static_cast<int>(args.get_int("microbatches")),
                         .virtual_stages = static_cast<int>(args.get_int("virtual")),
                         .repeats = static_cast<int>(args.get_int("repeats")),
                         .schedules = {}};
  std::istringstream names(args.get("schedules"));
  for (std::string name; std::getline(names, name, ',');) o.schedules.push_back(name);
  run_pipeline_bench(o);
  return 0;
}

}  // namespace dt::cli
