// A small `dtrain train` run for the tests of the command: a run configuration over the GPL's
// bytes (vocabulary 256, a text every Debian system ships unchanged) in a temporary directory,
// and readers of what the run leaves in its run directory.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace dt::testing {

class TrainRun {
 public:
  // Writes the shards and run.toml: gpt2-tiny, 20 steps of 8 sequences of 32 bytes, a checkpoint
  // every 10 steps, every step logged.
  TrainRun();
  // `dtrain train run.toml` with the run directory `run` and extra overrides.
  std::string args(const std::string& run, const std::string& overrides = "") const;
  std::filesystem::path path(const std::string& name) const { return dir_.path() / name; }

  // The losses metrics.jsonl holds, by step.
  std::vector<double> losses(const std::string& run) const;
  // The last validation loss metrics.jsonl holds.
  double final_validation_loss(const std::string& run) const;
  // The bytes of the final checkpoint's tensor file: parameters and both AdamW moments.
  std::string final_tensors(const std::string& run) const;

 private:
  TempDir dir_;
};

}  // namespace dt::testing
