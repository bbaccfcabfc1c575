#include "cli/model_source.h"

#include "ckpt/checkpoint.h"
#include "ckpt/hf_checkpoint.h"
#include "ckpt/hf_config.h"
#include "core/error.h"
#include "model/quantized_weights.h"
#include "train/training_checkpoint.h"

namespace dt::cli {

void declare_model_source_flags(Args& args) {
  args.flag("checkpoint", "", "a training checkpoint: a step directory, or a checkpoint root (its latest step)")
      .flag("hf", "", "a Hugging Face model directory (config.json and model.safetensors)")
      .flag("quantize", "none", "run the linear layers' weights as int8, q8_0 or q4_0 would store them "
                                "(post-training quantization), or none");
}

ModelWeights weights_from_checkpoint(const std::filesystem::path& step_or_root) {
  const ckpt::Checkpoint c(ckpt::Checkpoint::step_or_latest(step_or_root));
  ModelWeights w;
  w.layout = std::make_unique<ParameterLayout>(model_config_of(c));
  w.params = std::make_unique<FlatTensors>(*w.layout, MemTag::parameters);
  load_checkpoint_parameters(c, *w.params);
  w.origin = str("checkpoint ", c.directory().string(), " (step ", c.step(), ")");
  return w;
}

ModelWeights weights_from_hf(const std::filesystem::path& directory) {
  ModelWeights w;
  w.layout = std::make_unique<ParameterLayout>(ckpt::model_config_from_hf(directory / "config.json"));
  w.params = std::make_unique<FlatTensors>(*w.layout, MemTag::parameters);
  ckpt::load_hf_safetensors(*w.params, directory / "model.safetensors");
  w.origin = str("Hugging Face model ", directory.string());
  return w;
}

ModelWeights model_weights_from_flags(const Args& args) {
  const std::string checkpoint = args.get("checkpoint"), hf = args.get("hf");
  if (checkpoint.empty() == hf.empty())
    throw Error("give the weights with exactly one of --checkpoint DIR (a training checkpoint) or --hf DIR "
                "(a Hugging Face model directory)");
  ModelWeights weights = checkpoint.empty() ? weights_from_hf(hf) : weights_from_checkpoint(checkpoint);
  if (args.get("quantize") != "none") {
    fake_quantize_weights(*weights.params, kernels::parse_weight_format(args.get("quantize")));
    weights.origin += str(", quantized to ", args.get("quantize"));
  }
  return weights;
}

}  // namespace dt::cli
