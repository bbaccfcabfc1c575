// The run configuration: defaults, presets and overrides, every mistake reported at once with
// its file, key, value and fix, the resolved TOML loading back to the same configuration, and
// the derived quantities against numbers computed here independently.
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "ckpt/hf_config.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "data/token_shard.h"
#include "tests/gpt2_sizes.h"
#include "tests/testing.h"
#include "train/run_config_keys.h"

namespace dt {
namespace {

// Writes `text` as <dir>/run.toml and returns its path.
std::filesystem::path write_config(const testing::TempDir& dir, const std::string& text,
                                   const std::string& name = "run.toml") {
  std::ofstream(dir.path() / name) << text;
  return dir.path() / name;
}

// The message of the dt::Error that loading throws ("" when it loads).
std::string load_error(const std::filesystem::path& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_run_config(path, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kTiny = "[model]\npreset = \"gpt2-tiny\"\n[data]\nseq_len = 64\n";

TEST(RunConfig, MinimalConfigFillsEveryDefault) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, kTiny, "tiny.toml"));
  const RunConfig defaults;
  EXPECT_EQ(c.source, dir.path() / "tiny.toml");
  EXPECT_EQ(c.model_preset, "gpt2-tiny");
  EXPECT_EQ(c.model.n_layer, model_preset("gpt2-tiny").n_layer);
  EXPECT_EQ(c.model.vocab_size, 997);
  EXPECT_EQ(c.train.steps, defaults.train.steps);
  EXPECT_EQ(c.train.micro_batch_size, defaults.train.micro_batch_size);
  EXPECT_EQ(c.train.precision, DType::f32);
  EXPECT_EQ(c.lr.peak_lr, defaults.lr.peak_lr);
  EXPECT_EQ(c.lr.total_steps, c.train.steps);  // the schedule spans the run
  EXPECT_EQ(c.adamw.beta2, defaults.adamw.beta2);
  EXPECT_EQ(c.loss_scale.config.initial_scale, defaults.loss_scale.config.initial_scale);
  EXPECT_EQ(c.sample.top_p, defaults.sample.top_p);
  EXPECT_EQ(c.log.run_dir, std::filesystem::path("runs/tiny"));  // named after the file
  EXPECT_EQ(c.checkpoint_dir(), std::filesystem::path("runs/tiny/checkpoints"));
  EXPECT_EQ(c.accumulation_steps(), 1);
}

TEST(RunConfig, ExplicitFieldsOverrideThePreset) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(
      dir, "[model]\npreset = \"gpt2-124m\"\nvocab_size = 4096\nmax_seq_len = 256\n[data]\nseq_len = 256\n"));
  EXPECT_EQ(c.model.vocab_size, 4096);
  EXPECT_EQ(c.model.max_seq_len, 256);
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.d_model, 768);
}

TEST(RunConfig, AFamilyWithEverySizeNeedsNoPreset) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, R"([model]
family = "llama"
n_layer = 2
d_model = 64
n_head = 4
n_kv_head = 2
ffn_hidden_size = 160
vocab_size = 1000
max_seq_len = 128
tied_embeddings = false
rope_theta = 500000.0
[data]
seq_len = 128
)"));
  EXPECT_TRUE(c.model_preset.empty());
  EXPECT_EQ(c.model.family, ModelFamily::llama);
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_FALSE(c.model.tied_embeddings);
}

TEST(RunConfig, CommandLineOverridesAreTomlValuesOrBareWords) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, kTiny),
                                      {"optim.lr=1e-3", "data.shuffle=false", "train.precision=\"bf16\"",
                                       "train.recompute=full", "data.dir=/tmp/some/shards", "sample.prompt=1999",
                                       "train.steps=20", "optim.warmup_steps=5"});
  EXPECT_EQ(c.lr.peak_lr, 1e-3f);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.train.precision, DType::bf16);
  EXPECT_EQ(c.train.recompute, Recompute::full);
  EXPECT_EQ(c.data.dir, std::filesystem::path("/tmp/some/shards"));
  EXPECT_EQ(c.sample.prompt, "1999");  // a string key takes the text as typed
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.lr.total_steps, 20);
  EXPECT_EQ(c.lr.warmup_steps, 5);
}

TEST(RunConfig, AnUnknownOverrideGetsADidYouMean) {
  testing::TempDir dir;
  const std::string e = load_error(write_config(dir, kTiny), {"optim.lrr=1e-3", "trian.steps=3", "steps"});
  EXPECT_NE(e.find("command line: optim.lrr = 0.001: unknown key (did you mean optim.lr?)"), std::string::npos) << e;
  EXPECT_NE(e.find("command line: [trian]: unknown section (did you mean [train]?)"), std::string::npos) << e;
  EXPECT_NE(e.find("command line: 'steps': write an override as section.key=value"), std::string::npos) << e;
}

TEST(RunConfig, EveryMistakeIsReportedAtOnceOnItsOwnLine) {
  testing::TempDir dir;
  const auto path = write_config(dir, R"([model]
preset = "gpt2-tiny"
[data]
seq_len = 100
[train]
steps = "1000"
micro_batch_size = 16
global_batch_size = 100
precision = "fp16"
[optim]
lrr = 3e-4
beta2 = 1.0
[optimizer]
lr = 1
[sample]
top_p = 1.5
)");
  const std::string e = load_error(path, {"sample.temperature=0"});
  const std::string f = path.string();
  const std::vector<std::string> lines = {
      "has 9 problems:",
      f + ":4: data.seq_len = 100: must be in [1, model.max_seq_len = 64]",
      f + ":6: train.steps = \"1000\": expected an integer, got a string; write it without quotes",
      f + ":8: train.global_batch_size = 100: must be a multiple of train.micro_batch_size * parallel.dp = 16 * 1 = "
          "16 (a step accumulates whole micro-batches); set global_batch_size = 96 or 112, or micro_batch_size = one "
          "of 2, 4, 5, 10, 20, 25",
      f + ":9: train.precision = \"fp16\": must be one of f32, bf16, f16 (did you mean f16?)",
      f + ":11: optim.lrr = 0.0003: unknown key (did you mean optim.lr?)",
      f + ":12: optim.beta2 = 1: must be in [0, 1)",
      f + ":13: [optimizer]: unknown section (did you mean [optim]?)",
      f + ":16: sample.top_p = 1.5: must be in (0, 1] (1: no nucleus cut)",
      "command line: sample.temperature = 0.0: must be finite and above 0",
  };
  for (const auto& line : lines) EXPECT_NE(e.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << e;
  // One problem per line, in file order, the command line last.
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 9) << e;
  EXPECT_LT(e.find(":4: "), e.find(":16: "));
  EXPECT_LT(e.find(":16: "), e.find("command line"));
}

// Quantization-aware training's refusals, each naming the fix: blocks of 32 over rows of 48,
// FP8 on top, the GPU, experts, a tp rank's rows not whole blocks, and quantized inputs without
// quantized weights; int8, whose scale is a whole row's, under any tp.
TEST(RunConfig, QuantizationAwareTrainingRefusesWhatItCannotDo) {
  testing::TempDir dir;
  const auto path = write_config(dir, kTiny);
  const auto problem = [&](const std::vector<std::string>& overrides) { return load_error(path, overrides); };
  EXPECT_NE(problem({"train.qat=q4_0"}).find("train.qat = \"q4_0\": q4_0 quantizes rows in blocks of 32, and these "
                                             "weights' rows are not a multiple of that: h.0.attn.qkv.weight (144 x 48)"),
            std::string::npos);
  EXPECT_NO_THROW(load_run_config(path, {"train.qat=int8"}));  // int8's scale is per row: any length
  const std::vector<std::string> wide = {"model.d_model=64", "model.n_head=4"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), wide.begin(), wide.end());
    return problem(more);
  };
  EXPECT_NO_THROW(load_run_config(path, {"train.qat=q4_0", "model.d_model=64", "model.n_head=4"}));
  EXPECT_NE(with({"train.qat=q8_0", "train.fp8=tensorwise", "train.precision=bf16"})
                .find("train.qat = \"q8_0\": FP8 training would quantize the fake-quantized weights again"),
            std::string::npos);
  EXPECT_NE(with({"train.qat=q8_0", "train.device=cuda"}).find("train.qat = \"q8_0\": runs on the CPU only so far"),
            std::string::npos);
  EXPECT_NE(problem({"train.qat_activations=int8"})
                .find("train.qat_activations = \"int8\": quantizes the inputs of the layers whose weights train.qat "
                      "quantizes; set train.qat too"),
            std::string::npos);
  EXPECT_NE(problem({"train.qat=int8", "train.qat_activations=int4"})
                .find("train.qat_activations = \"int4\": must be one of none, int8"),
            std::string::npos);
  // int8's scale is the whole row's, gathered over the ranks: any tp.
  EXPECT_NO_THROW(load_run_config(path, {"train.qat=int8", "parallel.tp=4", "model.d_model=64", "model.n_head=4"}));
  EXPECT_NE(with({"train.qat=q4_0", "parallel.tp=4"})
                .find("train.qat = \"q4_0\": linear layer attn.proj's weight has rows of 16 on tensor-parallel rank 0, "
                      "which q4_0's blocks of 32 do not divide"),
            std::string::npos);
  EXPECT_NE(problem({"train.qat=q4_0", "model.preset=moe-tiny"})
                .find("train.qat = \"q4_0\": the experts' weights are not quantized yet"),
            std::string::npos);
  EXPECT_NE(problem({"train.qat=q4_k"}).find("train.qat = \"q4_k\": must be one of none, int8, q8_0, q4_0"),
            std::string::npos);
}

// MLflow is reached over HTTP (train/mlflow_tracker.h): a file store's URI, as MLflow's own
// client would take it, is refused with how to serve it.
TEST(RunConfig, MlflowNeedsAServersAddress) {
  testing::TempDir dir;
  const auto path = write_config(dir, std::string(kTiny) + "[mlflow]\nuri = \"file:///tmp/mlruns\"\nexperiment = \"\"\n"
                                                           "end_wait_s = -1\n");
  const std::string e = load_error(path);
  EXPECT_NE(e.find("mlflow.uri = \"file:///tmp/mlruns\": must be an MLflow server's http:// or https:// address "
                   "(dtrain speaks its REST API; for a local store, start `mlflow server --backend-store-uri DIR` "
                   "and give its address)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("mlflow.experiment = \"\": must name an experiment"), std::string::npos) << e;
  EXPECT_NE(e.find("mlflow.end_wait_s = -1.0: must be at least 0"), std::string::npos) << e;
  EXPECT_NE(load_error(path, {"mlflow.uri=http://host:5000/", "mlflow.experiment=x", "mlflow.end_wait_s=0"})
                .find("mlflow.uri = \"http://host:5000/\": must not end with '/'"),
            std::string::npos);
}

TEST(RunConfig, WrongTypesNameTheExpectedType) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, std::string(kTiny) + "[optim]\nlr = \"fast\"\ndecay_embeddings = 1\n"
                                                                   "[train]\nmicro_batch_size = 2.5\n"));
  EXPECT_NE(e.find("optim.lr = \"fast\": expected a number, got a string"), std::string::npos) << e;
  EXPECT_NE(e.find("optim.decay_embeddings = 1: expected true or false, got an integer"), std::string::npos) << e;
  EXPECT_NE(e.find("train.micro_batch_size = 2.5: expected an integer, got a float"), std::string::npos) << e;
}

TEST(RunConfig, ValuesOutOfRangeNameTheirRange) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, std::string(kTiny) + R"([train]
steps = 0
micro_batch_size = 0
grad_clip = -1.0
[optim]
lr = 0.0
warmup_steps = 10
decay_steps = 5
[checkpoint]
keep_last = 0
[sample]
top_k = 5000
[loss_scale]
initial = -4.0
)"));
  for (const char* line :
       {"train.steps = 0: must be at least 1", "train.micro_batch_size = 0: must be at least 1",
        "train.grad_clip = -1.0: must be finite and at least 0", "optim.lr = 0.0: must be finite and above 0",
        "optim.warmup_steps = 10: must be in [0, train.steps = 0]",
        "optim.decay_steps = 5: is used only by decay = \"wsd\"", "checkpoint.keep_last = 0: must be at least 1",
        "sample.top_k = 5000: must be in [0, model.vocab_size = 997]",
        "loss_scale.initial = -4: must be finite and above 0"})
    EXPECT_NE(e.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << e;
}

TEST(RunConfig, AFamilyThatDisagreesWithThePresetIsNamed) {
  testing::TempDir dir;
  const auto e = load_error(
      write_config(dir, "[model]\npreset = \"gpt2-124m\"\nfamily = \"llama\"\nrope_theta = 1e4\n[data]\nseq_len = 64\n"));
  EXPECT_NE(e.find("run.toml:3: model.family = \"llama\": disagrees with preset gpt2-124m (a gpt2 model); remove "
                   "model.family or choose a llama preset"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("model.rope_theta = 10000.0: gpt2 models have learned position embeddings"), std::string::npos) << e;
}

// The moe_ keys describe a mixture of experts: taken on one (a preset's, or one the file makes
// with moe_experts), refused on a dense model, and written back only for a model with experts.
TEST(RunConfig, ExpertKeysApplyToAMixtureOfExpertsOnly) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, "[model]\npreset = \"llama-tiny\"\nmoe_top_k = 4\n[data]\nseq_len = 64\n"));
  EXPECT_NE(e.find("run.toml:3: model.moe_top_k = 4: describes a mixture of experts, and this model's MLPs are dense"),
            std::string::npos)
      << e;
  const RunConfig moe = load_run_config(
      write_config(dir, "[model]\npreset = \"moe-tiny\"\nmoe_top_k = 1\nmoe_shared_hidden = 16\n[data]\nseq_len = 64\n"));
  EXPECT_EQ(moe.model.moe.routing.top_k, 1);
  EXPECT_EQ(moe.model.moe.shared_hidden, 16);
  EXPECT_NE(resolved_toml(moe).find("moe_top_k                 = 1\n"), std::string::npos);
  const RunConfig made = load_run_config(write_config(
      dir, "[model]\npreset = \"llama-tiny\"\nmoe_expert_hidden = 32\nmoe_experts = 8\n[data]\nseq_len = 64\n"));
  EXPECT_EQ(made.model.moe.experts, 8);  // moe_experts may come after the keys it enables
  const RunConfig dense = load_run_config(write_config(dir, "[model]\npreset = \"llama-tiny\"\n[data]\nseq_len = 64\n"));
  EXPECT_EQ(resolved_toml(dense).find("moe_"), std::string::npos);
  EXPECT_NE(load_error(write_config(dir, "[model]\npreset = \"moe-tiny\"\nmoe_top_k = 5\n[data]\nseq_len = 64\n"))
                .find("model.moe_top_k = 5: must be in [1, moe_experts = 4]"),
            std::string::npos);
}

TEST(RunConfig, AModelNeedsAPresetOrEverySize) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, "[model]\nfamily = \"gpt2\"\nn_layer = 2\n"));
  EXPECT_NE(e.find("[model] gives neither a preset nor a whole description (missing d_model, n_head, vocab_size, "
                   "max_seq_len); set model.preset to one of gpt2-124m"),
            std::string::npos)
      << e;
  const auto unknown = load_error(write_config(dir, "[model]\npreset = \"gpt2-125m\"\n"));
  EXPECT_NE(unknown.find("model.preset = \"gpt2-125m\": must be one of gpt2-124m"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("(did you mean gpt2-124m?)"), std::string::npos) << unknown;
}

TEST(RunConfig, ModelFieldProblemsNameTheirKeys) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, std::string(kTiny) + "[model]\nd_model = 50\n", "m.toml"));
  // [model] appears twice: a TOML error, reported with file:line:column.
  EXPECT_NE(e.find("m.toml:5:"), std::string::npos) << e;
  const auto sizes = load_error(write_config(dir, "[model]\npreset = \"gpt2-tiny\"\nd_model = 50\n[data]\nseq_len = 64\n"));
  EXPECT_NE(sizes.find("run.toml:3: model.d_model = 50: must be divisible by n_head = 3"), std::string::npos) << sizes;
}

TEST(RunConfig, EveryParallelismIsBuilt) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, std::string(kTiny) +
                                                  "[parallel]\ndp = 2\ntp = 2\npp = 2\ncp = 2\n"
                                                  "zero_stage = 1\nsp = true\n[train]\nglobal_batch_size = 16\n"));
  EXPECT_EQ(e, "");
}

// Expert parallelism shares out the experts of a model that has them over ep of the dp × cp ranks.
TEST(RunConfig, ExpertParallelismThatCannotSplitNamesWhatWould) {
  testing::TempDir dir;
  // 4 experts
  const std::string moe = "[model]\npreset = \"moe-tiny\"\n[data]\nseq_len = 64\n[train]\nmicro_batch_size = 1\n";
  EXPECT_EQ(load_error(write_config(dir, moe), {"parallel.dp=2", "parallel.cp=2", "parallel.ep=4"}), "");
  const auto uneven =
      load_error(write_config(dir, moe), {"parallel.dp=3", "parallel.ep=2", "train.global_batch_size=6"});
  EXPECT_NE(uneven.find("parallel.ep = 2: expert parallelism spreads the experts over ep of the dp × cp = 3 ranks "
                        "that hold the same other parameters, and 2 does not divide 3; use parallel.ep = 1, 3, or "
                        "parallel.dp a multiple of 2"),
            std::string::npos)
      << uneven;
  const auto dense = load_error(write_config(dir, kTiny), {"parallel.dp=2", "parallel.ep=2"});
  EXPECT_NE(dense.find("parallel.ep = 2: expert parallelism spreads a mixture of experts' experts over ranks, and "
                       "this model's MLPs are dense (model.moe_experts = 0); set parallel.ep = 1"),
            std::string::npos)
      << dense;
  const auto few = load_error(write_config(dir, moe), {"parallel.dp=8", "parallel.ep=8", "train.global_batch_size=8"});
  EXPECT_NE(few.find("parallel.ep = 8: each of the 8 expert-parallel ranks holds at least one expert, and the model "
                     "has 4 (model.moe_experts); use parallel.ep <= 4"),
            std::string::npos)
      << few;
}

// Context parallelism cuts 64-token sequences into 2 x cp chunks (zig-zag) or cp.
TEST(RunConfig, ContextParallelSizesTheSequenceCannotTakeNameASizeThatWorks) {
  testing::TempDir dir;
  EXPECT_EQ(load_error(write_config(dir, kTiny), {"parallel.cp=4", "data.seq_len=30"}), "");  // padded to 32
  const auto short_seq = load_error(write_config(dir, kTiny), {"parallel.cp=4", "data.seq_len=6"});
  EXPECT_NE(short_seq.find("parallel.cp = 4: context parallelism cuts each sequence into 8 chunks (2 x parallel.cp, "
                           "zig-zag), and data.seq_len = 6 leaves some without a token; use parallel.cp <= 3, or "
                           "parallel.cp_zigzag = false"),
            std::string::npos)
      << short_seq;
  const auto positions = load_error(write_config(dir, kTiny), {"parallel.cp=3", "data.seq_len=62"});
  EXPECT_NE(positions.find("context parallelism pads sequences of 62 tokens to 66 (6 equal chunks), beyond "
                           "model.max_seq_len = 64; use a data.seq_len that is a multiple of 6, or at most 60"),
            std::string::npos)
      << positions;
  const auto experts = load_error(write_config(dir, kTiny),
                                  {"model.preset=\"moe-tiny\"", "parallel.cp=4", "data.seq_len=30"});
  EXPECT_NE(experts.find("data.seq_len = 30: context parallelism would pad sequences of 30 tokens to 32 (8 equal "
                         "chunks), and the experts would route the padding, which their loads and balance loss would "
                         "count; use a data.seq_len that is a multiple of 8"),
            std::string::npos)
      << experts;
  const auto capacity = load_error(write_config(dir, kTiny), {"model.preset=\"moe-tiny\"", "parallel.cp=2",
                                                              "data.seq_len=32", "model.moe_capacity_factor=1.25"});
  EXPECT_NE(capacity.find("model.moe_capacity_factor = 1.25: an expert's capacity is counted over each rank's rows of "
                          "a micro-batch, which context parallelism splits (parallel.cp = 2), so other tokens would "
                          "be dropped than on one rank; use moe_capacity_factor = 0 (dropless) or parallel.cp = 1"),
            std::string::npos)
      << capacity;
}

// gpt2-tiny has 2 blocks; 8 micro-batches of 2 sequences per step.
TEST(RunConfig, PipelineLayoutsTheScheduleCannotRunNameWhatWorks) {
  testing::TempDir dir;
  const std::string tiny = std::string(kTiny) + "[train]\nmicro_batch_size = 2\nglobal_batch_size = 16\n";
  EXPECT_EQ(load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.pp_schedule=\"zb-h1\""}), "");
  const auto deep = load_error(write_config(dir, tiny), {"parallel.pp=3"});
  EXPECT_NE(deep.find("parallel.pp = 3: the 1f1b schedule over 3 ranks has 3 pipeline stages: more pipeline stages "
                      "than the model's 2 blocks (model.n_layer), and each stage needs one; use at most 2 stages"),
            std::string::npos)
      << deep;
  const auto v = load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.pp_schedule=\"zb-v\""});
  EXPECT_NE(v.find("has 4 pipeline stages: more pipeline stages than the model's 2 blocks (model.n_layer), and each "
                   "stage needs one; use at most 2 stages (zb-v runs 2 stages per rank)"),
            std::string::npos)
      << v;
  const auto counts = load_error(write_config(dir, tiny), {"model.n_layer=6", "parallel.pp=3", "parallel.pp_schedule=\"interleaved\"", "parallel.pp_virtual=2"});
  EXPECT_NE(counts.find("parallel.pp_schedule = \"interleaved\": the interleaved schedule takes micro-batches in "
                        "groups of the 3 pipeline ranks, and 8 is not a multiple of 3; use 6 or 9 micro-batches "
                        "(train.global_batch_size 16 / (train.micro_batch_size 2 x parallel.dp 1) = 8 micro-batches "
                        "per step)"),
            std::string::npos)
      << counts;
  // Interleaved and zb-v lists wait for ever under NCCL (Schedule.AdjacentSendsAndReceives...).
  const std::vector<std::string> interleaved = {"model.n_layer=4", "parallel.pp=2", "parallel.pp_schedule=\"interleaved\"",
                                                "parallel.pp_virtual=2", "train.device=\"cuda\""};
  const auto nccl = load_error(write_config(dir, tiny), interleaved);
  EXPECT_NE(nccl.find("parallel.pp_schedule = \"interleaved\": under NCCL (parallel.backend = \"auto\" with "
                      "train.device = \"cuda\"), a send waits until its receive runs"),
            std::string::npos)
      << nccl;
  EXPECT_NE(nccl.find("waits for ever under NCCL; use parallel.pp_schedule = \"1f1b\" or \"zb-h1\", or "
                      "parallel.backend = \"mpi\""),
            std::string::npos)
      << nccl;
  std::vector<std::string> over_mpi = interleaved;
  over_mpi.push_back("parallel.backend=\"mpi\"");
  EXPECT_EQ(load_error(write_config(dir, tiny), over_mpi).find("under NCCL"), std::string::npos);
  const auto unknown = load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.pp_schedule=\"zb-h2\""});
  EXPECT_NE(unknown.find("afab, 1f1b, interleaved, zb-h1, zb-v"), std::string::npos) << unknown;
  const auto virtual_stages = load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.pp_virtual=2"});
  EXPECT_NE(virtual_stages.find("parallel.pp_virtual = 2: virtual stages are the interleaved schedule's, and "
                                "parallel.pp_schedule = \"1f1b\"; set parallel.pp_virtual = 1, or "
                                "parallel.pp_schedule = \"interleaved\""),
            std::string::npos)
      << virtual_stages;
  const auto zero = load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.zero_stage=2"});
  EXPECT_NE(zero.find("parallel.zero_stage = 2: ZeRO stage 2 reduces during every micro-batch's pass, which a "
                      "pipeline schedule interleaves across micro-batches; with parallel.pp = 2 use "
                      "parallel.zero_stage = 0 or 1"),
            std::string::npos)
      << zero;
  const auto recompute = load_error(write_config(dir, tiny), {"parallel.pp=2", "parallel.pp_schedule=\"zb-h1\"",
                                                              "train.recompute=\"selective\""});
  EXPECT_NE(recompute.find("train.recompute = \"selective\": the zb-h1 schedule runs each weight-gradient pass apart "
                           "from its backward"),
            std::string::npos)
      << recompute;
}

// gpt2-tiny has 3 heads; micro-batches of 2 x 64 tokens.
TEST(RunConfig, TensorParallelSizesTheModelCannotTakeNameASizeThatWorks) {
  testing::TempDir dir;
  const std::string tiny = std::string(kTiny) + "[train]\nmicro_batch_size = 2\n";
  EXPECT_EQ(load_error(write_config(dir, tiny), {"parallel.tp=3", "parallel.sp=true"}), "");
  const auto heads = load_error(write_config(dir, tiny), {"parallel.tp=4"});
  EXPECT_NE(heads.find("parallel.tp = 4: more tensor-parallel ranks than the model's 3 attention heads (model.n_head), "
                       "and each needs at least one; use parallel.tp <= 3"),
            std::string::npos)
      << heads;
  const auto alone = load_error(write_config(dir, tiny), {"parallel.sp=true"});
  EXPECT_NE(alone.find("parallel.sp = true: sequence parallelism splits the tokens over the tensor-parallel ranks, "
                       "and parallel.tp = 1; set parallel.tp above 1, or parallel.sp = false"),
            std::string::npos)
      << alone;
  const auto tokens = load_error(write_config(dir, tiny), {"parallel.tp=3", "parallel.sp=true", "data.seq_len=1",
                                                           "train.micro_batch_size=1"});
  EXPECT_NE(tokens.find("parallel.sp = true: the 3 tensor-parallel ranks would split micro-batches of 1 tokens "
                        "(train.micro_batch_size 1 x data.seq_len 1), and each needs at least one; use "
                        "parallel.tp <= 1"),
            std::string::npos)
      << tokens;
}

TEST(RunConfig, TheNcclBackendNeedsCuda) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, kTiny), {"parallel.backend=nccl"});
  EXPECT_NE(e.find("parallel.backend = \"nccl\": NCCL moves CUDA buffers; set train.device = \"cuda\""),
            std::string::npos)
      << e;
  EXPECT_EQ(load_error(write_config(dir, kTiny), {"parallel.backend=mpi"}), "");
}

TEST(RunConfig, Fp16NeedsLossScaling) {
  testing::TempDir dir;
  const auto path = write_config(dir, kTiny);
  EXPECT_NE(load_error(path, {"train.precision=f16"}).find("train.precision = \"f16\": fp16 gradients underflow without "
                                                           "loss scaling; set loss_scale.enabled = true"),
            std::string::npos);
  EXPECT_EQ(load_error(path, {"train.precision=f16", "loss_scale.enabled=true"}), "");
  EXPECT_EQ(load_error(path, {"loss_scale.enabled=true"}), "");  // with f32: allowed, harmless
}

TEST(RunConfig, Fp8NeedsBf16AndAKnownRecipe) {
  testing::TempDir dir;
  const auto path = write_config(dir, kTiny);
  for (const char* precision : {"f32", "f16"}) {
    const auto e = load_error(path, {"train.fp8=tensorwise", str("train.precision=", precision), "loss_scale.enabled=true"});
    EXPECT_NE(e.find(str("train.fp8 = \"tensorwise\": FP8 quantizes the bf16 activations and weights, and "
                         "train.precision = \"", precision, "\"; set train.precision = \"bf16\"")),
              std::string::npos)
        << e;
  }
  for (const char* recipe : {"tensorwise", "delayed", "blockwise"})
    EXPECT_EQ(load_error(path, {str("train.fp8=", recipe), "train.precision=bf16", "fp8.block=16"}), "") << recipe;
  const auto unknown = load_error(path, {"train.fp8=fp8", "train.precision=bf16"});
  EXPECT_NE(unknown.find("train.fp8 = \"fp8\": must be one of none, tensorwise, delayed, blockwise"), std::string::npos)
      << unknown;
  const auto keys = load_error(path, {"train.fp8=delayed", "train.precision=bf16", "fp8.format=e5m2",
                                      "fp8.amax_history=0", "fp8.amax_compute=mean", "fp8.margin=-1"});
  for (const char* wrong : {"fp8.format = \"e5m2\": must be \"hybrid\"", "fp8.amax_history = 0: must be at least 1",
                            "fp8.amax_compute = \"mean\": must be \"max\"", "fp8.margin = -1: must be in [0, 30]"})
    EXPECT_NE(keys.find(wrong), std::string::npos) << keys;
}

// gpt2-tiny's weights are 144 x 48 (qkv) to 48 x 192 (proj); micro-batches of 8 x 64 tokens.
TEST(RunConfig, BlockwiseTilesMustDivideEveryRanksPieces) {
  testing::TempDir dir;
  const auto path = write_config(dir, kTiny);
  const std::vector<std::string> blockwise = {"train.fp8=blockwise", "train.precision=bf16"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), blockwise.begin(), blockwise.end());
    return load_error(path, more);
  };
  const auto weights = with({"fp8.block=32"});
  EXPECT_NE(weights.find("fp8.block = 32: linear layer attn.qkv's weight is 144 x 48, which fp8.block = 32 tiles do not "
                         "divide; use fp8.block = 16 or a smaller power of two"),
            std::string::npos)
      << weights;
  const auto rows = with({"fp8.block=16", "train.micro_batch_size=1", "train.global_batch_size=1", "data.seq_len=8"});
  EXPECT_NE(rows.find("blockwise tiles run down a micro-batch's 8 rows (train.micro_batch_size 1 x data.seq_len 8), which "
                      "fp8.block = 16 does not divide"),
            std::string::npos)
      << rows;
  const auto chunks = with({"fp8.block=16", "parallel.cp=2", "data.seq_len=32"});
  EXPECT_NE(chunks.find("blockwise tiles run down each context-parallel chunk of 8 tokens (data.seq_len 32 in 4 chunks)"),
            std::string::npos)
      << chunks;
  EXPECT_EQ(with({"fp8.block=16", "parallel.cp=2", "parallel.cp_zigzag=false", "data.seq_len=32"}), "");
  // 4 heads of 16 over 4 tensor-parallel ranks: the whole qkv weight (192 x 64) takes tiles of 32,
  // a rank's 48 x 64 does not.
  const std::vector<std::string> wider = {"model.d_model=64", "model.n_head=4", "fp8.block=32"};
  EXPECT_EQ(with(wider), "");
  std::vector<std::string> split = wider;
  split.push_back("parallel.tp=4");
  const auto pieces = with(split);
  EXPECT_NE(pieces.find("linear layer attn.qkv's weight is 48 x 64 on tensor-parallel rank 0, which fp8.block = 32 tiles "
                        "do not divide; use fp8.block = 16"),
            std::string::npos)
      << pieces;
  EXPECT_NE(with({"fp8.block=12"}).find("fp8.block = 12: must be a power of two"), std::string::npos);
}

TEST(RunConfig, ATomlSyntaxErrorNamesLineAndColumn) {
  testing::TempDir dir;
  const auto e = load_error(write_config(dir, "[train]\nsteps = = 3\n"));
  EXPECT_NE(e.find("run.toml:2:"), std::string::npos) << e;
  EXPECT_NE(load_error(dir.path() / "missing.toml").find("cannot read run configuration"), std::string::npos);
}

void expect_round_trip(const std::string& text, const std::vector<std::string>& overrides = {}) {
  testing::TempDir dir;
  const RunConfig a = load_run_config(write_config(dir, text), overrides);
  const std::string resolved = resolved_toml(a);
  const RunConfig b = load_run_config(write_config(dir, resolved, "resolved.toml"));
  EXPECT_EQ(resolved_toml(b), resolved);
  EXPECT_EQ(b.model_preset, a.model_preset);
  EXPECT_EQ(b.model.family, a.model.family);
  EXPECT_EQ(b.model.norm_eps, a.model.norm_eps);
  EXPECT_EQ(b.model.rope_scaling_factor, a.model.rope_scaling_factor);
  EXPECT_EQ(b.lr.peak_lr, a.lr.peak_lr);
  EXPECT_EQ(b.adamw.eps, a.adamw.eps);
  EXPECT_EQ(b.sample.temperature, a.sample.temperature);
  EXPECT_EQ(b.log.run_dir, a.log.run_dir);
}

TEST(RunConfig, ResolvedTomlLoadsBackToTheSameConfiguration) {
  expect_round_trip(kTiny, {"optim.lr=6e-4", "optim.eps=1e-7", "sample.prompt=\"In the \\\"beginning\\\"\"",
                            "train.precision=bf16", "optim.decay=wsd", "optim.decay_steps=100"});
  expect_round_trip("[model]\npreset = \"llama3.2-1b\"\nn_layer = 2\n[data]\nseq_len = 2048\n");
  expect_round_trip(
      "[model]\nfamily = \"llama\"\nn_layer = 2\nd_model = 64\nn_head = 4\nn_kv_head = 1\nvocab_size = 300\n"
      "max_seq_len = 32\nnorm_eps = 1e-6\nrope_scaling_factor = 8.0\nrope_original_max_seq_len = 16\n"
      "[data]\nseq_len = 32\n");
  // gpt2 descriptions leave out the llama-only keys, so loading them back raises nothing.
  testing::TempDir dir;
  const std::string resolved = resolved_toml(load_run_config(write_config(dir, kTiny)));
  EXPECT_EQ(resolved.find("rope_theta"), std::string::npos);
  EXPECT_NE(resolved.find("preset             = \"gpt2-tiny\""), std::string::npos) << resolved;
}

// Expected values computed here from the published shapes, not through the code under test.
TEST(RunConfig, DerivedQuantitiesForGpt2_124M) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, R"([model]
preset = "gpt2-124m"
[data]
seq_len = 1024
[train]
steps = 1000
micro_batch_size = 16
global_batch_size = 512
)"));
  const std::string d = derived_quantities(c);
  EXPECT_NE(d.find("512 sequences x 1024 tokens = 524,288 tokens per step"), std::string::npos) << d;
  EXPECT_NE(d.find("16 sequences x 32 accumulation steps"), std::string::npos) << d;
  EXPECT_NE(d.find("50,257 tokens, stored padded to 50,304"), std::string::npos) << d;
  EXPECT_NE(d.find("124,439,808 (124.4M)"), std::string::npos) << d;
  // 16 bytes per stored element (f32 parameters, gradients and AdamW's two moments), and the
  // activations and backward's scratch of 16 x 1024 tokens in f32, worked out by hand.
  const testing::Gpt2Shape shape{.layers = 12, .width = 768, .heads = 12, .stored_vocab = 50304, .positions = 1024};
  const int64_t psi = testing::gpt2_stored_elements(shape);
  EXPECT_EQ(psi, 124'475'904);  // the parameters above and the vocabulary's 47 padding rows of 768
  const int64_t bytes = 16 * psi + testing::gpt2_saved_activation_bytes(shape, 16 * 1024, 4, false) +
                        testing::gpt2_backward_scratch_bytes(shape, 16 * 1024, 4);
  EXPECT_NE(d.find(str(format_bytes(static_cast<double>(bytes)), " on the cpu: parameters, gradients, AdamW moments")),
            std::string::npos)
      << format_bytes(static_cast<double>(bytes)) << "\n" << d;
  EXPECT_NE(d.find("1,000 steps x 524,288 = 524,288,000 (524.3M)"), std::string::npos) << d;
  // Forward FLOPs per token: per layer 2C(3C) + 2C^2 + 2C(4C) + 2(4C)C + 2C(T + 1), then 2CV.
  const double C = 768, T = 1024, V = 50257;
  const double forward = 12 * (6 * C * C + 2 * C * C + 8 * C * C + 8 * C * C + 2 * C * (T + 1)) + 2 * C * V;
  char expected[64];
  std::snprintf(expected, sizeof expected, "%.3e for training (3 x forward %.3e)", 3 * forward, forward);
  EXPECT_NE(d.find(expected), std::string::npos) << expected << "\n" << d;
  EXPECT_NE(d.find("data.dir is not set"), std::string::npos) << d;
}

TEST(RunConfig, DerivedQuantitiesCountTheTrainingShards) {
  testing::TempDir dir;
  for (const char* name : {"train_000000.bin", "train_000001.bin", "val_000000.bin"}) {
    TokenShardWriter shard(dir.path() / name, 997);
    std::vector<uint32_t> tokens(6401, 7);
    shard.append(tokens);
    shard.finish();
  }
  const RunConfig c = load_run_config(write_config(dir, std::string(kTiny) + "[train]\nsteps = 50\n"
                                                                              "global_batch_size = 16\n"),
                                      {str("data.dir=\"", dir.path().string(), "\"")});
  // 12,802 tokens: (12,802 - 1) / 64 = 200 windows; 200 / 16 = 12.5 steps per epoch.
  const std::string d = derived_quantities(c);
  EXPECT_NE(d.find("12,802 tokens in 2 shards: 200 sequences per epoch, 12.5 steps per epoch; the run is 4.00 epochs"),
            std::string::npos)
      << d;
  EXPECT_NO_THROW(check_run_inputs(c));
}

TEST(RunConfig, CheckRunInputsListsMissingFiles) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, kTiny), {"eval.every=10", "data.tokenizer=/no/tokenizer.json",
                                                                 str("data.dir=\"", dir.file("nothing"), "\"")});
  try {
    check_run_inputs(c);
    ADD_FAILURE() << "no problem found";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("3 problems"), std::string::npos) << m;
    EXPECT_NE(m.find("does not exist or is not a directory"), std::string::npos) << m;
    EXPECT_NE(m.find("eval.every = 10 needs validation shards"), std::string::npos) << m;
    EXPECT_NE(m.find("data.tokenizer = \"/no/tokenizer.json\": no such file"), std::string::npos) << m;
  }
  const RunConfig unset = load_run_config(write_config(dir, kTiny));
  EXPECT_THROW(check_run_inputs(unset), Error);
}

// init.from a Hugging Face directory describes the model; explicit fields must agree with it.
TEST(RunConfig, InitFromAHuggingFaceDirectoryGivesTheModel) {
  testing::TempDir dir;
  const std::filesystem::path hf = dir.path() / "hf";
  std::filesystem::create_directories(hf);
  std::ofstream(hf / "config.json") << ckpt::hf_config_json(model_preset("llama-tiny")).dump();
  std::ofstream(hf / "model.safetensors") << "";
  const std::string text = str("[init]\nfrom = \"", hf.string(), "\"\n[data]\nseq_len = 64\n");
  const RunConfig c = load_run_config(write_config(dir, text));
  EXPECT_EQ(c.model.family, ModelFamily::llama);
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.vocab_size, 997);
  EXPECT_EQ(load_error(write_config(dir, resolved_toml(c), "resolved.toml")), "");
  const auto e = load_error(write_config(dir, text + "[model]\nn_layer = 3\n"));
  EXPECT_NE(e.find("model.n_layer = 3: disagrees with init.from's config.json (n_layer = 2 there)"), std::string::npos)
      << e;
  // A preset, amended by the file to the directory's model, agrees with it (ffn_hidden_size 0
  // in a gpt2 preset is 4 * d_model); one that still differs is named field by field.
  ModelConfig amended = model_preset("gpt2-tiny");
  amended.vocab_size = 321;
  std::ofstream(hf / "config.json", std::ios::trunc) << ckpt::hf_config_json(amended).dump();
  EXPECT_EQ(load_error(write_config(dir, text + "[model]\npreset = \"gpt2-tiny\"\nvocab_size = 321\n")), "");
  const auto differs = load_error(write_config(dir, text + "[model]\npreset = \"gpt2-tiny\"\n"));
  EXPECT_NE(differs.find("model.preset = \"gpt2-tiny\": disagrees with init.from's config.json (vocab_size 321 vs "
                         "997); remove model.preset"),
            std::string::npos)
      << differs;
  const auto missing = load_error(write_config(dir, kTiny), {"init.from=/no/such/model"});
  EXPECT_NE(missing.find("init.from = \"/no/such/model\": no such file or directory"), std::string::npos) << missing;
}

// The configuration names a device; whether this machine has it is a property of the run's
// inputs, checked before anything is allocated (config show works anywhere).
TEST(RunConfig, ACudaDeviceIsCheckedWithTheRunsInputs) {
  testing::TempDir dir;
  const RunConfig c = load_run_config(write_config(dir, kTiny), {"train.device=cuda"});
  EXPECT_EQ(c.train.target_device(), Device::cuda);
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is available here";
  try {
    check_run_inputs(c);
    ADD_FAILURE() << "a run on an unusable device passed its input checks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.device = \"cuda\": " + cuda_unavailable_reason()), std::string::npos)
        << e.what();
  }
  EXPECT_NE(load_error(write_config(dir, kTiny), {"train.device=tpu"}).find("train.device"), std::string::npos);
}

TEST(RunConfig, EveryExampleInConfigsLoads) {
  int examples = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(DTRAIN_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_run_config(entry.path())) << load_error(entry.path());
    ++examples;
  }
  EXPECT_GE(examples, 3);
}

// docs/config.md is the reference people read: every key must be in its section's table.
TEST(RunConfig, EveryKeyIsDocumentedInItsSection) {
  std::ifstream in(std::filesystem::path(DTRAIN_SOURCE_DIR) / "docs" / "config.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(doc.empty());
  for (const std::string& section : run_config::config_sections()) {
    const size_t begin = doc.find("## [" + section + "]");
    ASSERT_NE(begin, std::string::npos) << "docs/config.md has no section [" << section << "]";
    const size_t end = doc.find("\n## ", begin + 1);
    const std::string text = doc.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    for (const std::string& key : run_config::config_key_names(section))
      EXPECT_NE(text.find("`" + key + "`"), std::string::npos) << section << "." << key << " is not in docs/config.md";
  }
}

}  // namespace
}  // namespace dt
