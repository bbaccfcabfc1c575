#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "data/tokenizer.h"
#include "model/inference.h"
#include "train/generate.h"

namespace dt::cli {

namespace {

// --tokenizer, else the tokenizer.json of an --hf directory.
std::filesystem::path tokenizer_path(const Args& args) {
  if (!args.get("tokenizer").empty()) return args.get("tokenizer");
  const std::filesystem::path beside = std::filesystem::path(args.get("hf")) / "tokenizer.json";
  if (!args.get("hf").empty() && std::filesystem::exists(beside)) return beside;
  throw Error("generate: give the tokenizer the model was trained with: --tokenizer tokenizer.json");
}

}  // namespace

int command_generate(int argc, char** argv, int first) {
  Args args("generate", "sample text from a model with a KV cache, printed as it is generated");
  declare_model_source_flags(args);
  args.flag("tokenizer", "", "tokenizer.json (default: the --hf directory's)")
      .flag("prompt", "", "text to continue; empty starts from the end-of-text token")
      .flag("max-tokens", "128", "tokens to generate at most (the model's max_seq_len bounds prompt + output)")
      .flag("temperature", "0.8", "0 is greedy; below 1 sharpens the distribution, above 1 flattens it")
      .flag("top-k", "40", "sample among the k likeliest tokens (0: all)")
      .flag("top-p", "0.95", "sample among the likeliest tokens whose probabilities sum to p (1: all)")
      .flag("seed", "42", "the sampler's random stream: the same seed gives the same text")
      .flag("stop", "eot", "stop at this token: eot (the tokenizer's end-of-text), none, or a special token's text");
  if (!args.parse(argc, argv, first)) return 0;
  const ModelWeights weights = model_weights_from_flags(args);
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path(args));
  const ModelConfig& config = weights.layout->config();
  if (tokenizer.vocab_size() > config.vocab_size)
    throw Error(str("generate: the tokenizer has ", tokenizer.vocab_size(), " tokens but the model's vocab_size is ",
                    config.vocab_size, "; give the tokenizer the model was trained with"));

  GenerateOptions options{.max_new_tokens = static_cast<int>(args.get_int("max-tokens")),
                          .sampling = {.temperature = static_cast<float>(args.get_double("temperature")),
                                       .top_k = static_cast<int>(args.get_int("top-k")),
                                       .top_p = static_cast<float>(args.get_double("top-p")),
                                       .seed = static_cast<uint64_t>(args.get_int("seed"))}};
  const std::string stop = args.get("stop");
  if (stop == "eot") {
    options.stop_token = tokenizer.eot_token();
  } else if (stop != "none") {
    options.stop_token = tokenizer.special_token(stop);
    if (!options.stop_token)
      throw Error(str("generate: --stop '", stop, "' is not a special token of the tokenizer; use eot, none, or the "
                      "text of one of its added tokens"));
  }
  const std::string prompt_text = args.get("prompt");
  std::vector<int32_t> prompt = tokenizer.encode(prompt_text);
  if (prompt.empty()) prompt.push_back(tokenizer.eot_token());
  if (static_cast<int64_t>(prompt.size()) >= config.max_seq_len)
    throw Error(str("generate: the prompt is ", prompt.size(), " tokens, and the model's context (max_seq_len) is ",
                    config.max_seq_len, "; shorten --prompt"));
  const int64_t wanted = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  InferenceSession session(*weights.params, static_cast<int>(std::clamp<int64_t>(wanted, 1, config.max_seq_len)));
  options.max_new_tokens = std::min<int64_t>(options.max_new_tokens, session.max_tokens() - prompt.size() + 1);

  std::fputs(prompt_text.c_str(), stdout);
  std::fflush(stdout);
  // A token's bytes may end inside a UTF-8 character; the terminal joins them with the next.
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> generated = generate(session, prompt, options, [&](int32_t token) {
    const std::string bytes = tokenizer.decode(std::span(&token, 1));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "[%s | %zu prompt tokens, %zu generated in %.2f s, %.1f tokens/s]\n", weights.origin.c_str(),
               prompt.size(), generated.size(), seconds, generated.size() / std::max(seconds, 1e-9));
  return 0;
}

}  // namespace dt::cli
