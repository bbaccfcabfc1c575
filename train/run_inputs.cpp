// check_run_inputs (train/run_config.h): the files a run reads, checked before anything large
// is allocated.
#include <filesystem>

#include "core/device.h"
#include "core/error.h"
#include "data/token_dataset.h"
#include "train/run_config.h"

namespace dt {

void check_run_inputs(const RunConfig& config) {
  std::vector<std::string> problems;
  const std::string file = config.source.empty() ? "run configuration" : config.source.string();
  const auto& d = config.data;
  if (d.dir.empty()) {
    problems.push_back(str(file, ": data.dir is not set; point it at a directory of token shards (",
                           d.train_prefix, "_*.bin, made by `dtrain data prepare` or llm.c's scripts)"));
  } else {
    try {
      const TokenDataset train(TokenDataset::shards_in(d.dir, d.train_prefix), config.model.vocab_size);
      if (train.size() < d.seq_len + 1)
        problems.push_back(str(file, ": data.dir = \"", d.dir.string(), "\": the ", d.train_prefix, " shards hold ",
                               train.size(), " tokens, fewer than one sequence of data.seq_len + 1 = ", d.seq_len + 1,
                               "; use more data or a shorter data.seq_len"));
    } catch (const Error& e) {
      problems.push_back(str(file, ": data.dir = \"", d.dir.string(), "\": ", e.what()));
    }
    if (config.eval.every > 0) {
      try {
        TokenDataset::shards_in(d.dir, d.val_prefix);
      } catch (const Error& e) {
        problems.push_back(str(file, ": eval.every = ", config.eval.every, " needs validation shards: ", e.what(),
                               "; or set eval.every = 0"));
      }
    }
  }
  if (const std::string why = config.train.target_device() == Device::cpu ? "" : cuda_unavailable_reason(); !why.empty())
    problems.push_back(str(file, ": train.device = \"", config.train.device, "\": ", why, "; or set train.device = \"cpu\""));
  std::error_code ec;
  if (!d.tokenizer.empty() && !std::filesystem::is_regular_file(d.tokenizer, ec))
    problems.push_back(str(file, ": data.tokenizer = \"", d.tokenizer.string(),
                           "\": no such file; give the tokenizer.json the shards were made with, or remove the key"));
  if (problems.empty()) return;
  std::string message = str("the run's inputs have ", problems.size(), problems.size() == 1 ? " problem:" : " problems:");
  for (const auto& p : problems) message += "\n  " + p;
  throw ConfigError(message);
}

}  // namespace dt
