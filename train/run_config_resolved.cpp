// The resolved configuration written back as TOML, and the quantities derived from it: what
// `dtrain config show` prints and the run directory keeps.
#include <omp.h>

#include <algorithm>
#include <cstdio>

#include "core/allocator.h"
#include "core/error.h"
#include "data/token_dataset.h"
#include "model/parameters.h"
#include "model/rope_tables.h"
#include "model/tensor_shard.h"
#include "parallel/context/ring_attention.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "plan/memory.h"
#include "train/batch_buffers.h"
#include "train/run_config.h"
#include "train/run_config_keys.h"
#include "train/throughput.h"

namespace dt {

namespace {

using namespace run_config;

// Whether resolved_toml writes the key: model.preset only when there is one, a trait's keys only
// for a model with it.
bool written(const ConfigKey& k, const RunConfig& config) {
  if (k.section == "model" && k.name == "preset") return !config.model_preset.empty();
  return k.applies_to(config.model);
}

// 124439808 -> "124,439,808".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// 124439808 -> "124.4M".
std::string si(double n) {
  const char* units[] = {"", "K", "M", "B", "T", "P"};
  int u = 0;
  while (n >= 1000 && u < 5) n /= 1000, ++u;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, u == 0 ? "%.0f%s" : "%.1f%s", n, units[u]);
  return buffer;
}

std::string scientific(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3e", x);
  return buffer;
}

}  // namespace

std::string resolved_toml(const RunConfig& config) {
  std::string out =
      "# The resolved run configuration: every key with the value the run uses (docs/config.md\n"
      "# describes each). Loading this file gives the same configuration.\n";
  for (const std::string& section : config_sections()) {
    size_t width = 0;
    for (const ConfigKey& k : config_keys())
      if (k.section == section && written(k, config)) width = std::max(width, k.name.size());
    out += str("\n[", section, "]\n");
    for (const ConfigKey& k : config_keys())
      if (k.section == section && written(k, config))
        out += str(k.name, std::string(width - k.name.size(), ' '), " = ", k.write(config), "\n");
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> resolved_values(const RunConfig& config) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const ConfigKey& k : config_keys()) {
    if (!written(k, config)) continue;
    const std::string text = k.write(config);
    const toml::table parsed = toml::parse("v = " + text);
    const auto string = parsed["v"].value<std::string>();
    values.emplace_back(k.path(), string ? *string : text);
  }
  return values;
}

namespace {

std::optional<pipeline::Schedule> run_schedule(const RunConfig& config) {
  if (config.dims().pp == 1) return std::nullopt;
  return pipeline::make_schedule(config.parallel.pp_schedule, config.dims().pp, config.accumulation_steps(),
                                 config.parallel.pp_virtual);
}

}  // namespace

MemoryPlan run_memory_plan(const RunConfig& config, std::optional<ParallelDims::Coords> rank) {
  // Under context parallelism a rank runs its chunks of each (padded) sequence.
  const int B = config.train.micro_batch_size, T = config.data.seq_len, cp = config.dims().cp;
  const int chunks = config.parallel.cp_zigzag ? 2 * cp : cp;
  const int local_T = cp == 1 ? T : (T + chunks - 1) / chunks * chunks / cp;
  const std::optional<pipeline::Schedule> schedule = run_schedule(config);
  const int shard_ranks = config.dims().dp * config.dims().cp, accumulation = config.accumulation_steps();
  const Recompute recompute = config.train.recompute;
  const DType precision = config.train.precision;
  MemoryPlan plan =
      rank ? plan_rank_memory(config.model, B, local_T, accumulation, recompute, precision, shard_ranks,
                              config.parallel.zero_stage, {rank->tp, config.dims().tp}, config.parallel.sp,
                              schedule ? &*schedule : nullptr, rank->pp,
                              {config.dims().ep_rank(*rank), config.dims().ep}, config.fp8)
           : plan_memory(config.model, B, local_T, accumulation, recompute, precision, shard_ranks,
                         config.parallel.zero_stage, config.dims().tp, config.parallel.sp,
                         schedule ? &*schedule : nullptr, config.dims().ep, config.fp8);
  // The trainer's token buffers (train/trainer.cpp): each step's micro-batches and the
  // evaluation's, as the model runs them; under context parallelism the loader's whole
  // sequences beside them, on the host (the device's memory on a CPU run).
  const bool on_cpu = config.train.target_device() == Device::cpu;
  size_t& workspace = plan.bytes[static_cast<size_t>(MemTag::workspace)];
  workspace += BatchBuffers::bytes(accumulation + 1, B, local_T);
  if (cp > 1 && on_cpu) workspace += BatchBuffers::bytes(accumulation, B, T);
  // On the CPU, the backend is MPI and its kept results are the device's memory; so is an
  // asynchronous save's staging.
  if (on_cpu) plan.bytes[static_cast<size_t>(MemTag::communication)] += plan.mpi_kept_results;
  // Without a rank, the largest: the first of dp × cp, which writes everything held whole.
  const int replica = rank ? config.dims().replica_index(*rank) : 0;
  if (config.checkpoint.async && on_cpu)
    plan.bytes[static_cast<size_t>(MemTag::checkpoint)] += plan.checkpoint_staging.of(replica == 0, replica < config.dims().ep);
  // Context parallelism: the whole (padded) sequence's rotary tables, and ring attention's blocks
  // and accumulators during each call (parallel/context/).
  const TensorShard shard{rank ? rank->tp : 0, config.dims().tp};
  size_t ring_workspace = 0;
  if (cp > 1) {
    const bool rotary = config.model.traits().positions == PositionKind::rotary;
    if (rotary) workspace += rope_table_bytes(config.model, local_T * cp);
    const ShardDims dims = shard_dims(config.model, shard);
    // The CPU's block kernels run on one chunk's queries at a time.
    const int chunk_T = local_T / (config.parallel.cp_zigzag ? 2 : 1);
    const kernels::cpu::BlockScratchBytes block_scratch =
        on_cpu ? kernels::cpu::attention_block_scratch_bytes(chunk_T, static_cast<int>(dims.head_size),
                                                             dims.heads.attention(), precision, omp_get_max_threads())
               : kernels::cpu::BlockScratchBytes{};
    const RingAttention::CallBytes ring = RingAttention::call_bytes(B, local_T, dims.head_size, dims.heads.attention(),
                                                                    precision, rotary, block_scratch);
    plan.during_step[static_cast<size_t>(MemTag::activations)] += ring.activations;
    ring_workspace = ring.workspace;
  }
  // At one moment of each step, the kernels' scratch on the CPU, or the ring's workspace (with
  // its block kernels' scratch).
  // The output projection runs on the rank with the head: the pipeline's last stage's.
  bool head = true;
  if (schedule && rank) {
    const RankStages stages = pipeline::PipelineParallel::rank_stages(config.model, *schedule, rank->pp, T);
    head = std::ranges::any_of(stages.held, [&](int s) { return stages.all[static_cast<size_t>(s)].head; });
  }
  const size_t kernels = on_cpu ? cpu_kernel_scratch_bytes(config.model, B, local_T, precision, shard,
                                                           config.parallel.sp, cp > 1, head, omp_get_max_threads())
                                : 0;
  // Or an FP8 product's operands, and on the CPU its emulation's copies.
  const size_t float8 = float8_workspace_bytes(config.model, B, local_T, precision, shard,
                                               {rank ? config.dims().ep_rank(*rank) : 0, config.dims().ep}, config.fp8,
                                               on_cpu);
  // Or a quantization-aware product's weight copy, beside its kernel's scratch.
  const size_t qat = qat_workspace_bytes(config.model, B, local_T, precision, shard, config.train.qat_recipe(), head);
  plan.during_step[static_cast<size_t>(MemTag::workspace)] += std::max({kernels, ring_workspace, float8, qat});
  return plan;
}

StepLayout run_step_layout(const RunConfig& config, int gpus_per_node) {
  const ParallelDims d = config.dims();
  return {.dp = d.dp, .tp = d.tp, .pp = d.pp, .cp = d.cp, .ep = d.ep, .sp = config.parallel.sp,
          .zero_stage = config.parallel.zero_stage, .schedule = config.parallel.pp_schedule,
          .pp_virtual = config.parallel.pp_virtual, .micro_batch = config.train.micro_batch_size,
          .micro_batches = static_cast<int>(config.accumulation_steps()), .seq_len = config.data.seq_len,
          .recompute = config.train.recompute, .precision = config.train.precision, .fp8 = config.fp8.scaling,
          .gpus_per_node = gpus_per_node};
}

std::string derived_quantities(const RunConfig& config) {
  const ModelConfig& m = config.model;
  const int T = config.data.seq_len;
  const int64_t tokens_per_step = config.tokens_per_step();
  const StepFlops flops = training_flops(m, T, tokens_per_step, config.train.recompute);
  const double per_token = flops.model / static_cast<double>(tokens_per_step);
  const int64_t run_tokens = tokens_per_step * config.train.steps;
  const std::optional<pipeline::Schedule> schedule = run_schedule(config);
  std::vector<std::pair<std::string, std::string>> lines = {
      {"global batch", str(config.global_batch_size(), " sequences x ", T, " tokens = ", grouped(tokens_per_step),
                           " tokens per step")},
      {"micro-batch", str(config.train.micro_batch_size, " sequences x ", config.accumulation_steps(),
                          " accumulation steps per optimizer step, on each of parallel.dp = ", config.dims().dp,
                          " ranks")},
      {"vocabulary", str(grouped(m.vocab_size), " tokens, stored padded to ", grouped(m.padded_vocab_size()))},
      {"parameters", str(grouped(ParameterLayout(m).num_parameters()), " (", si(ParameterLayout(m).num_parameters()),
                         ")")},
      {"FLOPs per token", str(scientific(per_token), " for training (3 x forward ",
                              scientific(forward_flops_per_token(m, T)), ")",
                              config.train.recompute == Recompute::none
                                  ? std::string()
                                  : str("; ", scientific(flops.hardware / static_cast<double>(tokens_per_step)),
                                        " with ", recompute_name(config.train.recompute), " recomputation"))},
      {"FLOPs per step", scientific(flops.model)},
      {"memory", str(format_bytes(static_cast<double>(run_memory_plan(config).total())),
                     config.dims().world_size() > 1 ? " per rank (the largest share)" : "", " on the ",
                     config.train.device,
                     schedule ? ": parameters, gradients, AdamW moments and the activations of the micro-batches "
                                "its stages hold"
                              : ": parameters, gradients, AdamW moments and one micro-batch's activations",
                     config.zero().shards_optimizer_state
                         ? str(", ZeRO stage ", config.parallel.zero_stage, " over ", config.dims().dp,
                               " ranks with its working set")
                         : "")},
      {"tokens in the run", str(grouped(config.train.steps), " steps x ", grouped(tokens_per_step), " = ",
                                grouped(run_tokens), " (", si(static_cast<double>(run_tokens)), ")")},
  };
  // Under tensor parallelism, what each tp rank holds.
  const int tp = config.dims().tp;
  const auto span = [](int64_t begin, int64_t end) {
    return end == begin + 1 ? str(begin) : str(begin, "-", end - 1);
  };
  for (int r = 0; tp > 1 && r < tp; ++r) {
    const ParameterLayout shard(m, kParamAlignment, {r, tp});
    const ShardDims& d = shard.dims();
    const HeadShard& h = d.heads;
    lines.emplace_back(str("tp rank ", r),
                       str("query heads ", span(h.q_begin, h.q_end), ", key/value heads ", span(h.kv_begin, h.kv_end),
                           h.kv_split ? "" : " (copied: fewer than the ranks)", ", MLP columns ",
                           span(d.ffn.begin, d.ffn.end), ", vocabulary ", span(d.vocab.begin, d.vocab.end), ": ",
                           grouped(shard.num_parameters()), " parameters",
                           config.parallel.sp ? str(", tokens ", even_part(int64_t{config.train.micro_batch_size} * T, tp, r).size(),
                                                    " of each micro-batch's ", config.train.micro_batch_size * T)
                                              : ""));
  }
  // Under pipeline parallelism, the stages each pp rank runs.
  for (int r = 0; schedule && r < schedule->ranks; ++r) {
    const RankStages stages = pipeline::PipelineParallel::rank_stages(m, *schedule, r, T);
    std::string held;
    std::vector<StageUnits> units;
    for (const int s : stages.held) {
      const StageUnits& u = stages.all[static_cast<size_t>(s)];
      units.push_back(u);
      held += str(held.empty() ? "" : "; ", "stage ", s, ": ", u.embeddings ? "embeddings, " : "",
                  u.end_block - u.first_block == 1 ? "block " : "blocks ", span(u.first_block, u.end_block), u.head ? ", head" : "");
    }
    const ParameterLayout part(m, kParamAlignment, {}, HeldUnits::of(units, m.n_layer));
    lines.emplace_back(str("pp rank ", r),
                       str(held, ": ", grouped(part.num_parameters()), " parameters",
                           part.holds_wte_copy() ? " (with a copy of the tied wte)" : "", ", up to ",
                           schedule->promised_in_flight[static_cast<size_t>(r)],
                           schedule->promised_in_flight[static_cast<size_t>(r)] == 1 ? " micro-batch" : " micro-batches",
                           " held (",
                           schedule->name, ")"));
  }
  std::string data;
  if (config.data.dir.empty()) {
    data = "data.dir is not set";
  } else {
    try {
      const auto shards = TokenDataset::shards_in(config.data.dir, config.data.train_prefix);
      const int64_t tokens = TokenDataset(shards, m.vocab_size).size();
      // Windows of T + 1 tokens starting every T tokens (data/data_loader.h).
      const int64_t samples = tokens > T ? (tokens - 1) / T : 0;
      const double steps_per_epoch = static_cast<double>(samples) / config.global_batch_size();
      char epochs[64];
      std::snprintf(epochs, sizeof epochs, "%.1f steps per epoch; the run is %.2f epochs", steps_per_epoch,
                    steps_per_epoch > 0 ? static_cast<double>(config.train.steps) / steps_per_epoch : 0.0);
      data = str(grouped(tokens), " tokens in ", shards.size(), shards.size() == 1 ? " shard" : " shards", ": ",
                 grouped(samples), " sequences per epoch, ", epochs);
    } catch (const Error& e) {
      data = str("not read: ", e.what());
    }
  }
  lines.emplace_back("training data", data);

  size_t width = 0;
  for (const auto& [label, _] : lines) width = std::max(width, label.size());
  std::string out;
  for (const auto& [label, value] : lines) out += str(label, std::string(width + 2 - label.size(), ' '), value, "\n");
  return out;
}

}  // namespace dt
