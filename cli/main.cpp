// dtrain: the command-line entry point. Every dt::Error is caught here, printed, and turned
// into a non-zero exit status.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace {

constexpr const char* kUsage =
    "usage: dtrain <command> [flags]   (dtrain <command> --help for its flags)\n"
    "commands:\n"
    "  train        train a GPT-2 on the bytes of a text file\n"
    "  bench step   time training steps of a model shape, against this machine's GEMM peak\n"
    "  bench gemm   time a step's matrix products: OpenBLAS fp32, oneDNN fp32 and bf16\n"
    "  model info   parameter count, bytes and parameter list of a model description\n"
    "  ckpt inspect print a checkpoint's manifest and verify its checksums\n";

int run(int argc, char** argv) {
  using namespace dt::cli;
  const std::string command = argc > 1 ? argv[1] : "";
  const std::string sub = argc > 2 ? argv[2] : "";
  if (command == "train") return command_train(argc, argv, 2);
  if (command == "bench" && sub == "step") return command_bench_step(argc, argv, 3);
  if (command == "bench" && sub == "gemm") return command_bench_gemm(argc, argv, 3);
  if (command == "model" && sub == "info") return command_model_info(argc, argv, 3);
  if (command == "ckpt" && sub == "inspect") return command_ckpt_inspect(argc, argv, 3);
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
    std::fprintf(stderr, "dtrain: error: %s\n", e.what());
    return 1;
  }
}
