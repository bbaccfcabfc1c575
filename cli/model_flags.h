// The flags that describe a model, shared by every command that builds or describes one:
// a preset, then any field overridden.
#pragma once

#include "cli/args.h"
#include "model/config.h"
#include "model/transformer.h"

namespace dt::cli {

void declare_model_flags(Args& args, const std::string& default_preset);
// The preset (`preset`, or --model when empty) with the given overrides applied; validated.
ModelConfig model_from_flags(const Args& args, const std::string& preset = "");

// How a model runs, for the commands that train one: --precision and --recompute.
void declare_run_flags(Args& args);
DType precision_from_flags(const Args& args);
Recompute recompute_from_flags(const Args& args);

}  // namespace dt::cli
