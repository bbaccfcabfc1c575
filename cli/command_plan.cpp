// dtrain plan CONFIG.toml [section.key=value ...] [--gpu PROFILE] [--gpus N] [--gpus-per-node K]
// [--json]: what a run configuration's layout needs and how fast it will go on a hardware profile,
// before any GPU is spent: the memory of the largest rank by tag (plan/memory.h, the figures the
// run allocates) against the profile's memory, the step's time by term (plan/step_time.h), and
// tokens/s, TFLOP/s per GPU and MFU.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_operands.h"
#include "core/allocator.h"
#include "core/error.h"
#include "model/parameters.h"
#include "plan/hardware_profile.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "train/layout_search.h"
#include "train/run_config.h"

namespace dt::cli {

namespace {

// The configuration's layout on `gpus` GPUs: tp, pp and cp as configured, dp what is left.
RunConfig on_gpus(RunConfig config, int64_t gpus) {
  const ParallelDims d = config.dims();
  const int64_t model_parallel = int64_t{d.tp} * d.pp * d.cp;
  if (gpus < 1 || gpus % model_parallel != 0)
    throw Error(str("plan: --gpus ", gpus, " cannot hold the configuration's layout: parallel.tp ", d.tp, " x pp ",
                    d.pp, " x cp ", d.cp, " = ", model_parallel, " GPUs per data-parallel replica; give a multiple of ",
                    model_parallel, ", or change those keys (section.key=value)"));
  const int64_t dp = gpus / model_parallel;
  const int64_t per_step = int64_t{config.train.micro_batch_size} * dp;
  if (config.global_batch_size() % per_step != 0)
    throw Error(str("plan: on ", gpus, " GPUs parallel.dp is ", dp, ", and train.global_batch_size ",
                    config.global_batch_size(), " is not a multiple of train.micro_batch_size ",
                    config.train.micro_batch_size, " x dp ", dp, " = ", per_step,
                    "; change the batch sizes or the GPU count"));
  config.parallel.dp = static_cast<int>(dp);
  return config;
}

std::string percent(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", 100 * share);
  return text;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", bytes / (1 << 30));
  return text;
}

// What a layout pays beside its compute, as shares of its step: the terms that are not the
// model's own FLOPs, and the work recomputation repeats.
std::string what_it_pays(const LayoutCandidate& c) {
  const StepTime& t = c.time;
  std::string out;
  const auto add = [&](const char* name, double seconds) {
    if (seconds / t.total >= 0.005) out += str(out.empty() ? "" : ", ", name, " ", percent(seconds / t.total));
  };
  add("tp", t.tensor_parallel);
  add("cp", t.context_parallel);
  add("ep", t.expert_parallel);
  add("bubble", t.bubble);
  add("pp transfers", t.pipeline_transfers);
  add("dp", t.data_parallel);
  if (t.hardware_flops > t.model_flops) out += str(out.empty() ? "" : ", ", "recompute +", percent(t.hardware_flops / t.model_flops - 1), " FLOPs");
  return out.empty() ? "nothing: compute only" : out;
}

int print_search(const RunConfig& config, int gpus, const HardwareProfile& profile,
                 int per_node, int top, bool json) {
  const LayoutSearch search = search_layouts(config, gpus, profile, per_node);
  if (search.valid == 0)
    throw Error(str("plan --search: no layout of ", gpus, " GPUs can run ", config.source.string(), ": tp must divide the ",
                    config.model.n_head, " query and ", config.model.kv_heads(), " key/value heads within a node of ",
                    per_node, ", pp be at most the ", config.model.n_layer, " blocks, and dp divide the global batch of ",
                    config.global_batch_size(), " sequences; choose another GPU count"));
  if (search.fitting.empty()) {
    const int enough = smallest_fitting_gpus(config, gpus, profile, per_node);
    throw Error(str("plan --search: none of the ", search.valid, " layouts of ", gpus, " GPUs fits in ",
                    gib(profile.memory_bytes), " GiB of ", profile.name,
                    enough > 0 ? str("; its leanest layouts (ZeRO 3, or 1 under a pipeline, full recomputation, "
                                     "micro-batches of one) fit on ", enough, " GPUs")
                               : str("; not even on ", gpus << 10, " GPUs")));
  }
  const size_t shown = std::min(search.fitting.size(), static_cast<size_t>(std::max(top, 1)));
  if (json) {
    nlohmann::ordered_json j;
    j["profile"] = profile.name;
    j["gpus"] = gpus;
    j["considered"] = search.considered;
    j["valid"] = search.valid;
    j["fitting"] = search.fitting.size();
    for (size_t i = 0; i < shown; ++i) {
      const LayoutCandidate& c = search.fitting[i];
      const RunConfig::Parallel& p = c.config.parallel;
      j["layouts"].push_back({{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"cp", p.cp}, {"ep", p.ep},
                              {"schedule", p.pp_schedule},
                              {"pp_virtual", p.pp_virtual}, {"micro_batch", c.config.train.micro_batch_size},
                              {"zero_stage", p.zero_stage},
                              {"recompute", std::string(recompute_name(c.config.train.recompute))}, {"sp", p.sp},
                              {"memory_bytes", c.memory.total()}, {"step_seconds", c.time.total},
                              {"tokens_per_s", c.time.tokens_per_s}, {"mfu", c.time.mfu}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("dtrain plan --search: %s, %lld sequences x %d tokens per step, %s, on %d GPUs of %s (%d per node)\n",
              config.source.c_str(), static_cast<long long>(config.global_batch_size()), config.data.seq_len,
              std::string(dtype_name(config.train.precision)).c_str(), gpus, profile.name.c_str(), per_node);
  std::printf("%lld layouts considered, %lld valid, %zu fit in %s GiB; the fastest %zu:\n\n",
              static_cast<long long>(search.considered), static_cast<long long>(search.valid), search.fitting.size(),
              gib(profile.memory_bytes).c_str(), shown);
  // The ep column only for a model with experts (every other layout has ep 1).
  const bool experts = config.model.moe.experts > 0;
  std::printf("  #   dp  tp  pp  cp %s schedule        micro zero recompute  sp   GiB     step s   tokens/s    MFU   "
              "what it pays (share of the step)\n", experts ? " ep " : "");
  for (size_t i = 0; i < shown; ++i) {
    const LayoutCandidate& c = search.fitting[i];
    const RunConfig::Parallel& p = c.config.parallel;
    const std::string schedule =
        p.pp == 1 ? "-" : p.pp_virtual > 1 ? str(p.pp_schedule, " v", p.pp_virtual) : p.pp_schedule;
    const std::string ep = experts ? str(p.ep < 10 ? "   " : p.ep < 100 ? "  " : " ", p.ep) : "";
    std::printf("  %-3zu %3d %3d %3d %3d%s  %-15s %5d %4d %-10s %-3s %6s %9.3f %10.0f %6.1f%%  %s\n", i + 1, p.dp, p.tp,
                p.pp, p.cp, ep.c_str(), schedule.c_str(), c.config.train.micro_batch_size, p.zero_stage,
                std::string(recompute_name(c.config.train.recompute)).c_str(), p.sp ? "yes" : "no",
                gib(static_cast<double>(c.memory.total())).c_str(), c.time.total, c.time.tokens_per_s, 100 * c.time.mfu,
                what_it_pays(c).c_str());
  }
  const RunConfig::Parallel& best = search.fitting.front().config.parallel;
  const std::string best_ep = experts ? str(" parallel.ep=", best.ep) : "";
  std::printf("\nitemized: dtrain plan %s --gpus %d parallel.tp=%d parallel.pp=%d parallel.cp=%d%s "
              "parallel.pp_schedule=%s parallel.pp_virtual=%d parallel.zero_stage=%d parallel.sp=%s "
              "train.micro_batch_size=%d train.recompute=%s (the first; the others likewise)\n",
              config.source.c_str(), gpus, best.tp, best.pp, best.cp, best_ep.c_str(), best.pp_schedule.c_str(),
              best.pp_virtual, best.zero_stage,
              best.sp ? "true" : "false", search.fitting.front().config.train.micro_batch_size,
              std::string(recompute_name(search.fitting.front().config.train.recompute)).c_str());
  return 0;
}

}  // namespace

int command_plan(int argc, char** argv, int first) {
  Args args("plan",
            "what a run configuration (CONFIG.toml [section.key=value ...]) needs and how fast it goes on a hardware "
            "profile: memory per GPU by tag, the step's time by term, tokens/s, TFLOP/s per GPU and MFU");
  declare_config_operands(args);
  args.flag("gpu", "h100-sxm", "hardware profile: a name in profiles/ (h100-sxm, h200, a100-80gb) or a file")
      .flag("gpus", "", "GPUs in the job (default: the configuration's layout); dp takes what tp x pp x cp leave")
      .flag("gpus-per-node", "", "GPUs per node (default: the profile's)")
      .toggle("json", "print one JSON object instead of tables")
      .toggle("search", "rank every layout of the model and global batch on the GPUs that fits, fastest first")
      .flag("top", "10", "with --search: how many layouts to show");
  if (!args.parse(argc, argv, first)) return 0;
  RunConfig config = config_from_operands(args);
  const HardwareProfile profile = load_hardware_profile(args.get("gpu"));
  if (args.was_given("gpus") && !args.get_bool("search")) config = on_gpus(config, args.get_int("gpus"));
  const int per_node = args.was_given("gpus-per-node") ? static_cast<int>(args.get_int("gpus-per-node"))
                                                        : profile.gpus_per_node;
  if (per_node < 1) throw Error(str("plan: --gpus-per-node ", per_node, " must be at least 1"));

  if (args.get_bool("search")) {
    const int gpus = args.was_given("gpus") ? static_cast<int>(args.get_int("gpus")) : config.dims().world_size();
    return print_search(config, gpus, profile, per_node, static_cast<int>(args.get_int("top")),
                        args.get_bool("json"));
  }
  const MemoryPlan memory = run_memory_plan(config);
  // An asynchronous save's staging, in host memory (on a CPU run, also the `checkpoint` tag's).
  const size_t staging = config.checkpoint.async ? memory.checkpoint_staging.of(true, true) : 0;
  const StepLayout layout = run_step_layout(config, per_node);
  const StepTime time = predict_step_time(config.model, layout, profile);
  const bool fits = static_cast<double>(memory.total()) <= profile.memory_bytes;
  // A micro-batch's rows each rank routes through the experts (under tensor parallelism every
  // rank of the group all of them).
  const int64_t routed_rows = int64_t{layout.micro_batch} * (layout.seq_len / layout.cp);
  const MoeConfig& moe = config.model.moe;
  // The linear layers whose GEMMs run at the FP8 peak, where train.fp8 is on.
  std::vector<std::string> float8_linears;
  for (const BlockDeclaration* b : block_declarations(config.model))
    for (const LinearDeclaration* l : b->linears())
      if (config.fp8.enabled() && float8_quantizes(l->name) && std::ranges::count(float8_linears, l->name) == 0)
        float8_linears.push_back(l->name);
  const std::vector<std::pair<const char*, double>> terms = {
      {"GEMMs", time.gemm},
      {"attention", time.attention},
      {"streaming kernels", time.streaming},
      {"tensor-parallel collectives", time.tensor_parallel},
      {"context-parallel ring", time.context_parallel},
      {"expert-parallel all-to-alls", time.expert_parallel},
      {"pipeline bubble", time.bubble},
      {"pipeline transfers", time.pipeline_transfers},
      {"data-parallel, not hidden", time.data_parallel},
      {"optimizer", time.optimizer}};

  if (args.get_bool("json")) {
    nlohmann::ordered_json j;
    j["profile"] = profile.name;
    j["gpus"] = layout.gpus();
    j["gpus_per_node"] = per_node;
    j["layout"] = {{"dp", layout.dp}, {"tp", layout.tp}, {"pp", layout.pp}, {"cp", layout.cp}, {"ep", layout.ep},
                   {"sp", layout.sp},
                   {"zero_stage", layout.zero_stage}, {"micro_batch", layout.micro_batch},
                   {"micro_batches", layout.micro_batches}, {"seq_len", layout.seq_len},
                   {"recompute", std::string(recompute_name(layout.recompute))},
                   {"precision", std::string(dtype_name(layout.precision))}};
    if (layout.pp > 1) j["layout"]["schedule"] = layout.schedule;
    if (config.fp8.enabled())
      j["fp8"] = {{"recipe", std::string(float8_scaling_name(config.fp8.scaling))},
                  {"linears", float8_linears},
                  {"peak_tflops", profile.peak(DType::f8e4m3) / 1e12}};
    for (int t = 0; t < kNumMemTags; ++t)
      j["memory_bytes"][std::string(mem_tag_name(static_cast<MemTag>(t)))] = memory.peak(static_cast<MemTag>(t));
    j["memory_bytes"]["total"] = memory.total();
    j["memory_bytes"]["available"] = profile.memory_bytes;
    if (staging > 0) j["host_memory_bytes"]["checkpoint_staging"] = staging;
    j["fits"] = fits;
    if (moe.experts > 0)
      j["expert_rows"] = {{"per_micro_batch", moe.expert_rows(routed_rows)},
                          {"dropless", moe.capacity_factor == 0},
                          {"capacity", moe.capacity(routed_rows)},
                          {"received", moe.received_rows(routed_rows, even_part(moe.experts, layout.ep, 0).size(),
                                                         layout.ep)}};
    for (const auto& [name, seconds] : terms) j["step_seconds"][name] = seconds;
    j["step_seconds"]["total"] = time.total;
    j["tokens_per_s"] = time.tokens_per_s;
    j["model_tflops_per_gpu"] = time.model_tflops_per_gpu;
    j["hardware_tflops_per_gpu"] = time.hardware_tflops_per_gpu;
    j["mfu"] = time.mfu;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  const ModelConfig& m = config.model;
  std::printf("dtrain plan: %s, %lld parameters; %lld sequences x %d tokens per step, %s, recompute %s\n",
              config.source.c_str(), static_cast<long long>(ParameterLayout(m).num_parameters()),
              static_cast<long long>(config.global_batch_size()), layout.seq_len,
              std::string(dtype_name(layout.precision)).c_str(), std::string(recompute_name(layout.recompute)).c_str());
  std::printf("layout: %s on %s (%d per node); ZeRO %d%s; micro-batch %d, %d per step on each data-parallel rank%s\n",
              config.dims().describe().c_str(), profile.name.c_str(), per_node, layout.zero_stage,
              layout.sp ? ", sequence parallel" : "", layout.micro_batch, layout.micro_batches,
              layout.pp > 1 ? str(", ", layout.schedule, " schedule").c_str() : "");
  if (config.fp8.enabled()) {
    std::string names;
    for (const std::string& n : float8_linears) names += str(names.empty() ? "" : ", ", n);
    std::printf("FP8: %s; the GEMMs of %s at the FP8 peak (%.0f TFLOP/s), their operands quantized first; the "
                "head%s in %s; MFU against the %s peak\n",
                std::string(float8_scaling_name(config.fp8.scaling)).c_str(), names.c_str(),
                profile.peak(DType::f8e4m3) / 1e12, moe.experts > 0 ? ", attention and the router" : " and attention",
                std::string(dtype_name(layout.precision)).c_str(),
                std::string(dtype_name(layout.precision)).c_str());
  }
  if (moe.experts > 0) {
    const std::string bound =
        moe.capacity_factor > 0
            ? str("within a capacity factor of ", moe.capacity_factor, ": at most ", moe.capacity(routed_rows),
                  " rows an expert, ", moe.expert_rows(routed_rows), " a micro-batch")
            : str("dropless: the activations sized for the worst case, every token's ", moe.routing.top_k,
                  " assignments (", moe.expert_rows(routed_rows), " rows a micro-batch)");
    const int64_t local = even_part(moe.experts, layout.ep, 0).size();
    const std::string spread =
        layout.ep == 1 ? ""
                       : str("; over ", layout.ep, " ep ranks (", local, " a rank at most), whose experts receive at "
                             "most ", moe.received_rows(routed_rows, local, layout.ep), " rows a micro-batch (",
                             moe.capacity_factor > 0 ? "every rank's capacities" : "dropless: every rank's rows",
                             "), timed as if balanced");
    std::printf("experts: %d a block, top %lld; %s%s; their GEMMs timed as if each had rows enough for a dense "
                "GEMM's efficiency\n",
                moe.experts, static_cast<long long>(moe.routing.top_k), bound.c_str(), spread.c_str());
  }
  std::printf("\nmemory per GPU (the largest rank)        GiB\n");
  for (int t = 0; t < kNumMemTags; ++t)
    if (const size_t peak = memory.peak(static_cast<MemTag>(t)); peak > 0)
      std::printf("  %-36s %8s\n", std::string(mem_tag_name(static_cast<MemTag>(t))).c_str(),
                  gib(static_cast<double>(peak)).c_str());
  std::printf("  %-36s %8s of %s: %s\n", "total", gib(static_cast<double>(memory.total())).c_str(),
              gib(profile.memory_bytes).c_str(),
              fits ? "fits" : "does NOT fit (raise ZeRO, recompute, or use more tp / pp ranks)");
  if (staging > 0)
    std::printf("  %-36s %8s of host memory\n", "checkpoint staging (checkpoint.async)", gib(static_cast<double>(staging)).c_str());
  std::printf("\nstep time, the busiest rank               ms   share\n");
  for (const auto& [name, seconds] : terms)
    if (seconds > 0) std::printf("  %-36s %8.2f %6.1f%%\n", name, seconds * 1e3, 100 * seconds / time.total);
  std::printf("  %-36s %8.2f\n", "total", time.total * 1e3);
  std::printf("\n%.0f tokens/s; %.1f TFLOP/s per GPU (model FLOPs; %.1f with what recomputation repeats); MFU %.1f%% "
              "of the %s's %.4g TFLOP/s %s\n",
              time.tokens_per_s, time.model_tflops_per_gpu, time.hardware_tflops_per_gpu, 100 * time.mfu,
              profile.name.c_str(), profile.peak(layout.precision) / 1e12, std::string(dtype_name(layout.precision)).c_str());
  return 0;
}

}  // namespace dt::cli
