#include <cstdio>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/allocator.h"
#include "model/parameters.h"

namespace dt::cli {

int command_model_info(int argc, char** argv, int first) {
  Args args("model info", "print a model's parameter count, bytes per dtype and parameter list (allocates nothing)");
  declare_model_flags(args, "gpt2-124m");
  args.positional("[PRESET]", "the model preset, as --model names it (`dtrain model info llama3-8b`)");
  if (!args.parse(argc, argv, first)) return 0;
  const std::vector<std::string>& preset = args.positionals();
  if (preset.size() > 1 || (!preset.empty() && args.was_given("model")))
    throw Error(str("model info: give one preset, either as a word or as --model\n", args.usage()));
  const ModelConfig config = model_from_flags(args, preset.empty() ? "" : preset.front());
  const ParameterLayout layout(config);
  const long long n = layout.num_parameters();
  std::printf("%s: n_layer %d, d_model %d, n_head %d over %d key/value heads (head size %d), ffn_hidden %d, vocab %d "
              "(stored padded to %d), max_seq_len %d, %s embeddings%s%s\n",
              std::string(model_family_name(config.family)).c_str(), config.n_layer, config.d_model, config.n_head,
              config.kv_heads(), config.head_size(), config.ffn_hidden(), config.vocab_size, config.padded_vocab_size(),
              config.max_seq_len, config.tied_embeddings ? "tied" : "untied",
              config.qkv_bias ? ", biases on q, k and v" : "",
              config.qk_norm ? ", queries and keys RMS-normalized before rotary" : "");
  if (config.traits().positions == PositionKind::rotary)
    std::printf("rotary: theta %g%s\n", config.rope_theta,
                config.rope_scaling_factor > 0
                    ? str(", Llama 3 scaling factor ", config.rope_scaling_factor, " (low ", config.rope_low_freq_factor,
                          ", high ", config.rope_high_freq_factor, ", original context ",
                          config.rope_original_max_seq_len, ")")
                          .c_str()
                    : "");
  if (config.moe.experts > 0) {
    const MoeConfig& m = config.moe;
    std::printf("mixture of experts in blocks %d to %d: %d experts of hidden width %d, top %lld of %s scores%s%s%s\n",
                m.first_dense_layers, config.n_layer - 1, m.experts, m.expert_hidden,
                static_cast<long long>(m.routing.top_k),
                m.routing.score == kernels::MoeScore::softmax ? "softmax" : "sigmoid",
                m.routing.renormalize ? " renormalised" : "",
                m.routing.route_scale != 1 ? str(", scaled by ", m.routing.route_scale).c_str() : "",
                m.shared_hidden > 0 ? str("; a shared expert of width ", m.shared_hidden, m.shared_gate ? ", gated" : "")
                                          .c_str()
                                    : "");
    std::printf("parameters: %lld, %lld of them active per token\n", n,
                static_cast<long long>(layout.active_parameters()));
  } else {
    std::printf("parameters: %lld\n", n);
  }
  std::printf("bytes: fp32 %s, bf16/fp16 %s, fp8 %s\n", format_bytes(4.0 * n).c_str(), format_bytes(2.0 * n).c_str(),
              format_bytes(1.0 * n).c_str());
  for (const ParamInfo& p : layout.params())
    std::printf("  %-28s %-14s %12lld\n", p.name.c_str(), p.shape.to_string().c_str(), static_cast<long long>(p.numel()));
  return 0;
}

}  // namespace dt::cli
