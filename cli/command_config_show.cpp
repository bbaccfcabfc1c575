// dtrain config show CONFIG.toml [section.key=value ...]: the run configuration as the run would
// use it, every default filled in, then the quantities derived from it as TOML comments, so
// the output is itself a loadable configuration. Reads no data beyond the shards' headers.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_operands.h"
#include "core/error.h"
#include "train/run_config.h"

namespace dt::cli {

int command_config_show(int argc, char** argv, int first) {
  Args args("config show",
            "the resolved configuration (every key, defaults filled in: itself a loadable TOML file), then the "
            "quantities derived from it as comments: batch in tokens, micro-batches, parameters, FLOPs, memory per "
            "rank, epochs");
  declare_config_operands(args);
  if (!args.parse(argc, argv, first)) return 0;
  const RunConfig config = config_from_operands(args);
  std::fputs(resolved_toml(config).c_str(), stdout);
  std::string derived = "\n# Derived quantities\n";
  const std::string lines = derived_quantities(config);
  for (size_t begin = 0; begin < lines.size();) {
    const size_t end = lines.find('\n', begin);
    derived += "# " + lines.substr(begin, end - begin) + "\n";
    begin = end == std::string::npos ? lines.size() : end + 1;
  }
  std::fputs(derived.c_str(), stdout);
  return 0;
}

}  // namespace dt::cli
