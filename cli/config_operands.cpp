#include "cli/config_operands.h"

namespace dt::cli {

void declare_config_operands(Args& args) {
  args.positional("CONFIG.toml [section.key=value ...]",
                  "the run configuration (docs/config.md), then overrides of any of its keys (optim.lr=3e-4 "
                  "train.steps=2000)");
}

RunConfig config_from_operands(const Args& args) {
  std::string path;
  std::vector<std::string> overrides;
  for (const std::string& operand : args.positionals()) {
    if (path.empty() && operand.find('=') == std::string::npos)
      path = operand;
    else
      overrides.push_back(operand);
  }
  if (path.empty()) throw Error(str(args.command(), ": no configuration file given\n", args.usage()));
  return load_run_config(path, overrides);
}

}  // namespace dt::cli
