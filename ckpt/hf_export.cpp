#include "ckpt/hf_export.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/compressed_tensors.h"
#include "ckpt/hf_checkpoint.h"
#include "ckpt/hf_config.h"
#include "core/error.h"
#include "model/quantized_weights.h"

namespace dt::ckpt {

namespace {

void write_json(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream out(path, std::ios::trunc);
  out << json.dump(2) << "\n";
  if (!out.flush()) throw Error(str("cannot write '", path.string(), "' (is the disk full?)"));
}

}  // namespace

void export_hf(const FlatTensors& params, const std::optional<HfTokenizerFiles>& tokenizer,
               const HfGenerationDefaults& generation, const std::filesystem::path& out,
               std::optional<kernels::WeightFormat> quantized) {
  with_context(str("exporting a Hugging Face model to '", out.string(), "'"), [&] {
    const ModelConfig& model = params.layout().config();
    if (quantized) {
      if (model.traits().hf_transposed_weights)
        throw Error(str("a quantized Hugging Face export is of a Llama-family model; ", model_family_name(model.family),
                        "'s linear weights are Conv1D (in, out), which compressed-tensors does not quantize: "
                        "export it quantized with --gguf, or unquantized with --quantize f32"));
      check_quantizable(params.layout(), *quantized);
    }
    std::error_code ec;
    if (std::filesystem::exists(out, ec) && !std::filesystem::is_empty(out, ec))
      throw Error("the directory exists and is not empty; choose a new directory or remove it first");
    const std::filesystem::path temporary = out.string() + ".tmp";
    std::filesystem::remove_all(temporary, ec);
    std::filesystem::create_directories(temporary, ec);
    if (ec) throw Error(str("cannot create '", temporary.string(), "': ", ec.message()));

    nlohmann::json config = hf_config_json(model);
    config["torch_dtype"] = "float32";
    if (quantized)
      config["quantization_config"] =
          compressed_tensors_config(*quantized, model.tied_embeddings ? std::vector<std::string>{"lm_head"}
                                                                      : std::vector<std::string>{});
    nlohmann::json generation_config = {{"do_sample", true},
                                        {"temperature", generation.temperature},
                                        {"top_k", generation.top_k},
                                        {"top_p", generation.top_p}};
    if (tokenizer) {
      for (const char* key : {"bos_token_id", "eos_token_id"}) {
        config[key] = tokenizer->eos_token_id;
        generation_config[key] = tokenizer->eos_token_id;
      }
      std::filesystem::copy_file(tokenizer->tokenizer_json, temporary / "tokenizer.json", ec);
      if (ec) throw Error(str("cannot copy the tokenizer '", tokenizer->tokenizer_json.string(), "': ", ec.message()));
      write_json(temporary / "tokenizer_config.json",
                 {{"tokenizer_class", "PreTrainedTokenizerFast"},
                  {"bos_token", tokenizer->eos_token},
                  {"eos_token", tokenizer->eos_token},
                  {"model_max_length", params.layout().config().max_seq_len},
                  // Byte-level BPE decodes to the exact bytes; the clean-up would drop spaces before
                  // punctuation ("Hello ." -> "Hello.").
                  {"clean_up_tokenization_spaces", false}});
    }
    write_json(temporary / "config.json", config);
    write_json(temporary / "generation_config.json", generation_config);
    save_hf_safetensors(params, temporary / "model.safetensors", quantized);

    std::filesystem::remove(out, ec);  // an empty directory, if any
    std::filesystem::rename(temporary, out, ec);
    if (ec) throw Error(str("cannot rename '", temporary.string(), "' into place: ", ec.message()));
  });
}

}  // namespace dt::ckpt
