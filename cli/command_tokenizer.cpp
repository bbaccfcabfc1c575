// `dtrain tokenizer train` and `dtrain tokenizer encode`.
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/tokenizer.h"

namespace dt::cli {

namespace {

std::vector<std::filesystem::path> input_files(const Args& args) {
  if (args.positionals().empty()) throw Error(str("tokenizer: no input text files; name them after the flags\n", args.usage()));
  return {args.positionals().begin(), args.positionals().end()};
}

}  // namespace

int command_tokenizer_train(int argc, char** argv, int first) {
  Args args("tokenizer train", "learn a byte-level BPE tokenizer from text files and save it as a HF tokenizer.json");
  args.positional("FILES...", "text files to learn from (each read whole, as one text)")
      .flag("vocab-size", "", "tokens in the vocabulary: 256 bytes + merges + special tokens (required)")
      .flag("out", "", "tokenizer.json to write (required)")
      .flag("pattern", "gpt2", "pre-tokenizer regex: gpt2 or llama3")
      .flag("special", "<|endoftext|>", "special tokens, comma-separated (\"\" for none)");
  if (!args.parse(argc, argv, first)) return 0;
  for (const char* required : {"vocab-size", "out"})
    if (!args.was_given(required)) throw Error(str("tokenizer train: --", required, " is required\n", args.usage()));
  std::vector<std::string> specials;
  for (std::string rest = args.get("special"); !rest.empty();) {
    const size_t comma = rest.find(',');
    specials.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  const Tokenizer tokenizer = train_tokenizer(input_files(args), static_cast<int>(args.get_int("vocab-size")), specials,
                                              parse_pattern(args.get("pattern")));
  tokenizer.save(args.get("out"));
  std::printf("wrote %s: %d tokens (%zu merges, %zu special)\n", args.get("out").c_str(), tokenizer.vocab_size(),
              tokenizer.parts().merges.size(), tokenizer.parts().added.size());
  return 0;
}

int command_tokenizer_encode(int argc, char** argv, int first) {
  Args args("tokenizer encode", "print the token ids of a text file (special tokens in it are recognised)");
  args.positional("FILE", "the text file to encode")
      .flag("tokenizer", "", "tokenizer.json (required)")
      .flag("count", "false", "print only the number of tokens");
  if (!args.parse(argc, argv, first)) return 0;
  if (!args.was_given("tokenizer")) throw Error(str("tokenizer encode: --tokenizer is required\n", args.usage()));
  const auto files = input_files(args);
  const Tokenizer tokenizer = Tokenizer::load(args.get("tokenizer"));
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(str("cannot open text file '", file.string(), "'; check the path"));
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const auto ids = tokenizer.encode(text);
    if (args.get_bool("count")) {
      std::printf("%zu\n", ids.size());
      continue;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%d%c", ids[i], i + 1 < ids.size() ? ' ' : '\n');
  }
  return 0;
}

}  // namespace dt::cli
