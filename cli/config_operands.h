// `CONFIG.toml [section.key=value ...]`: the run configuration and its overrides, as `dtrain
// train`, `dtrain plan` and `dtrain config show` take them.
#pragma once

#include "cli/args.h"
#include "train/run_config.h"

namespace dt::cli {

void declare_config_operands(Args& args);
// The configuration file (the first operand without '=') loaded with the other operands as
// overrides; an error naming the command's usage when no file is given.
RunConfig config_from_operands(const Args& args);

}  // namespace dt::cli
