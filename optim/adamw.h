// AdamW over parts of a model's flat buffers, and everything the update does with the
// gradients: the global gradient norm, the search for a non-finite gradient, the update itself
// with decoupled weight decay chosen per tensor, and the rounding of the updated f32 parameters
// into the 16-bit weights forward reads. Each exists here once, for every layout of the state.
//
// The parts are ranges of the parameter layout (model/parameters.h). One process updates one
// part, the whole buffer. Under ZeRO a rank updates its part of every unit, and the norm and the
// search are completed over the group of ranks that hold the other parts
// (parallel/data_parallel.h). Under tensor parallelism each rank's layout is its shard of the
// model (model/tensor_shard.h); the norm and the search are completed over the tensor-parallel
// group too, each rank counting only the elements it owns, so that a tensor several ranks hold
// (a norm's weight, a copied key/value head) counts once. Under pipeline parallelism each rank's
// layout holds its stages' units, and the norm and the search are completed over the pipeline
// group as well (a tied wte's copy on the last stage is not owned: it counts once). The gradients and the moments are
// local: the parts one after another. The f32 parameters (a 16-bit run's master weights) and the 16-bit weights are either
// local too or the model's whole buffers, read at each part's range of the layout.
//
// Weight decay applies to matrices; never to biases or norm gains; to the token and position
// embeddings only when decay_embeddings is set (GPT-2 and llm.c do not decay them). Only unpadded
// elements are updated: padding and gaps stay zero. The moments are tagged optimizer_state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/field_problems.h"
#include "kernels/adamw.h"
#include "model/transformer.h"

namespace dt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  bool decay_embeddings = false;

  // Records every field out of range (betas in [0, 1), eps > 0, decay >= 0), under the caller's
  // names for the fields; validate throws them as one dt::Error.
  void check(FieldProblems& problems) const;
  void validate() const;
};

// What an AdamW updates and where it finds it.
struct OptimizerParts {
  std::vector<kernels::FlatRange> ranges;  // of the layout, increasing and disjoint
  Tensor grads;                            // f32, local: the ranges' gradients one after another
  Tensor params;                           // f32: the parameters the update writes
  bool params_local = false;               // params holds only the ranges (else the whole layout)
  Tensor weights;                          // 16-bit: rounded from params; undefined in f32
  bool weights_local = false;
  // The ranks holding the other parts of the layout, or none: these parts are all of it.
  Communicator* group = nullptr;
  // The ranks holding the other shards of the model (tensor parallelism), or none.
  Communicator* tensor_parallel = nullptr;
  // The ranks holding the other stages of the model (pipeline parallelism), or none.
  Communicator* pipeline = nullptr;
  // Where these parts hold every other parameter but only this rank's experts (expert
  // parallelism, the parts not sharded): the ranks holding the other experts, over which the
  // experts' share of the norm is summed first; else none.
  Communicator* experts = nullptr;

  // One process's (or one tensor-parallel or expert-parallel rank's): the whole layout of the
  // model's parameters, gradients and 16-bit weights.
  static OptimizerParts whole(Transformer& model);
};

class AdamW {
 public:
  // Validates the config, then allocates the moments on the gradients' device under `tag` (a host
  // copy made to move a run's state is workspace, not optimizer state).
  AdamW(const ParameterLayout& layout, OptimizerParts parts, AdamWConfig config,
        MemTag tag = MemTag::optimizer_state);
  // The bytes of each of the two moments for parts of `local_elements` in all (f32); the
  // constructor allocates two such buffers, plan/memory.h counts them.
  static size_t bytes_per_moment(int64_t local_elements) { return static_cast<size_t>(local_elements) * sizeof(float); }

  // sqrt of the sum of squares of every unpadded gradient of the model, each counted once (the tied
  // input/output embedding is one tensor; a tensor tensor-parallel ranks share, by its owner).
  // Not finite when any gradient is not. A collective over the groups.
  double global_grad_norm() const;
  // The name of the first parameter, in the order backward computes them (the reverse of the
  // layout), whose gradient holds inf or NaN in any part on any rank, or "" when none does. A
  // collective over the groups.
  std::string first_nonfinite_gradient() const;
  // One update with learning rate lr, every gradient multiplied by grad_scale first (the clipping
  // coefficient and the loss scale folded in), then round_weights().
  void step(float lr, float grad_scale);
  // Rounds the f32 parameters into the 16-bit weights (nothing in f32): after each update, and
  // after the parameters are set from outside (initialisation, a checkpoint).
  void round_weights() const;

  bool decays(const ParamInfo& p) const;
  const AdamWConfig& config() const { return config_; }
  int64_t steps_taken() const { return steps_taken_; }
  // Resuming from a checkpoint: the bias corrections continue from this many updates.
  void restore_steps_taken(int64_t steps) { steps_taken_ = steps; }
  const std::vector<kernels::FlatRange>& ranges() const { return parts_.ranges; }

  enum class Moment { first, second };
  // Each range's part of a moment, in order (a sharded checkpoint writes them).
  std::vector<Tensor> moment_parts(Moment which) const;
  // The unpadded view of parameter p's moment; p must lie in one range.
  Tensor moment(Moment which, const ParamInfo& p) const;
  // Between the parts and a flat buffer of the whole layout (f32, any device): a checkpoint of
  // one process is the whole buffer; a resume takes each rank's parts of it.
  void take_moment(Moment which, Tensor whole);
  void put_moment(Moment which, Tensor whole) const;

 private:
  struct Part {
    kernels::FlatRange range;    // of the layout
    int64_t offset = 0;  // in the local buffers
    std::vector<kernels::FlatRange> decayed, not_decayed, owned, owned_experts;  // relative to the part
  };
  // Part p of a buffer that holds the parts (local) or the whole layout.
  static Tensor part_of(Tensor buffer, bool local, const Part& p);
  Tensor local_moment(Moment which) const;

  AdamWConfig config_;
  const ParameterLayout& layout_;
  OptimizerParts parts_;
  std::vector<Part> part_list_;
  // Every part's owned elements, in local positions: all of them, or where the experts' share of
  // the norm is summed apart (OptimizerParts::experts), the others and the experts'.
  std::vector<kernels::FlatRange> owned_local_, owned_experts_local_;
  int64_t local_elements_ = 0;
  Buffer m_, v_;
  int64_t steps_taken_ = 0;
};

}  // namespace dt
