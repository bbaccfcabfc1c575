#include "cli/args.h"
#include "cli/config_operands.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace dt::cli {

int command_train(int argc, char** argv, int first) {
  Args args("train", "train a model as a run configuration says (docs/config.md); SIGTERM or SIGINT saves and stops");
  declare_config_operands(args);
  if (!args.parse(argc, argv, first)) return 0;
  run_training(config_from_operands(args));
  return 0;
}

}  // namespace dt::cli
