// `dtrain data prepare`: text files -> token shards (data/prepare.h).
#include <unistd.h>

#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/prepare.h"

namespace dt::cli {

int command_data_prepare(int argc, char** argv, int first) {
  Args args("data prepare", "tokenize text files into llm.c-format token shards: val_000000.bin, train_000000.bin, ...");
  args.positional("FILES...", "text files to tokenize, in order")
      .flag("tokenizer", "", "tokenizer.json (required; `dtrain tokenizer train` makes one)")
      .flag("out", "", "directory for the shards (required; created when missing)")
      .flag("val-fraction", "0.005", "fraction of the input bytes, from the start, held out as validation documents")
      .flag("val-tokens", "", "hold out the first documents up to this many tokens instead of --val-fraction")
      .flag("shard-tokens", "100000000", "tokens per shard")
      .flag("doc-separator", "blank-lines", "what ends a document: blank-lines, line or file");
  if (!args.parse(argc, argv, first)) return 0;
  for (const char* required : {"tokenizer", "out"})
    if (!args.was_given(required)) throw Error(str("data prepare: --", required, " is required\n", args.usage()));
  const std::vector<std::filesystem::path> inputs(args.positionals().begin(), args.positionals().end());
  if (inputs.empty()) throw Error(str("data prepare: no input text files; name them after the flags\n", args.usage()));
  const Tokenizer tokenizer = Tokenizer::load(args.get("tokenizer"));
  const PrepareSummary s = prepare_data(
      tokenizer, {.inputs = inputs,
                  .out_dir = args.get("out"),
                  .val_fraction = args.get_double("val-fraction"),
                  .val_tokens = args.was_given("val-tokens") ? args.get_int("val-tokens") : -1,
                  .shard_tokens = args.get_int("shard-tokens"),
                  .separator = parse_doc_separator(args.get("doc-separator")),
                  .progress = ::isatty(STDERR_FILENO) == 1});
  std::printf("prepared %lld documents, %.1f MB in %.1f s (%.1f MB/s): %lld train tokens in %zu shards, %lld val tokens "
              "in %zu shards, in %s\n",
              static_cast<long long>(s.documents), s.bytes / 1e6, s.seconds, s.bytes / 1e6 / std::max(s.seconds, 1e-9),
              static_cast<long long>(s.train_tokens), s.train_shards.size(), static_cast<long long>(s.val_tokens),
              s.val_shards.size(), args.get("out").c_str());
  return 0;
}

}  // namespace dt::cli
