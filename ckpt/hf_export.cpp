#include "ckpt/hf_export.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/hf_checkpoint.h"
#include "ckpt/hf_config.h"
#include "core/error.h"

namespace dt::ckpt {

namespace {

void write_json(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream out(path, std::ios::trunc);
  out << json.dump(2) << "\n";
  if (!out.flush()) throw Error(str("cannot write '", path.string(), "' (is the disk full?)"));
}

}  // namespace

void export_hf(const FlatTensors& params, const std::optional<HfTokenizerFiles>& tokenizer,
               const HfGenerationDefaults& generation, const std::filesystem::path& out) {
  with_context(str("exporting a Hugging Face model to '", out.string(), "'"), [&] {
    std::error_code ec;
    if (std::filesystem::exists(out, ec) && !std::filesystem::is_empty(out, ec))
      throw Error("the directory exists and is not empty; choose a new directory or remove it first");
    const std::filesystem::path temporary = out.string() + ".tmp";
    std::filesystem::remove_all(temporary, ec);
    std::filesystem::create_directories(temporary, ec);
    if (ec) throw Error(str("cannot create '", temporary.string(), "': ", ec.message()));

    nlohmann::json config = hf_config_json(params.layout().config());
    config["torch_dtype"] = "float32";
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
    save_hf_safetensors(params, temporary / "model.safetensors");

    std::filesystem::remove(out, ec);  // an empty directory, if any
    std::filesystem::rename(temporary, out, ec);
    if (ec) throw Error(str("cannot rename '", temporary.string(), "' into place: ", ec.message()));
  });
}

}  // namespace dt::ckpt
