// dtrain: the command-line entry point. Every dt::Error is caught here, printed, and turned
// into a non-zero exit status.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/suggest.h"

namespace {

struct Command {
  const char* name;     // "plan schedule": one or two words
  const char* summary;  // its line in `dtrain --help`
  int (*run)(int argc, char** argv, int first);
};

// Every command, in the order `dtrain --help` lists them; the first kFromTextToModel are the
// workflow's, the rest inspect and measure.
constexpr Command kCommands[] = {
    {"tokenizer train", "learn a byte-level BPE tokenizer (Hugging Face tokenizer.json) from text files",
     dt::cli::command_tokenizer_train},
    {"data prepare", "tokenize text files into train/val token shards (llm.c's format)", dt::cli::command_data_prepare},
    {"config show", "a run configuration resolved, every default filled in, and what it implies",
     dt::cli::command_config_show},
    {"train", "train a model as a run configuration (TOML) says", dt::cli::command_train},
    {"eval", "validation loss and perplexity of a checkpoint or Hugging Face model", dt::cli::command_eval},
    {"generate", "sample text from a checkpoint or Hugging Face model, printed as it is written",
     dt::cli::command_generate},
    {"export", "write a checkpoint as a Hugging Face model directory, or as a GGUF file for llama.cpp", dt::cli::command_export},
    {"report", "one HTML page of runs' curves: loss, learning rate, norms, throughput, MFU, memory",
     dt::cli::command_report},
    {"ckpt inspect", "a checkpoint's manifest, its checksums verified", dt::cli::command_ckpt_inspect},
    {"model info", "parameter count, bytes and parameter list of a model description", dt::cli::command_model_info},
    {"plan", "a run configuration's memory per GPU and step time on a hardware profile, predicted",
     dt::cli::command_plan},
    {"plan schedule", "a pipeline schedule's per-rank timeline, checked, with its bubble (text and SVG)",
     dt::cli::command_plan_schedule},
    {"tokenizer encode", "the token ids of a text file", dt::cli::command_tokenizer_encode},
    {"doctor", "CPU, BLAS, MPI, CUDA, NCCL, GPUs and a checked all-reduce (under mpirun: every rank)",
     dt::cli::command_doctor},
    {"check", "whether a configuration's parallel layout trains as one rank does, step by step (under mpirun)",
     dt::cli::command_check},
    {"bench step", "time training steps of a model shape, against this machine's GEMM peak",
     dt::cli::command_bench_step},
    {"bench gemm", "time a step's matrix products: OpenBLAS fp32, oneDNN fp32 and bf16", dt::cli::command_bench_gemm},
    {"bench comm", "time the collectives over message sizes on every rank (under mpirun), checked",
     dt::cli::command_bench_comm},
    {"bench tp", "tensor parallelism's communication and activations per rank, against their counts",
     dt::cli::command_bench_tp},
    {"bench pp", "each pipeline schedule run under mpirun: measured bubble against theory, memory per rank",
     dt::cli::command_bench_pp},
    {"bench cp", "ring attention under mpirun: each rank's attention time, plain against zig-zag, traffic",
     dt::cli::command_bench_cp},
    {"bench ep", "experts over the ranks under mpirun: step and all-to-all time, traffic against the routing, imbalance",
     dt::cli::command_bench_ep},
    {"bench profile", "measure this machine as a hardware profile for `dtrain plan` (under mpirun)",
     dt::cli::command_bench_profile},
    {"bench tokenizer", "time BPE encoding of a text file (MB/s)", dt::cli::command_bench_tokenizer},
};
constexpr size_t kFromTextToModel = 7;

std::string usage() {
  std::string out =
      "usage: dtrain <command> [flags]   (dtrain <command> --help for its flags)\nfrom text to a model:\n";
  size_t width = 0;  // the longest name's, so the summaries line up
  for (const Command& c : kCommands) width = std::max(width, std::strlen(c.name));
  for (size_t i = 0; i < std::size(kCommands); ++i) {
    if (i == kFromTextToModel) out += "inspecting and measuring:\n";
    out += dt::str("  ", kCommands[i].name, std::string(width + 2 - std::strlen(kCommands[i].name), ' '),
                   kCommands[i].summary, "\n");
  }
  return out;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const std::string sub = argc > 2 ? argv[2] : "";
  // Two words first: "plan schedule" before "plan".
  for (const Command& c : kCommands)
    if (!sub.empty() && command + " " + sub == c.name) return c.run(argc, argv, 3);
  for (const Command& c : kCommands)
    if (command == c.name) return c.run(argc, argv, 2);
  if (command.empty() || command == "--help" || command == "-h" || command == "help") {
    std::fputs(usage().c_str(), stdout);
    return command.empty() ? 2 : 0;
  }
  const std::string typed = sub.empty() || sub.starts_with("-") ? command : command + " " + sub;
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  const std::string best = dt::closest_match(typed, names);
  std::fprintf(stderr, "dtrain: unknown command '%s'%s\n%s", typed.c_str(),
               best.empty() ? "" : dt::str(" (did you mean 'dtrain ", best, "'?)").c_str(), usage().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const dt::Error& e) {
    // Under a launcher each rank's error says whose it is; one that every rank meets alike (a
    // wrong configuration) is printed by the first rank only.
    const std::optional<int> rank = dt::launcher_rank();
    const bool config_error = dynamic_cast<const dt::ConfigError*>(&e) != nullptr;
    if (rank && *rank != 0 && config_error) {
      // The launcher ends the job when the first rank exits: the first rank prints before that.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return 1;
    }
    const std::string whose = rank && !config_error ? dt::str(" (", dt::rank_description(), ")") : "";
    std::fprintf(stderr, "dtrain: error%s: %s\n", whose.c_str(), e.what());
    std::fflush(stderr);
    dt::abort_job_if_mpi(1);  // under mpirun: the other ranks stop now instead of waiting for this one
    return 1;
  }
}
