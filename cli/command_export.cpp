#include <cstdio>

#include "ckpt/gguf_export.h"
#include "ckpt/hf_export.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "data/tokenizer.h"

namespace dt::cli {

int command_export(int argc, char** argv, int first) {
  Args args("export", "write a checkpoint as a Hugging Face model directory (transformers' AutoModelForCausalLM "
                      "and AutoTokenizer load it), or as one GGUF file that llama.cpp runs");
  args.flag("checkpoint", "", "a checkpoint step directory, or a checkpoint root (its latest step)")
      .flag("hf", "", "the directory to write; must not exist or be empty")
      .flag("gguf", "", "the GGUF file to write instead (with --tokenizer); must not exist")
      .flag("quantize", "", "--gguf: f32, f16 (the default: every matrix), or q8_0 or q4_0 (the linear layers' "
                            "weights, in GGUF's blocks of 32; the embeddings f16). --hf: f32 (the default), or int8, "
                            "q8_0 or q4_0 (the linear layers' weights, in compressed-tensors' layout, which vLLM "
                            "reads; Llama-family models)")
      .flag("tokenizer", "", "the tokenizer.json the model was trained with (\"\" exports no tokenizer)")
      .flag("temperature", "0.8", "generation_config.json: sampling temperature")
      .flag("top-k", "40", "generation_config.json: keep the k likeliest tokens (0 keeps all)")
      .flag("top-p", "0.95", "generation_config.json: nucleus sampling's probability mass");
  if (!args.parse(argc, argv, first)) return 0;
  if (args.get("checkpoint").empty() || args.get("hf").empty() == args.get("gguf").empty())
    throw Error(str("export: give the checkpoint with --checkpoint DIR and the output with --hf OUT or --gguf FILE\n",
                    args.usage()));
  if (!args.get("gguf").empty()) {
    const std::filesystem::path out = args.get("gguf");
    const std::string quantize = args.get("quantize").empty() ? "f16" : args.get("quantize");
    const ckpt::GgmlType type = ckpt::parse_gguf_type(quantize);
    if (args.get("tokenizer").empty())
      throw Error("export: a GGUF file carries its tokenizer; give the one the model was trained with: --tokenizer FILE");
    if (std::filesystem::exists(out))
      throw Error(str("export: ", out.string(), " exists; remove it or choose another --gguf"));
    const ModelWeights weights = weights_from_checkpoint(args.get("checkpoint"));
    ckpt::export_gguf(*weights.params, Tokenizer::load(args.get("tokenizer")), type, out);
    std::printf("exported %s to %s (%s)\n", weights.origin.c_str(), out.string().c_str(), quantize.c_str());
    return 0;
  }
  const std::string quantize = args.get("quantize").empty() ? "f32" : args.get("quantize");
  std::optional<kernels::WeightFormat> quantized;
  if (quantize != "f32") {
    if (quantize != "int8" && quantize != "q8_0" && quantize != "q4_0")
      throw Error(str("export: --hf writes f32 weights, or the linear layers' in int8, q8_0 or q4_0, not --quantize '",
                      quantize, "'", quantize == "f16" ? " (f16 is for --gguf)" : ""));
    quantized = kernels::parse_weight_format(quantize);
  }
  const ModelWeights weights = weights_from_checkpoint(args.get("checkpoint"));
  std::optional<ckpt::HfTokenizerFiles> tokenizer_files;
  if (!args.get("tokenizer").empty()) {
    const Tokenizer tokenizer = Tokenizer::load(args.get("tokenizer"));
    const int64_t model_vocab = weights.layout->config().vocab_size;
    if (tokenizer.vocab_size() > model_vocab)
      throw Error(str("export: ", args.get("tokenizer"), " has ", tokenizer.vocab_size(), " tokens but the model's "
                      "vocab_size is ", model_vocab, "; give the tokenizer the model was trained with"));
    const int32_t eot = tokenizer.eot_token();
    tokenizer_files = ckpt::HfTokenizerFiles{.tokenizer_json = args.get("tokenizer"),
                                             .eos_token = tokenizer.decode(std::span(&eot, 1)),
                                             .eos_token_id = eot};
  }
  ckpt::export_hf(*weights.params, tokenizer_files,
                  {.temperature = static_cast<float>(args.get_double("temperature")),
                   .top_k = static_cast<int>(args.get_int("top-k")),
                   .top_p = static_cast<float>(args.get_double("top-p"))},
                  args.get("hf"), quantized);
  std::printf("exported %s to %s (%s)\n", weights.origin.c_str(), args.get("hf").c_str(), quantize.c_str());
  return 0;
}

}  // namespace dt::cli
