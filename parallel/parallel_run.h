// A parallel run: the process groups of a layout, the model made for this rank, and the
// parallelisms wrapped around it, built in one fixed order by one constructor (torchtitan's
// parallelize_llama does the same for a PyTorch model):
//
//   1. process groups       every group of the layout, split from one world
//   2. pipeline schedule    which stages this rank runs (pp > 1)
//   3. context parallelism  this rank's tokens of each sequence, attention in a ring (cp > 1)
//   4. tensor parallelism   the regions through which this rank's shard communicates (tp > 1)
//   5. expert parallelism   this rank's experts, and the all-to-alls to them (ep > 1)
//   6. the model            this rank's shard of its stages, over its tokens, its linear
//                           layers in FP8 where a recipe says (amaxes agreed over tp and cp)
//   7. data parallelism     gradients summed, ZeRO's shards and the optimizer, over dp × cp
//                           (experts' over the ranks holding them)
//   8. pipeline executor    the schedule run over the model (pp > 1)
//
// Each step needs the ones above it, and the members are declared in this order, so each is
// destroyed before what it refers to. The object refers into itself: it is neither copied nor
// moved.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "model/config.h"
#include "model/linear_state.h"
#include "model/parameters.h"
#include "model/recompute.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/context/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parallel/zero_policy.h"

namespace dt {

// What a parallel run is made from: the model, its micro-batches, the layout and each
// parallelism's settings (train/run_config.h documents each).
struct ParallelOptions {
  ModelConfig model;
  int micro_batch_size = 1;  // B, sequences per micro-batch
  int seq_len = 1;           // T, tokens per whole sequence
  Recompute recompute = Recompute::none;
  DType precision = DType::f32;
  Device device = Device::cpu;
  ParallelDims dims;
  ZeroPolicy zero;
  double bucket_mb = 25;
  AdamWConfig adamw = {};
  std::string pp_schedule = "1f1b";
  int pp_virtual = 1;          // virtual stages per pipeline rank
  int micro_batches = 1;       // per step (gradient accumulation)
  bool cp_zigzag = true;
  bool sp = false;             // sequence parallelism over the tp ranks
  std::string backend = "auto";  // of the groups' world (comm/world.h)
  // The per-linear state kinds the model's linear layers carry (model/linear_state.h) beyond the
  // model's own (an expert bias, model/expert_balance.h) and FP8's recipe's.
  std::vector<LinearStateDeclaration> linear_states = {};
  // FP8 training's recipe (model/float8_recipe.h); none by default.
  Float8Recipe fp8 = {};
  // Quantization-aware training's recipe (model/qat_recipe.h); none by default.
  std::optional<QatRecipe> qat = std::nullopt;
};

class ParallelRun {
 public:
  // Builds the run (a collective: every rank of the job calls it alike). `control` is the job's
  // host world, made first, over which NCCL's id travels; it must outlive this object.
  ParallelRun(const ParallelOptions& options, Communicator& control);
  // The same over `world` as given: a run beside the job's own, such as one rank's reference
  // to a layout (train/layout_check.h), over a SingleProcessCommunicator.
  ParallelRun(const ParallelOptions& options, std::unique_ptr<Communicator> world);
  ParallelRun(const ParallelRun&) = delete;
  ParallelRun& operator=(const ParallelRun&) = delete;

  const ProcessGroups& groups() const { return groups_; }
  // Rank 0 of the job prints, logs and saves for it.
  bool lead() const { return groups_.world->rank() == 0; }
  const std::optional<pipeline::Schedule>& schedule() const { return schedule_; }
  ContextParallel* context() { return context_ ? &*context_ : nullptr; }
  const ContextParallel* context() const { return context_ ? &*context_ : nullptr; }
  Transformer& model() { return *model_; }
  DataParallel& data_parallel() { return *data_parallel_; }
  pipeline::PipelineParallel* pipeline() { return pipeline_ ? &*pipeline_ : nullptr; }

  // Whether this rank evaluates: every dp rank holds the same model, so the dp group's rank 0
  // does, except where ZeRO gathers the weights before each pass: every forward is then a
  // collective, and every rank evaluates the same batches. Under tensor parallelism a forward is
  // the tp group's, under context parallelism the cp group's, under pipeline parallelism the pp
  // group's: all their ranks evaluate. Under expert parallelism a forward is the ep group's, whose
  // ranks are of different dp ranks: every rank evaluates the same batches.
  bool evaluates() const;

  // The whole model's f32 parameters on the lead rank: this rank's own where nothing is spread,
  // else gathered on the host over dp × cp (ZeRO's shards), then ep (the other ranks' experts), tp
  // (the shards of the lead's stages) and pp (every rank's stages). On the other ranks nothing:
  // `whole()` is nullptr.
  // Every rank calls it: it is a collective wherever the parameters are spread.
  class WholeParameters {
   public:
    const FlatTensors* whole() const;

   private:
    friend class ParallelRun;
    // Each step's result, kept while the whole is read: this rank's f32 parameters over dp × cp,
    // its tp shard over ep, its stages over tp, the model over pp.
    std::optional<FlatTensors> gathered_, experts_whole_, stages_whole_, whole_;
    const FlatTensors* own_ = nullptr;  // the model's own
    bool lead_ = false;
  };
  WholeParameters gather_whole_parameters();

 private:
  const ParallelOptions options_;
  ProcessGroups groups_;
  std::optional<pipeline::Schedule> schedule_;
  std::optional<ContextParallel> context_;
  std::optional<TensorParallel> tensor_parallel_;
  std::optional<ExpertParallel> expert_parallel_;
  // FP8 training over this rank's tp and cp groups, when the recipe is on.
  std::optional<Float8Training> float8_;
  std::optional<Transformer> model_;
  std::optional<DataParallel> data_parallel_;
  std::optional<pipeline::PipelineParallel> pipeline_;
  // The layouts a whole-model gather fills: the model's, this rank's stages' whole over tp, and
  // its tp shard of them with every expert.
  std::optional<ParameterLayout> whole_layout_, stages_layout_, shard_layout_;
};

}  // namespace dt
