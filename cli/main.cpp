// dtrain: the command-line entry point. Every dt::Error is caught here, printed, and turned
// into a non-zero exit status.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "comm/mpi.h"
#include "comm/world.h"
#include "core/error.h"

namespace {

constexpr const char* kUsage =
    "usage: dtrain <command> [flags]   (dtrain <command> --help for its flags)\n"
    "from text to a model:\n"
    "  tokenizer train   learn a byte-level BPE tokenizer (Hugging Face tokenizer.json) from text files\n"
    "  data prepare      tokenize text files into train/val token shards (llm.c's format)\n"
    "  config show       a run configuration resolved, every default filled in, and what it implies\n"
    "  train             train a model as a run configuration (TOML) says\n"
    "  eval              validation loss and perplexity of a checkpoint or Hugging Face model\n"
    "  generate          sample text from a checkpoint or Hugging Face model, printed as it is written\n"
    "  export            write a checkpoint as a Hugging Face model directory\n"
    "inspecting and measuring:\n"
    "  ckpt inspect      a checkpoint's manifest, its checksums verified\n"
    "  model info        parameter count, bytes and parameter list of a model description\n"
    "  plan              a run configuration's memory per GPU and step time on a hardware profile, predicted\n"
    "  plan schedule     a pipeline schedule's per-rank timeline, checked, with its bubble (text and SVG)\n"
    "  tokenizer encode  the token ids of a text file\n"
    "  doctor            CPU, BLAS, MPI, CUDA, NCCL, GPUs and a checked all-reduce (under mpirun: every rank)\n"
    "  bench step        time training steps of a model shape, against this machine's GEMM peak\n"
    "  bench gemm        time a step's matrix products: OpenBLAS fp32, oneDNN fp32 and bf16\n"
    "  bench comm        time the collectives over message sizes on every rank (under mpirun), checked\n"
    "  bench tp          tensor parallelism's communication and activations per rank, against their counts\n"
    "  bench pp          each pipeline schedule run under mpirun: measured bubble against theory, memory per rank\n"
    "  bench cp          ring attention under mpirun: each rank's attention time, plain against zig-zag, traffic\n"
    "  bench profile     measure this machine as a hardware profile for `dtrain plan` (under mpirun)\n"
    "  bench tokenizer   time BPE encoding of a text file (MB/s)\n";

int run(int argc, char** argv) {
  using namespace dt::cli;
  const std::string command = argc > 1 ? argv[1] : "";
  const std::string sub = argc > 2 ? argv[2] : "";
  if (command == "train") return command_train(argc, argv, 2);
  if (command == "bench" && sub == "step") return command_bench_step(argc, argv, 3);
  if (command == "bench" && sub == "gemm") return command_bench_gemm(argc, argv, 3);
  if (command == "bench" && sub == "comm") return command_bench_comm(argc, argv, 3);
  if (command == "bench" && sub == "tp") return command_bench_tp(argc, argv, 3);
  if (command == "bench" && sub == "pp") return command_bench_pp(argc, argv, 3);
  if (command == "bench" && sub == "cp") return command_bench_cp(argc, argv, 3);
  if (command == "bench" && sub == "profile") return command_bench_profile(argc, argv, 3);
  if (command == "bench" && sub == "tokenizer") return command_bench_tokenizer(argc, argv, 3);
  if (command == "tokenizer" && sub == "train") return command_tokenizer_train(argc, argv, 3);
  if (command == "tokenizer" && sub == "encode") return command_tokenizer_encode(argc, argv, 3);
  if (command == "data" && sub == "prepare") return command_data_prepare(argc, argv, 3);
  if (command == "model" && sub == "info") return command_model_info(argc, argv, 3);
  if (command == "plan" && sub == "schedule") return command_plan_schedule(argc, argv, 3);
  if (command == "plan") return command_plan(argc, argv, 2);
  if (command == "ckpt" && sub == "inspect") return command_ckpt_inspect(argc, argv, 3);
  if (command == "eval") return command_eval(argc, argv, 2);
  if (command == "doctor") return command_doctor(argc, argv, 2);
  if (command == "generate") return command_generate(argc, argv, 2);
  if (command == "export") return command_export(argc, argv, 2);
  if (command == "config" && sub == "show") return command_config_show(argc, argv, 3);
  if (command.empty() || command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return command.empty() ? 2 : 0;
  }
  std::fprintf(stderr, "dtrain: unknown command '%s%s%s'\n%s", command.c_str(), sub.empty() ? "" : " ", sub.c_str(),
               kUsage);
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
