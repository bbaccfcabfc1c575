// Hugging Face names and layouts, checked against transformers itself (tests/reference/hf_reference.py):
// a model saved by transformers loads here and gives its logits, and a model saved here loads
// in transformers and gives ours.
#include "ckpt/hf_checkpoint.h"

#include <gtest/gtest.h>

#include "ckpt/hf_export.h"
#include "ckpt/safetensors.h"
#include "model/transformer.h"
#include "tests/gradcheck.h"
#include "tests/hf_testing.h"
#include "tests/testing.h"

namespace dt::ckpt {
namespace {

using testing::HfCase;
using testing::sized;
using testing::TempDir;

constexpr int kSeq = 23;


class HfCheckpoint : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfCheckpoint, TransformersFilesLoadHereAndOursLoadInTransformers) {
  const ModelConfig& config = GetParam().model;
  const std::string tokens = testing::hf_token_list(config.vocab_size, kSeq);
  TempDir dir;
  ASSERT_EQ(testing::run_reference_script("hf_reference.py", str("make ", dir.path().string(), " ", testing::hf_make_args(config))), 0);
  const std::string theirs = dir.file("model.safetensors");

  Transformer model(config, 1, kSeq);
  load_hf_safetensors(model.params(), theirs);
  const testing::OwnedTensor logits = testing::hf_test_logits(model, kSeq);
  ASSERT_EQ(testing::run_reference_script(
                "hf_reference.py", str("logits ", dir.path().string(), " ", theirs, " ", tokens, " ",
                                       dir.file("their_logits.safetensors"))),
            0);
  const LoadedTensor reference =
      SafetensorsReader(dir.file("their_logits.safetensors")).read("logits", MemTag::workspace);
  // fp32 on both sides with different summation orders. model/pytorch_equivalence_test.cpp holds
  // plain torch.nn modules to 1.6e-6 (4x its measured 3.9e-7); transformers' modules sum in
  // orders of their own, not measured against that bound, so this one stays at 1e-5.
  EXPECT_LE(testing::normalized_max_error(logits.t, reference.tensor), 1e-5);

  save_hf_safetensors(model.params(), dir.file("ours.safetensors"));
  ASSERT_EQ(testing::run_reference_script(
                "hf_reference.py", str("logits ", dir.path().string(), " ", dir.file("ours.safetensors"), " ",
                                       tokens, " ", dir.file("from_ours.safetensors"))),
            0);
  const LoadedTensor from_ours =
      SafetensorsReader(dir.file("from_ours.safetensors")).read("logits", MemTag::workspace);
  // The same weights reach transformers, so it reproduces its own logits exactly.
  EXPECT_EQ(testing::normalized_max_error(from_ours.tensor, reference.tensor), 0.0);
}

// `dtrain export --hf`'s directory, loaded the way a user loads a model: from_pretrained.
TEST_P(HfCheckpoint, AnExportedDirectoryLoadsWithFromPretrainedAndGivesOurLogits) {
  const ModelConfig& config = GetParam().model;
  const std::string tokens = testing::hf_token_list(config.vocab_size, kSeq);
  TempDir dir;
  Transformer model(config, 1, kSeq);
  init_parameters(model.params(), 11);
  const testing::OwnedTensor logits = testing::hf_test_logits(model, kSeq);
  export_hf(model.params(), std::nullopt, {}, dir.path() / "exported");
  ASSERT_EQ(testing::run_reference_script("hf_reference.py", str("pretrained ", dir.file("exported"), " ",
                                                                 tokens, " ", dir.file("theirs.safetensors"))),
            0);
  const LoadedTensor theirs = SafetensorsReader(dir.file("theirs.safetensors")).read("logits", MemTag::workspace);
  // fp32 on both sides with different summation orders, as above.
  EXPECT_LE(testing::normalized_max_error(logits.t, theirs.tensor), 1e-5);
  // A second export never writes into a directory that holds something.
  EXPECT_THROW(export_hf(model.params(), std::nullopt, {}, dir.path() / "exported"), Error);
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfCheckpoint,
    ::testing::Values(HfCase{"gpt2", sized("gpt2-tiny", 97, 64)},
                      // 6 heads over 2 KV heads, untied, Llama 3 rope scaling in all three bands.
                      HfCase{"llama_gqa_untied_scaled",
                             [] {
                               ModelConfig c = sized("llama-tiny", 97, 128);
                               c.rope_theta = 10000, c.rope_scaling_factor = 8, c.rope_original_max_seq_len = 64;
                               return c;
                             }()},
                      // Multi-query, tied embeddings.
                      HfCase{"llama_mqa_tied",
                             [] {
                               ModelConfig c = sized("llama-tiny", 61, 64);
                               c.n_kv_head = 1, c.tied_embeddings = true;
                               return c;
                             }()},
                      // Mixtral: 4 experts, each token's top 2.
                      HfCase{"mixtral", sized("moe-tiny", 97, 64)},
                      // Qwen2: Llama's block with biases on q, k and v.
                      HfCase{"qwen2",
                             [] {
                               ModelConfig c = sized("llama-tiny", 97, 64);
                               c.qkv_bias = true;
                               return c;
                             }()},
                      // OLMoE: the queries' and keys' RMSNorms, then 4 experts (top 2, not
                      // renormalized), multi-head.
                      HfCase{"olmoe",
                             [] {
                               ModelConfig c = sized("moe-tiny", 97, 64);
                               c.qk_norm = true, c.n_kv_head = c.n_head, c.moe.routing.renormalize = false;
                               return c;
                             }()},
                      // Qwen2-MoE: a dense first block, then 6 experts (top 2, not renormalized)
                      // beside a gated shared expert, with Qwen's q, k, v biases.
                      HfCase{"qwen2_moe",
                             [] {
                               ModelConfig c = sized("moe-tiny", 97, 64);
                               c.n_layer = 3, c.qkv_bias = true;
                               c.moe.experts = 6, c.moe.routing.renormalize = false, c.moe.first_dense_layers = 1;
                               c.moe.shared_hidden = 40, c.moe.shared_gate = true;
                               return c;
                             }()}),
    [](const auto& info) { return std::string(info.param.name); });

std::string load_error(const ModelConfig& config, const std::string& path) {
  try {
    Transformer model(config, 1, 4);
    load_hf_safetensors(model.params(), path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfCheckpoint, WrongFamilyMissingTensorAndWrongSizeAreNamed) {
  TempDir dir;
  const ModelConfig llama = sized("llama-tiny", 61, 64);
  {
    Transformer model(llama, 1, 4);
    save_hf_safetensors(model.params(), dir.file("llama.safetensors"));
  }
  const std::string family = load_error(sized("gpt2-tiny", 61, 64), dir.file("llama.safetensors"));
  EXPECT_NE(family.find("holds a llama model, but the model being loaded is gpt2"), std::string::npos) << family;

  ModelConfig wider = llama;
  wider.ffn_hidden_size = 64;
  const std::string size = load_error(wider, dir.file("llama.safetensors"));
  EXPECT_NE(size.find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape (128, 48) but the model needs (64, 48)"),
            std::string::npos)
      << size;

  // The same file without one tensor.
  const SafetensorsReader full(dir.file("llama.safetensors"));
  std::vector<LoadedTensor> kept;
  SafetensorsWriter writer;
  for (const std::string& name : full.names()) {
    if (name == "model.layers.1.mlp.up_proj.weight") continue;
    kept.push_back(full.read(name, MemTag::workspace));
    writer.add(name, kept.back().tensor);
  }
  writer.write(dir.file("missing.safetensors"));
  const std::string missing = load_error(llama, dir.file("missing.safetensors"));
  EXPECT_NE(missing.find("missing.safetensors' has no tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos)
      << missing;

  ModelConfig tied = llama;
  tied.tied_embeddings = true;
  const std::string untied = load_error(tied, dir.file("llama.safetensors"));
  EXPECT_NE(untied.find("tensor 'lm_head.weight' has no place in this llama model (the file's output embedding is "
                        "untied; set tied_embeddings = false)"),
            std::string::npos)
      << untied;
}

}  // namespace
}  // namespace dt::ckpt
