// `dtrain plan CONFIG`: the memory per GPU by tag, the step's time by term and the throughput of
// a run configuration's layout on a hardware profile, as tables and as JSON; and the layouts and
// profiles it cannot use, named with the fix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

const std::string kConfig = str(DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml");
const std::string kTpSp = " parallel.tp=2 parallel.sp=true parallel.zero_stage=1";

TEST(PlanCli, PrintsMemoryByTagTheStepByTermAndThroughput) {
  const auto result = run_dtrain(str("plan ", kConfig, " --gpus 16", kTpSp));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* expected :
       {"dp 8 × cp 1 × tp 2 × pp 1 = 16 ranks on H100 SXM (8 per node); ZeRO 1, sequence parallel; micro-batch 16, "
        "4 per step",
        "memory per GPU (the largest rank)", "optimizer_state", "activations", "of 80.00: fits",
        "step time, the busiest rank", "GEMMs", "tensor-parallel collectives", "tokens/s;", "TFLOP/s per GPU",
        "of the H100 SXM's 989 TFLOP/s bf16"})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
}

// A mixture of experts is planned too, and the plan says what it assumes of the experts' rows:
// the worst case where dropless, the capacity's bound within one.
TEST(PlanCli, AnExpertModelsPlanStatesTheExpertRowsItAssumes) {
  const std::string moe = str("plan ", kConfig, " model.preset=\"moe-tiny\" model.vocab_size=256 data.seq_len=64");
  const auto dropless = run_dtrain(moe);
  ASSERT_EQ(dropless.status, 0) << dropless.output;
  EXPECT_NE(dropless.output.find("experts: 4 a block, top 2; dropless: the activations sized for the worst case, "
                                 "every token's 2 assignments ("),
            std::string::npos)
      << dropless.output;
  const auto bounded = run_dtrain(moe + " model.moe_capacity_factor=0.5");
  ASSERT_EQ(bounded.status, 0) << bounded.output;
  EXPECT_NE(bounded.output.find("within a capacity factor of 0.5: at most "), std::string::npos) << bounded.output;
  EXPECT_NE(bounded.output.find("GEMMs"), std::string::npos) << bounded.output;
}

// With train.fp8 the plan names the GEMMs it times at the FP8 peak (Llama 3.2 1B, whose GEMMs are
// large enough to gain); a profile without one refuses.
TEST(PlanCli, Fp8NamesTheGemmsAtTheFp8Peak) {
  const std::string llama = str(DTRAIN_SOURCE_DIR, "/configs/llama3.2-1b.toml --gpus 8");
  const auto fp8 = run_dtrain(str("plan ", llama, " train.fp8=tensorwise --json"));
  ASSERT_EQ(fp8.status, 0) << fp8.output;
  const auto j = nlohmann::json::parse(fp8.output);
  EXPECT_EQ(j["fp8"]["recipe"], "tensorwise");
  EXPECT_EQ(j["fp8"]["linears"], nlohmann::json::parse(R"(["attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"])"));
  EXPECT_EQ(j["fp8"]["peak_tflops"], 1979);
  const auto bf16 = nlohmann::json::parse(run_dtrain(str("plan ", llama, " --json")).output);
  EXPECT_LT(j["step_seconds"]["GEMMs"].get<double>(), bf16["step_seconds"]["GEMMs"].get<double>());
  const auto text = run_dtrain(str("plan ", kConfig, " train.fp8=delayed"));
  EXPECT_NE(text.output.find("FP8: delayed; the GEMMs of attn.qkv, attn.proj, mlp.fc, mlp.proj at the FP8 peak (1979 "
                             "TFLOP/s)"),
            std::string::npos)
      << text.output;
  const auto a100 = run_dtrain(str("plan ", kConfig, " train.fp8=tensorwise --gpu a100-80gb"));
  EXPECT_NE(a100.status, 0);
  EXPECT_NE(a100.output.find("has no FP8 peak (peak_tflops.fp8)"), std::string::npos) << a100.output;
}

// checkpoint.async: the staging of the largest rank's share is host memory. Under ZeRO 1 over 8
// dp ranks that rank (dp rank 0) stages its f32 parameters whole (the same as an f32 run's
// `parameters`, one tp rank's half of the model) and its eighth of the two moments (the same as
// `optimizer_state`): the MpiMemoryCell tests measure the staging exactly, rank by rank.
TEST(PlanCli, AsynchronousSavesStageTheLargestRanksShareInHostMemory) {
  const auto f32 = run_dtrain(str("plan ", kConfig, " --gpus 16 --json train.precision=f32", kTpSp));
  ASSERT_EQ(f32.status, 0) << f32.output;
  EXPECT_FALSE(nlohmann::json::parse(f32.output).contains("host_memory_bytes"));
  const auto async = run_dtrain(str("plan ", kConfig, " --gpus 16 --json train.precision=f32 checkpoint.async=true", kTpSp));
  ASSERT_EQ(async.status, 0) << async.output;
  const nlohmann::json j = nlohmann::json::parse(async.output);
  EXPECT_EQ(j["host_memory_bytes"]["checkpoint_staging"].get<size_t>(),
            j["memory_bytes"]["parameters"].get<size_t>() + j["memory_bytes"]["optimizer_state"].get<size_t>());
  const auto text = run_dtrain(str("plan ", kConfig, " --gpus 16 checkpoint.async=true", kTpSp));
  EXPECT_NE(text.output.find("checkpoint staging (checkpoint.async)"), std::string::npos) << text.output;
}

// The JSON holds the same figures, and they add up: the tags to the total, the terms to the step,
// the batch's tokens over the step to tokens/s.
TEST(PlanCli, JsonHoldsTheFiguresAndTheyAddUp) {
  const auto result = run_dtrain(str("plan ", kConfig, " --gpus 16 --gpu h200 --json", kTpSp));
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json j = nlohmann::json::parse(result.output);
  EXPECT_EQ(j["profile"], "H200 SXM");
  EXPECT_EQ(j["gpus"], 16);
  EXPECT_EQ(j["layout"]["dp"], 8);
  EXPECT_EQ(j["layout"]["tp"], 2);
  EXPECT_EQ(j["layout"]["micro_batches"], 4);
  double tags = 0;
  for (const char* tag : {"parameters", "gradients", "optimizer_state", "activations", "communication", "workspace", "checkpoint"})
    tags += j["memory_bytes"][tag].get<double>();
  EXPECT_EQ(tags, j["memory_bytes"]["total"].get<double>());
  EXPECT_EQ(j["memory_bytes"]["available"].get<double>(), 141.0 * (1 << 30));
  EXPECT_TRUE(j["fits"].get<bool>());
  double terms = 0;
  for (const auto& [name, seconds] : j["step_seconds"].items())
    if (name != "total") terms += seconds.get<double>();
  // The total is the same terms summed in another order (makespan = work + bubble): a step of
  // about 0.07 s carries rounding of order 1e-17 s, and a missing term would be above 1e-5 s.
  EXPECT_NEAR(terms, j["step_seconds"]["total"].get<double>(), 1e-12);
  EXPECT_GT(j["step_seconds"]["tensor-parallel collectives"].get<double>(), 0);
  // tokens / total x total: two roundings of 524,288 (about 1e-10); a wrong token count is off by
  // thousands.
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["step_seconds"]["total"].get<double>(), 512.0 * 1024, 1e-6);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1);
}

TEST(PlanCli, LayoutsAndProfilesItCannotUseAreNamedWithTheFix) {
  const auto odd = run_dtrain(str("plan ", kConfig, " --gpus 7 parallel.tp=2"));
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.output.find("--gpus 7 cannot hold the configuration's layout: parallel.tp 2 x pp 1 x cp 1 = 2 GPUs per "
                            "data-parallel replica; give a multiple of 2"),
            std::string::npos)
      << odd.output;
  const auto batch = run_dtrain(str("plan ", kConfig, " --gpus 6 parallel.tp=2"));
  EXPECT_NE(batch.output.find("on 6 GPUs parallel.dp is 3, and train.global_batch_size 512 is not a multiple of "
                              "train.micro_batch_size 16 x dp 3 = 48"),
            std::string::npos)
      << batch.output;
  const auto profile = run_dtrain(str("plan ", kConfig, " --gpu h300"));
  EXPECT_NE(profile.output.find("no hardware profile 'h300'"), std::string::npos) << profile.output;
  const auto none = run_dtrain("plan --gpus 8");
  EXPECT_NE(none.output.find("plan: no configuration file given"), std::string::npos) << none.output;
  // A model that does not fit says so beside the figures.
  const auto big = run_dtrain(str("plan ", kConfig, " model.preset=llama3.2-1b model.vocab_size=128256 "
                                                    "train.micro_batch_size=64 data.seq_len=2048 --gpus 8"));
  EXPECT_NE(big.output.find("does NOT fit"), std::string::npos) << big.output;
}

// --search ranks the layouts that fit, each with what it pays, and names the first's overrides;
// a count no layout can use, and a model no layout of the count fits, are named with the fix.
TEST(PlanCli, SearchRanksTheLayoutsThatFitAndNamesWhatCannot) {
  const auto result = run_dtrain(str("plan ", kConfig, " --search --gpus 8 --top 3"));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* expected : {"on 8 GPUs of H100 SXM (8 per node)", "valid,", "fit in 80.00 GiB; the fastest 3:",
                               "what it pays (share of the step)", "  1     8   1   1   1  -",
                               "itemized: dtrain plan ", "parallel.tp=1 parallel.pp=1"})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  EXPECT_EQ(result.output.find("  4 "), std::string::npos) << result.output;
  const auto json = run_dtrain(str("plan ", kConfig, " --search --gpus 8 --top 2 --json"));
  ASSERT_EQ(json.status, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  ASSERT_EQ(j["layouts"].size(), 2u);
  EXPECT_LE(j["layouts"][0]["step_seconds"].get<double>(), j["layouts"][1]["step_seconds"].get<double>() * 1.005);
  const auto none = run_dtrain(str("plan ", kConfig, " --search --gpus 13"));
  EXPECT_NE(none.output.find("no layout of 13 GPUs can run"), std::string::npos) << none.output;
  const auto big = run_dtrain(str("plan ", kConfig, " --search --gpus 8 model.preset=llama3-70b "
                                                    "train.micro_batch_size=1 data.seq_len=2048"));
  EXPECT_NE(big.status, 0);
  EXPECT_NE(big.output.find("layouts of 8 GPUs fits in 80.00 GiB of H100 SXM; its leanest layouts (ZeRO 3, or 1 "
                            "under a pipeline, full recomputation, micro-batches of one) fit on 16 GPUs"),
            std::string::npos)
      << big.output;
}

}  // namespace
}  // namespace dt
