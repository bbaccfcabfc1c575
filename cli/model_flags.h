// The flags that describe a model, shared by every command that builds or describes one:
// a preset, then any field overridden.
#pragma once

#include "cli/args.h"
#include "model/config.h"

namespace dt::cli {

void declare_model_flags(Args& args, const std::string& default_preset);
// The preset (`preset`, or --model when empty) with the given overrides applied; validated.
ModelConfig model_from_flags(const Args& args, const std::string& preset = "");

}  // namespace dt::cli
