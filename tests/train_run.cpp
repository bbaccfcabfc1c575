#include "tests/train_run.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "data/token_shard.h"

namespace dt::testing {

namespace {

void write_shard(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  TokenShardWriter writer(path, 256);
  std::vector<uint32_t> tokens(bytes.begin(), bytes.end());
  for (uint32_t& t : tokens) t &= 0xff;
  writer.append(tokens);
  writer.finish();
}

}  // namespace

TrainRun::TrainRun() {
  std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  write_shard(dir_.file("data/train_000000.bin"), text.substr(0, 24000));
  write_shard(dir_.file("data/val_000000.bin"), text.substr(24000, 4000));
  std::ofstream(dir_.file("run.toml")) << "[model]\npreset = \"gpt2-tiny\"\nvocab_size = 256\n"
                                       << "[data]\ndir = \"" << dir_.file("data") << "\"\nseq_len = 32\n"
                                       << "[train]\nsteps = 20\nmicro_batch_size = 4\nglobal_batch_size = 8\n"
                                       << "[optim]\nlr = 3e-3\nwarmup_steps = 2\n"
                                       << "[checkpoint]\nevery = 10\n"
                                       << "[log]\nprogress = \"plain\"\nevery = 1\n"
                                       << "[eval]\nbatches = 2\n";
}

std::string TrainRun::args(const std::string& run, const std::string& overrides) const {
  return str("train ", dir_.file("run.toml"), " log.run_dir=", dir_.file(run), " ", overrides);
}

std::vector<double> TrainRun::losses(const std::string& run) const {
  std::vector<double> out;
  std::ifstream in(path(run) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (!entry.contains("loss")) continue;
    EXPECT_EQ(entry["step"].get<size_t>(), out.size() + 1) << line;
    out.push_back(entry["loss"].get<double>());
  }
  return out;
}

double TrainRun::final_validation_loss(const std::string& run) const {
  double loss = -1;
  std::ifstream in(path(run) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (entry.contains("val_loss")) loss = entry["val_loss"].get<double>();
  }
  EXPECT_GE(loss, 0) << "no validation loss in " << run;
  return loss;
}

std::string TrainRun::final_tensors(const std::string& run) const {
  const auto step = ckpt::Checkpoint::latest(path(run) / "checkpoints");
  std::ifstream in(step / "tensors.safetensors", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace dt::testing
