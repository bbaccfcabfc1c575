// dtrain config show CONFIG.toml [section.key=value ...]: the run configuration as the run would
// use it, every default filled in, then the quantities derived from it as TOML comments, so
// the output is itself a loadable configuration. Reads no data beyond the shards' headers.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "train/run_config.h"

namespace dt::cli {

namespace {

constexpr const char* kConfigShowUsage =
    "usage: dtrain config show CONFIG.toml [section.key=value ...]\n"
    "  prints the resolved configuration (every key, defaults filled in) and the quantities\n"
    "  derived from it: batch in tokens, accumulation steps, parameters, FLOPs, epochs.\n"
    "  section.key=value overrides a key (optim.lr=3e-4, train.precision=bf16); docs/config.md\n"
    "  lists every key.\n";

}  // namespace

int command_config_show(int argc, char** argv, int first) {
  std::string path;
  std::vector<std::string> overrides;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kConfigShowUsage, stdout);
      return 0;
    }
    if (arg.starts_with("-")) throw Error(str("config show: unknown flag ", arg, "\n", kConfigShowUsage));
    if (path.empty() && arg.find('=') == std::string::npos)
      path = arg;
    else
      overrides.push_back(arg);
  }
  if (path.empty()) throw Error(str("config show: no configuration file given\n", kConfigShowUsage));
  const RunConfig config = load_run_config(path, overrides);
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
