#include "cli/args.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace dt::cli {

int command_train(int argc, char** argv, int first) {
  Args args("train", "train a model as a run configuration says (docs/config.md); SIGTERM or SIGINT saves and stops");
  args.positional("CONFIG.toml [section.key=value ...]",
                  "the run configuration, then overrides of any of its keys (optim.lr=3e-4 train.steps=2000)");
  if (!args.parse(argc, argv, first)) return 0;
  const std::vector<std::string>& operands = args.positionals();
  if (operands.empty()) throw Error(str("train: no run configuration given\n", args.usage()));
  const std::vector<std::string> overrides(operands.begin() + 1, operands.end());
  run_training(load_run_config(operands.front(), overrides));
  return 0;
}

}  // namespace dt::cli
