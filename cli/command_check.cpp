// dtrain check CONFIG.toml [section.key=value ...] [--model small|configured]: whether the
// configuration's parallel layout trains as one rank does on this build (train/layout_check.h).
// Run it as the run itself would be started, under mpirun or srun with the layout's ranks.
// Exit status 0 when the layout agrees within the engine's bounds, 1 when it parts from one rank.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_operands.h"
#include "comm/mpi.h"
#include "comm/world.h"
#include "core/error.h"
#include "parallel/launch_check.h"
#include "train/layout_check.h"

namespace dt::cli {

namespace {

CheckedModel checked_model(const std::string& name) {
  if (name == "small") return CheckedModel::small;
  if (name == "configured") return CheckedModel::configured;
  throw Error(str("check: --model ", name, " is not a choice; use small (a small model of the configured model's ",
                  "family and shape rules) or configured (the configured model itself)"));
}

void print_header(const RunConfig& config, const RunConfig& checked, CheckedModel model) {
  const ModelConfig& m = checked.model;
  std::printf("checking %s against one rank under %s\n", config.source.string().c_str(),
              checked.dims().describe().c_str());
  std::string experts;
  if (m.moe.experts > 0) experts = str(", ", m.moe.experts, " experts of ", m.moe.expert_hidden, " (top ",
                                       m.moe.routing.top_k, ")");
  std::printf("model: %s%s, %d layers, d_model %d, %d heads (%d key/value), MLP %d%s, vocab %d\n",
              model == CheckedModel::small ? "a small " : "the configured ",
              std::string(model_family_name(m.family)).c_str(), m.n_layer, m.d_model, m.n_head, m.kv_heads(),
              m.ffn_hidden(), experts.c_str(), m.vocab_size);
  std::printf("%d steps of a global batch of %d micro-batches of %d x %d tokens, %s, ZeRO %d, recompute %s%s, on %s; lr %g, AdamW's "
              "defaults, clipping at 1, seed %llu\n\n",
              kEquivalenceSteps, checked.global_batch_size() / checked.train.micro_batch_size,
              checked.train.micro_batch_size, checked.data.seq_len, std::string(dtype_name(checked.train.precision)).c_str(),
              checked.parallel.zero_stage, std::string(recompute_name(checked.train.recompute)).c_str(),
              checked.fp8.enabled() ? str(", FP8 ", float8_scaling_name(checked.fp8.scaling)).c_str() : "",
              checked.train.device.c_str(), kEquivalenceLr, static_cast<unsigned long long>(checked.init.seed));
}

void print_steps(const LayoutCheck& check) {
  std::printf("%-5s %-12s %-12s %-8s %-8s   %-12s %-12s %-8s %-8s   %-10s %-8s %s\n", "step", "loss", "one rank",
              "apart", "bound", "grad norm", "one rank", "apart", "bound", "parameters", "bound", "furthest at");
  for (size_t s = 0; s < check.steps.size(); ++s) {
    const StepComparison& c = check.steps[s];
    const TensorDifference* furthest = nullptr;
    for (const TensorDifference& d : c.parameters)
      if (d.difference > 0 && (furthest == nullptr || d.difference > furthest->difference)) furthest = &d;
    std::printf("%-5zu %-12.7g %-12.7g %-8.1e %-8.1e   %-12.7g %-12.7g %-8.1e %-8.1e   %-10.1e %-8.1e %s\n", s + 1,
                c.loss, c.reference_loss, relative_difference(c.loss, c.reference_loss),
                s == 0 ? check.bounds.first_loss : check.bounds.losses, c.grad_norm, c.reference_grad_norm,
                relative_difference(c.grad_norm, c.reference_grad_norm),
                s == 0 ? check.bounds.first_norm : check.bounds.norms, furthest ? furthest->difference : 0.0,
                check.bounds.parameters, furthest ? furthest->name.c_str() : "-");
  }
}

// The verdict's lines; whether the layout agrees.
bool print_verdict(const LayoutCheck& check) {
  const std::optional<Divergence> divergence = check.first_divergence();
  if (!divergence) {
    std::printf("\nagrees with one rank: every loss, gradient norm and parameter within the engine's bounds\n");
    return true;
  }
  const size_t tensors = check.steps[static_cast<size_t>(divergence->step - 1)].parameters.size();
  size_t tensors_apart = 0;
  std::printf("\nDIFFERS from one rank at step %d:\n", divergence->step);
  for (const Apart& a : divergence->apart) {
    const bool tensor = a.value == Apart::Value::parameter;
    tensors_apart += tensor ? 1 : 0;
    if (tensor && tensors_apart > 3) continue;  // the first few name where to look
    std::printf("  %s%s: %.2e apart (bound %.1e)\n", tensor && tensors_apart == 1 ? "first parameter " : "",
                a.what.c_str(), a.difference, a.bound);
  }
  if (tensors_apart > 0) std::printf("  %zu of %zu parameter tensors past their bound\n", tensors_apart, tensors);
  if (divergence->step > 1)
    std::printf("step 1, from the same weights, agrees: where another --seed agrees at every step, this was rounding "
                "that Adam amplified (a gradient near 0 changing sign moves its weight by up to 2 lr); a bug parts "
                "at every seed\n");
  std::printf("the tests hold every layout to these bounds: a difference points at this build (its compiler, BLAS, "
              "MPI, NCCL or GPU) or at a bug; report it with this output\n");
  return false;
}

}  // namespace

int command_check(int argc, char** argv, int first) {
  Args args("check",
            "whether the configuration's parallel layout trains as one rank does: a few steps of a small model of "
            "its family under the layout and on one rank, compared step by step within the engine's bounds (start "
            "it as the run, under mpirun or srun); exit status 1 when they part");
  declare_config_operands(args);
  args.flag("model", "small",
            "small (a small model of the configured model's family and shape rules: its heads and experts at 8 "
            "dimensions a head) or configured (the configured model itself, at its batch size and sequence length)");
  args.flag("seed", std::to_string(kEquivalenceSeed),
            "the random initialisation (the default is the one the bounds were measured with); in f32 a value "
            "slightly past its bound after the first step can be rounding that Adam turned into a step of lr where "
            "a gradient is near 0: a bug parts at every seed");
  if (!args.parse(argc, argv, first)) return 0;
  const RunConfig config = config_from_operands(args);
  const CheckedModel model = checked_model(args.get("model"));
  const RunConfig checked = layout_check_config(config, model, static_cast<uint64_t>(args.get_int("seed")));
  const std::unique_ptr<Communicator> control = make_world(Device::cpu, "mpi", nullptr, "control");
  checked.dims().check_world_size(control->size());
  check_same_launch(*control, resolved_toml(checked));
  set_collective_timeout(config.parallel.timeout_s);
  const bool lead = control->rank() == 0;
  if (lead) print_header(config, checked, model);
  const LayoutCheck check = check_layout(checked, *control);
  bool agrees = true;
  if (lead) {
    print_steps(check);
    agrees = print_verdict(check);
  }
  // Every rank exits as the lead does, so that the launcher's status is the verdict.
  return all_reduce_value(*control, agrees ? 0 : 1, ReduceOp::max) == 0 ? 0 : 1;
}

}  // namespace dt::cli
